"""Derived gradients through indexing by tensors (embedding lookups, torch.gather / scatter /
scatter_add / index_add, x[idx]) and through detach(), against torch autograd in float64 on both backends."""
import pytest
import torch
import torch.nn.functional as F

import pypto

from pypto_testutil import assert_close, jit


def indexed(W, ids, x, idx, src):
    e = F.embedding(ids % 50, W)                        # rows of W: gradient scatter-adds back
    g = torch.gather(x, 1, idx)                         # repeated indices accumulate
    sc = x.scatter(1, idx[:, :3], src)                  # overwritten entries of x get no gradient
    sa = x.scatter_add(1, idx, src.repeat(1, 3)[:, :8])
    t = W[ids[0]]                                       # negative ids count from the end
    ia = x.index_add(0, torch.tensor([1, 1, 3]), src[:3, :1].expand(3, 8))
    return ((e.sum(-1) ** 2).sum() + (g * g).sum() + (sc ** 3).sum() + (sa * sa).sum() + t.pow(2).sum()
            + (ia ** 2).sum())


def test_gradients_through_gathers_and_scatters(backend):
    torch.manual_seed(0)
    W, x, src = torch.randn(50, 8).double(), torch.randn(4, 8).double(), torch.randn(4, 3).double()
    ids, idx = torch.randint(-50, 50, (6, 5)), torch.randint(0, 8, (4, 8))
    k = jit(indexed, backend)
    ours = [t.clone().requires_grad_() for t in (W, x, src)]
    ref = [t.clone().requires_grad_() for t in (W, x, src)]
    loss = k(ours[0], ids, ours[1], idx, ours[2])
    loss.backward()
    want = indexed(ref[0], ids, ref[1], idx, ref[2])
    want.backward()
    assert_close(loss.detach().numpy(), want.detach().numpy(), 1e-12)
    for a, b in zip(ours, ref):
        assert_close(a.grad.numpy(), b.grad.numpy(), 1e-12)


def test_embedding_training_step_matches_torch(backend):
    torch.manual_seed(1)
    emb, head = torch.nn.Embedding(30, 6).double(), torch.nn.Linear(6, 4).double()
    ids, target = torch.randint(0, 30, (5, 7)), torch.randint(0, 4, (5, 7))

    def loss_fn(ids, target, W, w, b):
        h = F.embedding(ids, W)
        return F.cross_entropy(F.linear(h, w, b).reshape(-1, 4), target.reshape(-1))

    k = jit(loss_fn, backend)
    ps = [emb.weight, head.weight, head.bias]
    ours = [p.detach().clone().requires_grad_() for p in ps]
    k(ids, target, *ours).backward()
    loss_fn(ids, target, *ps).backward()
    for a, b in zip(ours, ps):
        assert_close(a.grad.numpy(), b.grad.numpy(), 1e-10)


def padded_lookup(ids, W):
    a = F.embedding(ids, W, padding_idx=2)
    b = F.embedding(ids.flip(0), W, -7)  # counts from the end: row 2 too
    return (a * a).sum() + (b ** 3).sum()


def test_embedding_padding_row_gets_no_gradient(backend):
    # torch looks the padding row up as any other row but never updates it
    torch.manual_seed(3)
    W = torch.randn(9, 5).double()
    ids = torch.tensor([[2, 0, 8], [2, 8, 5], [1, 2, 2]])
    ours, ref = W.clone().requires_grad_(), W.clone().requires_grad_()
    loss = jit(padded_lookup, backend)(ids, ours)
    loss.backward()
    want = padded_lookup(ids, ref)
    want.backward()
    assert_close(loss.detach().numpy(), want.detach().numpy(), 1e-12)
    assert_close(ours.grad.numpy(), ref.grad.numpy(), 1e-12)
    assert not ours.grad[2].any() and ours.grad[8].abs().sum() > 0


def test_embedding_padding_idx_out_of_range_is_an_error():
    with pytest.raises(pypto.PyptoError, match="padding_idx 9 is out of range for 9 embeddings"):
        pypto.jit(lambda ids, W: F.embedding(ids, W, padding_idx=9), backend="interp")(
            torch.tensor([1]), torch.randn(9, 5))


def stop_gradients(x, w):
    q = torch.floor(x * 4) / 4
    ste = x + (q - x).detach()                      # straight-through estimator: gradient 1
    centred = x - x.detach().mean(-1, keepdim=True)  # the mean is a constant
    return (ste * w).sum() + (centred ** 2).sum() + (w.detach() * x).sum()


def test_detach_stops_the_gradient(backend):
    torch.manual_seed(2)
    x, w = torch.randn(4, 6).double(), torch.randn(4, 6).double()
    ours = [t.clone().requires_grad_() for t in (x, w)]
    ref = [t.clone().requires_grad_() for t in (x, w)]
    jit(stop_gradients, backend)(*ours).backward()
    stop_gradients(*ref).backward()
    for a, b in zip(ours, ref):
        assert_close(a.grad.numpy(), b.grad.numpy(), 1e-12)
    assert_close(ours[0].grad.numpy(), (w + 2 * (x - x.mean(-1, keepdim=True)) + w).numpy(), 1e-12)


def test_flip_has_a_gradient(backend):
    # flip gathers with a reversed arange, which was built in place and could not be recomputed
    torch.manual_seed(4)
    x, w = torch.randn(4, 3).double().requires_grad_(), torch.randn(4, 3).double()
    jit(lambda x, w: (x.flip(0, 1) * w).sum(), backend)(x, w).backward()
    assert_close(x.grad.numpy(), w.flip(0, 1).numpy(), 1e-12)
