"""Random differential tests, on inputs full of extremes, of the instructions that move or multiply
data (docs/isa.md §2, §7.1, §7.8): the TLOAD/TSTORE conversions between every dtype (f16/bf16
rounding ties to even, overflow to inf, NaN kept, float -> int saturating with NaN -> 0, integer
narrowing wrapping; each conversion rounds once), float TMATMUL / TMATMUL_ACC / TMATMUL_BIAS /
MMATMUL / MMATMUL_ACC (NaN, +-inf, inf * 0, huge and subnormal operands) and MGATHER / MSCATTER /
MSCATTER_ADD (first and last rows, repeated indices, out-of-range indices), through the interpreter
and the CPU backend, each against an exact Python reference (fractions, integers) or NumPy float64.

One program per case holds every output (one compile each); the data is new for every seed."""
import math
from fractions import Fraction

import numpy as np
import pytest
import torch

import pypto
from isa_edge_util import FLOATS, INTS, NP, edge_array, run_both, sat_int, wrap
from pypto_testutil import requires_compiler

pytestmark = requires_compiler

NPX = {**NP, "f16": np.float16}
# (significant bits, exponent of the smallest subnormal step, exponent of the overflow threshold)
BINARY = {"f16": (11, -24, 16), "bf16": (8, -133, 128), "f32": (24, -149, 128), "f64": (53, -1074, 1024)}
ALL_FLOATS = ("f16", "bf16", "f32", "f64")


def round_float(x, dt):
    """x (a Python float or int, taken exactly) rounded once to dt: nearest, ties to even; a result
    at or above 2^max_exp is +-inf. NaN, +-inf and signed zeros pass through."""
    if isinstance(x, float) and (math.isnan(x) or math.isinf(x) or x == 0):
        return x
    if x == 0:
        return 0.0
    bits, min_exp, max_exp = BINARY[dt]
    a = abs(Fraction(x))
    e = a.numerator.bit_length() - a.denominator.bit_length()
    if a < Fraction(2) ** e:
        e -= 1  # now 2^e <= a < 2^(e+1)
    q = Fraction(2) ** max(e - bits + 1, min_exp)
    r = round(a / q) * q  # Fraction rounds half to even
    v = math.inf if r >= Fraction(2) ** max_exp else float(r)
    return math.copysign(v, x)


def convert(x, dt):
    """One element converted by the rules of docs/isa.md §2 (x: a Python float or int)."""
    if dt == "bool":
        return int(x != 0)  # NaN != 0
    if dt in ALL_FLOATS:
        return round_float(x, dt)
    return sat_int(x, dt) if isinstance(x, float) else wrap(x, dt)


def as_python(a):
    """Array elements as exact Python numbers (floats for float arrays, ints for integers)."""
    a = np.asarray(a)
    return [float(v) for v in a.ravel()] if a.dtype.kind == "f" else [int(v) for v in a.ravel()]


def same_bits(got, want):
    """Elementwise: equal values, the same sign of zero, NaN where NaN."""
    with np.errstate(invalid="ignore"):
        g, w = np.asarray(got, np.float64), np.asarray(want, np.float64)
    return (np.isnan(g) & np.isnan(w)) | ((g == w) & (np.signbit(g) == np.signbit(w)))


# ---- TLOAD / TSTORE conversions --------------------------------------------------------------------
R, C = 4, 24  # each source is an R x C global; tiles are R x 32 (a ragged column tail)
P = 2.0 ** -40
CRAFTED = {  # values at the rounding, overflow and saturation edges of every destination
    "f64": [1 + 2**-11, 1 + 3 * 2**-11, 1 + 2**-11 + P, 1 + 2**-8, 1 + 2**-8 + P, 65504.0, 65519.99, 65520.0,
            -65520.0, 2.0**-24, 2.0**-25, 3 * 2.0**-25, 2.0**-25 + 2.0**-60, 2.0**-134 + 2.0**-150,
            float(np.finfo(np.float32).max), 2.0**128 - 2.0**103, 2.0**128 - 2.0**103 - 2.0**80, 1e39, -1e39,
            2.0**128 - 2.0**119, 2.0**128 - 2.0**119 - 2.0**90, 5e-324, -5e-324, 1e-45, 0.7e-45, 2.0**31,
            2.0**31 - 0.5, -2.0**31 - 1, -2.0**31 - 0.5, 2.0**63, -2.0**63, 9.3e18, 1e19, -1e19, 2.0**64, 255.9,
            256.0, -0.9, -1.0, 127.5, -128.9, -129.0, 32767.9, 32768.0, 2.5, -2.5, 0.5, math.nan, math.inf,
            -math.inf, 0.0, -0.0],
    "f32": [1 + 2**-11, 1 + 2**-11 + 2**-23, 1 + 2**-8, 1 + 2**-8 + 2**-23, 1 + 3 * 2**-8, 65504.0, 65520.0,
            65519.99609375, -65520.0, 2.0**-25, 3 * 2.0**-25, 2.0**-149, -2.0**-126, 2.0**-134, 3 * 2.0**-134,
            float(np.finfo(np.float32).max), 2.0**128 - 2.0**119, 2.0**31, -2.0**31, 3e9, -3e9, 2.0**63, 1e19,
            -1e19, 255.5, 256.0, -1.0, -0.5, 127.9, -128.5, 32768.0, math.nan, math.inf, -math.inf, 0.0, -0.0],
    "i64": [2**30 + 2**22 + 1, 2**30 + 2**22, 2**60 + 2**52 + 1, 2**24 + 1, 2**24 + 3, 2**53 + 1, 2**62 + 2**38 + 1,
            -(2**63), 2**63 - 1, -(2**31), 2**31 - 1, 2**31, -(2**31) - 1, 255, 256, -129, 128, 65504, 65519,
            65520, 65535, 65536, 32768, -32769, 2**32 + 5, -1, 0, 1],
}
F32_NANS = [0x7FFFFFFF, 0x7F800001, 0xFFC00001, 0x7FFF8000]  # payloads that rounding must not turn into inf
BF16_SPECIAL = [0x7F80, 0xFF80, 0x7FC0, 0xFFC1, 0x7F81, 0x7F7F, 0xFF7F, 0x0001, 0x8001, 0x0080, 0x8000, 0x0000,
                0x4F80, 0xCF00, 0x5F00, 0x4380, 0x4300, 0xC300, 0x3F00]
F16_SPECIAL = [np.inf, -np.inf, np.nan, 65504.0, -65504.0, 2.0**-24, -2.0**-24, 2.0**-14, 0.0, -0.0, 2048.0, 255.5,
               256.0, -129.0, 127.9, -0.75, 32767.0, 32768.0]
# source -> ([tile dtypes loaded into and stored unchanged], tile dtype, [global dtypes stored into])
PATHS = {
    "f64": (["f32", "i32", "i64", "i8", "u8", "i16", "bool"], "f64",
            ["f16", "bf16", "f32", "i32", "i64", "i8", "u8", "i16", "bool"]),
    "f32": (["f64", "i32", "i8"], "f32", ["f16", "bf16", "f64", "i32", "i64", "i8", "u8", "i16"]),
    "f16": (["f32", "f64", "i32", "i8", "u8"], "f32", ["bf16"]),
    "bf16": (["f32", "f64", "i32", "i64", "u8"], "f32", ["f16"]),
    "i64": (["i32", "i8", "u8", "i16", "f32", "f64", "bool"], "i64", ["f16", "bf16", "f32", "i32", "i8", "u8"]),
}


def conversion_program():
    """Returns (text, [(output, source, tile dtype, global dtype)])."""
    body, outs = [], []
    for src, (loads, via, stores) in PATHS.items():
        for t in loads:
            name = f"ld_{src}_{t}"
            body += [f"alloc %t_{name}: {t}[{R}, 32] vec", f"TLOAD %t_{name}, %x_{src}", f"TSTORE %{name}, %t_{name}"]
            outs.append((name, src, t, t))
        body += [f"alloc %v_{src}: {via}[{R}, 32] vec", f"TLOAD %v_{src}, %x_{src}"]
        for g in stores:
            name = f"st_{src}_{g}"
            body.append(f"TSTORE %{name}, %v_{src}")
            outs.append((name, src, via, g))
    params = [f"%x_{s}: {s}[{R}, {C}]" for s in PATHS] + [f"%{o[0]}: {o[3]}[{R}, {C}] out" for o in outs]
    return "func @convert_edges(" + ", ".join(params) + ") {\n" + "".join(f"  {x}\n" for x in body) + "}\n", outs


def conversion_inputs(seed):
    """{source dtype: array} (bf16 as a torch tensor), crafted edges first, random extremes after."""
    rng = np.random.default_rng(seed)
    n = R * C
    xs = {}
    for dt in ("f64", "f32", "i64"):
        a = edge_array(rng, dt, (n,))
        crafted = np.array(CRAFTED[dt], dtype=object)
        crafted = np.concatenate([crafted, -crafted]) if dt != "i64" else crafted
        k = min(n, len(crafted))
        a[:k] = np.array([NP[dt](v) for v in rng.permutation(crafted)[:k]], NP[dt])
        if dt == "f32":
            a.view(np.uint32)[k - len(F32_NANS):k] = F32_NANS
        xs[dt] = a.reshape(R, C)
    h = (rng.standard_normal(n) * 10.0 ** rng.integers(-6, 5, n)).astype(np.float16)
    h[:len(F16_SPECIAL)] = F16_SPECIAL
    xs["f16"] = rng.permutation(h).reshape(R, C)
    g = rng.integers(0, 1 << 16, n).astype(np.uint16)
    g[:len(BF16_SPECIAL)] = BF16_SPECIAL
    xs["bf16"] = torch.from_numpy(rng.permutation(g).astype(np.int16).reshape(R, C)).view(torch.bfloat16)
    return xs


def exact_values(x):
    if isinstance(x, torch.Tensor):
        return as_python(x.float().numpy())
    return as_python(x)


@pytest.mark.parametrize("seed", range(2))
def test_tload_tstore_conversions_interp_cpu_exact(seed):
    text, outs = conversion_program()
    xs = conversion_inputs(seed)
    results = run_both(text, {f"x_{s}": a for s, a in xs.items()})
    failures = []
    for name, src, tile, glob in outs:
        vals = exact_values(xs[src])
        want = [convert(v, tile) for v in vals]  # the tile's value, then the stored one
        want = [convert(v, glob) if glob != tile else v for v in want]
        want = np.array(want, dtype=np.float64 if glob in ALL_FLOATS else object).reshape(R, C)
        for bk, res in results.items():
            got = res[name]
            ok = same_bits(got, want) if glob in ALL_FLOATS else got.astype(object) == want
            if not np.all(ok):
                i = tuple(np.argwhere(~ok)[0])
                failures.append(f"{bk} {name} at {i}: {src} {vals[i[0] * C + i[1]]!r} -> {tile} -> {glob}: "
                                f"got {got[i]!r}, want {want[i]!r}")
    assert not failures, "\n".join(failures[:20])


# ---- float matmul ------------------------------------------------------------------------------------
M, K, N = 13, 37, 20  # tiles 16 x 40, 40 x 24, 16 x 24: ragged in every dimension


def matmul_program(dt):
    params = [f"%a: {dt}[{M}, {K}]", f"%b: {dt}[{K}, {N}]", f"%c: {dt}[{M}, {N}]", f"%bias: {dt}[1, {N}]",
              f"%mm: {dt}[{M}, {N}] out", f"%acc: {dt}[{M}, {N}] out", f"%bi: {dt}[{M}, {N}] out"]
    body = [f"alloc %ta: {dt}[16, 40] mat", f"alloc %tb: {dt}[40, 24] mat", f"alloc %tc: {dt}[16, 24] acc",
            f"alloc %td: {dt}[16, 24] acc", f"alloc %te: {dt}[16, 24] acc", f"alloc %tv: {dt}[1, 24] vec",
            "TLOAD %ta, %a", "TLOAD %tb, %b", "TMATMUL %tc, %ta, %tb", "TSTORE %mm, %tc",
            "TLOAD %td, %c", "TMATMUL_ACC %td, %ta, %tb", "TSTORE %acc, %td",
            "TLOAD %tv, %bias", "TMATMUL_BIAS %te, %ta, %tb, %tv", "TSTORE %bi, %te"]
    if dt == "f32":  # the whole-matrix forms (f32 only); gacc is given its start value
        params += [f"%gmm: f32[{M}, {N}] out", f"%gacc: f32[{M}, {N}] out"]
        body += ["MMATMUL %gmm, %a, %b", "MMATMUL_ACC %gacc, %a, %b"]
    return f"func @mm_edge_{dt}({', '.join(params)}) {{\n" + "".join(f"  {x}\n" for x in body) + "}\n"


def matmul_inputs(dt, seed):
    """Moderate random values; row 0 of a and column 0 of b hold NaN / +-inf / signed zeros; row 1
    holds subnormals against large column-1 values (a flush to zero shows); row 2 is huge (its
    products overflow); c and bias are full of extremes."""
    rng = np.random.default_rng(seed)
    f = np.finfo(NP[dt])
    a = (rng.standard_normal((M, K)) * 10.0 ** rng.integers(-3, 4, (M, K))).astype(NP[dt])
    b = (rng.standard_normal((K, N)) * 10.0 ** rng.integers(-3, 4, (K, N))).astype(NP[dt])
    specials = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0], NP[dt])
    a[0, rng.integers(0, K, 3)] = specials[rng.integers(0, 5, 3)]
    b[rng.integers(0, K, 3), 0] = specials[rng.integers(0, 5, 3)]
    a[3, :] = 0.0  # a row of zeros: inf * 0 in column 0 only where b has an infinity
    a[1, :] = rng.uniform(1, 4, K) * float(f.tiny) * 2.0 ** -rng.integers(1, 20, K)  # subnormals
    b[:, 1] = rng.uniform(1, 2, K) * (1e20 if dt == "f32" else 1e200)
    a[2, :] = rng.uniform(0.25, 1, K) * float(f.max)
    b[:, 2] = rng.uniform(1, 2, K)  # positive: row 2 x column 2 overflows on every backend
    c = edge_array(rng, dt, (M, N), frac=0.3)
    bias = edge_array(rng, dt, (1, N), frac=0.3)
    return a, b, c, bias


def matmul_reference(a, b, init):
    """(value, scale) per element: init + sum_p a[i, p] b[p, j] exactly (math.fsum of the float64
    products; NaN / +-inf by IEEE rules over the terms) and init's magnitude plus the sum of the
    terms' magnitudes."""
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    want = np.empty((M, N))
    scale = np.empty((M, N))
    with np.errstate(all="ignore"):
        for i in range(M):
            for j in range(N):
                terms = np.append(a64[i] * b64[:, j], init[i, j])
                if np.isnan(terms).any() or (np.isposinf(terms).any() and np.isneginf(terms).any()):
                    want[i, j] = np.nan
                elif np.isinf(terms).any():
                    want[i, j] = terms[np.isinf(terms)][0]
                else:
                    want[i, j] = math.fsum(terms)
                scale[i, j] = np.sum(np.abs(terms))
    return want, scale


def matmul_check(got, want, scale, dt, exact_sum):
    """Indices of bad elements. exact_sum: the interpreter (sums in double, rounds once; a rounded
    result beyond the range is inf). Otherwise a compiled backend summing in dt: within K ulp of
    the magnitudes; where those reach the range, a partial sum may overflow (docs/isa.md §7.8)."""
    f = np.finfo(NP[dt])
    g = got.astype(np.float64)
    with np.errstate(all="ignore"):
        rounded = np.array([round_float(float(v), dt) for v in want.ravel()]).reshape(want.shape)
        special = ~np.isfinite(rounded)
        tol = (K + 2) * (2.0 ** -52 if exact_sum else float(f.eps)) * scale + float(f.eps) * np.abs(want) + \
            (K + 2) * float(f.smallest_subnormal)
        close = np.isfinite(g) & (np.abs(g - want) <= tol)
        ok = np.where(special, same_bits(g, rounded) | (np.isnan(g) & np.isnan(rounded)), close)
        if not exact_sum:
            ok |= ~np.isfinite(g) & (scale >= float(f.max))
    return np.argwhere(~ok)


@pytest.mark.parametrize("seed", range(2))
@pytest.mark.parametrize("dt", ["f32", "f64"])
def test_float_matmul_extremes_interp_cpu_float64(dt, seed):
    prog = pypto.isa.parse(matmul_program(dt))
    pypto.isa.verify(prog, level="tile")
    a, b, c, bias = matmul_inputs(dt, seed)
    zero = np.zeros((M, N))
    cases = {"mm": zero, "acc": c.astype(np.float64), "bi": np.broadcast_to(bias.astype(np.float64), (M, N))}
    if dt == "f32":
        cases.update(gmm=zero, gacc=c.astype(np.float64))
    failures = []
    for bk in ("interp", "cpu"):
        args = {"a": a, "b": b, "c": c, "bias": bias}
        if dt == "f32":
            args["gacc"] = c.copy()
        res = pypto.isa.run(prog, args, backend=bk)
        for name, init in cases.items():
            want, scale = matmul_reference(a, b, init)
            for i in matmul_check(res[name], want, scale, dt, exact_sum=bk == "interp")[:3]:
                i = tuple(i)
                failures.append(f"{bk} {name} at {i}: got {res[name][i]!r}, want {want[i]!r} (scale {scale[i]:.3g})")
        # The subnormal row is not flushed to zero, and the huge row meets the overflow on every backend.
        assert np.all(res["mm"][1, 1] > 0) and np.isposinf(res["mm"][2, 2]), (bk, res["mm"][1:3, 1:3])
    assert not failures, "\n".join(failures[:20])


# ---- MGATHER / MSCATTER / MSCATTER_ADD -------------------------------------------------------------
VR, VC = 10, 13  # the table; rows 0 and 9 are its first and last
GI = np.array([[9], [0], [9], [3], [0], [9]], np.int32)  # column form (n = 6), repeated first / last rows
GJ = np.array([[0, 9, 9, 5]], np.int64)  # row form (n = 4)


def indexed_program(dt):
    params = [f"%v: {dt}[{VR}, {VC}]", f"%src: {dt}[6, {VC}]", "%gi: i32[6, 1]", "%gj: i64[1, 4]",
              f"%g1: {dt}[6, {VC}] out", f"%g2: {dt}[4, {VC}] out", f"%sc: {dt}[{VR}, {VC}] out",
              f"%sa: {dt}[{VR}, {VC}] out", f"%sw: {dt}[{VR}, {VC}] out"]
    body = ["alloc %ti: i32[8, 1] vec", "alloc %tj: i64[1, 8] vec", "TLOAD %ti, %gi", "TLOAD %tj, %gj",
            f"alloc %tg1: {dt}[8, 16] vec", "MGATHER %tg1, %v, %ti", "TSTORE %g1, %tg1",
            f"alloc %tg2: {dt}[4, 16] vec", "MGATHER %tg2, %v, %tj", "TSTORE %g2, %tg2",
            f"alloc %ts: {dt}[8, 16] vec", "TLOAD %ts, %src",
            "MSCATTER %sc, %ts, %ti", "MSCATTER_ADD %sa, %ts, %ti", "MSCATTER %sw[0:10, 4:6], %ts, %tj"]
    return f"func @indexed_edge_{dt}({', '.join(params)}) {{\n" + "".join(f"  {x}\n" for x in body) + "}\n"


def indexed_references(dt, v, src):
    ref = {"g1": v[GI[:, 0]], "g2": v[GJ[0]]}
    sc = v.copy()
    for r, i in enumerate(GI[:, 0]):
        sc[i] = src[r]  # in order of r: the last repeated row wins
    ref["sc"] = sc
    sa = v.astype(object)
    for r, i in enumerate(GI[:, 0]):  # each row added rounds to the dtype (or wraps)
        with np.errstate(all="ignore"):
            sa[i] = (sa[i].astype(np.float64) + src[r].astype(np.float64)).astype(NP[dt]) if dt in FLOATS else \
                [wrap(int(x) + int(y), dt) for x, y in zip(sa[i], src[r])]
    ref["sa"] = sa.astype(NP[dt])
    sw = v.copy()
    for r, i in enumerate(GJ[0]):
        sw[i, 4:10] = src[r, :6]  # rows r < min(src.vr, n) = 4, columns c < min(src.vc, 6)
    ref["sw"] = sw
    return ref


@pytest.mark.parametrize("seed", range(2))
@pytest.mark.parametrize("dt", ["f32", "f64", "i64", "i8"])
def test_indexed_rows_extremes_interp_cpu_numpy(dt, seed):
    prog = pypto.isa.parse(indexed_program(dt))
    pypto.isa.verify(prog, level="tile")
    rng = np.random.default_rng(seed)
    v, src = edge_array(rng, dt, (VR, VC)), edge_array(rng, dt, (6, VC))
    ref = indexed_references(dt, v, src)
    failures = []
    for bk in ("interp", "cpu"):
        res = pypto.isa.run(prog, {"v": v, "src": src, "gi": GI, "gj": GJ, "sc": v.copy(), "sa": v.copy(),
                                   "sw": v.copy()}, backend=bk)
        for name, want in ref.items():
            ok = same_bits(res[name], want) if dt in FLOATS else res[name] == want
            if not np.all(ok):
                i = tuple(np.argwhere(~ok)[0])
                failures.append(f"{bk} {name} at {i}: got {res[name][i]!r}, want {want[i]!r}")
    assert not failures, "\n".join(failures[:20])


@pytest.mark.parametrize("backend", ["interp", "cpu"])
@pytest.mark.parametrize("op", ["MGATHER", "MSCATTER", "MSCATTER_ADD"])
def test_out_of_range_indexed_rows_raise_and_write_nothing_wild(op, backend):
    """docs/isa.md §7.1: an index outside [0, v.rows) raises on every backend, naming the
    instruction, the index and the dimension; the rows around the window are never touched."""
    x = np.arange(12 * 5, dtype=np.float32).reshape(12, 5) + 1
    if op == "MGATHER":
        body = ["alloc %d: f32[2, 8] vec", "MGATHER %d, %o[1:10, 0:5], %j", "TSTORE %g, %d"]
    else:
        body = ["alloc %b: f32[2, 5] vec", "TLOAD %b, %s", f"{op} %o[1:10, 0:5], %b, %j"]
    text = ("func @oob(%s: f32[2, 5], %i: i64[2, 1], %o: f32[12, 5] out, %g: f32[2, 5] out) {\n"
            "  alloc %j: i64[2, 1] vec\n  TLOAD %j, %i\n" + "".join(f"  {x}\n" for x in body) + "}\n")
    prog = pypto.isa.parse(text)
    for idx in (10, -1, np.iinfo(np.int64).min, np.iinfo(np.int64).max):
        o = x.copy()
        with pytest.raises(pypto.PyptoError, match=rf"{op}: index {idx} is out of range for a dimension of size 10"):
            pypto.isa.run(prog, {"s": -x[:2], "i": np.array([[2], [idx]], np.int64), "o": o}, backend=backend)
        assert np.array_equal(o[[0, 11]], x[[0, 11]]), o  # nothing written outside the window
        assert np.array_equal(o[4:11], x[4:11]) and np.array_equal(o[1:3], x[1:3]), o
