"""Dynamic shapes (issue 13): each kernel compiled with its sequence dim dynamic against the same
kernel compiled static for the shape (DESIGN.md §5: within 10%), and a "serving" case: 50 calls
at random sequence lengths, total time including compiles, PyPTO (automatic dynamic: at most two
compiles) against torch.compile(dynamic=True)."""
import random
import time

import numpy as np

from bench.cases import Bar, Case, Impl, block_params, kernel, rand, torch64, torch_block, torch_impl
from bench.engine import add_ratios, new_record
from bench.common import short_error


def _dynamic_impl(kname, dynamic, args, warm_shapes):
    """The kernel with `dynamic` dims, first called on inputs of other extents (so the timed calls
    run the dynamic variant compiled for those, not a fresh static one)."""
    def setup():
        fn = kernel(kname).with_options(dynamic=dynamic)
        for warm in warm_shapes:
            fn(*warm)
        assert fn.cache_size == 1 and fn.cache_info().dynamic[0], "expected one dynamic variant"
        return lambda: fn(*args)
    return Impl("pypto.dynamic", setup, compiled=True)


def _static_impl(kname, args):
    def setup():
        fn = kernel(kname).with_options(dynamic=False)
        return lambda: fn(*args)
    return Impl("pypto", setup, compiled=True)


def _bars(name):
    return [Bar("vs", 1 / 1.1, impl="pypto.dynamic", other="pypto",
                label=f"dynamic {name} within 10% of the static kernel")]


def _case(name, kname, dynamic, args, other_len_args, reference, tfn=None, ctx=None, **kw):
    impls = [_static_impl(kname, args), _dynamic_impl(kname, dynamic, args, [other_len_args])]
    if tfn is not None:
        impls.append(torch_impl("torch", tfn, *args))
    return Case(name=f"dyn_{name}", shape=kw.pop("shape"), impls=impls, reference=reference,
                bars=_bars(name), **kw)


def dynamic_cases(ctx):
    p = ctx.pick
    rng = ctx.rng()
    cases = []

    S, D = p((200, 256), (2047, 1024), (4095, 4096))
    x, x2 = rand(rng, S, D), rand(rng, S // 2 + 3, D)
    w, b = rand(rng, D), rand(rng, D)

    def sm(x):
        import torch
        return torch.softmax(x, -1)
    cases.append(_case("softmax", "softmax", {"x": [0]}, [x], [x2], torch64(sm, x), tfn=sm,
                       shape=f"{S}x{D}", bytes=2.0 * S * D * 4, tol=1e-5))

    def ln(x, w, b):
        import torch
        return torch.nn.functional.layer_norm(x, (x.shape[-1],), w, b, 1e-5)
    cases.append(_case("layer_norm", "layer_norm", {"x": [0]}, [x, w, b], [x2, w, b], torch64(ln, x, w, b),
                       tfn=ln, shape=f"{S}x{D}", bytes=2.0 * S * D * 4, tol=1e-4))

    M, K, N = p((130, 128, 96), (1023, 1024, 1024), (2047, 2048, 2048))
    a, a2, bm = rand(rng, M, K), rand(rng, M // 2 + 1, K), rand(rng, K, N)
    cases.append(_case("matmul", "matmul", {"a": [0]}, [a, bm], [a2, bm],
                       lambda: a.astype(np.float64) @ bm.astype(np.float64),
                       shape=f"{M}x{K}x{N} (M dynamic)", flops=2.0 * M * K * N, tol=1e-4))

    H, Sq, Dh = p((2, 130, 32), (8, 1023, 64), (8, 2047, 64))
    q, k, v = (rand(rng, 1, H, Sq, Dh) for _ in range(3))
    q2, k2, v2 = (rand(rng, 1, H, Sq // 2 + 5, Dh) for _ in range(3))

    def attn(q, k, v):
        import torch
        s = q @ k.transpose(-2, -1) / np.sqrt(Dh)
        return torch.softmax(s, -1) @ v
    cases.append(_case("attention", "optimized_attention", {"Q": [2], "K": [2], "V": [2]}, [q, k, v],
                       [q2, k2, v2], torch64(attn, q, k, v), shape=f"H{H} S{Sq} D{Dh} (S dynamic)",
                       flops=4.0 * H * Sq * Sq * Dh, tol=1e-4))

    Sb, d = p((65, 128), (255, 768), (511, 768))
    blk = [rand(rng, Sb, d), *block_params(rng, d, 4 * d)]
    blk2 = [rand(rng, Sb // 2 + 3, d)] + blk[1:]
    cases.append(_case("transformer_block", "transformer_block", {"x": [0]}, blk, blk2,
                       torch64(torch_block, *blk), shape=f"S{Sb} d{d} (S dynamic)", tol=1e-4))

    cases.append(serving_case(ctx))
    return cases


# ---- serving: 50 calls at random lengths, compiles included ------------------------------------

def _serving_fn(x, w, b):
    import pypto
    h = pypto.layer_norm(x, x.shape[-1], None, None, 1e-5)
    return pypto.relu(pypto.matmul(h, w) + b)


def _serving_torch(x, w, b):
    import torch
    h = torch.nn.functional.layer_norm(x, (x.shape[-1],), None, None, 1e-5)
    return torch.relu(h @ w + b)


def serving_runner(case, env):
    import torch

    import pypto
    lengths, d, n_out = case.params["lengths"], case.params["d"], case.params["n_out"]
    rng = np.random.default_rng(7)
    w, b = rand(rng, d, n_out, scale=0.05), rand(rng, n_out)
    xs = [rand(rng, n, d) for n in lengths]
    recs = []
    impls = [("pypto", lambda: pypto.jit(_serving_fn), lambda f, x: f(x, w, b))]
    if not case.params["no_compile"]:
        tw, tb = torch.from_numpy(w), torch.from_numpy(b)
        impls.append(("torch.compile", lambda: torch.compile(_serving_torch, dynamic=True),
                      lambda f, x: f(torch.from_numpy(x), tw, tb).numpy()))
    for name, make, call in impls:
        rec = new_record(case, name, None)
        recs.append(rec)
        env.step(f"serving: {name}", case.name, name)
        try:
            fn = make()
            t0 = time.perf_counter()
            worst = 0.0
            outs = [call(fn, x) for x in xs]
            total = time.perf_counter() - t0
            for x, o in zip(xs, outs):
                ref = _serving_torch(torch.from_numpy(x.astype(np.float64)), torch.from_numpy(w.astype(np.float64)),
                                     torch.from_numpy(b.astype(np.float64))).numpy()
                worst = max(worst, float(np.linalg.norm(o - ref) / np.linalg.norm(ref)))
            if worst > 1e-4:
                raise RuntimeError(f"wrong result: rel err {worst:.2e}")
            rec.update(status="ok", samples=1, median_ms=total * 1e3, rel_err=worst)
            if name == "pypto":
                rec["compiles"] = fn.cache_size
        except Exception as e:  # noqa: BLE001 - recorded in the table
            rec["status"], rec["error"] = "error", short_error(e)
    add_ratios(recs)
    return recs


def serving_case(ctx):
    n_calls = 50
    r = random.Random(ctx.seed)
    hi = ctx.pick(96, 1024, 2048)
    lengths = [r.randrange(1, hi) for _ in range(n_calls)]
    d, n_out = ctx.pick((64, 64), (768, 768), (768, 3072))
    return Case("serving", f"{n_calls} calls, S in 1..{hi}, d{d}", [], runner=serving_runner, steps=2,
                params={"lengths": lengths, "d": d, "n_out": n_out, "no_compile": bool(ctx.no_compile)},
                bars=[Bar("vs", 1.0, other="torch.compile",
                          label="serving: total time incl. compiles >= 1.0x torch.compile(dynamic=True)")],
                note="one fresh kernel object each; the on-disk caches are as the run finds them")
