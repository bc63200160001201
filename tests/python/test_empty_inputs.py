"""Empty tensors (a dimension of extent 0): a kernel runs on them as torch does. An empty
dimension is traced as a dimension symbol (program shapes are >= 1), so loops run zero times and
reductions over it give their start (a sum 0, a mean NaN); a kernel whose operations have no
dynamic form runs torch code as written on the empty tensors instead; the stride checks accept
empty arguments. Against torch, on both backends."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

import pypto

CASES = {
    "softmax_plus_column_sum": lambda x: torch.softmax(x, -1) * 2 + x.sum(0),
    "sum_and_mean": lambda x: (x.sum(0), x.mean(0), x.sum(1)),
    "matmul": lambda x: x @ torch.ones(4, 2),
    "matmul_empty_k": lambda x: x.T @ x,
    "layer_norm_gelu": lambda x: F.gelu(F.layer_norm(x, (4,))),
    "cat": lambda x: torch.cat([x, x * 2], 0),
    "conv_batch": lambda x: F.conv2d(x.reshape(-1, 1, 2, 2), torch.ones(3, 1, 3, 3), padding=1),
    "embedding": lambda x: F.embedding(torch.zeros(2, 0, dtype=torch.long), x.new_ones(5, 3)),
}


@pytest.mark.parametrize("backend", ["interp", "cpu"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_empty_like_torch(name, backend):
    f = CASES[name]
    k = pypto.jit(f, backend=backend)
    x = torch.zeros(0, 4)
    got, want = k(x), f(x)
    got, want = (got, want) if isinstance(want, tuple) else ((got,), (want,))
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        assert torch.equal(torch.nan_to_num(g, 7.0), torch.nan_to_num(w, 7.0))
    if name != "embedding":  # the same kernel on data afterwards
        y = torch.randn(3, 4)
        for g, w in zip(*((k(y), f(y)) if isinstance(want, tuple) else ((k(y),), (f(y),)))):
            assert torch.allclose(g, w, atol=1e-6)


def test_seed_tile_loops_on_empty_numpy():
    @pypto.jit
    def matrix_multiply(A, B, C):
        M, K = A.shape
        K, N = B.shape
        for i in range(0, M, 64):
            for j in range(0, N, 64):
                acc = pypto.zeros((64, 64))
                for k in range(0, K, 64):
                    acc += A[i:i + 64, k:k + 64] @ B[k:k + 64, j:j + 64]
                C[i:i + 64, j:j + 64] = acc

    C = np.zeros((0, 5), np.float32)
    matrix_multiply(np.zeros((0, 8), np.float32), np.ones((8, 5), np.float32), C)
    C = np.full((4, 5), np.nan, np.float32)  # K = 0: every product is an empty sum
    matrix_multiply(np.zeros((4, 0), np.float32), np.ones((0, 5), np.float32), C)
    assert (C == 0).all()


def test_gradients_of_an_empty_batch():
    x = torch.zeros(0, 3, requires_grad=True)
    w = torch.randn(2, 3, requires_grad=True)
    pypto.jit(lambda x, w: F.linear(x, w).relu().sum())(x, w).backward()
    assert torch.equal(w.grad, torch.zeros(2, 3)) and x.grad.shape == (0, 3)


def test_what_torch_refuses_on_empty_is_an_error():
    with pytest.raises(pypto.PyptoError, match="non-zero size|empty"):
        pypto.jit(lambda x: x.max(0).values)(torch.zeros(0, 3))
