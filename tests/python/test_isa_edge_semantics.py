"""Random differential tests of the element semantics (docs/isa.md §2): every elementwise,
compare, convert, reduce and (integer) matmul instruction on inputs full of extremes — integer
limits, +-inf, NaN, signed zeros, subnormals — through the interpreter and the CPU backend, each
against NumPy (float64, or exact Python integers wrapped to the dtype; i8/u8/i16 computed as i32
and narrowed, scalars converted to i32, docs/isa.md §2). Integers and the special
values must agree exactly; finite float results within a few ulp (the CPU computes f32 in f32).

One program per dtype holds all instructions (one compile each; the kernel cache keeps them),
and the data is new for every seed."""
import numpy as np
import pytest

import pypto
from isa_edge_util import (COMPARE, FLOAT_BINARY, FLOAT_UNARY, FLOATS, INT_BINARY, INT_UNARY, INTS, NARROW, NP, C,
                           R, edge_array, float_ref, int_ref, mismatch, program_text, sat_int, wrap)

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
    prog = pypto.isa.parse(text)
    pypto.isa.verify(prog, level="tile")
    a, b = inputs(dt, seed)
    results = {bk: pypto.isa.run(prog, {"a": a, "b": b}, backend=bk) for bk in ("interp", "cpu")}
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
