"""Random numbers inside kernels (frontend/random_ops.py): pypto.rand/randn are a pure function of
(seed, offset), bit for bit the reference below on the CPU and the interpreter, in any tiling;
their statistics are those of uniform/normal numbers; dropout (pypto.dropout, F.dropout, nn.Dropout
in training mode) draws a fresh mask per call, repeatable with torch.manual_seed, reused by its
backward, independent between two dropouts of one kernel."""
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import pypto
from pypto_testutil import requires_compiler

MASK = (1 << 64) - 1


def _mix(z):
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return z ^ (z >> 31)


def reference_rand(seed, offsets):
    """The documented generator in plain Python integers (SplitMix64's finaliser)."""
    key = _mix((seed & MASK) ^ 0x2545F4914F6CDD1D)
    return np.array([(_mix((key + (int(o) + 1) * 0x9E3779B97F4A7C15) & MASK) >> 40) * 2.0 ** -24
                     for o in offsets], dtype=np.float32)


def uniform_block(seed, offsets):
    return pypto.rand(seed, offsets)


@pytest.mark.parametrize("backend", ["cpu", "interp"])
def test_rand_is_the_documented_function_of_seed_and_offset(backend):
    if backend == "cpu":
        requires_compiler(lambda: None)
    k = pypto.jit(uniform_block, backend=backend)
    offsets = np.concatenate([np.arange(300), [2 ** 31 - 1, 2 ** 40, -5]]).astype(np.int64)
    for seed in (0, 12345, -7, 2 ** 62):
        got = np.asarray(k(seed, offsets))
        assert np.array_equal(got, reference_rand(seed, offsets)), seed
    # int32 offsets give the same numbers as the same int64 offsets
    assert np.array_equal(np.asarray(k(3, offsets[:300].astype(np.int32))), reference_rand(3, offsets[:300]))


def two_rows(seed, n):
    out = pypto.empty((2, n), pypto.float32)
    for r in pypto.prange(2):
        out[r, :] = pypto.rand(seed, pypto.arange(n) + r * n)
    return out


@requires_compiler
def test_the_numbers_do_not_depend_on_tiling_or_threads():
    whole = np.asarray(pypto.jit(uniform_block)(9, np.arange(2 * 777, dtype=np.int64)))
    for opts in ({}, {"tiles": {"rows": 8, "cols": 16}}, {"parallel": False}):
        rows = np.asarray(pypto.jit(two_rows, **opts)(9, 777))
        assert np.array_equal(rows.reshape(-1), whole), opts


@requires_compiler
def test_uniform_and_normal_statistics():
    n = 1 << 20
    u = np.asarray(pypto.jit(uniform_block)(2024, np.arange(n, dtype=np.int64)), dtype=np.float64)
    assert u.min() >= 0.0 and u.max() < 1.0
    counts = np.histogram(u, bins=64, range=(0, 1))[0]
    chi2 = ((counts - n / 64) ** 2 / (n / 64)).sum()
    assert chi2 < 130, chi2  # 63 degrees of freedom: p < 1e-6 beyond ~130
    assert abs(np.corrcoef(u[:-1], u[1:])[0, 1]) < 0.01  # neighbouring offsets uncorrelated
    z = np.asarray(pypto.jit(lambda s, o: pypto.randn(s, o))(5, np.arange(n, dtype=np.int64)), dtype=np.float64)
    assert abs(z.mean()) < 0.01 and abs(z.std() - 1) < 0.01
    assert abs((np.abs(z) < 1).mean() - 0.6827) < 0.005  # the normal's mass within one sigma


def two_dropouts(x):
    return F.dropout(x, 0.5, training=True), F.dropout(x, 0.5, training=True)


@requires_compiler
def test_torch_dropout_in_training_mode():
    x = torch.randn(128, 256)
    k = pypto.jit(lambda x: F.dropout(x, 0.25, training=True))
    y1, y2 = k(x), k(x)
    kept = y1 != 0
    assert abs(kept.float().mean().item() - 0.75) < 0.01
    assert torch.allclose(y1[kept], x[kept] / 0.75)
    assert not torch.equal(y1, y2)  # a fresh mask at every call
    fresh = pypto.jit(lambda x: F.dropout(x, 0.25, training=True))
    torch.manual_seed(1)
    a = fresh(x)  # the first call (it traces) draws as many numbers as later calls
    torch.manual_seed(1)
    assert torch.equal(a, fresh(x))  # ... from torch's generator
    torch.manual_seed(1)
    assert torch.equal(a, k(x))  # another kernel with the same code and seed: the same mask
    a, b = pypto.jit(two_dropouts)(x)
    assert abs(((a != 0) & (b != 0)).float().mean().item() - 0.25) < 0.01  # independent masks
    assert torch.equal(pypto.jit(lambda x: F.dropout(x, 0.5, training=False))(x), x)
    z = x.clone()
    z[:, 0] = float("nan")  # kept or dropped, NaN stays NaN: torch multiplies by the mask
    assert torch.isnan(k(z)[:, 0]).all()


@requires_compiler
def test_channel_and_alpha_dropouts_in_training_mode():
    x = torch.randn(16, 64, 5, 6) + 3.0  # no element 0 (0 marks a dropped one)
    y = pypto.jit(lambda x: F.dropout2d(x, 0.3, training=True))(x)
    kept = (y != 0).flatten(2)
    assert torch.equal(kept.all(-1), kept.any(-1))  # whole feature maps kept or dropped
    assert abs(kept[..., 0].float().mean().item() - 0.7) < 0.05
    assert torch.allclose(y[y != 0], x[y != 0] / 0.7)
    y1 = pypto.jit(lambda x: F.dropout1d(x, 0.5, training=True))(x[0, :, 0])  # unbatched (C, L): per channel
    k1 = (y1 != 0)
    assert torch.equal(k1.all(-1), k1.any(-1)) and 0 < k1[:, 0].sum() < 64
    y3 = pypto.jit(lambda x: F.dropout3d(x, 0.5, training=True))(x[None])
    k3 = (y3 != 0).flatten(2)
    assert torch.equal(k3.all(-1), k3.any(-1))
    # alpha dropout: kept elements a x + b, dropped ones SELU's saturation after the correction,
    # so that a standard normal input keeps mean 0 and variance 1 (torch's constants).
    p, s = 0.2, 1.7580993408473766
    a = 1.0 / math.sqrt((s * s * p + 1) * (1 - p))
    z = torch.randn(256, 512, dtype=torch.float64)
    y = pypto.jit(lambda x: F.alpha_dropout(x, p, training=True))(z)
    dropped = (y - s * a * (p - 1)).abs() < 1e-12
    assert abs(dropped.double().mean().item() - p) < 0.01
    assert torch.allclose(y[~dropped], a * z[~dropped] + s * a * p)
    assert abs(y.mean().item()) < 0.02 and abs(y.var().item() - 1.0) < 0.03
    yf = pypto.jit(lambda x: F.feature_alpha_dropout(x, p, training=True))(z.reshape(16, 32, 256))
    df = (yf - s * a * (p - 1)).abs() < 1e-12
    assert torch.equal(df.all(-1), df.any(-1))
    # Not training (the alpha forms' default), and p = 0: the input itself.
    for f in (lambda x: F.alpha_dropout(x, 0.5), lambda x: F.feature_alpha_dropout(x, 0.5),
              lambda x: F.dropout2d(x, 0.5, training=False), lambda x: F.dropout2d(x, 0.0)):
        assert torch.equal(pypto.jit(f)(x), x)
    with pytest.raises(pypto.PyptoError, match=r"test_random.py:\d+.*dropout3d: expects an input of 4 or 5 dims"):
        pypto.jit(lambda x: F.dropout3d(x, 0.5, training=True))(x[0])
    with pytest.raises(pypto.PyptoError, match=r"alpha_dropout: p must be in \[0, 1\]"):
        pypto.jit(lambda x: F.alpha_dropout(x, 1.5, training=True))(x)


@requires_compiler
def test_dropout_backward_reuses_the_forward_mask():
    x = torch.randn(64, 96, requires_grad=True)
    k = pypto.jit(lambda x: F.dropout(x, 0.4, training=True) * 3.0)
    y = k(x)
    y.backward(torch.ones_like(y))
    kept = y != 0
    assert torch.equal(x.grad != 0, kept)
    assert torch.allclose(x.grad[kept], torch.full_like(x.grad[kept], 3.0 / 0.6))


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(32, 32)
        self.drop = torch.nn.Dropout(0.5)

    def forward(self, x):
        return self.drop(torch.relu(self.fc(x)))


@requires_compiler
def test_nn_dropout_module_follows_train_and_eval():
    torch.manual_seed(0)
    net, x = Net(), torch.randn(16, 32)
    k = pypto.jit(net)
    net.eval()
    with torch.no_grad():
        assert torch.allclose(k(x), net(x), atol=1e-6)
    net.train()
    with torch.no_grad():
        y = k(x)
        ref = torch.relu(net.fc(x))
    on = ref > 0
    dropped = (y == 0) & on
    assert 0.35 < dropped.float().sum().item() / on.float().sum().item() < 0.65
    assert torch.allclose(y[~dropped & on], ref[~dropped & on] * 2, atol=1e-5)


def test_random_errors_name_the_problem():
    with pytest.raises(pypto.PyptoError, match="offsets must be an integer tensor"):
        pypto.jit(lambda o: pypto.rand(1, o), backend="interp")(np.zeros(4, np.float32))
    with pytest.raises(pypto.PyptoError, match="seed must be an integer"):
        pypto.jit(lambda o: pypto.rand(1.5, o), backend="interp")(np.zeros(4, np.int64))
    with pytest.raises(pypto.PyptoError, match=r"p must be in \[0, 1\]"):
        pypto.jit(lambda x: pypto.dropout(x, 1.5), backend="interp")(np.ones(4, np.float32))
    with pytest.raises(pypto.PyptoError, match="generator"):
        pypto.jit(lambda x: torch.rand_like(x, generator=torch.Generator()), backend="interp")(torch.ones(4))


def test_eager_random_ops_draw_a_fresh_seed_per_call():
    x = np.ones((64, 64), np.float32)
    a, b = np.asarray(pypto.dropout(x, 0.5)), np.asarray(pypto.dropout(x, 0.5))
    assert not np.array_equal(a, b) and set(np.unique(a)) == {0.0, 2.0}
    assert np.array_equal(np.asarray(pypto.rand(4, np.arange(8))), reference_rand(4, range(8)))
    t = torch.ones(32, 32)
    torch.manual_seed(3)
    first = pypto.rand_like(t)
    torch.manual_seed(3)
    assert torch.equal(first, pypto.rand_like(t))  # torch tensors: torch's generator
    assert pypto.rand_like(np.zeros((3, 3))).dtype == np.float64


def test_sdpa_dropout_scales_the_kept_weights():
    """F.scaled_dot_product_attention(dropout_p=...) drops attention weights as torch's: with v of
    ones each output is the sum of the kept weights / (1 - p), 1 on average, not 1 everywhere;
    repeatable with torch.manual_seed; dropout_p=0 is the plain attention."""
    g = torch.Generator().manual_seed(6)
    q, k = (torch.randn(1, 2, 64, 8, generator=g) for _ in range(2))
    v = torch.ones(1, 2, 64, 8)
    drop = pypto.jit(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, dropout_p=0.25))
    torch.manual_seed(3)
    out = drop(q, k, v)
    assert abs(float(out.mean()) - 1.0) < 0.06 and float(out.std()) > 0.05
    torch.manual_seed(3)
    assert torch.equal(drop(q, k, v), out)
    plain = pypto.jit(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, dropout_p=0.0))
    v = torch.randn(1, 2, 64, 8, generator=g)
    ref = F.scaled_dot_product_attention(q, k, v)
    assert float((plain(q, k, v) - ref).norm() / ref.norm()) < 1e-5
