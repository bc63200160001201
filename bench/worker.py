"""The process that runs the cases. bench/run.py starts it and reads its events, so a kernel
that crashes the process (a segfault in native code) or hangs costs only itself: run.py records
it and starts a new worker for the rest.

Events, one JSON object a line, appended to the file run.py names:
  {"ev": "machine", "m": {...}}                       the machine's limits (first worker only)
  {"ev": "plan", "cases": [{"name", "steps", "bars"}]}
  {"ev": "case", "case": NAME}                        a case starts
  {"ev": "step", "case": NAME, "impl": IMPL, "what": TEXT}
  {"ev": "records", "case": NAME, "records": [...]}   a case is done
  {"ev": "done"}
run.py passes what earlier workers finished or lost in $PYPTO_BENCH_STATE (JSON): "done" (case
names to skip), "failed" ({"case/impl": reason}: impls to report as failed without running),
"machine" (limits already measured).
"""
import json
import os
import sys
import time
from dataclasses import asdict


class Events:
    def __init__(self, path):
        self.f = open(path, "a", buffering=1)

    def emit(self, **kw):
        self.f.write(json.dumps(kw, default=str) + "\n")
        self.f.flush()


def bar_dicts(case):
    return [dict(asdict(b), case=c.name) for c in [case, *case.sub_cases] for b in c.bars]


def build_cases(ctx, args, threads):
    from bench.cases import compute_cases
    from bench.system import system_cases
    from bench.memory_cases import memory_cases
    from bench.op_cases import op_cases
    from bench.lowp_cases import lowp_cases
    from bench.torch_interop import interop_cases
    from bench.pipeline_case import pipeline_cases
    from bench.dynamic_cases import dynamic_cases
    cases = (compute_cases(ctx) + lowp_cases(ctx) + memory_cases(ctx) + op_cases(ctx) + system_cases(ctx)
             + interop_cases(ctx)
             + pipeline_cases(ctx) + dynamic_cases(ctx))
    if args.cases:
        wanted = [w.strip() for w in args.cases.split(",") if w.strip()]
        cases = [c for c in cases if any(w in n for w in wanted
                                         for n in [c.name, *(s.name for s in c.sub_cases)])]
    if threads < 2:
        cases = [c for c in cases if c.name != "scaling_1v2"]
    return cases


def run_worker(args, mode, threads, events_path, log, set_threads, have_jax, held_back):
    from bench import machine
    from bench.cases import Ctx
    from bench.common import Timing, format_exc
    from bench.engine import Env, impl_steps, run_case

    ev = Events(events_path)
    state = json.loads(os.environ.get("PYPTO_BENCH_STATE", "{}"))
    done, failed = set(state.get("done", [])), state.get("failed", {})

    pypto_target = set_threads(threads, log)
    jax_ok = have_jax()
    no_compile = "skipped (--no-compile)" if args.no_compile else (
        "not run in --smoke" if mode == "smoke" else None)
    ctx = Ctx(mode=mode, threads=threads, have_jax=jax_ok and not args.no_jax,
              jax_off="skipped (--no-jax)" if jax_ok else "n/a (jax not installed)",
              no_compile=no_compile)
    timing = {
        "smoke": Timing(warmup_s=0.0, min_warmup=1, rounds=1, round_s=0.0, min_samples=1,
                        max_samples=2),
        "quick": Timing(warmup_s=0.05, min_warmup=1, rounds=3, round_s=0.08, min_samples=1, settle_s=0.12),
        "full": Timing(warmup_s=0.3, min_warmup=2, rounds=5, round_s=0.3, min_samples=3, settle_s=0.12),
    }[mode]
    if args.rounds:
        timing.rounds = args.rounds

    cases = build_cases(ctx, args, threads)
    ev.emit(ev="plan", cases=[{"name": c.name, "steps": impl_steps(c), "bars": bar_dicts(c)}
                              for c in cases])
    cases = [c for c in cases if c.name not in done]
    for c in cases:
        for impl in c.impls:
            reason = failed.get(f"{c.name}/{impl.name}")
            if reason:
                impl.fail = reason

    m = state.get("machine")
    if m is None:
        log(f"[bench] {mode} run: {len(cases)} cases, {threads} threads; measuring the machine ...")
        big = 4096 * 4096 * 4
        copy_bytes = {"smoke": 1 << 22, "quick": big, "full": big}[mode]
        m = machine.measure(threads, copy_bytes,
                            big_copy_bytes=(1 << 30) if mode == "full" else None, mode=mode,
                            log=log)
        m["pypto_target"] = pypto_target
        m["blas_env_cleared"] = os.environ.get("PYPTO_BENCH_BLAS_ENV_CLEARED", "")
        m["malloc_env"] = ",".join(f"{k}={os.environ[k]}" for k in
                                   ("MALLOC_MMAP_MAX_", "MALLOC_TRIM_THRESHOLD_") if k in os.environ)
        m["blas_env_kept"] = ",".join(f"{k}={os.environ[k]}" for k in held_back
                                      if k in os.environ)
        ev.emit(ev="machine", m=m)
        from bench import report
        log(report.machine_summary(m))

    progress = None
    if not args.no_progress:
        try:
            from tqdm import tqdm
            progress = tqdm(total=sum(impl_steps(c) for c in cases), file=sys.stderr,
                            dynamic_ncols=True, leave=False,
                            bar_format="{l_bar}{bar}| {n_fmt}/{total_fmt} [{elapsed}<{remaining}]")
        except ImportError:
            pass
    env = Env(ctx, timing, m, progress=progress, verbose=args.verbose,
              compile_budget_s=0.0 if mode == "quick" else None, events=ev)
    for case in cases:
        ev.emit(ev="case", case=case.name)
        if progress is None:
            log(f"[bench] {case.name} {case.shape} ...")
        t_case = time.perf_counter()
        try:
            recs = run_case(case, env)
        except Exception as e:  # a bug in the suite itself: report it, keep going
            log(f"[bench] case {case.name} failed in the harness:\n{format_exc()}")
            recs = [{"case": case.name, "shape": case.shape, "impl": "(harness)",
                     "status": "error", "error": f"{type(e).__name__}: {e}", "vs": {},
                     "median_ms": None, "gflops": None, "gbs": None}]
        dt = time.perf_counter() - t_case
        for r in recs:
            r["case_s"] = round(dt, 2)
        if progress is None:
            log(f"[bench]   {dt:.1f} s")
        ev.emit(ev="records", case=case.name, records=recs)
    if progress is not None:
        progress.close()
    ev.emit(ev="done")
    return 0
