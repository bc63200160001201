"""Row-wise fusion over a dynamic row width (the key length of attention, a dynamic feature dim).

A fused row keeps each row in one tile; over a dynamic width that tile is tile_cols / 2, 8 x
tile_cols or 2048 x tile_cols wide, chosen by run-time guards on the width, with the unfused nests
as the fallback for wider rows. With the default tiles (256, 4096, 1048576) the widths below take
the first two; with SMALL_TILES (8, 128, 32768) they take all three, and a width above 32768 the
fallback, so every branch is checked against NumPy."""
import random

import numpy as np
import pytest

import pypto
from pypto import seed_kernels
from pypto_testutil import SMALL_TILES, backend_params, jit, poisoned, rand, rel_err, requires_compiler


@pytest.fixture(params=backend_params(tiled=True))
def backend(request):
    return request.param


def softmax_ref(x):
    x = np.asarray(x, np.float64)
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def scaled_softmax_into(x, y):
    y[:, :] = pypto.softmax(x * 0.5, -1)


def norm_into(x, w, b, y):  # (pypto.layer_norm's normalized_shape is static: written out here)
    mu = x.mean(-1, keepdim=True)
    xc = x - mu
    y[:, :] = xc / pypto.sqrt((xc * xc).mean(-1, keepdim=True) + 1e-5) * w + b


def widths(backend):
    rng = random.Random(5)
    ws = [2, 3, 13, 127, 129, 300] + [rng.randrange(2, 700) for _ in range(3)]
    if getattr(backend, "tiles", None):  # tile widths 8, 128 and 32768
        ws.append(2100)
    return ws[:5] + ws[-1:] if str(backend).startswith("interp") else ws


def test_softmax_over_a_dynamic_row_width(backend):
    kernel = jit(scaled_softmax_into, backend, dynamic={"x": [0, 1], "y": [0, 1]})
    for w in widths(backend):
        for rows in (1, 7, 37):
            x = rand(rows, w)
            y = poisoned(rows, w)
            kernel(x, y)
            assert rel_err(y, softmax_ref(0.5 * x.astype(np.float64))) < 1e-6, (rows, w)
    assert kernel.cache_size <= 2  # rows = 1 is a variant of its own (a size-1 dim stays static)


@pytest.mark.parametrize("backend", [b for b in backend_params(tiled=True) if b.values[0].tiles])
def test_rows_wider_than_the_widest_tile_run_unfused(backend):
    kernel = jit(scaled_softmax_into, backend, dynamic={"x": [1], "y": [1]})
    for w in (40, 32769, 33000):
        x = rand(3, w)
        y = poisoned(3, w)
        kernel(x, y)
        assert rel_err(y, softmax_ref(0.5 * x.astype(np.float64))) < 1e-6, w
    assert kernel.cache_size == 1


@requires_compiler
def test_rows_wider_than_every_tile_are_compiled_when_first_needed(tmp_path, monkeypatch):
    """The unfused code for rows wider than the widest tile is much of a dynamic kernel's C++: the
    first compile leaves it out, and the first call with such rows compiles the kernel in full
    (before the kernel touched any data), which then runs every width."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("PYPTO_CACHE_DIR", str(cache))
    kernel = pypto.jit(scaled_softmax_into, tiles=SMALL_TILES, dynamic={"x": [1], "y": [1]})
    for w, objects in ((40, 1), (300, 1), (32769, 2), (40, 2)):
        x, y = rand(3, w), poisoned(3, w)
        kernel(x, y)
        assert rel_err(y, softmax_ref(0.5 * x.astype(np.float64))) < 1e-6, w
        assert len(list(cache.glob("*.so"))) == objects, w
    assert kernel.cache_size == 1


def test_layer_norm_over_a_dynamic_feature_dim(backend):
    kernel = jit(norm_into, backend, dynamic={"x": [1], "w": [0], "b": [0], "y": [1]})
    for d in widths(backend):
        x, w, b = rand(19, d, dtype=np.float64), rand(d, dtype=np.float64), rand(d, dtype=np.float64)
        y = poisoned(19, d, dtype=np.float64)
        kernel(x, w, b, y)
        mu = x.mean(-1, keepdims=True)
        ref = (x - mu) / np.sqrt(((x - mu) ** 2).mean(-1, keepdims=True) + 1e-5) * w + b
        assert rel_err(y, ref) < 1e-6, d  # (eps is an f32 constant)
    assert kernel.cache_size == 1


def test_dynamic_row_group_is_fused_under_a_guard():
    """The softmax of a dynamic width is one nest per tile width (256: 32 rows a tile; 4096: 4, as
    rows that wide stream from memory; 1048576: 1), each behind `width <= tile width`; the last
    else branch holds the unfused nests."""
    kernel = pypto.jit(scaled_softmax_into, dynamic={"x": [1], "y": [1]})
    text = kernel.lower(rand(50, 40), poisoned(50, 40)).as_text("tile")
    *tiers, fallback = text.split("} else {")
    assert len(tiers) == 3
    for tier, (rows, cols) in zip(tiers, [(32, 256), (4, 4096), (1, 1048576)]):
        assert f"<= {cols})" in tier and f"f32[{rows}, {cols}] vec" in tier
        assert tier.count("TLOAD") == 1 and tier.count("TSTORE") == 1  # x in, y out: nothing between
    assert fallback.count("TSTORE") > 2  # the fallback stores its temporaries


def test_attention_with_a_dynamic_key_length_equals_static(backend):
    """Seed attention with the sequence dim dynamic, lengths 1, primes and below a tile: equal to
    the static kernel of each length and to NumPy (float64)."""
    dims = {"Q": [2], "K": [2], "V": [2]}
    dynamic = jit(seed_kernels.optimized_attention, backend, dynamic=dims)
    static = jit(seed_kernels.optimized_attention, backend, dynamic=False)
    lengths = (1, 5, 131) if str(backend).startswith("interp") else (1, 2, 5, 131, 200)
    for s in lengths:
        q, k, v = (rand(1, 2, s, 16, dtype=np.float64) for _ in range(3))
        sc = q @ k.transpose(0, 1, 3, 2) / np.sqrt(16)
        out = dynamic(q, k, v)
        assert rel_err(out, softmax_ref(sc) @ v) < 1e-12, s
        np.testing.assert_allclose(out, static(q, k, v), rtol=1e-12, atol=1e-14)
    assert dynamic.cache_size == 2  # s = 1 static, every other length one dynamic kernel


def test_fused_attention_over_a_dynamic_key_length(backend):
    """fusion=True makes the static attention one row nest (scores, softmax and @V per row tile);
    over a dynamic key length the same nest runs under the width guard, its K^T / V tiles as wide
    as the guard. Small tiles (guard at 128) send the longer lengths to the unfused fallback."""
    dims = {"Q": [2], "K": [2], "V": [2]}
    dynamic = jit(seed_kernels.optimized_attention, backend, dynamic=dims, fusion=True)
    static = jit(seed_kernels.optimized_attention, backend, dynamic=False, fusion=True)
    lengths = (3, 131) if str(backend).startswith("interp") else (2, 17, 131, 200)
    for s in lengths:
        q, k, v = (rand(1, 2, s, 16, dtype=np.float64) for _ in range(3))
        sc = q @ k.transpose(0, 1, 3, 2) / np.sqrt(16)
        out = dynamic(q, k, v)
        assert rel_err(out, softmax_ref(sc) @ v) < 1e-12, s
        np.testing.assert_allclose(out, static(q, k, v), rtol=1e-12, atol=1e-14)
    assert dynamic.cache_size == 1
    if not getattr(backend, "tiles", None):
        *tiers, _ = dynamic.lower(q, k, v).as_text("tile").split("} else {")
        assert len(tiers) == 2 and "<= 256)" in tiers[0] and "<= 4096)" in tiers[1]  # a matmul stops at 4096
        for fused in tiers:
            assert fused.count("TMATMUL ") == 2 and fused.count("TSTORE") == 1


@pytest.mark.parametrize("kname", ["fused_linear", "optimized_attention"])
def test_profile_counts_of_a_dynamic_kernel_are_the_calls(kname):
    """FLOPs and bytes of a dynamic kernel's call are counted at the call's sizes (loops whose
    tiles depend on the loop variable walked), equal to the static kernel's for that shape."""
    fn = getattr(seed_kernels, kname)
    dims = {"x": [0]} if kname == "fused_linear" else {"Q": [2], "K": [2], "V": [2]}
    dynamic, static = pypto.jit(fn, dynamic=dims), pypto.jit(fn, dynamic=False)
    for s in (5, 131, 200):
        if kname == "fused_linear":
            args = (rand(s, 24), rand(24, 40), rand(40))
        else:
            args = tuple(rand(1, 2, s, 16) for _ in range(3))
        dynamic(*args)
        got = pypto.get_last_profile()
        static(*args)
        want = pypto.get_last_profile()
        assert want.counts_exact and got.counts_exact, s
        assert (got.flops, got.bytes) == (want.flops, want.bytes), s
    assert dynamic.cache_size == 1
    if kname == "fused_linear":
        assert got.flops >= 2 * 200 * 24 * 40 and got.bytes == 4 * (200 * 24 + 24 * 40 + 40 + 200 * 40)
