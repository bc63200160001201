"""A Llama-style decoder block written with torch and torch.nn.functional calls only (RMSNorm,
rotary embedding, grouped-query attention with a causal mask, SiLU-gated MLP), as Hugging Face
writes its modules: what `pypto.jit(block)` compiles in tests/python/test_torch_functions.py and
in the benchmark's jit_block case."""
import math

import torch
import torch.nn.functional as F
from torch import nn


class RMSNorm(nn.Module):
    def __init__(self, d, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(1 + 0.1 * torch.randn(d))
        self.eps = eps

    def forward(self, x):
        dtype = x.dtype
        x = x.to(torch.float32)
        var = x.pow(2).mean(-1, keepdim=True)
        x = x * torch.rsqrt(var + self.eps)
        return self.weight * x.to(dtype)


class Rotary(nn.Module):
    def __init__(self, dim, base=10000.0):
        super().__init__()
        inv = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))
        self.register_buffer("inv_freq", inv, persistent=False)

    def forward(self, seq_len):
        t = torch.arange(seq_len, dtype=torch.float32)
        freqs = torch.outer(t, self.inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos(), emb.sin()


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def repeat_kv(x, n_rep):
    b, h, s, d = x.shape
    if n_rep == 1:
        return x
    return x[:, :, None, :, :].expand(b, h, n_rep, s, d).reshape(b, h * n_rep, s, d)


class Attention(nn.Module):
    def __init__(self, d, heads, kv_heads):
        super().__init__()
        self.h, self.kv, self.hd = heads, kv_heads, d // heads
        self.q_proj = nn.Linear(d, heads * self.hd, bias=False)
        self.k_proj = nn.Linear(d, kv_heads * self.hd, bias=False)
        self.v_proj = nn.Linear(d, kv_heads * self.hd, bias=False)
        self.o_proj = nn.Linear(heads * self.hd, d, bias=False)
        self.rotary = Rotary(self.hd)

    def forward(self, x):
        b, s, _ = x.shape
        q = self.q_proj(x).view(b, s, self.h, self.hd).transpose(1, 2)
        k = self.k_proj(x).view(b, s, self.kv, self.hd).transpose(1, 2)
        v = self.v_proj(x).view(b, s, self.kv, self.hd).transpose(1, 2)
        cos, sin = self.rotary(s)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k, v = repeat_kv(k, self.h // self.kv), repeat_kv(v, self.h // self.kv)
        scores = torch.matmul(q, k.transpose(2, 3)) / math.sqrt(self.hd)
        causal = torch.full((s, s), float("-inf")).triu(1)
        probs = F.softmax(scores + causal, dim=-1, dtype=torch.float32).to(q.dtype)
        out = torch.matmul(probs, v).transpose(1, 2).reshape(b, s, -1)
        return self.o_proj(out)


class MLP(nn.Module):
    def __init__(self, d, hidden):
        super().__init__()
        self.gate_proj = nn.Linear(d, hidden, bias=False)
        self.up_proj = nn.Linear(d, hidden, bias=False)
        self.down_proj = nn.Linear(hidden, d, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class LlamaBlock(nn.Module):
    def __init__(self, d=32, heads=4, kv_heads=2, hidden=64):
        super().__init__()
        self.input_layernorm = RMSNorm(d)
        self.self_attn = Attention(d, heads, kv_heads)
        self.post_attention_layernorm = RMSNorm(d)
        self.mlp = MLP(d, hidden)

    def forward(self, x):
        h = x + self.self_attn(self.input_layernorm(x))
        return h + self.mlp(self.post_attention_layernorm(h))
