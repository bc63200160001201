"""argmax / argmin: one TROWARGMAX / TROWARGMIN over whole rows (issue 15: they were a max, a mask
through memory and a min of candidate indices, 10x amax's time). torch's rule: the first extreme,
a NaN counting as the extreme; the CPU backend, the interpreter and torch agree exactly."""
import numpy as np
import pytest
import torch

import pypto
from pypto_testutil import edge_rand, rand, requires_compiler

pytestmark = requires_compiler


def argmax_last(x):
    return pypto.argmax(x, -1)


def argmin_last(x):
    return x.argmin(-1)


def edge_rows(rows, cols):
    """edge_rand's rows plus ties (a repeated maximum and minimum, one in the last, scalar
    columns), a NaN after an infinity, two NaNs, signed zeros as the maximum."""
    x = edge_rand(rows, cols)
    x[5, 3] = x[5, cols - 1] = 50.0
    x[5, 4] = x[5, cols - 2] = -50.0
    x[6, 0], x[6, cols // 2] = np.inf, np.nan
    x[7, cols - 1], x[7, 1] = np.nan, np.nan
    x[8] = -np.abs(x[8]) - 1
    x[8, 9], x[8, cols - 3] = -0.0, 0.0
    return x


def torch_ref(fn, x, *args, **kw):
    return getattr(torch, fn)(torch.from_numpy(np.ascontiguousarray(x)), *args, **kw).numpy()


@pytest.mark.parametrize("fn", [argmax_last, argmin_last], ids=lambda f: f.__name__)
def test_last_dim_reads_rows_in_place(fn):
    """Along the last dim the rows are searched where they lie (fused::arg_extreme_rows), rows
    wider than the 4096-float reduction block too; a column-strided input takes the instruction
    after a copy. Equal to torch and to the interpreter."""
    kernel, ref = pypto.jit(fn, backend="cpu"), pypto.jit(fn, backend="interp")
    name = "argmax" if fn is argmax_last else "argmin"
    for x in (edge_rows(37, 4100), edge_rows(64, 2703), edge_rows(9, 37), rand(3, 1)):
        src = kernel.lower(x).as_text("source")
        assert f"pto::fused::arg_extreme_rows<{'true' if name == 'argmax' else 'false'}>" in src
        got = kernel(x)
        assert got.dtype == np.int64
        want = torch_ref(name, x, -1)
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(kernel(np.asfortranarray(x)), want)
        np.testing.assert_array_equal(ref(x), want)


@pytest.mark.parametrize("name", ["argmax", "argmin"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64, "bf16"])
def test_every_dim_and_dtype_match_torch(name, dtype):
    """Each dim of a 3-d tensor (a strided, permuted source for dims 0 and 1), keepdim, the
    flattened tensor (dim=None), float and integer dtypes with ties."""
    x = edge_rand(6, 33, 70).reshape(6, 33, 70) if False else rand(6, 33, 70)
    x[1, 4, :] = np.nan
    x[2, :, 5] = 3.0
    x[3, 7, 9] = x[3, 7, 60] = 9.0
    if dtype == "bf16":
        t = torch.from_numpy(x).to(torch.bfloat16)
        arg = t
    elif np.issubdtype(dtype, np.integer):
        x = np.nan_to_num(x * 4).astype(dtype)  # many ties
        arg = t = torch.from_numpy(x)
    else:
        x = x.astype(dtype)
        arg = t = torch.from_numpy(x)

    def k(x):
        f = getattr(pypto, name)
        return f(x, 0), f(x, 1, keepdim=True), getattr(x, name)(-1), f(x)

    got = pypto.jit(k, backend="cpu")(arg)
    want = [getattr(torch, name)(t, 0), getattr(torch, name)(t, 1, keepdim=True), getattr(torch, name)(t, -1),
            getattr(torch, name)(t)]
    for g, w in zip(got, want):
        g = torch.as_tensor(np.asarray(g) if not isinstance(g, torch.Tensor) else g)
        assert g.dtype == torch.int64 and g.shape == w.shape
        torch.testing.assert_close(g, w, rtol=0, atol=0)


def test_argmax_of_a_fused_expression_and_in_a_training_step():
    """An arg-reduction of a computed tensor (the softmax of scaled logits: greedy decoding) beside
    a differentiated output: the indices take no gradient and do not stop the others'."""
    def decode(x, w):
        y = torch.softmax(x @ w * 0.5, -1)
        return y, y.argmax(-1)

    x = torch.randn(16, 40, dtype=torch.float64).float().requires_grad_()
    w = torch.randn(40, 300).requires_grad_()
    y, idx = pypto.jit(decode)(x, w)
    y_ref, idx_ref = decode(x, w)
    torch.testing.assert_close(idx, idx_ref, rtol=0, atol=0)
    y.square().sum().backward()
    gx, gw = x.grad.clone(), w.grad.clone()
    x.grad = w.grad = None
    y_ref.square().sum().backward()
    torch.testing.assert_close(gx, x.grad, rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(gw, w.grad, rtol=1e-4, atol=1e-6)


def test_errors_name_the_line():
    def of_bool(x):
        return pypto.argmax(x > 0, 0)

    def of_scalar(x):
        return pypto.argmin(x.sum(), 0)

    for fn, what in ((of_bool, "bool"), (of_scalar, "at least 1 dimension")):
        with pytest.raises(pypto.PyptoError, match=what) as e:
            pypto.jit(fn, backend="cpu")(rand(4, 5))
        assert "test_arg_extremes.py" in str(e.value)


def both_args(x):
    return pypto.argmax(x, -1), pypto.argmin(x, 0)


@pytest.mark.parametrize("backend", ["cpu", "interp"])
def test_dynamic_dims_one_kernel_for_every_shape(backend):
    """Along a dynamic dim: one kernel for every extent, rows wider than a column block (4096)
    combined block by block (a tie across blocks keeps the first; a NaN in a later block wins over
    an infinity before it; a NaN first stays), and an empty dim raises naming the line, as torch."""
    kernel = pypto.jit(both_args, backend=backend, dynamic={"x": [0, 1]})
    wide = edge_rows(9, 9000)
    wide[5, 100] = wide[5, 8500] = 80.0   # tied maximum in blocks 0 and 2
    wide[6, 5000] = -np.inf                # (row 6: inf at 0, NaN in block 1)
    wide[7, 4096] = 90.0                   # a NaN at 1 comes first
    wide[0, 8999] = 10.0                   # the maximum in the last, partial block
    for x in (edge_rows(9, 37), wide, rand(3, 2), rand(2, 4097), edge_rows(12, 4096)):  # (extents of 1: variants of their own)
        amax, amin = kernel(x)
        t = torch.from_numpy(x)
        np.testing.assert_array_equal(amax, torch.argmax(t, -1).numpy())
        np.testing.assert_array_equal(amin, torch.argmin(t, 0).numpy())
    assert kernel.cache_size == 1
    with pytest.raises(pypto.PyptoError, match="argmax: dimension 1 is empty") as e:
        kernel(np.zeros((3, 0), np.float32))
    assert "test_arg_extremes.py" in str(e.value)


def running_extremes(x):
    a, i = pypto.cummax(x, -1)
    b, j = pypto.cummin(x, 0)
    return a, i, b, j


@pytest.mark.parametrize("backend", ["cpu", "interp"])
def test_cummax_cummin_match_torch(backend):
    """cummax / cummin by two scans (the running extreme, then the last index that reached it):
    torch's values and indices exactly, ties taking the later index, a NaN staying with the index
    of the latest NaN, signed zeros, integers; a row wider than 65536 (scanned in blocks carrying
    the running extreme); a dynamic dim."""
    import torch
    x = edge_rows(9, 300)
    x[5, 10:20] = 50.0           # a run of ties
    x[2, 7], x[2, 8] = 0.0, -0.0  # the running maximum 0: the later zero
    wide = edge_rows(9, 70001)  # row 0 all negative: a block's carry must not start from 0
    cases = [x, np.nan_to_num(x * 10, posinf=1e6, neginf=-1e6).astype(np.int32), wide,
             np.clip(np.nan_to_num(wide * 40), -128, 127).astype(np.int8)]
    kernel = pypto.jit(running_extremes, backend=backend)
    dyn = pypto.jit(running_extremes, backend=backend, dynamic={"x": [0, 1]})
    for k, x in enumerate(cases):
        t = torch.from_numpy(x)
        want = [*torch.cummax(t, -1), *torch.cummin(t, 0)]
        for f in ([kernel, dyn] if k != 2 else [kernel]):
            for g, w in zip(f(x), want):
                np.testing.assert_array_equal(np.asarray(g), w.numpy())
