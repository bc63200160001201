"""Shared helpers for the ISA tests (test_isa_*.py): building ISA text programs, random inputs,
NumPy references and comparisons. Holds no tests itself."""
import math

import numpy as np

import pypto
from pypto import _C, isa

from isa_edge_util import SPECIAL_UNARY

PyptoError = _C.PyptoError
RNG = np.random.default_rng(1234)

NP = {"f32": np.float32, "f64": np.float64, "f16": np.float16, "i32": np.int32, "i64": np.int64,
      "bool": np.bool_}


def rand(shape, lo=-2.0, hi=2.0, dtype=np.float32):
    """Random values in [lo, hi], never (near) zero: |x| >= 0.05."""
    x = RNG.uniform(lo, hi, size=shape)
    small = np.abs(x) < 0.05
    x[small] = np.where(x[small] < 0, -0.5, 0.5) if lo < 0 else 0.5 * (lo + hi)
    return x.astype(dtype)


def rand_int(shape, lo, hi, dtype=np.int32):
    return RNG.integers(lo, hi, size=shape).astype(dtype)


def func(params, body, name="k"):
    """ISA text: params is a list of declarations ("%x: f32[4, 4]"), body a list of lines."""
    lines = [f"func @{name}({', '.join(params)}) {{"] + ["  " + b for b in body] + ["}"]
    return "\n".join(lines) + "\n"


def run(text, backend="interp", verify=True, **inputs):
    """Parse, verify at tile level and run; returns the outputs. verify=False for programs that
    are deliberately wrong in a way the verifier catches statically."""
    prog = isa.parse(text)
    if verify:
        isa.verify(prog, "tile")
    return isa.run(prog, inputs, backend=backend)


def rel_err(got, ref):
    got = np.asarray(got, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    assert got.shape == ref.shape, (got.shape, ref.shape)
    assert not np.isnan(got).any(), "unwritten (NaN) elements in the output"
    denom = np.linalg.norm(ref)
    return np.linalg.norm(got - ref) / (denom if denom > 0 else 1.0)


def check(got, ref, tol=1e-6):
    err = rel_err(got, ref)
    assert err <= tol, f"relative error {err:.3g} > {tol:.3g}"


def check_region(got, ref, rows, cols, tol=1e-6):
    """The [:rows, :cols] corner matches ref; everything else was left unwritten (NaN)."""
    got = np.asarray(got, dtype=np.float64)
    check(got[:rows, :cols], ref, tol)
    mask = np.ones(got.shape, bool)
    mask[:rows, :cols] = False
    assert np.isnan(got[mask]).all(), "elements outside the valid region were written"


erf = np.vectorize(math.erf)


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


UNARY_REF = {
    "TMOV": lambda x: x,
    "TNEG": lambda x: -x,
    "TABS": np.abs,
    "TEXP": np.exp,
    "TLOG": np.log,
    "TSQRT": np.sqrt,
    "TRSQRT": lambda x: 1.0 / np.sqrt(x),
    "TRECIP": lambda x: 1.0 / x,
    "TRELU": lambda x: np.maximum(x, 0),
    "TTANH": np.tanh,
    "TSIGMOID": sigmoid,
    "TERF": erf,
    "TGELU": lambda x: x * 0.5 * (1 + erf(x / math.sqrt(2))),
    "TGELU_TANH": lambda x: 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3))),
    "TSILU": lambda x: x * sigmoid(x),
    "TFLOOR": np.floor,
    "TNOT": lambda x: (x == 0).astype(np.float64),
    "TSIN": np.sin,
    "TCOS": np.cos,
    "TTAN": np.tan,
    "TEXP2": np.exp2,
    "TEXPM1": np.expm1,
    "TLOG2": np.log2,
    "TLOG10": np.log10,
    "TLOG1P": np.log1p,
    "TCBRT": np.cbrt,
    "TCEIL": np.ceil,
    "TROUND": np.round,  # halves to even, as the instruction
    "TTRUNC": np.trunc,
    "TSIGN": lambda x: np.where(np.isnan(x), 0, np.sign(x)).astype(np.asarray(x).dtype),  # torch's NaN -> 0
    **{op: np.vectorize(SPECIAL_UNARY[op], otypes=[np.float64])
       for op in ("TERFC", "TERFINV", "TLGAMMA", "TDIGAMMA", "TTRIGAMMA")},
}
# Inputs inside each function's domain.
UNARY_DOMAIN = {"TLOG": (0.1, 4.0), "TSQRT": (0.1, 4.0), "TRSQRT": (0.1, 4.0), "TLOG2": (0.1, 4.0),
                "TLOG10": (0.1, 4.0), "TLOG1P": (-0.9, 3.0), "TTAN": (-1.2, 1.2),
                "TERFINV": (-0.99, 0.99), "TLGAMMA": (0.1, 4.0), "TDIGAMMA": (0.1, 4.0), "TTRIGAMMA": (0.1, 4.0)}

BINARY_REF = {
    "TADD": np.add,
    "TSUB": np.subtract,
    "TMUL": np.multiply,
    "TDIV": np.divide,
    "TMAX": np.maximum,
    "TMIN": np.minimum,
    "TPOW": np.power,
    "TAND": lambda a, b: ((a != 0) & (b != 0)).astype(np.float64),
    "TOR": lambda a, b: ((a != 0) | (b != 0)).astype(np.float64),
    "TCMP_LT": lambda a, b: (a < b).astype(np.float64),
    "TCMP_LE": lambda a, b: (a <= b).astype(np.float64),
    "TCMP_GT": lambda a, b: (a > b).astype(np.float64),
    "TCMP_GE": lambda a, b: (a >= b).astype(np.float64),
    "TCMP_EQ": lambda a, b: (a == b).astype(np.float64),
    "TCMP_NE": lambda a, b: (a != b).astype(np.float64),
    "TATAN2": np.arctan2,
    "THYPOT": np.hypot,
    "TCOPYSIGN": np.copysign,
    "TFMOD": np.fmod,
    "TREM": np.remainder,
    "TFLOORDIV": np.floor_divide,
}
# Integer-only instructions, tested on integer tiles (test_isa_interp.py, test_isa_differential.py).
INT_BINARY_REF = {"TGCD": np.gcd}


def binary_inputs(op, shape_a, shape_b):
    """Inputs for a binary op: positive bases for TPOW, 0/1 for logic, ties for comparisons."""
    if op == "TPOW":
        return rand(shape_a, 0.5, 2.0), rand(shape_b, -2.0, 2.0)
    if op in ("TAND", "TOR"):
        return (rand_int(shape_a, 0, 2).astype(np.float32), rand_int(shape_b, 0, 2).astype(np.float32))
    if op.startswith("TCMP"):
        return (rand_int(shape_a, -2, 3).astype(np.float32), rand_int(shape_b, -2, 3).astype(np.float32))
    return rand(shape_a), rand(shape_b)


def scalar_text(v):
    """An f32 literal for a Python float."""
    return repr(float(np.float32(v))) + "f"
