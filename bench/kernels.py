"""The PyPTO kernels the suite runs. Importing this module imports pypto; cases.py imports it
lazily so that a broken or missing pypto turns into per-case errors, not a crashed suite.
The seed's kernels are copied as the seed document writes them (tests/python/seed)."""
import pypto


@pypto.jit
def matmul(a, b):
    return pypto.matmul(a, b)


# The seed's 64x64 tile matrix multiply (seed §2.1), writing into C.
@pypto.jit
def matrix_multiply(A, B, C):
    M, K = A.shape
    K, N = B.shape

    TILE_M = TILE_N = TILE_K = 64

    for i in range(0, M, TILE_M):
        for j in range(0, N, TILE_N):
            C_tile = pypto.zeros((TILE_M, TILE_N))
            for k in range(0, K, TILE_K):
                A_tile = A[i:i+TILE_M, k:k+TILE_K]
                B_tile = B[k:k+TILE_K, j:j+TILE_N]
                C_tile += A_tile @ B_tile
            C[i:i+TILE_M, j:j+TILE_N] = C_tile


# Seed §4.2.
@pypto.jit(fusion=['matmul', 'add', 'relu'])
def fused_linear(x, w, b):
    return pypto.relu(pypto.add(pypto.matmul(x, w), b))


# Seed §3.1, blocked attention.
def _optimized_attention(Q, K, V, mask=None):
    BLOCK_SIZE = 128
    seq_len = Q.shape[-2]
    output = pypto.empty_like(Q)

    for i in range(0, seq_len, BLOCK_SIZE):
        end_i = min(i+BLOCK_SIZE, seq_len)
        Qi = Q[..., i:end_i, :]

        scores = pypto.matmul(Qi, K.transpose(-2, -1))

        if mask is not None:
            scores += mask[..., i:end_i, :]

        attn = pypto.softmax(scores / pypto.sqrt(K.shape[-1]))
        output[..., i:end_i, :] = pypto.matmul(attn, V)

    return output


optimized_attention = pypto.jit(_optimized_attention, fusion=True)
# The same kernel with one optimisation turned off at a time: the before/after figures of
# fusion and double buffering (results are identical; only speed changes).
optimized_attention_unfused = pypto.jit(_optimized_attention, fusion="off")
optimized_attention_no_prefetch = pypto.jit(_optimized_attention, fusion=True, double_buffer=False)


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
    ctx = pypto.empty((S, D))
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
