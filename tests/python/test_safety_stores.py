"""Stores and accumulations match shapes as NumPy does (a larger edge tile may still cover a
smaller destination: the valid-region rule), and in-kernel copies between overlapping windows
of one tensor compute as if the right side were read first."""
import numpy as np
import pytest

import pypto
from pypto_testutil import SMALL_TILES, assert_close, jit, poisoned, rand


def store_8x8_into_8x9(out, x):
    out[0:8, 0:9] = x


def accumulate_3x5_into_8x8(x):
    acc = pypto.zeros((8, 8))
    acc += x
    return acc


def test_store_shape_mismatch_raises(backend):
    with pytest.raises(pypto.PyptoError, match=r"cannot store a tensor of shape \(8, 8\) into a slice of shape "
                                               r"\(8, 9\)") as e:
        jit(store_8x8_into_8x9, backend)(poisoned(8, 9), rand(8, 8))
    assert "out[0:8, 0:9] = x" in str(e.value)
    with pytest.raises(pypto.PyptoError, match=r"shape \(3, 5\) into a slice of shape \(8, 8\)") as e:
        jit(accumulate_3x5_into_8x8, backend)(rand(3, 5))
    assert "acc += x" in str(e.value)


def broadcast_store(out, row):
    out[...] = row          # (5,) into (4, 5): NumPy broadcasting


def test_broadcasting_store_still_works(backend):
    row = rand(5)
    out = poisoned(4, 5)
    jit(broadcast_store, backend)(out, row)
    assert_close(out, np.broadcast_to(row.astype(np.float64), (4, 5)))


def shift_down(x):
    x[1:] = x[:-1]


def shift_up_add(x):
    x[:-1] += x[1:]


def transpose_in_place(x):
    x[...] = x.T


@pytest.mark.parametrize("fn, ref", [
    (shift_down, lambda a: np.concatenate([a[:1], a[:-1]])),
    (shift_up_add, lambda a: np.concatenate([a[:-1] + a[1:], a[-1:]])),
    (transpose_in_place, lambda a: a.T.copy()),
])
def test_overlapping_self_copy_reads_first(backend, fn, ref):
    # With SMALL_TILES the 37 x 37 array spans several tiles each way, so a copy done tile by
    # tile would read rows or columns an earlier tile already overwrote (one default tile holds
    # the whole array, which hides that).
    for tiles in (None, SMALL_TILES):
        a = rand(37, 37)
        want = ref(a.astype(np.float64))
        jit(fn, backend, **({"tiles": tiles} if tiles else {}))(a)
        assert_close(a, want)
