"""pypto.jit of torch.nn modules written with torch's own layers: convolutions (groups, 1-d,
transposed), batch/group/instance norm, pooling, resampling, activations, nn.MultiheadAttention
with masks, the Transformer encoder/decoder layers and the recurrent layers, against torch in
float64; their gradients; and the documented errors."""
import re

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import pypto
from pypto_testutil import assert_close, jit


def _check(module, *xs, backend="cpu", tol=1e-9):
    torch.manual_seed(0)
    m = module.double().eval()
    xs = [x.double() if x.is_floating_point() else x for x in xs]
    with torch.no_grad():
        got, want = jit(m, backend)(*xs), m(*xs)
    got, want = _leaves(got), _leaves(want)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        if w is None:
            assert g is None
            continue
        assert tuple(g.shape) == tuple(w.shape)
        assert_close(g.numpy(), w.numpy(), tol)


def _leaves(v):
    return [x for e in v for x in _leaves(e)] if isinstance(v, (tuple, list)) else [v]


class SmallCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
                                  nn.Conv2d(8, 8, 3, padding=1, groups=8, stride=2), nn.GroupNorm(2, 8),
                                  nn.Hardswish(), nn.Conv2d(8, 16, 1), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                                  nn.Linear(16, 10))

    def forward(self, x):
        return self.body(x)


def test_cnn_layers(backend):
    m = SmallCNN()
    with torch.no_grad():  # non-trivial running statistics
        m.body[1].running_mean.uniform_(-0.5, 0.5)
        m.body[1].running_var.uniform_(0.5, 2.0)
    _check(m, torch.randn(2, 3, 12, 12), backend=backend)


@pytest.mark.parametrize("module, shape", [
    (nn.Conv1d(4, 6, 3, padding=1, stride=2), (2, 4, 11)),
    (nn.ConvTranspose2d(4, 3, 3, stride=2, padding=1, output_padding=1), (2, 4, 5, 5)),
    (nn.Sequential(nn.AvgPool2d(3, stride=2, padding=1), nn.MaxPool2d(2, padding=1)), (1, 3, 9, 9)),
    (nn.Sequential(nn.InstanceNorm2d(4, affine=True), nn.Upsample(scale_factor=2), nn.PixelShuffle(2)),
     (2, 4, 3, 5)),
    (nn.Sequential(nn.Softplus(), nn.ELU(), nn.SELU(), nn.CELU(0.5), nn.LeakyReLU(0.1), nn.Hardtanh(-0.5, 0.5),
                   nn.ReLU6(), nn.Mish(), nn.LogSigmoid(), nn.Softsign(), nn.Tanhshrink(), nn.GLU()), (3, 8)),
    (nn.Sequential(nn.MaxPool1d(3, 2), nn.AvgPool1d(2)), (2, 3, 13)),
])
def test_layers(module, shape):
    _check(module, torch.randn(*shape))


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.MultiheadAttention(32, 4, batch_first=True)

    def forward(self, x, kpm):
        causal = torch.triu(torch.ones(x.shape[1], x.shape[1], dtype=torch.bool), 1)
        out, w = self.a(x, x, x, key_padding_mask=kpm, attn_mask=causal)
        return out, w


def test_multihead_attention_and_transformer_layers():
    kpm = torch.zeros(2, 5, dtype=torch.bool)
    kpm[1, 3:] = True
    _check(Attention(), torch.randn(2, 5, 32), kpm)
    _check(nn.MultiheadAttention(16, 2, kdim=8, vdim=12), torch.randn(4, 3, 16), torch.randn(6, 3, 8),
           torch.randn(6, 3, 12))
    _check(nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True, norm_first=True),
           torch.randn(2, 5, 32))
    _check(nn.TransformerDecoderLayer(32, 4, 64, dropout=0.0, batch_first=True), torch.randn(2, 5, 32),
           torch.randn(2, 7, 32))


def test_recurrent_layers():
    _check(nn.LSTM(6, 8, num_layers=2, batch_first=True), torch.randn(3, 4, 6))
    _check(nn.GRU(6, 8, bidirectional=True), torch.randn(4, 3, 6))
    _check(nn.RNN(6, 8, nonlinearity="relu"), torch.randn(4, 3, 6))
    _check(nn.LSTMCell(6, 8), torch.randn(3, 6))


def test_cnn_gradients_match_torch():
    torch.manual_seed(3)
    m = SmallCNN().double().eval()
    x = torch.randn(2, 3, 12, 12, dtype=torch.float64)
    k = pypto.jit(m)
    k(x).sum().backward()
    ours = {n: p.grad.clone() for n, p in m.named_parameters()}
    m.zero_grad()
    m(x).sum().backward()
    for n, p in m.named_parameters():
        assert_close(ours[n].numpy(), p.grad.numpy(), 1e-9)


def test_documented_errors():
    k = pypto.jit(lambda x, m, v: F.batch_norm(x, m, v, training=True))
    with pytest.raises(pypto.PyptoError, match="running statistics"):
        k(torch.randn(2, 3, 4, 4), torch.zeros(3), torch.ones(3))
    with pytest.raises(pypto.PyptoError, match="batchnorm.py.*running statistics.*eval"):
        pypto.jit(nn.BatchNorm2d(3).train())(torch.randn(2, 3, 4, 4))
    up = nn.Upsample(scale_factor=2, mode="bicubic")
    with pytest.raises(pypto.PyptoError, match="mode='bicubic' is not supported"):
        pypto.jit(up)(torch.randn(1, 2, 4, 4))


class _TwoLinear(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = torch.nn.Linear(8, 8), torch.nn.Linear(8, 8)

    def forward(self, x, shift=0.0):
        return self.b(torch.relu(self.a(x))) + shift


def test_module_hooks_run_as_module_call_runs_them():
    torch.manual_seed(0)
    m, x = _TwoLinear(), torch.randn(4, 8, requires_grad=True)
    k = pypto.jit(m)
    handles = [m.register_forward_pre_hook(lambda mod, inp: (inp[0] * 2,)),
               m.a.register_forward_hook(lambda mod, inp, out: out - 1),  # a submodule's: always ran
               m.register_forward_hook(lambda mod, inp, out: out + inp[0].sum()),
               m.register_forward_pre_hook(lambda mod, a, kw: (a, {"shift": kw.get("shift", 0.0) + 5.0}),
                                           with_kwargs=True),
               m.register_forward_hook(lambda mod, a, kw, out: out * kw["shift"], with_kwargs=True)]
    ref = m(x, shift=1.0)
    got = k(x, shift=1.0)
    assert torch.allclose(got, ref, atol=1e-5)
    (g,) = torch.autograd.grad(got.sum(), x)
    (want,) = torch.autograd.grad(ref.sum(), x)
    assert torch.allclose(g, want, atol=1e-5)  # the hooks' own arithmetic is differentiated too
    # module.forward skips the module's hooks, as in torch
    assert torch.allclose(pypto.jit(m.forward)(x), m.forward(x), atol=1e-5)
    for h in handles:
        h.remove()
    assert torch.allclose(k(x), m(x), atol=1e-5)


@pytest.mark.parametrize("backend", ["interp", "cpu"])
def test_patch_embedding_is_one_product(backend):
    """A convolution whose stride is its kernel (a vision transformer's patch embedding, sizes not
    multiples of the patch: the rest is dropped, as torch) is one matmul of the patches, not one
    product per tap; values and gradients as torch's."""
    conv = nn.Conv2d(3, 8, kernel_size=(4, 3), stride=(4, 3))
    x = torch.randn(2, 3, 18, 13, dtype=torch.float64)
    _check(conv, x, backend=backend)
    text = jit(conv.double(), backend).lower(x).as_text("tensor")
    assert text.count("TMATMUL") == 1 and "CONV" not in text
    xg = x[:1].clone().requires_grad_()
    assert torch.autograd.gradcheck(jit(conv, backend), (xg,))


def _grads_match(kern, fn, args, tol=1e-10):
    """The gradients of sum(out^2) through the kernel and through torch agree for every input."""
    mine, ref = ([x.clone().requires_grad_() for x in args] for _ in range(2))
    kern(*mine).pow(2).sum().backward()
    fn(*ref).pow(2).sum().backward()
    for g, r in zip(mine, ref):
        assert_close(g.grad.numpy(), r.grad.numpy(), tol)


def causal_sdpa(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


@pytest.mark.parametrize("L,S", [(256, 256), (200, 300), (300, 130), (130, 140)])
def test_causal_attention_skips_the_hidden_keys(L, S):
    """F.scaled_dot_product_attention(is_causal=True) of a static shape runs in blocks of query rows,
    each against the keys it sees (the hidden half's products are not computed): values as torch's
    in float64, fewer multiply-adds than the full product, and gradients of q, k and v."""
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 2, n, 8, dtype=torch.float64) for n in (L, S, S))
    kern = jit(causal_sdpa, "cpu")
    assert_close(kern(q, k, v).numpy(), causal_sdpa(q, k, v).numpy(), 1e-12)
    text = kern.lower(q, k, v).as_text("tensor")
    # q_b @ k[.., 0:c, :]^T: the keys each block reads (a view's dims print as offset:size)
    keys = [int(m.group(1)) for m in re.finditer(r"TMATMUL [^\n]*%k\[0:1, 0:2, 0:(\d+), 0:8\]", text)]
    assert len(keys) >= 2 and max(keys) == min(L, S) and sum(keys) < len(keys) * S, text
    _grads_match(kern, causal_sdpa, (q, k, v))


def test_causal_attention_float32_and_interpreter():
    """The same blocked causal attention in float32 (the additive mask a constant of the scores'
    type) on the CPU backend and the reference interpreter."""
    torch.manual_seed(1)
    q, k, v = torch.randn(1, 1, 160, 4), torch.randn(1, 1, 160, 4), torch.randn(1, 1, 160, 4)
    want = causal_sdpa(q.double(), k.double(), v.double()).numpy()
    for backend in ("cpu", "interp"):
        got = jit(causal_sdpa, backend)(q, k, v)
        assert got.dtype == torch.float32
        assert_close(got.numpy(), want, 1e-5)


def test_causal_attention_hidden_inf_key_is_masked_as_torch():
    """A key holding inf hides from the queries before it (torch's masked_fill semantics: their
    rows stay finite) and reaches the rows that see it as in torch (NaN or inf), in whichever
    block it falls."""
    torch.manual_seed(2)
    q, k, v = (torch.randn(1, 1, 192, 4, dtype=torch.float64) for _ in range(3))
    k[0, 0, 100] = float("inf")
    got, want = jit(causal_sdpa, "cpu")(q, k, v), causal_sdpa(q, k, v)
    assert torch.isfinite(want[0, 0, :100]).all() and not torch.isfinite(want[0, 0, 100:]).all()
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12, equal_nan=True)


def hand_attention(q, k, v, mask):
    scores = torch.matmul(q, k.transpose(2, 3)) / 8.0 * 2.0
    return torch.matmul(F.softmax(scores + mask, dim=-1), v)


def _sliced_key_products(text):
    return len(re.findall(r"TMATMUL [^\n]*perm\(0, 1, 3, 2\)", text))


def band_mask(band, L):
    """A constant mask made inside the traced code (as a Llama block makes its causal one)."""
    mask = torch.full((L, L), float("-inf")).triu(1)
    if band == "window":
        mask = mask + torch.full((L, L), float("-inf")).tril(-64)
    elif band == "scattered":
        i, j = torch.arange(L)[:, None], torch.arange(L)[None, :]
        mask = torch.where((i * 7 + j * 3) % 5 == 0, float("-inf"), 0.0)
        mask[:, 0] = 0.0
    return mask


@pytest.mark.parametrize("band", ["causal", "window", "scattered"])
def test_hand_written_attention_over_a_constant_band_runs_by_blocks(band):
    """softmax(q k^T * s + mask) @ v written out in torch code with a mask made in the traced code
    (a Llama block's torch.full(-inf).triu(1)): a causal or sliding-window band is computed by
    blocks of query rows against the keys they see; any other mask as written. Values and
    gradients as torch's."""
    torch.manual_seed(3)
    L = 256

    def f(q, k, v):
        return hand_attention(q, k, v, band_mask(band, L))

    q, k, v = (torch.randn(1, 2, L, 8, dtype=torch.float64) for _ in range(3))
    kern = jit(f, "cpu")
    assert_close(kern(q, k, v).numpy(), f(q, k, v).numpy(), 1e-12)
    text = kern.lower(q, k, v).as_text("tensor")
    assert (_sliced_key_products(text) > 1) == (band != "scattered"), text
    _grads_match(kern, f, (q, k, v))


def test_hand_written_attention_whose_scores_are_also_returned():
    """The scores a blocked attention was recognised in are still there for other uses."""
    torch.manual_seed(4)

    def f(q, k, v):
        scores = torch.matmul(q, k.transpose(2, 3))
        return torch.matmul(F.softmax(scores + band_mask("causal", 160), dim=-1), v), scores.sum(-1)

    q, k, v = (torch.randn(1, 1, 160, 4, dtype=torch.float64) for _ in range(3))
    for got, want in zip(jit(f, "cpu")(q, k, v), f(q, k, v)):
        assert_close(got.numpy(), want.numpy(), 1e-12)
