"""Accuracy of layer_norm on rows whose mean is large against their spread: a row of equal values
normalises to exactly 0 (torch: 0), and a row far from 0 keeps the precision of its spread. A
mean of x itself rounds at x's magnitude, and the normalisation multiplies that error by
1/sqrt(var + eps) (up to 316 at eps 1e-5): rows of 3.3 gave |y| ~ 1e-3 and rows of -1234.567
gave 0.15. lower_composites.cpp `centred` shifts each row by its first element first; the fused
CPU call (rows.hpp) computes the same sequence bit for bit (tests/cpp/test_cpu_rows.cpp). Forward
and backward; both backends, with whole rows in a tile (the CPU's fused call) and with small
column tiles (the instructions one by one)."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

import pypto
from pypto_testutil import backend_params, jit, poisoned, rand, rel_err, requires_compiler

EPS = 1e-5


def layer_norm_into(x, w, b, y):
    y[:, :] = pypto.layer_norm(x, x.shape[-1], w, b, EPS)


def layer_norm_plain_into(x, y):
    y[:, :] = pypto.layer_norm(x, x.shape[-1], None, None, EPS)


def offset_rows(rows, n, seed):
    """Rows of constants (0.1, 3.3, -1234.567, 1e6) and rows of spread 0.01 to 1 around offsets of
    up to 1e4."""
    rng = np.random.default_rng(seed)
    x = np.empty((rows, n), np.float32)
    consts = [0.1, 3.3, -1234.567, 1e6]
    for r in range(rows):
        if r < len(consts):
            x[r] = consts[r]
        else:
            off = rng.choice([-1e4, -300.0, 77.7, 2048.5, 1e4])
            x[r] = off + rng.standard_normal(n) * rng.choice([0.01, 0.1, 1.0])
    return x


def ref_layer_norm(x, w=None, b=None):
    t = [None if a is None else torch.from_numpy(np.asarray(a, np.float64)) for a in (x, w, b)]
    return F.layer_norm(t[0], (x.shape[-1],), t[1], t[2], EPS).numpy()


@pytest.mark.parametrize("backend", backend_params(tiled=True))
@pytest.mark.parametrize("n", [4096, 999])
def test_constant_rows_normalise_to_zero(backend, n):
    x = np.stack([np.full(n, v, np.float32) for v in (0.1, 3.3, -1234.567, 1e6, -7.0e-3)])
    y = poisoned(*x.shape)
    kernel = jit(layer_norm_plain_into, backend)
    if backend == "cpu" and not backend.tiles:
        assert "pto::fused::layer_norm_rows<" in kernel.lower(x, y).as_text("source")
    kernel(x, y)
    assert np.abs(np.asarray(y)).max() <= 1e-6, np.abs(np.asarray(y)).max(axis=1)
    w, b = rand(n), rand(n)
    y = poisoned(*x.shape)
    jit(layer_norm_into, backend)(x, w, b, y)
    np.testing.assert_allclose(np.asarray(y), np.broadcast_to(b, x.shape), rtol=0, atol=1e-6)


@pytest.mark.parametrize("backend", backend_params(tiled=True))
def test_rows_with_a_large_offset_match_float64(backend):
    x = offset_rows(24, 1536, 7)
    w, b = rand(1536), rand(1536)
    for fn, args, ref in ((layer_norm_into, (x, w, b), ref_layer_norm(x, w, b)),
                          (layer_norm_plain_into, (x,), ref_layer_norm(x))):
        y = poisoned(*x.shape)
        jit(fn, backend)(*args, y)
        assert rel_err(y, ref) < 1e-5, fn.__name__
        # row by row: a row of spread 0.01 at 1e4 is as accurate as the others
        per_row = np.linalg.norm(np.asarray(y, np.float64) - ref, axis=1) / np.linalg.norm(ref, axis=1).clip(1)
        assert per_row.max() < 1e-4, (fn.__name__, per_row.argmax(), per_row.max())


@requires_compiler
def test_backward_of_offset_and_constant_rows():
    x = offset_rows(20, 256, 3)
    w, b = rand(256), rand(256)
    fn = pypto.jit(lambda x, w, b: pypto.layer_norm(x, x.shape[-1], w, b, EPS), backend="cpu")
    _, pullback = pypto.vjp(fn, x, w, b)
    cot = rand(20, 256)
    got = pullback(cot)
    tx, tw, tb = (torch.from_numpy(a).double().requires_grad_() for a in (x, w, b))
    F.layer_norm(tx, (256,), tw, tb, EPS).backward(torch.from_numpy(cot).double())
    for name, g, want in zip("xwb", got, (tx.grad, tw.grad, tb.grad)):
        assert rel_err(g, want.numpy()) < 1e-4, name


@requires_compiler
def test_dynamic_rows_stay_one_fused_nest():
    """The shift is a view of x that keeps a dynamic row count as x's own extent: the norm and its
    bias add stay one row nest (no global temporary, one fused call) and match float64."""
    kernel = pypto.jit(layer_norm_into, backend="cpu", dynamic={"x": [0], "y": [0]})
    w, b = rand(300), rand(300)
    x = offset_rows(37, 300, 5)
    tile = kernel.lower(x, w, b, poisoned(37, 300)).as_text("tile")
    assert not [ln for ln in tile.splitlines() if "alloc" in ln and ln.rstrip().endswith(" gm")], tile
    assert "pto::fused::layer_norm_rows<" in kernel.lower(x, w, b, poisoned(37, 300)).as_text("source")
    y = poisoned(37, 300)
    kernel(x, w, b, y)
    assert rel_err(y, ref_layer_norm(x, w, b)) < 1e-5


@pytest.mark.parametrize("backend", backend_params())
def test_float64_norms_keep_all_of_eps(backend):
    """A float64 norm adds eps in float64: eps = 1e-5 rounded to float32 (as the lowering once
    did) put 1e-13 relative error on GPT-2's layer norms; forward and backward."""
    g = torch.Generator().manual_seed(4)
    x = torch.randn(16, 32, generator=g, dtype=torch.float64, requires_grad=True)
    for f in (lambda a: F.layer_norm(a, (32,), eps=1e-5), lambda a: F.rms_norm(a, (32,), eps=1e-5)):
        got, want = jit(f, backend)(x), f(x)
        assert rel_err(got.detach().numpy(), want.detach().numpy()) < 1e-15
        cot = torch.randn(16, 32, generator=g, dtype=torch.float64)
        (ga,), (gw,) = torch.autograd.grad(got, [x], cot), torch.autograd.grad(want, [x], cot)
        assert rel_err(ga.numpy(), gw.numpy()) < 1e-14
