"""Row fusion in the CPU backend (src/backends/cpu/row_fusion.cpp, include/pto/cpu/rows.hpp):
softmax, RMS norm and layer norm become one call per row tile that reads each row from the
input and writes it to the output in place. Checked against float64 on odd widths, partial row
tiles, dynamic rows, inf / NaN rows and a transposed (column-strided) input, which takes the
call's instruction-by-instruction fallback."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

import pypto
from pypto_testutil import assert_close_edges, edge_rand, poisoned, requires_compiler, rand

pytestmark = requires_compiler


def softmax_into(x, y):
    y[:, :] = pypto.softmax(x, -1)


def log_softmax_into(x, y):
    y[:, :] = pypto.log_softmax(x, -1)


def rms_norm_into(x, w, y):
    y[:, :] = pypto.rms_norm(x, x.shape[-1], w, 1e-6)


def rms_norm_plain_into(x, y):
    y[:, :] = pypto.rms_norm(x, x.shape[-1], None, 1e-6)


def layer_norm_into(x, w, b, y):
    y[:, :] = pypto.layer_norm(x, x.shape[-1], w, b, 1e-5)


def layer_norm_weight_into(x, w, y):
    y[:, :] = pypto.layer_norm(x, x.shape[-1], w, None, 1e-5)


def t64(*xs):
    return [torch.from_numpy(np.asarray(x, np.float64)) for x in xs]


def refs(x, w, b):
    tx, tw, tb = t64(x, w, b)
    n = (x.shape[-1],)
    return {
        softmax_into: (lambda: torch.softmax(tx, -1), (x,)),
        log_softmax_into: (lambda: torch.log_softmax(tx, -1), (x,)),
        rms_norm_into: (lambda: F.rms_norm(tx, n, tw, 1e-6), (x, w)),
        rms_norm_plain_into: (lambda: F.rms_norm(tx, n, None, 1e-6), (x,)),
        layer_norm_into: (lambda: F.layer_norm(tx, n, tw, tb, 1e-5), (x, w, b)),
        layer_norm_weight_into: (lambda: F.layer_norm(tx, n, tw, None, 1e-5), (x, w)),
    }


FUSED = {softmax_into: "softmax_rows", log_softmax_into: "log_softmax_rows", rms_norm_into: "rms_norm_rows", rms_norm_plain_into: "rms_norm_rows",
         layer_norm_into: "layer_norm_rows", layer_norm_weight_into: "layer_norm_rows"}


@pytest.mark.parametrize("fn", list(FUSED), ids=lambda f: f.__name__)
@pytest.mark.parametrize("shape", [(37, 1000), (9, 4096), (6, 45)])
def test_fused_rows_match_float64(fn, shape):
    x, w, b = edge_rand(*shape), rand(shape[1]), rand(shape[1])  # row 1: ties (a layer norm's 0)
    ref, args = refs(x, w, b)[fn]
    kernel = pypto.jit(fn, backend="cpu")
    assert f"pto::fused::{FUSED[fn]}<" in kernel.lower(*args, poisoned(*shape)).as_text("source")
    y = poisoned(*shape)
    kernel(*args, y)
    assert_close_edges(y, ref().numpy(), tol=1e-5)


def test_fused_rows_over_dynamic_rows():
    kernel = pypto.jit(layer_norm_into, backend="cpu", dynamic={"x": [0], "y": [0]})
    w, b = rand(300), rand(300)
    for rows in (3, 17, 64):
        x = rand(rows, 300)
        y = poisoned(rows, 300)
        kernel(x, w, b, y)
        tx, tw, tb = t64(x, w, b)
        assert_close_edges(y, F.layer_norm(tx, (300,), tw, tb, 1e-5).numpy(), tol=1e-5)
    assert kernel.cache_size == 1


def test_norm_weights_read_in_place_or_copied():
    """A norm's weight and bias are read where they lie (fused::row_data), or copied into their tile
    first when the view has a column stride; both give the float64 result."""
    x, wb = rand(9, 300), rand(2, 600)
    kernel = pypto.jit(layer_norm_into, backend="cpu")
    for w, b in ((wb[0, :300], wb[1, :300]), (wb[0, ::2], wb[1, 1::2])):
        assert "pto::fused::row_data(" in kernel.lower(x, w, b, poisoned(9, 300)).as_text("source")
        y = poisoned(9, 300)
        kernel(x, w, b, y)
        tx, tw, tb = t64(x, w, b)
        assert_close_edges(y, F.layer_norm(tx, (300,), tw, tb, 1e-5).numpy(), tol=1e-5)


def test_fused_rows_from_a_transposed_input():
    x = np.ascontiguousarray(edge_rand(64, 40).T)  # 40 x 64 values...
    xt = np.asfortranarray(x)  # ... read through a column-strided view
    y = poisoned(40, 64)
    pypto.jit(softmax_into, backend="cpu")(xt, y)
    assert_close_edges(y, torch.softmax(*t64(x), -1).numpy(), tol=1e-5)


def add(x, y):
    return pypto.add(x, y)


def sub(x, y):
    return x - y


def mul(x, y):
    return x * y


def div(x, y):
    return x / y


def maximum(x, y):
    return pypto.maximum(x, y)


def minimum(x, y):
    return pypto.minimum(x, y)


BINARY = {sub: np.subtract, mul: np.multiply, div: np.divide, maximum: np.maximum, minimum: np.minimum}


def test_binary_elementwise_fuses_loads_and_store():
    a, b = rand(100003), rand(100003)
    kernel = pypto.jit(add, backend="cpu")
    assert "pto::fused::binary_rows<" in kernel.lower(a, b).as_text("source")
    np.testing.assert_array_equal(kernel(a, b), a + b)
    x, y = edge_rand(37, 27).reshape(-1), rand(999)  # with inf, -inf, NaN and denormals
    for fn, ref in BINARY.items():
        kernel = pypto.jit(fn, backend="cpu")
        assert "pto::fused::binary_rows<" in kernel.lower(x, y).as_text("source"), fn.__name__
        np.testing.assert_array_equal(kernel(x, y), ref(x, y), err_msg=fn.__name__)


def test_binary_rows_of_a_matrix_by_column_blocks():
    """A 2-D product of wide rows runs by column blocks (its tiles are allocated outside the column
    loop); the blocks are read and streamed in place too. Strided operands (a transposed view)
    take the loads and stores as written, with the same results."""
    x, y = rand(37, 4100), rand(37, 4100)
    for fn, ref in BINARY.items():
        kernel = pypto.jit(fn, backend="cpu")
        assert "pto::fused::binary_rows<" in kernel.lower(x, y).as_text("source"), fn.__name__
        np.testing.assert_array_equal(kernel(x, y), ref(x, y), err_msg=fn.__name__)
    xt, yt = rand(4100, 37).T, rand(4100, 37).T
    np.testing.assert_array_equal(pypto.jit(mul, backend="cpu")(xt, yt), xt * yt)


def plus_one(x):
    return x + 1.0


def one_minus(x):
    return 1.0 - x


def two_over(x):
    return 2.0 / x


def halved_max(x):
    return pypto.maximum(x * 0.5, 0.25)


MAPS = [plus_one, one_minus, two_over, pypto.relu, pypto.exp, pypto.sqrt, pypto.tanh, pypto.sigmoid,
        pypto.gelu, pypto.abs, pypto.neg]


@pytest.mark.parametrize("fn", MAPS, ids=lambda f: f.__name__)
def test_unary_and_scalar_ops_map_rows_in_place(fn):
    """A unary instruction, or a binary one with a scalar operand (either side), between a TLOAD
    and a TSTORE is one call reading and writing the rows in place (unary_rows / scalar_rows):
    bit for bit the instructions as written (which a column-strided input takes inside the call),
    inf / NaN / denormals included, and the interpreter's results (to float rounding: the
    transcendentals' vector forms may differ from its scalar ones in the last bit)."""
    def kernel_fn(x):
        return fn(x)
    kernel = pypto.jit(kernel_fn, backend="cpu")
    ref = pypto.jit(kernel_fn, backend="interp")
    for x in (edge_rand(37, 4100), edge_rand(37, 2703).reshape(-1)):
        src = kernel.lower(x).as_text("source")
        assert "pto::fused::unary_rows<" in src or "pto::fused::scalar_rows<" in src, fn.__name__
        got = kernel(x)
        as_written = kernel(np.asfortranarray(x) if x.ndim == 2 else np.repeat(x, 2)[::2])  # strided
        np.testing.assert_array_equal(got, as_written)
        np.testing.assert_allclose(got, ref(x), rtol=2e-6, atol=1e-37)


def row_sum(x):
    return pypto.sum(x, -1)


def row_amax(x):
    return pypto.amax(x, -1)


def row_amin(x):
    return pypto.amin(x, -1)


def row_mean(x):
    return pypto.mean(x, -1)


@pytest.mark.parametrize("fn", [row_sum, row_amax, row_amin, row_mean], ids=lambda f: f.__name__)
def test_row_reductions_read_rows_in_place(fn):
    """A row reduction of a loaded tile is one call reducing the rows where they lie (reduce_rows),
    also in the loop over the column blocks of rows wider than one block (4100: 4096 + 4), whose
    tile was loaded before the loop too; bit for bit the instructions as written (a column-strided
    input takes them inside the call), inf / NaN / denormals included, and the interpreter's and
    NumPy's results."""
    kernel = pypto.jit(fn, backend="cpu")
    ref = pypto.jit(fn, backend="interp")
    nps = {row_sum: np.sum, row_amax: np.max, row_amin: np.min, row_mean: np.mean}[fn]
    for x in (edge_rand(37, 4100), rand(64, 2703), rand(5, 37)):
        src = kernel.lower(x).as_text("source")
        assert "pto::fused::reduce_rows<" in src, fn.__name__
        if x.shape[1] > 4096:  # the first block before the column loop, the others inside it
            assert src.count("pto::fused::reduce_rows<") == 2 and "TROWSUM" not in src and "TROWMAX" not in src
        got = kernel(x)
        np.testing.assert_array_equal(got, kernel(np.asfortranarray(x)))
        with np.errstate(invalid="ignore"):
            want = nps(x.astype(np.float64), axis=-1)
        # The maximum and minimum are exact; a float32 sum of 4100 normal terms in lanes against
        # one rounding of the exact sum loses up to ~1e-6 of rows whose terms cancel (1.01e-6 seen
        # with other draws of the shared generator).
        tol = 1e-6 if fn in (row_amax, row_amin) else 4e-6
        assert_close_edges(got, ref(x), tol=tol)
        assert_close_edges(got, want, tol=tol)


def test_a_chain_of_scalar_ops_stays_correct():
    x = rand(37, 4100)
    kernel = pypto.jit(halved_max, backend="cpu")
    np.testing.assert_array_equal(kernel(x), pypto.jit(halved_max, backend="interp")(x))


def test_attention_scores_softmax_in_place_is_one_call():
    """The seed attention's softmax runs in place on the scores tile (TDIV s, s, sqrt(d); TROWMAX
    m, s; TSUB s, s, m; TEXP s, s...): one call with the scale folded in (div_softmax_rows), each
    row's passes in L1, instead of one pass per instruction."""
    from pypto import seed_kernels
    kernel = pypto.jit(seed_kernels.optimized_attention, fusion=True, backend="cpu")
    q, k, v = (rand(1, 3, 300, 32) for _ in range(3))
    assert "pto::fused::div_softmax_rows(" in kernel.lower(q, k, v).as_text("source")
    s = torch.from_numpy(q).double() @ torch.from_numpy(k).double().transpose(-2, -1) / np.sqrt(32)
    ref = (torch.softmax(s, -1) @ torch.from_numpy(v).double()).numpy()
    out = kernel(q, k, v)
    assert np.linalg.norm(out - ref) / np.linalg.norm(ref) < 1e-6


def shifted_add_into(x, y):
    x[1:, :] = x[:-1, :] + y[1:, :]


def test_binary_rows_into_an_overlapping_output():
    x, y = rand(40, 300), rand(40, 300)
    ref = x.copy()
    ref[1:] = x[:-1] + y[1:]
    pypto.jit(shifted_add_into, backend="cpu")(x, y)
    np.testing.assert_array_equal(x, ref)
