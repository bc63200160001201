"""Tracing implementations of the element-wise math composites: activations, predicates and
integer helpers built from one or a few PTO instructions (each a builder call)."""
from __future__ import annotations

import math

from ..errors import PyptoError
from .tensor_ops import find_tracer, binary, compare, hardtanh, tensor_of, unary, where
from .values import Opcode, TensorValue


def softplus(x, beta=1.0, threshold=20.0):
    """log(1 + exp(beta x)) / beta, and x itself where beta x > threshold (as torch)."""
    bx = binary(Opcode.TMUL, x, float(beta)) if beta != 1 else x
    soft = unary(Opcode.TLOG1P, unary(Opcode.TEXP, bx))
    if beta != 1:
        soft = binary(Opcode.TDIV, soft, float(beta))
    return where(compare(Opcode.TCMP_GT, bx, float(threshold)), x, soft)


def mish(x):
    return binary(Opcode.TMUL, x, unary(Opcode.TTANH, softplus(x)))


def hardswish(x):  # (hardtanh: torch's gradient at -3 and 3)
    return binary(Opcode.TMUL, x, binary(Opcode.TMUL, hardtanh(binary(Opcode.TADD, x, 3.0), 0.0, 6.0), 1.0 / 6.0))


def hardsigmoid(x):  # (hardtanh: no gradient at -3 and 3, as torch)
    return binary(Opcode.TMUL, hardtanh(binary(Opcode.TADD, x, 3.0), 0.0, 6.0), 1.0 / 6.0)


def leaky_relu(x, negative_slope=0.01):
    return where(compare(Opcode.TCMP_GT, x, 0), x, binary(Opcode.TMUL, x, float(negative_slope)))


def prelu(x, weight):
    """x where x > 0, else weight * x; a weight of C values applies along dimension 1 (channels)."""
    tr = find_tracer(x, weight)
    v = tensor_of(tr, x)
    w = weight
    if isinstance(weight, TensorValue) and weight.ndim == 1 and weight.shape[0] != 1 and len(v.shape) >= 2:
        if weight.shape[0] != v.shape[1]:
            raise PyptoError(f"prelu: weight has {weight.shape[0]} values, the input {v.shape[1]} channels")
        w = weight.reshape((weight.shape[0],) + (1,) * (len(v.shape) - 2))
    return where(compare(Opcode.TCMP_GT, x, 0), x, binary(Opcode.TMUL, x, w))


def _int_operands(what, *xs):
    for x in xs:
        d = x.pdtype if isinstance(x, TensorValue) else None
        if d is not None and (d.is_floating_point or d.name == "bool"):
            raise PyptoError(f"{what}: needs integer tensors, got {d.name}")
        if isinstance(x, float):
            raise PyptoError(f"{what}: needs integers, got {x!r}")


def ceil_div(a, b):
    """ceil(a / b) for integers: -((-a) // b)."""
    _int_operands("ceil_div", a, b)
    return unary(Opcode.TNEG, binary(Opcode.TFLOORDIV, unary(Opcode.TNEG, a) if isinstance(a, TensorValue) else -a, b))


def gcd(a, b):
    _int_operands("gcd", a, b)
    return binary(Opcode.TGCD, a, b)


def isnan(x):
    return compare(Opcode.TCMP_NE, x, x)


def isinf(x):
    if isinstance(x, TensorValue) and not x.dtype.is_floating_point:
        return compare(Opcode.TCMP_NE, x, x)  # all False, in x's shape
    return compare(Opcode.TCMP_EQ, unary(Opcode.TABS, x), math.inf)


def isfinite(x):
    if isinstance(x, TensorValue) and not x.dtype.is_floating_point:
        return compare(Opcode.TCMP_EQ, x, x)  # all True
    return compare(Opcode.TCMP_LT, unary(Opcode.TABS, x), math.inf)


def signbit(x):
    """True where the sign bit is set (-0.0 and negative NaN included)."""
    if isinstance(x, TensorValue) and not x.dtype.is_floating_point:
        return compare(Opcode.TCMP_LT, x, 0)
    return compare(Opcode.TCMP_LT, binary(Opcode.TCOPYSIGN, 1.0, x), 0)


def round_(x, decimals=0):
    if decimals == 0:
        return unary(Opcode.TROUND, x)
    scale = 10.0 ** int(decimals)
    return binary(Opcode.TDIV, unary(Opcode.TROUND, binary(Opcode.TMUL, x, scale)), scale)


def logical_xor(a, b):
    return compare(Opcode.TCMP_NE, compare(Opcode.TCMP_NE, a, 0), compare(Opcode.TCMP_NE, b, 0))
