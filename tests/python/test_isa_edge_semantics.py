"""Random differential tests of the element semantics (docs/isa.md §2): every elementwise,
compare, convert, reduce and (integer) matmul instruction on inputs full of extremes — integer
limits, +-inf, NaN, signed zeros, subnormals — through the interpreter and the CPU backend, each
against NumPy (float64, or exact Python integers wrapped to the dtype; i8/u8/i16 computed as i32
and narrowed, scalars converted to i32, docs/isa.md §2). Integers and the special
values must agree exactly; finite float results within a few ulp (the CPU computes f32 in f32).

One program per dtype holds all instructions (one compile each; the kernel cache keeps them),
and the data is new for every seed."""
import math

import numpy as np
import pytest

from isa_edge_util import (COMPARE, FLOAT_BINARY, FLOAT_UNARY, FLOATS, INT_BINARY, INT_UNARY, INTS, NARROW, NP, C,
                           R, SPECIAL_UNARY, edge_array, float_ref, int_ref, mismatch, program_text, run_both, sat_int, wrap)

RTOL = {"f32": {"interp": 2e-6, "cpu": 1e-5}, "f64": {"interp": 1e-12, "cpu": 1e-12}}


def scalar_value(text, dt):
    """The scalar literal converted to the tile's dtype (docs/isa.md §2)."""
    v = float(text[:-1] if text.endswith("f") and text not in ("inf", "-inf") else text)
    if dt in INTS:
        return sat_int(v, "i32" if dt in NARROW else dt)  # a narrow tile's scalar is converted to i32
    return NP[dt](v)


def reference(out, a, b, dt):
    name, odt, shape, kind, op, extra = out
    if kind == "unary":
        return int_ref(INT_UNARY[op], [a], dt) if dt in INTS else float_ref(FLOAT_UNARY[op], [a], dt)
    if kind == "binary":
        return int_ref(INT_BINARY[op], [a, b], dt) if dt in INTS else float_ref(FLOAT_BINARY[op], [a, b], dt)
    if kind == "compare":
        return COMPARE[op](a, b).astype(np.uint8) if dt in INTS else \
            COMPARE[op](a.astype(np.float64), b.astype(np.float64)).astype(np.uint8)
    if kind in ("scalar", "rscalar"):
        s = np.full(a.shape, scalar_value(extra, dt), dtype=np.int64 if dt in INTS else NP[dt])
        x, y = (a, s) if kind == "scalar" else (s, a)
        fn = INT_BINARY[op] if dt in INTS else FLOAT_BINARY[op]
        return int_ref(fn, [x, y], dt) if dt in INTS else float_ref(fn, [x, y], dt)
    if kind == "convert":
        if odt == "bool":
            return (a != 0).astype(np.uint8) if dt in INTS else (a.astype(np.float64) != 0).astype(np.uint8)
        if odt in INTS:
            if dt in INTS:
                return np.array([wrap(int(v), odt) for v in a.ravel()], NP[odt]).reshape(a.shape)
            return np.array([sat_int(float(v), odt) for v in a.ravel()], NP[odt]).reshape(a.shape)
        with np.errstate(all="ignore"):
            return a.astype(NP[odt])  # int64 -> f32 rounds once, as NumPy does; f64 -> f32 overflows to inf
    if kind == "reduce":
        axis = 1 if op.startswith("TROW") else 0
        if op.endswith("SUM"):
            if dt in INTS:
                s = [wrap(int(v), dt) for v in np.sum(a.astype(object), axis=axis)]
                return np.array(s, NP[dt]).reshape(shape)
            with np.errstate(all="ignore"):
                return np.sum(a.astype(np.float64), axis=axis).astype(NP[dt]).reshape(shape)
        f = np.max if op.endswith("MAX") else np.min
        return f(a, axis=axis).reshape(shape)
    if kind == "matmul":
        m = np.dot(a.astype(object), b.astype(object).T)
        return np.array([[wrap(int(v), dt) for v in row] for row in m], NP[dt])
    raise AssertionError(kind)


def inputs(dt, seed):
    rng = np.random.default_rng(seed)
    a, b = edge_array(rng, dt, (R, C)), edge_array(rng, dt, (R, C))
    if dt in INTS and seed % 2:
        b[rng.random((R, C)) < 0.4] = 0  # division by zero, often
        b[0, :3] = np.array(-1).astype(NP[dt])
        a[0, :3] = np.iinfo(NP[dt]).min  # INT_MIN / -1
    if dt in FLOATS:  # sums of huge values cancel in any order: keep the sum rows moderate
        a[1] = np.where(np.isfinite(a[1]) & (np.abs(a[1]) < 1e6), a[1], 1.5)
    return a, b


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("dt", ["f32", "f64", "i32", "i64", "i8", "u8", "i16"])
def test_edge_semantics_interp_cpu_numpy(dt, seed):
    text, outs = program_text(dt)
    a, b = inputs(dt, seed)
    results = run_both(text, {"a": a, "b": b})
    failures = []
    for out in outs:
        name, odt, shape, kind, op, extra = out
        want = reference(out, a, b, dt)
        rows = range(shape[0])
        for bk, res in results.items():
            got = res[name]
            if kind == "reduce" and dt in FLOATS and op.endswith("SUM"):
                got, want_cmp = got[1:2] if op.startswith("TROW") else got, want[1:2] if op.startswith("TROW") else want
                if not op.startswith("TROW"):
                    continue  # column sums mix in the huge values of the other rows: order-dependent
            else:
                want_cmp = want
            rtol = RTOL.get(odt if odt in FLOATS else dt, {}).get(bk, 0) if odt in FLOATS else 0
            if kind == "reduce" and op.endswith("SUM") and dt in FLOATS:
                rtol = 1e-5 if dt == "f32" else 1e-12
            bad = mismatch(got, want_cmp, odt, rtol)
            if len(bad):
                i = tuple(bad[0])
                src = (a[i] if kind != "reduce" else None, b[i] if kind in ("binary", "compare") else None)
                failures.append(f"{bk} {name}{' ' + str(extra) if extra else ''} at {i}: got {got[i]!r}, "
                                f"want {want_cmp[i]!r} (inputs {src})")
        del rows
        if odt not in FLOATS:  # the two backends agree exactly wherever the result is not float
            assert (results["interp"][name] == results["cpu"][name]).all() or failures, name
    assert not failures, "\n".join(failures[:20])


# ---- the rest of the element instructions: math, rounding, bitwise, shifts, select, expand ---------
def _bits_op(fn):
    """A bitwise instruction: integers directly; floats converted to i64 first (saturating) and back."""
    def op(*xs):
        if isinstance(xs[0], float):
            return float(fn(*[sat_int(x, "i64") for x in xs]))
        return fn(*xs)
    return op


def _shl(a, b, width):
    return 0 if b < 0 or b >= width else a << b


def _shr(a, b, width):
    return a >> (b if 0 <= b < width else width - 1)


def _gcd(a, b):
    if isinstance(a, float):  # Euclid's steps with fmod (exact); NaN with a NaN or infinite operand
        a, b = abs(a), abs(b)
        if not (np.isfinite(a) and np.isfinite(b)):
            return np.nan
        while b != 0:
            a, b = b, np.fmod(a, b)
        return a
    return math.gcd(a, b)


def _floormod(a, b):
    if isinstance(a, float):
        r = np.fmod(a, b)
        return r + b if r != 0 and (r < 0) != (b < 0) else r
    return 0 if b == 0 else a % b


def _fmod(a, b):
    if isinstance(a, float):
        return np.fmod(a, b)
    return 0 if b == 0 else (abs(a) % abs(b)) * (-1 if a < 0 else 1)


def _floordiv(a, b):
    if isinstance(a, float):
        with np.errstate(all="ignore"):
            return np.floor(np.float64(a) / np.float64(b))
    return 0 if b == 0 else a // b


def _copysign(a, b):
    return np.copysign(a, b) if isinstance(a, float) else (-abs(a) if b < 0 else abs(a))


MORE_UNARY = {  # f(x) on a Python float (computed in double) or a Python int
    "TMOV": lambda x: x, "TSIN": np.sin, "TCOS": np.cos, "TTAN": np.tan, "TEXP2": np.exp2, "TEXPM1": np.expm1,
    "TLOG2": np.log2, "TLOG10": np.log10, "TLOG1P": np.log1p, "TCBRT": np.cbrt,
    **{op: (lambda f: lambda x: x if isinstance(x, int) else f(x))(f)  # integers are integral already
       for op, f in (("TCEIL", np.ceil), ("TROUND", np.rint), ("TTRUNC", np.trunc))}, "TSIGN": lambda x: float((x > 0) - (x < 0)) if isinstance(x, float) else (x > 0) - (x < 0),
    "TBNOT": _bits_op(lambda x: ~x), **SPECIAL_UNARY,
}
INT_EXACT_UNARY = ("TMOV", "TCEIL", "TROUND", "TTRUNC", "TSIGN", "TBNOT")  # integers: no detour through double
MORE_BINARY = {
    "TATAN2": np.arctan2, "THYPOT": np.hypot, "TCOPYSIGN": _copysign, "TFMOD": _fmod, "TREM": _floormod,
    "TFLOORDIV": _floordiv, "TGCD": _gcd, "TBAND": _bits_op(lambda a, b: a & b),
    "TBOR": _bits_op(lambda a, b: a | b), "TBXOR": _bits_op(lambda a, b: a ^ b),
}
VIA_DOUBLE_BINARY = ("TATAN2", "THYPOT")
SHIFTS = ("TSHL", "TSHR")


def more_program(dt):
    outs, body = [], [f"alloc %ta: {dt}[{R}, 24] vec", f"alloc %tb: {dt}[{R}, 24] vec", "TLOAD %ta, %a",
                      "TLOAD %tb, %b", f"alloc %tm: {dt}[{R}, 1] vec", "TLOAD %tm, %a[0:3, 0:1]",
                      f"alloc %tn: {dt}[1, 24] vec", "TLOAD %tn, %b[0:1, 0:21]"]

    def emit(name, shape, instr, tile_cols=None):
        body.extend([f"alloc %t_{name}: {dt}[{shape[0]}, {tile_cols or shape[1]}] vec", instr.replace("DST", f"%t_{name}"),
                     f"TSTORE %{name}, %t_{name}"])
        outs.append((name, shape))

    for op in MORE_UNARY:
        emit(f"u_{op}", (R, C), f"{op} DST, %ta")
    for op in list(MORE_BINARY) + list(SHIFTS):
        emit(f"b_{op}", (R, C), f"{op} DST, %ta, %tb")
    emit("sel", (R, C), "TSEL DST, %ta, %ta, %tb")  # the mask in its own type: NaN counts as true
    emit("rx", (R, 24), "TROWEXPAND DST, %tm")
    emit("cx", (4, C), "TCOLEXPAND DST, %tn", tile_cols=24)
    params = [f"%a: {dt}[{R}, {C}]", f"%b: {dt}[{R}, {C}]"] + [f"%{n}: {dt}[{s[0]}, {s[1]}] out" for n, s in outs]
    return f"func @more_{dt}({', '.join(params)}) {{\n" + "".join(f"  {x}\n" for x in body) + "}\n", outs


def more_reference(name, a, b, dt):
    """Float64 / exact-integer values (integers already wrapped to dt) and, for f32 on the CPU, the
    value of the same formula computed in f32 where that differs by more than rounding (floor of
    an f32 quotient)."""
    ct = "i32" if dt in NARROW else dt
    width = 64 if ct == "i64" else 32
    xa, xb = [[float(v) if dt in FLOATS else int(v) for v in row] for row in a], \
        [[float(v) if dt in FLOATS else int(v) for v in row] for row in b]
    if name in ("rx", "cx"):
        return np.broadcast_to(a[:, :1], (R, 24)) if name == "rx" else np.broadcast_to(b[:1], (4, C))
    if name == "sel":
        return np.where((a != 0) | np.isnan(a.astype(np.float64)) if dt in FLOATS else a != 0, a, b)
    kind, op = name.split("_", 1)

    def one(x, y=None):
        with np.errstate(all="ignore"):
            if op in SHIFTS:
                v = (_shl if op == "TSHL" else _shr)(*(sat_int(t, "i64") if dt in FLOATS else t for t in (x, y)),
                                                      64 if dt in FLOATS else width)
                return float(v) if dt in FLOATS else wrap(v, dt)
            if dt in FLOATS:
                return float(MORE_UNARY[op](x) if kind == "u" else MORE_BINARY[op](x, y))
            if kind == "u" and op not in INT_EXACT_UNARY:
                return wrap(sat_int(float(MORE_UNARY[op](np.float64(x))), ct), dt)
            if kind == "b" and op in VIA_DOUBLE_BINARY:
                return wrap(sat_int(float(MORE_BINARY[op](np.float64(x), np.float64(y))), ct), dt)
            f = MORE_UNARY[op] if kind == "u" else MORE_BINARY[op]
            return wrap(int(f(x) if kind == "u" else f(x, y)), dt)
    vals = [[one(x) if kind == "u" else one(x, y) for x, y in zip(ra, rb)] for ra, rb in zip(xa, xb)]
    if dt in FLOATS:
        with np.errstate(all="ignore"):
            return np.array(vals, np.float64).astype(NP[dt])
    return np.array(vals, NP[dt])


@pytest.mark.parametrize("seed", range(2))
@pytest.mark.parametrize("dt", ["f32", "f64", "i32", "i64", "i8", "u8", "i16"])
def test_more_element_instructions_extremes_interp_cpu_numpy(dt, seed):
    text, outs = more_program(dt)
    a, b = inputs(dt, seed)
    if dt in INTS:
        b[1, :8] = np.array([-1, 0, 1, 7, 31, 32, 63, 64]).astype(NP[dt])  # shift counts at the widths
    results = run_both(text, {"a": a, "b": b})
    failures = []
    for name, shape in outs:
        want = more_reference(name, a, b, dt)
        for bk, res in results.items():
            got = res[name][:want.shape[0], :want.shape[1]]
            rtol = RTOL[dt][bk] if dt in FLOATS else 0
            bad = mismatch(got, want, dt, rtol)
            if len(bad) and bk == "cpu" and dt == "f32" and name == "b_TFLOORDIV":  # floor of the f32 quotient
                with np.errstate(all="ignore"):
                    alt_bad = {tuple(i) for i in mismatch(got, np.floor(a / b), dt, 0)}
                bad = [i for i in bad if tuple(i) in alt_bad]
            if len(bad):
                i = tuple(bad[0])
                failures.append(f"{bk} {name} at {i}: got {got[i]!r}, want {want[i]!r} (inputs {a[i]!r}, {b[i]!r})")
    assert not failures, "\n".join(failures[:20])
