"""PyPTO inside PyTorch programs: a kernel right after a torch op (sharing the cores with torch's
OpenMP threads, or on PyPTO's own pool) against the same two steps in torch, and pypto.jit of a
whole nn.Module (bench/llama_block.py) against torch eager and torch.compile of the same module."""
import numpy as np

from bench.cases import Bar, _torch, rand
from bench.common import Case, Impl


def interop_case(ctx):
    """torch.mm, then an RMS norm of another tensor: the norm by PyPTO (on torch's threads, or on
    its own pool) against torch eager and torch.compile doing the same two steps. (Timing the
    kernel alone against it after the mm measured the cache more than the threads: its input stays
    in the last-level cache between back-to-back calls, and anything run in between, even a
    single-threaded 1.7 MB copy, costs it 13-65% on a shared-L3 VM.)"""
    rows, cols, n = ctx.pick((64, 128, 64), (1024, 1024, 256), (2048, 2048, 384))
    rng = ctx.rng()
    x, w, a = rand(rng, rows, cols), 1 + 0.1 * rand(rng, cols), rand(rng, n, n)
    ref = x.astype(np.float64) / np.sqrt((x.astype(np.float64) ** 2).mean(-1, keepdims=True) + 1e-6) * w

    def torch_norm(t, tx, tw):
        return t.nn.functional.rms_norm(tx, (tx.shape[-1],), tw, 1e-6)

    def setup(norm):
        def make():
            t = _torch()
            tx, tw, ta = t.from_numpy(x), t.from_numpy(w), t.from_numpy(a)
            if norm in ("torch", "torch.compile"):
                def two_steps(_):  # the product returned too: torch.compile drops unused work
                    return t.mm(ta, ta), torch_norm(t, tx, tw)
                step = t.compile(two_steps) if norm == "torch.compile" else two_steps
                _no_grad(step, None)
                return lambda: _no_grad(step, None)[1]
            import pypto
            from bench.kernels import rms_norm
            own = norm == "pypto[own pool]"
            rms_norm(tx, tw)  # compiled, loops measured

            def run():
                if own:
                    pypto.share_threads_with_torch(False)
                try:
                    t.mm(ta, ta)
                    return rms_norm(tx, tw)
                finally:
                    if own:
                        pypto.share_threads_with_torch(True)
            return run
        return make

    impls = [Impl("pypto", setup("pypto"), compiled=True),
             Impl("pypto[own pool]", setup("pypto[own pool]"), compiled=True),
             Impl("torch", setup("torch")),
             Impl("torch.compile", setup("torch.compile"), compiled=True, skip=ctx.no_compile)]
    return Case("interop", f"torch.mm {n}^3, then rms_norm {rows}x{cols}", impls, reference=lambda: ref,
                bars=[Bar("vs", 1.0, other="torch", label="interop >= 1.0x torch")],
                note="a kernel right after a torch op, against the two steps in torch; [own pool]: "
                     "PyPTO's pool instead of torch's OpenMP threads")


def jit_block_case(ctx):
    S, d, heads, kv, hidden = ctx.pick((8, 32, 4, 2, 64), (128, 256, 8, 4, 512), (512, 768, 12, 4, 2048))
    rng = ctx.rng()
    x = rand(rng, 1, S, d)
    state = {}

    def block():
        if "m" not in state:
            t = _torch()
            from bench.llama_block import LlamaBlock
            t.manual_seed(0)
            state["m"] = LlamaBlock(d, heads, kv, hidden).eval()
        return state["m"]

    def reference():
        return _ref64(block(), x)

    def eager():
        t = _torch()
        m, tx = block(), t.from_numpy(x)
        return lambda: _no_grad(m, tx)

    def compiled():
        t = _torch()
        m, tx = t.compile(block()), t.from_numpy(x)
        return lambda: _no_grad(m, tx)

    def pypto_block():
        import pypto
        t = _torch()
        k, tx = pypto.jit(block()), t.from_numpy(x)
        return lambda: _no_grad(k, tx)

    impls = [Impl("pypto", pypto_block, compiled=True), Impl("torch", eager),
             Impl("torch.compile", compiled, compiled=True, skip=ctx.no_compile)]
    return Case("jit_block", f"Llama block S={S} d={d} heads={heads}/{kv}", impls, reference=reference,
                note="pypto.jit(module) of an unmodified torch module against the module in torch")


def _no_grad(fn, x):
    t = _torch()
    with t.inference_mode():
        return fn(x)


def _ref64(m, x):
    import copy
    t = _torch()
    with t.no_grad():
        return copy.deepcopy(m).double()(t.from_numpy(x).double()).numpy()


def interop_cases(ctx):
    return [interop_case(ctx), jit_block_case(ctx)]
