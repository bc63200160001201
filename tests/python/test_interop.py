"""Arrays in and out: NumPy -> NumPy, torch -> torch, pypto.Tensor -> pypto.Tensor, DLPack,
zero-copy writes into the caller's buffers, non-contiguous inputs, inputs left untouched."""
import numpy as np
import pytest
import torch

import pypto
from pypto_testutil import assert_close, jit, poisoned, rand


def linear(x, w, b):
    return pypto.relu(x @ w) + b


def scale_into(x, out):
    out[...] = x * 2.0


def ident_plus(x):
    return x + 0.0


def test_numpy_in_numpy_out(backend):
    x, w, b = rand(5, 4), rand(4, 3), rand(3)
    xs = [a.copy() for a in (x, w, b)]
    y = jit(linear, backend)(x, w, b)
    assert type(y) is np.ndarray and y.dtype == np.float32 and y.shape == (5, 3)
    assert_close(y, np.maximum(x.astype(np.float64) @ w, 0) + b)
    for a, c in zip((x, w, b), xs):  # inputs are not modified
        np.testing.assert_array_equal(a, c)


def test_torch_in_torch_out(backend):
    x, w, b = torch.randn(5, 4), torch.randn(4, 3), torch.randn(3)
    y = jit(linear, backend)(x, w, b)
    assert isinstance(y, torch.Tensor) and y.dtype == torch.float32 and y.device.type == "cpu"
    assert_close(y.numpy(), (torch.relu(x.double() @ w.double()) + b.double()).numpy())


def test_torch_requires_grad_input(backend):
    x = torch.randn(4, 4, requires_grad=True)
    y = jit(ident_plus, backend)(x)
    assert isinstance(y, torch.Tensor)
    assert y.requires_grad and y.grad_fn is not None  # the call takes part in autograd
    assert_close(y.detach().numpy(), x.detach().double().numpy())


def test_pypto_tensor_in_out(backend):
    x, w, b = (pypto.Tensor(a) for a in (rand(5, 4), rand(4, 3), rand(3)))
    y = jit(linear, backend)(x, w, b)
    assert isinstance(y, pypto.Tensor) and y.dtype == pypto.float32 and y.shape == (5, 3)
    assert_close(y.numpy(), np.maximum(x.numpy().astype(np.float64) @ w.numpy(), 0) + b.numpy())


class DLPackOnly:
    """An array type the runtime knows only through the DLPack protocol."""

    def __init__(self, a):
        self._a = a

    def __dlpack__(self, **kw):
        return self._a.__dlpack__(**kw)

    def __dlpack_device__(self):
        return self._a.__dlpack_device__()


def test_dlpack_input(backend):
    a = rand(6, 3)
    y = jit(ident_plus, backend)(DLPackOnly(a))
    assert_close(pypto.to_numpy(y), a.astype(np.float64))


def test_writes_land_in_caller_buffers(backend):
    f = jit(scale_into, backend)
    x = rand(7, 9)
    out = poisoned(7, 9)
    assert f(x, out) is None
    assert_close(out, 2 * x.astype(np.float64))
    tx, tout = torch.randn(7, 9), torch.full((7, 9), float("nan"))
    f(tx, tout)
    assert_close(tout.numpy(), 2 * tx.double().numpy())
    px, pout = pypto.Tensor(x), pypto.Tensor(poisoned(7, 9))
    f(px, pout)
    assert_close(pout.numpy(), 2 * x.astype(np.float64))


def test_write_into_a_view_of_the_caller(backend):
    big = poisoned(10, 12)
    x = rand(4, 5)
    jit(scale_into, backend)(x, big[3:7, 2:7])
    assert_close(big[3:7, 2:7], 2 * x.astype(np.float64))
    rest = big.copy()
    rest[3:7, 2:7] = 0
    assert np.isnan(rest).sum() == 10 * 12 - 4 * 5  # nothing else written


def test_non_contiguous_inputs(backend):
    f = jit(linear, backend)
    x = rand(4, 5).T            # transposed view (5, 4)
    w = rand(3, 8)[:, ::2].T    # strided and transposed (4, 3)
    b = rand(6)[::2]
    y = f(x, w, b)
    assert_close(y, np.maximum(x.astype(np.float64) @ w, 0) + b)
    tx = torch.randn(4, 5).t()
    y2 = f(tx, torch.from_numpy(np.ascontiguousarray(w)), torch.from_numpy(b.copy()))
    assert_close(y2.numpy(), (torch.relu(tx.double() @ torch.from_numpy(w).double()) + torch.from_numpy(b).double()).numpy())


def returns_arg(x, out):
    out[...] = x + 1.0
    return out


def test_returning_an_argument_returns_the_callers_object(backend):
    x, out = rand(3, 3), poisoned(3, 3)
    r = jit(returns_arg, backend)(x, out)
    assert r is out
    assert_close(out, x.astype(np.float64) + 1)


def test_readonly_input(backend):
    x = rand(3, 4)
    x.setflags(write=False)
    assert_close(jit(ident_plus, backend)(x), x.astype(np.float64))


def test_tensor_class_roundtrips():
    a = rand(3, 4)
    t = pypto.from_numpy(a)
    assert t.shape == (3, 4) and t.dtype == pypto.float32 and t.ndim == 2
    a[0, 0] = 42.0
    assert t.numpy()[0, 0] == 42.0  # shares memory
    c = pypto.Tensor(a)
    a[0, 0] = 1.0
    assert c.numpy()[0, 0] == 42.0  # Tensor() copies
    tt = pypto.to_torch(t)
    tt[1, 1] = -3.0
    assert a[1, 1] == -3.0  # to_torch shares memory (DLPack)
    back = np.from_dlpack(t)
    assert back.shape == (3, 4) and back[1, 1] == -3.0
    ft = pypto.from_torch(torch.ones(2, 2))
    assert isinstance(ft, pypto.Tensor) and ft.numpy().sum() == 4
    assert t.__dlpack_device__() == (1, 0)


def test_bfloat16_tensor_dlpack():
    src = torch.randn(4, 5).to(torch.bfloat16)
    t = pypto.from_torch(src)
    assert t.dtype == pypto.bfloat16
    back = torch.from_dlpack(t)
    assert back.dtype == torch.bfloat16
    assert torch.equal(back, src)
    np.testing.assert_allclose(t.numpy(), src.float().numpy())
    made = pypto.Tensor(np.array([1.0, 2.5, -3.0], np.float32), dtype=pypto.bfloat16)
    assert made.numpy().tolist() == [1.0, 2.5, -3.0]


def test_dtype_mapping():
    assert pypto.to_dtype(np.float32) is pypto.float32
    assert pypto.to_dtype(torch.bfloat16) is pypto.bfloat16
    assert pypto.to_dtype("f16") is pypto.float16
    assert pypto.float64 == "float64"
    with pytest.raises(ValueError):
        pypto.to_dtype(np.complex64)


def test_mixed_numpy_torch_follows_first(backend):
    x = rand(2, 2)
    y = jit(linear, backend)(x, torch.eye(2), torch.zeros(2))
    assert isinstance(y, np.ndarray)


def test_target_and_threads():
    t = pypto.target()
    for k in ("arch", "cores", "caches", "simd", "vector_bytes"):
        assert k in t
    n = pypto.num_threads()
    pypto.set_num_threads(1)
    assert pypto.num_threads() == 1
    pypto.set_num_threads(n)
    with pytest.raises(pypto.PyptoError, match="set_num_threads: need at least 1 thread, got 0"):
        pypto.set_num_threads(0)
