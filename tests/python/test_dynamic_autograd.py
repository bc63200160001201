"""Autograd over dynamic shapes: a kernel trained at varying sequence lengths compiles one forward
and one backward. The backward is derived from the dynamic program (its extents bound per call
from the arrays it gets); gradients are compared with torch's autograd in float64."""
import numpy as np
import pytest
import torch

import pypto
from pypto import autograd
from pypto.errors import PyptoError
from pypto_testutil import jit, rel_err


def _layer_norm(x, w, b):
    mu = x.mean(-1, keepdim=True)
    v = ((x - mu) ** 2).mean(-1, keepdim=True)
    return (x - mu) / torch.sqrt(v + 1e-5) * w + b


def _cross_attention(q, k, v):
    return torch.softmax(q @ k.transpose(-1, -2) * 0.25, -1) @ v


def _rnn(x, w):
    h = torch.zeros(x.shape[0], x.shape[2], dtype=x.dtype)
    for t in range(x.shape[1]):
        h = torch.tanh(h @ w + x[:, t])
    return h


def _row_sum(x):
    return x.sum(-1)


def _shifted_product(x):
    return (x[:, 1:] - x[:, :-1]) * x[:, 1:]


def _train_at_lengths(k, ref, make, lengths, tol=1e-5):
    """Forward and backward at each length, against torch autograd in float64."""
    for n in lengths:
        args = make(n)
        ref_args = [a.detach().double().requires_grad_() for a in args]
        out = k(*args)
        cot = torch.randn(out.shape, dtype=out.dtype)
        out.backward(cot)
        expected = ref(*ref_args)
        expected.backward(cot.double())
        assert rel_err(out.detach().double().numpy(), expected.detach().numpy()) < tol, n
        for a, r in zip(args, ref_args):
            assert rel_err(a.grad.double().numpy(), r.grad.numpy()) < tol, n


def _leaves(*shapes, scale=1.0):
    return [(scale * torch.randn(*s)).requires_grad_() for s in shapes]


def _backward_dynamic(k, *args):
    """Whether the derived backward of the variant these arguments take has dynamic dims."""
    params = k.lower(*args).backward().params
    return any(n is None for p in params for n in p[2])


@pytest.mark.parametrize("name, ref, make, lengths", [
    ("layer_norm", _layer_norm, lambda s: _leaves((3, s, 32), (32,), (32,)), (12, 7, 20, 33)),
    # q and k/v of different lengths: two symbols; scores [.., Sq, Sk] saved from the forward
    ("cross_attention", _cross_attention,
     lambda s: _leaves((2, s, 16), (2, s + 5, 16), (2, s + 5, 16)), (10, 6, 17, 30)),
    # a loop over a dynamic number of steps carrying h: its tape is sized at run time
    ("rnn", _rnn, lambda s: [torch.randn(2, s, 8, requires_grad=True), (0.3 * torch.randn(8, 8)).requires_grad_()],
     (5, 3, 9, 2)),
    # the backward reads nothing of x but needs its length: x stays a parameter for its shape
    ("row_sum", _row_sum, lambda s: _leaves((3, s)), (10, 6, 17)),
    # results of extent S - 1
    ("shifted_product", _shifted_product, lambda s: _leaves((3, s)), (10, 6, 17)),
])
def test_training_at_varying_lengths_compiles_once(name, ref, make, lengths, backend):
    torch.manual_seed(0)
    k = jit(ref, backend)
    _train_at_lengths(k, ref, make, lengths)
    info = k.cache_info()
    # the first length static, every later one (forward and backward) the dynamic variant
    assert info.size == 2, info
    assert info.dynamic[1], info
    assert _backward_dynamic(k, *make(lengths[-1]))


def test_numpy_vjp_at_varying_lengths_with_a_zero_cotangent(backend):
    """pypto.vjp takes the dynamic variant; a cotangent given as None (zeros) of a dynamic result
    is shaped from the result."""
    def two(x, y):
        return x * y + x, (x - y).sum(-1)
    k = jit(two, backend)
    rng = np.random.default_rng(1)
    for n in (10, 6, 17):
        x, y = (rng.standard_normal((n, 4)).astype(np.float32) for _ in range(2))
        (a, s), pullback = pypto.vjp(k, x, y)
        ga = rng.standard_normal(a.shape).astype(np.float32)
        gx, gy = pullback(ga, None)
        assert rel_err(gx, ga * (y + 1.0)) < 1e-6
        assert rel_err(gy, ga * x) < 1e-6
        gs = rng.standard_normal(s.shape).astype(np.float32)
        gx, gy = pullback(None, gs)
        assert rel_err(gx, np.broadcast_to(gs[:, None], x.shape)) < 1e-6
        assert rel_err(gy, -np.broadcast_to(gs[:, None], x.shape)) < 1e-6
    assert k.cache_info().size == 2


def test_profile_counts_a_dynamic_backward_at_the_call_sizes():
    k = pypto.jit(_layer_norm)
    for n in (12, 7):
        args = _leaves((3, n, 32), (32,), (32,))
        k(*args).sum().backward()
    args = _leaves((3, 40, 32), (32,), (32,))
    with pypto.profiling():
        k(*args).sum().backward()
        prof = pypto.get_last_profile()
    assert "backward" in prof.kernel
    # at least the cotangent and x read and dx written, at the call's size (not the dims' bound)
    assert 3 * 40 * 32 * 4 * 3 <= prof.bytes < 10 ** 7


def test_a_dynamic_derivative_that_cannot_be_built_falls_back_to_static(monkeypatch):
    """Where the dynamic program's backward is refused, the call takes a static variant per
    shape (and the refusal is not retried at every call)."""
    made = []
    real = autograd.Derived.__init__

    def refuse_dynamic(self, entry, wanted=None, save=False):
        made.append(bool(entry.dynamic))
        if entry.dynamic:
            raise PyptoError("refused for the test")
        real(self, entry, wanted, save)
    monkeypatch.setattr(autograd.Derived, "__init__", refuse_dynamic)
    k = pypto.jit(_layer_norm)
    torch.manual_seed(2)
    _train_at_lengths(k, _layer_norm, lambda s: _leaves((3, s, 32), (32,), (32,)), (12, 7, 20, 7))
    # 12 static; 7 dynamic (refused) and static; 20 static; 7 again from the cache
    assert k.cache_info().size == 4
    assert made.count(True) == 1


def test_a_genuine_refusal_still_names_the_line():
    def grad_of_trigamma(x):
        return torch.polygamma(1, x)
    k = pypto.jit(grad_of_trigamma)
    for n in (5, 7):
        x = (torch.rand(3, n) + 0.5).requires_grad_()
        with pytest.raises(PyptoError, match="test_dynamic_autograd.py"):
            k(x).sum().backward()


def test_a_dynamic_backward_writes_each_adjoint_once():
    """The backward's clean-ups apply to dynamic adjoints as to static ones: no zero fill then
    accumulation (a pass over memory per adjoint), products written, not accumulated."""
    def linear(x, w, b):
        return torch.relu(torch.nn.functional.layer_norm(x, (x.shape[-1],)) @ w + b)
    k = pypto.jit(linear)
    torch.manual_seed(4)
    for n in (40, 23, 57):
        args = _leaves((n, 96), (96, 80), (80,), scale=0.3)
        ref_args = [a.detach().double().requires_grad_() for a in args]
        out = k(*args)
        cot = torch.randn(out.shape)
        out.backward(cot)
        linear(*ref_args).backward(cot.double())
        for a, r in zip(args, ref_args):
            assert rel_err(a.grad.double().numpy(), r.grad.numpy()) < 1e-5
    assert k.cache_info().size == 2
    text = k.lower(*_leaves((33, 96), (96, 80), (80,))).backward().as_text("tensor")
    assert "%x_0" in text or "[%" in text, text  # the dynamic variant's backward
    assert "TEXPANDS" not in text and "TMATMUL_ACC" not in text, text


def test_a_variant_first_built_for_autograd_runs_plain_calls():
    """Autograd compiles the forward that saves products and the backward, not the variant
    itself (it never runs as is there); a later plain call of that variant compiles and runs it."""
    def linear_relu(x, w):
        return torch.relu(x @ w)
    k = pypto.jit(linear_relu)
    x, w = _leaves((64, 32), (32, 16))
    k(x, w).sum().backward()
    ref = torch.relu(x.detach().double() @ w.detach().double()).numpy()
    assert rel_err(k(x.detach(), w.detach()).numpy(), ref) < 1e-6
    assert rel_err(k(x.detach().numpy(), w.detach().numpy()), ref) < 1e-6
