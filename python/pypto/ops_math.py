"""Public element-wise math: trigonometric, exponential and rounding functions, remainders,
activations, predicates, and the torch / NumPy / vendor spellings of the existing ops."""
from __future__ import annotations

import builtins
import math

from . import _C
from . import ops as _ops
from .frontend import math_ops as M
from .frontend import tensor_ops as T
from .ops import Op, make_binary, make_op, make_unary


def _named(f, name):
    f.__name__ = f.__qualname__ = name
    return f


def _elem2(name):
    """Constant folding by the binary element function `name` of include/pto/elem.hpp."""
    return lambda a, b: _C.elem_binary(name, float(a), float(b))


sin = _named(make_unary(Op.TSIN, _ops._elem("sin"), None, "Elementwise sine."), "sin")
cos = _named(make_unary(Op.TCOS, _ops._elem("cos"), None, "Elementwise cosine."), "cos")
tan = _named(make_unary(Op.TTAN, _ops._elem("tan"), None, "Elementwise tangent."), "tan")
exp2 = _named(make_unary(Op.TEXP2, _ops._elem("exp2"), None, "Elementwise 2**x."), "exp2")
expm1 = _named(make_unary(Op.TEXPM1, _ops._elem("expm1"), None, "exp(x) - 1, accurate near 0."), "expm1")
log2 = _named(make_unary(Op.TLOG2, _ops._elem("log2"), None, "Base-2 logarithm."), "log2")
log10 = _named(make_unary(Op.TLOG10, _ops._elem("log10"), None, "Base-10 logarithm."), "log10")
log1p = _named(make_unary(Op.TLOG1P, _ops._elem("log1p"), None, "log(1 + x), accurate near 0."), "log1p")
cbrt = _named(make_unary(Op.TCBRT, _ops._elem("cbrt"), None, "Real cube root."), "cbrt")
erfc = _named(make_unary(Op.TERFC, _ops._elem("erfc"), None, "1 - erf(x), accurate in the tail."), "erfc")
erfinv = _named(make_unary(Op.TERFINV, _ops._elem("erfinv"), None,
                           "The inverse of erf on (-1, 1): +-inf at +-1, NaN beyond."), "erfinv")
lgamma = _named(make_unary(Op.TLGAMMA, _ops._elem("lgamma"), None,
                           "log |Gamma(x)|; +inf at 0, the negative integers and +-inf."), "lgamma")
digamma = _named(make_unary(Op.TDIGAMMA, _ops._elem("digamma"), None,
                            "d/dx lgamma(x); NaN at the negative integers, -inf at +0."), "digamma")
trigamma = _named(make_unary(Op.TTRIGAMMA, _ops._elem("trigamma"), None,
                             "d/dx digamma(x) (torch.polygamma(1, x)); +inf at the poles."), "trigamma")
ceil = _named(make_unary(Op.TCEIL, _ops._keep_int("ceil", lambda x: x), None, "Elementwise ceiling (integers unchanged)."), "ceil")
trunc = _named(make_unary(Op.TTRUNC, _ops._keep_int("trunc", lambda x: x), None, "Round toward zero (integers unchanged)."), "trunc")
sign = _named(make_unary(Op.TSIGN, _ops._keep_int("sign", lambda x: (x > 0) - (x < 0)), None,
                         "-1, 0 or 1; sign(NaN) == 0, as torch.sign (NumPy gives NaN)."), "sign")


@make_op(M.round_, lambda x, decimals=0: builtins.round(x, decimals))
def round(x, decimals=0):  # noqa: A001
    """Round to `decimals` places, halves to even (as torch.round): round(2.5) == 2."""


@make_binary(Op.TATAN2, _elem2("atan2"))
def atan2(a, b):
    """The angle of (b, a): atan(a / b) in the right quadrant, in [-pi, pi]."""


@make_binary(Op.THYPOT, _elem2("hypot"))
def hypot(a, b):
    """sqrt(a**2 + b**2) without overflow."""


@make_binary(Op.TCOPYSIGN, _elem2("copysign"))
def copysign(a, b):
    """|a| with the sign of b."""


@make_binary(Op.TFMOD, _elem2("fmod"))
def fmod(a, b):
    """Remainder of truncating division (the sign of a), as C fmod and torch.fmod."""


@make_binary(Op.TREM, lambda a, b: a % b)
def remainder(a, b):
    """Remainder of floor division (the sign of b), as Python % and torch.remainder."""


@make_binary(Op.TFLOORDIV, lambda a, b: a // b)
def floor_divide(a, b):
    """Floor division, as Python //."""


@make_op(M.gcd, math.gcd)
def gcd(a, b):
    """Greatest common divisor of integer tensors (gcd(0, 0) == 0)."""


@make_op(M.ceil_div, lambda a, b: -(-a // b))
def ceil_div(a, b):
    """ceil(a / b) for integers."""


@make_op(M.softplus)
def softplus(x, beta=1.0, threshold=20.0):
    """log(1 + exp(beta * x)) / beta; x itself where beta * x > threshold."""


@make_op(M.mish)
def mish(x):
    """x * tanh(softplus(x))."""


@make_op(M.hardswish)
def hardswish(x):
    """x * relu6(x + 3) / 6."""


@make_op(M.hardsigmoid)
def hardsigmoid(x):
    """relu6(x + 3) / 6."""


@make_op(M.leaky_relu)
def leaky_relu(x, negative_slope=0.01):
    """x where x > 0, else negative_slope * x."""


lrelu = leaky_relu


@make_op(M.prelu)
def prelu(x, weight):
    """x where x > 0, else weight * x (a weight of C values applies along dimension 1)."""


@make_op(M.isnan, math.isnan)
def isnan(x):
    """True where x is NaN."""


@make_op(M.isinf, math.isinf)
def isinf(x):
    """True where x is +inf or -inf."""


@make_op(M.isfinite, math.isfinite)
def isfinite(x):
    """True where x is neither inf nor NaN."""


@make_op(M.signbit, lambda x: math.copysign(1.0, x) < 0)
def signbit(x):
    """True where the sign bit is set (negative numbers and -0.0)."""


@make_op(lambda a, b: T.binary(Op.TAND, a, b), lambda a, b: bool(a) and bool(b))
def logical_and(a, b):
    """a != 0 and b != 0 (bool)."""


@make_op(lambda a, b: T.binary(Op.TOR, a, b), lambda a, b: bool(a) or bool(b))
def logical_or(a, b):
    """a != 0 or b != 0 (bool)."""


@make_op(M.logical_xor, lambda a, b: bool(a) != bool(b))
def logical_xor(a, b):
    """(a != 0) != (b != 0) (bool)."""


@make_op(lambda x: T.unary(Op.TNOT, x), lambda x: not x)
def logical_not(x):
    """x == 0 (bool)."""


@make_op(lambda a, b: T.bitwise(Op.TBAND, a, b), lambda a, b: a & b)
def bitwise_and(a, b):
    """a & b on integer tensors; logical and on bool tensors."""


@make_op(lambda a, b: T.bitwise(Op.TBOR, a, b), lambda a, b: a | b)
def bitwise_or(a, b):
    """a | b on integer tensors; logical or on bool tensors."""


@make_op(lambda a, b: T.bitwise(Op.TBXOR, a, b), lambda a, b: a ^ b)
def bitwise_xor(a, b):
    """a ^ b on integer tensors; logical xor on bool tensors."""


@make_op(T.bitwise_not, lambda x: not x if isinstance(x, bool) else ~x)
def bitwise_not(x):
    """~x on integer tensors (two's complement); logical not on bool tensors."""


@make_op(lambda a, b: T.bitwise(Op.TSHL, a, b), lambda a, b: a << b)
def left_shift(a, b):
    """a << b; 0 where b < 0 or b >= the bit width (as torch and NumPy)."""


@make_op(lambda a, b: T.bitwise(Op.TSHR, a, b), lambda a, b: a >> b)
def right_shift(a, b):
    """a >> b, arithmetic; the sign fill (0 or -1) where b < 0 or b >= the bit width."""


# Other spellings of the same operations (torch, NumPy, the vendor's PyPTO).
clip = _ops.clamp
greater, greater_equal, less, less_equal = _ops.gt, _ops.ge, _ops.lt, _ops.le
equal, not_equal = _ops.eq, _ops.ne
negative, absolute = _ops.neg, _ops.abs
arctan2, fix, mod = atan2, trunc, remainder
bitwise_left_shift, bitwise_right_shift = left_shift, right_shift

__all__ = ["sin", "cos", "tan", "exp2", "expm1", "log2", "log10", "log1p", "cbrt", "erfc", "erfinv", "lgamma",
           "digamma", "trigamma", "ceil", "trunc", "sign",
           "round", "atan2", "hypot", "copysign", "fmod", "remainder", "floor_divide", "gcd", "ceil_div",
           "softplus", "mish", "hardswish", "hardsigmoid", "leaky_relu", "lrelu", "prelu", "isnan", "isinf",
           "isfinite", "signbit", "logical_and", "logical_or", "logical_xor", "logical_not", "clip", "greater",
           "greater_equal", "less", "less_equal", "equal", "not_equal", "negative", "absolute", "arctan2",
           "fix", "mod", "bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not", "left_shift", "right_shift",
           "bitwise_left_shift", "bitwise_right_shift"]
