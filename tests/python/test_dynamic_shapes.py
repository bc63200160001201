"""Dynamic shapes: one compiled kernel for every extent of a dynamic dimension.

A dynamic dim is a dimension symbol in the IR (bound from the argument's shape at run time);
tiling emits full tiles plus ragged edges over it. Asked for with dynamic=True / {arg: [dims]} /
pypto.mark_dynamic, or automatically when a dim is seen with a second extent."""
import random

import numpy as np
import pytest
import torch

import pypto
from pypto import seed_kernels
from pypto_testutil import jit, poisoned, rand, rel_err


def softmax_ref(x):
    x = np.asarray(x, np.float64)
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def layer_norm_ref(x, w, b, eps=1e-5):
    x = np.asarray(x, np.float64)
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b


def softmax_rows(x):
    return pypto.softmax(x, -1)


def exp_plus_one(x):
    return pypto.exp(x) + 1.0


def test_twenty_sequence_lengths_compile_at_most_twice(backend):
    """Automatic dynamic: the first length compiles a static kernel, the second a dynamic one that
    every later length reuses (lengths 1, primes and sizes below a tile included)."""
    kernel = jit(softmax_rows, backend)
    rng = random.Random(13)
    lengths = [1, 2, 3, 5, 7, 13, 31, 64, 97, 127] + [rng.randrange(1, 300) for _ in range(10)]
    if str(backend) == "interp":
        lengths = lengths[:8]
    for n in lengths:
        x = rand(n, 48)
        assert rel_err(kernel(x), softmax_ref(x)) < 1e-6, n
    info = kernel.cache_info()
    assert info.size <= 2, info
    assert {"x": [0]} in info.dynamic
    assert any("automatic" in w for w in info.why)


def test_automatic_dynamic_after_a_change_of_rank(backend):
    """Dims learned from two matrices do not apply to a vector or a 3-d array passed later to
    the same kernel (they indexed past its shape): each new rank compiles for itself."""
    kernel = jit(lambda a, b: a * b + 1.0, backend)
    for shape in [(37, 100), (6, 45), (300,), (5, 7), (2, 3, 4), (400,)]:
        a, b = rand(*shape), rand(*shape)
        np.testing.assert_array_equal(kernel(a, b), a * b + np.float32(1.0), err_msg=str(shape))
    assert {"a": [0, 1], "b": [0, 1]} in kernel.cache_info().dynamic


def test_dynamic_true_compiles_once(backend):
    @pypto.jit(backend=str(backend), dynamic=True)
    def norm(x, w, b):
        return pypto.layer_norm(x, [x.shape[-1]], w, b, 1e-5)

    w, b = rand(40, dtype=np.float64), rand(40, dtype=np.float64)
    for n in (3, 17, 70):
        x = rand(n, 40, dtype=np.float64)
        assert rel_err(norm(x, w, b), layer_norm_ref(x, w, b)) < 1e-7  # (eps is an f32 constant)
    assert norm.cache_size == 1
    assert norm.cache_info().why == ["dynamic=True"]


def test_dynamic_and_static_variants_give_identical_results():
    """The same program with the leading dim a symbol or a constant: bit-identical results."""
    def block(x, w, b):
        h = pypto.relu(pypto.matmul(x, w) + b)
        return pypto.rms_norm(h, [h.shape[-1]], None, 1e-6) * 0.5 + pypto.softmax(h, -1)

    static = pypto.jit(block, dynamic=False)
    dynamic = pypto.jit(block, dynamic={"x": [0]})
    w, b = rand(24, 40), rand(40)
    for n in (1, 9, 130):
        x = rand(n, 24)
        np.testing.assert_array_equal(dynamic(x, w, b), static(x, w, b))
    assert dynamic.cache_size == 2  # n = 1 stays static (a size-1 dim keeps its meaning)
    assert static.cache_size == 3


def test_broadcasting_of_size_one_dims_stays_correct():
    @pypto.jit(dynamic=True)
    def f(x, row, col):
        return x * row + col

    for n in (5, 33):
        x, row, col = rand(n, 12), rand(1, 12), rand(n, 1)
        assert rel_err(f(x, row, col), x * row + col) < 1e-6
    # a size-1 dim of x broadcasts against col's n rows in its own variant
    x1, row, col = rand(1, 12), rand(1, 12), rand(6, 1)
    assert rel_err(f(x1, row, col), x1 * row + col) < 1e-6


def test_matmul_dynamic_m_k_n(backend):
    fused_linear = jit(seed_kernels.fused_linear, backend, dynamic=True)
    for m, k, n in [(5, 7, 3), (70, 33, 65), (1, 3, 2)] if str(backend) == "interp" else \
            [(5, 7, 3), (70, 33, 65), (129, 200, 130), (1, 3, 2)]:
        x, w, b = rand(m, k, dtype=np.float64), rand(k, n, dtype=np.float64), rand(n, dtype=np.float64)
        assert rel_err(fused_linear(x, w, b), np.maximum(x @ w + b, 0)) < 1e-12, (m, k, n)
    assert fused_linear.cache_size <= 2  # the all-sizes-above-1 variant, and the m = 1 one


def test_seed_tile_matmul_writes_a_dynamic_output_argument():
    kernel = pypto.jit(seed_kernels.matrix_multiply, dynamic={"A": [0], "C": [0]})
    B = rand(50, 70, dtype=np.float64)
    for m in (3, 64, 150):
        A = rand(m, 50, dtype=np.float64)
        C = poisoned(m, 70, dtype=np.float64)
        kernel(A, B, C)
        assert rel_err(C, A @ B) < 1e-6  # (the seed's C_tile is float32)
    assert kernel.cache_size == 1


def test_triton_style_matmul_with_block_arguments_and_dynamic_dims():
    from test_meta_params import tiled_matmul  # Triton's tutorial kernel, as the meta-parameter test has it

    kernel = pypto.jit(tiled_matmul, dynamic=True)
    for m, k, n in [(70, 45, 33), (16, 9, 100), (131, 64, 7)]:
        A, B = rand(m, k, dtype=np.float64), rand(k, n, dtype=np.float64)
        C = poisoned(m, n, dtype=np.float64)
        kernel(A, B, C, 32, 16, 8)
        assert rel_err(C, A @ B) < 1e-12
    info = kernel.cache_info()
    assert info.size == 1 and sorted(info.specialised) == ["BLOCK_K", "BLOCK_M", "BLOCK_N"]


def test_seed_attention_dynamic_sequence(backend):
    attention = jit(seed_kernels.optimized_attention, backend, dynamic={"Q": [1], "K": [1], "V": [1]})
    lengths = (5, 130) if str(backend) == "interp" else (5, 130, 257)
    for s in lengths:
        q, k, v = (rand(2, s, 16, dtype=np.float64) for _ in range(3))
        sc = q @ k.transpose(0, 2, 1) / np.sqrt(16)
        assert rel_err(attention(q, k, v), softmax_ref(sc) @ v) < 1e-12, s
    assert attention.cache_size == 1


def test_mark_dynamic():
    kernel = pypto.jit(exp_plus_one, dynamic=False)
    x = pypto.mark_dynamic(rand(40, 8), 0)
    assert rel_err(kernel(x), np.exp(x) + 1) < 1e-6
    assert kernel.cache_info().dynamic == [{"x": [0]}]
    assert kernel.cache_info().why == ["pypto.mark_dynamic"]
    with pytest.raises(pypto.PyptoError, match="out of range"):
        pypto.mark_dynamic(x, 2)


def test_dim_needed_as_python_value_is_specialised():
    @pypto.jit(dynamic=True)
    def rows(x):
        out = pypto.zeros(x.shape)
        for i in pypto.static_range(x.shape[0]):  # needs the extent at trace time
            out[i, :] = x[i, :] * float(i + 1)
        return out

    x = rand(3, 20)
    assert rel_err(rows(x), x * np.arange(1, 4)[:, None]) < 1e-6
    info = rows.cache_info()
    assert info.dynamic == [{"x": [1]}]
    assert ("x", 0) in info.static_dims and "static_range" in info.static_dims[("x", 0)]


def test_interpreter_and_cpu_agree_on_a_dynamic_program():
    def f(x, y):
        return pypto.softmax(x * 2.0 + y, -1).sum(-1)

    ker = {b: pypto.jit(f, backend=b, dynamic=True) for b in ("interp", "cpu")}
    for n in (1, 6, 67):
        x, y = rand(n, 30), rand(n, 30)
        a, c = ker["interp"](x, y), ker["cpu"](x, y)
        assert rel_err(c, a) < 1e-6 and rel_err(a, softmax_ref(2 * x + y).sum(-1)) < 1e-6


def test_text_form_round_trips_and_arguments_must_agree():
    """The IR prints a dynamic dim as its symbol; two arguments sharing a symbol must agree."""
    b = pypto._C.Builder("add")
    x = b.add_param("x", pypto._C.DType.F32, [1, 16], ["S", ""])
    y = b.add_param("y", pypto._C.DType.F32, [1, 16], ["S", ""])
    prog = b.finish([b.binary(pypto._C.Opcode.TADD, x, y)])
    text = prog.text()
    assert "%x: f32[%S, 16]" in text and "%y: f32[%S, 16]" in text
    assert pypto.isa.parse(text).text() == text
    k = pypto._C.Kernel(prog, "cpu")
    a, c = rand(9, 16), rand(9, 16)
    out = poisoned(*k.output_shapes([[9, 16], [9, 16]])[0])
    k.run([a, c, out], [])
    assert rel_err(out, a + c) < 1e-6
    with pytest.raises(pypto.PyptoError, match=r"argument 2 \('y'\).*dynamic dimension %S of argument 1 \('x'\)"):
        k.run([a, rand(7, 16), poisoned(9, 16)], [])


def linear(x, w):
    return x @ w


def test_shape_errors_see_the_traced_extents():
    """Dynamic dims keep NumPy's shape rules: the checks see the extents being traced."""
    add = pypto.jit(exp_plus_one_of_sum, dynamic=True)
    with pytest.raises(pypto.PyptoError, match="cannot be broadcast"):
        add(rand(3, 4), rand(5, 4))
    mm = pypto.jit(linear, dynamic=True)
    x, w = rand(4, 5, dtype=np.float64), rand(5, 7, dtype=np.float64)
    assert rel_err(mm(x, w), x @ w) < 1e-12
    with pytest.raises(pypto.PyptoError, match=r"inner dimensions do not match: \(4, 5\) @ \(6, 7\)"):
        mm(rand(4, 5), rand(6, 7))


def exp_plus_one_of_sum(x, y):
    return pypto.exp(x + y) + 1.0


def shifted_sum(x, y):
    return x[1:] + y


def test_two_dynamic_dims_broadcast_are_checked_at_run_time(backend):
    """x[1:] and y have equal extents when traced but different symbols: a later call where they
    differ raises (naming both extents and the kernel line) before anything runs."""
    kernel = jit(shifted_sum, backend, dynamic=True)
    for n in (6, 14, 3):
        x, y = rand(n, dtype=np.float64), rand(n - 1, dtype=np.float64)
        assert rel_err(kernel(x, y), x[1:] + y) < 1e-15
    with pytest.raises(pypto.PyptoError, match=r"extents 9 and 3 cannot be broadcast together.*x\[1:\] \+ y"):
        kernel(rand(10, dtype=np.float64), rand(3, dtype=np.float64))  # (float32 would trace anew)
    assert kernel.cache_size == 1


@pytest.mark.parametrize("backend", ["interp", "cpu"])
def test_concat_along_a_dynamic_dimension(backend):
    """torch.cat of parts with dynamic rows: the result's rows are the sum of theirs, one kernel
    for every length (its size was once the sum of the static bounds: a 64 GB allocation)."""
    import torch
    k = pypto.jit(lambda x, y: torch.cat([x, y * 2, x], 0) + 1, backend=backend, dynamic={"x": [0], "y": [0]})
    for n, m in ((5, 3), (7, 2), (4, 4)):
        x, y = torch.randn(n, 4), torch.randn(m, 4)
        assert torch.equal(k(x, y), torch.cat([x, y * 2, x], 0) + 1)
    assert k.cache_info().size == 2  # (4, 4): equal extents share a symbol, another variant


def test_stack_of_parts_with_dynamic_rows():
    """torch.stack keeps the parts' dynamic extents (its result had a dynamic dimension with no
    extent: an internal error), empty parts included."""
    import torch
    k = pypto.jit(lambda a, b: torch.stack([a, b * 2], 1) + 1, backend="interp", dynamic={"a": [0], "b": [0]})
    for n in (5, 7, 0):
        a, b = torch.randn(n, 3), torch.randn(n, 3)
        assert torch.equal(k(a, b), torch.stack([a, b * 2], 1) + 1)


def test_tril_triu_of_dynamic_extents():
    """tril / triu of a tensor whose rows or columns are dynamic (a causal mask over the sequence
    length): one kernel for every extent, any diagonal offset, a batch dim in front, gradients;
    extents of 1 and wider than tall included."""
    import torch

    def tri(x):
        return torch.tril(x, -1) * 2.0 + torch.triu(x, 2) - torch.tril(x)

    for backend in ("cpu", "interp"):
        kern = pypto.jit(tri, dynamic={"x": [1, 2]}, backend=backend)
        for n, m in ((5, 7), (9, 4), (1, 1), (3, 12)):
            x = torch.randn(2, n, m, dtype=torch.float64)
            assert rel_err(kern(x).numpy(), tri(x).numpy()) < 1e-15
        x = torch.randn(2, 6, 8, dtype=torch.float64, requires_grad=True)
        g, = torch.autograd.grad(kern(x).sum(), x)
        r, = torch.autograd.grad(tri(x).sum(), x)
        assert rel_err(g.numpy(), r.numpy()) < 1e-15


def flips(x):
    return pypto.flip(x, [0, 1]), pypto.flip(x, [1])


def test_flip_along_dynamic_dims(backend):
    """flip's reversed index spans a dynamic dim's run-time extent (an arange of dynamic length),
    not the bound: one kernel for every shape (argmax along a dynamic dim: test_arg_extremes.py)."""
    kernel = jit(flips, backend, dynamic={"x": [0, 1]})
    for shape in [(3, 5), (7, 2), (2, 9), (16, 33)]:
        x = rand(*shape)
        both, last = kernel(x)
        np.testing.assert_array_equal(both, x[::-1, ::-1])
        np.testing.assert_array_equal(last, x[:, ::-1])
    assert kernel.cache_size == 1


def position_ids(mask, x):
    """Hugging Face's position ids from an attention mask (a running count of the real tokens),
    a reversed running product, and the order of a row."""
    pos = mask.cumsum(-1) - 1
    back = pypto.cumprod(pypto.flip(x, [1]), 1)
    return pos, back, pypto.argsort(x, -1, descending=True)


def test_running_sums_and_sorts_along_a_dynamic_dim(backend):
    """TSCAN and TARGSORT along a dynamic last dim, one kernel for every extent: a tile width chosen
    at run time (rows of up to 256 or 4096 elements), wider rows a forward scan takes in blocks of
    4096 columns, each starting from the running total of the blocks before it (the same bits as
    one scan: integers exact, a product's rounding the interpreter's), and a sort in tiles of up to
    65536 or 2^24 elements."""
    import torch
    kernel = jit(position_ids, backend, dynamic={"mask": [0, 1], "x": [0, 1]})
    static = jit(position_ids, backend, dynamic=False)  # a static row of 70001: blocks too
    for rows, cols in [(3, 7), (5, 300), (2, 5000), (4, 256), (3, 4096), (2, 70001)]:
        mask = (np.random.default_rng(cols).random((rows, cols)) > 0.3).astype(np.int64)
        x = rand(rows, cols) * 0.1 + 1.0
        for k in [kernel, static] if cols > 65536 else [kernel]:
            pos, back, order = k(mask, x)
            np.testing.assert_array_equal(pos, np.cumsum(mask, -1) - 1)
            want = torch.from_numpy(x).double().flip(1).cumprod(1).numpy()
            assert rel_err(back, want) < 1e-5
            np.testing.assert_array_equal(order, torch.sort(torch.from_numpy(x), dim=-1, descending=True,
                                                            stable=True).indices.numpy())
    assert kernel.cache_size == 1


def sorted_and_gathered(x, i):
    values, order = pypto.sort(x, -1, descending=True)
    top, at = pypto.topk(x, 2, 0)
    return values, order, top, at, pypto.gather(x, 1, i), pypto.gather(x, 0, i[:1])


def test_gather_sort_topk_along_dynamic_dims(backend):
    """gather gathers row by row (no flattening): one kernel for every extent of x's and the
    index's dims, sort's and topk's values included; an index out of range and a topk longer
    than the run-time dim raise naming the line."""
    import torch
    kernel = jit(sorted_and_gathered, backend, dynamic={"x": [0, 1], "i": [0, 1]})
    for rows, cols, k in [(3, 7, 2), (5, 300, 9), (4, 33, 31)]:
        x = rand(rows, cols)
        x[1, 3] = x[1, 5]  # a tie: the stable order
        i = np.random.default_rng(cols).integers(0, min(rows, cols), (rows, k))
        t, ti = torch.from_numpy(x), torch.from_numpy(i)
        got = kernel(x, i)
        s = torch.sort(t, dim=-1, descending=True, stable=True)
        tk = torch.topk(t, 2, 0)
        want = [s.values, s.indices, tk.values, tk.indices, torch.gather(t, 1, ti), torch.gather(t, 0, ti[:1])]
        for g, w in zip(got, want):
            np.testing.assert_array_equal(np.asarray(g), w.numpy())
    assert kernel.cache_size == 1
    bad = np.full((3, 2), 7)
    with pytest.raises(pypto.PyptoError, match="out of range") as e:
        kernel(rand(3, 7), bad)
    assert "test_dynamic_shapes.py" in str(e.value)
    with pytest.raises(pypto.PyptoError, match="topk: k = 2 is out of range"):
        kernel(rand(2, 7)[:0], np.zeros((0, 2), np.int64))


def _rope_and_mask(x, inv):
    b, s, d = x.shape
    pos = torch.arange(s)[None, :].float()  # a length of a dynamic dim: made at run time
    ang = pos[..., None] * inv
    emb = torch.cat((ang, ang), dim=-1)
    mask = torch.full((s, s), torch.finfo(x.dtype).min, dtype=x.dtype).triu(1) + torch.zeros(s, s)
    kv = x[:, None].expand(b, 2, s, d)  # expanded at its own dynamic extent
    return (x * emb.cos() + kv.sum(1) * emb.sin()) @ x.transpose(1, 2) + mask


@pytest.mark.parametrize("backend", ["interp", "cpu"])
def test_torch_creation_and_expand_over_a_dynamic_length(backend):
    """torch.arange(seq_len), torch.full / zeros((seq_len, seq_len)) and x.expand(.., seq_len, ..)
    in a kernel: one dynamic variant for every sequence length, not one per length."""
    inv = 1.0 / (10000 ** (torch.arange(0, 8, 2, dtype=torch.float32) / 8))
    k = pypto.jit(_rope_and_mask, backend=backend)
    for s in (5, 9, 12, 3):
        x = torch.randn(2, s, 8)
        want = _rope_and_mask(x, inv)
        got = k(x, inv)
        fin = want > -1e30
        assert torch.allclose(got[fin], want[fin], rtol=1e-5, atol=1e-5)
        assert (got[~fin] < -1e30).all()  # the masked entries: finfo.min plus a finite score
    info = k.cache_info()
    assert info.size == 2 and info.static_dims == {}, info


def _repeat_kv(x):
    h = x.view(2, x.shape[1], 3, 4).transpose(1, 2)  # (b, heads, s, d), s dynamic
    b, n, s, d = h.shape
    r = h[:, :, None, :, :].expand(b, n, 2, s, d).reshape(b, n * 2, s, d)  # Llama's repeat_kv
    return r.reshape(b * n * 2, s, d).sin()  # the static prefix merged again


@pytest.mark.parametrize("backend", ["interp", "cpu"])
def test_reshape_of_static_dims_before_a_dynamic_one(backend):
    """[B, H, R, S, D] -> [B, H*R, S, D] with S dynamic regroups the static dims in front (a copy
    loop over them), where it used to need S static; values and gradients as torch's."""
    k = pypto.jit(_repeat_kv, backend=backend)
    for s in (5, 8, 3):
        x = torch.randn(2, s, 12, dtype=torch.float64)
        assert torch.allclose(k(x), _repeat_kv(x), rtol=1e-14, atol=1e-14)
    info = k.cache_info()
    assert info.static_dims == {} and info.size == 2 and info.dynamic[1] == {"x": [1]}, info
    x = torch.randn(2, 6, 12, dtype=torch.float64, requires_grad=True)
    dy = torch.randn(12, 6, 4, dtype=torch.float64)
    g, = torch.autograd.grad(k(x), x, dy)
    w, = torch.autograd.grad(_repeat_kv(x), x, dy)
    assert torch.allclose(g, w, rtol=1e-13, atol=1e-13)
