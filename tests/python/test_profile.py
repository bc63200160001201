"""pypto.get_last_profile, pypto.tile_curve and @pypto.jit(alignment=N)."""
import threading

import numpy as np
import pytest
import torch

import pypto
from pypto_testutil import rand, rel_err, requires_compiler


def matmul(a, b):
    return pypto.matmul(a, b)


def tiled_matmul(A, B, C):
    M, K = A.shape
    K, N = B.shape
    for i in range(0, M, 32):
        for j in range(0, N, 16):
            acc = pypto.zeros((32, 16))
            for k in range(0, K, 8):
                acc += A[i:i + 32, k:k + 8] @ B[k:k + 8, j:j + 16]
            C[i:i + 32, j:j + 16] = acc


def row_sums(x):
    return pypto.sum(pypto.exp(x), dim=1)


@pytest.mark.parametrize("backend", ["interp", pytest.param("cpu", marks=requires_compiler)])
def test_profile_of_a_matmul(backend):
    M, K, N = 48, 40, 24
    k = pypto.jit(matmul, backend=backend)
    a, b = rand(M, K), rand(K, N)
    out = k(a, b)
    first = pypto.get_last_profile()
    assert first.built_by_this_call and first.build_ms > 0
    assert rel_err(out, a.astype(np.float64) @ b) < 1e-5
    k(a, b)
    p = pypto.get_last_profile()
    assert p.flops == 2 * M * N * K and p.counts_exact
    assert p.bytes == 4 * (M * K + K * N + M * N)
    assert 0 < p.run_ms <= p.total_ms
    assert p.gflops == pytest.approx(p.flops / (p.run_ms * 1e6))
    assert p.gbytes_per_s == pytest.approx(p.bytes / (p.run_ms * 1e6))
    assert not p.built_by_this_call and p.threads >= 1
    assert p.compile_ms >= 0 and (backend == "cpu" or p.compile_ms == 0)
    text = str(p)
    assert "GFLOP/s" in text and f"{2 * M * N * K:,}" in text


def test_profile_counts_loops_and_reductions():
    A, B, C = rand(64, 24), rand(24, 32), np.full((64, 32), np.nan, np.float32)
    pypto.jit(tiled_matmul, backend="interp")(A, B, C)
    assert pypto.get_last_profile().flops == 2 * 64 * 32 * 24  # trip counts times each tile's work
    assert rel_err(C, A.astype(np.float64) @ B) < 1e-5
    pypto.jit(row_sums, backend="interp")(rand(20, 30))
    assert pypto.get_last_profile().flops == 20 * 30 + 20 * 30  # exp per element + sum per element read


def test_profile_is_per_thread():
    pypto.jit(matmul, backend="interp")(rand(4, 4), rand(4, 4))
    seen = []
    t = threading.Thread(target=lambda: seen.append(pypto.get_last_profile()))
    t.start()
    t.join()
    assert seen == [None] and pypto.get_last_profile() is not None


def test_tile_curve_times_each_config_and_draws(tmp_path):
    k = pypto.jit(matmul, backend="interp")
    a, b = rand(64, 64), rand(64, 64)
    configs = [{"m": 16, "n": 16, "k": 16}, {"m": 32, "n": 32, "k": 32}, {"m": 64, "n": 64, "k": 64}]
    png = tmp_path / "curve.png"
    curve = pypto.tile_curve(k, (a, b), png=str(png), tiles=configs, repeats=2)
    assert [p.config for p in curve] == configs
    assert all(p.ms > 0 and p.gflops == pytest.approx(2 * 64 ** 3 / (p.ms * 1e6)) for p in curve)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(pypto.profile.default_tile_configs((a, b))) >= 3
    with pytest.raises(pypto.PyptoError, match="jit kernel"):
        pypto.tile_curve(matmul, (a, b))


def _misaligned(shape, offset_bytes):
    raw = np.zeros(int(np.prod(shape)) + 64, np.float32)
    off = next(i for i in range(16) if raw[i:].ctypes.data % 64 == offset_bytes)
    x = raw[off:off + int(np.prod(shape))].reshape(shape)
    x[...] = rand(*shape)
    return x


def test_alignment_option():
    x, b = _misaligned((8, 16), 4), rand(16, 4)
    strict = pypto.jit(matmul, backend="interp", alignment=64)
    with pytest.raises(pypto.PyptoError, match=r"argument 'a' is not aligned to 64 bytes \(address % 64 == 4\)"):
        strict(x, b)
    with pytest.raises(pypto.PyptoError, match="align"):
        strict(torch.from_numpy(x), torch.from_numpy(b))
    ref = x.astype(np.float64) @ b
    assert rel_err(pypto.jit(matmul, backend="interp")(x, b), ref) < 1e-5  # the default accepts it
    aligned = _misaligned((8, 16), 0)
    aligned[...] = x
    b64 = _misaligned((16, 4), 0)
    b64[...] = b
    assert rel_err(strict(aligned, b64), ref) < 1e-5
    for bad in (3, 0, -64, True, 64.0):
        with pytest.raises(pypto.PyptoError, match="power of two"):
            pypto.jit(matmul, alignment=bad)
    t = pypto.target()
    assert t["alignment"] >= t["vector_bytes"] and t["alignment"] & (t["alignment"] - 1) == 0
