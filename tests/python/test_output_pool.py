"""Large NumPy results come from kept slabs (pypto/out_pool.py): a result's memory is handed out
again only once no array (the result, a view of it, a tensor sharing it) refers to it, and the
values are right every time."""
import numpy as np
import pytest

import pypto
from pypto import out_pool
from pypto_testutil import rand, requires_compiler

pytestmark = requires_compiler

SHAPE = (2048, 640)  # 5 MiB of f32: above out_pool.MIN_BYTES


@pypto.jit(backend="cpu")
def add(x, y):
    return pypto.add(x, y)


def test_result_memory_is_reused_once_free_and_never_while_viewed():
    x, y = rand(*SHAPE), rand(*SHAPE)
    a = add(x, y)
    np.testing.assert_array_equal(a, x + y)
    ptr = a.ctypes.data
    assert ptr % 64 == 0 and a.flags.c_contiguous and a.flags.writeable
    del a
    b = add(y, y)
    assert b.ctypes.data == ptr  # the freed slab, no new mapping
    np.testing.assert_array_equal(b, y + y)
    view = b[3:5]  # NumPy bases the view on the slab itself, not on b
    keep = view.copy()
    del b
    c = add(x, x)
    assert c.ctypes.data != ptr
    np.testing.assert_array_equal(c, x + x)
    np.testing.assert_array_equal(view, keep)  # c did not overwrite it


def test_a_tensor_sharing_the_result_keeps_it():
    torch = pytest.importorskip("torch")
    x, y = rand(*SHAPE), rand(*SHAPE)
    t = torch.from_numpy(add(x, y))
    d = add(y, y)
    assert d.ctypes.data != t.data_ptr()
    np.testing.assert_array_equal(t.numpy(), x + y)


def test_pool_off_and_bad_setting(monkeypatch):
    x, y = rand(*SHAPE), rand(*SHAPE)
    monkeypatch.setattr(out_pool, "MAX_BYTES", 0)
    a = add(x, y)
    assert a.base is None  # np.empty's own array
    np.testing.assert_array_equal(a, x + y)
    monkeypatch.setenv("PYPTO_OUTPUT_POOL_MB", "lots")
    with pytest.raises(pypto.PyptoError, match="PYPTO_OUTPUT_POOL_MB"):
        out_pool._max_bytes()
    monkeypatch.setenv("PYPTO_OUTPUT_POOL_MB", "8")
    assert out_pool._max_bytes() == 8 << 20
