"""Edge-case inputs and NumPy references (float64 / exact integers) for the element semantics of
docs/isa.md §2, shared by the differential tests and the fuzz suite."""
import numpy as np

NP = {"f32": np.float32, "f64": np.float64, "i32": np.int32, "i64": np.int64, "bool": np.uint8}
INTS = ("i32", "i64")
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
    a[pick] = np.array(sv, dtype=NP[dt])[rng.integers(0, len(sv), int(pick.sum()))]
    return a.reshape(shape)


# ---- integer references (Python ints: exact, then wrapped to the dtype) -----------------------
def wrap(v, dt):
    bits = 32 if dt == "i32" else 64
    v &= (1 << bits) - 1
    return v - (1 << bits) if v >= 1 << (bits - 1) else v


def sat_int(x, dt):
    """float -> int: truncate toward zero, saturate, NaN -> 0."""
    info = np.iinfo(NP[dt])
    if np.isnan(x):
        return 0
    if x >= 2.0 ** (info.bits - 1):
        return int(info.max)
    if x <= -(2.0 ** (info.bits - 1)):
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
