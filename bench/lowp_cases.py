"""Low-precision cases (issues 14 and 15): bf16 matmul and the bf16 transformer block against
torch's native bf16 path (oneDNN, AVX512-BF16 where the CPU has it), and int8 scaled_mm against
torch._int_mm (the int8 x int8 -> int32 matmul torch offers on the CPU; torch._scaled_mm takes
only float8 there) followed by the same per-row / per-column scaling. Inputs are bf16 / int8 torch
tensors; the references are float64 computations on the same (already rounded) values."""
import numpy as np

from bench.cases import Bar, Case, Impl, _no_grad, _torch, block_params, kernel, rand, torch_block


def _bf16(arrays):
    t = _torch()
    return [t.from_numpy(a).to(t.bfloat16) for a in arrays]


def _pypto_torch_impl(kname, make_args, name="pypto"):
    def setup():
        fn = kernel(kname)
        args = make_args()
        return lambda: fn(*args)
    return Impl(name, setup, compiled=True)


def _torch_impl(fn, make_args, name="torch"):
    def setup():
        args = make_args()
        return lambda: _no_grad(fn, args)
    return Impl(name, setup)


def _torch_compile_impl(ctx, fn, make_args):
    if ctx.no_compile:
        return Impl("torch.compile", None, skip=ctx.no_compile)

    def setup():
        cf = _torch().compile(fn, dynamic=False)
        args = make_args()
        return lambda: _no_grad(cf, args)
    return Impl("torch.compile", setup, compiled=True)


def _ref64(fn, make_args):
    def ref():
        t = _torch()
        with t.inference_mode():
            return fn(*[a.double() for a in make_args()]).numpy()
    return ref


def bf16_matmul_case(ctx, n):
    rng = ctx.rng()
    a, b = rand(rng, n, n), rand(rng, n, n)
    args = lambda: _bf16([a, b])  # noqa: E731
    mm = lambda x, y: x @ y  # noqa: E731
    return Case(
        name="bf16_matmul", shape=f"{n}x{n}x{n} bf16",
        impls=[_pypto_torch_impl("matmul", args), _torch_impl(mm, args), _torch_compile_impl(ctx, mm, args)],
        reference=_ref64(mm, args), flops=2.0 * n ** 3, bytes=3.0 * n * n * 2, tol=1e-2,
        bars=[Bar("vs", 1.0, other="torch", label=f"bf16 matmul {n}^3 >= 1.0x torch bf16")],
        note="bf16 in and out, f32 accumulation; torch = oneDNN's bf16 matmul")


def bf16_block_case(ctx, S, d, mlp):
    rng = ctx.rng()
    x = rand(rng, S, d)
    params = block_params(rng, d, mlp)
    args = lambda: _bf16([x, *params])  # noqa: E731
    return Case(
        name="bf16_transformer_block", shape=f"S{S} d{d} h{d // 64} mlp{mlp} bf16",
        impls=[_pypto_torch_impl("transformer_block", args), _torch_impl(torch_block, args),
               _torch_compile_impl(ctx, torch_block, args)],
        reference=_ref64(torch_block, args), tol=3e-2,
        flops=2.0 * S * d * (3 * d + d + 2 * mlp) + 4.0 * S * S * d,
        bytes=2.0 * (2 * S * d + sum(p.size for p in params)),
        bars=[Bar("vs", 1.0, other="torch", label="bf16 transformer block >= 1.0x torch bf16")],
        note="the transformer_block kernel on bf16 tensors; torch eager in bf16 (addmm, SDPA)")


def int8_scaled_mm_case(ctx, n):
    rng = ctx.rng()
    a = rng.integers(-128, 128, size=(n, n)).astype(np.int8)
    b = rng.integers(-128, 128, size=(n, n)).astype(np.int8)
    sa = (rng.random(n) * 0.01 + 0.001).astype(np.float32)
    sb = (rng.random(n) * 0.01 + 0.001).astype(np.float32)

    def args():
        t = _torch()
        return [t.from_numpy(v) for v in (a, b, sa, sb)]

    def int_mm(a, b, sa, sb):
        return _torch()._int_mm(a, b) * sa[:, None] * sb[None, :]

    def ref():
        return (a.astype(np.float64) @ b.astype(np.float64)) * sa.astype(np.float64)[:, None] * sb[None, :]
    return Case(
        name="int8_scaled_mm", shape=f"{n}x{n}x{n} int8",
        impls=[_pypto_torch_impl("scaled_mm", args), _torch_impl(int_mm, args, name="torch"),
               _torch_compile_impl(ctx, int_mm, args)],
        reference=ref, flops=2.0 * n ** 3, bytes=2.0 * n * n + 4.0 * n * n, tol=1e-5,
        bars=[Bar("vs", 1.0, other="torch", label=f"int8 scaled_mm {n}^3 >= 1.0x torch")],
        note="int8 x int8 -> int32, per-row x per-column f32 scales; torch = torch._int_mm + the scaling")


def lowp_cases(ctx):
    # Not in --smoke: its checks hold every impl to 1e-4 of float64, which a bf16 result is not.
    if ctx.mode == "smoke":
        return []
    p = ctx.pick
    return [bf16_matmul_case(ctx, p(256, 1024, 2048)),
            bf16_block_case(ctx, p(64, 512, 512), p(128, 768, 768), p(256, 3072, 3072)),
            int8_scaled_mm_case(ctx, p(256, 1024, 2048))]
