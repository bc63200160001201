"""The system cases: dispatch overhead of a cached call, cold compile and warm start (each in
fresh processes), and 1-core vs 2-core scaling of matmul 2048^3."""
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

from bench.cases import kernel, rand, torch_compile_impl, jax_impl, _torch
from bench.common import Bar, Case, Impl, median, rel_err, sample, short_error, warm
from bench.engine import add_ratios, fill_rates, new_record

HERE = os.path.dirname(os.path.abspath(__file__))


# ---- dispatch -------------------------------------------------------------------------------

def dispatch_case(ctx, shape=(8, 8), inner=None):
    rng = ctx.rng()
    a, b, c = (rand(rng, *shape) for _ in range(3))
    inner = inner or ctx.pick(50, 500, 1000)

    def pypto_setup(to_torch):
        def setup():
            fn = kernel("mul_add")
            if to_torch:
                t = _torch()
                ta, tb, tc = (t.from_numpy(z) for z in (a, b, c))
                return lambda: fn(ta, tb, tc)
            return lambda: fn(a, b, c)
        return setup

    def torch_setup(one_op):
        def setup():
            t = _torch()
            ta, tb, tc = (t.from_numpy(z) for z in (a, b, c))
            if one_op:
                return lambda: t.addcmul(tc, ta, tb)
            return lambda: ta * tb + tc
        return setup

    def tfn(x, y, z):
        return x * y + z
    tc = torch_compile_impl(ctx, tfn, a, b, c)
    jx = jax_impl(ctx, lambda jnp, jax: (lambda x, y, z: x * y + z), a, b, c)
    impls = [Impl("pypto", pypto_setup(True), compiled=True),
             Impl("pypto[numpy]", pypto_setup(False), compiled=True),
             Impl("torch", torch_setup(False)), Impl("torch.addcmul", torch_setup(True)), tc, jx]
    for i in impls:
        i.inner = inner
    return Case(
        name="dispatch", shape="x".join(map(str, shape)) + " x3", impls=impls,
        reference=lambda: a.astype(np.float64) * b + c, unit="us",
        bars=[Bar("max_us", 2.0, label="dispatch of a cached kernel <= 2 us")],
        note="a*b+c on three small torch tensors (pypto[numpy]: NumPy arrays); per call")


# ---- cold compile / warm start ----------------------------------------------------------------

def _probe(impl, kname, env_extra, timeout=600):
    env = dict(os.environ)
    env.update(env_extra)
    res = subprocess.run([sys.executable, os.path.join(HERE, "compile_probe.py"), impl, kname],
                         capture_output=True, text=True, env=env, timeout=timeout)
    if res.returncode != 0:
        tail = (res.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise RuntimeError(f"probe exited {res.returncode}: {tail}")
    return json.loads(res.stdout.strip().splitlines()[-1])


def compile_runner(case, env):
    """Cold: a fresh cache dir, a fresh process, its first call. Warm: a second fresh process
    on the same cache dir. Medians over `reps` cache dirs."""
    reps = case.params["reps"]
    cold_case, warm_case = case.sub_cases
    cold_recs, warm_recs = [], []
    for impl, kname in case.params["kinds"]:
        name = f"{impl}[{kname}]"
        rc, rw = new_record(cold_case, name, None), new_record(warm_case, name, None)
        cold_recs.append(rc)
        warm_recs.append(rw)
        env.step(f"compile: {name} x{reps}", case.name, name)
        colds, warms, imports = [], [], []
        try:
            for _ in range(reps):
                with tempfile.TemporaryDirectory(prefix="pypto-bench-cache-") as d:
                    extra = {"PYPTO_CACHE_DIR": d, "TORCHINDUCTOR_CACHE_DIR": d + "/inductor"}
                    for times, rec in ((colds, rc), (warms, rw)):
                        out = _probe(impl, kname, extra)
                        if out["rel_err"] is None or out["rel_err"] > 1e-4:
                            raise RuntimeError(f"wrong result: rel err {out['rel_err']}")
                        rec["rel_err"] = out["rel_err"]
                        times.append(out["first_s"])
                        imports.append(out["import_s"])
            for rec, xs in ((rc, colds), (rw, warms)):
                rec["status"], rec["samples"] = "ok", len(xs)
                rec["median_ms"] = median(xs) * 1e3
                rec["import_s"] = median(imports)
        except Exception as e:
            for rec in (rc, rw):
                rec["status"], rec["error"] = "error", short_error(e)
    add_ratios(cold_recs)
    add_ratios(warm_recs)
    return cold_recs + warm_recs


def compile_case(ctx):
    kinds = [("pypto", "fused_linear"), ("pypto", "matrix_multiply")]
    if ctx.mode == "full" and not ctx.no_compile:
        kinds.append(("torch.compile", "fused_linear"))
    seed = [k for i, k in kinds if i == "pypto"]
    cold = Case("compile_cold", "64x64 seed kernel, fresh cache", [],
                bars=[Bar("max_ms", 1000.0, impl=f"pypto[{k}]",
                          label=f"cold compile of seed {k} <= 1 s") for k in seed])
    warm_ = Case("warm_start", "64x64, 2nd process, same cache", [],
                 bars=[Bar("max_ms", 50.0, impl=f"pypto[{k}]",
                           label=f"warm start of seed {k} <= 50 ms") for k in seed])
    return Case("compile", "", [], runner=compile_runner, steps=len(kinds),
                params={"kinds": kinds, "reps": ctx.pick(1, 1, 3)}, sub_cases=[cold, warm_],
                note="first call in a fresh process (import excluded); cache in a temp dir")


# ---- scaling ----------------------------------------------------------------------------------

def scaling_runner(case, env):
    """Matmul at 1 and 2 threads, for pypto and torch, in interleaved rounds."""
    ctx, t = env.ctx, env.timing
    n = case.params["n"]
    rng = ctx.rng()
    a, b = rand(rng, n, n), rand(rng, n, n)
    torch = _torch()
    ta, tb = torch.from_numpy(a), torch.from_numpy(b)
    ref = None
    counts = [1, 2]
    records, fns = [], {}

    def set_threads(impl, k):
        if impl == "pypto":
            import pypto
            pypto.set_num_threads(k)
        else:
            torch.set_num_threads(k)

    for impl in ("pypto", "torch"):
        for k in counts:
            rec = new_record(case, f"{impl}@{k}", k)
            records.append(rec)
            env.step(f"scaling: check {impl}@{k}", case.name, f"{impl}@{k}")
            try:
                if impl == "pypto":
                    fn0 = kernel("matmul_scaling")
                    fn = (lambda f: (lambda: f(a, b)))(fn0)
                else:
                    fn = lambda: torch.matmul(ta, tb)  # noqa: E731
                set_threads(impl, k)
                t0 = time.perf_counter()
                out = fn()
                rec["first_call_s"] = time.perf_counter() - t0
                if ref is None:
                    ref = a.astype(np.float64) @ b.astype(np.float64)
                rec["rel_err"] = rel_err(out, ref)
                if not rec["rel_err"] <= case.tol:
                    rec["status"] = "wrong"
                    rec["error"] = f"wrong result: rel err {rec['rel_err']:.2e}"
                    continue
                rec["status"] = "ok"
                fns[rec["impl"]] = (impl, k, fn)
            except Exception as e:
                rec["status"], rec["error"] = "error", short_error(e)
    env.step("scaling: time", case.name, "(timing)")
    samples = {name: [] for name in fns}
    try:
        per_call = {}
        for name, (impl, k, fn) in fns.items():
            set_threads(impl, k)
            per_call[name] = warm(fn, t)
        for _ in range(t.rounds):
            for name, (impl, k, fn) in fns.items():
                set_threads(impl, k)
                nrep = int(min(t.max_samples, max(t.min_samples, t.round_s / per_call[name])))
                samples[name].extend(sample(fn, nrep))
    finally:  # leave both frameworks at the suite's thread count
        for impl in ("pypto", "torch"):
            try:
                set_threads(impl, ctx.threads)
            except Exception:
                pass
    for rec in records:
        if samples.get(rec["impl"]):
            rec["samples"] = len(samples[rec["impl"]])
            fill_rates(rec, case, median(samples[rec["impl"]]))
    add_ratios(records)
    for rec in records:  # the scaling itself, for the table
        base = next((r for r in records if r["impl"] == rec["impl"].split("@")[0] + "@1"), None)
        if base and base.get("median_ms") and rec.get("median_ms"):
            rec["speedup_vs_1core"] = base["median_ms"] / rec["median_ms"]
    return records


def scaling_case(ctx, n=2048):
    return Case("scaling_1v2", f"matmul {n}x{n}x{n}", [], runner=scaling_runner,
                flops=2.0 * n ** 3, bytes=3.0 * n * n * 4, steps=5, params={"n": n},
                bars=[Bar("scaling", 1.85, impl="pypto@2", other="pypto@1",
                          label=f"matmul {n}^3: 2 cores >= 1.85x 1 core")])


def system_cases(ctx):
    cases = [dispatch_case(ctx), compile_case(ctx)]
    if ctx.mode != "smoke":
        cases.append(scaling_case(ctx))
    return cases
