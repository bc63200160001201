"""Integer meta-parameters: an int argument the kernel needs as a compile-time value (a loop
step, a tile shape, a static_range bound) is specialised on its value (one compiled variant per
value, the value in the cache key), while an int used only as a run-time value stays a scalar
parameter (no recompile per value). Triton's tl.constexpr plays this role; here it is inferred."""
import numpy as np
import pytest

import pypto
from pypto_testutil import jit, poisoned, rand, rel_err


def tiled_matmul(A, B, C, BLOCK_M, BLOCK_N, BLOCK_K):
    # Triton's matmul tutorial, block sizes passed as arguments; ragged edges are clipped slices.
    M, K = A.shape
    N = B.shape[1]
    for m in range(0, M, BLOCK_M):
        for n in range(0, N, BLOCK_N):
            acc = pypto.zeros((BLOCK_M, BLOCK_N), dtype=C.dtype)
            for k in range(0, K, BLOCK_K):
                acc = acc + A[m:m + BLOCK_M, k:k + BLOCK_K] @ B[k:k + BLOCK_K, n:n + BLOCK_N]
            C[m:m + BLOCK_M, n:n + BLOCK_N] = acc


def test_triton_style_matmul_block_sizes_as_arguments(backend):
    kernel = jit(tiled_matmul, backend)
    A, B = rand(70, 45, dtype=np.float64), rand(45, 33, dtype=np.float64)  # ragged for every block
    ref = A @ B
    configs = [(32, 16, 8), (16, 32, 16)]
    for i, cfg in enumerate(configs):
        C = poisoned(70, 33, dtype=np.float64)
        kernel(A, B, C, *cfg)
        assert rel_err(C, ref) < 1e-12, cfg
        assert kernel.cache_size == i + 1  # another block configuration is another variant
    C = poisoned(70, 33, dtype=np.float64)
    kernel(A, B, C, *configs[0])  # a value seen before hits the cache
    assert rel_err(C, ref) < 1e-12
    info = kernel.cache_info()
    assert info.size == 2
    assert sorted(info.specialised) == ["BLOCK_K", "BLOCK_M", "BLOCK_N"]
    assert all("loop step" in why and "test_meta_params.py" in why for why in info.specialised.values())
    assert [tuple(v.values()) for v in info.variants] == configs


def test_runtime_int_does_not_recompile(backend):
    @pypto.jit(backend=str(backend))
    def shift_rows(x, out, scale, start):
        for i in range(start, x.shape[0]):  # a run-time loop bound and a run-time factor
            out[i, :] = x[i, :] * scale + start

    x = rand(9, 6, dtype=np.float64)
    for scale, start in [(3, 2), (-2, 5), (7, 0)]:
        out = poisoned(9, 6, dtype=np.float64)
        shift_rows(x, out, scale, start)
        assert rel_err(out[start:], x[start:] * scale + start) < 1e-12
        assert np.isnan(out[:start]).all()
    assert shift_rows.cache_size == 1
    info = shift_rows.cache_info()
    assert info.specialised == {} and info.variants == [{}]


def test_shape_and_static_range_bound_specialise_only_what_needs_it(backend):
    @pypto.jit(backend=str(backend))
    def window_sum(x, width, scale):
        acc = pypto.zeros((width, x.shape[1]), dtype=x.dtype)  # `width`: a static shape
        for k in pypto.static_range(x.shape[0] - width + 1):   # and a static_range bound
            acc = acc + x[k:k + width, :]
        return acc * scale                                     # `scale`: a run-time value

    x = rand(7, 5, dtype=np.float64)
    for width in (2, 3):
        for scale in (2, -3):
            ref = sum(x[k:k + width] for k in range(7 - width + 1)) * scale
            assert rel_err(window_sum(x, width, scale), ref) < 1e-12
    info = window_sum.cache_info()
    assert info.size == 2 and list(info.specialised) == ["width"]
    assert "compile time" in info.specialised["width"]
    assert [v["width"] for v in info.variants] == [2, 3]


def test_meta_parameter_errors_name_the_line(backend):
    kernel = jit(tiled_matmul, backend)
    A, B = rand(8, 8, dtype=np.float64), rand(8, 8, dtype=np.float64)
    with pytest.raises(pypto.PyptoError, match=r"test_meta_params.py:\d+: range\(\) arg 3 must not be zero"):
        kernel(A, B, poisoned(8, 8, dtype=np.float64), 4, 4, 0)
    with pytest.raises(pypto.PyptoError, match=r"test_meta_params.py:\d+: range\(\) bounds must be integers"):
        kernel(A, B, poisoned(8, 8, dtype=np.float64), 4.0, 4, 4)

    @pypto.jit(backend=str(backend))
    def step_from_loop(x, out, m):
        for j in range(1, m):  # a run-time trip count: j cannot be made a compile-time value
            for i in range(0, x.shape[0], j):
                out[i, :] = x[i, :]

    with pytest.raises(pypto.PyptoError, match=r"test_meta_params.py:\d+: .*loop step must be a compile-time "
                                               r"integer.*trip count is only known at run time"):
        step_from_loop(rand(8, 4), poisoned(8, 4), 3)
