"""torch's special functions inside kernels (torch_functions.py reads ENTRIES). erfc, erfinv,
lgamma, digamma and polygamma(1, .) are instructions (include/pto/special.hpp, docs/isa.md); the
others are composed of them: polygamma of orders 0 and 1, mvlgamma, ndtr, log_ndtr (through an
asymptotic series where erfc would underflow) and entr. Each branch of a composed function works on
its input clamped to the branch's range, so that the branches not taken stay finite and their
gradients (multiplied by zero) do not turn into NaN."""
from __future__ import annotations

import math

from .. import dtypes as _dt
from ..errors import PyptoError
from . import tensor_ops as T
from .torch_math import as_float, no_out
from .values import Opcode, TensorValue


def _unary(op):
    def f(input, *, out=None):  # noqa: A002
        no_out(out)
        return T.unary(op, as_float(input))
    return f


def _mul(a, b):
    return T.binary(Opcode.TMUL, a, b)


def _add(a, b):
    return T.binary(Opcode.TADD, a, b)


def _clamp(x, lo=None, hi=None):
    if lo is not None:
        x = T.binary(Opcode.TMAX, x, lo)
    return x if hi is None else T.binary(Opcode.TMIN, x, hi)


def polygamma(n, input, *, out=None):  # noqa: A002
    """torch.polygamma(n, x), and x.polygamma(n) (which arrives as (x, n))."""
    no_out(out)
    if isinstance(n, TensorValue) and not isinstance(input, TensorValue):
        n, input = input, n  # noqa: A001
    if n == 0:
        return T.unary(Opcode.TDIGAMMA, as_float(input))
    if n == 1:
        return T.unary(Opcode.TTRIGAMMA, as_float(input))
    raise PyptoError(f"polygamma: order {n} is not supported inside a kernel (orders 0 and 1: digamma, trigamma)")


def mvlgamma(input, p, *, out=None):  # noqa: A002
    """The multivariate log-gamma of dimension p: sum over j < p of lgamma(x - j/2), plus p (p-1)/4 log pi."""
    no_out(out)
    if not isinstance(p, int) or p < 1:
        raise PyptoError(f"mvlgamma: p must be a positive int, got {p!r}")
    x = as_float(input)
    total = T.unary(Opcode.TLGAMMA, x)
    for j in range(1, p):
        total = _add(total, T.unary(Opcode.TLGAMMA, T.binary(Opcode.TSUB, x, j / 2)))
    return _add(total, p * (p - 1) / 4 * math.log(math.pi))


def ndtr(input, *, out=None):  # noqa: A002
    """The standard normal distribution function, erfc(-x / sqrt 2) / 2 (no cancellation in the left tail)."""
    no_out(out)
    return _mul(T.unary(Opcode.TERFC, _mul(as_float(input), -math.sqrt(0.5))), 0.5)


def log_ndtr(input, *, out=None):  # noqa: A002
    """log of ndtr: log1p(-erfc(x / sqrt 2) / 2) for x > -1, log(erfc(-x / sqrt 2) / 2) down to where
    erfc nears underflow (-20 in double, -10 in float), and beyond, the asymptotic series
    -x^2/2 - log(-x sqrt(2 pi)) + log(1 - 1/x^2 + 3/x^4 - ...) (8 terms: 3e-11 relative at -10)."""
    no_out(out)
    x = as_float(input)
    cut = -20.0 if x.pdtype == _dt.float64 else -10.0
    hi = _clamp(x, lo=-1.0)
    upper = T.unary(Opcode.TLOG1P, _mul(T.unary(Opcode.TERFC, _mul(hi, math.sqrt(0.5))), -0.5))
    mid = _clamp(x, lo=cut, hi=-1.0)
    middle = T.unary(Opcode.TLOG, _mul(T.unary(Opcode.TERFC, _mul(mid, -math.sqrt(0.5))), 0.5))
    lo = _clamp(x, hi=cut)
    r = T.unary(Opcode.TRECIP, _mul(lo, lo))  # 1 / x^2
    term, coeffs = 1.0, []
    for k in range(1, 9):  # (-1)^k (2k - 1)!! / x^(2k)
        term *= -(2 * k - 1)
        coeffs.append(term)
    poly = coeffs[-1]
    for c in reversed(coeffs[:-1]):
        poly = _add(_mul(r, poly), c)
    series = _add(_mul(r, poly), 1.0)
    tail = T.binary(Opcode.TSUB,
                    T.unary(Opcode.TLOG, series),
                    _add(_mul(_mul(lo, lo), 0.5),
                         _add(T.unary(Opcode.TLOG, T.unary(Opcode.TNEG, lo)), 0.5 * math.log(2 * math.pi))))
    out_ = T.where(T.compare(Opcode.TCMP_GT, x, -1.0), upper, T.where(T.compare(Opcode.TCMP_GT, x, cut), middle, tail))
    return T.where(T.compare(Opcode.TCMP_NE, x, x), x, out_)  # NaN stays NaN


def entr(input, *, out=None):  # noqa: A002
    """-x log x for x > 0, 0 at 0, -inf below; NaN stays NaN."""
    no_out(out)
    x = as_float(input)
    pos = T.compare(Opcode.TCMP_GT, x, 0.0)
    safe = T.where(pos, x, 1.0)
    v = _mul(_mul(safe, T.unary(Opcode.TLOG, safe)), -1.0)
    rest = T.where(T.compare(Opcode.TCMP_EQ, x, 0.0), _mul(x, 0.0), -math.inf)
    return T.where(pos, v, T.where(T.compare(Opcode.TCMP_NE, x, x), x, rest))


ENTRIES = [
    (_unary(Opcode.TERFC), ["erfc"]), (_unary(Opcode.TERFINV), ["erfinv"]),
    (_unary(Opcode.TLGAMMA), ["lgamma", "gammaln"]), (_unary(Opcode.TDIGAMMA), ["digamma", "psi"]),
    (polygamma, ["polygamma"]), (mvlgamma, ["mvlgamma", "multigammaln"]),
    (ndtr, ["ndtr"]), (log_ndtr, ["log_ndtr"]), (entr, ["entr"]),
]
