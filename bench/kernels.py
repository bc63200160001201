"""The PyPTO kernels the suite runs. Importing this module imports pypto; cases.py imports it
lazily so that a broken or missing pypto turns into per-case errors, not a crashed suite.
The seed's kernels come from pypto.seed_kernels."""
import torch  # the depthwise kernels are torch code (F.conv2d with groups)

import pypto
from pypto import seed_kernels


@pypto.jit
def matmul(a, b):
    return pypto.matmul(a, b)


# The seed's kernels (pypto/seed_kernels.py holds them as the seed writes them), with the options
# the seed gives them.
matrix_multiply = pypto.jit(seed_kernels.matrix_multiply)
fused_linear = pypto.jit(seed_kernels.fused_linear, fusion=['matmul', 'add', 'relu'])
optimized_attention = pypto.jit(seed_kernels.optimized_attention, fusion=True)
# The same attention with one optimisation turned off at a time: the before/after figures of
# fusion and double buffering (results are identical; only speed changes).
optimized_attention_unfused = pypto.jit(seed_kernels.optimized_attention, fusion="off")
optimized_attention_no_prefetch = pypto.jit(seed_kernels.optimized_attention, fusion=True, double_buffer=False)


@pypto.jit
def softmax(x):
    return pypto.softmax(x, -1)


@pypto.jit
def layer_norm(x, w, b):
    return pypto.layer_norm(x, x.shape[-1], w, b, 1e-5)


@pypto.jit
def rms_norm(x, w):
    return pypto.rms_norm(x, x.shape[-1], w, 1e-6)


# The same row-wise ops with fusion asked for: their decomposition (max, sub, exp, sum, div...)
# becomes one pass over each row block instead of one pass over memory per step.
@pypto.jit(fusion=True)
def softmax_fused(x):
    return pypto.softmax(x, -1)


@pypto.jit(fusion=True)
def layer_norm_fused(x, w, b):
    return pypto.layer_norm(x, x.shape[-1], w, b, 1e-5)


@pypto.jit(fusion=True)
def rms_norm_fused(x, w):
    return pypto.rms_norm(x, x.shape[-1], w, 1e-6)


@pypto.jit
def conv2d(x, w):
    return pypto.conv2d(x, w, padding=1)


@pypto.jit
def depthwise_7x7(x, w):
    return torch.nn.functional.conv2d(x, w, padding=3, groups=x.shape[1])


@pypto.jit
def depthwise_3x3(x, w):
    return torch.nn.functional.conv2d(x, w, padding=1, groups=x.shape[1])


@pypto.jit
def mul_add(a, b, c):
    return a * b + c


# One pre-LN transformer block for inference (GPT-2-small sized: d=768, 12 heads, MLP 3072),
# one kernel. The heads are a loop over column blocks, each head's attention on its own slices.
@pypto.jit(fusion=True)
def transformer_block(x, ln1_w, ln1_b, w_qkv, b_qkv, w_o, b_o, ln2_w, ln2_b, w_1, b_1, w_2, b_2):
    S, D = x.shape
    HEAD = 64
    h = pypto.layer_norm(x, D, ln1_w, ln1_b, 1e-5)
    qkv = pypto.matmul(h, w_qkv) + b_qkv
    ctx = pypto.empty((S, D), dtype=x.dtype)  # the heads' outputs in x's dtype (bf16 stays bf16, as torch's)
    for c in range(0, D, HEAD):
        q = qkv[:, c:c+HEAD]
        k = qkv[:, D+c:D+c+HEAD]
        v = qkv[:, 2*D+c:2*D+c+HEAD]
        p = pypto.softmax(pypto.matmul(q, k.transpose(-2, -1)) / pypto.sqrt(HEAD))
        ctx[:, c:c+HEAD] = pypto.matmul(p, v)
    x1 = x + pypto.matmul(ctx, w_o) + b_o
    h2 = pypto.layer_norm(x1, D, ln2_w, ln2_b, 1e-5)
    m = pypto.gelu(pypto.matmul(h2, w_1) + b_1)
    return x1 + pypto.matmul(m, w_2) + b_2


# The scaling case needs a matmul compiled on its own, so it can be timed at 1 and 2 threads.
@pypto.jit
def matmul_scaling(a, b):
    return pypto.matmul(a, b)


# The everyday ops of bench/op_cases.py.
@pypto.jit
def embedding(ids, table):
    return pypto.embedding(ids, table)


@pypto.jit
def topk_values(x):
    return pypto.topk(x, 50, -1)[0]


@pypto.jit
def sort_values(x):
    return pypto.sort(x, -1, descending=True)[0]


@pypto.jit
def cumsum(x):
    return pypto.cumsum(x, -1)


# The memory-bound cases of bench/memory_cases.py.
@pypto.jit
def vector_add(x, y):
    return pypto.add(x, y)


@pypto.jit
def column_sum(x):
    return pypto.sum(x, 0)


@pypto.jit
def row_max(x):
    return pypto.amax(x, -1)


@pypto.jit
def argmax(x):
    return pypto.argmax(x, -1)


@pypto.jit
def log_softmax(x):
    return pypto.log_softmax(x, -1)


# The low-precision cases of bench/lowp_cases.py (bf16 runs `matmul` and `transformer_block`).
# fusion=True, as the transformer block has it: the epilogue (int32 -> f32, the row and column
# scales) runs on each product tile before it is stored, as torch.compile's fused epilogue does,
# instead of one more pass over the product.
@pypto.jit(fusion=True)
def scaled_mm(a, b, sa, sb):
    return pypto.scaled_mm(a, b, sa, sb)
