"""The torch functions of frontend/torch_scatter.py inside kernels against torch in float64 on
random inputs: index_copy / index_copy_ (in place, as a static KV cache's update, over dynamic
lengths), scatter_reduce ("sum" / "mean", include_self or not, integer mean), F.embedding_bag
(2-d and offsets, padding_idx, per-sample weights, empty bags), diag_embed and heaviside; their
gradients; and the errors (an index out of range when the kernel runs, unsupported modes)."""
import pytest
import torch
import torch.nn.functional as F

import pypto
from pypto_testutil import backend_params

G = torch.Generator().manual_seed(5)


def r(*s):
    return torch.randn(*s, generator=G, dtype=torch.float64)


def ri(lo, hi, *s):
    return torch.randint(lo, hi, s, generator=G)


X, IDX3, SRC3 = r(4, 6, 8), ri(0, 6, 4, 3, 8), r(4, 3, 8)
W = r(20, 8)
OFFSETS = torch.tensor([0, 3, 3, 7])  # bags of 3, 0, 4 and 3 indices
CASES = {
    "index_copy": (lambda x, s: x.index_copy(1, torch.tensor([1, 4]), s), (X, r(4, 2, 8))),
    "index_copy_last_dim": (lambda x, s: torch.index_copy(x, 2, torch.tensor([0, 7, 3]), s), (X, r(4, 6, 3))),
    "index_copy_0d": (lambda x, s: x.index_copy(1, torch.tensor(2), s), (X, r(4, 1, 8))),
    "scatter_reduce_sum": (lambda x, s: x.scatter_reduce(1, IDX3, s, "sum"), (X, SRC3)),
    "scatter_reduce_sum_excl": (lambda x, s: x.scatter_reduce(1, IDX3, s, "sum", include_self=False), (X, SRC3)),
    "scatter_reduce_mean": (lambda x, s: torch.scatter_reduce(x, 1, IDX3, s, "mean"), (X, SRC3)),
    "scatter_reduce_mean_excl": (lambda x, s: x.scatter_reduce(-1, IDX3.clamp(0, 5), s, "mean", include_self=False),
                                 (X, SRC3)),
    "scatter_reduce_int_mean": (lambda x, s: x.scatter_reduce(1, IDX3, s, "mean"), (ri(-50, 50, 4, 6, 8), ri(-50, 50, 4, 3, 8))),
    "bag_sum": (lambda i, w: F.embedding_bag(i, w, mode="sum"), (ri(0, 20, 5, 3), W)),
    "bag_mean": (lambda i, w: F.embedding_bag(i, w), (ri(0, 20, 5, 3), W)),
    "bag_max": (lambda i, w: F.embedding_bag(i, w, mode="max"), (ri(0, 20, 5, 3), W)),
    "bag_max_padding": (lambda i, w: F.embedding_bag(i, w, mode="max", padding_idx=2),
                        (torch.tensor([[2, 2, 2], [1, 2, 3], [4, 5, 2]]), W)),
    "bag_mean_padding": (lambda i, w: F.embedding_bag(i, w, padding_idx=2), (torch.tensor([[2, 2, 2], [1, 2, 3]]), W)),
    "bag_offsets_sum": (lambda i, w: F.embedding_bag(i, w, OFFSETS, mode="sum"), (ri(0, 20, 10), W)),
    "bag_offsets_mean": (lambda i, w: F.embedding_bag(i, w, OFFSETS), (ri(0, 20, 10), W)),
    "bag_offsets_padding": (lambda i, w: F.embedding_bag(i, w, OFFSETS, padding_idx=0), (ri(0, 3, 10), W)),
    "bag_include_last": (lambda i, w: F.embedding_bag(i, w, torch.tensor([0, 3, 3, 7, 10]), include_last_offset=True),
                         (ri(0, 20, 10), W)),
    "bag_weights": (lambda i, w, p: F.embedding_bag(i, w, torch.tensor([0, 4]), mode="sum", per_sample_weights=p),
                    (ri(0, 20, 10), W, r(10))),
    "diag_embed": (lambda x: torch.diag_embed(x), (X,)),
    "diag_embed_offset": (lambda x: torch.diag_embed(x, 2), (X,)),
    "diag_embed_below_dims": (lambda x: torch.diag_embed(x, -1, 0, 2), (X,)),
    "heaviside": (lambda x, v: torch.heaviside(x.round(), v), (X, r(8))),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_matches_torch(name):
    fn, args = CASES[name]
    out = pypto.jit(fn, backend="interp")(*[a.clone() for a in args])
    ref = fn(*[a.clone() for a in args])
    assert out.shape == ref.shape and out.dtype == ref.dtype
    if ref.dtype.is_floating_point:
        assert ((out - ref).norm() / ref.norm()).item() < 1e-12
    else:
        assert torch.equal(out, ref)


def test_heaviside_special_values():
    x = torch.tensor([-1.0, 0.0, -0.0, 2.0, float("nan"), float("inf"), -float("inf")])
    f = lambda x: torch.heaviside(x, torch.tensor(0.5))  # noqa: E731
    assert torch.equal(pypto.jit(f, backend="interp")(x), f(x))  # NaN gives 0, as torch


@pytest.mark.parametrize("backend", backend_params())
def test_kv_cache_update_in_place(backend):
    """A static cache updated along a dynamic position list: the argument changes in place, the
    rest of it is untouched, one kernel serves every length."""
    @pypto.jit(backend=backend)
    def update(cache, pos, new):
        cache.index_copy_(2, pos, new)
        return cache

    for start, n in [(3, 2), (9, 4), (20, 6), (1, 1), (30, 2)]:
        cache = r(2, 3, 32, 4).float()
        new = r(2, 3, n, 4).float()
        pos = torch.arange(start, start + n)
        want = cache.clone().index_copy_(2, pos, new)
        out = update(cache, pos, new)
        assert torch.equal(cache, want) and torch.equal(out, want)


@pytest.mark.parametrize("backend", backend_params())
def test_embedding_bag_offsets_over_lengths(backend):
    k = pypto.jit(lambda i, off, w: F.embedding_bag(i, w, off), backend=backend)
    w = r(50, 16).float()
    for n in (7, 12, 19, 40):
        i = ri(0, 50, n)
        off = torch.tensor([0, 2, 2, n - 3])
        torch.testing.assert_close(k(i, off, w), F.embedding_bag(i, w, off), rtol=1e-6, atol=1e-6)


GRADS = {
    "index_copy": (lambda x, s: x.index_copy(1, torch.tensor([1, 4]), s), (X, r(4, 2, 8))),
    "scatter_reduce_mean": (lambda x, s: x.scatter_reduce(1, IDX3, s, "mean", include_self=False), (X, SRC3)),
    "bag_offsets_mean": (lambda w: F.embedding_bag(torch.tensor([1, 2, 3, 4, 5, 1]), w, torch.tensor([0, 2])), (W,)),
    "bag_max": (lambda w: F.embedding_bag(torch.tensor([[1, 2, 3], [4, 5, 1]]), w, mode="max"), (W,)),
    "diag_embed": (lambda x: torch.diag_embed(x, 1), (X,)),
}


@pytest.mark.parametrize("name", sorted(GRADS))
def test_gradients_match_torch(name):
    fn, args = GRADS[name]
    ours = [a.clone().requires_grad_() for a in args]
    theirs = [a.clone().requires_grad_() for a in args]
    out, ref = pypto.jit(fn, backend="interp")(*ours), fn(*theirs)
    w = r(*ref.shape)
    (out * w).sum().backward()
    (ref * w).sum().backward()
    for a, b in zip(ours, theirs):
        assert ((a.grad - b.grad).norm() / b.grad.norm()).item() < 1e-12


@pytest.mark.parametrize("bad", [-1, 3])
def test_index_copy_out_of_range_raises(bad):
    """As torch: a negative index is out of range too (index_copy does not wrap)."""
    k = pypto.jit(lambda x, i, s: x.index_copy(0, i, s), backend="interp")
    with pytest.raises(pypto.PyptoError, match="out of range"):
        k(torch.zeros(3), torch.tensor([bad]), torch.ones(1))


@pytest.mark.parametrize("fn, match", [
    (lambda x: x.scatter_reduce(1, IDX3, SRC3, "amax"), "reduce='amax' is not supported"),
    (lambda x: F.embedding_bag(ri(0, 20, 10), W, OFFSETS, mode="max"), "mode='max' with offsets"),
    (lambda x: F.embedding_bag(ri(0, 20, 5, 3), W, mode="mean", per_sample_weights=r(5, 3)), "per_sample_weights"),
    (lambda x: F.embedding_bag(ri(0, 20, 5, 3), W, OFFSETS), "offsets must be None"),
    (lambda x: x.index_copy(1, ri(0, 6, 2, 2), r(4, 4, 8)), "0-d or 1-d"),
])
def test_errors_name_the_line(fn, match):
    with pytest.raises(pypto.PyptoError, match=match) as e:
        pypto.jit(fn, backend="interp")(X)
    assert "test_torch_scatter.py" in str(e.value)
