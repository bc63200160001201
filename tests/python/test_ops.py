"""Every pypto op, inside a kernel, on the interpreter and the CPU backend, against NumPy /
PyTorch float64. Ragged sizes (33x70), broadcasting, dims/keepdim, f16/bf16 storage. Every case
runs with the default tiles and with small tiles (pypto_testutil.SMALL_TILES), with which 33x70
spans several tiles in both dimensions with ragged last tiles."""
import math

import numpy as np
import pytest
import torch

import pypto
from pypto_testutil import as_numpy, assert_close, assert_close_edges, backend_params, edge_rand, f64, jit, rand

M, N = 33, 70


@pytest.fixture(params=backend_params(tiled=True))
def backend(request):
    return request.param


def make_unary(op):
    def kernel(x):
        return op(x)
    return kernel


def make_binary(op):
    def kernel(a, b):
        return op(a, b)
    return kernel


def _t(x):
    return torch.from_numpy(np.asarray(x, dtype=np.float64))


def at_minus_inf_limit(f):
    """docs/isa.md: gelu, gelu_tanh and silu are -0 at -inf (their limit), where NumPy/torch
    compute -inf * 0 = NaN."""
    return lambda x: np.where(x == -np.inf, -0.0, f(x))


UNARY = [
    ("exp", pypto.exp, np.exp, None),
    ("log", pypto.log, np.log, 0.1),
    ("sqrt", pypto.sqrt, np.sqrt, 0.1),
    ("rsqrt", pypto.rsqrt, lambda x: 1 / np.sqrt(x), 0.1),
    ("abs", pypto.abs, np.abs, None),
    ("neg", pypto.neg, np.negative, None),
    ("tanh", pypto.tanh, np.tanh, None),
    ("sigmoid", pypto.sigmoid, lambda x: 1 / (1 + np.exp(-x)), None),
    ("relu", pypto.relu, lambda x: np.maximum(x, 0), None),
    ("silu", pypto.silu, at_minus_inf_limit(lambda x: x / (1 + np.exp(-x))), None),
    ("erf", pypto.erf, lambda x: torch.erf(_t(x)).numpy(), None),
    ("gelu", pypto.gelu, at_minus_inf_limit(lambda x: torch.nn.functional.gelu(_t(x)).numpy()), None),
]


@pytest.mark.parametrize("name,op,ref,low", UNARY, ids=[u[0] for u in UNARY])
def test_unary(backend, name, op, ref, low):
    x = edge_rand(M, N, low=low)
    out = jit(make_unary(op), backend)(x)
    assert isinstance(out, np.ndarray) and out.dtype == np.float32
    with np.errstate(all="ignore"):
        assert_close_edges(out, ref(x.astype(np.float64)))


def gelu_tanh(x):
    return pypto.gelu(x, approximate="tanh")


def test_gelu_tanh(backend):
    x = rand(M, N)
    out = jit(gelu_tanh, backend)(x)
    assert_close(out, torch.nn.functional.gelu(_t(x), approximate="tanh").numpy())


BINARY = [
    ("add", pypto.add, np.add),
    ("sub", pypto.sub, np.subtract),
    ("mul", pypto.mul, np.multiply),
    ("div", pypto.div, np.divide),
    ("maximum", pypto.maximum, np.maximum),
    ("minimum", pypto.minimum, np.minimum),
]


@pytest.mark.parametrize("name,op,ref", BINARY, ids=[b[0] for b in BINARY])
def test_binary_broadcast(backend, name, op, ref):
    a, b = edge_rand(M, N), rand(N, low=0.5)  # (33, 70) op (70,)
    b[5], b[6] = np.inf, np.nan  # special values in the broadcast operand too
    out = jit(make_binary(op), backend)(a, b)
    with np.errstate(all="ignore"):
        assert_close_edges(out, ref(*f64(a, b)))


def test_broadcast_both_sides(backend):
    a, b = rand(4, 1, N), rand(M, 1)  # -> (4, 33, 70)
    out = jit(make_binary(pypto.add), backend)(a, b)
    assert out.shape == (4, M, N)
    assert_close(out, np.add(*f64(a, b)))


def operators(a, b):
    return (a + b) * 2.0 - b / 3.0 + (-a) * (1.0 - b)


def test_python_operators_and_scalars(backend):
    a, b = rand(M, N), rand(M, N)
    out = jit(operators, backend)(a, b)
    a64, b64 = f64(a, b)
    assert_close(out, (a64 + b64) * 2.0 - b64 / 3.0 + (-a64) * (1.0 - b64))


def powers(x, y):
    return x ** 2 + pypto.pow(x, 2.5) + x ** y


def test_pow(backend):
    x, y = rand(M, N, low=0.5), rand(M, N, low=0.0)
    out = jit(powers, backend)(x, y)
    x64, y64 = f64(x, y)
    assert_close(out, x64 ** 2 + x64 ** 2.5 + x64 ** y64)


CMP = [("eq", pypto.eq, np.equal), ("ne", pypto.ne, np.not_equal), ("lt", pypto.lt, np.less),
       ("le", pypto.le, np.less_equal), ("gt", pypto.gt, np.greater), ("ge", pypto.ge, np.greater_equal)]


@pytest.mark.parametrize("name,op,ref", CMP, ids=[c[0] for c in CMP])
def test_compare(backend, name, op, ref):
    a = edge_rand(M, N)  # NaN compares false (true for ne), infinities order
    b = a.copy()
    b[::2] = rand(17, N)  # half the rows equal, so eq / le / ge are exercised
    out = jit(make_binary(op), backend)(a, b)
    assert out.dtype == np.bool_
    np.testing.assert_array_equal(out, ref(a, b))


def where_kernel(x, y):
    m = (x > 0) & ~(y > 1.0)
    return pypto.where(m, x, y * 2.0), pypto.where(x < y, x, 0.0)


def test_where_and_logic(backend):
    x, y = rand(M, N), rand(M, N)
    w1, w2 = jit(where_kernel, backend)(x, y)
    x64, y64 = f64(x, y)
    assert_close(w1, np.where((x64 > 0) & ~(y64 > 1.0), x64, 2 * y64))
    assert_close(w2, np.where(x64 < y64, x64, 0.0))


def reduce_kernel(x):
    return (pypto.sum(x, 1), x.mean(0), x.max(-1, keepdim=True), pypto.min(x, dim=0, keepdim=True),
            x.sum(), pypto.mean(x, (0, 1), keepdim=True), x.sum(0))


def test_reductions(backend):
    x = edge_rand(M, N, specials=False)
    outs = jit(reduce_kernel, backend)(x)
    x64 = x.astype(np.float64)
    refs = (x64.sum(1), x64.mean(0), x64.max(-1, keepdims=True), x64.min(0, keepdims=True), x64.sum(),
            x64.mean((0, 1), keepdims=True), x64.sum(0))
    for o, r in zip(outs, refs):
        assert o.shape == r.shape
        assert_close(o, r)
    # inf and NaN: max/min propagate NaN, sums give inf, NaN for inf - inf.
    x = edge_rand(M, N)
    outs = jit(reduce_kernel, backend)(x)
    x64 = x.astype(np.float64)
    with np.errstate(all="ignore"):
        refs = (x64.sum(1), x64.mean(0), x64.max(-1, keepdims=True), x64.min(0, keepdims=True), x64.sum(),
                x64.mean((0, 1), keepdims=True), x64.sum(0))
    for o, r in zip(outs, refs):
        assert_close_edges(o, r)


def reduce_numpy_spelling(x):
    return (pypto.max(x, axis=1, keepdims=True), pypto.sum(x, axis=0), pypto.mean(x, axis=(0, 1)),
            pypto.min(x, axis=-1, keepdims=False))


def test_reductions_take_numpy_axis_and_keepdims(backend):
    x = rand(M, N)
    x64 = x.astype(np.float64)
    refs = (x64.max(1, keepdims=True), x64.sum(0), x64.mean((0, 1)), x64.min(-1))
    for o, r in zip(jit(reduce_numpy_spelling, backend)(x), refs):
        assert o.shape == r.shape
        assert_close(o, r)


def test_misspelt_op_argument_names_the_op_and_the_line():
    def k(x):
        return pypto.sum(x, axes=1)

    with pytest.raises(pypto.PyptoError, match=r"(?s)pypto\.sum\(\).*'axes'.*return pypto\.sum"):
        pypto.jit(k)(rand(4, 8))

    def both(x):
        return pypto.max(x, dim=0, axis=1)

    with pytest.raises(pypto.PyptoError, match="dim or as axis, not both"):
        pypto.jit(both)(rand(4, 8))


def reduce3d(x):
    return x.sum((0, 2)), x.max(1), pypto.amin(x, -1)


def test_reductions_3d(backend):
    x = edge_rand(3 * 17, 40, specials=False).reshape(3, 17, 40)
    outs = jit(reduce3d, backend)(x)
    x64 = x.astype(np.float64)
    for o, r in zip(outs, (x64.sum((0, 2)), x64.max(1), x64.min(-1))):
        assert_close(o, r)


def softmaxes(x):
    return pypto.softmax(x), pypto.softmax(x, dim=0), pypto.log_softmax(x, -1)


def test_softmax(backend):
    x = edge_rand(M, N, specials=False) * 3
    s1, s0, ls = jit(softmaxes, backend)(x)
    t = _t(x)
    assert_close(s1, torch.softmax(t, -1).numpy())
    assert_close(s0, torch.softmax(t, 0).numpy())
    assert_close(ls, torch.log_softmax(t, -1).numpy())


def norms(x, w, b):
    return (pypto.layer_norm(x, (x.shape[-1],), w, b), pypto.layer_norm(x, x.shape[-1]),
            pypto.rms_norm(x, (x.shape[-1],), w), pypto.rms_norm(x, x.shape[-1], eps=1e-5))


def test_norms(backend):
    x, w, b = rand(M, N), rand(N), rand(N)
    ln, ln0, rms, rms0 = jit(norms, backend)(x, w, b)
    t, tw, tb = _t(x), _t(w), _t(b)
    assert_close(ln, torch.nn.functional.layer_norm(t, (N,), tw, tb, 1e-5).numpy())
    assert_close(ln0, torch.nn.functional.layer_norm(t, (N,), eps=1e-5).numpy())
    ms = (t * t).mean(-1, keepdim=True)
    assert_close(rms, (t / torch.sqrt(ms + 1e-6) * tw).numpy())
    assert_close(rms0, (t / torch.sqrt(ms + 1e-5)).numpy())


def layer_norm_2d(x):
    return pypto.layer_norm(x, (6, 10))


def test_layer_norm_two_dims(backend):
    x = rand(4, 6, 10)
    out = jit(layer_norm_2d, backend)(x)
    assert_close(out, torch.nn.functional.layer_norm(_t(x), (6, 10)).numpy())


def matmul2(a, b):
    return pypto.matmul(a, b)


@pytest.mark.parametrize("sa,sb", [((M, N), (N, 20)), ((3, M, N), (N, 20)), ((2, 1, 5, 7), (3, 7, 4)),
                                   ((N,), (N, 20)), ((M, N), (N,))],
                         ids=["2d", "batched", "broadcast-batch", "vec-mat", "mat-vec"])
def test_matmul(backend, sa, sb):
    a, b = (edge_rand(*sa, specials=False) if len(sa) == 2 else rand(*sa)), rand(*sb)
    out = jit(matmul2, backend)(a, b)
    assert_close(out, np.matmul(*f64(a, b)))


def at_operator(a, b):
    return a @ b.T


def test_matmul_operator_transposed(backend):
    a, b = rand(M, N), rand(20, N)
    assert_close(jit(at_operator, backend)(a, b), np.matmul(*f64(a, b.T)))


def mixed_add(a, b):
    return a + b, b * a


def test_mixed_float_dtypes_promote(backend):
    """f64 with f32 computes in f64 (as NumPy): an f32 result would lose the f64 operand's bits."""
    a = rand(M, N, dtype=np.float64) * (1 + 1e-12)
    b = rand(M, N)
    s, p = jit(mixed_add, backend)(a, b)
    assert s.dtype == np.float64 and p.dtype == np.float64
    assert_close(s, a + b.astype(np.float64), 1e-13)
    assert_close(p, a * b.astype(np.float64), 1e-13)


def strided(x):
    return x[::2, ::3] * 1.5, x[1::3, 2::5] + 1.0, x[5:, 7::2], x[-3:, -5:-1] * 2.0, x[-1]


def test_layout_strided_and_negative_slices(backend):
    x = rand(M, N)
    outs = jit(strided, backend)(x)
    x64 = x.astype(np.float64)
    refs = (x64[::2, ::3] * 1.5, x64[1::3, 2::5] + 1.0, x64[5:, 7::2], x64[-3:, -5:-1] * 2.0, x64[-1])
    for o, r in zip(outs, refs):
        assert o.shape == r.shape
        assert_close(o, r)


def layouts(x, y):
    return (x.transpose(0, 1), pypto.permute(y, (2, 0, 1)), y.reshape(12, 5), pypto.reshape(x[:30], (3, 10, N)),
            pypto.concat([x, x[:, :10]], dim=1), pypto.cat([x[:3], x], 0), y.T)


def test_layout_ops(backend):
    x, y = rand(M, N), rand(3, 4, 5)
    outs = jit(layouts, backend)(x, y)
    refs = (x.T, y.transpose(2, 0, 1), y.reshape(12, 5), x[:30].reshape(3, 10, N),
            np.concatenate([x, x[:, :10]], 1), np.concatenate([x[:3], x], 0), y.T)
    for o, r in zip(outs, refs):
        assert o.shape == r.shape
        assert_close(o, r.astype(np.float64))


def casts(x):
    return x.to(pypto.float16), pypto.cast(x, pypto.int32), x.astype(np.float64), (x > 0).to(pypto.float32)


def test_cast(backend):
    x = rand(M, N) * 10
    h, i, d, b = jit(casts, backend)(x)
    assert h.dtype == np.float16 and i.dtype == np.int32 and d.dtype == np.float64 and b.dtype == np.float32
    # A conversion has one right answer (round to nearest even): compare bit for bit.
    np.testing.assert_array_equal(as_numpy(h), x.astype(np.float16))
    np.testing.assert_array_equal(i, np.trunc(x).astype(np.int32))
    assert_close(d, x.astype(np.float64))
    np.testing.assert_array_equal(b, (x > 0).astype(np.float32))


def int_math(a, b):
    return a + b * 3, a // 2, a % 5


def test_int_tensors(backend):
    a = np.arange(-20, 50, dtype=np.int32).reshape(7, 10)
    b = np.arange(70, dtype=np.int64).reshape(7, 10)
    s, q, r = jit(int_math, backend)(a, b)
    np.testing.assert_array_equal(s, a + b * 3)
    np.testing.assert_array_equal(q, a // 2)
    np.testing.assert_array_equal(r, a % 5)


def f16_kernel(x, y):
    return x * 2.0 + y, pypto.softmax(x.float(), -1)


def test_float16_storage(backend):
    x, y = rand(M, N).astype(np.float16), rand(M, N).astype(np.float16)
    o, s = jit(f16_kernel, backend)(x, y)
    assert o.dtype == np.float16 and s.dtype == np.float32
    x64, y64 = f64(x, y)
    assert_close(o, x64 * 2 + y64, 2e-3)
    assert_close(s, torch.softmax(torch.from_numpy(x64), -1).numpy(), 1e-4)


def bf16_kernel(x, w):
    return pypto.relu(x @ w) + 1.0


def test_bfloat16_storage(backend):
    x = torch.randn(M, 40).to(torch.bfloat16)
    w = torch.randn(40, 24).to(torch.bfloat16)
    out = jit(bf16_kernel, backend)(x, w)
    assert isinstance(out, torch.Tensor) and out.dtype == torch.bfloat16
    ref = torch.relu(x.double() @ w.double()) + 1.0
    assert_close(out.double().numpy(), ref.numpy(), 2e-2)


def conv_kernel(x, w, b):
    return (pypto.conv2d(x, w, b), pypto.conv2d(x, w, stride=2, padding=1),
            pypto.conv2d(x, w, padding="same", dilation=2), pypto.conv2d(x[0], w, padding="valid"))


def test_conv2d(backend):
    x, w, b = rand(2, 3, 11, 9), rand(5, 3, 3, 3), rand(5)
    same, strided, dil, chw = jit(conv_kernel, backend)(x, w, b)
    F = torch.nn.functional
    tx, tw, tb = _t(x), _t(w), _t(b)
    assert_close(same, F.conv2d(tx, tw, tb, padding="same").numpy())
    assert_close(strided, F.conv2d(tx, tw, stride=2, padding=1).numpy())
    assert_close(dil, F.conv2d(tx, tw, padding="same", dilation=2).numpy())
    assert_close(chw, F.conv2d(tx[0:1], tw).numpy()[0])


def creation(x, alpha):
    z = pypto.zeros((4, 5))
    o = pypto.ones((4, 5), dtype=pypto.int32)
    f = pypto.full((2, 3), alpha)
    e = pypto.empty_like(x)
    e[...] = x * 2.0
    zl = pypto.zeros_like(x) + 1.0
    ol = pypto.ones_like(x, dtype=pypto.float64)
    a = pypto.arange(10)
    af = pypto.arange(2.0, 20.0, 3.0)
    emp = pypto.empty((3,), dtype=pypto.float32)
    emp[:] = 7.0
    return z, o, f, e, zl, ol, a, af, pypto.inplace(emp + 1.0)


def test_creation(backend):
    x = rand(M, N)
    z, o, f, e, zl, ol, a, af, emp = jit(creation, backend)(x, 2.5)
    np.testing.assert_array_equal(z, np.zeros((4, 5), np.float32))
    assert o.dtype == np.int32 and (o == 1).all()
    np.testing.assert_array_equal(f, np.full((2, 3), 2.5, np.float32))
    assert_close(e, 2.0 * x.astype(np.float64))
    np.testing.assert_array_equal(zl, np.ones((M, N), np.float32))
    assert ol.dtype == np.float64 and (ol == 1).all()
    np.testing.assert_array_equal(a, np.arange(10))
    assert_close(af, np.arange(2.0, 20.0, 3.0))
    np.testing.assert_array_equal(emp, np.full(3, 8.0, np.float32))


def methods(x):
    return (x.exp().sum(-1), x.abs().sqrt(), x.clamp(-0.5, 0.5), x.relu().max(), x.sigmoid().min(0),
            x.masked_fill(x > 1.0, 0.0), x.unsqueeze(0).squeeze(0), x[None, :, 3])


def test_tensor_methods(backend):
    x = rand(M, N)
    outs = jit(methods, backend)(x)
    x64 = x.astype(np.float64)
    refs = (np.exp(x64).sum(-1), np.sqrt(np.abs(x64)), np.clip(x64, -0.5, 0.5), np.maximum(x64, 0).max(),
            (1 / (1 + np.exp(-x64))).min(0), np.where(x64 > 1.0, 0.0, x64), x64, x64[None, :, 3])
    for o, r in zip(outs, refs):
        assert np.shape(o) == np.shape(r)
        assert_close(o, r)


def test_constant_folding_outside_tensors():
    assert pypto.sqrt(64) == 8.0
    assert pypto.exp(0.0) == 1.0
    assert pypto.maximum(3, 5) == 5
    assert math.isclose(pypto.sigmoid(0.0), 0.5)


def test_math_constant_folding_is_the_backends_element_function():
    """A constant folds through include/pto/elem.hpp (the backends' own functions, docs/isa.md),
    so a folded value is bit for bit what a kernel computes in float64; ceil keeps an int an int,
    fmod and copysign keep C's sign rules, the special values are those of docs/isa.md."""
    vals = [27.0, -8.0, 2.5, -0.5, 1e-300, 7.25]
    x = np.array([vals], np.float64)
    for name in ("cbrt", "sin", "expm1", "log1p", "exp2", "ceil", "trunc"):
        fn = getattr(pypto, name)
        got = np.asarray(pypto.jit(lambda x: fn(x), backend="interp")(x))[0]  # noqa: B023
        want = [fn(v) for v in vals]
        assert np.array_equal(got, want, equal_nan=True), (name, got, want)
    assert pypto.ceil(7) == 7 and isinstance(pypto.ceil(7), int) and pypto.ceil(-2.5) == -2.0
    assert pypto.fmod(-7.5, 2.0) == -1.5 and math.copysign(1.0, pypto.copysign(3.0, -0.0)) == -1.0
    assert math.isnan(pypto.sin(math.inf)) and pypto.log1p(-1.0) == -math.inf


def test_eager_ops_numpy_and_torch():
    x = rand(M, N)
    y = pypto.relu(x)
    assert isinstance(y, np.ndarray)
    assert_close(y, np.maximum(x, 0).astype(np.float64))
    t = torch.from_numpy(rand(M, N))
    s = pypto.softmax(t, dim=-1)
    assert isinstance(s, torch.Tensor)
    assert_close(s.numpy(), torch.softmax(t.double(), -1).numpy())
    assert_close(pypto.matmul(x, x.T), x.astype(np.float64) @ x.T)
    z = pypto.zeros((2, 3))
    assert isinstance(z, pypto.Tensor) and z.shape == (2, 3)
