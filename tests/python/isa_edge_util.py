"""Edge-case inputs and NumPy references (float64 / exact integers) for the element semantics of
docs/isa.md §2, shared by the differential tests and the fuzz suite."""
import math

import numpy as np

import pypto

NP = {"f32": np.float32, "f64": np.float64, "i32": np.int32, "i64": np.int64, "bool": np.uint8, "i8": np.int8,
      "u8": np.uint8, "i16": np.int16}
NARROW = ("i8", "u8", "i16")  # storage types: an instruction computes them in i32 and wraps the result
INTS = ("i32", "i64") + NARROW
FLOATS = ("f32", "f64")


def special_values(dt):
    """Extremes a backend can get wrong: integer limits, +-inf, NaN, signed zeros, subnormals."""
    if dt in INTS:
        info = np.iinfo(NP[dt])
        return [info.min, info.max, info.min + 1, info.max - 1, -1, 0, 1, 2, -2, 7, -7]
    f = np.finfo(NP[dt])
    return [np.inf, -np.inf, np.nan, 0.0, -0.0, 1.0, -1.0, 0.5, -0.5, float(f.max), -float(f.max),
            float(f.tiny) / 4, -float(f.tiny) / 4, 1e30, -1e30, 3e9, -3e9, 1e19, -1e19, 2.5, -2.5]


def edge_array(rng, dt, shape, frac=0.5):
    """Random values of dtype `dt` (full integer range, or normal floats of varied scale) with a
    fraction `frac` replaced by special values."""
    n = int(np.prod(shape))
    if dt in INTS:
        info = np.iinfo(NP[dt])
        a = np.where(rng.random(n) < 0.5, rng.integers(-100, 100, n),
                     rng.integers(info.min, info.max, n, endpoint=True, dtype=np.int64)).astype(NP[dt])
    else:
        a = (rng.standard_normal(n) * 10.0 ** rng.integers(-3, 4, n)).astype(NP[dt])
    sv = special_values(dt)
    pick = rng.random(n) < frac
    a[pick] = np.array(sv).astype(NP[dt])[rng.integers(0, len(sv), int(pick.sum()))]
    return a.reshape(shape)


# ---- integer references (Python ints: exact, then wrapped to the dtype) -----------------------
def wrap(v, dt):
    info = np.iinfo(NP[dt])
    v &= (1 << info.bits) - 1
    return v - (1 << info.bits) if info.min < 0 and v >= 1 << (info.bits - 1) else v


def sat_int(x, dt):
    """float -> int: truncate toward zero, saturate, NaN -> 0."""
    info = np.iinfo(NP[dt])
    if np.isnan(x):
        return 0
    if x >= int(info.max) + 1:  # (Python compares a float with an int exactly)
        return int(info.max)
    if x <= int(info.min) - 1:
        return int(info.min)
    return int(np.trunc(x))


def int_div(a, b, dt):
    if b == 0:
        return 0
    q = abs(a) // abs(b)
    return wrap(q if (a < 0) == (b < 0) else -q, dt)


def int_pow(a, b, dt):
    if b < 0:
        return 1 if a == 1 else ((-1 if b % 2 else 1) if a == -1 else 0)
    return wrap(pow(a, b, 1 << 64), dt)


INT_BINARY = {
    "TADD": lambda a, b, dt: wrap(a + b, dt),
    "TSUB": lambda a, b, dt: wrap(a - b, dt),
    "TMUL": lambda a, b, dt: wrap(a * b, dt),
    "TDIV": int_div,
    "TMAX": lambda a, b, dt: max(a, b),
    "TMIN": lambda a, b, dt: min(a, b),
    "TPOW": int_pow,
    "TAND": lambda a, b, dt: int(a != 0 and b != 0),
    "TOR": lambda a, b, dt: int(a != 0 or b != 0),
}
INT_UNARY = {
    "TNEG": lambda a, dt: wrap(-a, dt),
    "TABS": lambda a, dt: wrap(abs(a), dt),
    "TRELU": lambda a, dt: max(a, 0),
    "TFLOOR": lambda a, dt: a,
    "TNOT": lambda a, dt: int(a == 0),
    "TSQRT": lambda a, dt: sat_int(np.sqrt(np.float64(a)), dt) if a >= 0 else 0,
    "TRECIP": lambda a, dt: sat_int(np.float64(1.0) / np.float64(a), dt) if a != 0 else sat_int(np.inf, dt),
}


def int_ref(fn, arrays, dt):
    flat = [np.asarray(a).astype(np.int64).ravel().tolist() for a in arrays]
    if dt in NARROW:  # computed in i32, then narrowed (wrapping)
        out = [wrap(fn(*vals, "i32"), dt) for vals in zip(*flat)]
    else:
        out = [fn(*vals, dt) for vals in zip(*flat)]
    return np.array(out, dtype=NP[dt]).reshape(np.shape(arrays[0]))


# ---- float references (float64, with the documented values at +-inf) --------------------------
def _gelu(x):
    from math import erfc, sqrt
    if np.isnan(x) or x == np.inf:
        return x
    return -0.0 if x < -40 else 0.5 * x * erfc(-x * 0.7071067811865476)


def _gelu_tanh(x):
    if np.isnan(x) or x == np.inf:
        return x
    if x < -40:
        return -0.0
    x = np.float64(x)
    with np.errstate(all="ignore"):
        u2 = 1.5957691216057308 * (x + 0.044715 * x * x * x)
        return x / (1.0 + np.exp(-u2))


def _silu(x):
    if np.isnan(x) or x == np.inf:
        return x
    with np.errstate(all="ignore"):
        return -0.0 if x < -800 else x / (1.0 + np.exp(-np.float64(x)))


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def _erf(x):
    from math import erf
    return x if np.isnan(x) else erf(x)


FLOAT_UNARY = {
    "TNEG": np.negative, "TABS": np.abs, "TEXP": np.exp, "TLOG": np.log, "TSQRT": np.sqrt,
    "TRSQRT": lambda x: 1.0 / np.sqrt(x), "TRECIP": lambda x: 1.0 / x,
    "TRELU": lambda x: np.where(x < 0, 0.0, x), "TTANH": np.tanh, "TSIGMOID": _sigmoid,
    "TERF": np.vectorize(_erf, otypes=[np.float64]), "TGELU": np.vectorize(_gelu, otypes=[np.float64]),
    "TGELU_TANH": np.vectorize(_gelu_tanh, otypes=[np.float64]),
    "TSILU": np.vectorize(_silu, otypes=[np.float64]), "TFLOOR": np.floor,
    "TNOT": lambda x: (x == 0).astype(np.float64),
}
FLOAT_BINARY = {
    "TADD": np.add, "TSUB": np.subtract, "TMUL": np.multiply, "TDIV": np.divide,
    "TMAX": np.maximum, "TMIN": np.minimum, "TPOW": np.power,
    "TAND": lambda a, b: ((a != 0) & (b != 0)).astype(np.float64),
    "TOR": lambda a, b: ((a != 0) | (b != 0)).astype(np.float64),
}
COMPARE = {"TCMP_LT": np.less, "TCMP_LE": np.less_equal, "TCMP_GT": np.greater,
           "TCMP_GE": np.greater_equal, "TCMP_EQ": np.equal, "TCMP_NE": np.not_equal}


def float_ref(fn, arrays, dt):
    with np.errstate(all="ignore"):
        r = fn(*[np.asarray(a, dtype=np.float64) for a in arrays])
        return np.asarray(r, dtype=np.float64).astype(NP[dt])


def mismatch(got, want, dt, rtol):
    """Indices where got differs from want: integers exactly; floats with the same NaN positions,
    the same infinities and zeros' values exactly, others within rtol (relative)."""
    got, want = np.asarray(got), np.asarray(want)
    if dt not in FLOATS:
        return np.argwhere(got != want)
    g, w = got.astype(np.float64), want.astype(np.float64)
    with np.errstate(all="ignore"):
        bad = np.isnan(g) != np.isnan(w)
        both = ~np.isnan(g) & ~np.isnan(w)
        exact = both & (~np.isfinite(w) | ~np.isfinite(g))
        bad |= exact & (g != w)
        close = both & ~exact
        tiny = float(np.finfo(NP[dt]).tiny)
        bad |= close & (np.abs(g - w) > rtol * np.abs(w) + tiny * 4)
    return np.argwhere(bad)


# ---- one program per dtype holding every elementwise, compare, convert and reduce instruction -----
R, C = 3, 21  # C is no multiple of a SIMD width: vector bodies and scalar tails both run
SCALARS = {"f32": ["2.5f", "-0.0f", "inff", "nanf"], "f64": ["2.5", "-inf", "nan", "1e300"],
           "i32": ["2.5", "-7", "0", "nan", "3e10"], "i64": ["2.5", "-7", "0", "nan", "-1e30"],
           **{n: ["2.5", "-7", "0", "nan", "300", "-1e10"] for n in NARROW}}  # (narrow: the scalar is an i32)
REDUCE = ("TROWSUM", "TROWMAX", "TROWMIN", "TCOLSUM", "TCOLMAX", "TCOLMIN")


def unary_ops(dt):
    return list(INT_UNARY) if dt in INTS else list(FLOAT_UNARY)


def binary_ops(dt):
    return list(INT_BINARY) if dt in INTS else list(FLOAT_BINARY)


def program_text(dt):
    """All instructions of one dtype; returns (text, [(output, kind, op, extra)])."""
    outs, body = [], []
    body += [f"alloc %ta: {dt}[{R}, {C}] vec", f"alloc %tb: {dt}[{R}, {C}] vec", "TLOAD %ta, %a", "TLOAD %tb, %b"]

    def emit(name, odt, shape, instr, kind, op, extra=None):
        r, c = shape
        body.extend([f"alloc %t_{name}: {odt}[{r}, {c}] vec", instr.replace("DST", f"%t_{name}"),
                     f"TSTORE %{name}, %t_{name}"])
        outs.append((name, odt, shape, kind, op, extra))

    for op in unary_ops(dt):
        emit(f"u_{op}", dt, (R, C), f"{op} DST, %ta", "unary", op)
    for op in binary_ops(dt):
        emit(f"b_{op}", dt, (R, C), f"{op} DST, %ta, %tb", "binary", op)
    for op in COMPARE:
        emit(f"c_{op}", "bool", (R, C), f"{op} DST, %ta, %tb", "compare", op)
    for k, s in enumerate(SCALARS[dt]):  # scalars are converted to the tile's type first
        emit(f"s_add{k}", dt, (R, C), f"TADD DST, %ta, {s}", "scalar", "TADD", s)
        emit(f"s_div{k}", dt, (R, C), f"TDIV DST, {s}, %ta", "rscalar", "TDIV", s)
    for odt in ("f32", "f64", "i32", "i64", "bool") + NARROW:
        if odt != dt:
            emit(f"v_{odt}", odt, (R, C), "TCVT DST, %ta", "convert", None, odt)
    for op in REDUCE:
        shape = (R, 1) if op.startswith("TROW") else (1, C)
        emit(f"r_{op}", dt, shape, f"{op} DST, %ta", "reduce", op)
    if dt in INTS:
        body += [f"alloc %tm: {dt}[{C}, {R}] vec", "TTRANS %tm, %tb"]
        emit("m_TMATMUL", dt, (R, R), "TMATMUL DST, %ta, %tm", "matmul", "TMATMUL")
    params = [f"%a: {dt}[{R}, {C}]", f"%b: {dt}[{R}, {C}]"]
    params += [f"%{o[0]}: {o[1]}[{o[2][0]}, {o[2][1]}] out" for o in outs]
    text = f"func @edge_{dt}({', '.join(params)}) {{\n" + "".join(f"  {line}\n" for line in body) + "}\n"
    return text, outs


def run_both(text, args):
    """The program `text` parsed, verified at tile level and run on the interpreter and the CPU
    backend with the same inputs: {backend: {output: array}}."""
    prog = pypto.isa.parse(text)
    pypto.isa.verify(prog, level="tile")
    return {bk: pypto.isa.run(prog, dict(args), backend=bk) for bk in ("interp", "cpu")}


# The special functions (TERFC ... TTRIGAMMA) on one Python float, with torch's edge values
# (docs/isa.md §7.3); mpmath (which torch's sympy brings) gives the values to 30 digits.
def _mp():
    import mpmath
    mpmath.mp.dps = 30
    return mpmath


def _is_pole(x):
    return x <= 0 and (math.isinf(x) or x == math.floor(x))  # 0, -0, the negative integers and -inf


def ref_erfc(x):
    return math.erfc(x)


def ref_erfinv(x):
    if math.isnan(x) or abs(x) > 1:
        return math.nan
    if abs(x) == 1:
        return math.copysign(math.inf, x)
    return x if x == 0 else float(_mp().erfinv(x))


def ref_lgamma(x):
    if math.isnan(x):
        return x
    if math.isinf(x) or _is_pole(x):
        return math.inf
    try:
        return math.lgamma(x)
    except OverflowError:  # beyond double's range
        return math.inf


def ref_digamma(x):
    if math.isnan(x) or x == math.inf:
        return x
    if x == 0:
        return -math.copysign(math.inf, x)
    return math.nan if _is_pole(x) else float(_mp().digamma(x))


def ref_trigamma(x):
    if math.isnan(x) or x == -math.inf:
        return math.nan
    if x == math.inf:
        return 0.0
    return math.inf if _is_pole(x) else float(_mp().psi(1, x))


SPECIAL_UNARY = {"TERFC": ref_erfc, "TERFINV": ref_erfinv, "TLGAMMA": ref_lgamma, "TDIGAMMA": ref_digamma,
                 "TTRIGAMMA": ref_trigamma}
