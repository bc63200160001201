"""int8 scaled_mm on the VNNI path (vpdpbusd with the +128 offset and the row-sum correction,
where the CPU has AVX512-VNNI) and on the portable path (PYPTO_NATIVE_DOT=0): the int32 products
are exact, so both paths and the interpreter give the same values; ragged shapes (K % 4 = 0..3),
K over several tiles, extreme values (-128 * -128), per-row / per-column scales, NaN-poisoned
outputs."""
import re

import numpy as np
import pytest
import torch

import pypto
from pypto_testutil import SMALL_TILES, requires_compiler


def smm_into(a, b, sa, sb, out):
    out[...] = pypto.scaled_mm(a, b, sa, sb)


def i8(*shape, extreme=False):
    if extreme:
        return torch.full(shape, -128, dtype=torch.int8)
    return torch.randint(-128, 128, shape, dtype=torch.int8)


SHAPES = [(1, 1, 1), (5, 6, 7), (33, 71, 17), (130, 257, 200)]


@requires_compiler
@pytest.mark.parametrize("tiles", [None, SMALL_TILES], ids=["tiles", "small-tiles"])
def test_int8_scaled_mm_paths_are_exact(monkeypatch, tiles):
    for (m, k, n) in SHAPES:
        a, b = i8(m, k), i8(k, n)
        a[0, : min(k, 3)] = -128  # the offset trick's extremes: -128 * -128 and -128 * 127
        b[: min(k, 3), 0] = -128
        ones_a, ones_b = torch.ones(m), torch.ones(n)
        exact = (a.long() @ b.long()).double()  # |sum| < 2^24: exact in float32
        outs = {}
        for path in ("1", "0"):
            monkeypatch.setenv("PYPTO_NATIVE_DOT", path)
            out = torch.full((m, n), float("nan"))
            pypto.jit(smm_into, tiles=tiles)(a, b, ones_a, ones_b, out)
            assert torch.equal(out.double(), exact), (path, m, k, n)
            outs[path] = out
        monkeypatch.delenv("PYPTO_NATIVE_DOT")
        interp = torch.full((m, n), float("nan"))
        pypto.jit(smm_into, backend="interp", tiles=tiles)(a, b, ones_a, ones_b, interp)
        assert torch.equal(interp, outs["1"]), (m, k, n)


@requires_compiler
def test_int8_scaled_mm_scales_and_extremes():
    m, k, n = 40, 1000, 24  # all -128: 1000 * 16384 = 16384000 < 2^24
    a, b = i8(m, k, extreme=True), i8(k, n, extreme=True)
    sa, sb = torch.rand(m, dtype=torch.float64) + 0.5, torch.rand(n, dtype=torch.float64) + 0.5
    out = torch.full((m, n), float("nan"))
    pypto.jit(smm_into)(a, b, sa.float(), sb.float(), out)
    ref = (a.double() @ b.double()) * sa.float().double()[:, None] * sb.float().double()[None, :]
    err = float((out.double() - ref).norm() / ref.norm())
    assert err < 1e-6, err


def test_int8_operand_tiles_stay_int8():
    a, b = i8(64, 48), i8(48, 32)
    text = pypto.jit(lambda a, b: pypto.scaled_mm(a, b)).lower(a, b).as_text("tile")
    assert "i8[64, 48] mat" in text and "i8[48, 32] mat" in text and "TCVT %t, %a" not in text, text


def test_scaled_mm_checks_torch_dtypes_too():
    """Called with torch tensors (x.dtype is a torch.dtype there), int64 and bool operands are
    refused as they are for NumPy callers, and int8 takes the int8 product."""
    k = pypto.jit(lambda a, b: pypto.scaled_mm(a, b), backend="interp")
    with pytest.raises(pypto.PyptoError, match="unsupported operand dtypes int64"):
        k(torch.ones(4, 4, dtype=torch.int64), torch.ones(4, 4, dtype=torch.int64))
    a = torch.randint(-128, 128, (5, 12), dtype=torch.int8)
    b = torch.randint(-128, 128, (12, 3), dtype=torch.int8)
    assert torch.equal(k(a, b), (a.int() @ b.int()).float())


@requires_compiler
def test_int8_scaled_mm_epilogue_fuses_into_the_product():
    """The int8 product is a TMATMUL into an int32 tile (no zero-filled buffer accumulated through
    memory), and under fusion=True the cast and both scales run on each product tile before it is
    stored: one nest writes the result."""
    m, k, n = 70, 131, 45
    a, b = i8(m, k), i8(k, n)
    sa, sb = torch.rand(m) + 0.5, torch.rand(n) + 0.5
    kern = pypto.jit(lambda a, b, sa, sb: pypto.scaled_mm(a, b, sa, sb), fusion=True)
    text = kern.lower(a, b, sa, sb).as_text("tile")
    at = text.index("TMATMUL ")
    before_store = text[at:text.index("TSTORE", at)]  # from the product to its first store
    assert "TCVT" in before_store and before_store.count(" TMUL %") == 2, text
    out = kern(a, b, sa, sb)
    ref = (a.double() @ b.double()) * sa.double()[:, None] * sb.double()[None, :]
    assert float((out.double() - ref).norm() / ref.norm()) < 1e-6
    # The CPU runs the cast and both scales as one call (pto::fused::cvt_scale_rows_cols): the same
    # bits as the three instructions the interpreter runs.
    interp = pypto.jit(lambda a, b, sa, sb: pypto.scaled_mm(a, b, sa, sb), fusion=True, backend="interp")
    assert torch.equal(out, interp(a, b, sa, sb))


def test_narrow_operands_take_taller_tiles():
    """int8 products tile 4x taller and 2x deeper than f32 ones (B's tile is repacked per row
    tile; narrow elements make tall tiles cheap to hold), while the rows still give every core two
    tiles; explicit tile sizes are kept as given. The f32 tile height comes from the host's L2
    size (64 rows on a 512 KiB L2, 128 on 1 MiB), so it is read from an f32 lowering."""
    cores = pypto.target()["cores"]
    f32_text = pypto.jit(lambda a, b: a @ b).lower(
        torch.rand(4096, 600), torch.rand(600, 24)).as_text("tile")
    base = int(re.search(r"f32\[(\d+), \d+\] mat", f32_text).group(1))
    rows = 4 * base * 2 * cores
    # 24 columns: too narrow for the whole-matrix product (MMATMUL), so the product is tiled.
    a, b = i8(rows, 600), i8(600, 24)
    mm = pypto.jit(lambda a, b: pypto.scaled_mm(a, b))
    assert f"i8[{4 * base}, 512] mat" in mm.lower(a, b).as_text("tile")
    small = pypto.jit(lambda a, b: pypto.scaled_mm(a, b), tiles={"m": 64, "k": 128})
    assert "i8[64, 128] mat" in small.lower(a, b).as_text("tile")
    few = i8(rows // 4, 600)  # base * 2 * cores rows: base-row tiles, two a core
    assert f"i8[{base}, 512] mat" in pypto.jit(lambda a, b: pypto.scaled_mm(a, b)).lower(few, b).as_text("tile")
    # A second row count makes the rows dynamic: they may be few at run time, so base-row tiles.
    assert f"i8[{base}, 512] mat" in mm.lower(i8(rows + 8, 600), b).as_text("tile")
    # A whole static bf16 product is one MMATMUL over packed operands (the packed driver picks
    # its own blocking); with explicit tile sizes the tile loop keeps them as given.
    x, w = torch.zeros(rows, 64, dtype=torch.bfloat16), torch.zeros(64, 48, dtype=torch.bfloat16)
    whole = pypto.jit(lambda x, w: x @ w).lower(x, w).as_text("tile")
    assert "MMATMUL" in whole and " mat" not in whole, whole
    tiled = pypto.jit(lambda x, w: x @ w, tiles={"m": 64}).lower(x, w).as_text("tile")
    assert "bf16[64, 64] mat" in tiled and "MMATMUL" not in tiled, tiled


@requires_compiler
def test_taller_tiles_give_exact_products():
    """Run through the taller tiles (ragged in every dimension, K over two 512-deep tiles): the
    int8 product stays exact, the bf16 one matches float64 as a once-rounded bf16 result."""
    rows = 512 * 2 * pypto.target()["cores"] + 13
    a, b = i8(rows, 601), i8(601, 37)
    out = torch.full((rows, 37), float("nan"))
    pypto.jit(smm_into)(a, b, torch.ones(rows), torch.ones(37), out)
    assert torch.equal(out.double(), (a.long() @ b.long()).double())
    x = torch.randn(rows // 2, 70, dtype=torch.float64).to(torch.bfloat16)
    w = torch.randn(70, 37, dtype=torch.float64).to(torch.bfloat16)
    y = pypto.jit(lambda x, w: x @ w)(x, w)
    ref = x.double() @ w.double()
    assert float((y.double() - ref).norm() / ref.norm()) < 8e-3
