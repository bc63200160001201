"""torch's special functions inside kernels: erfc, erfinv, lgamma, digamma, polygamma(1, .) (the
instructions TERFC ... TTRIGAMMA) and the functions composed of them (mvlgamma, ndtr, log_ndtr,
entr), against mpmath at 30 digits and torch: values in float64 and float32 on both backends, the
edge values torch defines, gradients, and the errors for what is not supported."""
import math

import mpmath
import pytest
import torch

import pypto

mpmath.mp.dps = 30
BACKENDS = ["interp", "cpu"]


def _mp_table(fn, x):
    return torch.tensor([float(fn(mpmath.mpf(v))) for v in x.double().flatten().tolist()],
                        dtype=torch.float64).reshape(x.shape)


def _log_ndtr(v):  # log1p in the right tail: log(ncdf(30)) is 0 to 30 digits, not -4.9e-198
    return mpmath.log(mpmath.ncdf(v)) if v < 0 else mpmath.log1p(-mpmath.ncdf(-v))


def _rel(got, want):
    return float((got.double() - want).norm() / want.norm())


def _inputs(name, dtype):
    g = torch.Generator().manual_seed(11)
    if name == "erfinv":
        x = torch.rand(9, 37, generator=g, dtype=torch.float64) * 1.998 - 0.999
    elif name in ("lgamma", "digamma", "trigamma"):  # both signs, away from the poles by >= 1e-3
        x = torch.randn(9, 37, generator=g, dtype=torch.float64) * 6
        frac = x - x.round()
        x = torch.where(frac.abs() < 1e-3, x + 0.25, x)
    else:
        x = torch.randn(9, 37, generator=g, dtype=torch.float64) * 4
    return x.to(dtype)


FUNCS = {  # name: (kernel body on x, mpmath reference)
    "erfc": (lambda x: torch.erfc(x), mpmath.erfc),
    "erfinv": (lambda x: torch.special.erfinv(x), mpmath.erfinv),
    "lgamma": (lambda x: torch.lgamma(x), lambda v: mpmath.log(abs(mpmath.gamma(v)))),
    "digamma": (lambda x: x.digamma(), mpmath.digamma),
    "trigamma": (lambda x: torch.polygamma(1, x), lambda v: mpmath.psi(1, v)),
    "ndtr": (lambda x: torch.special.ndtr(x), mpmath.ncdf),
    "log_ndtr": (lambda x: torch.special.log_ndtr(x * 6), lambda v: _log_ndtr(6 * v)),
    "entr": (lambda x: torch.special.entr(x.abs() + 0.01), lambda v: -(abs(v) + mpmath.mpf("0.01")) *
             mpmath.log(abs(v) + mpmath.mpf("0.01"))),
    "mvlgamma": (lambda x: torch.mvlgamma(x.abs() + 2, 3),
                 lambda v: sum(mpmath.loggamma(abs(v) + 2 - mpmath.mpf(j) / 2) for j in range(3)) +
                 mpmath.mpf(3 * 2) / 4 * mpmath.log(mpmath.pi)),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", sorted(FUNCS))
def test_values_match_mpmath(name, backend):
    body, ref_fn = FUNCS[name]
    k = pypto.jit(body, backend=backend)
    for dtype, tol in ((torch.float64, 1e-14), (torch.float32, 3e-7)):
        x = _inputs(name, dtype)
        # The reference at the input as the kernel sees it (float32 inputs exactly).
        ref = _mp_table(ref_fn, x)
        assert _rel(k(x), ref) < tol, (name, dtype)


@pytest.mark.parametrize("backend", BACKENDS)
def test_erfinv_next_to_one(backend):
    # The first guess is extrapolated there: Newton's steps must still reach double's rounding.
    eps = 2.0 ** -52
    u = torch.tensor([1 - eps / 2, 1 - eps, 1 - 4 * eps, 1 - 1e-12, 1 - 1e-8, 1 - 1e-4, 0.5, 1e-300], dtype=torch.float64)
    u = torch.cat([u, -u])
    ref = _mp_table(mpmath.erfinv, u)
    got = pypto.jit(lambda u: torch.erfinv(u), backend=backend)(u)
    assert ((got - ref).abs() / ref.abs()).max() < 4e-16


@pytest.mark.parametrize("backend", BACKENDS)
def test_into_a_poisoned_output(backend):
    @pypto.jit(backend=backend)
    def k(x, out):
        out[...] = torch.lgamma(x) + torch.erfc(x)
    x = _inputs("lgamma", torch.float64)
    out = torch.full_like(x, math.nan)
    k(x, out)
    assert _rel(out, torch.lgamma(x) + torch.erfc(x)) < 1e-14


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_edge_values_as_torch(backend, dtype):
    inf, nan = math.inf, math.nan
    x = torch.tensor([0.0, -0.0, -1.0, -3.0, -2.5, 1.0, 2.0, inf, -inf, nan, 1e-30, 40.0, -40.5], dtype=dtype)
    u = torch.tensor([1.0, -1.0, 0.0, -0.0, 1.5, -2.0, nan, 0.999999, -0.5, 1e-30, inf, 0.25, -1e-300],
                     dtype=dtype)
    k = pypto.jit(lambda x, u: (torch.erfc(x), torch.erfinv(u), torch.lgamma(x), torch.digamma(x),
                                torch.special.ndtr(x), torch.special.log_ndtr(x), torch.special.entr(x)),
                  backend=backend)
    got = k(x, u)
    want = (torch.erfc(x), torch.erfinv(u), torch.lgamma(x), torch.digamma(x), torch.special.ndtr(x),
            torch.special.log_ndtr(x), torch.special.entr(x))
    for name, g, w in zip(["erfc", "erfinv", "lgamma", "digamma", "ndtr", "log_ndtr", "entr"], got, want):
        assert torch.equal(torch.isnan(g), torch.isnan(w)), (name, g, w)
        fin = torch.isfinite(w)
        assert torch.equal(g[~fin & ~torch.isnan(w)], w[~fin & ~torch.isnan(w)]), (name, g, w)
        torch.testing.assert_close(g[fin], w[fin], rtol=2e-6, atol=1e-30, msg=name)
    assert torch.equal(torch.signbit(got[1][[3, 12]]), torch.tensor([True, True]))  # erfinv(-0) = -0
    # trigamma: +inf at the poles, 0 at +inf, NaN at -inf (torch's value at -3 is a large finite number)
    t = pypto.jit(lambda x: torch.polygamma(1, x), backend=backend)(x)
    assert t[[0, 1, 2, 3]].tolist() == [inf] * 4 and t[7] == 0 and math.isnan(t[8]) and math.isnan(t[9])


@pytest.mark.parametrize("backend", BACKENDS)
def test_log_ndtr_tail_beyond_erfc(backend):
    # erfc(-x / sqrt 2) underflows below x = -38 (double) / -13 (float): the asymptotic series takes over.
    x = torch.tensor([-1e4, -200.0, -50.0, -38.5, -20.5, -19.5, -12.0, -10.5, -9.5, -5.0, -1.5, -0.5, 0.0, 3.0, 9.0,
                      30.0], dtype=torch.float64)
    k = pypto.jit(lambda x: torch.special.log_ndtr(x), backend=backend)
    ref = torch.tensor([float(_log_ndtr(v)) for v in x.tolist()], dtype=torch.float64)
    assert ((k(x) - ref).abs() / ref.abs()).max() < 1e-13
    x32 = x[x > -1e4].float()  # float's -x^2/2 overflows at -1e4 as torch's does
    ref32 = torch.tensor([float(_log_ndtr(v)) for v in x32.tolist()], dtype=torch.float64)
    small = ref32.abs() < 1e-37  # below float's range: 0 (log1p of a flushed erfc)
    got32 = k(x32).double()
    # x / sqrt 2 rounded to float is amplified by erfc's x^2 in the right tail: 3.7e-6 at 9, as torch's
    assert ((got32 - ref32).abs() / ref32.abs())[~small].max() < 5e-6


GRADS = {  # name: (kernel body, tolerance of the relative norm error)
    "erfc": (lambda x: torch.erfc(x), 1e-13), "erfinv": (lambda x: torch.erfinv(x * 0.3), 1e-13),
    "lgamma": (lambda x: torch.lgamma(x * 3), 1e-13),
    # torch's trigamma (digamma's derivative) is accurate to ~1e-12 only
    "digamma": (lambda x: torch.digamma(x.abs() + 0.1), 1e-10),
    "mvlgamma": (lambda x: torch.special.multigammaln(x.abs() + 2, 4), 1e-13),
    "ndtr": (lambda x: torch.special.ndtr(x * 3), 1e-13),
    # the series' derivative against torch's exact formula in the left tail
    "log_ndtr": (lambda x: torch.special.log_ndtr(x * 15), 1e-10),
    "entr": (lambda x: torch.special.entr(x.abs() + 0.05), 1e-13),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", sorted(GRADS))
def test_gradients_match_torch(name, backend):
    f, tol = GRADS[name]
    g = torch.Generator().manual_seed(5)
    x = torch.randn(5, 19, generator=g, dtype=torch.float64).requires_grad_()
    out = pypto.jit(f, backend=backend)(x)
    dy = torch.randn(out.shape, generator=g, dtype=torch.float64)
    got, = torch.autograd.grad(out, x, dy)
    want, = torch.autograd.grad(f(x), x, dy)
    assert _rel(got, want) < tol, name


def test_public_ops_fold_and_run_eagerly():
    assert pypto.lgamma(3.0) == pytest.approx(math.log(2.0), rel=1e-15)
    assert pypto.erfc(10.0) == pytest.approx(2.088487583762545e-45, rel=1e-13)
    assert pypto.digamma(1.0) == pytest.approx(-0.5772156649015329, rel=1e-15)
    assert pypto.trigamma(1.0) == pytest.approx(math.pi ** 2 / 6, rel=1e-15)
    assert pypto.erfinv(0.5) == pytest.approx(0.4769362762044699, rel=1e-15)
    x = pypto.Tensor(torch.tensor([0.5, 1.5, 3.0], dtype=torch.float64))
    assert torch.allclose(torch.as_tensor(x.lgamma().numpy()), torch.lgamma(torch.tensor([0.5, 1.5, 3.0],
                                                                                         dtype=torch.float64)))


def test_unsupported_orders_and_gradients_name_the_line():
    x = torch.rand(4, 5, dtype=torch.float64) + 0.5
    k = pypto.jit(lambda x: torch.polygamma(2, x))
    with pytest.raises(pypto.PyptoError, match=r"test_special_functions.py:\d+.*polygamma: order 2"):
        k(x)
    with pytest.raises(pypto.PyptoError, match="mvlgamma: p must be a positive int"):
        pypto.jit(lambda x: torch.mvlgamma(x, 0))(x)
    t = pypto.jit(lambda x: torch.polygamma(1, x))
    with pytest.raises(pypto.PyptoError, match=r"test_special_functions.py:\d+.*no derivative rule for TTRIGAMMA"):
        t(x.requires_grad_()).sum().backward()
