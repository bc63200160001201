"""Automatic differentiation of kernels (passes/autodiff + pypto.autograd): gradcheck over the
differentiable ops, the seed kernels against torch autograd, training, the torch rules
(no_grad, double backward, in-place outputs), defvjp, pypto.grad/vjp, and the refusals."""
import numpy as np
import pytest
import torch

import pypto
from pypto import seed_kernels as sk


def rel(a, b):
    a = a.detach().double() if isinstance(a, torch.Tensor) else torch.as_tensor(np.asarray(a, np.float64))
    b = b.detach().double() if isinstance(b, torch.Tensor) else torch.as_tensor(np.asarray(b, np.float64))
    return float((a - b).norm() / b.norm())


def leaves(*shapes, dtype=torch.float64, positive=False, seed=0):
    g = torch.Generator().manual_seed(seed)
    out = []
    for s in shapes:
        t = torch.rand(s, generator=g, dtype=dtype) + 0.5 if positive else torch.randn(s, generator=g, dtype=dtype)
        out.append(t.requires_grad_())
    return out


# --- gradcheck over the ops (float64, interpreter: no compile per kernel) ----------------------

@pypto.jit(backend="interp")
def unary_chain(x):
    a = pypto.exp(x) + pypto.log(x) + pypto.sqrt(x) + pypto.rsqrt(x) + pypto.reciprocal(x)
    b = pypto.tanh(x) * pypto.sigmoid(x) + pypto.erf(x) + pypto.gelu(x) + pypto.gelu(x, approximate="tanh")
    return a + b + pypto.silu(x) + pypto.relu(x - 1.0) + pypto.abs(x - 1.0) - x


@pypto.jit(backend="interp")
def binary_broadcast(a, b, c):
    u = a * b - a / b + pypto.maximum(a, c) - pypto.minimum(b, c)
    return u + pypto.pow(a, 2.5) + pypto.pow(b, c) + pypto.where(a > b, a, c * 2.0)


@pypto.jit(backend="interp")
def reductions(x):
    s = pypto.sum(x, dim=1, keepdim=True) + pypto.mean(x, dim=-1, keepdim=True)
    return x * s + pypto.amax(x, dim=0) + pypto.sum(x) * 0.5


@pypto.jit(backend="interp")
def matmuls(a, b, w):
    batched = pypto.matmul(a, b)                # [2, 3, 4] @ [2, 4, 5]
    bcast = pypto.matmul(a, w.transpose(0, 1))  # [2, 3, 4] @ [4, 5] (w is [5, 4])
    return batched * bcast


@pypto.jit(backend="interp")
def views_and_casts(x):
    top = x[0:2, 1:4]
    low = x[2:4, 0:3]
    return pypto.concat([top * 2.0, low], dim=0) + x[1, 0:3]


@pypto.jit(backend="interp")
def composites(x, w, b):
    return (pypto.softmax(x, -1) + pypto.log_softmax(x * 0.5, -1) + pypto.layer_norm(x, (6,), w, b)
            + pypto.rms_norm(x, (6,), w))


@pypto.jit(backend="interp")
def composites_other_dims(x, w):
    # softmax along a leading dim, norms over two dims, without weight or bias, x feeding several
    return (pypto.softmax(x, 0) * 2.0 + pypto.layer_norm(x, (3, 4), None, None) * w
            + pypto.rms_norm(x, (4,), None) + pypto.log_softmax(x, 1))


@pypto.jit(backend="interp")
def shapes_and_clamps(x, v, alpha):
    r = pypto.reshape(x, 3, 4)                          # a copy through strided loops (x: 12)
    u = pypto.unsqueeze(pypto.permute(r, 1, 0), 0)      # [1, 4, 3]
    s = pypto.squeeze(u, 0) + pypto.broadcast_to(v[0:3], (4, 3))
    mv = pypto.matmul(r, v[0:4])                        # matrix @ vector
    c = pypto.clamp(s, -0.5, 0.5) + pypto.neg(s) * alpha + pypto.floor(s) + (1.0 - s)
    return pypto.sum(c * pypto.amin(s, dim=0)) + pypto.sum(mv) + pypto.mean(x)


@pypto.jit(backend="interp")
def conv(x, w, b):
    return pypto.conv2d(x, w, b, padding=1)


# by name: pytest keeps its parameters to the end of the process, kernels are better not among them
GRADCHECK_CASES = {
    "unary_chain": ([(3, 5)], True),
    "binary_broadcast": ([(3, 4), (4,), (3, 1)], True),
    "reductions": ([(3, 4)], False),
    "matmuls": ([(2, 3, 4), (2, 4, 5), (5, 4)], False),
    "views_and_casts": ([(4, 5)], False),
    "composites": ([(3, 6), (6,), (6,)], False),
    "composites_other_dims": ([(2, 3, 4), (3, 4)], False),
    "conv": ([(1, 2, 5, 5), (3, 2, 3, 3), (3,)], False),
    "shapes_and_clamps": ([(12,), (5,)], False),
}


@pytest.mark.parametrize("name", list(GRADCHECK_CASES))
def test_gradcheck_float64(name):
    kernel = globals()[name]
    shapes, positive = GRADCHECK_CASES[name]
    args = leaves(*shapes, positive=positive)
    if name == "shapes_and_clamps":
        args.append(0.75)  # a run-time scalar: passed through, not differentiated
    assert kernel(*args).grad_fn is not None
    assert torch.autograd.gradcheck(kernel, args, eps=1e-6, atol=1e-7, rtol=1e-5)


def test_float32_matches_torch():
    x, w, b = leaves((3, 6), (6,), (6,), dtype=torch.float32)
    out = composites(x, w, b)
    g = torch.randn_like(out)
    out.backward(g)
    x2, w2, b2 = (t.detach().clone().requires_grad_() for t in (x, w, b))
    ref = (torch.softmax(x2, -1) + torch.log_softmax(x2 * 0.5, -1)
           + torch.nn.functional.layer_norm(x2, (6,), w2, b2) + torch.nn.functional.rms_norm(x2, (6,), w2, 1e-6))
    ref.backward(g)
    assert rel(out, ref) < 1e-5
    for got, want in ((x.grad, x2.grad), (w.grad, w2.grad), (b.grad, b2.grad)):
        assert rel(got, want) < 1e-5


def test_norm_backward_is_one_group_without_zero_fill():
    """The derived backward of layer_norm is its dedicated formula: one group (one fused row
    nest), dx written directly (no zero-filled adjoint), the column sums of dw and db after."""
    from pypto import autograd

    x, w, b = (np.random.default_rng(3).standard_normal(s).astype(np.float32) for s in ((8, 16), (16,), (16,)))
    fn = pypto.jit(lambda x, w, b: pypto.layer_norm(x, (16,), w, b))
    _, pullback = pypto.vjp(fn, x, w, b)
    cot = np.random.default_rng(4).standard_normal((8, 16)).astype(np.float32)
    got = pullback(cot)
    tx, tw, tb = (torch.from_numpy(a).double().requires_grad_() for a in (x, w, b))
    torch.nn.functional.layer_norm(tx, (16,), tw, tb).backward(torch.from_numpy(cot).double())
    for g, want in zip(got, (tx.grad, tw.grad, tb.grad)):
        assert rel(g, want) < 1e-5
    _, entry, _, _ = autograd._kernel_entry(fn, (x, w, b))
    text = str(autograd.derived(entry).program)
    assert text.count("seq layer_norm") == 1 and "TEXPANDS" not in text, text


def test_norm_backward_one_pass_over_rows():
    """The column sums of dw and db are accumulated in dx's row nest, in chunks of row blocks
    (ragged here), which keeps the fused layer-norm statistics: the cotangent is read once, and
    dx's instruction run with the column sums is one fused call."""
    from pypto import autograd

    rng = np.random.default_rng(5)
    x, w, b, cot = (rng.standard_normal(s).astype(np.float32) for s in ((301, 40), (40,), (40,), (301, 40)))
    fn = pypto.jit(lambda x, w, b: pypto.layer_norm(x, x.shape[-1], w, b, 1e-5))
    _, pullback = pypto.vjp(fn, x, w, b)
    got = pullback(cot)
    tx, tw, tb = (torch.from_numpy(a).double().requires_grad_() for a in (x, w, b))
    torch.nn.functional.layer_norm(tx, (40,), tw, tb, 1e-5).backward(torch.from_numpy(cot).double())
    for g, want in zip(got, (tx.grad, tw.grad, tb.grad)):
        assert rel(g, want) < 1e-5
    _, entry, _, _ = autograd._kernel_entry(fn, (x, w, b))
    kernel = autograd.derived(entry).kernel
    tile = kernel.as_text("tile")
    assert tile.count("%d_t[") == 1 and tile.count("TCOLSUM") == 4, tile
    source = kernel.as_text("source")
    # the statistics from x and dx's run: one call reading x in place (rows_grad.hpp)
    assert source.count("layer_norm_x_grad_rows<") == 1 and "layer_norm_rows(" not in source, source


@pytest.mark.parametrize("rows,cols", [(37, 300), (515, 2048), (130, 4096)])
def test_layer_norm_backward_from_x_in_place(rows, cols):
    """The derived backward of layer_norm recomputes the statistics from x and runs dx's run in
    one call per row block, reading x and dy in place (rows_grad.hpp, layer_norm_x_grad_rows):
    ragged blocks, rows of 2 to 4 KiB floats, both threads. Every element of dx, dw and db is
    written (outputs NaN before the run), against float64 torch (bit for bit the instructions:
    tests/cpp/test_cpu_rows_grad_x.cpp)."""
    from pypto import autograd

    rng = np.random.default_rng(rows)
    x = (rng.standard_normal((rows, cols)) * 3 + 1.5).astype(np.float32)
    w, b = (rng.standard_normal(cols).astype(np.float32) for _ in range(2))
    cot = rng.standard_normal((rows, cols)).astype(np.float32)
    fn = pypto.jit(lambda x, w, b: pypto.layer_norm(x, x.shape[-1], w, b, 1e-5))
    _, entry, _, _ = autograd._kernel_entry(fn, (x, w, b))
    d = autograd.derived(entry)
    assert "layer_norm_x_grad_rows<" in d.kernel.as_text("source")
    ins = [cot if role == "cotangent" else (x, w, b)[i] for role, i in d.args]
    outs = [np.full((rows, cols), np.nan, np.float32), np.full(cols, np.nan, np.float32),
            np.full(cols, np.nan, np.float32)]
    d.kernel.run(ins + outs, [])
    tx, tw, tb = (torch.from_numpy(a).double().requires_grad_() for a in (x, w, b))
    torch.nn.functional.layer_norm(tx, (cols,), tw, tb, 1e-5).backward(torch.from_numpy(cot).double())
    for g, want in zip(outs, (tx.grad, tw.grad, tb.grad)):
        assert np.isfinite(g).all() and rel(g, want) < 1e-5


def test_torch_backward_reads_saved_matmul_products():
    """Through torch autograd the forward runs a variant that also returns its matmul products,
    and the backward reads them instead of recomputing: 4 matmuls (the gradients), not 5."""
    from pypto import autograd

    @pypto.jit
    def mlp(x, w1, w2):
        return pypto.matmul(pypto.relu(pypto.matmul(x, w1)), w2)

    x, w1, w2 = leaves((8, 16), (16, 32), (32, 4), dtype=torch.float32, seed=5)
    out = mlp(x, w1, w2)
    g = torch.randn_like(out)
    out.backward(g)
    ref = [t.detach().double().requires_grad_() for t in (x, w1, w2)]
    (torch.relu(ref[0] @ ref[1]) @ ref[2]).backward(g.double())
    for got, want in zip((x.grad, w1.grad, w2.grad), ref):
        assert rel(got, want.grad) < 1e-5
    _, entry, _, _ = autograd._kernel_entry(mlp, (x, w1, w2))
    saving, recomputing = autograd.derived(entry, save=True), autograd.derived(entry)
    assert saving.forward is not None and recomputing.forward is None
    assert str(saving.program).count("TMATMUL") == 4 and str(recomputing.program).count("TMATMUL") == 5


def test_torch_backward_reads_saved_loop_values():
    """A value the forward computes in a loop (attention heads writing their slices), a layer norm
    and a GELU are saved by the forward, not replayed by the backward: the backward's only softmax
    is the one its reverse sweep of the heads needs, and it holds no layer norm or GELU."""
    from pypto import autograd

    @pypto.jit
    def block(x, wq, w1):
        S, D = x.shape
        q = pypto.matmul(pypto.layer_norm(x, D), wq)
        ctx = pypto.empty((S, D), dtype=x.dtype)
        for c in range(0, D, 4):
            p = pypto.softmax(pypto.matmul(q[:, c:c+4], q[:, c:c+4].transpose(-2, -1)))
            ctx[:, c:c+4] = pypto.matmul(p, q[:, c:c+4])
        return pypto.matmul(pypto.gelu(pypto.matmul(ctx, w1)), w1.transpose(0, 1))

    x, wq, w1 = leaves((16, 8), (8, 8), (8, 12), dtype=torch.float32, seed=7)
    out = block(x, wq, w1)
    g = torch.randn(out.shape, generator=torch.Generator().manual_seed(8))
    out.backward(g)
    ref = [t.detach().double().requires_grad_() for t in (x, wq, w1)]
    q = torch.nn.functional.layer_norm(ref[0], (8,)) @ ref[1]
    parts = [torch.softmax(q[:, c:c+4] @ q[:, c:c+4].T, -1) @ q[:, c:c+4] for c in (0, 4)]
    (torch.nn.functional.gelu(torch.cat(parts, 1) @ ref[2]) @ ref[2].T).backward(g.double())
    # float32 through a layer norm's backward (mean subtraction cancels) and two softmaxes: x's
    # gradient lands 2e-6..1e-5 from float64 over upstream seeds and CPUs; a wrong term is >1e-2.
    for got, want in zip((x.grad, wq.grad, w1.grad), ref):
        assert rel(got, want.grad) < 1e-4
    _, entry, _, _ = autograd._kernel_entry(block, (x, wq, w1))
    saving, recomputing = autograd.derived(entry, save=True), autograd.derived(entry)
    text, again = str(saving.program), str(recomputing.program)
    assert text.count("SOFTMAX") == 1 and again.count("SOFTMAX") == 2
    assert "LAYER_NORM" not in text and "TGELU" not in text
    assert "LAYER_NORM" in again and "TGELU" in again
    # Gradients added into an adjoint (w1's second use, each head's slice of q's) are summed by
    # the matmul itself (TMATMUL_ACC), not through a temporary product and an add.
    assert text.count("TMATMUL_ACC") >= 2


def test_mixed_dtypes_match_torch():
    @pypto.jit(backend="interp")
    def mixed(a, b):
        return pypto.exp(a) * b + pypto.matmul(a, pypto.transpose(b, 0, 1))

    a, = leaves((3, 3), dtype=torch.float32)
    b, = leaves((3, 3), seed=1)
    out = mixed(a, b)
    assert out.dtype == torch.float64
    out.sum().backward()
    a2, b2 = a.detach().double().requires_grad_(), b.detach().clone().requires_grad_()
    (torch.exp(a2) * b2 + a2 @ b2.T).sum().backward()
    assert a.grad.dtype == torch.float32
    assert rel(a.grad, a2.grad) < 1e-6 and rel(b.grad, b2.grad) < 1e-6


def test_argument_updated_in_place():
    @pypto.jit(backend="interp")
    def add_into(x, y):
        x[0:2, :] += y * 3.0

    leaf, y = leaves((4, 3), (2, 3))
    x = leaf * 1.0  # not a leaf: torch lets a kernel update it in place
    version = x._version
    add_into(x, y)
    assert x._version > version and x.grad_fn is not None
    g = torch.randn(4, 3, dtype=torch.float64)
    x.backward(g)
    assert rel(leaf.grad, g) < 1e-15 and rel(y.grad, g[0:2] * 3.0) < 1e-15


def test_cast_matches_torch():
    @pypto.jit(backend="interp")
    def widen(x):
        return pypto.cast(pypto.exp(pypto.cast(x, pypto.float64)) * 3.0, pypto.float32)

    (x,) = leaves((4, 5), dtype=torch.float32)
    widen(x).sum().backward()
    assert rel(x.grad, torch.exp(x.detach().double()) * 3.0) < 1e-6


# --- the seed kernels against torch autograd (CPU backend) ------------------------------------

fused_linear = pypto.jit(sk.fused_linear)
attention = pypto.jit(sk.optimized_attention)
matrix_multiply = pypto.jit(sk.matrix_multiply)
conv2d_memopt = pypto.jit(sk.conv2d_memopt)


def check_against_torch(kernel, ref_fn, args, tol):
    out = kernel(*args)
    g = torch.randn_like(out)
    out.backward(g)
    copies = [a.detach().clone().requires_grad_() for a in args]
    ref = ref_fn(*copies)
    ref.backward(g)
    assert rel(out, ref) < tol
    for a, c in zip(args, copies):
        assert rel(a.grad, c.grad) < tol


@pytest.mark.parametrize("dtype,tol", [(torch.float64, 1e-10), (torch.float32, 1e-5)])
def test_seed_fused_linear(dtype, tol):
    args = leaves((70, 50), (50, 40), (40,), dtype=dtype)
    check_against_torch(fused_linear, lambda x, w, b: torch.relu(x @ w + b), args, tol)


@pytest.mark.parametrize("dtype,tol", [(torch.float64, 1e-10), (torch.float32, 1e-5)])
def test_seed_attention(dtype, tol):
    args = leaves((2, 150, 16), (2, 150, 16), (2, 150, 16), dtype=dtype)
    ref = lambda q, k, v: torch.softmax(q @ k.transpose(-2, -1) / 4.0, -1) @ v  # noqa: E731
    check_against_torch(attention, ref, args, tol)


def test_seed_conv2d():
    # the seed's conv2d_memopt makes its output with pypto.zeros (float32), so float32 only
    x, w, b = leaves((2, 3, 7, 7), (4, 3, 3, 3), (4, 1, 1), dtype=torch.float32)
    ref = lambda x, w, b: torch.nn.functional.conv2d(x, w, padding=1) + b  # noqa: E731
    check_against_torch(conv2d_memopt, ref, [x, w, b], 1e-5)


@pytest.mark.parametrize("dtype,tol", [(torch.float64, 1e-10), (torch.float32, 1e-5)])
def test_conv2d_kernel(dtype, tol):
    @pypto.jit
    def conv_bias(x, w, b):
        return pypto.conv2d(x, w, b, padding=1)

    args = leaves((2, 3, 9, 9), (4, 3, 3, 3), (4,), dtype=dtype)
    ref = lambda x, w, b: torch.nn.functional.conv2d(x, w, b, padding=1)  # noqa: E731
    check_against_torch(conv_bias, ref, args, tol)


def test_seed_matrix_multiply_tile_loops():
    # The seed's tile loops: disjoint output tiles, a loop-carried `C_tile += A_tile @ B_tile`,
    # ragged edges, and the result written into the argument C (torch's in-place rules).
    # pypto.zeros makes a float32 C_tile, so the product itself is float32: tolerance 1e-5.
    A, B = leaves((100, 70), (70, 90), dtype=torch.float32)
    C = torch.full((100, 90), float("nan"))
    assert matrix_multiply(A, B, C) is None
    assert C.grad_fn is not None and C.requires_grad
    g = torch.randn(100, 90)
    C.backward(g)
    A2, B2 = (t.detach().clone().requires_grad_() for t in (A, B))
    ref = A2 @ B2
    ref.backward(g)
    assert rel(C, ref) < 1e-5 and rel(A.grad, A2.grad) < 1e-5 and rel(B.grad, B2.grad) < 1e-5
    text = matrix_multiply.lower_backward(A.detach(), B.detach(), C.detach()).as_text("tensor")
    assert "TMATMUL" in text and "for " in text  # the backward keeps the tile loops
    leaf = torch.zeros(100, 90, requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf"):
        matrix_multiply(A, B, leaf)


def test_tile_loop_float64_accumulator():
    @pypto.jit
    def tiled(A, B, C):
        for i in range(0, A.shape[0], 32):
            for j in range(0, B.shape[1], 32):
                acc = pypto.zeros((32, 32), dtype=A.dtype)
                for k in range(0, A.shape[1], 32):
                    acc += A[i:i + 32, k:k + 32] @ B[k:k + 32, j:j + 32]
                C[i:i + 32, j:j + 32] = acc
    A, B = leaves((50, 40), (40, 45))
    C = torch.empty(50, 45, dtype=torch.float64)
    tiled(A, B, C)
    C.sum().backward()
    A2, B2 = (t.detach().clone().requires_grad_() for t in (A, B))
    (A2 @ B2).sum().backward()
    assert rel(A.grad, A2.grad) < 1e-10 and rel(B.grad, B2.grad) < 1e-10


def test_loop_carried_values_on_a_tape():
    @pypto.jit(backend="interp")
    def running_product(x):
        p = pypto.ones((4,), dtype=x.dtype)
        for i in range(x.shape[0]):
            p = p * x[i]
        return p

    (x,) = leaves((3, 4))
    assert torch.autograd.gradcheck(running_product, (x,))


@pypto.jit
def flash_attention(Q, K, V):
    # Triton-style: online softmax over key blocks, the running max, sum and output rescaled
    S, D = Q.shape
    out = pypto.empty_like(Q)
    for i in range(0, S, 32):
        q = Q[i:i + 32, :]
        m = pypto.full((32, 1), -1e30, dtype=Q.dtype)
        l = pypto.zeros((32, 1), dtype=Q.dtype)
        acc = pypto.zeros((32, D), dtype=Q.dtype)
        for j in range(0, S, 32):
            s = pypto.matmul(q, K[j:j + 32, :].transpose(0, 1)) * 0.25
            m_new = pypto.maximum(m, pypto.amax(s, dim=-1, keepdim=True))
            p = pypto.exp(s - m_new)
            alpha = pypto.exp(m - m_new)
            l = l * alpha + pypto.sum(p, dim=-1, keepdim=True)
            acc = acc * alpha + pypto.matmul(p, V[j:j + 32, :])
            m = m_new
        out[i:i + 32, :] = acc / l
    return out


@pytest.mark.parametrize("dtype,tol", [(torch.float64, 1e-10), (torch.float32, 1e-5)])
def test_flash_attention_online_softmax(dtype, tol):
    args = leaves((96, 16), (96, 16), (96, 16), dtype=dtype)
    ref = lambda q, k, v: torch.softmax(q @ k.T * 0.25, -1) @ v  # noqa: E731
    check_against_torch(flash_attention, ref, args, tol)


def test_mlp_training_follows_torch():
    @pypto.jit
    def layer(x, w, b):
        return pypto.relu(pypto.matmul(x, w) + b)

    @pypto.jit
    def head(x, w, b):
        return pypto.matmul(x, w) + b

    gen = torch.Generator().manual_seed(1)
    X = torch.randn(64, 8, generator=gen)
    Y = torch.randn(64, 2, generator=gen)
    init = [torch.randn(8, 16, generator=gen) * 0.3, torch.zeros(16) + 0.1,
            torch.randn(16, 2, generator=gen) * 0.3, torch.zeros(2)]

    def train(fwd1, fwd2):
        params = [p.clone().requires_grad_() for p in init]
        opt = torch.optim.SGD(params, lr=0.05)
        losses = []
        for _ in range(200):
            opt.zero_grad()
            loss = ((fwd2(fwd1(X, params[0], params[1]), params[2], params[3]) - Y) ** 2).mean()
            loss.backward()
            opt.step()
            losses.append(loss.item())
        return np.array(losses)

    ours = train(layer, head)
    ref = train(lambda x, w, b: torch.relu(x @ w + b), lambda x, w, b: x @ w + b)
    assert ref[-1] < 0.8 * ref[0]  # it learns
    assert np.max(np.abs(ours - ref) / ref) < 1e-4


def test_implicit_inputs_get_gradients():
    class Linear:
        def __init__(self):
            self.w = torch.randn(4, 3, dtype=torch.float64, requires_grad=True)

        @pypto.jit(backend="interp")
        def __call__(self, x):
            return pypto.tanh(pypto.matmul(x, self.w))

    layer = Linear()
    x = torch.randn(5, 4, dtype=torch.float64)  # only the implicit weight requires grad
    layer(x).sum().backward()
    w2 = layer.w.detach().clone().requires_grad_()
    torch.tanh(x @ w2).sum().backward()
    assert rel(layer.w.grad, w2.grad) < 1e-12


# --- the torch rules ------------------------------------------------------------------------------

def test_no_grad_records_nothing():
    x, w, b = leaves((8, 4), (4, 3), (3,), dtype=torch.float32)
    with torch.no_grad():
        out = fused_linear(x, w, b)
    assert out.grad_fn is None and not out.requires_grad


def test_double_backward_is_a_clear_error():
    x, w, b = leaves((8, 4), (4, 3), (3,), dtype=torch.float32)
    out = fused_linear(x, w, b)
    with pytest.raises(RuntimeError, match="double backward"):
        torch.autograd.grad(out.sum(), x, create_graph=True)


def test_torch_function_and_defvjp():
    @pypto.jit(backend="interp")
    def scale(x, w):
        return x * w

    calls = []

    @scale.defvjp
    def scale_backward(x, w, out, grad):
        calls.append(1)
        return grad * w * 10.0, None

    x, w = leaves((3, 4), (4,))
    fn = pypto.torch_function(scale)
    fn(x, w).sum().backward()
    assert calls and torch.allclose(x.grad, (w * 10.0).expand(3, 4).detach())
    assert w.grad is None


# --- NumPy users ----------------------------------------------------------------------------------

def test_grad_and_vjp_for_numpy():
    @pypto.jit(backend="interp")
    def loss(x, w):
        return pypto.sum(pypto.tanh(pypto.matmul(x, w)))

    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((5, 4)), rng.standard_normal((4, 3))
    gx, gw = pypto.grad(loss, argnums=(0, 1))(x, w)
    t = 1 - np.tanh(x @ w) ** 2
    assert isinstance(gx, np.ndarray)
    assert rel(gx, t @ w.T) < 1e-12 and rel(gw, x.T @ t) < 1e-12
    out, pullback = pypto.vjp(fused_linear, x, w, rng.standard_normal(3))
    cot = rng.standard_normal(out.shape)
    dx, dw, db = pullback(cot)
    mask = (x @ w + 0) > -np.inf
    assert dx.shape == x.shape and db.shape == (3,) and mask.all()


# --- refusals -------------------------------------------------------------------------------------

def test_non_differentiable_kernel_raises_at_the_call():
    # a value carried across a loop whose trip count is known only at run time: no tape to size
    @pypto.jit(backend="interp")
    def running_product(x, n):
        p = pypto.ones((4,), dtype=x.dtype)
        for i in range(n):
            p = p * x[i]
        return p

    (x,) = leaves((3, 4))
    with pytest.raises(pypto.PyptoError, match=r"defvjp") as e:
        running_product(x, 3)
    assert "test_autograd.py" in str(e.value) and "for i in range(n)" in str(e.value)
    running_product(x.detach(), 3)  # without grad it runs


def test_linear_backward_is_two_products_written_in_place():
    # y = x @ W.T + b: dW = g^T x is made in W's layout and written straight into its gradient (no
    # zero fill, no transposed add), and the cotangent is read where it is (no copy).
    from pypto.autograd import _kernel_entry, derived
    lin = torch.nn.Linear(64, 96)
    kernel, entry, _, _ = _kernel_entry(pypto.jit(lin), (torch.randn(48, 64),))
    text = str(derived(entry).program)
    assert text.count("TMATMUL") == 2 and "TEXPANDS" not in text and "TADD" not in text
    x = torch.randn(48, 64, dtype=torch.float64, requires_grad=True)
    lin = lin.double()
    dy = torch.randn(48, 96, dtype=torch.float64)
    pypto.jit(lin)(x).backward(dy)
    got = [t.grad.clone() for t in (x, lin.weight, lin.bias)]
    for t in (x, lin.weight, lin.bias):
        t.grad = None
    lin(x).backward(dy)
    for a, t in zip(got, (x, lin.weight, lin.bias)):
        assert rel(a, t.grad) < 1e-12


def test_reshape_backward_adds_rows_without_snapshots():
    # A reshape is a loop of row copies, one window per iteration: its backward only moves each
    # window's gradient back (no snapshot copy and zero fill per iteration)...
    from pypto.autograd import _kernel_entry, derived

    @pypto.jit(backend="interp")
    def f(x, w):
        return torch.sin(x.reshape(6, 4, 5).reshape(24, 5) @ w).reshape(2, 3, 4, 2)

    x, w = leaves((6, 20), (5, 2))
    kernel, entry, _, _ = _kernel_entry(f, (x.detach(), w.detach()))
    text = str(derived(entry).program)
    # ... and the first window of each gradient is written, not added into a zero fill.
    assert "for %" in text and "TEXPANDS" not in text
    dy = torch.randn(2, 3, 4, 2, dtype=torch.float64)
    got = torch.autograd.grad(f(x, w), (x, w), dy)
    ref = torch.autograd.grad(torch.sin(x.reshape(24, 5) @ w).reshape(2, 3, 4, 2), (x, w), dy)
    for a, b in zip(got, ref):
        assert rel(a, b) < 1e-12


def test_residual_after_biased_linear_reads_the_whole_copy_chain():
    """layer_norm(linear(h, W, b) + x): the adjoint passes through two additions (d_t = d_t1 =
    d_t2, the bias's sum read in between); the clean-up forwards those copies in two passes, and
    a read of the first copy must follow the chain to its end (it read a never-written temp, so
    BERT's gradients were wrong by 100%)."""
    h, x, W, b = leaves((3, 8), (3, 4), (4, 8), (4,), seed=11)
    k = pypto.jit(lambda h, x, W, b: torch.nn.functional.layer_norm(torch.nn.functional.linear(h, W, b) + x, (4,)),
                  backend="interp")
    out = k(h, x, W, b)
    g = torch.randn(out.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(12))
    got = torch.autograd.grad(out, (h, x, W, b), g)
    ref = [t.detach().clone().requires_grad_() for t in (h, x, W, b)]
    want = torch.autograd.grad(torch.nn.functional.layer_norm(torch.nn.functional.linear(ref[0], ref[2], ref[3])
                                                              + ref[1], (4,)), ref, g)
    for a, w in zip(got, want):
        assert rel(a, w) < 1e-12
