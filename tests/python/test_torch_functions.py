"""torch functions inside kernels (__torch_function__ on traced tensors) and pypto.jit of
nn.Modules: a self-written Llama-style block, GPT-2 and BERT blocks, written with torch and F
calls only, against torch itself."""
import math
import sys
from pathlib import Path

import pytest

import torch  # a hard dependency (Makefile PY_PKGS): a missing torch must fail, not skip
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

import pypto  # noqa: E402
from pypto_testutil import assert_close  # noqa: E402


def _close(out, ref, tol=1e-5):
    assert tuple(out.shape) == tuple(ref.shape), (out.shape, ref.shape)
    assert_close(out.detach().double().numpy(), ref.detach().double().numpy(), tol)


def torch_mix(x, w, b):
    h = F.linear(x, w, b)
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)
    a, c = torch.chunk(h, 2, dim=-1)
    y = torch.cat([F.silu(a) * c, F.gelu(a, approximate="tanh"), F.gelu(c)], dim=-1)
    y = torch.softmax(y.double(), dim=-1, dtype=torch.float32)
    z = torch.stack(y.split(3, dim=-1), 0).permute(1, 0, 2).reshape(x.shape[0], -1)
    v = torch.var(h, dim=-1, keepdim=True, unbiased=False) + torch.sin(h).abs().sum(-1, keepdim=True) * 0
    t = torch.tril(torch.matmul(y.unsqueeze(-1), y.unsqueeze(-2))).sum(-1)
    r = y.repeat(2, 1).view(2, -1, y.shape[-1]).transpose(0, 1).flatten(1)
    m = torch.where(y > 0.1, y, torch.zeros_like(y)).masked_fill(y < 0.01, -1.0)
    return z, v, t, r, m, torch.repeat_interleave(x, 2, dim=0).expand(2, -1, -1).float()


def test_torch_functions_map_to_pypto_ops():
    torch.manual_seed(0)
    x, w, b = torch.randn(4, 8), torch.randn(18, 8), torch.randn(18)
    k = pypto.jit(torch_mix, backend="interp")
    for got, ref in zip(k(x, w, b), torch_mix(x, w, b)):
        _close(got, ref)


def torch_mix_no_trig(x, w, b):
    h = F.linear(x, w, b)
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)
    a, c = torch.chunk(h, 2, dim=-1)
    y = torch.cat([F.silu(a) * c, F.gelu(a, approximate="tanh"), F.gelu(c)], dim=-1)
    y = torch.softmax(y.double(), dim=-1, dtype=torch.float32)
    z = torch.stack(y.split(3, dim=-1), 0).permute(1, 0, 2).reshape(x.shape[0], -1)
    v = torch.var(h, dim=-1, keepdim=True, unbiased=False) + torch.bmm(h.unsqueeze(0), h.T.unsqueeze(0))[0]
    t = torch.tril(torch.matmul(y.unsqueeze(-1), y.unsqueeze(-2))).sum(-1)
    r = y.repeat(2, 1).view(2, -1, y.shape[-1]).transpose(0, 1).flatten(1)
    m = torch.where(y > 0.1, y, torch.zeros_like(y)).masked_fill(y < 0.01, -1.0)
    return z, v, t, r, m, torch.repeat_interleave(x, 2, dim=0).expand(2, -1, -1).float()


def test_torch_functions_without_trig():
    torch.manual_seed(0)
    x, w, b = torch.randn(4, 8), torch.randn(18, 8), torch.randn(18)
    k = pypto.jit(torch_mix_no_trig, backend="interp")
    for got, ref in zip(k(x, w, b), torch_mix_no_trig(x, w, b)):
        _close(got, ref)


def sdpa_variants(q, k, v, mask, bias):
    causal = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    kk, vv = k.repeat_interleave(2, dim=1), v.repeat_interleave(2, dim=1)
    masked = F.scaled_dot_product_attention(q, kk, vv, attn_mask=mask)
    biased = F.scaled_dot_product_attention(q, kk, vv, attn_mask=bias, scale=0.3)
    return causal, masked, biased


def test_scaled_dot_product_attention():
    torch.manual_seed(1)
    q, k, v = torch.randn(2, 4, 6, 8), torch.randn(2, 2, 6, 8), torch.randn(2, 2, 6, 8)
    mask = torch.rand(6, 6) > 0.4
    mask[:, 0] = True
    bias = torch.randn(6, 6)
    got = pypto.jit(sdpa_variants, backend="interp")(q, k, v, mask, bias)
    for g, r in zip(got, sdpa_variants(q, k, v, mask, bias)):
        _close(g, r)


def introspect(x):
    y = x.float() if x.is_floating_point() else x
    if y.requires_grad or y.is_cuda or not y.is_contiguous():
        y = y * 0
    return y * y.element_size(), torch.max(y, dim=-1).values


def test_tensor_introspection_as_torch_code_asks():
    x = torch.randn(3, 5, dtype=torch.float64)
    got = pypto.jit(introspect, backend="interp")(x)
    _close(got[0], x.float() * 4)
    _close(got[1], x.float().max(-1).values)


def uses_logcumsumexp(x):
    return torch.logcumsumexp(x, 0)


def uses_new_ops(x, w, ids):
    return torch.cumsum(x, 0) + torch.log1p(x.abs()) * torch.sin(x) + F.embedding(ids, w)


@pytest.mark.parametrize("backend_name", ["interp", "cpu"])
def test_scans_math_and_embedding_map_to_pypto_ops(backend_name):
    torch.manual_seed(1)
    x, w = torch.randn(6, 5, dtype=torch.float64), torch.randn(7, 5, dtype=torch.float64)
    ids = torch.tensor([0, 3, 6, 3, 1, 2])
    got = pypto.jit(uses_new_ops, backend=backend_name)(x, w, ids)
    want = torch.cumsum(x, 0) + torch.log1p(x.abs()) * torch.sin(x) + w[ids]
    _close(got, want)


class Helper(nn.Module):
    def forward(self, x):
        return torch.fft.fft(x)


def test_unsupported_torch_function_names_it_the_line_and_the_nearest_op():
    x = torch.randn(3, 4)
    with pytest.raises(pypto.PyptoError) as e:
        pypto.jit(uses_logcumsumexp, backend="interp")(x)
    msg = str(e.value)
    assert "torch.logcumsumexp is not supported inside a PyPTO kernel" in msg
    assert "return torch.logcumsumexp(x, 0)" in msg and "test_torch_functions.py" in msg
    assert "pypto.logsumexp" in msg
    # called from module code that runs as plain Python: that line is named too
    with pytest.raises(pypto.PyptoError) as e:
        pypto.jit(Helper(), backend="interp")(x)
    msg = str(e.value)
    assert "torch.fft.fft" in msg and "return torch.fft.fft(x)" in msg


def uses_histc(x):
    return torch.histc(x, 4)


def test_unsupported_torch_function_suggests_no_unrelated_op():
    with pytest.raises(pypto.PyptoError) as e:
        pypto.jit(uses_histc, backend="interp")(torch.randn(3, 4))
    assert "PyPTO has no counterpart" in str(e.value)  # not pypto.stack, a spelling alike


# --- a Llama-style decoder block, torch and F calls only (bench/llama_block.py) ------------------

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from bench.llama_block import LlamaBlock  # noqa: E402


def test_llama_block_through_jit_of_the_module():
    torch.manual_seed(3)
    block = LlamaBlock().eval()
    x = torch.randn(2, 7, 32)
    with torch.no_grad():
        ref = block(x)
        k = pypto.jit(block)
        _close(k(x), ref)
        _close(pypto.jit(block.forward)(x), ref)
        # weights are read at each call: an in-place update and a replaced parameter are both seen
        block.mlp.up_proj.weight.mul_(0.5)
        block.input_layernorm.weight = nn.Parameter(torch.randn(32))
        _close(k(x), block(x))
        assert k.cache_size == 1


def test_llama_block_sdpa_and_float64():
    torch.manual_seed(4)
    block = LlamaBlock(d=16, heads=2, kv_heads=1, hidden=24).double().eval()
    x = torch.randn(1, 5, 16, dtype=torch.float64)

    def attn_sdpa(self, x):
        b, s, _ = x.shape
        q = self.q_proj(x).view(b, s, self.h, self.hd).transpose(1, 2)
        k = self.k_proj(x).view(b, s, self.kv, self.hd).transpose(1, 2)
        v = self.v_proj(x).view(b, s, self.kv, self.hd).transpose(1, 2)
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        return self.o_proj(o.transpose(1, 2).reshape(b, s, -1))

    block.self_attn.forward = attn_sdpa.__get__(block.self_attn)
    with torch.no_grad():
        _close(pypto.jit(block, backend="interp")(x), block(x), 1e-7)


# --- GPT-2 and BERT feed-forward blocks -------------------------------------------------------------

class Conv1D(nn.Module):
    """GPT-2's linear layer: y = x @ W + b through torch.addmm."""

    def __init__(self, nf, nx):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(nx, nf) * 0.1)
        self.bias = nn.Parameter(torch.randn(nf))

    def forward(self, x):
        size_out = x.size()[:-1] + (self.weight.size(-1),)
        x = torch.addmm(self.bias, x.view(-1, x.size(-1)), self.weight)
        return x.view(size_out)


class GPT2MLP(nn.Module):
    def __init__(self, d=24):
        super().__init__()
        self.ln = nn.LayerNorm(d)
        self.c_fc, self.c_proj = Conv1D(4 * d, d), Conv1D(d, 4 * d)
        self.dropout = nn.Dropout(0.1)

    def forward(self, x):
        h = self.c_fc(self.ln(x))
        h = 0.5 * h * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (h + 0.044715 * torch.pow(h, 3.0))))
        return x + self.dropout(self.c_proj(h))


class BertFFN(nn.Module):
    def __init__(self, d=24):
        super().__init__()
        self.dense_in, self.dense_out = nn.Linear(d, 3 * d), nn.Linear(3 * d, d)
        self.norm = nn.LayerNorm(d, eps=1e-12)
        self.dropout = nn.Dropout(0.1)

    def forward(self, x):
        h = F.gelu(self.dense_in(x))
        return self.norm(self.dropout(self.dense_out(h)) + x)


@pytest.mark.parametrize("cls", [GPT2MLP, BertFFN])
def test_gpt2_and_bert_blocks(cls):
    torch.manual_seed(5)
    m = cls().eval()
    x = torch.randn(2, 5, 24)
    with torch.no_grad():
        _close(pypto.jit(m, backend="interp")(x), m(x))


def test_dropout_in_training_mode_draws_masks_and_eval_is_seen():
    """nn.Dropout in training mode draws a fresh mask per call (test_random.py has the details);
    switching the module to eval() traces again and gives torch's eval output."""
    torch.manual_seed(5)
    m, x = BertFFN().train(), torch.randn(2, 3, 24)
    k = pypto.jit(m, backend="interp")
    with torch.no_grad():
        a, b = k(x), k(x)
        h = m.dense_out(F.gelu(m.dense_in(x)))
        torch.manual_seed(11)
        dropped = k(x)
        torch.manual_seed(11)
        assert torch.equal(dropped, k(x))  # torch's generator seeds the mask
        assert not torch.equal(a, b)
        m.eval()
        _close(k(x), m(x))
        assert not torch.allclose(a, m(x), atol=1e-4) and h.shape == x.shape


def test_jit_module_inside_torch_compile():
    torch.manual_seed(6)
    block = LlamaBlock(d=16, heads=2, kv_heads=1, hidden=24).eval()
    k = pypto.jit(block, backend="interp")

    def f(x):
        return torch.tanh(k(x * 2))

    x = torch.randn(1, 6, 16)
    with torch.no_grad():
        got = torch.compile(f, fullgraph=True, backend="aot_eager")(x)
        _close(got, torch.tanh(block(x * 2)))
