"""One fresh process serving 50 calls at random sequence lengths, for the serving cases of
bench/dynamic_cases.py: the total time from making the compiled function to the last output,
compiles (or disk-cache loads) included, imports excluded.

    python -m bench.serving_probe IMPL PARAMS_JSON   (from the repository root; bench/run.py puts
    the root and python/ on PYTHONPATH for its subprocesses)

IMPL: `pypto` (automatic dynamic: the first length static, then one dynamic variant),
`pypto.dynamic` (the sequence dim declared dynamic, `dynamic={"x": [0]}`: the hint
torch.compile(dynamic=True) gets) or `torch.compile` (dynamic=True). The caller sets
PYPTO_CACHE_DIR / TORCHINDUCTOR_CACHE_DIR: a fresh directory for a cold run, the same one again
for a warm run. torch's dynamo and inductor modules are imported before the clock starts (their
import is not compile time). Prints one JSON line: total_s, compiles (pypto), rel_err (the worst
over the calls, against float64 NumPy).

With "train": true in PARAMS_JSON each call is a training step (forward, and backward of a
random cotangent of the output; x, w and b require grad), IMPL `pypto` (automatic dynamic), `torch` (eager) or
`torch.compile` (dynamic=True); rel_err covers the output and the three gradients, against
torch's autograd in float64.
"""
import json
import sys
import time


def serving_fn(x, w, b):
    import pypto
    h = pypto.layer_norm(x, x.shape[-1], None, None, 1e-5)
    return pypto.relu(pypto.matmul(h, w) + b)


def serving_torch(x, w, b):
    import torch
    h = torch.nn.functional.layer_norm(x, (x.shape[-1],), None, None, 1e-5)
    return torch.relu(h @ w + b)


def reference(x, w, b):
    import numpy as np
    x = x.astype(np.float64)
    h = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5)
    return np.maximum(h @ w.astype(np.float64) + b, 0)


def inputs(params):
    import numpy as np
    rng = np.random.default_rng(7)
    d, n_out = params["d"], params["n_out"]
    w = (rng.standard_normal((d, n_out)) * 0.05).astype(np.float32)
    b = rng.standard_normal(n_out).astype(np.float32)
    return [rng.standard_normal((n, d)).astype(np.float32) for n in params["lengths"]], w, b


def cotangents(xs, n_out):
    import numpy as np
    rng = np.random.default_rng(11)
    return [rng.standard_normal((x.shape[0], n_out)).astype(np.float32) for x in xs]


def training_steps(fn, xs, gs, w, b):
    """Forward and backward at each length (torch tensors; x, w, b require grad; the output's
    cotangent from `gs`): per call the output and the gradients of x, w and b (w's and b's of
    that call alone)."""
    import torch
    tw, tb = torch.from_numpy(w).requires_grad_(), torch.from_numpy(b).requires_grad_()
    outs = []
    for x, g in zip(xs, gs):
        tx = torch.from_numpy(x).requires_grad_()
        out = fn(tx, tw, tb)
        out.backward(torch.from_numpy(g))
        outs.append((out.detach().numpy(), tx.grad.numpy(), tw.grad.numpy().copy(), tb.grad.numpy().copy()))
        tw.grad = tb.grad = None
    return outs


def training_reference(x, g, w, b):
    import torch
    tx, tw, tb = (torch.from_numpy(a).double().requires_grad_() for a in (x, w, b))
    out = serving_torch(tx, tw, tb)
    out.backward(torch.from_numpy(g).double())
    return [a.detach().numpy() for a in (out, tx.grad, tw.grad, tb.grad)]


def worst_error(pairs):
    """The largest relative norm error over (output, float64 reference) pairs; inf for a
    non-finite output."""
    import numpy as np
    worst = 0.0
    for o, ref in pairs:
        o = np.asarray(o, dtype=np.float64)
        if not np.isfinite(o).all():
            return float("inf")
        worst = max(worst, float(np.linalg.norm(o - ref) / max(np.linalg.norm(ref), 1e-30)))
    return worst


def main():
    impl, params = sys.argv[1], json.loads(sys.argv[2])
    if params.get("train"):
        return main_training(impl, params)
    import numpy as np
    xs, w, b = inputs(params)
    if impl in ("pypto", "pypto.dynamic"):
        import pypto
        dynamic = {"x": [0]} if impl == "pypto.dynamic" else None
        t0 = time.perf_counter()
        fn = pypto.jit(serving_fn, dynamic=dynamic)
        outs = [fn(x, w, b) for x in xs]
        total = time.perf_counter() - t0
        compiles = fn.cache_size
    elif impl == "torch.compile":
        import torch
        import torch._dynamo  # noqa: F401 - imported before the clock starts
        import torch._inductor.compile_fx  # noqa: F401
        tw, tb = torch.from_numpy(w), torch.from_numpy(b)
        t0 = time.perf_counter()
        fn = torch.compile(serving_torch, dynamic=True)
        outs = [fn(torch.from_numpy(x), tw, tb).numpy() for x in xs]
        total = time.perf_counter() - t0
        compiles = None
    else:
        raise SystemExit(f"unknown impl {impl}")
    worst = worst_error((o, reference(x, w, b)) for x, o in zip(xs, outs))
    print(json.dumps({"total_s": total, "compiles": compiles, "rel_err": worst}))


def main_training(impl, params):
    """Training at random lengths: forward + backward per call, compiles included."""
    import torch
    xs, w, b = inputs(params)
    gs = cotangents(xs, params["n_out"])
    compiles = None
    if impl == "pypto":
        import pypto
        t0 = time.perf_counter()
        fn = pypto.jit(serving_fn)
        outs = training_steps(fn, xs, gs, w, b)
        total = time.perf_counter() - t0
        compiles = fn.cache_size
    elif impl in ("torch", "torch.compile"):
        import torch._dynamo  # noqa: F401 - imported before the clock starts
        import torch._inductor.compile_fx  # noqa: F401
        t0 = time.perf_counter()
        fn = torch.compile(serving_torch, dynamic=True) if impl == "torch.compile" else serving_torch
        outs = training_steps(fn, xs, gs, w, b)
        total = time.perf_counter() - t0
    else:
        raise SystemExit(f"unknown impl {impl}")
    worst = worst_error(pair for x, g, got in zip(xs, gs, outs) for pair in zip(got, training_reference(x, g, w, b)))
    print(json.dumps({"total_s": total, "compiles": compiles, "rel_err": worst}))


if __name__ == "__main__":
    main()
