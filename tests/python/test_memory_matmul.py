"""MMATMUL / MMATMUL_ACC: a large plain f32 matmul between global matrices is one whole-matrix
instruction (the CPU's packed, blocked GEMM, split across threads) instead of a tiled nest.
Ragged sizes cross every blocking edge (register tile 14x32 or 6x16, KC 256, MC, NC); transposed
operand views take the strided packing paths; results are checked against NumPy in float64 on
both backends, with outputs poisoned with NaN."""
import numpy as np
import pytest

import pypto
from pypto_testutil import assert_close, f64, jit, poisoned, rand, requires_compiler


def mm(a, b):
    return pypto.matmul(a, b)


def mm_bt(a, w):
    return pypto.matmul(a, w.T)


def mm_at(x, b):
    return pypto.matmul(x.T, b)


def mm_into(a, b, c):
    c[...] = a @ b


def mm_acc(a, b, c):
    c += a @ b


def mm_window(a, b, c):
    c[3:3 + 150, 5:5 + 120] = a[1:151, 2:302] @ b[::2, 1:121]


def isa_text(fn, backend, *args):
    return jit(fn, backend).lower(*args).as_text("isa")


def test_plain_f32_matmul_is_one_mmatmul():
    a, b = rand(131, 173), rand(173, 97)
    isa = isa_text(mm, "cpu", a, b)
    assert "MMATMUL" in isa and "TMATMUL" not in isa
    # Below the size that pays for packing, and for other dtypes, the tiled nest remains.
    assert "MMATMUL" not in isa_text(mm, "cpu", rand(20, 30), rand(30, 40))
    assert "MMATMUL" not in isa_text(mm, "cpu", rand(131, 173, dtype=np.float64), rand(173, 97, dtype=np.float64))
    # Matmul tile sizes asked for keep the tiled nest (so that they apply).
    assert "MMATMUL" not in jit(mm, "cpu", tiles={"m": 32, "n": 32, "k": 32}).lower(a, b).as_text("isa")


@pytest.mark.parametrize("M,K,N", [(131, 173, 97), (67, 300, 161), (45, 257, 215), (300, 70, 130)])
def test_ragged_shapes(backend, M, K, N):
    a, b = rand(M, K), rand(K, N)
    assert_close(jit(mm, backend)(a, b), np.matmul(*f64(a, b)), 1e-5)


def test_transposed_operands(backend):
    a, w, x = rand(67, 300), rand(161, 300), rand(300, 67)
    b = rand(300, 161)
    assert_close(jit(mm_bt, backend)(a, w), f64(a)[0] @ f64(w)[0].T, 1e-5)
    assert_close(jit(mm_at, backend)(x, b), f64(x)[0].T @ f64(b)[0], 1e-5)


def test_into_output_accumulate_and_windows(backend):
    a, b = rand(131, 173), rand(173, 97)
    c = poisoned(131, 97)
    jit(mm_into, backend)(a, b, c)
    assert_close(c, np.matmul(*f64(a, b)), 1e-5)
    c0 = rand(131, 97)
    c = c0.copy()
    jit(mm_acc, backend)(a, b, c)
    assert_close(c, f64(c0)[0] + np.matmul(*f64(a, b)), 1e-5)
    # Strided and offset windows of all three operands; the rest of c is untouched.
    a, b, c = rand(160, 310), rand(600, 130), poisoned(170, 140)
    jit(mm_window, backend)(a, b, c)
    ref = f64(a)[0][1:151, 2:302] @ f64(b)[0][::2, 1:121]
    assert_close(c[3:153, 5:125], ref, 1e-5)
    inner = np.zeros(c.shape, bool)
    inner[3:153, 5:125] = True
    assert np.isnan(c[~inner]).all()


@requires_compiler
@pytest.mark.parametrize("M,K,N", [(700, 530, 1100), (1030, 600, 90)])
def test_large_ragged_cpu(M, K, N):
    """Past MC, NC and KC with ragged last blocks; tall (split by rows) and wide (split by
    columns) products, on several threads."""
    a, b = rand(M, K), rand(K, N)
    assert_close(jit(mm, "cpu")(a, b), np.matmul(*f64(a, b)), 1e-5)
    w = np.ascontiguousarray(b.T)
    assert_close(jit(mm_bt, "cpu")(a, w), np.matmul(*f64(a, b)), 1e-5)
    # A transposed left operand (a backward's x^T dy): whole register panels copied by rows of x.
    x = np.ascontiguousarray(a.T)
    assert_close(jit(mm_at, "cpu")(x, b), np.matmul(*f64(a, b)), 1e-5)


def test_tiled_batched_right_operand_loaded_per_column_block(backend):
    """A batched product stays a tiled nest; with one K step its column blocks run outside its
    row blocks, the right operand's tile (here k transposed, as in attention scores) loaded once
    per column block. Ragged row and column blocks on both sides."""
    q, k = rand(2, 300, 64), rand(2, 600, 64)
    assert_close(jit(lambda q, k: pypto.matmul(q, k.transpose(-2, -1)), backend)(q, k),
                 f64(q)[0] @ np.swapaxes(f64(k)[0], -1, -2), 1e-5)
    a, b = rand(3, 260, 40), rand(40, 530)
    assert_close(jit(mm, backend)(a, b), np.matmul(*f64(a, b)), 1e-5)


def test_simulator_keeps_tiles():
    """The NPU simulator multiplies tiles: its programs keep the tiled matmul."""
    a, b = rand(131, 173), rand(173, 97)
    isa = isa_text(mm, "sim", a, b)
    assert "MMATMUL" not in isa and "TMATMUL" in isa


def mm_sum(a0, b0, a1, bt1, a2, b2, c):
    c += a0 @ b0
    c += a1 @ bt1.T
    c += a2 @ b2


def sum_ref(a0, b0, a1, bt1, a2, b2):
    a0, b0, a1, bt1, a2, b2 = f64(a0, b0, a1, bt1, a2, b2)
    return a0 @ b0 + a1 @ bt1.T + a2 @ b2


@pytest.mark.parametrize("M,N", [(64, 300), (200, 150)])
def test_sum_of_products_is_one_gemm(backend, M, N):
    """MMATMUL_ACCs into one window run as one GEMM over the concatenated K on the CPU
    (pto::mmatmul_sum): K blocks straddle the terms (K = 300 + 250 + 130), a transposed B takes the
    packed path; ragged columns."""
    args = [rand(M, 300), rand(300, N), rand(M, 250), rand(N, 250), rand(M, 130), rand(130, N)]
    c0 = rand(M, N)
    c = c0.copy()
    k = jit(mm_sum, backend)
    k(*args, c)
    assert_close(c, f64(c0)[0] + sum_ref(*args), 1e-5)
    if backend == "cpu":
        src = k.lower(*args, c).as_text("source")
        assert src.count("pto::mmatmul_sum(") == 1 and "pto::MMATMUL" not in src


def linear_relu(x, w, b):
    return pypto.relu(pypto.add(pypto.matmul(x, w), b))


def linear_strided_bias(x, w, b):
    return pypto.matmul(x, w) + b[::2]


def linear_and_product(x, w, b):
    y = pypto.matmul(x, w)
    return pypto.relu(y + b), y


@pytest.mark.parametrize("M", [150, 40])
def test_bias_relu_epilogue_folds_into_the_product(backend, M):
    """relu(x @ w + b) with the product one MMATMUL: the CPU code runs the bias and relu at the
    GEMM's final store of each C tile (pto::mmatmul_bias), not as a second pass over the product.
    Ragged rows and columns; 40 rows take the in-place B path and split by columns on threads."""
    x, w = rand(M, 600), rand(600, 450)
    b, b_row = rand(450), rand(1, 450)
    x64, w64 = f64(x, w)
    ref = x64 @ w64
    fused = jit(linear_relu, backend, fusion=["matmul", "add", "relu"])
    assert_close(fused(x, w, b), np.maximum(ref + f64(b)[0], 0), 1e-5)
    assert_close(fused(x, w, b_row), np.maximum(ref + f64(b_row)[0], 0), 1e-5)
    # A strided bias folds where one column window spans the row (elementwise tiles are 256 wide).
    ws, b2 = rand(600, 250), rand(500)
    strided = jit(linear_strided_bias, backend, fusion=["matmul", "add"])
    assert_close(strided(x, ws, b2), x64 @ f64(ws)[0] + f64(b2)[0][::2], 1e-5)
    # The product is also returned: it is written, and the epilogue stays a pass of its own.
    both = jit(linear_and_product, backend, fusion=["matmul", "add", "relu"])
    y, p = both(x, w, b)
    assert_close(y, np.maximum(ref + f64(b)[0], 0), 1e-5)
    assert_close(p, ref, 1e-5)
    if backend == "cpu":
        assert "pto::mmatmul_bias(" in fused.lower(x, w, b).as_text("source")
        assert "pto::mmatmul_bias(" in fused.lower(x, w, b_row).as_text("source")
        src = strided.lower(x, ws, b2).as_text("source")
        assert "pto::mmatmul_bias(" in src
        assert "pto::mmatmul_bias(" not in both.lower(x, w, b).as_text("source")


def test_bias_relu_epilogue_folds_with_a_dynamic_row_count(backend):
    """The same fold when the row count is a sequence length (dynamic): one variant for every
    length, the bias and relu still at the GEMM's final store (no second pass over the
    product); lengths below a tile, ragged, and a length of 1 (its own static variant)."""
    w, b = rand(600, 450), rand(450)
    fused = jit(linear_relu, backend, fusion=["matmul", "add", "relu"], dynamic={"x": [0]})
    for M in (150, 7, 64, 333, 1):
        x = rand(M, 600)
        assert_close(fused(x, w, b), np.maximum(f64(x)[0] @ f64(w)[0] + f64(b)[0], 0), 1e-5)
    if backend == "cpu":
        src = fused.lower(rand(90, 600), w, b).as_text("source")
        assert "pto::mmatmul_bias(" in src and "chain_rows" not in src


@requires_compiler
@pytest.mark.parametrize("M,K,N", [(64, 576, 3192), (33, 600, 801), (57, 33, 1000), (40, 385, 768), (41, 70, 2000)])
def test_few_rows_wide_tile(M, K, N):
    """Products of at most 64 rows and at least 768 columns, B read in place, take the 8 x 48
    register tile (pto::gemm::choose_tile): rows not a multiple of 8, columns not of 48 (the
    ragged last panel packed), K past a kc block (384 on Zen 5) and short; into a poisoned output,
    accumulated, and with the bias and relu epilogue; split by columns on the threads."""
    a, b, bias = rand(M, K), rand(K, N), rand(N)
    a64, b64 = f64(a, b)
    ref = a64 @ b64
    c = poisoned(M, N)
    jit(mm_into, "cpu")(a, b, c)
    assert_close(c, ref, 1e-5)
    c0 = rand(M, N)
    c = c0.copy()
    jit(mm_acc, "cpu")(a, b, c)
    assert_close(c, f64(c0)[0] + ref, 1e-5)
    fused = jit(linear_relu, "cpu", fusion=["matmul", "add", "relu"])
    assert_close(fused(a, b, bias), np.maximum(ref + f64(bias)[0], 0), 1e-5)


@requires_compiler
@pytest.mark.parametrize("M,K,N", [(200, 300, 480), (203, 2100, 470), (128, 150, 1500), (1030, 77, 190)])
def test_wide_tile_packed(M, K, N):
    """Where 8-row panels and 48-column ones pad less than 14 x 32 (pto::gemm::tile_cost), the
    wide tile runs on packed operands too: ragged rows and columns, K past a kc block, tall
    (rows split on threads) and wide (columns split); transposed A and B take the strided packings."""
    a, b = rand(M, K), rand(K, N)
    a64, b64 = f64(a, b)
    ref = a64 @ b64
    assert_close(jit(mm, "cpu")(a, b), ref, 1e-5)
    assert_close(jit(mm_bt, "cpu")(a, np.ascontiguousarray(b.T)), ref, 1e-5)
    assert_close(jit(mm_at, "cpu")(np.ascontiguousarray(a.T), b), ref, 1e-5)
    c0 = rand(M, N)
    c = c0.copy()
    jit(mm_acc, "cpu")(a, b, c)
    assert_close(c, f64(c0)[0] + ref, 1e-5)


def test_batched_rows_times_a_matrix_is_one_gemm():
    # nn.Linear on (batch, seq, d): the batch folds into the rows of one whole-matrix product, also
    # for a permuted input (nn.MultiheadAttention's x.transpose(0, 1)); a ragged tile of a user
    # loop keeps the batched product.
    rng = np.random.default_rng(5)
    x = rng.standard_normal((4, 96, 128)).astype(np.float32)
    w = rng.standard_normal((128, 160)).astype(np.float32)
    for f, ref in [(lambda x, w: x @ w, x @ w), (lambda x, w: x.transpose(0, 1) @ w, x.transpose(1, 0, 2) @ w)]:
        k = pypto.jit(f)
        out = k(x, w)
        assert np.linalg.norm(out - ref) / np.linalg.norm(ref) < 1e-5
        isa = k.lower(x, w).as_text("isa")
        assert isa.count("MMATMUL") == 1 and "TMATMUL" not in isa

    @pypto.jit
    def tiles(x, w, out):
        for i in range(0, 90, 64):
            out[:, i:i + 64, :] = x[:, i:i + 64, :] @ w
    xr = x[:, :90].copy()
    out = np.full((4, 90, 160), np.nan, np.float32)
    tiles(xr, w, out)
    assert np.linalg.norm(out - xr @ w) / np.linalg.norm(xr @ w) < 1e-5


@pytest.mark.parametrize("backend", ["interp", "cpu"])
def test_batch_of_one_product_is_read_and_written_through_views(backend):
    # x @ W.T for x of shape (1, S, d) (a traced nn.Linear on one sequence): the GEMM reads x and
    # writes the result through views that drop the batch dim, so no copy runs on either side;
    # a reshape that only drops size-1 dims is such a view too, and writes through it reach x.
    rng = np.random.default_rng(6)
    x = rng.standard_normal((1, 96, 128)).astype(np.float32)
    w = rng.standard_normal((160, 128)).astype(np.float32)
    k = jit(lambda x, w: pypto.relu(x) @ w.T, backend)
    out = k(x, w)
    assert_close(out, np.maximum(x.astype(np.float64), 0) @ w.T.astype(np.float64))
    tensor = k.lower(x, w).as_text("tensor")
    assert "TMOV" not in tensor and tensor.count("TMATMUL") == 1

    def through(x):
        y = pypto.exp(x)
        z = y.reshape(96, 128)
        z[0:8, :] = 0.0
        return y * 2.0
    want = 2 * np.exp(x.astype(np.float64))
    want[0, 0:8, :] = 0
    assert_close(jit(through, backend)(x), want)


def linear_relu(x, w, b):
    return pypto.relu(pypto.matmul(x, w) + b)


@requires_compiler
def test_products_with_large_right_operands_are_packed_once():
    """A product whose right operand is large (512 x 512) is one MMATMUL with its epilogue in a
    pass of its own, also when the fusion list names matmul: a row group would repack the operand
    for every row tile (2x slower at 512^3). The derived backward's two products (dx = dy W^T,
    dW = x^T dy) are two MMATMULs, not one row nest reloading both right operands."""
    x, w, b = rand(512, 512), rand(512, 512), rand(512)
    kern = pypto.jit(linear_relu, fusion=["matmul", "add", "relu"])
    fwd = kern.lower(x, w, b).as_text("tile")
    assert fwd.count("MMATMUL") == 1 and "TMATMUL" not in fwd, fwd
    bwd = kern.lower_backward(x, w, b).as_text("tile")
    assert bwd.count("MMATMUL") == 2 and "TMATMUL" not in bwd, bwd
    # The backward fuses what the default list fuses besides the kernel's list: the relu's mask,
    # its select and the bias gradient's column sum are one pass over dy, not three.
    nests = [ln for ln in bwd.split("\n") if ln.startswith("  parallel for") or ln.startswith("  for")]
    assert len(nests) == 1, bwd
    # A small right operand (64 x 64) still joins the row group with its epilogue.
    small = pypto.jit(linear_relu, fusion=["matmul", "add", "relu"]).lower(
        rand(512, 64), rand(64, 64), rand(64)).as_text("tile")
    assert "TMATMUL" in small and "MMATMUL" not in small, small
    out = poisoned(512, 512)
    out[...] = kern(x, w, b)
    x64, w64, b64 = f64(x, w, b)
    assert_close(out, np.maximum(x64 @ w64 + b64, 0))


@pytest.mark.parametrize("M", [1, 2, 4, 5])
def test_few_rows_against_a_transposed_weight(backend, M):
    """One decoding step's x @ W.T (1-4 rows, W stored out x in): one MMATMUL of dot products over
    contiguous rows (gemm_dot.hpp), not a tiled nest that transposes W; ragged K and N; 5 rows
    take the packed GEMM."""
    a, w = rand(M, 301), rand(203, 301)
    isa = isa_text(mm_bt, "cpu", a, w)
    assert ("MMATMUL" in isa) == (M <= 4) and ("TMATMUL" in isa) == (M > 4)
    assert_close(jit(mm_bt, backend)(a, w), f64(a)[0] @ f64(w)[0].T, 1e-5)
