"""One fresh process's first call of a kernel, for the compile-time cases of bench/system.py.

    python bench/compile_probe.py pypto fused_linear        (PYPTO_CACHE_DIR set by the caller)
    python bench/compile_probe.py torch.compile fused_linear (TORCHINDUCTOR_CACHE_DIR likewise)

Prints one JSON line: import_s (importing the framework), first_s (the first call: compile or
load from the disk cache, plus a run), run_s (a second, cached call), rel_err (against float64).
Inputs are small (64x64), so first_s - run_s is the compile or load cost.
"""
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
if sys.path and os.path.abspath(sys.path[0] or os.curdir) == HERE:
    sys.path.pop(0)  # import bench modules as bench.*, never by their bare names
for p in (ROOT, os.path.join(ROOT, "python")):
    if p not in sys.path:
        sys.path.insert(0, p)

N = 64


def main():
    impl, kname = sys.argv[1], sys.argv[2]
    import numpy as np
    rng = np.random.default_rng(1)
    x = rng.standard_normal((N, N)).astype(np.float32)
    w = rng.standard_normal((N, N)).astype(np.float32)
    b = rng.standard_normal(N).astype(np.float32)
    if kname == "fused_linear":
        args = (x, w, b)
        ref = np.maximum(x.astype(np.float64) @ w + b, 0)
    elif kname == "matrix_multiply":
        args = (x, w, np.full((N, N), np.nan, dtype=np.float32))
        ref = x.astype(np.float64) @ w
    else:
        raise SystemExit(f"unknown kernel {kname}")

    t0 = time.perf_counter()
    if impl == "pypto":
        import importlib
        importlib.import_module("pypto")  # timed on its own: the import is not compile time
        from bench import kernels
        import_s = time.perf_counter() - t0
        fn = getattr(kernels, kname)
        call = (lambda: fn(*args)) if kname != "matrix_multiply" else (
            lambda: (fn(*args), args[2])[1])
    elif impl == "torch.compile":
        import torch
        import_s = time.perf_counter() - t0
        targs = [torch.from_numpy(a) for a in args]
        if kname == "fused_linear":
            cf = torch.compile(lambda x, w, b: torch.relu(x @ w + b), dynamic=False)
            call = lambda: cf(*targs)  # noqa: E731
        else:
            cf = torch.compile(lambda a, b: a @ b, dynamic=False)
            call = lambda: cf(*targs[:2])  # noqa: E731
    else:
        raise SystemExit(f"unknown impl {impl}")

    t0 = time.perf_counter()
    out = call()
    first_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    call()
    run_s = time.perf_counter() - t0
    if hasattr(out, "detach"):
        out = out.detach().numpy()
    out = np.asarray(out, dtype=np.float64)
    err = float(np.linalg.norm(out - ref) / np.linalg.norm(ref)) if np.isfinite(out).all() else None
    print(json.dumps({"import_s": import_s, "first_s": first_s, "run_s": run_s, "rel_err": err}))


if __name__ == "__main__":
    main()
