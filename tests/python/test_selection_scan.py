"""The row kernels made for speed (issue 15): topk by selection (TARGSORT into a narrow
destination) and row scans (TSCAN), on the interpreter and the CPU backend against float64
references, over ragged rows, ties, NaN and +-inf, outputs poisoned with NaN."""
import numpy as np
import pytest
import torch

import pypto
from pypto_testutil import assert_close, assert_close_edges, backend_params, edge_rand, jit, poisoned, rand


@pytest.fixture(params=backend_params(tiled=True))
def backend(request):
    return request.param


def _topk_case(rows, n, seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((rows, n)).astype(np.float32)
    x[1, :] = 0.5                       # all ties: the earliest indices win
    x[2, ::3] = x[2, 0]                 # repeated values
    x[3, n // 2] = np.nan               # NaN first when largest, last when smallest
    x[3, 1] = np.inf
    x[4, :] = np.sort(x[4, :])          # ascending row: every element replaces the k-th
    return x


@pytest.mark.parametrize("largest", [True, False])
@pytest.mark.parametrize("rows,n,k", [(9, 1000, 50), (5, 77, 30)])  # selection; merge sort
def test_topk_matches_torch(backend, rows, n, k, largest):
    x = _topk_case(rows, n, seed=n + k)

    def f(x, v, i):
        vals, idx = pypto.topk(x, k, -1, largest)
        v[...] = vals
        i[...] = idx

    v, i = poisoned(rows, k), np.full((rows, k), -7, dtype=np.int64)
    jit(f, backend)(x, v, i)
    tv, _ = torch.topk(torch.from_numpy(x.astype(np.float64)), k, -1, largest=largest, sorted=True)
    # torch does not specify the order of equal keys; pypto's is that of a stable sort (NaN first
    # when largest, last when smallest, as numpy's).
    order = np.array([_stable_desc(r) for r in x]) if largest else np.argsort(x, axis=-1, kind="stable")
    want_i = order[:, :k]
    np.testing.assert_array_equal(i, want_i)
    np.testing.assert_array_equal(v, np.take_along_axis(x, want_i, -1))
    np.testing.assert_array_equal(np.sort(v, -1), np.sort(tv.numpy().astype(np.float32), -1))


def _stable_desc(row):
    """Indices of a stable descending sort with NaN first (torch's rule)."""
    keys = [(0 if np.isnan(a) else 1, -a if not np.isnan(a) else 0.0, j) for j, a in enumerate(row)]
    return [j for _, _, j in sorted(keys)]


def test_topk_int_rows(backend):
    rng = np.random.default_rng(3)
    x = rng.integers(-20, 20, size=(4, 500)).astype(np.int32)

    def f(x, i):
        i[...] = pypto.topk(x, 9, -1)[1]

    i = np.full((4, 9), -7, dtype=np.int64)
    jit(f, backend)(x, i)
    np.testing.assert_array_equal(i, np.argsort(-x.astype(np.int64), axis=-1, kind="stable")[:, :9])


@pytest.mark.parametrize("dim", [-1, 0])
def test_cumsum_cumprod(backend, dim):
    x = edge_rand(33, 70)                       # ragged against every tile size; NaN and +-inf rows
    x64 = torch.from_numpy(x.astype(np.float64))

    def f(x, s, p):
        s[...] = pypto.cumsum(x, dim)
        p[...] = pypto.cumprod(x * 0.5 + 1.0, dim)

    s, p = poisoned(33, 70), poisoned(33, 70)
    jit(f, backend)(x, s, p)
    assert_close_edges(s, torch.cumsum(x64, dim).numpy(), tol=1e-5)
    assert_close_edges(p, torch.cumprod(x64 * 0.5 + 1.0, dim).numpy(), tol=1e-5)


def test_cumsum_ints_and_long_rows(backend):
    rng = np.random.default_rng(5)
    xi = rng.integers(-1000, 1000, size=(3, 5000)).astype(np.int32)
    xf = rng.standard_normal((20, 1000)).astype(np.float32)

    def f(xi, xf, si, sf):
        si[...] = pypto.cumsum(xi, -1)
        sf[...] = pypto.cumsum(xf, 1)

    si, sf = np.full((3, 5000), -7, dtype=np.int64), poisoned(20, 1000)
    jit(f, backend)(xi, xf, si, sf)
    np.testing.assert_array_equal(si, np.cumsum(xi.astype(np.int64), -1))
    assert_close(sf, np.cumsum(xf.astype(np.float64), 1), tol=1e-5)


def test_cumsum_gradient():
    x = rand(6, 45)
    w = rand(6, 45)
    @pypto.jit
    def loss(x, w):
        return pypto.sum(pypto.cumsum(x, -1) * w)

    g = pypto.grad(loss)(x, w)
    want = np.flip(np.cumsum(np.flip(w.astype(np.float64), -1), -1), -1)
    assert_close(g, want, tol=1e-5)


def test_streaming_store_of_an_output_bigger_than_the_cache():
    """A kernel output bigger than the last-level cache is stored with streaming stores (TSTORE's
    kStream hint, or an elementwise chain's own): rows of 1001 floats start at every alignment, so
    the unaligned head and tail of each row are covered too."""
    cols = 1001
    rows = pypto.target()["caches"]["l3"] // (cols * 4) + 3
    x = rand(rows, cols)
    y = rand(cols)

    def f(x, y, out):
        out[...] = x * 2.0 + y

    out = poisoned(rows, cols)
    pypto.jit(f)(x, y, out)
    np.testing.assert_array_equal(out, x * np.float32(2.0) + y)
    src = pypto.jit(f).lower(x, y, out).as_text("source")
    assert "pto::fused::chain_rows<true>" in src  # (an elementwise chain: its own streaming stores)
    f_plain = pypto.jit(f, fusion="off")  # one instruction per nest: TSTORE's kStream hint
    out = poisoned(rows, cols)
    f_plain(x, y, out)
    np.testing.assert_array_equal(out, x * np.float32(2.0) + y)
    assert "pto::kStream" in f_plain.lower(x, y, out).as_text("source")


def test_a_row_gather_streams_when_its_rows_and_output_pass_the_cache():
    """An embedding lookup reads as many bytes of its table as it writes: with its output and those
    rows together beyond the last-level cache (but neither alone), its stores stream; a lookup half
    that size does not. Rows of 1001 floats start at every alignment."""
    cols = 1001
    rows = pypto.target()["caches"]["l3"] // (cols * 4) // 2 + 5
    table = rand(3 * rows, cols)
    rng = np.random.default_rng(3)
    ids = rng.integers(0, 3 * rows, size=rows).astype(np.int64)

    def lookup(ids, table):
        return pypto.embedding(ids, table)

    big = pypto.jit(lookup)
    np.testing.assert_array_equal(big(ids, table), table[ids])
    assert "pto::fused::gather_rows<true>" in big.lower(ids, table).as_text("source")
    few = ids[: rows // 2]
    lookup = pypto.jit(lookup)  # a kernel of its own: a second size would make the dim dynamic
    np.testing.assert_array_equal(lookup(few, table), table[few])
    assert "pto::fused::gather_rows<false>" in lookup.lower(few, table).as_text("source")


def test_an_output_of_dynamic_size_streams_by_its_size_at_run_time():
    """Where an output's rows are dynamic, whether its stores stream is the kernel's decision at
    run time (its static bound would make every such output stream, a small one included): the
    source holds the rule's call instead of a constant, and both sides of it store every element."""
    cols = 1001
    big = pypto.target()["caches"]["l3"] // (cols * 4) + 3

    def f(x, y):
        return x * 2.0 + y

    for fusion in ("auto", "off"):  # a chain's own streaming stores; TSTORE's hint
        k = pypto.jit(f, dynamic={"x": [0], "y": [0]}, fusion=fusion)
        for rows in (5, big):
            x, y = rand(rows, cols), rand(rows, cols)
            np.testing.assert_array_equal(k(x, y), x * np.float32(2.0) + y)
        src = k.lower(x, y).as_text("source")
        streams = [line for line in src.splitlines() if "<true>(" in line or "StreamHint" in line]
        assert streams and all("pto::streams_past_cache(pto::buffer_bytes(4, " in line for line in streams)
