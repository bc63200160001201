"""Cases of the everyday ops (issue 14): an embedding lookup (row gather), top-k and a sort over
32k logits, a cumulative sum (scan), and depthwise convolutions (ConvNeXt's 7 x 7, MobileNet's
3 x 3), each against torch eager and torch.compile."""
import numpy as np

from bench.cases import Bar, Case, pypto_impl, rand, torch64, torch_compile_impl, torch_impl


def _peer_bars(name):
    return [Bar("vs", 1.0, other="torch", label=f"{name} >= 1.0x torch"),
            Bar("vs", 1.0, other="torch.compile", label=f"{name} >= 1.0x torch.compile")]


def embedding_case(ctx, vocab, dim, n):
    rng = ctx.rng()
    table = rand(rng, vocab, dim)
    ids = rng.integers(0, vocab, size=(n,)).astype(np.int64)

    def tfn(ids, table):
        import torch
        return torch.nn.functional.embedding(ids, table)
    return Case(name="embedding", shape=f"{n} of {vocab}x{dim}",
                impls=[pypto_impl("embedding", ids, table), torch_impl("torch", tfn, ids, table),
                       torch_compile_impl(ctx, tfn, ids, table)],
                reference=lambda: table[ids].astype(np.float64), bytes=2.0 * n * dim * 4,
                bars=_peer_bars("embedding"), tol=1e-6)


def topk_case(ctx, rows, n, k):
    rng = ctx.rng()
    x = rand(rng, rows, n)

    def tfn(x):
        import torch
        return torch.topk(x, k, dim=-1).values
    return Case(name="topk", shape=f"{rows}x{n} k={k}",
                impls=[pypto_impl("topk_values", x), torch_impl("torch", tfn, x), torch_compile_impl(ctx, tfn, x)],
                reference=torch64(tfn, x), bytes=rows * n * 4.0, bars=_peer_bars("topk"), tol=1e-6)


def sort_case(ctx, rows, n):
    """The descending sort of top-p sampling over 32k logits: values and their order."""
    rng = ctx.rng()
    x = rand(rng, rows, n)

    def tfn(x):
        import torch
        return torch.sort(x, dim=-1, descending=True).values
    return Case(name="sort", shape=f"{rows}x{n}",
                impls=[pypto_impl("sort_values", x), torch_impl("torch", tfn, x), torch_compile_impl(ctx, tfn, x)],
                reference=torch64(tfn, x), bytes=2.0 * rows * n * 4, bars=_peer_bars("sort"), tol=1e-6)


def cumsum_case(ctx, rows, cols):
    rng = ctx.rng()
    x = rand(rng, rows, cols)

    def tfn(x):
        import torch
        return torch.cumsum(x, dim=-1)
    return Case(name="cumsum", shape=f"{rows}x{cols}",
                impls=[pypto_impl("cumsum", x), torch_impl("torch", tfn, x), torch_compile_impl(ctx, tfn, x)],
                reference=torch64(tfn, x), bytes=2.0 * rows * cols * 4, bars=_peer_bars("cumsum"), tol=1e-4)


def depthwise_case(ctx, n, c, hw, k):
    """F.conv2d with groups == channels, 'same' padding: one TDWCONV per plane."""
    rng = ctx.rng()
    x, w = rand(rng, n, c, hw, hw), rand(rng, c, 1, k, k, scale=1.0 / k)

    def tfn(x, w):
        import torch
        return torch.nn.functional.conv2d(x, w, padding=k // 2, groups=x.shape[1])
    return Case(name=f"depthwise_{k}x{k}", shape=f"N{n} C{c} {hw}x{hw}",
                impls=[pypto_impl(f"depthwise_{k}x{k}", x, w), torch_impl("torch", tfn, x, w),
                       torch_compile_impl(ctx, tfn, x, w)],
                reference=torch64(tfn, x, w), flops=2.0 * n * c * hw * hw * k * k,
                bytes=2.0 * n * c * hw * hw * 4, bars=_peer_bars(f"depthwise {k}x{k}"), tol=1e-5)


def op_cases(ctx):
    p = ctx.pick
    return [embedding_case(ctx, p(1000, 32000, 32000), p(64, 1024, 1024), p(256, 4096, 4096)),
            topk_case(ctx, p(4, 32, 32), p(4096, 32768, 32768), 50),
            sort_case(ctx, p(4, 32, 32), p(4096, 32768, 32768)),
            cumsum_case(ctx, *p((256, 512), (4096, 4096), (4096, 4096))),
            depthwise_case(ctx, p(1, 8, 8), p(64, 384, 384), 14, 7),
            depthwise_case(ctx, p(1, 8, 8), p(32, 96, 96), p(28, 56, 56), 3)]
