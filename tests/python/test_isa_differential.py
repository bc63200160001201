"""Differential tests: the same ISA programs on the reference interpreter and on the CPU backend
(generated C++), which must agree: identical NaN (unwritten) positions, equal integers and bools,
floats within a relative-norm tolerance (reduction order and vectorised transcendentals differ).
Fixed cases batch many opcodes per program (one compile each); hypothesis adds random programs."""
import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pypto_testutil import requires_compiler
from test_isa_util import UNARY_DOMAIN, UNARY_REF, PyptoError, func, isa, rand, rand_int

TOL = 2e-6

# Skipped only when no C++ compiler is found: a CPU backend that fails to build or run a kernel
# fails these tests (it used to turn them into skips). Each test runs in a forked child
# (crash_isolation.py), so a kernel that crashes fails its own test only.
pytestmark = [requires_compiler, pytest.mark.isolated]


def compare(text, tol=TOL, **inputs):
    """Runs on both backends (each on its own copies of the inputs) and compares every output."""
    prog = isa.parse(text)
    isa.verify(prog, "tile")
    copy = lambda d: {k: (v.copy() if hasattr(v, "copy") else v) for k, v in d.items()}  # noqa: E731
    ref = isa.run(prog, copy(inputs), backend="interp")
    got = isa.run(prog, copy(inputs), backend="cpu")
    assert ref.keys() == got.keys()
    for name in ref:
        r, g = ref[name], got[name]
        assert r.dtype == g.dtype and r.shape == g.shape, name
        if r.dtype.kind != "f":
            np.testing.assert_array_equal(g, r, err_msg=name)
            continue
        nan_r, nan_g = np.isnan(r), np.isnan(g)
        assert (nan_r == nan_g).all(), f"{name}: written elements differ (NaN at {np.argwhere(nan_r != nan_g)[:5]})"
        fin = ~nan_r & np.isfinite(r)
        np.testing.assert_array_equal(np.isinf(r), np.isinf(g), err_msg=f"{name}: infinities differ")
        assert (r[np.isinf(r)] == g[np.isinf(r)]).all(), name
        rr, gg = r[fin].astype(np.float64), g[fin].astype(np.float64)
        err = np.linalg.norm(gg - rr) / max(np.linalg.norm(rr), 1e-30)
        assert err <= tol, f"{name}: relative error {err:.3g}"
    return ref


def batch(decls, setup, per_op, ops, out_shape):
    """One program applying each op in turn (lines from per_op(op)) and storing to its own output."""
    outs = [f"%o_{op}: {out_shape} out" for op in ops]
    body = list(setup)
    for op in ops:
        body += per_op(op) + [f"TSTORE %o_{op}, %d"]
    return func(decls + outs, body)


def test_opcode_coverage():
    """Every opcode appears in a program of this file (or the shared op tables it uses)."""
    import pathlib
    import re

    here = pathlib.Path(__file__).parent
    src = (here / "test_isa_differential.py").read_text() + (here / "test_isa_util.py").read_text()
    missing = [op for op in isa.opcode_names() if not re.search(rf"\b{op}\b", src)]
    assert not missing, f"opcodes without a differential test: {missing}"


# ---- fixed cases --------------------------------------------------------------------------------

POSITIVE = sorted(UNARY_DOMAIN)
ANY_SIGN = sorted(set(UNARY_REF) - set(POSITIVE) - {"TNOT"})


@pytest.mark.parametrize("ops,lo,hi", [(ANY_SIGN, -3.0, 3.0), (POSITIVE, 0.1, 4.0)], ids=["any_sign", "positive"])
def test_unary_batch(ops, lo, hi):
    text = batch(["%x: f32[5, 7]"], ["alloc %a: f32[8, 8] vec", "alloc %d: f32[8, 8] vec", "TLOAD %a, %x"],
                 lambda op: [f"{op} %d, %a"], ops, "f32[8, 8]")
    compare(text, x=rand((5, 7), lo, hi))


def test_tnot_and_logic():
    text = batch(["%x: f32[5, 7]", "%y: f32[5, 7]"],
                 ["alloc %a: f32[8, 8] vec", "alloc %b: f32[8, 8] vec", "alloc %d: f32[8, 8] vec",
                  "TLOAD %a, %x", "TLOAD %b, %y"],
                 lambda op: [f"{op} %d, %a"] if op == "TNOT" else [f"{op} %d, %a, %b"],
                 ["TNOT", "TAND", "TOR"], "f32[8, 8]")
    compare(text, x=rand_int((5, 7), 0, 2).astype(np.float32), y=rand_int((5, 7), 0, 2).astype(np.float32))


BITWISE = ["TBAND", "TBOR", "TBXOR", "TSHL", "TSHR"]


@pytest.mark.parametrize("ty, npt", [("i8", np.int8), ("u8", np.uint8), ("i16", np.int16), ("i32", np.int32),
                                     ("i64", np.int64)])
def test_bitwise_and_shifts(ty, npt):
    """Bitwise ops and shifts on every integer width, with the extremes and shift counts past the
    width (0 for <<, the sign fill for >>): interpreter and CPU agree bit for bit."""
    info = np.iinfo(npt)
    x = rand_int((5, 7), info.min // 2, info.max // 2 + 1, np.int64).astype(npt)
    x[0, :3] = [info.min, info.max, -1 if info.min < 0 else 0]
    y = rand_int((5, 7), 0, 8 * x.itemsize + 3, np.int64).astype(npt)  # shift counts, some past the width
    text = batch([f"%x: {ty}[5, 7]", f"%y: {ty}[5, 7]"],
                 [f"alloc %a: {ty}[8, 8] vec", f"alloc %b: {ty}[8, 8] vec", f"alloc %d: {ty}[8, 8] vec",
                  "TLOAD %a, %x", "TLOAD %b, %y"],
                 lambda op: ["TBNOT %d, %a"] if op == "TBNOT" else [f"{op} %d, %a, %b"],
                 BITWISE + ["TBNOT"], f"{ty}[8, 8]")
    compare(text, x=x, y=y)


ARITH = ["TADD", "TSUB", "TMUL", "TDIV", "TMAX", "TMIN", "TATAN2", "THYPOT", "TCOPYSIGN", "TFMOD", "TREM",
         "TFLOORDIV"]
CMP = ["TCMP_LT", "TCMP_LE", "TCMP_GT", "TCMP_GE", "TCMP_EQ", "TCMP_NE"]
FORMS = {  # tile b's shape, the source of b, how the op reads its operands
    "tile_tile": ("8, 8", "6, 8", "%a, %b"),
    "tile_scalar": ("8, 8", "6, 8", "%a, 1.75f"),
    "scalar_tile": ("8, 8", "6, 8", "-0.5f, %a"),
    "row_bcast": ("1, 8", "1, 8", "%a, %b"),
    "col_bcast": ("8, 1", "6, 1", "%b, %a"),
    "valid_intersection": ("8, 8", "4, 7", "%a, %b"),
}


@pytest.mark.parametrize("form", sorted(FORMS))
@pytest.mark.parametrize("group", ["arith", "pow", "cmp"])
def test_binary_batch(group, form):
    tb, yshape, args = FORMS[form]
    ops = {"arith": ARITH, "pow": ["TPOW"], "cmp": CMP}[group]
    text = batch(["%x: f32[6, 8]", f"%y: f32[{yshape}]"],
                 ["alloc %a: f32[8, 8] vec", f"alloc %b: f32[{tb}] vec", "alloc %d: f32[8, 8] vec",
                  "TLOAD %a, %x", "TLOAD %b, %y"],
                 lambda op: [f"{op} %d, {args}"], ops, "f32[8, 8]")
    ys = tuple(int(v) for v in yshape.split(","))
    if group == "pow":
        x, y = rand((6, 8), 0.5, 2.0), rand(ys, 0.5, 2.0)
    elif group == "cmp":
        x, y = (rand_int((6, 8), -2, 3).astype(np.float32), rand_int(ys, -2, 3).astype(np.float32))
    else:
        x, y = rand((6, 8)), rand(ys)
    compare(text, x=x, y=y)


def test_compare_select_convert():
    x, y = rand_int((5, 9), -2, 3).astype(np.float32), rand((5, 9), -40, 40)
    text = func(["%x: f32[5, 9]", "%y: f32[5, 9]", "%m: bool[5, 9] out", "%s: f32[5, 9] out",
                 "%i: i32[5, 9] out", "%l: i64[5, 9] out", "%f: f32[5, 9] out", "%b: f32[5, 9] out"],
                ["alloc %a: f32[5, 9] vec", "alloc %c: f32[5, 9] vec", "alloc %k: bool[5, 9] vec",
                 "alloc %d: f32[5, 9] vec", "alloc %n: i32[5, 9] vec", "alloc %q: i64[5, 9] vec",
                 "TLOAD %a, %x", "TLOAD %c, %y", "TCMP_GE %k, %a, %c", "TSTORE %m, %k",
                 "TSEL %d, %k, %a, -2.5f", "TSTORE %s, %d",
                 "TCVT %n, %c", "TSTORE %i, %n", "TCVT %q, %c", "TSTORE %l, %q",
                 "TCVT %d, %n", "TSTORE %f, %d", "TCVT %d, %k", "TSTORE %b, %d"])
    compare(text, x=x, y=y)


def test_fill_and_scalars():
    text = func(["%o: f32[6, 8] out", "%p: i32[6, 8] out", "%q: f32[6, 8] out", "%s: f32", "%n: i64"],
                ["alloc %a: f32[6, 8] vec", "alloc %b: i32[6, 8] vec", "TEXPANDS %a, %s", "TSTORE %o, %a",
                 "TCI %b, (%n * 2)", "TSTORE %p, %b", "TCI %a, %s", "TMUL %a, %a, (%s + 1.0f)", "TSTORE %q, %a"])
    compare(text, s=2.5, n=-3)


@pytest.mark.parametrize("dt", ["f32", "i32"])
def test_reduce_expand_batch(dt):
    """Mixed-sign, all-positive and all-negative data: a max (min) starting from 0 instead of
    -inf / the type's lowest (+inf / highest) shows on the one-signed inputs."""
    text = func([f"%x: {dt}[5, 7]"] + [f"%o_{op}: {dt}[8, 1] out" for op in ["TROWSUM", "TROWMAX", "TROWMIN"]]
                + [f"%o_{op}: {dt}[1, 16] out" for op in ["TCOLSUM", "TCOLMAX", "TCOLMIN"]]
                + [f"%re: {dt}[8, 16] out", f"%ce: {dt}[8, 16] out"],
                [f"alloc %a: {dt}[8, 16] vec", f"alloc %r: {dt}[8, 1] vec", f"alloc %c: {dt}[1, 16] vec",
                 f"alloc %e: {dt}[8, 16] vec", "TLOAD %a, %x"]
                + sum(([f"{op} %r, %a", f"TSTORE %o_{op}, %r"] for op in ["TROWSUM", "TROWMAX", "TROWMIN"]), [])
                + sum(([f"{op} %c, %a", f"TSTORE %o_{op}, %c"] for op in ["TCOLSUM", "TCOLMAX", "TCOLMIN"]), [])
                + ["TROWEXPAND %e, %r", "TSTORE %re, %e", "TCOLEXPAND %e, %c", "TSTORE %ce, %e"])
    x = rand((5, 7)) if dt == "f32" else rand_int((5, 7), -50, 50)
    for data in (x, np.abs(x) + (x == 0), -np.abs(x) - (x == 0)):
        ref = compare(text, x=data)
        want = data.astype(np.float64)
        np.testing.assert_allclose(ref["o_TROWMAX"][:5, 0], want.max(1), rtol=1e-6)
        np.testing.assert_allclose(ref["o_TROWMIN"][:5, 0], want.min(1), rtol=1e-6)
        np.testing.assert_allclose(ref["o_TCOLMAX"][0, :7], want.max(0), rtol=1e-6)
        np.testing.assert_allclose(ref["o_TCOLMIN"][0, :7], want.min(0), rtol=1e-6)


def test_matmul_batch():
    A, B, B2, C0, bias = rand((20, 13)), rand((13, 9)), rand((11, 9)), rand((24, 12)), rand((1, 9))
    text = func(["%A: f32[20, 13]", "%B: f32[13, 9]", "%B2: f32[11, 9]", "%C0: f32[24, 12]", "%bias: f32[1, 9]",
                 "%M: f32[32, 16] out", "%R: f32[32, 16] out", "%C: f32[32, 16] out", "%D: f32[32, 16] out"],
                ["alloc %a: f32[32, 16] mat", "alloc %b: f32[16, 16] mat", "alloc %b2: f32[16, 16] mat",
                 "alloc %c: f32[32, 16] acc", "alloc %bi: f32[1, 16] vec", "alloc %d: f32[32, 16] acc",
                 "TLOAD %a, %A", "TLOAD %b, %B", "TLOAD %b2, %B2", "TLOAD %bi, %bias",
                 "TMATMUL %d, %a, %b", "TSTORE %M, %d",
                 "TMATMUL %d, %a, %b2", "TSTORE %R, %d",            # ragged K: 11 of 13
                 "TLOAD %c, %C0", "TMATMUL_ACC %c, %a, %b", "TSTORE %C, %c",
                 "TMATMUL_BIAS %d, %a, %b, %bi", "TSTORE %D, %d"])
    compare(text, A=A, B=B, B2=B2, C0=C0, bias=bias)


@pytest.mark.parametrize("M,K,N,T", [(37, 45, 29, 16), (64, 64, 64, 32), (5, 70, 3, 16)])
def test_tiled_matmul(M, K, N, T):
    v = lambda r, c, R, C: f"{r}:{T} valid min({T}, ({R} - {r})), {c}:{T} valid min({T}, ({C} - {c}))"  # noqa: E731
    text = func([f"%A: f32[{M}, {K}]", f"%B: f32[{K}, {N}]", f"%C: f32[{M}, {N}] out"],
                [f"parallel for %i = 0 to {M} step {T} {{", f"  for %j = 0 to {N} step {T} {{",
                 f"    alloc %c: f32[{T}, {T}] acc", "    TEXPANDS %c, 0.0f",
                 f"    for %k = 0 to {K} step {T} {{",
                 f"      alloc %a: f32[{T}, {T}] mat", f"      alloc %b: f32[{T}, {T}] mat",
                 f"      TLOAD %a, %A[{v('%i', '%k', M, K)}]", f"      TLOAD %b, %B[{v('%k', '%j', K, N)}]",
                 "      TMATMUL_ACC %c, %a, %b", "    }", f"    TSTORE %C[{v('%i', '%j', M, N)}], %c", "  }", "}"])
    compare(text, A=rand((M, K)), B=rand((K, N)))


def test_layout_batch():
    x, y = rand((5, 7)), rand((3, 5))
    text = func(["%x: f32[5, 7]", "%y: f32[3, 5]", "%full: f32[4, 6]", "%tr: f32[8, 8] out", "%rs: f32[3, 8] out",
                 "%ex: f32[4, 4] out", "%ex2: f32[4, 4] out", "%ins: f32[8, 8] out", "%fp: f32[8, 8] out"],
                ["alloc %a: f32[8, 8] vec", "alloc %t: f32[8, 8] vec", "alloc %f: f32[4, 6] vec",
                 "alloc %r: f32[3, 8] vec", "alloc %e: f32[4, 4] vec", "alloc %b: f32[4, 8] vec",
                 "TLOAD %a, %x", "TTRANS %t, %a", "TSTORE %tr, %t",
                 "TLOAD %f, %full", "TRESHAPE %r, %f", "TSTORE %rs, %r",
                 "TEXTRACT %e, %a, 1, 2", "TSTORE %ex, %e", "TEXTRACT %e, %a, 3, 5", "TSTORE %ex2, %e",
                 "TLOAD %b, %y", "TFILLPAD %t, %a, -1.5f", "TSTORE %fp, %t",
                 "TINSERT %t, %b, 6, 4", "TSTORE %ins, %t"])
    compare(text, x=x, y=y, full=rand((4, 6)))


def test_gather_scatter():
    x, y = rand((6, 5)), rand((3, 5))
    text = func(["%x: f32[6, 5]", "%y: f32[3, 5]", "%gi: i32[4, 1]", "%si: i64[3, 1]", "%g: f32[8, 8] out",
                 "%s: f32[6, 5] out"],
                ["alloc %a: f32[8, 8] vec", "alloc %i: i32[8, 1] vec", "alloc %d: f32[8, 8] vec",
                 "alloc %b: f32[3, 5] vec", "alloc %j: i64[3, 1] vec", "alloc %c: f32[6, 5] vec",
                 "TLOAD %a, %x", "TLOAD %i, %gi", "TGATHER %d, %a, %i", "TSTORE %g, %d",
                 "TLOAD %c, %x", "TLOAD %b, %y", "TLOAD %j, %si", "TSCATTER %c, %b, %j", "TSTORE %s, %c"])
    compare(text, x=x, y=y, gi=np.array([[4], [0], [4], [2]], np.int32), si=np.array([[5], [1], [3]], np.int64))


def test_indexed_rows():
    """TSCATTER_ADD, MGATHER (a transposed table view), MSCATTER / MSCATTER_ADD into global memory,
    rank-1 tables (each element a row), and the out-of-range error on both backends."""
    x, y = rand((6, 5)), rand((3, 5))
    text = func(["%x: f32[6, 5]", "%y: f32[3, 5]", "%v: f32[9]", "%ix: i32[3, 1]", "%jx: i64[1, 4]",
                 "%a: f32[6, 5] out", "%g: f32[4, 6] out", "%s: f32[6, 5] out", "%vg: f32[4, 1] out"],
                ["alloc %c: f32[6, 5] vec", "alloc %b: f32[3, 5] vec", "alloc %i: i32[3, 1] vec",
                 "alloc %j: i64[1, 4] vec", "alloc %d: f32[4, 8] vec", "alloc %e: f32[4, 1] vec",
                 "TLOAD %c, %x", "TLOAD %b, %y", "TLOAD %i, %ix", "TLOAD %j, %jx",
                 "TSCATTER_ADD %c, %b, %i", "TSTORE %a, %c",
                 "MGATHER %d, %x[0:6, 0:5] perm(1, 0), %j", "TSTORE %g, %d",
                 "TSTORE %s, %c", "MSCATTER %s, %b, %i", "MSCATTER_ADD %s, %b, %i",
                 "MGATHER %e, %v, %j", "TSTORE %vg, %e"])
    compare(text, x=x, y=y, v=rand((9,)), ix=np.array([[5], [1], [5]], np.int32),
            jx=np.array([[4, 0, 2, 2]], np.int64))
    for backend in ["interp", "cpu"]:
        with pytest.raises(PyptoError, match="MGATHER: index 5 is out of range for a dimension of size 5"):
            isa.run(isa.parse(text), {"x": x, "y": y, "v": rand((9,)), "ix": np.array([[5], [1], [5]], np.int32),
                                      "jx": np.array([[4, 0, 5, 2]], np.int64)}, backend=backend)


def test_whole_matrix_products():
    """MMATMUL into a window of the output (a transposed, strided operand view, ragged K), then
    MMATMUL_ACC onto the same window; the rest of the output is left alone."""
    x, w, y = rand((40, 70)), rand((50, 70)), rand((70, 33))
    text = func(["%x: f32[40, 70]", "%w: f32[50, 70]", "%y: f32[70, 33]", "%o: f32[45, 60] out"],
                ["MMATMUL %o[2:40, 3:25], %x, %w[0:25 step 2, 0:70] perm(1, 0)",
                 "MMATMUL_ACC %o[2:40, 3:25], %x[0:40, 0:70 valid 69], %y[0:70, 0:25]"])
    o = compare(text, x=x, w=w, y=y)["o"]
    x64, w64, y64 = (a.astype(np.float64) for a in (x, w, y))
    want = x64 @ w64[:50:2].T + x64[:, :69] @ y64[:69, :25]
    assert np.linalg.norm(o[2:42, 3:28] - want) / np.linalg.norm(want) < 1e-6
    o[2:42, 3:28] = np.nan
    assert np.isnan(o).all()


def test_argsort():
    x = rand((5, 37))
    x[1, 3] = x[1, 9] = x[2, 4]  # ties keep their order
    for desc in (0, 1):
        text = func(["%x: f32[5, 37]", "%o: i64[5, 37] out"],
                    ["alloc %a: f32[8, 40] vec", "alloc %d: i64[8, 40] vec", "TLOAD %a, %x",
                     f"TARGSORT %d, %a, {desc}", "TSTORE %o, %d"])
        compare(text, x=x)


@pytest.mark.parametrize("dt", ["f32", "i32", "f64"])
def test_argsort_long_rows(dt):
    """Rows of 300 (the CPU's radix sort for 32-bit keys, a merge sort for f64): ties keep their
    order, -0.0 and +0.0 are equal (kept in place), NaN of either sign sorts after +inf
    ascending and first descending, a row of one value, a row whose keys share their high bytes."""
    x = rand((6, 300)).astype(np.float64)
    x[0, ::7] = x[0, 5]                         # many ties
    x[1, 10], x[1, 20], x[1, 30] = -0.0, 0.0, -0.0
    x[2, 3], x[2, 50], x[2, 99] = np.nan, -np.nan, np.inf
    x[2, 4], x[2, 60] = -np.inf, np.nan
    x[3, :] = 2.5
    x[4, :] = 1.0 + np.arange(300) * 1e-6       # one exponent: only the low bytes differ
    if dt == "i32":
        x = np.nan_to_num(x * 50, posinf=1e9, neginf=-1e9).astype(np.int32)
    np_dt = {"f32": np.float32, "i32": np.int32, "f64": np.float64}[dt]
    x = x.astype(np_dt)
    for desc in (0, 1):
        text = func([f"%x: {dt}[6, 300]", "%o: i64[6, 300] out"],
                    [f"alloc %a: {dt}[8, 304] vec", "alloc %d: i64[8, 304] vec", "TLOAD %a, %x",
                     f"TARGSORT %d, %a, {desc}", "TSTORE %o, %d"])
        ref = compare(text, x=x)
        import torch
        want = torch.sort(torch.from_numpy(x), dim=-1, descending=bool(desc), stable=True).indices.numpy()
        np.testing.assert_array_equal(ref["o"], want)


def _arg_extreme_rows():
    """Rows of 70 (four 16-lane blocks and a tail) covering each way to get an arg-reduction wrong:
    ties (the first wins), the extreme in the tail, signed zeros, infinities, NaN (the first NaN
    wins, also where an infinity or a later extreme comes first), a row of equal values."""
    x = rand((9, 70))
    x[0, 5] = x[0, 60] = 9.0       # tied maximum, in a vector block and in another
    x[0, 7] = x[0, 66] = -9.0      # tied minimum, the second in the tail
    x[1, 68] = 7.0                 # the extreme in the scalar tail
    x[1, 69] = -7.0
    x[2, :] = -np.abs(x[2, :]) - 0.5
    x[2, 10], x[2, 40] = -0.0, 0.0  # signed zeros compare equal: the first is the maximum
    x[3, 20], x[3, 30] = np.inf, -np.inf
    x[4, 50], x[4, 2], x[4, 3] = np.nan, np.inf, -np.inf  # NaN after the infinities
    x[5, 17], x[5, 69] = np.nan, np.nan                   # two NaNs: the first
    x[6, 69] = np.nan                                     # a NaN in the tail only
    x[7, :] = 3.5                                         # all equal: column 0
    x[8, :] = -np.inf
    return x


def test_row_arg_extremes():
    """TROWARGMAX / TROWARGMIN on both backends, equal to NumPy's first-extreme rule with NaN
    counted as the extreme (torch.argmax's), into i64 and i32, f32 and i32 sources."""
    x = _arg_extreme_rows()
    for dt, data in (("f32", x), ("i32", np.nan_to_num(x, posinf=5, neginf=-5).astype(np.int32))):
        for op in ("TROWARGMAX", "TROWARGMIN"):
            for it in ("i64", "i32"):
                text = func([f"%x: {dt}[9, 70]", f"%o: {it}[9, 1] out"],
                            [f"alloc %a: {dt}[16, 72] vec", f"alloc %d: {it}[16, 1] vec", "TLOAD %a, %x",
                             f"{op} %d, %a", "TSTORE %o, %d"])
                ref = compare(text, x=data)
                d64 = data.astype(np.float64)
                nan = np.isnan(d64)
                want = np.where(nan.any(1), nan.argmax(1), d64.argmax(1) if op == "TROWARGMAX" else d64.argmin(1))
                np.testing.assert_array_equal(ref["o"][:, 0], want, err_msg=f"{dt} {op} {it}")


def test_topk_selection_and_scan():
    """TARGSORT into a narrow destination (the CPU's selection path) and TSCAN (running sums and
    products, forward and from the end) on a ragged valid region with NaN and ties."""
    x = rand((5, 70))
    x[1, 3] = x[1, 9] = x[2, 4]
    x[3, 11] = np.nan
    for desc in (0, 1):
        text = func(["%x: f32[5, 70]", "%o: i64[5, 6] out"],
                    ["alloc %a: f32[8, 72] vec", "alloc %d: i64[8, 6] vec", "TLOAD %a, %x",
                     f"TARGSORT %d, %a, {desc}", "TSTORE %o, %d"])
        compare(text, x=x)
    y = rand((5, 37)) * 0.5 + 1.0
    y[1, 5], y[2, 9], y[2, 30], y[3, 0] = np.nan, np.inf, -np.inf, -0.0  # the running max / min's rule
    for kind in range(8):
        text = func(["%x: f32[5, 37]", "%o: f32[5, 37] out"],
                    ["alloc %a: f32[8, 40] vec", "TLOAD %a, %x", f"TSCAN %a, %a, {kind}", "TSTORE %o, %a"])
        compare(text, x=y, tol=1e-5)


def test_integer_gcd_floordiv_rem():
    a = rand_int((4, 6), -40, 40)
    b = rand_int((4, 6), -9, 10)  # zeros included: x // 0 == x % 0 == 0, gcd(x, 0) == |x|
    body = ["alloc %a: i32[4, 6] vec", "alloc %b: i32[4, 6] vec", "alloc %d: i32[4, 6] vec",
            "TLOAD %a, %x", "TLOAD %b, %y"]
    for op in ("TGCD", "TFLOORDIV", "TREM", "TFMOD"):
        text = func(["%x: i32[4, 6]", "%y: i32[4, 6]", "%o: i32[4, 6] out"], body + [f"{op} %d, %a, %b", "TSTORE %o, %d"])
        compare(text, x=a, y=b)


def test_memory_batch():
    """Edge tiles, transposed/stepped/dropped-dim views, f16 conversion, global scratch, sync."""
    v = "%i:64 valid min(64, (50 - %i)), %j:64 valid min(64, (70 - %j))"
    text = func(["%x: f32[50, 70]", "%h: f16[6, 10]", "%z: f32[3, 4, 5]", "%o: f32[50, 70] out",
                 "%tr: f32[10, 6] out", "%ho: f16[6, 10] out", "%st: f32[1, 8] out", "%zo: f32[3, 4, 5] out"],
                ["alloc %t: f32[64, 64] vec", "SET_FLAG 2, 1, 0",
                 "parallel for %i = 0 to 50 step 64 {", "  for %j = 0 to 70 step 64 {",
                 f"    TPREFETCH %x[{v}]", f"    TLOAD %t, %x[{v}]", "    TSQRT %t, %t", f"    TSTORE %o[{v}], %t",
                 "  }", "}", "WAIT_FLAG 2, 1, 0", "PIPE_BARRIER 5",
                 "alloc %u: f32[16, 16] vec", "alloc %g: f32[6, 10] gm",
                 "TLOAD %u, %h", "TMUL %u, %u, 3.0f", "TSTORE %g, %u", "TLOAD %u, %g", "TSTORE %ho, %u",
                 "TLOAD %u, %h[0:6, 0:10] perm(1, 0)", "TSTORE %tr, %u",
                 "TLOAD %u, %x[2, 1:8 step 9]", "TSTORE %st, %u",
                 "alloc %w: f32[4, 5] vec",
                 "for %b = 0 to 3 {", "  TLOAD %w, %z[%b, 0:4, 0:5]", "  TNEG %w, %w",
                 "  TSTORE %zo[%b, 0:4, 0:5], %w", "}"])
    compare(text, x=rand((50, 70), 0.1, 3.0), h=rand((6, 10)).astype(np.float16), z=rand((3, 4, 5)))


@pytest.mark.parametrize("layout", ["transposed", "sliced", "negative", "broadcast"])
def test_strided_caller_arrays(layout):
    base = rand((12, 18))
    x = {"transposed": base.T[:12, :12], "sliced": base[::2, 1::3], "negative": base[::-1, ::-2],
         "broadcast": np.broadcast_to(base[0], (6, 18))}[layout]
    r, c = x.shape
    text = func([f"%x: f32[{r}, {c}]", f"%o: f32[{r}, {c}] out"],
                [f"alloc %t: f32[{r}, {c}] vec", "TLOAD %t, %x", "TEXP %t, %t", "TSTORE %o, %t"])
    compare(text, x=x)


def test_bfloat16():
    import torch
    x = torch.from_numpy(rand((4, 12))).to(torch.bfloat16)
    text = func(["%x: bf16[4, 12]", "%o: bf16[4, 12] out", "%p: f32[4, 12] out"],
                ["alloc %t: f32[4, 12] vec", "TLOAD %t, %x", "TMUL %t, %t, 1.3f", "TSTORE %o, %t", "TSTORE %p, %t"])
    compare(text, x=x)


# ---- random programs ----------------------------------------------------------------------------

SAFE_UNARY = ["TNEG", "TABS", "TRELU", "TTANH", "TSIGMOID", "TERF", "TGELU", "TGELU_TANH", "TSILU", "TFLOOR", "TMOV",
              "TERFC"]


@st.composite
def chains(draw):
    """A random elementwise/reduction chain over ragged tiles of 1-2 inputs, in (parallel) loops."""
    M, N = draw(st.integers(1, 70)), draw(st.integers(1, 70))
    TR, TC = draw(st.sampled_from([8, 16, 32])), draw(st.sampled_from([8, 16, 32, 64]))
    two = draw(st.booleans())
    v = lambda x: f"%{x}[%i:{TR} valid min({TR}, ({M} - %i)), %j:{TC} valid min({TC}, ({N} - %j))]"  # noqa: E731
    body = [f"alloc %a: f32[{TR}, {TC}] vec", f"alloc %b: f32[{TR}, {TC}] vec", f"alloc %u: f32[{TR}, {TC}] vec",
            f"alloc %r: f32[{TR}, 1] vec", f"alloc %c: f32[1, {TC}] vec", f"alloc %m: bool[{TR}, {TC}] vec",
            f"TLOAD %a, {v('x')}", f"TLOAD %b, {v('y') if two else v('x')}"]
    for _ in range(draw(st.integers(1, 8))):
        k = draw(st.integers(0, 7))
        if k <= 1:
            body.append(f"{draw(st.sampled_from(SAFE_UNARY))} %a, %a")
        elif k == 2:
            op = draw(st.sampled_from(["TADD", "TSUB", "TMUL", "TMAX", "TMIN"]))
            other = draw(st.sampled_from(["%b", "0.75f", "%s"]))
            body.append(f"{op} %a, %a, {other}" if draw(st.booleans()) else f"{op} %a, {other}, %a")
        elif k == 3:  # a safe division
            body += ["TABS %u, %b", "TADD %u, %u, 1.0f", "TDIV %a, %a, %u"]
        elif k == 4:
            body += [f"{draw(st.sampled_from(['TCMP_GT', 'TCMP_LE', 'TCMP_NE']))} %m, %a, %b", "TSEL %a, %m, %a, %b"]
        elif k == 5:
            body += [f"{draw(st.sampled_from(['TROWMAX', 'TROWSUM', 'TROWMIN']))} %r, %a", "TSUB %a, %a, %r"]
        elif k == 6:
            body += [f"{draw(st.sampled_from(['TCOLSUM', 'TCOLMAX', 'TCOLMIN']))} %c, %a", "TADD %a, %a, %c"]
        else:
            body += ["TTANH %u, %a", "TEXP %a, %u"]
    body.append(f"TSTORE {v('o')}, %a")
    loop = "parallel for" if draw(st.booleans()) else "for"
    lines = [f"{loop} %i = 0 to {M} step {TR} {{", f"  for %j = 0 to {N} step {TC} {{"]
    lines += ["    " + b for b in body] + ["  }", "}"]
    return func([f"%x: f32[{M}, {N}]", f"%y: f32[{M}, {N}]", f"%o: f32[{M}, {N}] out", "%s: f32"], lines), M, N


@settings(derandomize=True, max_examples=int(os.environ.get("PYPTO_HYPOTHESIS_EXAMPLES", 25)), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(chains(), st.integers(0, 2**31 - 1))
def test_random_chains(case, seed):
    text, M, N = case
    rng = np.random.default_rng(seed)
    x = rng.uniform(-2, 2, (M, N)).astype(np.float32)
    y = rng.uniform(-2, 2, (M, N)).astype(np.float32)
    # The fixed cases' tolerance: over these examples the largest error is 1.5e-7 (row sums of up to
    # 70 terms, then subtracted, differ only in summation order), so 2e-6 still has a 10x margin
    # while a real slip (a dropped element, a wrong initial value) is orders of magnitude larger.
    out = compare(text, x=x, y=y, s=float(rng.uniform(-2, 2)))
    assert not np.isnan(out["o"]).any()


def test_depthwise_plane_correlation():
    """TDWCONV on both backends: f32 (16-column blocks, a masked tail), f64 and i32, over a ragged
    source region, with strides, dilations and zero padding on every side."""
    x = rand((13, 37))
    w = rand((3, 5))
    for dt, xd, wd in (("f32", x, w), ("f64", x.astype(np.float64), w.astype(np.float64)),
                       ("i32", (x * 8).astype(np.int32), (w * 4).astype(np.int32))):
        for sh, sw, dh, dwl, pads in ((1, 1, 1, 1, (0, 0, 0, 0)), (2, 1, 1, 2, (1, 2, 3, 0)),
                                      (1, 3, 2, 1, (2, 2, 2, 2)), (1, 1, 1, 1, (0, 1, 20, 1)),
                                      (2, 2, 1, 1, (1, 1, 1, 1)), (1, 2, 1, 2, (0, 0, 3, 2))):
            pt, pb, pl, pr = pads
            xp = np.pad(xd[:11, :35], ((pt, pb), (pl, pr)))
            ho, wo = (11 + pt + pb - 2 * dh - 1) // sh + 1, (35 + pl + pr - 4 * dwl - 1) // sw + 1
            text = func([f"%x: {dt}[13, 37]", f"%w: {dt}[3, 5]", f"%o: {dt}[{ho}, {wo}] out"],
                        [f"alloc %a: {dt}[16, 40] vec", f"alloc %k: {dt}[3, 5] vec", f"alloc %d: {dt}[16, 64] vec",
                         "TLOAD %a, %x[0:11, 0:35]", "TLOAD %k, %w",
                         f"TDWCONV %d, %a, %k, {sh}, {sw}, {dh}, {dwl}, {pt}, {pb}, {pl}, {pr}", "TSTORE %o, %d"])
            ref = compare(text, x=xd, w=wd)
            want = np.zeros((ho, wo))
            for a in range(3):
                for b in range(5):
                    want += wd[a, b].astype(np.float64) * xp[a * dh:a * dh + (ho - 1) * sh + 1:sh,
                                                              b * dwl:b * dwl + (wo - 1) * sw + 1:sw]
            np.testing.assert_allclose(ref["o"], want, rtol=1e-6, atol=1e-5, err_msg=f"{dt} {sh} {sw} {dh} {dwl} {pads}")


def test_depthwise_padding_adds_nothing():
    """A tap in TDWCONV's padding is skipped, not multiplied by zero: an infinite weight makes inf
    only where it meets the source (the CPU's vector path, which multiplies zeros, is for finite
    weights); a NaN weight likewise."""
    x = rand((6, 20)) + 2.0
    for bad in (np.inf, np.nan):
        w = rand((3, 3))
        w[0, 0] = bad
        text = func(["%x: f32[6, 20]", "%w: f32[3, 3]", "%o: f32[6, 20] out"],
                    ["alloc %a: f32[6, 20] vec", "alloc %k: f32[3, 3] vec", "alloc %d: f32[6, 20] vec",
                     "TLOAD %a, %x", "TLOAD %k, %w", "TDWCONV %d, %a, %k, 1, 1, 1, 1, 1, 1, 1, 1", "TSTORE %o, %d"])
        out = compare(text, x=x, w=w)["o"]
        assert np.isfinite(out[0, :]).all() and np.isfinite(out[:, 0]).all()
        assert not np.isfinite(out[1:, 1:]).any()
