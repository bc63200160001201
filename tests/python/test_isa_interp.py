"""The reference interpreter against NumPy (float64): every elementwise opcode, memory
instructions and their edge cases (partial tiles at tensor edges, valid regions smaller than the
tile, broadcasting, scalar operands, dtype conversions, strided loads). Programs are ISA text.
test_isa_interp_tiles.py covers reduce/expand/matrix/layout/gather/sync; test_opcode_coverage
below checks that every opcode of the table is exercised by one of the two files."""
import pathlib
import re

import numpy as np
import pytest

from test_isa_util import (BINARY_REF, NP, UNARY_DOMAIN, UNARY_REF, PyptoError, _C, binary_inputs,
                           check, check_region, func, isa, rand, rand_int, run, scalar_text)

# ---- coverage -----------------------------------------------------------------------------------


def test_opcode_coverage():
    """Every opcode in src/ir/opcodes.h appears in a program of the interpreter tests."""
    here = pathlib.Path(__file__).parent
    files = sorted(here.glob("test_isa_interp*.py")) + [here / "test_isa_util.py"]  # + op tables
    src = "".join(p.read_text() for p in files)
    missing = [op for op in _C.opcode_names() if not re.search(rf"\b{op}\b", src)]
    assert not missing, f"opcodes without an interpreter test: {missing}"
    assert len(_C.opcode_names()) == len(set(_C.opcode_names())) >= 60


def test_bitwise_ops_against_numpy():
    """TBAND/TBOR/TBXOR/TSHL/TSHR/TBNOT on i32 tiles, shift counts past the width included (<< gives
    0, >> the sign fill, as torch)."""
    x = np.array([[-(2**31), 2**31 - 1, -1, 5], [7, -8, 123456, -99]], np.int32)
    y = np.array([[1, 3, 31, 32], [0, 40, 4, 2]], np.int32)
    ops = {"TBAND": np.bitwise_and(x, y), "TBOR": np.bitwise_or(x, y), "TBXOR": np.bitwise_xor(x, y),
           "TBNOT": np.invert(x),
           "TSHL": np.where((y >= 0) & (y < 32), np.left_shift(x.astype(np.int64), np.clip(y, 0, 31)), 0)
           .astype(np.uint32).astype(np.int32),
           "TSHR": np.right_shift(x, np.clip(y, 0, 31))}
    outs = [f"%o_{op}: i32[2, 4] out" for op in ops]
    body = ["alloc %a: i32[2, 4] vec", "alloc %b: i32[2, 4] vec", "alloc %d: i32[2, 4] vec",
            "TLOAD %a, %x", "TLOAD %b, %y"]
    for op in ops:
        body += [f"{op} %d, %a" if op == "TBNOT" else f"{op} %d, %a, %b", f"TSTORE %o_{op}, %d"]
    got = run(func(["%x: i32[2, 4]", "%y: i32[2, 4]"] + outs, body), x=x, y=y)
    for op, want in ops.items():
        np.testing.assert_array_equal(got[f"o_{op}"], want, err_msg=op)


# ---- unary --------------------------------------------------------------------------------------


@pytest.mark.parametrize("op", sorted(UNARY_REF))
def test_unary(op):
    # A 5x7 tensor in 8x8 tiles: the valid region is smaller than the tile.
    lo, hi = UNARY_DOMAIN.get(op, (-3.0, 3.0))
    x = rand((5, 7), lo, hi)
    if op == "TNOT":
        x = rand_int((5, 7), -1, 2).astype(np.float32)  # zeros are the point here
    if op == "TFLOOR":
        x[0, :3] = [1.0, -1.0, -2.5]  # exact integers and negative halves
    text = func(["%x: f32[5, 7]", "%o: f32[8, 8] out"],
                ["alloc %a: f32[8, 8] vec", "alloc %d: f32[8, 8] vec", "TLOAD %a, %x", f"{op} %d, %a",
                 "TSTORE %o, %d"])
    out = run(text, x=x)["o"]
    check_region(out, UNARY_REF[op](x.astype(np.float64)), 5, 7, tol=2e-7)


def test_unary_in_place_and_f64():
    x = rand((4, 6), dtype=np.float64)
    text = func(["%x: f64[4, 6]", "%o: f64[4, 6] out"],
                ["alloc %a: f64[4, 6] vec", "TLOAD %a, %x", "TEXP %a, %a", "TTANH %a, %a", "TSTORE %o, %a"])
    check(run(text, x=x)["o"], np.tanh(np.exp(x)), tol=1e-15)


# ---- binary / compare ---------------------------------------------------------------------------

FORMS = ["tile_tile", "tile_scalar", "scalar_tile", "row_bcast", "col_bcast", "valid_intersection"]


def binary_case(op, form):
    """(text, inputs, reference, rows, cols) for a binary op in one operand form."""
    R, C = 6, 8
    decl = ["%o: f32[8, 8] out"]
    body = ["alloc %a: f32[8, 8] vec", "alloc %d: f32[8, 8] vec", "TLOAD %a, %x"]
    if form in ("tile_scalar", "scalar_tile"):
        x, y = binary_inputs(op, (R, C), (1,))
        s = float(y[0])
        if op == "TPOW" and form == "scalar_tile":
            s = abs(s) + 0.5  # the scalar is the base here: a negative base gives NaN
        args = f"%a, {scalar_text(s)}" if form == "tile_scalar" else f"{scalar_text(s)}, %a"
        ref = BINARY_REF[op](x.astype(float), s) if form == "tile_scalar" else BINARY_REF[op](s, x.astype(float))
        return (func([f"%x: f32[{R}, {C}]"] + decl, body + [f"{op} %d, {args}", "TSTORE %o, %d"]),
                dict(x=x), ref, R, C)
    shape_b = {"tile_tile": (R, C), "row_bcast": (1, C), "col_bcast": (R, 1), "valid_intersection": (4, 7)}[form]
    x, y = binary_inputs(op, (R, C), shape_b)
    tb = {"row_bcast": "1, 8", "col_bcast": "8, 1"}.get(form, "8, 8")
    body = [f"alloc %b: f32[{tb}] vec"] + body + ["TLOAD %b, %y", f"{op} %d, %a, %b", "TSTORE %o, %d"]
    text = func([f"%x: f32[{R}, {C}]", f"%y: f32[{shape_b[0]}, {shape_b[1]}]"] + decl, body)
    if form == "valid_intersection":
        rows, cols = 4, 7
        ref = BINARY_REF[op](x[:4, :7].astype(float), y.astype(float))
    else:
        rows, cols = R, C
        ref = BINARY_REF[op](x.astype(float), y.astype(float))
    return text, dict(x=x, y=y), ref, rows, cols


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("op", sorted(BINARY_REF))
def test_binary(op, form):
    text, inputs, ref, rows, cols = binary_case(op, form)
    out = run(text, **inputs)["o"]
    check_region(out, ref, rows, cols, tol=2e-7)


@pytest.mark.parametrize("op", ["TCMP_LT", "TCMP_LE", "TCMP_GT", "TCMP_GE", "TCMP_EQ", "TCMP_NE"])
def test_compare_into_bool_tile(op):
    a, b = binary_inputs(op, (5, 9), (5, 9))
    text = func(["%x: f32[5, 9]", "%y: f32[5, 9]", "%o: bool[5, 9] out"],
                ["alloc %a: f32[5, 9] vec", "alloc %b: f32[5, 9] vec", "alloc %m: bool[5, 9] vec",
                 "TLOAD %a, %x", "TLOAD %b, %y", f"{op} %m, %a, %b", "TSTORE %o, %m"])
    out = run(text, x=a, y=b)["o"]
    assert out.dtype == np.bool_
    np.testing.assert_array_equal(out, BINARY_REF[op](a, b).astype(bool))


def test_integer_gcd_floordiv_remainders():
    a = rand_int((4, 5), -50, 50)
    b = rand_int((4, 5), 1, 9) * np.where(rand_int((4, 5), 0, 2) == 0, -1, 1).astype(np.int32)
    body = ["alloc %a: i32[4, 5] vec", "alloc %b: i32[4, 5] vec", "alloc %d: i32[4, 5] vec",
            "TLOAD %a, %x", "TLOAD %b, %y"]
    for op, ref in [("TGCD", np.gcd(a, b)), ("TFLOORDIV", a // b), ("TREM", a % b), ("TFMOD", np.fmod(a, b))]:
        text = func(["%x: i32[4, 5]", "%y: i32[4, 5]", "%o: i32[4, 5] out"],
                    body + [f"{op} %d, %a, %b", "TSTORE %o, %d"])
        np.testing.assert_array_equal(run(text, x=a, y=b)["o"], ref, err_msg=op)


def test_integer_binary_ops():
    a = rand_int((4, 5), -50, 50)
    b = rand_int((4, 5), 1, 9) * np.where(rand_int((4, 5), 0, 2) == 0, -1, 1).astype(np.int32)
    body = ["alloc %a: i32[4, 5] vec", "alloc %b: i32[4, 5] vec", "alloc %d: i32[4, 5] vec",
            "TLOAD %a, %x", "TLOAD %b, %y"]
    for op, ref in [("TADD", a + b), ("TMUL", a * b), ("TMAX", np.maximum(a, b)),
                    ("TDIV", np.trunc(a / b).astype(np.int32))]:  # C-style truncating division
        text = func(["%x: i32[4, 5]", "%y: i32[4, 5]", "%o: i32[4, 5] out"],
                    body + [f"{op} %d, %a, %b", "TSTORE %o, %d"])
        np.testing.assert_array_equal(run(text, x=a, y=b)["o"], ref, err_msg=op)


def test_scalar_operand_is_rounded_to_f32():
    # 0.1 as an f32 scalar: the result equals float32 arithmetic, not float64.
    x = rand((3, 3))
    text = func(["%x: f32[3, 3]", "%o: f32[3, 3] out"],
                ["alloc %a: f32[3, 3] vec", "TLOAD %a, %x", "TADD %a, %a, 0.1", "TSTORE %o, %a"])
    # (an f64 literal on an f32 tile: not verifier-clean, so run unverified)
    np.testing.assert_array_equal(run(text, verify=False, x=x)["o"], x + np.float32(0.1))


def test_runtime_scalar_params():
    x = rand((4, 4))
    text = func(["%x: f32[4, 4]", "%o: f32[4, 4] out", "%alpha: f32", "%n: i64"],
                ["alloc %a: f32[4, 4] vec", "TLOAD %a, %x", "TMUL %a, %a, %alpha",
                 "if (%n < 3) {", "  TADD %a, %a, 1.0f", "}", "TSTORE %o, %a"])
    check(run(text, x=x, alpha=1.5, n=2)["o"], x.astype(float) * np.float32(1.5) + 1)
    check(run(text, x=x, alpha=-2.0, n=3)["o"], x.astype(float) * -2)


# ---- select / convert / fill --------------------------------------------------------------------


@pytest.mark.parametrize("form", ["tiles", "scalar_else"])
def test_select(form):
    m = rand_int((5, 6), 0, 2).astype(np.bool_)
    a, b = rand((5, 6)), rand((5, 6))
    other = "%b" if form == "tiles" else "-3.5f"
    text = func(["%mk: bool[5, 6]", "%x: f32[5, 6]", "%y: f32[5, 6]", "%o: f32[8, 8] out"],
                ["alloc %m: bool[8, 8] vec", "alloc %a: f32[8, 8] vec", "alloc %b: f32[8, 8] vec",
                 "alloc %d: f32[8, 8] vec", "TLOAD %m, %mk", "TLOAD %a, %x", "TLOAD %b, %y",
                 f"TSEL %d, %m, %a, {other}", "TSTORE %o, %d"])
    out = run(text, mk=m, x=a, y=b)["o"]
    check_region(out, np.where(m, a, b if form == "tiles" else -3.5), 5, 6)


CVT_CASES = [
    ("f32", "i32", lambda x: np.trunc(x)),
    ("f32", "i64", lambda x: np.trunc(x)),
    ("f32", "bool", lambda x: x != 0),
    ("i32", "f32", lambda x: x),
    ("bool", "f32", lambda x: x),
    ("f64", "f32", lambda x: x.astype(np.float32)),
    ("f32", "f64", lambda x: x),
]


@pytest.mark.parametrize("src,dst,ref", CVT_CASES, ids=[f"{a}->{b}" for a, b, _ in CVT_CASES])
def test_convert(src, dst, ref):
    if src == "bool":
        x = rand_int((4, 6), 0, 2).astype(np.bool_)
    elif src == "i32":
        x = rand_int((4, 6), -1000, 1000)
    else:
        x = (rand((4, 6), -50, 50) if src != "f64" else rand((4, 6), -50, 50, np.float64))
        x[0, 0] = 0  # -> bool false
    text = func([f"%x: {src}[4, 6]", f"%o: {dst}[4, 6] out"],
                [f"alloc %a: {src}[4, 6] vec", f"alloc %d: {dst}[4, 6] vec", "TLOAD %a, %x",
                 "TCVT %d, %a", "TSTORE %o, %d"])
    out = run(text, x=x)["o"]
    assert out.dtype == NP[dst]
    np.testing.assert_array_equal(out, ref(x).astype(NP[dst]))


def test_fill():
    text = func(["%o: f32[6, 8] out", "%p: i32[6, 8] out", "%s: f32"],
                ["alloc %a: f32[6, 8] vec", "alloc %b: i32[6, 8] vec", "TEXPANDS %a, %s",
                 "TSTORE %o, %a", "TCI %b, 3", "TSTORE %p, %b"])
    out = run(text, s=2.5)
    np.testing.assert_array_equal(out["o"], np.full((6, 8), 2.5, np.float32))
    np.testing.assert_array_equal(out["p"], np.tile(np.arange(3, 11, dtype=np.int32), (6, 1)))


# ---- memory: TLOAD / TSTORE / TPREFETCH -----------------------------------------------------------

EDGE = func(
    ["%x: f32[50, 70]", "%o: f32[50, 70] out"],
    ["alloc %t: f32[64, 64] vec",
     "for %i = 0 to 50 step 64 {",
     "  for %j = 0 to 70 step 64 {",
     "    TPREFETCH %x[%i:64 valid min(64, (50 - %i)), %j:64 valid min(64, (70 - %j))]",
     "    TLOAD %t, %x[%i:64 valid min(64, (50 - %i)), %j:64 valid min(64, (70 - %j))]",
     "    TSQRT %t, %t",
     "    TSTORE %o[%i:64 valid min(64, (50 - %i)), %j:64 valid min(64, (70 - %j))], %t",
     "  }",
     "}"])


def test_tile_partly_outside_tensor():
    x = rand((50, 70), 0.1, 3.0)
    check(run(EDGE, x=x)["o"], np.sqrt(x.astype(float)), tol=1e-7)


def test_unclamped_edge_view_is_out_of_bounds():
    text = EDGE.replace("valid min(64, (70 - %j))", "valid 64")
    with pytest.raises(PyptoError, match=r"out-of-bounds access x\[0, 127\] \(shape \[50, 70\]\) in `TPREFETCH"):
        run(text, verify=False, x=rand((50, 70), 0.1, 3.0))


def test_transposed_view_load():
    x = rand((5, 9))
    text = func(["%x: f32[5, 9]", "%o: f32[9, 5] out"],
                ["alloc %t: f32[16, 8] vec", "TLOAD %t, %x[0:5, 0:9] perm(1, 0)", "TSTORE %o, %t"])
    check(run(text, x=x)["o"], x.T)


@pytest.mark.parametrize("layout", ["transposed", "sliced", "negative", "broadcast"])
def test_strided_caller_arrays(layout):
    base = rand((12, 18))
    x = {"transposed": base.T[:12, :12], "sliced": base[::2, 1::3], "negative": base[::-1, ::-2],
         "broadcast": np.broadcast_to(base[0], (6, 18))}[layout]
    r, c = x.shape
    text = func([f"%x: f32[{r}, {c}]", f"%o: f32[{r}, {c}] out"],
                [f"alloc %t: f32[{r}, {c}] vec", "TLOAD %t, %x", "TNEG %t, %t", "TSTORE %o, %t"])
    check(run(text, x=x)["o"], -x)


def test_stepped_and_rank1_views():
    x = rand((20,))
    text = func(["%x: f32[20]", "%o: f32[6] out", "%p: f32[1, 1] out"],
                ["alloc %t: f32[1, 8] vec", "alloc %u: f32[1, 1] vec",
                 "TLOAD %t, %x[1:6 step 3]", "TSTORE %o, %t",   # rank 1: a 1 x n tile
                 "TLOAD %u, %x[7]", "TSTORE %p, %u"])           # rank 0: 1 x 1
    out = run(text, x=x)
    check(out["o"], x[1:18:3])
    check(out["p"], x[7].reshape(1, 1))


def test_3d_tensor_slices():
    x = rand((3, 4, 5))
    text = func(["%x: f32[3, 4, 5]", "%o: f32[3, 4, 5] out"],
                ["alloc %t: f32[4, 5] vec",
                 "for %b = 0 to 3 {", "  TLOAD %t, %x[%b, 0:4, 0:5]", "  TABS %t, %t",
                 "  TSTORE %o[%b, 0:4, 0:5], %t", "}"])
    check(run(text, x=x)["o"], np.abs(x))


def test_half_precision_loads_and_stores():
    x = rand((6, 10)).astype(np.float16)
    text = func(["%x: f16[6, 10]", "%o: f16[6, 10] out", "%p: f32[6, 10] out"],
                ["alloc %t: f32[8, 16] vec", "TLOAD %t, %x", "TMUL %t, %t, 3.0f", "TSTORE %o, %t",
                 "TSTORE %p, %t"])
    out = run(text, x=x)
    ref = x.astype(np.float32) * np.float32(3)
    np.testing.assert_array_equal(out["p"], ref)
    np.testing.assert_array_equal(out["o"], ref.astype(np.float16))  # round to nearest even


def test_bfloat16_via_torch():
    import torch
    x = torch.from_numpy(rand((4, 12))).to(torch.bfloat16)
    text = func(["%x: bf16[4, 12]", "%o: bf16[4, 12] out", "%p: f32[4, 12] out"],
                ["alloc %t: f32[4, 12] vec", "TLOAD %t, %x", "TMUL %t, %t, 1.3f", "TSTORE %o, %t",
                 "TSTORE %p, %t"])
    out = run(text, x=x)
    ref = x.float() * torch.tensor(1.3, dtype=torch.float32)
    np.testing.assert_array_equal(out["p"], ref.numpy())
    np.testing.assert_array_equal(out["o"], ref.to(torch.bfloat16).float().numpy())


def test_torch_inputs_and_integer_memory():
    import torch
    x = torch.randint(-100, 100, (5, 5), dtype=torch.int64)
    text = func(["%x: i64[5, 5]", "%o: i64[5, 5] out"],
                ["alloc %t: i64[5, 5] vec", "TLOAD %t, %x", "TADD %t, %t, %t", "TSTORE %o, %t"])
    np.testing.assert_array_equal(run(text, x=x)["o"], 2 * x.numpy())


def test_global_scratch():
    x = rand((4, 8))
    text = func(["%x: f32[4, 8]", "%o: f32[4, 8] out"],
                ["alloc %g: f32[4, 8] gm", "alloc %t: f32[4, 8] vec",
                 "TLOAD %t, %x", "TEXP %t, %t", "TSTORE %g, %t", "TLOAD %t, %g", "TSTORE %o, %t"])
    check(run(text, x=x)["o"], np.exp(x.astype(float)), tol=1e-7)
    bad = text.replace('"TSTORE %g, %t", ', "").replace("  TSTORE %g, %t\n", "")
    with pytest.raises(PyptoError, match="unwritten element .* scratch buffer 'g'"):
        run(bad, x=x)


# ---- errors -------------------------------------------------------------------------------------


def test_unwritten_tile_read_names_instruction():
    text = func(["%x: f32[4, 4]", "%o: f32[4, 4] out"],
                ["alloc %t: f32[4, 4] vec", "alloc %u: f32[4, 4] vec", "TLOAD %t, %x",
                 "TADD %t, %t, %u", "TSTORE %o, %t"])
    with pytest.raises(PyptoError, match=r"unwritten tile element 'u'\[0, 0\] in `TADD %t, %t, %u`"):
        run(text, x=rand((4, 4)))


def test_tensor_level_program_rejected():
    text = func(["%x: f32[4, 4]", "%o: f32[4, 4] out"], ["TADD %o, %x, 1.0f"])
    with pytest.raises(PyptoError, match="not a tile-level program.*run the pipeline first"):
        run(text, verify=False, x=rand((4, 4)))
    isa.verify(isa.parse(text), "tensor")


def test_argument_errors():
    text = func(["%x: f32[4, 4]", "%o: f32[4, 4] out"],
                ["alloc %t: f32[4, 4] vec", "TLOAD %t, %x", "TSTORE %o, %t"])
    with pytest.raises(PyptoError, match=r"'x'.*expected f32\[4, 4\], got f32\[4, 5\]"):
        run(text, x=rand((4, 5)))
    with pytest.raises(PyptoError, match=r"'x'.*expected f32\[4, 4\], got f64\[4, 4\]"):
        run(text, x=rand((4, 4), dtype=np.float64))
    with pytest.raises(PyptoError, match=r"'x'.*expected f32\[4, 4\], got u8\[4, 4\]"):
        run(text, x=np.ones((4, 4), np.uint8))
    with pytest.raises(PyptoError, match="unsupported array dtype uint16"):
        run(text, x=np.ones((4, 4), np.uint16))
    with pytest.raises(PyptoError, match="no array given for param 'x'"):
        run(text)
    with pytest.raises(PyptoError, match="no param named"):
        run(text, x=rand((4, 4)), y=1)
    with pytest.raises(PyptoError, match="unknown backend"):
        run(text, backend="gpu", x=rand((4, 4)))


def test_store_out_of_bounds():
    x = rand((4, 4))
    text = func(["%x: f32[4, 4]"], ["alloc %t: f32[4, 4] vec", "TLOAD %t, %x", "TSTORE %x[0:4, 1:4], %t"])
    with pytest.raises(PyptoError, match=r"out-of-bounds access x\[0, 4\] \(shape \[4, 4\]\) in `TSTORE"):
        run(text, verify=False, x=x)


def test_parse_print_api():
    prog = isa.parse(EDGE)
    assert isa.print(prog) == EDGE == isa.to_text(prog) == str(prog)
    assert prog.name == "k"
    assert prog.params == [("x", "f32", [50, 70], False), ("o", "f32", [50, 70], True)]
    assert _C.structural_equal(prog, isa.parse(isa.to_text(prog)))
    assert _C.structural_hash(prog) == _C.structural_hash(isa.parse(EDGE))
    with pytest.raises(PyptoError, match="line"):
        isa.parse("func @k( {")


def test_whole_matrix_products_against_numpy():
    """MMATMUL / MMATMUL_ACC on global matrices: float64 products rounded once per element, into a
    window of the output (the rest left alone), with a transposed operand and a ragged valid K."""
    rng = np.random.default_rng(5)
    x, w, y = (rng.standard_normal(s).astype(np.float32) for s in ((9, 13), (6, 13), (13, 7)))
    text = func(["%x: f32[9, 13]", "%w: f32[6, 13]", "%y: f32[13, 7]", "%o: f32[11, 9] out"],
                ["MMATMUL %o[1:9, 2:6], %x, %w[0:6, 0:13] perm(1, 0)",  # [offset:size] windows
                 "MMATMUL_ACC %o[1:9, 2:5], %x[0:9, 0:13 valid 12], %y[0:13, 0:5]"])
    o = run(text, x=x, w=w, y=y)["o"]
    x64, w64, y64 = (a.astype(np.float64) for a in (x, w, y))
    want = x64 @ w64.T
    want[:, :5] += x64[:, :12] @ y64[:12, :5]
    check(o[1:10, 2:8], want.astype(np.float32), tol=1e-6)
    o[1:10, 2:8] = np.nan
    assert np.isnan(o).all()
