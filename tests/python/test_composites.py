"""Composite ops (softmax, log_softmax, layer_norm, rms_norm, conv2d, concat, clamp) stay single
ops in the tensor-level IR until lower_composites expands them; their types follow the one
promotion table (f64 stays f64) and integer floor division, modulo and powers are exact."""
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import pypto
from pypto_testutil import assert_close, backend_params, f64, jit, rand

COMPOSITES = ("SOFTMAX", "LOG_SOFTMAX", "LAYER_NORM", "RMS_NORM", "CONV2D", "CONCAT", "CLAMP")


@pytest.fixture(params=backend_params())
def backend(request):
    return request.param


def composites(x, w, k):
    a = pypto.softmax(x, dim=0) + pypto.log_softmax(x)
    b = pypto.layer_norm(x, (x.shape[-1],), w, None) + pypto.rms_norm(x, (x.shape[-1],), w)
    c = pypto.concat([pypto.clamp(x, -0.5, 0.5), x], dim=1)
    return a, b, c, pypto.conv2d(x[None, None], k, padding=1)


def test_composites_are_ops_until_lowered(backend):
    x, w, k = rand(9, 20), rand(20), rand(2, 1, 3, 3)
    kernel = jit(composites, backend)
    lowered = kernel.lower(x, w, k)
    tensor, tile = lowered.as_text("tensor"), lowered.as_text("tile")
    for name in COMPOSITES:
        assert f"  {name} " in tensor, name
        assert f" {name} " not in tile, name
    a, b, c, d = kernel(x, w, k)
    tx, tw, tk = (torch.from_numpy(v).double() for v in f64(x, w, k))
    assert_close(a, (torch.softmax(tx, 0) + torch.log_softmax(tx, -1)).numpy())
    ref_b = F.layer_norm(tx, (20,), tw, None, 1e-5) + tx * torch.rsqrt((tx * tx).mean(-1, keepdim=True) + 1e-6) * tw
    assert_close(b, ref_b.numpy())
    assert_close(c, torch.cat([tx.clamp(-0.5, 0.5), tx], 1).numpy())
    assert_close(d, F.conv2d(tx[None, None], tk, padding=1).numpy())


def test_f64_composites_stay_f64(backend):
    x, k = rand(1, 2, 7, 6, dtype=np.float64), rand(3, 2, 3, 3, dtype=np.float64)

    def kernel(x, k):
        return pypto.conv2d(x, k, padding=1), pypto.softmax(x)

    conv, soft = jit(kernel, backend)(x, k)
    assert conv.dtype == np.float64 and soft.dtype == np.float64
    tx, tk = torch.from_numpy(x), torch.from_numpy(k)
    assert_close(conv, F.conv2d(tx, tk, padding=1).numpy(), tol=1e-12)
    assert_close(soft, torch.softmax(tx, -1).numpy(), tol=1e-12)


def test_integer_division_and_powers_are_exact(backend):
    rng = np.random.default_rng(5)
    a = rng.integers(-(2 ** 62), 2 ** 62, size=(6, 9), dtype=np.int64)
    b = rng.integers(1, 2 ** 40, size=(6, 9), dtype=np.int64) * rng.choice([-1, 1], size=(6, 9))
    s = rng.integers(-3000, 3000, size=(6, 9), dtype=np.int64)

    def kernel(a, b, s):
        return a // b, a % b, s ** 3, s ** 2

    q, r, p3, p2 = jit(kernel, backend)(a, b, s)
    assert q.dtype == np.int64 and p3.dtype == np.int64 and p2.dtype == np.int64
    np.testing.assert_array_equal(q, a // b)
    np.testing.assert_array_equal(r, a % b)
    np.testing.assert_array_equal(p3, s ** 3)
    np.testing.assert_array_equal(p2, s ** 2)


def test_float_powers_keep_their_edge_values(backend):
    x = np.array([[-0.0, 0.0, 4.0, -np.inf, np.inf, 2.5]], dtype=np.float32)

    def kernel(x):
        return x ** 0.5, x ** 2, x ** -1, x ** 1

    root, sq, inv, same = jit(kernel, backend)(x)
    with np.errstate(divide="ignore", invalid="ignore"):
        # C's pow (docs/isa.md): +0 at -0 and +inf at -inf, where a square root gives -0 and NaN
        np.testing.assert_array_equal(root, np.array([[math.pow(v, 0.5) for v in x[0]]], dtype=np.float32))
        np.testing.assert_array_equal(sq, x * x)
        np.testing.assert_array_equal(inv, np.float32(1) / x)
    np.testing.assert_array_equal(same, x)
