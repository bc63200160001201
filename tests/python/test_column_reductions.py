"""Reductions down a dimension that is not the innermost in memory (x.sum(0), a layer-norm
backward's column sums): tiled as column reductions of row-major tiles, in blocks of rows with a
final combine when there are few columns. Random inputs, NaN-poisoned outputs, float64 references,
ragged shapes, on the interpreter and the CPU backend."""
import numpy as np
import pytest

import pypto
from pypto_testutil import assert_close, assert_close_edges, edge_rand, jit, poisoned, rand


def columns_2d(x, s, mx, mn, me):
    s[...] = x.sum(0)
    mx[...] = x.max(0)
    mn[...] = pypto.min(x, 0)
    me[...] = x.mean(0)


# (rows, cols): many rows and few columns (blocks of rows and a combine, a ragged last block),
# a width past one column tile, a small case in one tile.
@pytest.mark.parametrize("shape", [(1000, 37), (4099, 3), (130, 4100), (5, 7)])
def test_columns_2d(backend, shape):
    m, n = shape
    x = rand(m, n)
    outs = [poisoned(n) for _ in range(4)]
    jit(columns_2d, backend)(x, *outs)
    x64 = x.astype(np.float64)
    for o, r in zip(outs, (x64.sum(0), x64.max(0), x64.min(0), x64.mean(0))):
        assert_close(o, r, 1e-5)


def columns_edges(x):
    return x.sum(0), x.max(0), pypto.min(x, 0)


def test_columns_nan_inf(backend):
    x = edge_rand(300, 70)
    outs = jit(columns_edges, backend)(x)
    x64 = x.astype(np.float64)
    with np.errstate(all="ignore"):
        refs = (x64.sum(0), x64.max(0), x64.min(0))
    for o, r in zip(outs, refs):
        assert_close_edges(o, r, 1e-5)


def columns_3d(x, a, b, c, d):
    a[...] = x.sum((0, 1))
    b[...] = x.sum(0)
    c[...] = x.max(1)
    d[...] = pypto.transpose(x, 1, 2).sum(-1)  # a transposed view reduced along x's dim 1


def test_columns_3d(backend):
    x = rand(3, 301, 45)
    outs = [poisoned(45), poisoned(301, 45), poisoned(3, 45), poisoned(3, 45)]
    jit(columns_3d, backend)(x, *outs)
    x64 = x.astype(np.float64)
    for o, r in zip(outs, (x64.sum((0, 1)), x64.sum(0), x64.max(1), x64.sum(1))):
        assert_close(o, r, 1e-5)


def int_columns(x):
    return x.sum(0), x.max(0)


def test_int_columns(backend):
    x = np.random.default_rng(5).integers(-1000, 1000, size=(777, 19)).astype(np.int32)
    s, mx = jit(int_columns, backend)(x)
    assert s.dtype == np.int64
    np.testing.assert_array_equal(s, x.astype(np.int64).sum(0))
    np.testing.assert_array_equal(mx, x.max(0))


def test_dynamic_rows(backend):
    k = jit(lambda x: x.sum(0), backend, dynamic=True)
    for m in (70, 513):
        x = rand(m, 33)
        assert_close(k(x), x.astype(np.float64).sum(0), 1e-5)


def colsum(x):
    return x.sum(0)


def test_no_transposed_loads():
    """The column sum loads row-major windows of x (no perm()) and reduces them with TCOLSUM; with
    one column block the rows are cut into blocks, combined from a partial-results buffer."""
    text = pypto.jit(colsum).lower(rand(2048, 256)).as_text("isa")
    loads = [ln for ln in text.splitlines() if "TLOAD" in ln and "%x[" in ln]
    assert loads and not any("perm(" in ln for ln in loads), text
    assert "TCOLSUM" in text and "parallel for" in text and "%parts" in text, text


def fused_rows_and_columns(x, y):
    z = x * y + x
    return z * 2.0, z.sum(0), y.sum(0)


def check_rows_and_columns(k, x, y):
    out, zs, ys = k(x, y)
    x64, y64 = x.astype(np.float64), y.astype(np.float64)
    z = x64 * y64 + x64
    assert_close(out, 2 * z, 1e-6)
    assert_close(zs, z.sum(0), 1e-5)
    assert_close(ys, y64.sum(0), 1e-5)


# A row group ending with column sums of its rows accumulates them in its own nest (chunks of
# row blocks, then a combine of the chunks' sums): ragged row blocks and chunks, one tile, a
# width past one column tile, and rows known at run time only.
@pytest.mark.parametrize("shape", [(1000, 37), (4099, 3), (130, 4100), (5, 7)])
def test_column_sums_fused_into_rows(backend, shape):
    x, y = rand(*shape), rand(*shape)
    k = jit(fused_rows_and_columns, backend, fusion=True)
    check_rows_and_columns(k, x, y)
    if shape == (1000, 37):
        # no pass of their own over memory: y is read once, one nest of chunks and row blocks
        tile = k.lower(x, y).as_text("tile")
        assert tile.count("TCOLSUM") == 4 and tile.count("%y[") == 1 and tile.count("for %") == 2, tile


def test_column_sums_fused_dynamic_rows(backend):
    k = jit(fused_rows_and_columns, backend, fusion=True, dynamic=True)
    for m in (70, 513):
        check_rows_and_columns(k, rand(m, 33), rand(m, 33))
