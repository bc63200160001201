"""The AST front end: loops stay loops, constants fold, closures and bound methods re-read their
arrays, unrolling (and its limit), loop-carried tensors, ifs, scalars as run-time values."""
import numpy as np
import pytest
import torch

import pypto
from pypto_testutil import assert_close, jit, poisoned, rand


def tile_matmul(A, B, C):
    M, K = A.shape
    K, N = B.shape
    TILE = 64
    for i in range(0, M, TILE):
        for j in range(0, N, TILE):
            acc = pypto.zeros((TILE, TILE))
            for k in range(0, K, TILE):
                acc += A[i:i + TILE, k:k + TILE] @ B[k:k + TILE, j:j + TILE]
            C[i:i + TILE, j:j + TILE] = acc


def _instructions(text):
    return [ln for ln in text.splitlines() if ln.strip() and ln.strip()[0].isupper()]


def test_loops_stay_loops_4096():
    A = np.empty((4096, 4096), np.float32)  # never touched: lower() only traces
    text = jit(tile_matmul, "interp").lower(A, A, A).as_text("tensor")
    assert text.count("for %") == 3, text
    assert len(_instructions(text)) <= 4, text


def test_tile_matmul_ragged(backend):
    A, B = rand(130, 70), rand(70, 99)
    C = poisoned(130, 99)
    jit(tile_matmul, backend)(A, B, C)
    assert_close(C, A.astype(np.float64) @ B)


def folding(x, mask=None):
    scale = pypto.sqrt(x.shape[-1])
    n = x.shape[-1]
    assert isinstance(n, int)
    y = x / scale
    if mask is not None:
        y = y + mask
    if n > 1000:
        y = y * 0.0
    return y


def test_constants_fold(backend):
    x = rand(5, 64)
    f = jit(folding, backend)
    text = f.lower(x).as_text("tensor")
    assert "if" not in text and "TADD" not in text and "8.0" in text
    assert_close(f(x), x / 8.0)
    m = rand(5, 64)
    assert_close(f(x, m), x / 8.0 + m.astype(np.float64))
    assert f.cache_size == 2  # None-ness of `mask` is part of the signature


def scaled(x, alpha, n):
    out = pypto.zeros((x.shape[0],))
    for i in range(n):  # run-time trip count: a loop with a symbolic bound
        out[i] = x[i].sum() * alpha
    return out


def test_scalar_args_are_runtime_values(backend):
    x = rand(8, 5)
    f = jit(scaled, backend)
    o1 = f(x, 2.0, 8)
    o2 = f(x, -1.5, 3)
    assert f.cache_size == 1
    assert_close(o1, x.astype(np.float64).sum(1) * 2.0)
    ref = np.zeros(8)
    ref[:3] = x[:3].astype(np.float64).sum(1) * -1.5
    assert_close(o2, ref)


def shape_from_scalar(x, n):
    return pypto.zeros((n, 2)) + x[0, 0]


def test_scalar_used_as_shape_specialises(backend):
    x = rand(2, 2)
    f = jit(shape_from_scalar, backend)
    assert f(x, 3).shape == (3, 2)
    assert f(x, 4).shape == (4, 2)
    assert f.cache_size == 2


W_GLOBAL = rand(6, 4)


def uses_global(x):
    return x @ W_GLOBAL


def test_globals_are_reread(backend):
    global W_GLOBAL
    x = rand(3, 6)
    f = jit(uses_global, backend)
    assert_close(f(x), x.astype(np.float64) @ W_GLOBAL)
    old = W_GLOBAL
    W_GLOBAL = rand(6, 4)
    try:
        assert_close(f(x), x.astype(np.float64) @ W_GLOBAL)
        assert f.cache_size == 1
        W_GLOBAL = rand(6, 5)  # a new shape: a new trace
        assert f(x).shape == (3, 5)
    finally:
        W_GLOBAL = old


def test_closure_rereads_array(backend):
    w = rand(4, 4)
    scale = 2.0

    def kernel(x):
        return (x @ w) * scale

    f = jit(kernel, backend)
    x = rand(3, 4)
    assert_close(f(x), (x.astype(np.float64) @ w) * 2)
    w[...] = rand(4, 4)  # mutate the captured array in place: the next call sees it
    assert_close(f(x), (x.astype(np.float64) @ w) * 2)
    w = rand(4, 4)  # rebind the closure cell
    assert_close(f(x), (x.astype(np.float64) @ w) * 2)
    scale = 3.0  # a captured Python constant changed: retrace
    assert_close(f(x), (x.astype(np.float64) @ w) * 3)


class Layer:
    def __init__(self, w):
        self.w = w
        self.bias = 1.0
        self.forward = pypto.jit(self._forward)

    def _forward(self, x):
        return pypto.relu(x @ self.w + self.bias)


def test_bound_method_rereads_attributes():
    layer = Layer(rand(5, 3))
    x = rand(4, 5)
    ref = lambda: np.maximum(x.astype(np.float64) @ layer.w + layer.bias, 0)  # noqa: E731
    assert_close(layer.forward(x), ref())
    layer.w = rand(5, 3)
    assert_close(layer.forward(x), ref())
    layer.w[0] += 1.0
    assert_close(layer.forward(x), ref())
    layer.bias = -0.5
    assert_close(layer.forward(x), ref())
    assert layer.forward.__wrapped__ == layer._forward


class Model:
    def __init__(self):
        self.w = rand(4, 4)

    @pypto.jit
    def apply(self, x):
        return x @ self.w


def test_jit_on_method_definition():
    m1, m2 = Model(), Model()
    x = rand(2, 4)
    assert_close(m1.apply(x), x.astype(np.float64) @ m1.w)
    assert_close(m2.apply(x), x.astype(np.float64) @ m2.w)


def test_wrapped():
    def k(x):
        return x + 1.0
    f = pypto.jit(k)
    assert f.__wrapped__ is k
    assert f.__name__ == "k"
    g = pypto.jit(backend="interp")(k)
    assert g.__wrapped__ is k


def double_buffer(x):
    bufs = [None, None]
    out = pypto.zeros(x.shape)
    for b in range(x.shape[0]):
        bufs[b % 2] = x[b] * 2.0
        out[b] = bufs[b % 2] + 1.0
    return out


def test_list_indexed_loop_unrolls(backend):
    x = rand(3, 4, 5)
    f = jit(double_buffer, backend)
    assert "for" not in f.lower(x).as_text("tensor")
    assert_close(f(x), x.astype(np.float64) * 2 + 1)


def test_unroll_limit_error():
    x = rand(2000, 2)
    with pytest.raises(pypto.PyptoError, match="1024") as e:
        jit(double_buffer, "interp")(x)
    assert "test_frontend.py" in str(e.value)


def static_unroll(x):
    acc = x[0]
    for i in pypto.static_range(1, 4):
        acc = acc + x[i] * float(i)
    return acc


def test_static_range(backend):
    x = rand(4, 6)
    f = jit(static_unroll, backend)
    assert "for" not in f.lower(x).as_text("tensor")
    x64 = x.astype(np.float64)
    assert_close(f(x), x64[0] + x64[1] + 2 * x64[2] + 3 * x64[3])


def running(x):
    acc = x[0] * 0.0
    mx = x[0]
    for i in range(1, x.shape[0]):
        acc = acc + x[i]
        mx = pypto.maximum(mx, x[i])
    return acc, mx


def test_loop_carried_tensors(backend):
    x = rand(40, 7)
    f = jit(running, backend)
    assert f.lower(x).as_text("tensor").count("for %") == 1
    acc, mx = f(x)
    assert_close(acc, x[1:].astype(np.float64).sum(0))
    assert_close(mx, x.astype(np.float64).max(0))


def runtime_if(x):
    out = pypto.empty(x.shape)
    for i in range(x.shape[0]):
        if i % 2 == 0:
            out[i] = x[i]
        else:
            out[i] = -x[i]
    return out


def test_symbolic_if(backend):
    x = rand(9, 5)
    f = jit(runtime_if, backend)
    text = f.lower(x).as_text("tensor")
    assert "if" in text and text.count("for %") == 1
    ref = x.astype(np.float64).copy()
    ref[1::2] *= -1
    assert_close(f(x), ref)


def if_python_values(x, n):
    k = 1
    if n > 2:
        k = 2
    return x * 1.0, pypto.zeros((k,))


def test_if_on_scalar_arg_specialises():
    x = rand(2, 2)
    # n is a run-time scalar; k needs a Python value: the kernel specialises on n instead
    f = jit(if_python_values, "interp")
    assert f(x, 3)[1].shape == (2,)
    assert f(x, 1)[1].shape == (1,)


def branch_names(x, out):
    for i in range(x.shape[0]):
        if i % 3 == 0:
            tag = "even"
        else:
            tag = "odd"
        out[i] = x[i] * float(len(tag))


def test_branches_assigning_python_values_error():
    x = rand(2000, 3)
    with pytest.raises(pypto.PyptoError, match="tag") as e:
        jit(branch_names, "interp")(x, poisoned(2000, 3))
    assert "test_frontend.py" in str(e.value)


def branch_scalars(x, out):
    for i in range(x.shape[0]):
        if i % 3 == 0:
            k = 2
        else:
            k = 5
        out[i] = x[i] * k


def test_branches_assigning_scalars_merge(backend):
    x, out = rand(2000, 3), poisoned(2000, 3)
    jit(branch_scalars, backend)(x, out)
    ref = x.astype(np.float64) * 5
    ref[::3] = x[::3].astype(np.float64) * 2
    assert_close(out, ref)


def helper(a, b):
    return pypto.exp(a) * b


@pypto.jit
def inner_kernel(a):
    return a + 1.0


def calls(x, y):
    return helper(x, y) + inner_kernel(y)


def test_calls_helpers_and_kernels(backend):
    x, y = rand(3, 4), rand(3, 4)
    assert_close(jit(calls, backend)(x, y), np.exp(x.astype(np.float64)) * y + y + 1.0)


def rows(x):
    out = pypto.zeros((x.shape[0],))
    i = 0
    for r in x:
        out[i] = r.sum()
        i += 1
    return out


def test_iterate_rows_unrolled(backend):
    x = rand(5, 3)
    assert_close(jit(rows, backend)(x), x.astype(np.float64).sum(1))


def python_structures(x, cfg):
    parts = [x[:, i:i + 2] * float(w) for i, w in enumerate(cfg["weights"])]
    total = parts[0]
    for p in parts[1:]:
        total = total + p
    return {"total": total, "n": len(parts)}, cfg["name"]


def test_python_structures_and_results(backend):
    x = rand(4, 6)
    cfg = {"weights": (1, 2, 3), "name": "abc"}
    res, name = jit(python_structures, backend)(x, cfg)
    assert name == "abc" and res["n"] == 3
    x64 = x.astype(np.float64)
    assert_close(res["total"], x64[:, 0:2] + 2 * x64[:, 1:3] + 3 * x64[:, 2:4])


def kwargs_kernel(x, y=None, *, scale=1.0):
    r = x * scale
    if y is not None:
        r = r + y
    return r


def test_keyword_arguments(backend):
    x, y = rand(2, 3), rand(2, 3)
    f = jit(kwargs_kernel, backend)
    assert_close(f(x, scale=2.0), 2 * x.astype(np.float64))
    assert_close(f(x, y=y, scale=0.5), 0.5 * x.astype(np.float64) + y)


def prange_kernel(x, out):
    for i in pypto.prange(0, x.shape[0], 8):
        out[i:i + 8] = x[i:i + 8] * 2.0


def test_prange(backend):
    x = rand(61, 9)
    out = poisoned(61, 9)
    f = jit(prange_kernel, backend)
    assert "parallel for" in f.lower(x, out).as_text("tensor")
    f(x, out)
    assert_close(out, 2 * x.astype(np.float64))


def loop_local_after(x):
    for i in range(x.shape[0]):
        t = x[i] * 2.0
    return t


def test_loop_local_used_after_loop_is_error():
    with pytest.raises(pypto.PyptoError, match="inside the loop"):
        jit(loop_local_after, "interp")(rand(2000, 2))


def test_lower_levels():
    x = rand(16, 16)
    low = jit(tile_matmul, "cpu").lower(x, x, x)
    for level in ("tensor", "tile", "isa", "source"):
        assert low.as_text(level)
    with pytest.raises(pypto.PyptoError, match="unknown level 'bogus'; expected one of tensor, tile, isa, source"):
        low.as_text("bogus")


def test_torch_scalar_tensor_mix(backend):
    x = torch.randn(3, 4)
    f = jit(scaled, backend)
    out = f(x, 0.5, 3)
    assert isinstance(out, torch.Tensor)
    assert_close(out.numpy(), x.double().sum(1).numpy() * 0.5)


import types  # noqa: E402

weights_mod = types.ModuleType("weights_mod")
weights_mod.W = rand(3, 3)
weights_mod.SCALE = 2.0


def uses_module(x):
    return (x @ weights_mod.W) * weights_mod.SCALE


def test_module_attribute_arrays_are_reread(backend):
    x = rand(2, 3)
    f = jit(uses_module, backend)
    assert_close(f(x), (x.astype(np.float64) @ weights_mod.W) * 2.0)
    old = weights_mod.W
    weights_mod.W = rand(3, 3)
    try:
        assert_close(f(x), (x.astype(np.float64) @ weights_mod.W) * 2.0)
    finally:
        weights_mod.W = old


def test_interpret_env_selects_backend(monkeypatch):
    monkeypatch.setenv("PYPTO_INTERPRET", "1")
    f = pypto.jit(uses_module)
    assert f._backend == "interp"
    monkeypatch.delenv("PYPTO_INTERPRET")
    assert pypto.jit(uses_module)._backend == "cpu"


def test_jit_method_lower_and_inline(backend):
    m = Model()
    x = rand(2, 4)
    assert "TMATMUL" in m.apply.lower(x).as_text("tensor")

    def outer(x):
        return m.apply(x) + 1.0

    assert_close(jit(outer, backend)(x), x.astype(np.float64) @ m.w + 1.0)


class Stack:
    def __init__(self, n):
        self.ws = [rand(4, 4) * 0.5 for _ in range(n)]
        self.run = pypto.jit(self._run)

    def _run(self, x):
        for w in self.ws:
            x = x @ w
        return x


def test_container_length_is_guarded():
    s = Stack(2)
    x = rand(3, 4)

    def ref():
        r = x.astype(np.float64)
        for w in s.ws:
            r = r @ w
        return r

    assert_close(s.run(x), ref())
    s.ws.append(rand(4, 4))
    assert_close(s.run(x), ref())
    s.ws[0] = rand(4, 4)
    assert_close(s.run(x), ref())


@pytest.mark.parametrize("backend", ["interp", "cpu"])
def test_lists_of_tensors_as_arguments(backend):
    """A grouped GEMM (Triton's tutorial): lists of operands of different shapes; their tensors
    are kernel inputs read at every call (new values, same shapes: the same variant), numpy or
    torch, with gradients to the tensors inside the lists."""
    import torch

    def grouped(As, Bs):
        return [a @ b for a, b in zip(As, Bs)]
    k = pypto.jit(grouped, backend=backend)
    for _ in range(2):
        As = [torch.randn(32, 16), torch.randn(64, 8)]
        Bs = [torch.randn(16, 24), torch.randn(8, 40)]
        for g, a, b in zip(k(As, Bs), As, Bs):
            assert torch.allclose(g, a @ b, atol=1e-5)
    assert k.cache_info().size == 1
    An, Bn = [np.random.rand(4, 3).astype(np.float32)], (np.random.rand(3, 2).astype(np.float32),)
    assert np.allclose(k(An, Bn)[0], An[0] @ Bn[0])
    A = [torch.randn(5, 4, dtype=torch.float64, requires_grad=True)]
    B = [torch.randn(4, 3, dtype=torch.float64, requires_grad=True)]
    k(A, B)[0].sum().backward()
    assert torch.allclose(A[0].grad, torch.ones(5, 3, dtype=torch.float64) @ B[0].detach().T)


def _star_view(x):
    b, t, c = x.shape
    return x.view(*x.shape[:-1], 2, c // 2).transpose(-1, -2).reshape(*x.shape)


def _star_lists(x):
    parts = x.unbind(0)
    opts = dict(dim=-1, keepdim=True)
    return torch.cat((*parts, parts[0]), 0).sum(**opts)[-4:] * 2 + torch.stack([*parts], 0).sum(**opts)[0]


@pytest.mark.parametrize("backend", ["interp", "cpu"])
def test_star_args_and_kwargs_in_calls(backend):
    """f(*seq) and f(**mapping) in a kernel: a shape unpacked into view() (a dynamic dim stays
    dynamic), a tuple of tensors into cat / a list, a dict of keywords."""
    k = pypto.jit(_star_view, backend=backend)
    for t in (3, 5, 9):
        x = torch.randn(2, t, 8, dtype=torch.float64)
        assert torch.equal(k(x), _star_view(x))
    assert k.cache_info().size <= 2  # the first shape static, then one variant for every length
    x = torch.randn(3, 4, 5, dtype=torch.float64)
    assert torch.allclose(pypto.jit(_star_lists, backend=backend)(x), _star_lists(x))
