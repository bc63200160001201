"""More torch code inside kernels: einsum, norms, losses (forward and derived backward), lambda
kernels, torch.finfo(x.dtype), x.max(dim) with indices, multi-step views; each against torch in
float64 on random inputs."""
import pytest
import torch
import torch.nn.functional as F

import pypto
from pypto_testutil import assert_close, jit


def _close(out, ref, tol=1e-9):
    assert tuple(out.shape) == tuple(ref.shape), (out.shape, ref.shape)
    assert_close(out.detach().double().numpy(), ref.detach().double().numpy(), tol)


def einsums(a, b, c):
    return (torch.einsum("bhqd,bhkd->bhqk", a, b),
            torch.einsum("bhqk,bhkd->bqhd", torch.einsum("bhqd,bhkd->bhqk", a, b), b),
            torch.einsum("ij,jk", c[0, 0], c[0, 0].T),                 # implicit output
            torch.einsum("ij,jk,kl->il", c[0, 0], c[0, 0].T, c[0, 0]),  # three operands
            torch.einsum("...ij->...ji", a),                           # ellipsis
            torch.einsum("bhqd->d", a),                                # sums only
            torch.einsum("i,j->ij", c[0, 0, 0], c[0, 1, 0]),           # outer product
            torch.outer(c[0, 0, 0], c[1, 1, 1]),
            torch.baddbmm(c[1, :, :, :1], c[0], c[1].transpose(-1, -2), beta=0.5, alpha=2.0))


def test_einsum_outer_baddbmm(backend):
    torch.manual_seed(1)
    a, b, c = torch.randn(2, 3, 5, 4).double(), torch.randn(2, 3, 6, 4).double(), torch.randn(2, 3, 5, 4).double()
    for got, ref in zip(jit(einsums, backend)(a, b, c), einsums(a, b, c)):
        _close(got, ref)


def test_einsum_errors():
    k = pypto.jit(lambda x: torch.einsum("ii->i", x), backend="interp")
    with pytest.raises(pypto.PyptoError, match="diagonals"):
        k(torch.randn(3, 3))
    k = pypto.jit(lambda x: torch.einsum("ij,jk->ik", x, x), backend="interp")
    with pytest.raises(pypto.PyptoError, match="subscript 'j'"):
        k(torch.randn(3, 4))


def norms(x):
    return (torch.linalg.vector_norm(x, dim=-1), torch.norm(x, p=1, dim=0), x.norm(), F.normalize(x, dim=-1),
            torch.linalg.vector_norm(x, ord=float("inf"), dim=1, keepdim=True), torch.norm(x, p=3, dim=1),
            torch.linalg.vector_norm(x, ord=0))


def test_norms(backend):
    x = torch.randn(6, 9).double()
    for got, ref in zip(jit(norms, backend)(x), norms(x)):
        _close(got, ref)


def losses(x, y, t, w):
    p = torch.sigmoid(y)
    return (F.mse_loss(x, y), F.l1_loss(x, y, reduction="sum"), F.smooth_l1_loss(x, y, beta=0.5),
            F.huber_loss(x, y, delta=0.7, reduction="none"),
            F.cross_entropy(x, t), F.cross_entropy(x, t, weight=w, reduction="sum"),
            F.cross_entropy(x, t, label_smoothing=0.1), F.cross_entropy(x, F.softmax(y, -1)),
            F.cross_entropy(x.view(2, 4, 7).permute(0, 2, 1), t.view(2, 4)),
            F.nll_loss(F.log_softmax(x, -1), torch.where(t == 3, -100, t)),
            F.binary_cross_entropy_with_logits(x, p, pos_weight=w), F.binary_cross_entropy(torch.sigmoid(x), p),
            F.kl_div(F.log_softmax(x, -1), F.softmax(y, -1), reduction="batchmean"))


def test_losses_forward_and_backward(backend):
    torch.manual_seed(2)
    x, y = torch.randn(8, 7).double(), torch.randn(8, 7).double()
    t, w = torch.randint(0, 7, (8,)), torch.rand(7).double() + 0.5
    t[0] = 3  # at least one ignored target in the nll_loss case
    k = jit(losses, backend)
    for got, ref in zip(k(x, y, t, w), losses(x, y, t, w)):
        _close(got, ref)
    # the derived backward of the whole set against torch autograd
    xg, xr = x.clone().requires_grad_(), x.clone().requires_grad_()
    sum(v.sum() for v in k(xg, y, t, w)).backward()
    sum(v.sum() for v in losses(xr, y, t, w)).backward()
    _close(xg.grad, xr.grad)


def test_lambda_kernels():
    x = torch.randn(5, 6)
    double, triple = pypto.jit(lambda v: v * 2, backend="interp"), pypto.jit(lambda v: v * 3, backend="interp")
    _close(double(x), x * 2)
    _close(triple(x), x * 3)  # two lambdas on one line: each finds its own body
    k = pypto.jit(lambda v, w: (v + w).max(dim=-1), backend="interp")
    vals, idx = k(x, x)
    _close(vals, (2 * x).max(-1).values)
    assert torch.equal(idx, (2 * x).max(-1).indices)


def masked_min(x):
    return x.masked_fill(x > 0.5, torch.finfo(x.dtype).min), torch.full((2,), torch.iinfo(torch.int32).max)


def max_methods(x):
    v, i = x.max(-1)
    m = x.min(dim=0).values
    return v, i, m, x.max(axis=1, keepdims=True), x.amax(0)


def test_torch_semantics_of_methods(backend):
    x = torch.randn(6, 5).double()
    got, ref = jit(masked_min, backend)(x), masked_min(x)
    _close(got[0], ref[0])
    assert got[1].tolist() == [2**31 - 1] * 2
    got = jit(max_methods, backend)(x)
    ref = (x.max(-1).values, x.max(-1).indices, x.min(0).values, x.max(1, keepdim=True).values, x.amax(0))
    for g, r in zip(got, ref):
        assert tuple(g.shape) == tuple(r.shape)
        assert torch.equal(torch.as_tensor(g).double(), r.double())


def test_numpy_methods_keep_numpy_semantics(backend):
    import numpy as np
    x = np.random.default_rng(0).standard_normal((4, 6))
    out = jit(lambda v: v.max(1), backend)(x)  # NumPy arguments: values only, as ndarray.max
    assert_close(np.asarray(out), x.max(1))


def views(x):
    return x.view(2, 3, 4, 5), x.reshape(6, 20).view(3, 2, 4, 5).reshape(-1, 4), x.new_full((2, 3), 1.5) + \
        x.new_zeros(2, 3) + x.new_ones((2, 3))


def test_multi_step_views(backend):
    x = torch.randn(24, 5).double()
    for got, ref in zip(jit(views, backend)(x), views(x)):
        _close(got, ref)
