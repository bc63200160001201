"""Kernels in the seed's style beyond the seed: tiled norms, an MLP, masked attention, column
reductions, flash-attention style online softmax with loop-carried running max and sum."""
import math

import numpy as np
import pytest
import torch

import pypto
from pypto_testutil import assert_close, jit, poisoned, rand


def layer_norm_rows(x, w, b, out):
    R, C = x.shape
    ROWS = 16
    for i in pypto.prange(0, R, ROWS):
        xi = x[i:i + ROWS, :]
        mu = xi.mean(-1, keepdim=True)
        xc = xi - mu
        var = (xc * xc).mean(-1, keepdim=True)
        out[i:i + ROWS, :] = xc * pypto.rsqrt(var + 1e-5) * w + b


def test_layer_norm_tiled(backend):
    x, w, b = rand(50, 37), rand(37), rand(37)
    out = poisoned(50, 37)
    jit(layer_norm_rows, backend)(x, w, b, out)
    ref = torch.nn.functional.layer_norm(torch.from_numpy(x).double(), (37,), torch.from_numpy(w).double(),
                                         torch.from_numpy(b).double(), 1e-5)
    assert_close(out, ref.numpy())


def rms_norm_rows(x, w, eps):
    out = pypto.empty_like(x)
    for i in range(0, x.shape[0], 8):
        xi = x[i:i + 8]
        out[i:i + 8] = xi * pypto.rsqrt((xi * xi).mean(-1, keepdim=True) + eps) * w
    return out


def test_rms_norm_tiled(backend):
    x, w = rand(29, 64), rand(64)
    out = jit(rms_norm_rows, backend)(x, w, 1e-6)
    x64 = x.astype(np.float64)
    assert_close(out, x64 / np.sqrt((x64 * x64).mean(-1, keepdims=True) + 1e-6) * w)


def mlp(x, w1, b1, w2, b2):
    h = pypto.gelu(x @ w1 + b1)
    return h @ w2 + b2


def test_two_layer_mlp_torch(backend):
    x, w1, b1 = torch.randn(20, 48), torch.randn(48, 96) * 0.2, torch.randn(96)
    w2, b2 = torch.randn(96, 24) * 0.2, torch.randn(24)
    y = jit(mlp, backend)(x, w1, b1, w2, b2)
    assert isinstance(y, torch.Tensor)
    d = [t.double() for t in (x, w1, b1, w2, b2)]
    ref = torch.nn.functional.gelu(d[0] @ d[1] + d[2]) @ d[3] + d[4]
    assert_close(y.numpy(), ref.numpy())


def masked_attention(Q, K, V, mask):
    scale = 1.0 / math.sqrt(Q.shape[-1])
    s = (Q @ K.transpose(-2, -1)) * scale
    s = pypto.where(mask, s, -1e9)
    return pypto.softmax(s, dim=-1) @ V


def test_causal_masked_attention(backend):
    B, H, S, D = 1, 2, 40, 16
    Q, K, V = rand(B, H, S, D), rand(B, H, S, D), rand(B, H, S, D)
    mask = np.tril(np.ones((S, S), np.bool_))
    out = jit(masked_attention, backend)(Q, K, V, mask)
    q, k, v = (torch.from_numpy(a).double() for a in (Q, K, V))
    s = (q @ k.transpose(-2, -1)) / math.sqrt(D)
    s = s.masked_fill(~torch.from_numpy(mask), float("-inf"))
    assert_close(out, (torch.softmax(s, -1) @ v).numpy())


def column_stats(x):
    N = x.shape[1]
    sums = pypto.empty((N,))
    for j in range(0, N, 32):
        sums[j:j + 32] = x[:, j:j + 32].sum(0)
    return sums, x.max(0), x.mean(0, keepdim=True)


def test_column_reductions(backend):
    x = rand(45, 70)
    s, mx, mean = jit(column_stats, backend)(x)
    x64 = x.astype(np.float64)
    assert_close(s, x64.sum(0))
    assert_close(mx, x64.max(0))
    assert_close(mean, x64.mean(0, keepdims=True))


def flash_attention(Q, K, V):
    S, D = Q.shape[-2], Q.shape[-1]
    BQ = min(32, S)
    BK = min(32, S)
    lead = Q.shape[:-2]
    out = pypto.empty_like(Q)
    scale = 1.0 / pypto.sqrt(D)
    for i in range(0, S, BQ):
        q = Q[..., i:i + BQ, :] * scale
        m = pypto.full(lead + (BQ, 1), -1e30)
        l = pypto.zeros(lead + (BQ, 1))  # noqa: E741
        acc = pypto.zeros(lead + (BQ, D))
        for j in range(0, S, BK):
            s = q @ K[..., j:j + BK, :].transpose(-2, -1)
            m_new = pypto.maximum(m, s.max(-1, keepdim=True))
            p = pypto.exp(s - m_new)
            alpha = pypto.exp(m - m_new)
            l = l * alpha + p.sum(-1, keepdim=True)  # noqa: E741
            acc = acc * alpha + p @ V[..., j:j + BK, :]
            m = m_new
        out[..., i:i + BQ, :] = acc / l
    return out


@pytest.mark.parametrize("shape", [(1, 2, 64, 16), (2, 1, 75, 8)], ids=["even", "ragged"])
def test_flash_attention_running_max(backend, shape):
    Q, K, V = rand(*shape), rand(*shape), rand(*shape)
    f = jit(flash_attention, backend)
    assert f.lower(Q, K, V).as_text("tensor").count("for %") == 2
    out = f(Q, K, V)
    q, k, v = (torch.from_numpy(a).double() for a in (Q, K, V))
    ref = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(shape[-1]), -1) @ v
    assert_close(out, ref.numpy())


def residual_block(x, w, gamma):
    h = pypto.rms_norm(x, x.shape[-1], gamma)
    return x + pypto.silu(h @ w)


def test_residual_block_pypto_tensors(backend):
    x, w, g = pypto.Tensor(rand(12, 32)), pypto.Tensor(rand(32, 32) * 0.1), pypto.Tensor(rand(32))
    out = jit(residual_block, backend)(x, w, g)
    assert isinstance(out, pypto.Tensor)
    xt, wt, gt = (torch.from_numpy(t.numpy()).double() for t in (x, w, g))
    h = xt / torch.sqrt((xt * xt).mean(-1, keepdim=True) + 1e-6) * gt
    assert_close(out.numpy(), (xt + torch.nn.functional.silu(h @ wt)).numpy())
