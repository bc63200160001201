"""Run-time indices and slice bounds follow Python's rules exactly as constant ones do: a negative
index counts from the end, slices clamp, and an index out of range raises a PyptoError naming the
kernel line (checked on the host before the kernel runs), never reads or writes outside an array."""
import numpy as np
import pytest

import pypto
from pypto_testutil import assert_close, jit, poisoned, rand


def window_sums(x, out):
    n = x.shape[0]
    for i in range(0, n):
        out[i] = pypto.sum(x[i - 8:i + 8], dim=0)


def ref_window_sums(x):
    n = x.shape[0]
    return np.stack([x[i - 8:i + 8].astype(np.float64).sum(axis=0) if len(x[i - 8:i + 8]) else
                     np.zeros(x.shape[1]) for i in range(n)])


def test_runtime_slice_bounds_wrap_and_clamp(backend):
    # x[i-8:i+8] at i < 8 is x[n-8+i : i+8] in Python: empty for n > 16 (never before the array)
    x = rand(40, 5)
    out = poisoned(40, 5)
    jit(window_sums, backend)(x, out)
    assert_close(out, ref_window_sums(x))


def negative_scalar_index(x, s):
    return x[s] * 2.0


def test_runtime_negative_index_wraps(backend):
    x = rand(6, 7)
    k = jit(negative_scalar_index, backend)
    for s in (-1, -6, 0, 5):
        assert_close(k(x, s), x[s].astype(np.float64) * 2)


def scalar_slice(out, x, a, b):
    out[a:b, :] = x[a:b, :] + 1.0


def test_runtime_slice_scalars_follow_python(backend):
    x = rand(10, 3)
    k = jit(scalar_slice, backend)
    for a, b in ((-3, 10), (-20, 4), (2, -1), (-4, -2), (3, 100), (-1, 2)):
        out = rand(10, 3)
        ref = out.astype(np.float64)
        ref[a:b] = x[a:b] + 1.0
        k(out, x, a, b)
        assert_close(out, ref)


def read_at(x, s):
    return x[s] + 0.0


def write_at(out, x, s):
    out[s] = x


@pytest.mark.parametrize("s", [10**12, 8, -9, -(10**12)])
def test_runtime_index_out_of_range_raises(backend, s):
    x = rand(8, 4)
    with pytest.raises(pypto.PyptoError, match=r"index -?\d+ is out of range for dimension 0 of size 8") as e:
        jit(read_at, backend)(x, s)
    assert "return x[s] + 0.0" in str(e.value) and "test_safety_indices.py" in str(e.value)


def test_runtime_store_out_of_range_raises_before_writing(backend):
    out = rand(8, 4)
    before = out.copy()
    with pytest.raises(pypto.PyptoError, match="out of range") as e:
        jit(write_at, backend)(out, rand(4), 8)
    assert "out[s] = x" in str(e.value)
    np.testing.assert_array_equal(out, before)  # the caller's data is untouched
    jit(write_at, backend)(out, np.ones(4, np.float32), -1)
    np.testing.assert_array_equal(out[-1], 1.0)


def shifted_rows(x, out, shift):
    for i in range(0, x.shape[0]):
        out[i] = x[i + shift]


def test_loop_index_checked_over_the_whole_nest(backend):
    x = rand(16, 3)
    out = poisoned(16, 3)
    k = jit(shifted_rows, backend)
    k(x, out, -16)   # i - 16 is negative for every i: wraps to i
    assert_close(out, x)
    out2 = rand(16, 3)
    before = out2.copy()
    with pytest.raises(pypto.PyptoError, match="index 16 is out of range"):
        k(x, out2, 1)   # the last iteration reads row 16: raised before the first iteration runs
    np.testing.assert_array_equal(out2, before)


def nonlinear_index(x, out):
    for i in range(0, x.shape[0]):
        out[i] = x[(i * i) % 7]


def test_nonlinear_index_in_range(backend):
    x = rand(7, 3)
    out = poisoned(7, 3)
    jit(nonlinear_index, backend)(x, out)
    assert_close(out, x[[(i * i) % 7 for i in range(7)]])


def huge_range(x, out, lo, hi):
    for i in range(lo, hi, 4):
        out[i - lo:i - lo + 4] = x[i - lo:i - lo + 4] * 2.0


def test_loop_bounds_near_int64_max(backend):
    top = 2**63 - 1
    x = rand(8)
    out = poisoned(8)
    jit(huge_range, backend)(x, out, top - 6, top)   # two iterations; `i += 4` must not wrap
    assert_close(out, x.astype(np.float64) * 2)
