"""Runs one case: set up and check every impl against the float64 reference, then time the ones
that passed in interleaved rounds, and turn the samples into records.

A record is one (case, impl) pair: {"case", "shape", "impl", "status", "median_ms", "gflops",
"gbs", "vs": {peer: peer_time / this_time}, ...}. status is "ok", "wrong" (ran, but its result
differs from the reference: never timed), "error" (raised) or "skipped" (with the reason in
"error").
"""
import sys
import time

from bench import machine as mach
from bench.common import median, rel_err, short_error, timed_rounds, warm, format_exc


class Env:
    """What every case run shares: timing settings, the machine's limits, progress output."""

    def __init__(self, ctx, timing, machine, progress=None, verbose=False, compile_budget_s=None,
                 events=None):
        self.ctx = ctx
        self.timing = timing
        self.machine = machine
        self.progress = progress
        self.verbose = verbose
        # seconds of torch.compile allowed for impls no bar depends on (None: no limit). The
        # first compile in a process costs ~20-30 s of Inductor start-up on 2 cores.
        self.compile_budget_s = compile_budget_s
        self.compile_spent_s = 0.0
        self.events = events  # worker events: run.py learns which impl was running if we die

    def log(self, msg):
        if self.progress is not None:
            self.progress.write(msg)
        else:
            print(msg, file=sys.stderr, flush=True)

    def step(self, what, case=None, impl=None, **extra):
        if self.events is not None:
            self.events.emit(ev="step", case=case, impl=impl, what=what, **extra)
        if self.progress is not None:
            self.progress.set_description_str(what[:60])
            self.progress.update(1)
        elif self.verbose:
            self.log(f"  {what}")


def new_record(case, impl_name, threads):
    return {"case": case.name, "shape": case.shape, "impl": impl_name, "status": None,
            "error": None, "rel_err": None, "median_ms": None, "gflops": None, "gbs": None,
            "vs": {}, "threads": threads, "first_call_s": None, "samples": 0}


def _needed_by_bar(case, impl_name):
    return any(b.other == impl_name or b.impl == impl_name for b in case.bars)


def fill_rates(rec, case, seconds):
    """median time -> ms, GFLOP/s, GB/s (fractions of the machine's limits come at the end of
    the run, from apply_limits, once the limits have been measured again)."""
    rec["median_ms"] = seconds * 1e3
    if case.unit == "us":
        rec["median_us"] = seconds * 1e6
    if case.flops:
        rec["gflops"] = case.flops / seconds * 1e-9
    if case.bytes:
        rec["gbs"] = case.bytes / seconds * 1e-9
    rec["bound"] = case.bound


def apply_limits(records, m):
    """Each record's fraction of what the machine allows: the FMA peak of the cores it used for
    compute-bound cases, the copy bandwidth for memory-bound ones."""
    for rec in records:
        rec.pop("peak_frac", None)
        rec.pop("bw_frac", None)
        if rec.get("gflops") and rec.get("bound") == "compute":
            peak = mach.peak_for_threads(m, rec["threads"])
            if peak:
                rec["peak_frac"] = rec["gflops"] / peak
        if rec.get("gbs") and rec.get("bound") == "memory" and m.get("copy_gbs"):
            rec["bw_frac"] = rec["gbs"] / m["copy_gbs"]


def add_ratios(records):
    """vs[peer] = peer's median / this median (> 1: this impl is faster), within one case."""
    ok = [r for r in records if r["status"] == "ok" and r["median_ms"]]
    for r in ok:
        r["vs"] = {p["impl"]: p["median_ms"] / r["median_ms"] for p in ok if p is not r}


def run_case(case, env):
    if case.runner is not None:
        return case.runner(case, env)
    threads = env.ctx.threads
    records, fns, inners = [], {}, {}
    ref = None
    for impl in case.impls:
        rec = new_record(case, impl.name, impl.threads or threads)
        records.append(rec)
        env.step(f"{case.name}: check {impl.name}", case.name, impl.name)
        if impl.fail:
            rec["status"], rec["error"] = "error", impl.fail
            continue
        if impl.skip:
            rec["status"], rec["error"] = "skipped", impl.skip
            continue
        if (impl.name.startswith("torch.compile") and env.compile_budget_s is not None
                and env.compile_spent_s >= env.compile_budget_s
                and not _needed_by_bar(case, impl.name)):
            rec["status"] = "skipped"
            rec["error"] = "not run in --quick (compile time; no bar needs it)"
            continue
        t0 = time.perf_counter()
        try:
            fn = impl.setup()
            out = fn()  # the first call compiles (pypto, torch.compile, jax)
            rec["first_call_s"] = time.perf_counter() - t0
            rec["compiled"] = impl.compiled
            if ref is None:
                ref = case.reference()
            err = rel_err(out, ref)
            rec["rel_err"] = err
            if not err <= case.tol:
                rec["status"] = "wrong"
                rec["error"] = f"wrong result: rel err {err:.2e} > {case.tol:g} vs float64 reference"
                continue
        except Exception as e:
            rec["status"], rec["error"] = "error", short_error(e)
            if env.verbose:
                env.log(f"{case.name}/{impl.name}:\n{format_exc()}")
            continue
        finally:
            if impl.name.startswith("torch.compile"):
                env.compile_spent_s += time.perf_counter() - t0
        rec["status"] = "ok"
        fns[impl.name] = fn
        inners[impl.name] = impl.inner
    env.step(f"{case.name}: time {', '.join(fns) or '(nothing)'}", case.name, "(timing)",
             impls=list(fns))
    if fns:
        per_call = {}
        for k, fn in fns.items():
            if inners[k] > 1:
                for _ in range(inners[k]):  # warm the per-call path the way it is timed
                    fn()
            per_call[k] = warm(fn, env.timing)
        samples = timed_rounds(fns, inners, per_call, env.timing)
        for rec in records:
            s = samples.get(rec["impl"])
            if s:
                rec["samples"] = len(s)
                fill_rates(rec, case, median(s))
    add_ratios(records)
    return records


def impl_steps(case):
    """How many progress steps run_case makes for this case."""
    if case.runner is not None:
        return case.steps
    return len(case.impls) + 1
