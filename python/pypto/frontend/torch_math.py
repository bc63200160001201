"""torch's element-wise math, bitwise, sorting and similarity functions on traced tensors, with
torch's names, arguments and return types, as compositions of PTO instructions (torch_functions
reads ENTRIES). The formulas are chosen to keep torch's accuracy at the edges: sinh through
expm1 near 0, asinh/acosh through log1p and a log for huge arguments, logaddexp through log1p of
a non-positive exponent, and the special values (NaN, ±inf, 0) where torch defines them."""
from __future__ import annotations

import math
import sys

from .. import dtypes as _dt
from ..errors import PyptoError
from . import composite_ops as C
from . import index_ops as X
from . import math_ops as M
from . import tensor_ops as T
from .values import Opcode, TensorValue

LN2 = math.log(2.0)


def _torch():
    return sys.modules["torch"]


def no_out(out):
    if out is not None:
        raise PyptoError("out= is not supported inside a kernel; assign the result instead (y[...] = f(x))")


def _binary(op):
    def f(input, other, *, out=None):  # noqa: A002
        no_out(out)
        return T.binary(op, input, other)
    return f


def _fn(impl):
    """A one-argument torch function: impl(input), refusing out=."""
    def f(input, *, out=None):  # noqa: A002
        no_out(out)
        return impl(input)
    return f


def _add(a, b):
    return T.binary(Opcode.TADD, a, b)


def _sub(a, b):
    return T.binary(Opcode.TSUB, a, b)


def _mul(a, b):
    return T.binary(Opcode.TMUL, a, b)


def _div(a, b):
    return T.binary(Opcode.TDIV, a, b)


def _u(op, x):
    return T.unary(op, x)


def _eq(a, b):
    return T.compare(Opcode.TCMP_EQ, a, b)


def _and(a, b):
    return T.logical(Opcode.TAND, a, b)


def as_float(x):
    """Integer and bool tensors compute in float32, as torch's float functions of them do."""
    return T.cast(x, _dt.float32) if isinstance(x, TensorValue) and not x.pdtype.is_floating_point else x


# --- hyperbolic and inverse trigonometric functions ----------------------------------------------

def sinh(x):
    x = as_float(x)  # (e^x - e^-x) / 2 through expm1: exact near 0, where e^x - e^-x cancels
    return _mul(_sub(_u(Opcode.TEXPM1, x), _u(Opcode.TEXPM1, _u(Opcode.TNEG, x))), 0.5)


def cosh(x):
    x = as_float(x)
    return _mul(_add(_u(Opcode.TEXP, x), _u(Opcode.TEXP, _u(Opcode.TNEG, x))), 0.5)


def asinh(x):
    """sign(x) log1p(|x| + x^2 / (1 + sqrt(1 + x^2))); log(2|x|) past 2^28, where x^2 would lose it."""
    x = as_float(x)
    a = _u(Opcode.TABS, x)
    a2 = _mul(a, a)
    small = _u(Opcode.TLOG1P, _add(a, _div(a2, _add(_u(Opcode.TSQRT, _add(a2, 1.0)), 1.0))))
    big = _add(_u(Opcode.TLOG, a), LN2)
    r = T.where(T.compare(Opcode.TCMP_GT, a, 2.0 ** 28), big, small)
    return T.binary(Opcode.TCOPYSIGN, r, x)


def acosh(x):
    """log1p(t + sqrt(t (t + 2))) with t = x - 1; log(2x) past 2^28; NaN below 1."""
    x = as_float(x)
    t = _sub(x, 1.0)
    small = _u(Opcode.TLOG1P, _add(t, _u(Opcode.TSQRT, _mul(t, _add(t, 2.0)))))
    big = _add(_u(Opcode.TLOG, x), LN2)
    return T.where(T.compare(Opcode.TCMP_GT, x, 2.0 ** 28), big, small)


def atanh(x):
    """log1p(2x / (1 - x)) / 2: ±inf at ±1, NaN past them."""
    x = as_float(x)
    return _mul(_u(Opcode.TLOG1P, _div(_mul(x, 2.0), T.binary(Opcode.TSUB, 1.0, x))), 0.5)


def atan(x):
    return T.binary(Opcode.TATAN2, as_float(x), 1.0)


def asin(x):
    x = as_float(x)  # atan2(x, sqrt((1 - x)(1 + x))): NaN outside [-1, 1], from the sqrt
    return T.binary(Opcode.TATAN2, x, _u(Opcode.TSQRT, _mul(T.binary(Opcode.TSUB, 1.0, x), _add(x, 1.0))))


def acos(x):
    x = as_float(x)
    return T.binary(Opcode.TATAN2, _u(Opcode.TSQRT, _mul(T.binary(Opcode.TSUB, 1.0, x), _add(x, 1.0))), x)


def sinc(x):
    x = as_float(x)
    px = _mul(x, math.pi)
    return T.where(_eq(x, 0.0), 1.0, _div(_u(Opcode.TSIN, px), px))


# --- other element-wise functions ------------------------------------------------------------

def addcmul(input, tensor1, tensor2, *, value=1, out=None):  # noqa: A002
    no_out(out)
    p = _mul(tensor1, tensor2)
    return _add(input, p if value == 1 else _mul(p, value))


def addcdiv(input, tensor1, tensor2, *, value=1, out=None):  # noqa: A002
    no_out(out)
    q = _div(tensor1, tensor2)
    return _add(input, q if value == 1 else _mul(q, value))


def lerp(input, end, weight, *, out=None):  # noqa: A002
    """input + weight (end - input), as torch: from the end where weight >= 0.5 (exact at 1)."""
    no_out(out)
    d = _sub(end, input)
    if isinstance(weight, (int, float)):
        w = float(weight)
        return _add(input, _mul(d, w)) if w < 0.5 else _sub(end, _mul(d, 1.0 - w))
    lo = _add(input, _mul(d, weight))
    hi = _sub(end, _mul(d, T.binary(Opcode.TSUB, 1.0, weight)))
    return T.where(T.compare(Opcode.TCMP_LT, T.unary(Opcode.TABS, weight), 0.5), lo, hi)


def frac(x, *, out=None):
    no_out(out)
    return _sub(x, _u(Opcode.TTRUNC, x))


def deg2rad(x, *, out=None):
    no_out(out)
    return _mul(as_float(x), math.pi / 180.0)


def rad2deg(x, *, out=None):
    no_out(out)
    return _mul(as_float(x), 180.0 / math.pi)


def angle(input, *, out=None):  # noqa: A002
    """The argument of a real number: pi for x < 0, else 0; NaN stays NaN (as torch)."""
    no_out(out)
    x = as_float(input)
    arg = T.where(T.compare(Opcode.TCMP_LT, x, 0.0), math.pi, _mul(x, 0.0))
    return T.where(T.compare(Opcode.TCMP_NE, x, x), x, T.unary(Opcode.TABS, arg))  # abs: -0.0 * 0 -> 0


def ldexp(input, other, *, out=None):  # noqa: A002
    """input * 2^other, as torch computes it."""
    no_out(out)
    return _mul(as_float(input), T.unary(Opcode.TEXP2, as_float(other)))


def xlogy(input, other, *, out=None):  # noqa: A002
    """input * log(other), and 0 where input is 0 (unless other is NaN), as torch."""
    no_out(out)
    keep_zero = _and(_eq(input, 0.0), T.compare(Opcode.TCMP_EQ, other, other))
    return T.where(keep_zero, 0.0, _mul(input, _u(Opcode.TLOG, other)))


def _logaddexp(a, b, log1p_of_exp):
    m = T.binary(Opcode.TMAX, a, b)
    d = _u(Opcode.TNEG, _u(Opcode.TABS, _sub(a, b)))
    # Equal operands (±inf included, where a - b is NaN): max + log(2) in the function's base.
    return T.where(_eq(a, b), _add(a, log1p_of_exp(None)), _add(m, log1p_of_exp(d)))


def logaddexp(input, other, *, out=None):  # noqa: A002
    no_out(out)
    return _logaddexp(as_float(input), other, lambda d: LN2 if d is None else _u(Opcode.TLOG1P, _u(Opcode.TEXP, d)))


def logaddexp2(input, other, *, out=None):  # noqa: A002
    no_out(out)
    return _logaddexp(as_float(input), other,
                      lambda d: 1.0 if d is None else _mul(_u(Opcode.TLOG1P, _u(Opcode.TEXP2, d)), 1.0 / LN2))


def logit(input, eps=None, *, out=None):  # noqa: A002
    no_out(out)
    x = as_float(input)
    if eps is not None:
        x = T.clamp(x, float(eps), 1.0 - float(eps))
    return _u(Opcode.TLOG, _div(x, T.binary(Opcode.TSUB, 1.0, x)))


def nan_to_num(input, nan=0.0, posinf=None, neginf=None, *, out=None):  # noqa: A002
    no_out(out)
    if not input.pdtype.is_floating_point:
        return input
    big = _torch().finfo(input.dtype).max if posinf is None else posinf
    small = -_torch().finfo(input.dtype).max if neginf is None else neginf
    x = T.where(M.isnan(input), float(nan), input)
    x = T.where(_eq(x, math.inf), float(big), x)
    return T.where(_eq(x, -math.inf), float(small), x)


def isclose(input, other, rtol=1e-05, atol=1e-08, equal_nan=False):  # noqa: A002
    """|a - b| <= atol + rtol |b| for finite operands, or a == b (equal infinities), or both NaN
    with equal_nan, as torch."""
    close = T.compare(Opcode.TCMP_LE, _u(Opcode.TABS, _sub(input, other)),
                      _add(_mul(_u(Opcode.TABS, other), float(rtol)), float(atol)))
    # An infinite operand is close only to the same infinity (its tolerance would be infinite).
    close = _and(close, _and(M.isfinite(input), M.isfinite(other)))
    close = T.logical(Opcode.TOR, close, _eq(input, other))
    if equal_nan:
        close = T.logical(Opcode.TOR, close, _and(M.isnan(input), M.isnan(other)))
    return close


def softshrink(input, lambd=0.5):  # noqa: A002
    """0 inside [-lambd, lambd], else x moved lambd towards 0; NaN stays NaN (the test is false)."""
    inside = T.compare(Opcode.TCMP_LE, _u(Opcode.TABS, input), lambd)
    return T.where(inside, 0.0, _sub(input, T.binary(Opcode.TCOPYSIGN, float(lambd), input)))


def hardshrink(input, lambd=0.5):  # noqa: A002
    return T.where(T.compare(Opcode.TCMP_LE, _u(Opcode.TABS, input), lambd), 0.0, input)


# --- reductions that skip NaN, dot products, similarity ----------------------------------------

def _dims(dim):
    return None if dim is None or dim == () or dim == [] else dim


def nansum(input, dim=None, keepdim=False, *, dtype=None):  # noqa: A002
    x = T.cast(input, dtype) if dtype is not None else input
    return T.reduce("sum", T.where(M.isnan(x), 0.0, x), _dims(dim), keepdim)


def nanmean(input, dim=None, keepdim=False, *, dtype=None):  # noqa: A002
    x = T.cast(input, dtype) if dtype is not None else input
    count = T.reduce("sum", T.cast(T.logical_not(M.isnan(x)), x.pdtype), _dims(dim), keepdim)
    return _div(nansum(x, dim, keepdim), count)


def dot(input, other, *, out=None):  # noqa: A002
    no_out(out)
    if input.ndim != 1 or other.ndim != 1:
        raise PyptoError(f"dot: needs two 1-D tensors, got {input.ndim}-D and {other.ndim}-D")
    return T.reduce("sum", _mul(input, other), None, False)


def mv(input, vec, *, out=None):  # noqa: A002
    no_out(out)
    if input.ndim != 2 or vec.ndim != 1:
        raise PyptoError(f"mv: needs a 2-D matrix and a 1-D vector, got {input.ndim}-D and {vec.ndim}-D")
    return T.matmul(input, vec)


def cosine_similarity(x1, x2, dim=1, eps=1e-8):
    """sum(x1 x2) / sqrt(max(|x1|^2 |x2|^2, eps^2)) along dim, as torch."""
    w12 = T.reduce("sum", _mul(x1, x2), dim, False)
    w1 = T.reduce("sum", _mul(x1, x1), dim, False)
    w2 = T.reduce("sum", _mul(x2, x2), dim, False)
    return _div(w12, _u(Opcode.TSQRT, T.clamp(_mul(w1, w2), float(eps) ** 2, None)))


def pairwise_distance(x1, x2, p=2.0, eps=1e-6, keepdim=False):
    d = _add(_sub(x1, x2), float(eps))
    if p == 2:
        return T.norm_sqrt(T.reduce("sum", _mul(d, d), -1, keepdim))
    if p == 1:
        return T.reduce("sum", _u(Opcode.TABS, d), -1, keepdim)
    if p == math.inf:
        return T.reduce("max", _u(Opcode.TABS, d), -1, keepdim)
    return T.power(T.reduce("sum", T.power(_u(Opcode.TABS, d), float(p)), -1, keepdim), 1.0 / float(p))


def softmin(input, dim=None, _stacklevel=3, dtype=None):  # noqa: A002
    if dim is None:
        raise PyptoError("softmin: give dim (torch's implicit dim choice is deprecated)")
    x = T.cast(input, dtype) if dtype is not None else input
    return T.softmax(_u(Opcode.TNEG, x), dim)


# --- sorting and running extremes, with torch's return types -----------------------------------

def prod(input, dim=None, keepdim=False, *, dtype=None, out=None):  # noqa: A002
    no_out(out)
    return C.prod(input, dim, keepdim, dtype)


def sort(input, dim=-1, descending=False, stable=False, *, out=None):  # noqa: A002
    no_out(out)
    return _torch().return_types.sort(C.sort(input, dim, descending))


def argsort(input, dim=-1, descending=False, stable=False):  # noqa: A002
    return C.argsort(input, dim, descending)


def msort(input, *, out=None):  # noqa: A002
    no_out(out)
    return C.sort(input, 0, False)[0]


def topk(input, k, dim=-1, largest=True, sorted=True, *, out=None):  # noqa: A001,A002
    no_out(out)
    return _torch().return_types.topk(C.topk(input, k, dim, largest, sorted))


def cummax(input, dim, *, out=None):  # noqa: A002
    no_out(out)
    return _torch().return_types.cummax(C.cummax(input, dim))


def cummin(input, dim, *, out=None):  # noqa: A002
    no_out(out)
    return _torch().return_types.cummin(C.cummin(input, dim))


# --- shape helpers -------------------------------------------------------------------------------

def movedim(input, source, destination):  # noqa: A002
    n = input.ndim
    src = [s % n for s in (source if isinstance(source, (list, tuple)) else [source])]
    dst = [d % n for d in (destination if isinstance(destination, (list, tuple)) else [destination])]
    if len(src) != len(dst):
        raise PyptoError(f"movedim: {len(src)} source dims but {len(dst)} destinations")
    order = [None] * n
    for s, d in zip(src, dst):
        order[d] = s
    rest = iter(i for i in range(n) if i not in src)
    return T.permute(input, [o if o is not None else next(rest) for o in order])


def numel(input):  # noqa: A002
    return math.prod(input.shape)


ENTRIES = [
    (_binary(Opcode.TATAN2), ["atan2", "arctan2"]), (_binary(Opcode.THYPOT), ["hypot"]),
    (_binary(Opcode.TCOPYSIGN), ["copysign"]), (_binary(Opcode.TFMOD), ["fmod"]),
    (lambda a, b, **k: M.gcd(a, b), ["gcd"]),
    (lambda a, b, **k: T.bitwise(Opcode.TBAND, a, b), ["bitwise_and"]),
    (lambda a, b, **k: T.bitwise(Opcode.TBOR, a, b), ["bitwise_or"]),
    (lambda a, b, **k: T.bitwise(Opcode.TBXOR, a, b), ["bitwise_xor"]),
    (lambda a, b, **k: T.bitwise(Opcode.TSHL, a, b), ["bitwise_left_shift"]),
    (lambda a, b, **k: T.bitwise(Opcode.TSHR, a, b), ["bitwise_right_shift"]),
    (_fn(T.bitwise_not), ["bitwise_not"]), (lambda a, b, **k: M.logical_xor(a, b), ["logical_xor"]),
    (M.isnan, ["isnan"]), (M.isinf, ["isinf"]), (M.isfinite, ["isfinite"]), (M.signbit, ["signbit"]),
    (lambda x: _eq(x, math.inf), ["isposinf"]), (lambda x: _eq(x, -math.inf), ["isneginf"]),
    (lambda x, decimals=0, **k: M.round_(x, decimals), ["round"]), (_fn(lambda x: _u(Opcode.TSIGN, x)), ["sgn"]),
    (_fn(sinh), ["sinh"]), (_fn(cosh), ["cosh"]), (_fn(asinh), ["asinh", "arcsinh"]),
    (_fn(acosh), ["acosh", "arccosh"]), (_fn(atanh), ["atanh", "arctanh"]), (_fn(atan), ["atan", "arctan"]),
    (_fn(asin), ["asin", "arcsin"]), (_fn(acos), ["acos", "arccos"]), (_fn(sinc), ["sinc"]),
    (addcmul, ["addcmul"]), (addcdiv, ["addcdiv"]), (lerp, ["lerp"]), (frac, ["frac"]),
    (deg2rad, ["deg2rad"]), (rad2deg, ["rad2deg"]), (angle, ["angle"]), (ldexp, ["ldexp"]), (xlogy, ["xlogy"]), (logaddexp, ["logaddexp"]),
    (logaddexp2, ["logaddexp2"]), (logit, ["logit"]), (nan_to_num, ["nan_to_num"]), (isclose, ["isclose"]),
    (softshrink, ["softshrink"]), (hardshrink, ["hardshrink"]), (softmin, ["softmin"]),
    (nansum, ["nansum"]), (nanmean, ["nanmean"]), (dot, ["dot", "vdot", "inner"]), (mv, ["mv"]),
    (cosine_similarity, ["cosine_similarity"]), (pairwise_distance, ["pairwise_distance"]),
    (prod, ["prod"]), (sort, ["sort"]), (argsort, ["argsort"]), (msort, ["msort"]), (topk, ["topk"]),
    (cummax, ["cummax"]), (cummin, ["cummin"]),
    (movedim, ["movedim", "moveaxis"]), (lambda x: X.flip(x, [1]), ["fliplr"]),
    (lambda x: X.flip(x, [0]), ["flipud"]), (numel, ["numel"]),
]
