"""`make demo`: the seed document's kernels on the CPU backend and the interpreter.

Prints the host description, then one row per (kernel, shape, backend): relative error against
a float64 NumPy/PyTorch reference, compile time (trace + lower + build; "cached" when the
kernel came from the disk cache) and run time (median of a few runs)."""
from __future__ import annotations

import math
import statistics
import sys
import time

import numpy as np

import pypto

rng = np.random.default_rng(7)


def rand(*shape):
    return rng.standard_normal(shape).astype(np.float32)


from pypto.seed_kernels import (PipelineStage, conv2d_memopt, fused_linear, matrix_multiply,  # noqa: E402
                                optimized_attention, run_pipeline)


# --- references ----------------------------------------------------------------------------------

def _attention_ref(Q, K, V, mask=None):
    q, k, v = (x.astype(np.float64) for x in (Q, K, V))
    s = q @ np.swapaxes(k, -1, -2) / math.sqrt(K.shape[-1])
    if mask is not None:
        s = s + mask
    s = np.exp(s - s.max(-1, keepdims=True))
    return (s / s.sum(-1, keepdims=True)) @ v


def _conv_ref(x, w, b):
    import torch
    r = torch.nn.functional.conv2d(torch.from_numpy(x).double(), torch.from_numpy(w).double(), padding="same")
    return (r + torch.from_numpy(b).double()).numpy()


def _rel(out, ref):
    out = np.asarray(pypto.to_numpy(out), dtype=np.float64)
    return float(np.linalg.norm(out - ref) / max(np.linalg.norm(ref), 1e-30))


# --- cases ---------------------------------------------------------------------------------------

def _cases():
    """(kernel name, shape text, make(backend) -> (run: () -> output, reference))."""
    out = []
    for M, K, N in [(64, 64, 64), (256, 192, 128), (512, 512, 512), (200, 130, 99)]:
        def make(backend, M=M, K=K, N=N):
            A, B = rand(M, K), rand(K, N)
            C = np.full((M, N), np.nan, np.float32)
            f = pypto.jit(matrix_multiply, backend=backend)

            def run():
                f(A, B, C)
                return C
            return f, (A, B, C), run, A.astype(np.float64) @ B
        out.append(("matrix_multiply", f"{M}x{K}x{N}", make))
    for B_, H, S, D, masked in [(1, 1, 128, 64, False), (2, 4, 300, 64, False), (1, 2, 1000, 128, False),
                                (1, 2, 260, 64, True)]:
        def make(backend, B_=B_, H=H, S=S, D=D, masked=masked):
            Q, K, V = rand(B_, H, S, D), rand(B_, H, S, D), rand(B_, H, S, D)
            f = pypto.jit(optimized_attention, fusion=True, backend=backend)
            args = (Q, K, V)
            mask = None
            if masked:
                mask = np.triu(np.full((S, S), -1e9, dtype=np.float32), k=1)[None, None]
                args = args + (mask,)
            return f, args, (lambda: f(*args)), _attention_ref(Q, K, V, mask)
        out.append(("optimized_attention" + (" +mask" if masked else ""), f"{B_}x{H}x{S}x{D}", make))

    def make_pipeline(backend):
        weights = [rand(96, 96) * 0.1 for _ in range(4)]
        x = rand(32, 96)
        ref = x.astype(np.float64)
        for w in weights:
            ref = np.maximum(ref @ w, 0.0)
        stages = [PipelineStage(i, w, backend) for i, w in enumerate(weights)]

        def run():
            for s in stages:
                s.input_buf = s.output_buf = None
            run_pipeline(stages, x)
            return stages[-1].output_buf
        return None, None, run, ref
    out.append(("pipeline (4 stages)", "32x96", make_pipeline))

    def make_conv(backend):
        x, w, b = rand(3, 8, 20, 18), rand(16, 8, 3, 3), rand(16, 1, 1)
        f = pypto.jit(conv2d_memopt, backend=backend)
        return f, (x, w, b), (lambda: f(x, w, b)), _conv_ref(x, w, b)
    out.append(("conv2d_memopt", "3x8x20x18 k3 o16", make_conv))

    for M, K, N in [(1, 64, 64), (128, 256, 96), (333, 200, 130)]:
        def make(backend, M=M, K=K, N=N):
            x, w, b = rand(M, K), rand(K, N), rand(N)
            f = pypto.jit(fused_linear, fusion=["matmul", "add", "relu"], backend=backend)
            return f, (x, w, b), (lambda: f(x, w, b)), np.maximum(x.astype(np.float64) @ w + b, 0.0)
        out.append(("fused_linear", f"{M}x{K}x{N}", make))
    return out


def _row(name, shape, backend, make, runs):
    try:
        f, args, run, ref = make(backend)
        t0 = time.perf_counter()
        cached = False
        if f is not None:
            low = f.lower(*args)
            cached = backend == "cpu" and low.compiled_from_cache
            compile_s = time.perf_counter() - t0
            result = run()
        else:  # the pipeline jits per stage: its first run includes the compiles
            result = run()
            compile_s = time.perf_counter() - t0
        err = _rel(result, ref)
        times = []
        for _ in range(runs):
            t = time.perf_counter()
            run()
            times.append(time.perf_counter() - t)
        med = statistics.median(times)
        comp = f"{compile_s * 1e3:.1f} ms" + (" (cached)" if cached else "")
        status = "ok" if err < 1e-4 else "FAIL"
        return f"{name:<26} {shape:<18} {backend:<7} {err:10.2e}  {comp:>18}  {med * 1e3:9.3f} ms  {status}"
    except Exception as e:  # noqa: BLE001 - the demo reports failures and carries on
        msg = str(e).splitlines()[0][:90]
        return f"{name:<26} {shape:<18} {backend:<7} ERROR: {type(e).__name__}: {msg}"


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    backends = [b for b in ("cpu", "interp") if not argv or b in argv]
    t = pypto.target()
    print("PyPTO demo: the seed kernels on the CPU backend and the reference interpreter")
    print(f"target: {t['arch']}, {t['cores']} cores, {t['num_threads']} threads, SIMD {' '.join(t['simd']) or '-'}, "
          f"vector {t['vector_bytes']} bytes, L1d {t['caches']['l1d'] >> 10} KiB, L2 {t['caches']['l2'] >> 10} KiB, "
          f"L3 {t['caches']['l3'] >> 20} MiB")
    print()
    head = f"{'kernel':<26} {'shape':<18} {'backend':<7} {'rel.err':>10}  {'compile':>18}  {'run (median)':>12}"
    print(head)
    print("-" * len(head))
    failures = 0
    for name, shape, make in _cases():
        for backend in backends:
            row = _row(name, shape, backend, make, runs=5 if backend == "cpu" else 3)
            failures += ("ERROR" in row) or row.endswith("FAIL")
            print(row, flush=True)
    print()
    print("rel.err: relative norm error vs a float64 NumPy/PyTorch reference; compile: trace + lower + "
          "build (cpu: C++ compile, or a load from the disk cache: 'cached')")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
