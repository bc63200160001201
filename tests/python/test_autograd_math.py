"""Derivative rules of the math instructions (sin, cos, tan, exp2, expm1, log2/log10/log1p, cbrt,
atan2, hypot, copysign, fmod, remainder; ceil/trunc/round/sign with zero gradient) and of the torch
functions composed from them, each against torch autograd in float64 on random inputs; and the
backward of a module that builds a mask in place (nn.MultiheadAttention's boolean attn_mask)."""
import pytest
import torch

import pypto

FUNCS = {
    "sin": lambda x, y: torch.sin(x), "cos": lambda x, y: torch.cos(x), "tan": lambda x, y: torch.tan(x * 0.5),
    "exp2": lambda x, y: torch.exp2(x), "expm1": lambda x, y: torch.expm1(x), "log2": lambda x, y: torch.log2(y),
    "log10": lambda x, y: torch.log10(y), "log1p": lambda x, y: torch.log1p(y), "cbrt": lambda x, y: y.pow(1 / 3),
    "atan2": lambda x, y: torch.atan2(x, y), "atan2_scalar": lambda x, y: torch.atan2(x, torch.tensor(0.7)),
    "hypot": lambda x, y: torch.hypot(x, y), "copysign": lambda x, y: torch.copysign(x, y),
    "fmod": lambda x, y: torch.fmod(x, y), "remainder": lambda x, y: torch.remainder(x, y),
    "ceil": lambda x, y: torch.ceil(x) * x, "trunc": lambda x, y: torch.trunc(x) * x,
    "round": lambda x, y: torch.round(x) * x, "sign": lambda x, y: torch.sign(x) * x,
    "asin": lambda x, y: torch.asin(x * 0.3), "acos": lambda x, y: torch.acos(x * 0.3),
    "atan": lambda x, y: torch.atan(x), "sinh": lambda x, y: torch.sinh(x), "cosh": lambda x, y: torch.cosh(x),
    "asinh": lambda x, y: torch.asinh(x), "acosh": lambda x, y: torch.acosh(y + 1),
    "atanh": lambda x, y: torch.atanh(x * 0.3), "sinc": lambda x, y: torch.sinc(x),
    "logaddexp2": lambda x, y: torch.logaddexp2(x, y), "frac": lambda x, y: torch.frac(x) * x,
    "rotary": lambda x, y: x * torch.cos(y * 3) + x.flip(-1) * torch.sin(y * 3),
}


@pytest.mark.parametrize("name", sorted(FUNCS))
def test_math_gradients_match_torch(name):
    f = FUNCS[name]
    g = torch.Generator().manual_seed(7)
    x = torch.randn(4, 6, generator=g, dtype=torch.float64).requires_grad_()
    y = (torch.rand(4, 6, generator=g, dtype=torch.float64) + 0.5).requires_grad_()
    out = pypto.jit(f, backend="interp")(x, y)
    dy = torch.randn(out.shape, generator=g, dtype=torch.float64)
    got = torch.autograd.grad(out, (x, y), dy, allow_unused=True)
    ref = torch.autograd.grad(f(x, y), (x, y), dy, allow_unused=True)
    for a, b in zip(got, ref):
        if b is None or float(b.norm()) == 0:
            assert a is None or float(a.norm()) == 0
            continue
        assert float((a - b).norm() / b.norm()) < 1e-9


def test_multihead_attention_with_boolean_mask_trains():
    # torch turns a boolean attn_mask into an additive one with masked_fill_ on a fresh tensor:
    # an in-place write the backward's replay makes in forward order.
    torch.manual_seed(0)
    mha = torch.nn.MultiheadAttention(16, 2, batch_first=True)

    class Attn(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a = mha

        def forward(self, x):
            mask = torch.triu(torch.ones(x.shape[1], x.shape[1], dtype=torch.bool), 1)
            return self.a(x, x, x, attn_mask=mask, need_weights=False)[0]

    m = Attn()
    x = torch.randn(2, 8, 16, requires_grad=True)
    dy = torch.randn(2, 8, 16)
    pypto.jit(m)(x).backward(dy)
    gx, gw = x.grad.clone(), mha.in_proj_weight.grad.clone()
    x.grad = None
    mha.zero_grad()
    m(x).backward(dy)
    assert float((gx - x.grad).norm() / x.grad.norm()) < 1e-5
    assert float((gw - mha.in_proj_weight.grad).norm() / mha.in_proj_weight.grad.norm()) < 1e-5


KINKS = {  # torch's subgradients where the derivative jumps, and its zero-norm gradients
    "relu6": lambda x: torch.nn.functional.relu6(x), "ReLU6": lambda x: torch.nn.ReLU6()(x),
    "hardtanh": lambda x: torch.nn.functional.hardtanh(x, -0.5, 3.0), "relu": lambda x: torch.relu(x),
    "clamp": lambda x: torch.clamp(x, -1.0, 3.0), "clamp_min": lambda x: x.clamp_min(0.0),
    "clamp_max": lambda x: x.clamp(max=3.0), "hardswish": lambda x: torch.nn.functional.hardswish(x),
    "hardsigmoid": lambda x: torch.nn.functional.hardsigmoid(x),
    "maximum": lambda x: torch.maximum(x, x.flip(-1)), "minimum": lambda x: torch.minimum(x, torch.zeros_like(x)),
    "max_of_two": lambda x: torch.max(x, x.flip(-2)),
    "amax": lambda x: torch.relu(x).amax(-1), "amin_cols": lambda x: torch.relu(x).amin(-2),
    "amax_dims": lambda x: torch.relu(x).amax((-1, -2)), "max_all": lambda x: torch.relu(x).max(),
    "amin_outer_dims": lambda x: torch.relu(x).reshape(2, 3, 8).amin((0, 2), keepdim=True),
    # max(dim) shares a tie as amax (torch: the index returned): equal where the tie is a ReLU's zeros
    "max_dim_relu": lambda x: torch.relu(x + torch.arange(8) * 1e-3 - 2).max(-1).values,
    "min_dim": lambda x: (x + torch.arange(6)[:, None] * 1e-3).min(-2, keepdim=True)[0],
    "max_pool": lambda x: torch.nn.functional.max_pool2d(torch.relu(x)[None], 2),
    "cdist": lambda x: torch.cdist(x, x), "norm": lambda x: torch.relu(x - 2).norm(dim=-1) * x[:, :1],
    "std": lambda x: x.clamp(2.0, 2.0).std(-1) * x[:, :1],
}


@pytest.mark.parametrize("name", sorted(KINKS))
def test_gradients_at_kinks_match_torch(name):
    """Integer-valued inputs put elements exactly at the bounds and in ties (as a ReLU6 after a
    norm with zero bias over zero inputs in MobileNetV2's padded borders, or the zeros a ReLU
    leaves for a max): torch's subgradient there, not another valid one; gradients of zero norms
    and distances 0, not NaN (cdist(x, x) has a zero diagonal)."""
    f = KINKS[name]
    g = torch.Generator().manual_seed(5)
    x = torch.randint(-4, 5, (6, 8), generator=g).double().requires_grad_()
    dy = torch.randn(f(x).shape, generator=g, dtype=torch.float64)
    got, = torch.autograd.grad(pypto.jit(f, backend="interp")(x), x, dy)
    want, = torch.autograd.grad(f(x), x, dy)
    # (torch's hardsigmoid backward multiplies by 1/6 rounded to float32)
    tol = 1e-7 if name == "hardsigmoid" else 1e-13
    assert not got.isnan().any() and float((got - want).norm()) <= tol * float(want.norm()), (got, want)
