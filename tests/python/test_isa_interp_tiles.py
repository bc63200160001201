"""The reference interpreter against NumPy (float64): reductions, expansions, matrix, layout,
gather/scatter and sync instructions, with valid regions smaller than their tiles and ragged
matmul K. Opcode coverage is checked by test_isa_interp.py::test_opcode_coverage."""
import numpy as np
import pytest

from test_isa_util import PyptoError, check, check_region, func, rand, rand_int, run

# ---- reduce / expand ----------------------------------------------------------------------------

ROW = {"TROWSUM": np.sum, "TROWMAX": np.max, "TROWMIN": np.min}
COL = {"TCOLSUM": np.sum, "TCOLMAX": np.max, "TCOLMIN": np.min}


@pytest.mark.parametrize("op", sorted(ROW))
def test_row_reduce(op):
    x = rand((5, 7))  # in a 8x16 tile: only the 5x7 valid region is reduced
    text = func(["%x: f32[5, 7]", "%o: f32[8, 1] out"],
                ["alloc %a: f32[8, 16] vec", "alloc %r: f32[8, 1] vec", "TLOAD %a, %x", f"{op} %r, %a",
                 "TSTORE %o, %r"])
    check_region(run(text, x=x)["o"], ROW[op](x.astype(float), axis=1, keepdims=True), 5, 1, tol=1e-7)


@pytest.mark.parametrize("op", sorted(COL))
def test_col_reduce(op):
    x = rand((6, 5))
    text = func(["%x: f32[6, 5]", "%o: f32[1, 8] out"],
                ["alloc %a: f32[16, 8] vec", "alloc %r: f32[1, 8] vec", "TLOAD %a, %x", f"{op} %r, %a",
                 "TSTORE %o, %r"])
    check_region(run(text, x=x)["o"], COL[op](x.astype(float), axis=0, keepdims=True), 1, 5, tol=1e-7)


@pytest.mark.parametrize("op", ["TROWARGMAX", "TROWARGMIN"])
def test_row_arg_reduce(op):
    """Only the valid region is searched (a larger value past the 7 valid columns does not count);
    ties keep the first column; a NaN is the extreme; an empty valid region gives 0."""
    x = rand((5, 7))
    x[1, 2] = x[1, 5] = 9.0 if op == "TROWARGMAX" else -9.0
    x[2, 4], x[2, 6] = np.nan, np.nan
    text = func(["%x: f32[5, 7]", "%o: i64[8, 1] out", "%e: i32[8, 1] out"],
                ["alloc %a: f32[8, 16] vec", "alloc %r: i64[8, 1] vec", "alloc %z: i32[8, 1] vec",
                 "TEXPANDS %a, 100.0f", "TLOAD %a, %x", f"{op} %r, %a", "TSTORE %o, %r",
                 "TFILLPAD %a, %a, 0.0f", "TEXTRACT %a, %a, 0, 7", f"{op} %z, %a", "TSTORE %e, %z"])
    got = run(text, x=x)
    want = np.where(np.isnan(x).any(1), np.isnan(x).argmax(1), x.argmax(1) if op == "TROWARGMAX" else x.argmin(1))
    np.testing.assert_array_equal(got["o"][:5, 0], want)
    assert (got["e"][:5, 0] == 0).all()


def test_row_expand():
    v = rand((5, 1))
    text = func(["%v: f32[5, 1]", "%o: f32[8, 6] out"],
                ["alloc %a: f32[8, 1] vec", "alloc %d: f32[8, 6] vec", "TLOAD %a, %v", "TROWEXPAND %d, %a",
                 "TSTORE %o, %d"])
    check_region(run(text, v=v)["o"], np.broadcast_to(v, (5, 6)), 5, 6)


def test_col_expand():
    v = rand((1, 5))
    text = func(["%v: f32[1, 5]", "%o: f32[6, 8] out"],
                ["alloc %a: f32[1, 8] vec", "alloc %d: f32[6, 8] vec", "TLOAD %a, %v", "TCOLEXPAND %d, %a",
                 "TSTORE %o, %d"])
    check_region(run(text, v=v)["o"], np.broadcast_to(v, (6, 5)), 6, 5)


def test_softmax_rows():
    """A composition: row max, expand, subtract, exp, row sum, divide (as the lowering emits)."""
    x = rand((7, 12), -4, 4)
    text = func(["%x: f32[7, 12]", "%o: f32[7, 12] out"],
                ["alloc %a: f32[8, 16] vec", "alloc %m: f32[8, 1] vec", "alloc %e: f32[8, 16] vec",
                 "TLOAD %a, %x", "TROWMAX %m, %a", "TROWEXPAND %e, %m", "TSUB %a, %a, %m",
                 "TEXP %a, %a", "TROWSUM %m, %a", "TDIV %a, %a, %m", "TSTORE %o, %a"])
    e = np.exp(x - x.max(1, keepdims=True))
    check(run(text, x=x)["o"], e / e.sum(1, keepdims=True), tol=1e-6)


# ---- matrix -------------------------------------------------------------------------------------

MM_TILES = ["alloc %a: f32[32, 16] mat", "alloc %b: f32[16, 16] mat", "alloc %c: f32[32, 16] acc"]


@pytest.mark.parametrize("kb", [13, 11], ids=["K13", "ragged_K_11_vs_13"])
def test_matmul_ragged(kb):
    # k = min(a.vc, b.vr): with b of 11 rows only A[:, :11] takes part.
    A, B = rand((20, 13)), rand((kb, 9))
    text = func(["%A: f32[20, 13]", f"%B: f32[{kb}, 9]", "%C: f32[32, 16] out"],
                MM_TILES + ["TLOAD %a, %A", "TLOAD %b, %B", "TMATMUL %c, %a, %b", "TSTORE %C, %c"])
    k = min(13, kb)
    check_region(run(text, A=A, B=B)["C"], A[:, :k].astype(float) @ B[:k].astype(float), 20, 9, tol=1e-6)


def test_matmul_acc_and_bias():
    A, B, C0, bias = rand((20, 13)), rand((13, 9)), rand((24, 12)), rand((1, 9))
    text = func(["%A: f32[20, 13]", "%B: f32[13, 9]", "%C0: f32[24, 12]", "%bias: f32[1, 9]",
                 "%C: f32[32, 16] out", "%D: f32[32, 16] out"],
                MM_TILES + ["alloc %bi: f32[1, 16] vec", "alloc %d: f32[32, 16] acc",
                            "TLOAD %a, %A", "TLOAD %b, %B", "TLOAD %c, %C0", "TLOAD %bi, %bias",
                            "TMATMUL_ACC %c, %a, %b", "TSTORE %C, %c",
                            "TMATMUL_BIAS %d, %a, %b, %bi", "TSTORE %D, %d"])
    out = run(text, A=A, B=B, C0=C0, bias=bias)
    prod = A.astype(float) @ B.astype(float)
    # ACC updates rows < min(24, 20) and cols < min(12, 9); the rest of C0's valid region stays.
    ref = C0.astype(float).copy()
    ref[:20, :9] += prod
    check_region(out["C"], ref, 24, 12, tol=1e-6)
    check_region(out["D"], prod + bias, 20, 9, tol=1e-6)


def test_tiled_matmul_loops():
    """The seed's 64x64 tile matmul shape, with 16-tiles over ragged M, N and K."""
    M, K, N = 37, 45, 29
    A, B = rand((M, K)), rand((K, N))
    v = lambda r, c, R, C: f"{r}:16 valid min(16, ({R} - {r})), {c}:16 valid min(16, ({C} - {c}))"  # noqa: E731
    text = func([f"%A: f32[{M}, {K}]", f"%B: f32[{K}, {N}]", f"%C: f32[{M}, {N}] out"],
                [f"parallel for %i = 0 to {M} step 16 {{",
                 f"  for %j = 0 to {N} step 16 {{",
                 "    alloc %c: f32[16, 16] acc", "    TEXPANDS %c, 0.0f",
                 f"    for %k = 0 to {K} step 16 {{",
                 "      alloc %a: f32[16, 16] mat", "      alloc %b: f32[16, 16] mat",
                 f"      TLOAD %a, %A[{v('%i', '%k', M, K)}]", f"      TLOAD %b, %B[{v('%k', '%j', K, N)}]",
                 "      TMATMUL_ACC %c, %a, %b", "    }",
                 f"    TSTORE %C[{v('%i', '%j', M, N)}], %c", "  }", "}"])
    check(run(text, A=A, B=B)["C"], A.astype(float) @ B.astype(float), tol=1e-6)


# ---- layout -------------------------------------------------------------------------------------


def test_trans_of_partial_tile():
    x = rand((5, 7))
    text = func(["%x: f32[5, 7]", "%o: f32[8, 8] out"],
                ["alloc %a: f32[8, 8] vec", "alloc %t: f32[8, 8] vec", "TLOAD %a, %x", "TTRANS %t, %a",
                 "TSTORE %o, %t"])
    check_region(run(text, x=x)["o"], x.T, 7, 5)


def test_reshape():
    x = rand((4, 6))
    text = func(["%x: f32[4, 6]", "%o: f32[3, 8] out"],
                ["alloc %a: f32[4, 6] vec", "alloc %r: f32[3, 8] vec", "TLOAD %a, %x", "TRESHAPE %r, %a",
                 "TSTORE %o, %r"])
    check(run(text, x=x)["o"], x.reshape(3, 8))
    partial = text.replace("%x: f32[4, 6]", "%x: f32[4, 5]").replace("TLOAD %a, %x", "TLOAD %a, %x")
    with pytest.raises(PyptoError, match="TRESHAPE needs a fully valid source"):
        run(partial, x=rand((4, 5)))


@pytest.mark.parametrize("r0,c0", [(1, 2), (3, 5)], ids=["inside", "clamped"])
def test_extract(r0, c0):
    x = rand((6, 7))
    text = func(["%x: f32[6, 7]", "%o: f32[4, 4] out", "%r0: i64"],
                ["alloc %a: f32[8, 8] vec", "alloc %e: f32[4, 4] vec", "TLOAD %a, %x",
                 f"TEXTRACT %e, %a, %r0, {c0}", "TSTORE %o, %e"])
    rows, cols = min(4, 6 - r0), min(4, 7 - c0)
    check_region(run(text, x=x, r0=r0)["o"], x[r0:r0 + rows, c0:c0 + cols], rows, cols)


def test_insert_keeps_valid_region():
    x, y = rand((6, 8)), rand((3, 5))
    text = func(["%x: f32[6, 8]", "%y: f32[3, 5]", "%o: f32[6, 8] out"],
                ["alloc %a: f32[6, 8] vec", "alloc %b: f32[4, 8] vec", "TLOAD %a, %x", "TLOAD %b, %y",
                 "TINSERT %a, %b, 2, 4", "TSTORE %o, %a"])
    ref = x.copy()
    ref[2:5, 4:8] = y[:, :4]  # clipped to the destination's columns
    check(run(text, x=x, y=y)["o"], ref)


def test_fillpad():
    x = rand((5, 6))
    text = func(["%x: f32[5, 6]", "%o: f32[8, 8] out"],
                ["alloc %a: f32[8, 8] vec", "alloc %m: f32[8, 1] vec", "TLOAD %a, %x",
                 "TFILLPAD %a, %a, -inff", "TROWMAX %m, %a", "TSTORE %o[0:8, 0:1], %m"])
    # After padding, the full 8x8 tile is valid; rows 5..7 are all -inf.
    out = run(text, x=x)["o"]
    np.testing.assert_array_equal(out[:5, 0], x.max(1))
    assert np.isneginf(out[5:, 0]).all() and np.isnan(out[:, 1:]).all()


# ---- gather / scatter ---------------------------------------------------------------------------


def test_gather():
    x = rand((6, 5))
    idx = np.array([[4], [0], [4], [2]], np.int32)
    text = func(["%x: f32[6, 5]", "%ix: i32[4, 1]", "%o: f32[8, 8] out"],
                ["alloc %a: f32[8, 8] vec", "alloc %i: i32[8, 1] vec", "alloc %d: f32[8, 8] vec",
                 "TLOAD %a, %x", "TLOAD %i, %ix", "TGATHER %d, %a, %i", "TSTORE %o, %d"])
    check_region(run(text, x=x, ix=idx)["o"], x[idx[:, 0]], 4, 5)
    with pytest.raises(PyptoError, match="gather index 6"):
        run(text, x=x, ix=np.array([[1], [6], [0], [0]], np.int32))


def test_scatter():
    x, y = rand((6, 5)), rand((3, 5))
    idx = np.array([[5], [1], [3]], np.int64)
    text = func(["%x: f32[6, 5]", "%y: f32[3, 5]", "%ix: i64[3, 1]", "%o: f32[6, 5] out"],
                ["alloc %a: f32[6, 5] vec", "alloc %b: f32[3, 5] vec", "alloc %i: i64[3, 1] vec",
                 "TLOAD %a, %x", "TLOAD %b, %y", "TLOAD %i, %ix", "TSCATTER %a, %b, %i", "TSTORE %o, %a"])
    ref = x.copy()
    ref[idx[:, 0]] = y
    check(run(text, x=x, y=y, ix=idx)["o"], ref)
    with pytest.raises(PyptoError, match="scatter index -1"):
        run(text, x=x, y=y, ix=np.array([[0], [-1], [2]], np.int64))


def test_scatter_add_accumulates_repeated_rows():
    x, y = rand((6, 5)), rand((3, 5))
    idx = np.array([[5], [1], [5]], np.int32)
    text = func(["%x: f32[6, 5]", "%y: f32[3, 5]", "%ix: i32[3, 1]", "%o: f32[6, 5] out"],
                ["alloc %a: f32[6, 5] vec", "alloc %b: f32[3, 5] vec", "alloc %i: i32[3, 1] vec",
                 "TLOAD %a, %x", "TLOAD %b, %y", "TLOAD %i, %ix", "TSCATTER_ADD %a, %b, %i", "TSTORE %o, %a"])
    ref = x.astype(float)
    np.add.at(ref, idx[:, 0], y)
    check(run(text, x=x, y=y, ix=idx)["o"], ref)


def test_argsort_rows_stable_with_nan_placement():
    x = np.array([[3, 1, np.nan, 1, -2, 7], [0, 0, 5, -1, np.nan, 2]], np.float32)
    for desc in (0, 1):
        text = func(["%x: f32[2, 6]", "%o: i64[2, 6] out"],
                    ["alloc %a: f32[4, 8] vec", "alloc %d: i64[4, 8] vec", "TLOAD %a, %x",
                     f"TARGSORT %d, %a, {desc}", "TSTORE %o, %d"])
        import torch
        ref = torch.sort(torch.tensor(x), dim=1, descending=bool(desc), stable=True).indices.numpy()
        np.testing.assert_array_equal(run(text, x=x)["o"], ref)


def test_scan_rows_sum_product_and_reverse():
    """TSCAN on a 3 x 5 valid region of a 4 x 8 tile: kind bit 0 product, bit 1 from the end."""
    x = np.array([[1, 2, 3, 4, 5], [-1, 0.5, 2, np.nan, 1], [2, 2, 2, 2, 2]], np.float32)
    x64 = x.astype(np.float64)
    want = {0: np.cumsum(x64, 1), 1: np.cumprod(x64, 1),
            2: np.flip(np.cumsum(np.flip(x64, 1), 1), 1), 3: np.flip(np.cumprod(np.flip(x64, 1), 1), 1)}
    for kind, ref in want.items():
        text = func(["%x: f32[3, 5]", "%o: f32[3, 5] out"],
                    ["alloc %a: f32[4, 8] vec", "TLOAD %a, %x", f"TSCAN %a, %a, {kind}", "TSTORE %o, %a"])
        np.testing.assert_allclose(run(text, x=x)["o"], ref, rtol=1e-6)


def test_mgather_reads_rows_of_global_memory_and_checks_indices():
    x = rand((50, 7))
    idx = np.array([[49, 0, 3, 3]], np.int64)  # a 1 x N index vector
    text = func(["%x: f32[50, 7]", "%ix: i64[1, 4]", "%o: f32[8, 8] out"],
                ["alloc %i: i64[1, 4] vec", "alloc %d: f32[8, 8] vec",
                 "TLOAD %i, %ix", "MGATHER %d, %x[0:50, 0:5], %i", "TSTORE %o, %d"])
    check_region(run(text, x=x, ix=idx)["o"], x[idx[0], :5], 4, 5)
    with pytest.raises(PyptoError, match="MGATHER: index 50 is out of range for a dimension of size 50"):
        run(text, x=x, ix=np.array([[1, 50, 0, 0]], np.int64))


def test_mscatter_and_mscatter_add_write_rows_of_global_memory():
    y = rand((3, 4))
    idx = np.array([[2], [0], [2]], np.int32)  # an N x 1 index vector
    for op, acc in (("MSCATTER", False), ("MSCATTER_ADD", True)):
        text = func(["%y: f32[3, 4]", "%ix: i32[3, 1]", "%o: f32[5, 4] out"],
                    ["alloc %b: f32[3, 4] vec", "alloc %i: i32[3, 1] vec", "alloc %z: f32[5, 4] vec",
                     "TEXPANDS %z, 1.0f", "TSTORE %o, %z",
                     "TLOAD %b, %y", "TLOAD %i, %ix", f"{op} %o, %b, %i"])
        ref = np.ones((5, 4))
        if acc:
            np.add.at(ref, idx[:, 0], y)
        else:
            ref[idx[:, 0]] = y  # in order: the last of the repeated rows wins
        check(run(text, y=y, ix=idx)["o"], ref)
        with pytest.raises(PyptoError, match=f"{op}: index -1 is out of range"):
            run(text, y=y, ix=np.array([[0], [-1], [1]], np.int32))


# ---- sync ---------------------------------------------------------------------------------------


def test_sync_double_buffer_pattern():
    x = rand((4, 64))
    text = func(["%x: f32[4, 64]", "%o: f32[4, 64] out"],
                ["SET_FLAG 2, 0, 0", "SET_FLAG 2, 0, 1",
                 "for %j = 0 to 64 step 16 {",
                 "  alloc %t: f32[4, 16] vec",
                 "  WAIT_FLAG 2, 0, ((%j // 16) % 2)",
                 "  TLOAD %t, %x[0:4, %j:16]", "PIPE_BARRIER 2", "  TRELU %t, %t",
                 "  TSTORE %o[0:4, %j:16], %t",
                 "  SET_FLAG 2, 0, ((%j // 16) % 2)",
                 "}", "WAIT_FLAG 2, 0, 0", "WAIT_FLAG 2, 0, 1", "PIPE_BARRIER 5"])
    check(run(text, x=x)["o"], np.maximum(x, 0))


def test_wait_without_set_is_an_error():
    text = func(["%x: f32[1, 1]"], ["SET_FLAG 0, 2, 3", "WAIT_FLAG 0, 2, 3", "WAIT_FLAG 0, 2, 3"])
    with pytest.raises(PyptoError, match="WAIT_FLAG on event 3 from MTE2 to V that no SET_FLAG"):
        run(text, x=rand((1, 1)))
    with pytest.raises(PyptoError, match="no pipe 9"):
        run(func(["%x: f32[1, 1]"], ["PIPE_BARRIER 9"]), x=rand((1, 1)))


def test_depthwise_plane_correlation():
    """TDWCONV: only windows inside the source's valid region (a larger value past it does not
    count), the result's valid region derived from it, padding read as zeros; a source smaller
    than one window, a zero stride or a negative padding is an error naming the instruction."""
    x, w = rand((6, 9)), rand((2, 3))
    text = func(["%x: f32[6, 9]", "%w: f32[2, 3]", "%o: f32[8, 16] out"],
                ["alloc %a: f32[8, 16] vec", "alloc %k: f32[2, 3] vec", "alloc %d: f32[8, 16] vec",
                 "TEXPANDS %a, 1000.0f", "TLOAD %a, %x", "TLOAD %k, %w", "TDWCONV %d, %a, %k, 2, 1, 1, 3, 0, 0, 0, 0",
                 "TSTORE %o, %d"])
    ho, wo = (6 - 1 - 1) // 2 + 1, (9 - 6 - 1) // 1 + 1  # 3 x 3
    want = sum(w[a, b] * x[a:a + 2 * (ho - 1) + 1:2, 3 * b:3 * b + wo] for a in range(2) for b in range(3))
    check_region(run(text, x=x, w=w)["o"], want, ho, wo)
    # Padded by 1 row above and below, 2 columns on the left: zeros there, not the 1000s past x.
    padded = text.replace("2, 1, 1, 3, 0, 0, 0, 0", "1, 1, 1, 1, 1, 1, 2, 0")
    xp = np.pad(x, ((1, 1), (2, 0)))
    want = sum(w[a, b] * xp[a:a + 7, b:b + 9] for a in range(2) for b in range(3))
    check_region(run(padded, x=x, w=w)["o"], want, 7, 9 - 0)
    for ops in (["TDWCONV %d, %a, %k, 1, 1, 6, 1, 0, 0, 0, 0"], ["TDWCONV %d, %a, %k, 0, 1, 1, 1, 0, 0, 0, 0"],
                ["TDWCONV %d, %a, %k, 1, 1, 1, 1, -1, 0, 0, 0"]):
        bad = func(["%x: f32[6, 9]", "%w: f32[2, 3]", "%o: f32[8, 8] out"],
                   ["alloc %a: f32[8, 16] vec", "alloc %k: f32[2, 3] vec", "alloc %d: f32[8, 8] vec",
                    "TLOAD %a, %x", "TLOAD %k, %w"] + ops + ["TSTORE %o, %d"])
        with pytest.raises(PyptoError, match="TDWCONV"):
            run(bad, x=x, w=w)
        if "6, 1, 0" not in ops[0]:  # a zero stride, a negative padding: the verifier names them,
            with pytest.raises(PyptoError, match="TDWCONV"):  # and unverified, the CPU writes nothing
                run(bad, backend="cpu", x=x, w=w)
            assert np.isnan(run(bad, backend="cpu", verify=False, x=x, w=w)["o"]).all()
