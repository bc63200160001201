"""torch's element-wise math, bitwise, sorting and similarity functions inside kernels
(frontend/torch_math.py): each called as a torch user would, compared with torch itself in
float64 on random inputs with the special values torch defines (0, ±inf, NaN, the domain edges),
NaN positions included. All cases of a dtype run in one kernel (one compile)."""
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import pypto
from pypto_testutil import requires_compiler

SPECIAL = [0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 1e-30, 30.0, -30.0, 1e30, -1e30, math.inf, -math.inf, math.nan]

# name -> f(a, b) with a, b float tensors of the same shape (b > 0 where the function needs it).
UNARY = {
    "sinh": lambda a, b: torch.sinh(a), "cosh": lambda a, b: torch.cosh(a * 0.1),
    "asinh": lambda a, b: torch.asinh(a), "acosh": lambda a, b: torch.acosh(a.abs() + 1),
    "atanh": lambda a, b: torch.atanh(a), "atan": lambda a, b: torch.atan(a),
    "asin": lambda a, b: torch.asin(a), "acos": lambda a, b: a.acos(), "sinc": lambda a, b: torch.sinc(a),
    "frac": lambda a, b: a.frac(), "deg2rad": lambda a, b: torch.deg2rad(a), "rad2deg": lambda a, b: a.rad2deg(),
    "logit": lambda a, b: torch.logit(torch.sigmoid(a), eps=1e-6), "sgn": lambda a, b: torch.sgn(a),
    "nan_to_num": lambda a, b: torch.nan_to_num(a, nan=2.0, posinf=3.0),
    "nan_to_num_default": lambda a, b: torch.nan_to_num(a),
    "softshrink": lambda a, b: F.softshrink(a, 0.5), "hardshrink": lambda a, b: F.hardshrink(a, 0.5),
    "round2": lambda a, b: torch.round(a, decimals=2), "isposinf": lambda a, b: torch.isposinf(a),
    "isneginf": lambda a, b: torch.isneginf(a), "isnan": lambda a, b: torch.isnan(a),
    "isfinite": lambda a, b: torch.isfinite(a), "signbit": lambda a, b: torch.signbit(a),
}
BINARY = {
    "atan2": lambda a, b: torch.atan2(a, b), "hypot": lambda a, b: torch.hypot(a, b),
    "copysign": lambda a, b: torch.copysign(a, b), "fmod": lambda a, b: torch.fmod(a, b),
    "addcmul": lambda a, b: torch.addcmul(a, a, b, value=0.5), "addcdiv": lambda a, b: torch.addcdiv(a, a, b, value=2),
    "lerp_scalar": lambda a, b: torch.lerp(a, b, 0.3), "lerp_scalar_hi": lambda a, b: torch.lerp(a, b, 0.8),
    "lerp_tensor": lambda a, b: torch.lerp(a, b, torch.sigmoid(b)),
    "xlogy": lambda a, b: torch.xlogy(a, b), "logaddexp": lambda a, b: torch.logaddexp(a, b),
    "logaddexp2": lambda a, b: torch.logaddexp2(a, b), "isclose": lambda a, b: torch.isclose(a, a + b * 1e-7),
    "isclose_nan": lambda a, b: torch.isclose(a, a, equal_nan=True),
    "logical_xor": lambda a, b: torch.logical_xor(a > 0, b > 0),
}
CASES = {**UNARY, **BINARY}


def operands(dtype, n=97):
    rng = np.random.default_rng(3)
    a = np.concatenate([rng.standard_normal(n) * 3, SPECIAL, rng.uniform(-1, 1, 16)])
    b = np.concatenate([rng.standard_normal(n) * 2, SPECIAL[::-1], rng.uniform(0.1, 2, 16)])
    return torch.tensor(a, dtype=dtype), torch.tensor(b, dtype=dtype)


def check(name, got, want, tol):
    got, want = got.double(), want.double()
    assert got.shape == want.shape, name
    nan = torch.isnan(want)
    assert torch.equal(torch.isnan(got), nan), f"{name}: NaN positions differ"
    inf = torch.isinf(want)
    assert torch.equal(got[inf], want[inf]), f"{name}: infinities differ"
    fin = ~nan & ~inf
    g, w = got[fin], want[fin]
    # Relative error per element, with an absolute floor at the dtype's resolution near 0.
    err = ((g - w).abs() / (w.abs() + tol)).max().item() if fin.any() else 0.0
    assert err < tol * 50, f"{name}: max relative error {err:.3g}"


@requires_compiler
@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-6), (torch.float64, 1e-13)])
def test_torch_math_functions_match_torch_at_every_special_value(dtype, tol):
    a, b = operands(dtype)
    names = list(CASES)

    @pypto.jit
    def all_cases(a, b):
        return tuple(CASES[n](a, b) for n in names)

    got = all_cases(a, b)
    for n, g in zip(names, got):
        want = CASES[n](a.double() if n in ("nan_to_num_default",) else a, b)
        check(n, g, want.to(g.dtype) if n != "nan_to_num_default" else CASES[n](a, b), tol)


@requires_compiler
def test_sorting_and_selection_return_torch_types():
    x = torch.randn(6, 33, dtype=torch.float64)

    @pypto.jit
    def k(x):
        s = torch.sort(x, dim=-1, descending=True)
        t = torch.topk(x, 5, dim=1)
        c = torch.cummax(x, 0)
        return s.values, s.indices, t.values, t.indices, torch.argsort(x, 1), c.values, torch.msort(x), x.prod(1)

    got = k(x)
    s, t, c = torch.sort(x, dim=-1, descending=True, stable=True), torch.topk(x, 5, 1), torch.cummax(x, 0)
    want = (s.values, s.indices, t.values, t.indices, torch.argsort(x, dim=1, stable=True), c.values, torch.msort(x),
            x.prod(1))
    for g, w in zip(got, want):
        assert torch.allclose(g.double(), w.double(), rtol=1e-12, atol=0), (g, w)


@requires_compiler
def test_bitwise_functions_and_products_on_integers():
    rng = np.random.default_rng(0)
    a = torch.tensor(rng.integers(-2**31, 2**31 - 1, (5, 9)), dtype=torch.int32)
    b = torch.tensor(rng.integers(0, 40, (5, 9)), dtype=torch.int32)

    @pypto.jit
    def k(a, b):
        return (torch.bitwise_and(a, b), torch.bitwise_or(a, b), a.bitwise_xor(b), torch.bitwise_not(a),
                torch.bitwise_left_shift(a, b), torch.bitwise_right_shift(a, b), torch.gcd(a, b),
                torch.prod(b % 3 + 1, dim=0), (b % 3 + 1).prod())

    want = (a & b, a | b, a ^ b, ~a, torch.bitwise_left_shift(a, b), torch.bitwise_right_shift(a, b),
            torch.gcd(a, b), torch.prod(b % 3 + 1, dim=0), (b % 3 + 1).prod())
    for g, w in zip(k(a, b), want):
        assert g.dtype == w.dtype and torch.equal(g, w), (g, w)


@requires_compiler
def test_reductions_dots_and_similarities():
    x, y = torch.randn(8, 16, dtype=torch.float64), torch.randn(8, 16, dtype=torch.float64)
    xn = x.clone()
    xn[2, 3] = math.nan
    v = torch.randn(16, dtype=torch.float64)

    @pypto.jit
    def k(x, y, xn, v):
        return (torch.nansum(xn, 1), torch.nanmean(xn), torch.dot(v, v), torch.mv(x, v),
                F.cosine_similarity(x, y), F.pairwise_distance(x, y), F.pairwise_distance(x, y, p=1),
                F.softmin(x, dim=1), torch.movedim(x.reshape(2, 4, 16), 0, -1), torch.fliplr(x),
                torch.flipud(x), x.numel() * x)

    want = (torch.nansum(xn, 1), torch.nanmean(xn), torch.dot(v, v), torch.mv(x, v), F.cosine_similarity(x, y),
            F.pairwise_distance(x, y), F.pairwise_distance(x, y, p=1), F.softmin(x, dim=1),
            torch.movedim(x.reshape(2, 4, 16), 0, -1), torch.fliplr(x), torch.flipud(x), x.numel() * x)
    for g, w in zip(k(x, y, xn, v), want):
        assert g.shape == w.shape and torch.allclose(g, w, rtol=1e-12, atol=1e-12), (g, w)


def test_unsupported_torch_function_names_its_pypto_neighbour():
    @pypto.jit
    def k(x):
        return torch.masked_select(x, x > 0)

    with pytest.raises(pypto.PyptoError, match=r"masked_select.*pypto\.masked_select"):
        k(torch.randn(4, 4))


@pytest.mark.parametrize("backend", ["interp", pytest.param("cpu", marks=requires_compiler)])
def test_pypto_sign_is_torch_sign_on_both_backends(backend):
    # torch.sign(NaN) == 0 (NumPy's is NaN); PyPTO follows torch in kernels and in constant folding.
    a, _ = operands(torch.float32)

    @pypto.jit(backend=backend)
    def sign(x):
        return pypto.sign(x)

    out = torch.as_tensor(sign(a.numpy()))
    assert torch.equal(out, torch.sign(a)) and not torch.signbit(out[a == 0]).any()
    assert pypto.sign(math.nan) == 0.0 and pypto.sign(-math.inf) == -1.0 and pypto.sign(-3) == -1
