"""PyPTO inside PyTorch programs: a kernel right after a torch op (sharing the cores with torch's
OpenMP threads, against PyPTO's own pool and against the kernel alone), and pypto.jit of a whole
nn.Module (bench/llama_block.py) against torch eager and torch.compile of the same module."""
import numpy as np

from bench.cases import _torch, rand
from bench.common import Case, Impl


def interop_case(ctx):
    rows, cols, n = ctx.pick((64, 128, 64), (1024, 1024, 256), (2048, 2048, 384))
    rng = ctx.rng()
    x, w, a = rand(rng, rows, cols), 1 + 0.1 * rand(rng, cols), rand(rng, n, n)
    ref = x.astype(np.float64) / np.sqrt((x.astype(np.float64) ** 2).mean(-1, keepdims=True) + 1e-6) * w

    def setup(torch_op, shared):
        def make():
            import pypto
            from bench.kernels import rms_norm
            t = _torch()
            tx, tw, ta = t.from_numpy(x), t.from_numpy(w), t.from_numpy(a)
            rms_norm(tx, tw)  # compiled, loops measured
            out = rms_norm(tx, tw)

            def run():
                if not torch_op:
                    return rms_norm(tx, tw)
                if shared is None:  # the torch op alone
                    t.mm(ta, ta)
                    return out
                if not shared:
                    pypto.share_threads_with_torch(False)
                try:
                    t.mm(ta, ta)
                    return rms_norm(tx, tw)
                finally:
                    if not shared:
                        pypto.share_threads_with_torch(True)
            return run
        return make

    impls = [Impl("pypto", setup(False, True), compiled=True),
             Impl("torch.mm", setup(True, None), compiled=True),
             Impl("torch.mm+pypto", setup(True, True), compiled=True),
             Impl("torch.mm+pypto[own pool]", setup(True, False), compiled=True)]
    return Case("interop", f"rms_norm {rows}x{cols} after mm {n}^3", impls, reference=lambda: ref,
                note="a kernel right after a torch op: (torch.mm+pypto) - torch.mm against pypto alone "
                     "(bar: <= 1.05x); [own pool]: PyPTO's pool instead of torch's OpenMP threads")


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
