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


# torch code that spells torch's parameter names (F.one_hot(t, num_classes=...),
# torch.gather(x, 1, index=i), x.transpose(dim0=..)): each must reach the same operation.
KEYWORD_CALLS = {
    "one_hot": lambda x, i, j, c: F.one_hot(c, num_classes=8).double(),
    "gather": lambda x, i, j, c: torch.gather(x, 1, index=i),
    "gather_input": lambda x, i, j, c: torch.gather(input=x, dim=1, index=i, sparse_grad=False),
    "gather_method": lambda x, i, j, c: x.gather(dim=1, index=i),
    "index_select": lambda x, i, j, c: torch.index_select(x, 2, index=j),
    "index_add": lambda x, i, j, c: torch.index_add(x, 2, j, x[:, :, :5], alpha=2.0),
    "scatter_scalar": lambda x, i, j, c: torch.scatter(x, 1, i, 1.5),
    "scatter_value": lambda x, i, j, c: x.scatter(1, i, value=2.0),
    "scatter_add": lambda x, i, j, c: torch.scatter_add(x, 1, index=i, src=x[:, :3]),
    "transpose": lambda x, i, j, c: x.transpose(dim0=0, dim1=2),
    "torch_transpose": lambda x, i, j, c: torch.transpose(x, dim0=0, dim1=2),
    "swapaxes": lambda x, i, j, c: torch.swapaxes(x, axis0=0, axis1=1),
    "permute": lambda x, i, j, c: x.permute(dims=(2, 0, 1)),
    "reshape": lambda x, i, j, c: torch.reshape(x, shape=(24, 8)),
    "view_tuple": lambda x, i, j, c: x.view((8, 24)),
    "clamp_min": lambda x, i, j, c: torch.clamp_min(x, min=0.1),
    "clamp_max": lambda x, i, j, c: torch.clamp_max(x, max=0.1),
    "remainder": lambda x, i, j, c: torch.remainder(x, other=0.7),
    "floor_divide": lambda x, i, j, c: torch.floor_divide(x, other=0.7),
    "split": lambda x, i, j, c: torch.split(x, split_size_or_sections=2, dim=1)[1],
    "split_method": lambda x, i, j, c: x.split(split_size=3, dim=1)[0],
    "outer": lambda x, i, j, c: torch.outer(x[0, 0], vec2=x[1, 1]),
    "repeat_interleave": lambda x, i, j, c: x.repeat_interleave(2, dim=0, output_size=8),
    "broadcast_to": lambda x, i, j, c: torch.broadcast_to(x[:, :1], size=(4, 6, 8)),
    "expand_as": lambda x, i, j, c: x[:1].expand_as(other=x),
}


@pytest.mark.parametrize("name", sorted(KEYWORD_CALLS))
def test_torch_keyword_names(name):
    torch.manual_seed(3)
    f = KEYWORD_CALLS[name]
    args = (torch.randn(4, 6, 8).double(), torch.randint(0, 6, (4, 3, 8)), torch.randint(0, 4, (5,)),
            torch.randint(0, 8, (7,)))
    _close(pypto.jit(f, backend="interp")(*args), f(*args))


def test_reshape_regroups_any_dims():
    # torch.gather's index of shape (4, 3, 16) is reshaped from a flat (192,); any regrouping of a
    # contiguous tensor's dims is a chain of merges and splits.
    torch.manual_seed(4)
    for a, b in [((192,), (4, 3, 16)), ((6, 4), (4, 6)), ((2, 3, 4, 5), (5, 4, 3, 2)),
                 ((12, 1, 10), (2, 1, 6, 5, 2)), ((1, 24, 1), (2, 3, 4)), ((8, 6, 4), (2, 4, 3, 2, 4))]:
        x = torch.randn(*a).double()
        _close(jit(lambda x, b=b: x.reshape(b) * 2.0, "cpu")(x), x.reshape(b) * 2.0)
    with pytest.raises(pypto.PyptoError, match=r"reshape from \(\?, 6, 4\)"):
        pypto.jit(lambda x: x.reshape(6, 8, 4), dynamic={"x": [0]}, backend="interp")(torch.randn(8, 6, 4))


def test_reshape_of_independent_splits_and_merges_is_one_copy():
    """A vision transformer's patches (split both image dims, permute, merge) and Swin's windows:
    each reshape whose dims regroup by independent splits and merges is one copy (TMOV) nest,
    values as torch's and gradients through them."""
    torch.manual_seed(5)

    def patches(x):
        return x.reshape(2, 3, 4, 8, 5, 8).permute(0, 2, 4, 1, 3, 5).reshape(2, 20, 192) * 2.0

    def windows(x):  # (B, H, W, C) -> (B * windows, ws * ws, C)
        return x.view(2, 3, 4, 2, 4, 6).permute(0, 1, 3, 2, 4, 5).reshape(-1, 16, 6) + 1.0

    def unit_dims(x):
        return x.reshape(1, 2, 1, 3, 8, 5, 8, 1) - 1.0

    for f, shape in ((patches, (2, 3, 32, 40)), (windows, (2, 12, 8, 6)), (unit_dims, (6, 320))):
        x = torch.randn(*shape, dtype=torch.float64)
        kern = jit(f, "cpu")
        _close(kern(x), f(x))
        text = kern.lower(x).as_text("tensor")
        assert text.count("TMOV") <= 2, text
        xg, xr = x.clone().requires_grad_(), x.clone().requires_grad_()
        cot = torch.randn(f(x).shape, dtype=torch.float64)
        (kern(xg) * cot).sum().backward()
        (f(xr) * cot).sum().backward()
        _close(xg.grad, xr.grad)


def test_sdpa_rows_hidden_by_the_mask_are_zero_not_nan():
    """torch's SDPA softmax is safe: a query row its mask hides entirely (left padding) attends
    to nothing and gets 0, and no NaN reaches the gradients; boolean and additive -inf masks."""
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 2, 5, 4, dtype=torch.float64, generator=g, requires_grad=True) for _ in range(3))
    keep = torch.ones(5, 5, dtype=torch.bool).tril()
    keep[:2] = False
    for mask in (keep, torch.zeros(5, 5, dtype=torch.float64).masked_fill(~keep, float("-inf"))):
        def f(q, k, v):
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        out, ref = pypto.jit(f, backend="interp")(q, k, v), f(q, k, v)
        assert not torch.isnan(ref).any() and float((out - ref).norm()) < 1e-14 * float(ref.norm())
        cot = torch.randn(out.shape, dtype=torch.float64, generator=g)
        for a, b in zip(torch.autograd.grad(out, (q, k, v), cot), torch.autograd.grad(ref, (q, k, v), cot)):
            assert float((a - b).norm()) < 1e-13 * float(b.norm())
