"""The compute cases: each gives PyPTO and its peers (torch eager, torch.compile, JAX jit, NumPy)
on the same inputs, a float64 reference, its FLOP and byte counts, and the bars of DESIGN.md §5.

Every impl is a setup function returning a zero-argument callable; setup may raise (pypto not
built, an op not implemented yet, JAX missing) and the suite records the error and goes on.
The system cases (dispatch, compile times, core scaling) are in system.py.
"""
import math
import os
import signal
from dataclasses import dataclass
from typing import Optional

import numpy as np

from bench.common import Bar, Case, Impl


@dataclass
class Ctx:
    mode: str = "full"                # "smoke" | "quick" | "full"
    threads: int = 1
    have_jax: bool = False
    jax_off: str = "n/a (jax not installed)"
    no_compile: Optional[str] = None  # a reason to skip torch.compile everywhere
    seed: int = 20261130

    def rng(self):
        return np.random.default_rng(self.seed)

    def pick(self, smoke, quick, full):
        return {"smoke": smoke, "quick": quick, "full": full}[self.mode]


def rand(rng, *shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def _torch():
    import torch
    return torch


def _jax():
    import jax
    import jax.numpy as jnp
    return jax, jnp


def kernel(name):
    if os.environ.get("PYPTO_BENCH_TEST_CRASH") == name:
        # for the suite's own test: a kernel that kills the process, as a native crash would
        os.kill(os.getpid(), signal.SIGSEGV)
    from bench import kernels  # imports pypto: may raise, which becomes this impl's error
    return getattr(kernels, name)


# ---- impl factories -------------------------------------------------------------------------

def pypto_impl(kname, *args, returns=None, name="pypto"):
    """PyPTO kernel `kname` on NumPy inputs; `returns` picks the output when the kernel writes
    into an argument (the seed's matrix_multiply)."""
    def setup():
        fn = kernel(kname)
        if returns is None:
            return lambda: fn(*args)

        def run():
            fn(*args)
            return returns
        return run
    return Impl(name, setup, compiled=True)


def torch_impl(name, fn, *np_args):
    def setup():
        t = _torch()
        targs = [t.from_numpy(a) for a in np_args]
        return lambda: _no_grad(fn, targs)
    return Impl(name, setup)


def _no_grad(fn, args):
    t = _torch()
    with t.inference_mode():
        return fn(*args)


def torch_compile_impl(ctx, fn, *np_args, name="torch.compile"):
    if ctx.no_compile:
        return Impl(name, None, skip=ctx.no_compile)

    def setup():
        t = _torch()
        cf = t.compile(fn, dynamic=False)
        targs = [t.from_numpy(a) for a in np_args]
        return lambda: _no_grad(cf, targs)
    return Impl(name, setup, compiled=True)


def jax_impl(ctx, make_fn, *np_args, name="jax"):
    if not ctx.have_jax:
        return Impl(name, None, skip=ctx.jax_off)
    if ctx.mode == "smoke":
        return Impl(name, None, skip="not run in --smoke")

    def setup():
        jax, jnp = _jax()
        jf = jax.jit(make_fn(jnp, jax))
        dev = [jax.device_put(a) for a in np_args]
        return lambda: jf(*dev).block_until_ready()
    return Impl(name, setup, compiled=True)


def numpy_impl(fn, *np_args):
    return Impl("numpy", lambda: (lambda: fn(*np_args)))


def torch64(fn, *np_args):
    """Reference: `fn` on float64 torch copies of the inputs."""
    def ref():
        t = _torch()
        with t.inference_mode():
            return fn(*[t.from_numpy(a).double() for a in np_args]).numpy()
    return ref


# ---- linear algebra ---------------------------------------------------------------------------

def matmul_case(ctx, n, label=None):
    rng = ctx.rng()
    a, b = rand(rng, n, n), rand(rng, n, n)
    mm = lambda x, y: x @ y  # noqa: E731
    return Case(
        name=label or f"matmul_{n}", shape=f"{n}x{n}x{n}",
        impls=[pypto_impl("matmul", a, b),
               torch_impl("torch", mm, a, b),
               torch_compile_impl(ctx, mm, a, b),
               jax_impl(ctx, lambda jnp, jax: jnp.matmul, a, b),
               numpy_impl(np.matmul, a, b)],
        reference=lambda: a.astype(np.float64) @ b.astype(np.float64),
        flops=2.0 * n ** 3, bytes=3.0 * n * n * 4,
        bars=[Bar("vs", 1.0, other="torch", label=f"matmul {n}^3 >= 1.0x torch.matmul"),
              Bar("peak", 0.85, label=f"matmul {n}^3 >= 85% of FMA peak")])


def seed_matmul_case(ctx, n):
    rng = ctx.rng()
    a, b = rand(rng, n, n), rand(rng, n, n)
    c = np.full((n, n), np.nan, dtype=np.float32)  # poisoned before the checked run
    mm = lambda x, y: x @ y  # noqa: E731
    return Case(
        name="seed_tile_matmul", shape=f"{n}x{n}x{n}",
        impls=[pypto_impl("matrix_multiply", a, b, c, returns=c),
               torch_impl("torch", mm, a, b),
               numpy_impl(np.matmul, a, b)],
        reference=lambda: a.astype(np.float64) @ b.astype(np.float64),
        flops=2.0 * n ** 3, bytes=3.0 * n * n * 4,
        bars=[Bar("vs", 0.6, other="torch", label="seed 64x64 tile matmul >= 0.6x torch.matmul")],
        note="the seed's 64x64 tile loop, as written")


def fused_linear_case(ctx, n):
    rng = ctx.rng()
    x, w, b = rand(rng, n, n), rand(rng, n, n, scale=n ** -0.5), rand(rng, n)

    def tfn(x, w, b):
        return _torch().relu(x @ w + b)
    return Case(
        name="fused_linear", shape=f"{n}x{n}x{n}+bias+relu",
        impls=[pypto_impl("fused_linear", x, w, b),
               torch_impl("torch", tfn, x, w, b),
               torch_compile_impl(ctx, tfn, x, w, b),
               jax_impl(ctx, lambda jnp, jax: (lambda x, w, b: jax.nn.relu(x @ w + b)), x, w, b),
               numpy_impl(lambda x, w, b: np.maximum(x @ w + b, 0), x, w, b)],
        reference=lambda: np.maximum(x.astype(np.float64) @ w + b, 0),
        flops=2.0 * n ** 3, bytes=(3.0 * n * n + n) * 4,
        bars=[Bar("vs", 1.1, other="torch", label="fused_linear >= 1.1x torch eager")])


def _step_impl(name, make_fn, arrays, checked, compiled=False):
    """One training step: fn(*params).sum().backward() with every array requiring grad; the result
    checked is the gradient of arrays[checked]."""
    def setup():
        t = _torch()
        fn = make_fn(t)
        params = [t.from_numpy(a.copy()).requires_grad_() for a in arrays]

        def run():
            for q in params:
                q.grad = None
            fn(*params).sum().backward()
            return params[checked].grad.numpy()
        return run
    return Impl(name, setup, compiled=compiled)


def _step_impls(ctx, kname, tfn, arrays, checked):
    impls = [_step_impl("pypto", lambda t: kernel(kname), arrays, checked, compiled=True),
             _step_impl("torch", lambda t: tfn, arrays, checked)]
    impls.append(Impl("torch.compile", None, skip=ctx.no_compile) if ctx.no_compile
                 else _step_impl("torch.compile", lambda t: t.compile(tfn, dynamic=False), arrays, checked,
                                 compiled=True))
    return impls


def _grad64(tfn, arrays, checked):
    """The float64 reference gradient of sum(tfn(*arrays)) with respect to arrays[checked]."""
    def reference():
        t = _torch()
        params = [t.from_numpy(a.astype(np.float64)).requires_grad_() for a in arrays]
        tfn(*params).sum().backward()
        return params[checked].grad.numpy()
    return reference


def training_step_case(ctx, n):
    """fused_linear forward + backward (loss = sum of the output; x, w and b all require grad):
    PyPTO's derived backward vs torch autograd, eager and compiled. The output checked is dW."""
    rng = ctx.rng()
    x, w, b = rand(rng, n, n), rand(rng, n, n, scale=n ** -0.5), rand(rng, n)

    def tfn(x, w, b):
        return _torch().relu(x @ w + b)
    return Case(
        name="training_step", shape=f"fused_linear {n}x{n}x{n} fwd+bwd",
        impls=_step_impls(ctx, "fused_linear", tfn, [x, w, b], 1), reference=_grad64(tfn, [x, w, b], 1),
        flops=6.0 * n ** 3, bytes=(6.0 * n * n + 2 * n) * 4,
        bars=[Bar("vs", 1.0, other="torch", label="training step >= 1.0x torch eager forward+backward")])


def block_training_case(ctx, S, d, mlp):
    """The transformer block forward + backward, every parameter and the input requiring grad; the
    gradient checked is that of the MLP's first weight."""
    rng = ctx.rng()
    arrays = [rand(rng, S, d), *block_params(rng, d, mlp)]
    flops = 3 * (2.0 * S * d * (3 * d + d + 2 * mlp) + 4.0 * S * S * d)
    return Case(
        name="training_block", shape=f"transformer block S{S} d{d} mlp{mlp} fwd+bwd",
        impls=_step_impls(ctx, "transformer_block", torch_block, arrays, 9),
        reference=_grad64(torch_block, arrays, 9), flops=flops,
        bytes=4.0 * 3 * (2 * S * d + sum(p.size for p in arrays[1:])),
        bars=[Bar("vs", 1.0, other="torch", label="block training step >= 1.0x torch eager forward+backward")])


# ---- attention --------------------------------------------------------------------------------

def attention_case(ctx, B, H, S, D):
    rng = ctx.rng()
    q, k, v = (rand(rng, B, H, S, D) for _ in range(3))
    scale = 1.0 / math.sqrt(D)

    def unfused(q, k, v):
        t = _torch()
        return t.softmax(q @ k.transpose(-2, -1) * scale, dim=-1) @ v

    def sdpa(q, k, v):
        return _torch().nn.functional.scaled_dot_product_attention(q, k, v)

    def jfn(jnp, jax):
        return lambda q, k, v: jax.nn.softmax(q @ jnp.swapaxes(k, -1, -2) * scale, axis=-1) @ v

    def npfn(q, k, v):
        s = q @ np.swapaxes(k, -1, -2) * np.float32(scale)
        s = np.exp(s - s.max(-1, keepdims=True))
        return (s / s.sum(-1, keepdims=True)) @ v
    return Case(
        name="attention", shape=f"B{B} H{H} S{S} D{D}",
        impls=[pypto_impl("optimized_attention", q, k, v),
               pypto_impl("optimized_attention_unfused", q, k, v, name="pypto[fusion off]"),
               pypto_impl("optimized_attention_no_prefetch", q, k, v, name="pypto[double_buffer off]"),
               torch_impl("torch", unfused, q, k, v),
               torch_impl("torch.sdpa", sdpa, q, k, v),
               torch_compile_impl(ctx, unfused, q, k, v),
               jax_impl(ctx, jfn, q, k, v),
               numpy_impl(npfn, q, k, v) if ctx.mode != "quick" else
               Impl("numpy", None, skip="not run in --quick (seconds per call)")],
        reference=torch64(unfused, q, k, v),
        flops=4.0 * B * H * S * S * D, bytes=4.0 * B * H * S * D * 4,
        bars=[Bar("vs", 3.0, other="torch", label="attention >= 3x torch eager unfused"),
              Bar("vs", 1.2, other="torch.sdpa", label="attention >= 1.2x SDPA")],
        note="the seed's optimized_attention (fusion=True); torch = matmul, softmax, matmul")


# ---- row-wise memory-bound ops ----------------------------------------------------------------

def _norm_bars(name):
    """Judged on the kernel as a user writes it by default (@pypto.jit); the fusion=True variant
    is timed beside it."""
    return [Bar("bw", 0.85, label=f"{name} >= 85% of copy bandwidth"),
            Bar("vs", 1.0, other="torch.compile", label=f"{name} >= 1.0x torch.compile")]


def softmax_case(ctx, rows, cols):
    rng = ctx.rng()
    x = rand(rng, rows, cols)

    def tfn(x):
        return _torch().softmax(x, dim=-1)

    def npfn(x):
        e = np.exp(x - x.max(-1, keepdims=True))
        e /= e.sum(-1, keepdims=True)
        return e
    return Case(
        name="softmax", shape=f"{rows}x{cols}",
        impls=[pypto_impl("softmax", x),
               pypto_impl("softmax_fused", x, name="pypto[fusion]"),
               torch_impl("torch", tfn, x),
               torch_compile_impl(ctx, tfn, x),
               jax_impl(ctx, lambda jnp, jax: (lambda x: jax.nn.softmax(x, axis=-1)), x),
               numpy_impl(npfn, x)],
        reference=torch64(tfn, x), flops=None, bytes=2.0 * rows * cols * 4,
        bars=_norm_bars("softmax"), tol=1e-5)


def layer_norm_case(ctx, rows, cols):
    rng = ctx.rng()
    x, w, b = rand(rng, rows, cols), 1 + rand(rng, cols, scale=0.1), rand(rng, cols, scale=0.1)

    def tfn(x, w, b):
        return _torch().nn.functional.layer_norm(x, (x.shape[-1],), w, b, 1e-5)

    def jfn(jnp, jax):
        def f(x, w, b):
            mu = x.mean(-1, keepdims=True)
            var = ((x - mu) ** 2).mean(-1, keepdims=True)
            return (x - mu) * jax.lax.rsqrt(var + 1e-5) * w + b
        return f

    def npfn(x, w, b):
        mu = x.mean(-1, keepdims=True)
        xc = x - mu
        return xc / np.sqrt((xc * xc).mean(-1, keepdims=True) + 1e-5) * w + b
    return Case(
        name="layer_norm", shape=f"{rows}x{cols}",
        impls=[pypto_impl("layer_norm", x, w, b),
               pypto_impl("layer_norm_fused", x, w, b, name="pypto[fusion]"),
               torch_impl("torch", tfn, x, w, b),
               torch_compile_impl(ctx, tfn, x, w, b),
               jax_impl(ctx, jfn, x, w, b),
               numpy_impl(npfn, x, w, b)],
        reference=torch64(tfn, x, w, b), bytes=2.0 * rows * cols * 4,
        bars=_norm_bars("layer_norm"), tol=1e-5)


def rms_norm_case(ctx, rows, cols):
    rng = ctx.rng()
    x, w = rand(rng, rows, cols), 1 + rand(rng, cols, scale=0.1)

    def tfn(x, w):
        t = _torch()
        return x * t.rsqrt((x * x).mean(-1, keepdim=True) + 1e-6) * w

    def tfn_fused(x, w):
        return _torch().nn.functional.rms_norm(x, (x.shape[-1],), w, 1e-6)

    def jfn(jnp, jax):
        return lambda x, w: x * jax.lax.rsqrt((x * x).mean(-1, keepdims=True) + 1e-6) * w
    return Case(
        name="rms_norm", shape=f"{rows}x{cols}",
        impls=[pypto_impl("rms_norm", x, w),
               pypto_impl("rms_norm_fused", x, w, name="pypto[fusion]"),
               torch_impl("torch", tfn_fused, x, w),
               torch_compile_impl(ctx, tfn, x, w),
               jax_impl(ctx, jfn, x, w),
               numpy_impl(lambda x, w: x / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-6) * w,
                          x, w)],
        reference=torch64(tfn, x, w), bytes=2.0 * rows * cols * 4,
        bars=_norm_bars("rms_norm"), tol=1e-5,
        note="torch = F.rms_norm; torch.compile compiles x*rsqrt(mean(x^2)+eps)*w")


# ---- transformer block ------------------------------------------------------------------------

def block_params(rng, d, mlp):
    s = d ** -0.5
    return [1 + rand(rng, d, scale=0.1), rand(rng, d, scale=0.1),        # ln1 w, b
            rand(rng, d, 3 * d, scale=s), rand(rng, 3 * d, scale=0.02),  # qkv
            rand(rng, d, d, scale=s), rand(rng, d, scale=0.02),          # out proj
            1 + rand(rng, d, scale=0.1), rand(rng, d, scale=0.1),        # ln2 w, b
            rand(rng, d, mlp, scale=s), rand(rng, mlp, scale=0.02),      # mlp up
            rand(rng, mlp, d, scale=mlp ** -0.5), rand(rng, d, scale=0.02)]  # mlp down


def torch_block(x, ln1_w, ln1_b, w_qkv, b_qkv, w_o, b_o, ln2_w, ln2_b, w_1, b_1, w_2, b_2):
    """Idiomatic eager PyTorch: F.layer_norm, addmm (what nn.Linear does), SDPA, erf GELU."""
    t = _torch()
    F = t.nn.functional
    S, D = x.shape
    H = D // 64
    h = F.layer_norm(x, (D,), ln1_w, ln1_b, 1e-5)
    qkv = t.addmm(b_qkv, h, w_qkv)
    q, k, v = (z.view(S, H, 64).transpose(0, 1) for z in qkv.split(D, dim=1))
    ctx = F.scaled_dot_product_attention(q, k, v).transpose(0, 1).reshape(S, D)
    x1 = x + t.addmm(b_o, ctx, w_o)
    m = F.gelu(t.addmm(b_1, F.layer_norm(x1, (D,), ln2_w, ln2_b, 1e-5), w_1))
    return x1 + t.addmm(b_2, m, w_2)


def jax_block(jnp, jax):
    def ln(x, w, b):
        mu = x.mean(-1, keepdims=True)
        var = ((x - mu) ** 2).mean(-1, keepdims=True)
        return (x - mu) * jax.lax.rsqrt(var + 1e-5) * w + b

    def f(x, ln1_w, ln1_b, w_qkv, b_qkv, w_o, b_o, ln2_w, ln2_b, w_1, b_1, w_2, b_2):
        S, D = x.shape
        H = D // 64
        qkv = ln(x, ln1_w, ln1_b) @ w_qkv + b_qkv
        q, k, v = (z.reshape(S, H, 64).transpose(1, 0, 2) for z in jnp.split(qkv, 3, axis=1))
        p = jax.nn.softmax(q @ k.transpose(0, 2, 1) * (1 / 8.0), axis=-1)
        ctx = (p @ v).transpose(1, 0, 2).reshape(S, D)
        x1 = x + ctx @ w_o + b_o
        m = jax.nn.gelu(ln(x1, ln2_w, ln2_b) @ w_1 + b_1, approximate=False)
        return x1 + m @ w_2 + b_2
    return f


def block_case(ctx, S, d, mlp):
    rng = ctx.rng()
    x = rand(rng, S, d)
    params = block_params(rng, d, mlp)
    args = [x, *params]
    flops = 2.0 * S * d * (3 * d + d + 2 * mlp) + 4.0 * S * S * d
    return Case(
        name="transformer_block", shape=f"S{S} d{d} h{d // 64} mlp{mlp}",
        impls=[pypto_impl("transformer_block", *args),
               torch_impl("torch", torch_block, *args),
               torch_compile_impl(ctx, torch_block, *args),
               jax_impl(ctx, jax_block, *args)],
        reference=torch64(torch_block, *args), flops=flops,
        bytes=4.0 * (2 * S * d + sum(p.size for p in params)),
        bars=[Bar("vs", 1.5, other="torch", label="transformer block >= 1.5x torch eager"),
              Bar("vs", 1.1, other="torch.compile", label="transformer block >= 1.1x torch.compile")],
        note="pre-LN, inference, one pypto kernel; torch eager uses SDPA and addmm")


# ---- convolution ------------------------------------------------------------------------------

def conv_case(ctx, N, C, HW, O):
    rng = ctx.rng()
    x, w = rand(rng, N, C, HW, HW), rand(rng, O, C, 3, 3, scale=(9 * C) ** -0.5)

    def tfn(x, w):
        return _torch().nn.functional.conv2d(x, w, padding=1)

    def jfn(jnp, jax):
        return lambda x, w: jax.lax.conv_general_dilated(
            x, w, (1, 1), ((1, 1), (1, 1)), dimension_numbers=("NCHW", "OIHW", "NCHW"))
    return Case(
        name="conv2d_3x3", shape=f"N{N} C{C} {HW}x{HW} O{O}",
        impls=[pypto_impl("conv2d", x, w),
               torch_impl("torch", tfn, x, w),
               torch_compile_impl(ctx, tfn, x, w),
               jax_impl(ctx, jfn, x, w)],
        reference=torch64(tfn, x, w), flops=2.0 * N * O * HW * HW * C * 9,
        bytes=4.0 * (N * C * HW * HW + O * C * 9 + N * O * HW * HW))


def compute_cases(ctx):
    p = ctx.pick
    cases = [
        matmul_case(ctx, p(128, 1024, 1024)),
        seed_matmul_case(ctx, p(200, 1024, 1024)),
        fused_linear_case(ctx, p(96, 1024, 1024)),
        training_step_case(ctx, p(96, 512, 1024)),
        attention_case(ctx, 1, p(2, 8, 8), p(256, 2048, 2048), 64),
        softmax_case(ctx, *p((256, 512), (4096, 4096), (4096, 4096))),
        layer_norm_case(ctx, *p((256, 512), (4096, 4096), (4096, 4096))),
        rms_norm_case(ctx, *p((256, 512), (4096, 4096), (4096, 4096))),
    ]
    if ctx.mode != "smoke":
        cases.insert(1, matmul_case(ctx, 2048))
        cases.append(block_case(ctx, 512, 768, 3072))
        cases.append(block_training_case(ctx, p(None, 128, 256), p(None, 768, 768), p(None, 3072, 3072)))
        cases.append(conv_case(ctx, 1, 64, 56, 64))
    return cases
