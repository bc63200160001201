"""Random differential tests of the layout, gather and scan instructions (docs/isa.md §7.9) on
inputs full of extremes (integer limits, +-inf, NaN, signed zeros, subnormals): TTRANS, TRESHAPE,
TEXTRACT, TINSERT, TFILLPAD, TEXPANDS and TCI (extreme fill scalars, converted by the rules of §2), TGATHER,
TSCATTER, TSCATTER_ADD (repeated indices), TARGSORT (ties, NaN, narrow destinations) and TSCAN
(all four kinds) through the interpreter and the CPU backend, each against NumPy (float64) or exact
Python integers wrapped to the dtype. Moves must keep every bit (the sign of zero, NaN); integer
results are exact; float scans agree within a few ulp of the running sum of magnitudes.

One program per dtype holds every case (one compile each); the data is new for every seed."""
import numpy as np
import pytest

import pypto
from isa_edge_util import FLOATS, INTS, NARROW, NP, edge_array, run_both, sat_int, wrap
from pypto_testutil import requires_compiler

pytestmark = requires_compiler

R, C = 5, 13  # the loaded region of an 8 x 16 tile: ragged in both dims
GI = np.array([[4], [0], [4], [2], [1], [0]], np.int32)  # gather rows (repeated, first and last)
GJ = np.array([[3], [3], [0]], np.int64)
SI = np.array([[4], [1], [4]], np.int64)  # scatter: the last of the repeated rows wins
SA = np.array([[0], [3], [0]], np.int32)  # scatter-add: repeated rows accumulate in order
FILLS = {"f32": ["-inff", "nanf", "-0.0f", "1e30f"], "f64": ["-inf", "nan", "-0.0", "1e300"],
         "i32": ["-7", "nan", "3e10", "2.5", "-1e30"], "i64": ["-7", "nan", "-3e30", "2.5", "9e18"],
         **{n: ["-7", "nan", "300", "-1e10", "2.5"] for n in NARROW}}
TOPK = 4


def program_text(dt):
    """Returns (text, {output: description}) of one program holding every case for dtype dt."""
    outs, body = [], []

    def out(name, odt, shape, lines):
        body.extend(lines + [f"TSTORE %{name}, %t_{name}"])
        outs.append((name, odt, shape))

    def tile(name, odt, shape):
        return f"alloc %t_{name}: {odt}[{shape[0]}, {shape[1]}] vec"

    body += [f"alloc %ta: {dt}[8, 16] vec", "TLOAD %ta, %a", f"alloc %tb: {dt}[4, 16] vec", "TLOAD %tb, %b",
             "alloc %xgi: i32[8, 1] vec", "TLOAD %xgi, %igi", "alloc %xgj: i64[4, 1] vec", "TLOAD %xgj, %igj",
             "alloc %xsi: i64[4, 1] vec", "TLOAD %xsi, %isi", "alloc %xsa: i32[4, 1] vec", "TLOAD %xsa, %isa"]
    out("tr", dt, (16, 8), [tile("tr", dt, (16, 8)), "TTRANS %t_tr, %ta"])
    out("rs", dt, (6, 8), [f"alloc %full: {dt}[4, 12] vec", "TLOAD %full, %a[0:4, 0:12]", tile("rs", dt, (6, 8)),
                           "TRESHAPE %t_rs, %full"])
    out("ex", dt, (4, 4), [tile("ex", dt, (4, 4)), "TEXTRACT %t_ex, %ta, 3, 11"])
    out("ins", dt, (8, 16), [tile("ins", dt, (8, 16)), "TLOAD %t_ins, %a", "TINSERT %t_ins, %tb, 2, 10"])
    for k, s in enumerate(FILLS[dt]):
        out(f"fp{k}", dt, (8, 16), [tile(f"fp{k}", dt, (8, 16)), f"TFILLPAD %t_fp{k}, %ta, {s}"])
        out(f"fe{k}", dt, (2, 16), [tile(f"fe{k}", dt, (2, 16)), f"TEXPANDS %t_fe{k}, {s}"])
        out(f"ci{k}", dt, (2, 16), [tile(f"ci{k}", dt, (2, 16)), f"TCI %t_ci{k}, {s}"])
    out("gi", dt, (8, 16), [tile("gi", dt, (8, 16)), "TGATHER %t_gi, %ta, %xgi"])
    out("gj", dt, (8, 16), [tile("gj", dt, (8, 16)), "TGATHER %t_gj, %ta, %xgj"])
    out("sc", dt, (8, 16), [tile("sc", dt, (8, 16)), "TLOAD %t_sc, %a", "TSCATTER %t_sc, %tb, %xsi"])
    out("sa", dt, (8, 16), [tile("sa", dt, (8, 16)), "TLOAD %t_sa, %a", "TSCATTER_ADD %t_sa, %tb, %xsa"])
    for desc in (0, 1):
        out(f"as{desc}", "i64", (8, 16), [tile(f"as{desc}", "i64", (8, 16)), f"TARGSORT %t_as{desc}, %ta, {desc}"])
        out(f"tk{desc}", "i32", (8, TOPK), [tile(f"tk{desc}", "i32", (8, TOPK)), f"TARGSORT %t_tk{desc}, %ta, {desc}"])
    for kind in range(4):
        out(f"scan{kind}", dt, (8, 16), [tile(f"scan{kind}", dt, (8, 16)), f"TLOAD %t_scan{kind}, %{'p' if kind & 1 else 's'}",
                                          f"TSCAN %t_scan{kind}, %t_scan{kind}, {kind}"])
    params = [f"%a: {dt}[{R}, {C}]", f"%b: {dt}[3, {C}]", f"%igi: i32[{len(GI)}, 1]", f"%igj: i64[{len(GJ)}, 1]",
              "%isi: i64[3, 1]", "%isa: i32[3, 1]", f"%s: {dt}[{R}, {C}]", f"%p: {dt}[{R}, {C}]"]
    params += [f"%{n}: {odt}[{s[0]}, {s[1]}] out" for n, odt, s in outs]
    text = f"func @layout_edge_{dt}({', '.join(params)}) {{\n" + "".join(f"  {x}\n" for x in body) + "}\n"
    return text, outs


def fill_value(text, dt):
    """A fill scalar converted to the destination (docs/isa.md §2: a narrow tile's scalar is an
    i32, then narrowed by wrapping)."""
    v = float(text[:-1] if dt == "f32" else text)  # (f32 literals end in f)
    if dt in FLOATS:
        with np.errstate(over="ignore"):
            return NP[dt](v)
    if dt in NARROW:
        return wrap(sat_int(v, "i32"), dt)
    return sat_int(v, dt)


def stable_order(row, desc):
    """The stable permutation sorting `row` (NaN after +inf ascending, first descending)."""
    vals = [float(v) if isinstance(v, (float, np.floating)) else int(v) for v in row]
    nan = [isinstance(v, float) and np.isnan(v) for v in vals]
    if desc:
        key = lambda i: (not nan[i], 0 if nan[i] else -vals[i])  # noqa: E731
    else:
        key = lambda i: (nan[i], 0 if nan[i] else vals[i])  # noqa: E731
    return sorted(range(len(vals)), key=key)


def scan_ref(x, kind, dt):
    """Running sums / products along rows (kind bit 0: product, bit 1: from the end): exact
    wrapped integers, or float64; also the running sum of magnitudes (a float tolerance scale)."""
    x = x[:, ::-1] if kind & 2 else x
    out = np.empty(x.shape, np.float64 if dt in FLOATS else object)
    scale = np.empty(x.shape, np.float64)
    for r in range(x.shape[0]):
        acc = 1 if kind & 1 else 0
        mag = 1.0 if kind & 1 else 0.0
        for c in range(x.shape[1]):
            v = float(x[r, c]) if dt in FLOATS else int(x[r, c])
            with np.errstate(all="ignore"):
                acc = acc * v if kind & 1 else acc + v
                mag = mag * abs(float(v)) if kind & 1 else mag + abs(float(v))
            out[r, c] = acc if dt in FLOATS else wrap(acc, dt)
            scale[r, c] = mag
    if kind & 2:
        out, scale = out[:, ::-1], scale[:, ::-1]
    return (out.astype(NP[dt]) if dt in INTS else out), scale


def references(dt, a, b, s, p):
    """{output: (expected valid region, its shape's top-left extent)}; floats in float64."""
    ref = {"tr": a.T, "rs": a[:4, :12].reshape(6, 8), "ex": a[3:5, 11:13]}
    ins = a.copy()
    ins[2:5, 10:13] = b[:3, :3]
    ref["ins"] = ins
    for k, text in enumerate(FILLS[dt]):
        fp = np.full((8, 16), fill_value(text, dt), dtype=NP[dt])
        fp[:R, :C] = a
        ref[f"fp{k}"] = fp
        v = fill_value(text, dt)
        ref[f"fe{k}"] = np.full((2, 16), v, dtype=NP[dt])
        with np.errstate(all="ignore"):  # TCI: the scalar plus the column, in the compute type
            ci = [v + NP[dt](c) if dt in FLOATS else wrap(int(v) + c, "i64" if dt == "i64" else "i32") for c in range(16)]
        ref[f"ci{k}"] = np.array([ci, ci]).astype(NP[dt]) if dt in FLOATS else \
            np.array([[wrap(int(x), dt) for x in ci]] * 2, NP[dt])
    ref["gi"] = a[GI[:, 0]]
    ref["gj"] = a[GJ[:, 0]]
    sc = a.copy()
    for r, i in enumerate(SI[:, 0]):
        sc[i] = b[r]
    ref["sc"] = sc
    sa = a.astype(np.float64 if dt in FLOATS else object)
    for r, i in enumerate(SA[:, 0]):
        with np.errstate(all="ignore"):  # each addition rounds to the dtype (in order)
            sa[i] = (sa[i] + b[r].astype(sa.dtype)).astype(NP[dt]).astype(sa.dtype) if dt in FLOATS else \
                [wrap(int(u) + int(v), dt) for u, v in zip(sa[i], b[r])]
    ref["sa"] = sa.astype(NP[dt])
    for desc in (0, 1):
        order = np.array([stable_order(row, desc) for row in a], np.int64)
        ref[f"as{desc}"] = order
        ref[f"tk{desc}"] = order[:, :TOPK].astype(np.int32)
    for kind in range(4):
        ref[f"scan{kind}"] = scan_ref(p if kind & 1 else s, kind, dt)
    return ref


def same_bits(got, want, dt):
    """Elementwise: equal values, the same sign of zero, NaN where NaN."""
    if dt not in FLOATS:
        return got == want
    g, w = np.asarray(got, np.float64), np.asarray(want, np.float64)
    return (np.isnan(g) & np.isnan(w)) | ((g == w) & (np.signbit(g) == np.signbit(w)))


def inputs(dt, seed):
    rng = np.random.default_rng(seed)
    a, b = edge_array(rng, dt, (R, C)), edge_array(rng, dt, (3, C))
    a[0, 3:6] = a[0, 0]  # ties: the sort keeps their order
    if dt in FLOATS:
        a[1, :4] = [0.0, -0.0, np.nan, -np.inf]
    # Scans: integers anything (they wrap); float sums moderate, products near 1, each with specials
    # (a sum that overflows and comes back is finite in the interpreter's double, inf in f32).
    s, p = edge_array(rng, dt, (R, C)), edge_array(rng, dt, (R, C))
    if dt in FLOATS:
        s = np.where(np.isfinite(s) & (np.abs(s) > 1e6), 1e6 * np.sign(s), s).astype(NP[dt])
        p = np.where(np.isfinite(p) & (p != 0), np.sign(p) * rng.uniform(0.5, 2.0, p.shape), p).astype(NP[dt])
    return a, b, s, p


@pytest.mark.parametrize("seed", range(2))
@pytest.mark.parametrize("dt", ["f32", "f64", "i32", "i64", "i8", "u8", "i16"])
def test_layout_gather_scan_extremes_interp_cpu_numpy(dt, seed):
    text, outs = program_text(dt)
    a, b, s, p = inputs(dt, seed)
    results = run_both(text, {"a": a, "b": b, "igi": GI, "igj": GJ, "isi": SI, "isa": SA, "s": s, "p": p})
    ref = references(dt, a, b, s, p)
    failures = []
    for name, odt, shape in outs:
        want = ref[name]
        scale = None
        if isinstance(want, tuple):
            want, scale = want
        rows, cols = want.shape
        for bk, res in results.items():
            got = res[name]
            region = got[:rows, :cols]
            if scale is not None and dt in FLOATS:  # a float scan: within a few ulp of the magnitudes
                g, w = region.astype(np.float64), want
                with np.errstate(all="ignore"):
                    ok = same_bits(g, w, dt) | (np.isfinite(g) & np.isfinite(w) &
                                                (np.abs(g - w) <= 8 * np.finfo(NP[dt]).eps * scale))
            else:
                ok = same_bits(region, want.astype(got.dtype) if dt not in FLOATS or odt not in FLOATS else want, odt)
            # Outside the written region the output keeps its poison on both backends.
            rest = np.ones(got.shape, bool)
            rest[:rows, :cols] = False
            if not (results["interp"][name][rest] == got[rest]).all() and odt not in FLOATS:
                failures.append(f"{bk} {name}: wrote outside its valid region")
            if odt in FLOATS and not np.isnan(got[rest]).all():
                failures.append(f"{bk} {name}: wrote outside its valid region")
            if not np.all(ok):
                i = tuple(np.argwhere(~ok)[0])
                failures.append(f"{bk} {name} at {i}: got {region[i]!r}, want {want[i]!r}")
    assert not failures, "\n".join(failures[:20])


@pytest.mark.parametrize("backend", ["interp", "cpu"])
def test_out_of_range_gather_and_scatter_indices(backend):
    """docs/isa.md §7.9: a TGATHER index outside [0, src.vr) and a TSCATTER index outside [0, d.R):
    the interpreter reports the instruction and the index; the CPU headers write a zero row /
    skip the row instead."""
    x = np.arange(30, dtype=np.float32).reshape(6, 5) + 1
    gather = pypto.isa.parse(
        "func @g(%x: f32[6, 5], %i: i32[2, 1], %o: f32[2, 5] out) {\n  alloc %a: f32[8, 8] vec\n"
        "  alloc %j: i32[2, 1] vec\n  alloc %d: f32[2, 8] vec\n  TLOAD %a, %x\n  TLOAD %j, %i\n"
        "  TGATHER %d, %a, %j\n  TSTORE %o, %d\n}\n")
    scatter = pypto.isa.parse(
        "func @s(%x: f32[6, 5], %i: i64[2, 1], %o: f32[6, 5] out) {\n  alloc %a: f32[6, 5] vec\n"
        "  alloc %j: i64[2, 1] vec\n  alloc %b: f32[2, 5] vec\n  TLOAD %a, %x\n  TLOAD %b, %x[0:2, 0:5]\n"
        "  TLOAD %j, %i\n  TSCATTER %a, %b, %j\n  TSTORE %o, %a\n}\n")
    for idx in (6, -1, np.iinfo(np.int32).min):
        gi = np.array([[1], [idx]], np.int32)
        si = np.array([[3], [idx if idx != np.iinfo(np.int32).min else np.iinfo(np.int64).max]], np.int64)
        if backend == "interp":
            with pytest.raises(pypto.PyptoError, match=r"index -?\d+ .*out of range.*TGATHER"):
                pypto.isa.run(gather, {"x": x, "i": gi}, backend=backend)
            with pytest.raises(pypto.PyptoError, match=r"index -?\d+ .*out of range.*TSCATTER"):
                pypto.isa.run(scatter, {"x": x, "i": si}, backend=backend)
            continue
        g = pypto.isa.run(gather, {"x": x, "i": gi}, backend=backend)["o"]
        assert np.array_equal(g, np.stack([x[1], np.zeros(5, np.float32)])), g
        s = pypto.isa.run(scatter, {"x": x, "i": si}, backend=backend)["o"]
        want = x.copy()
        want[3] = x[0]
        assert np.array_equal(s, want), s
