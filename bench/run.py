#!/usr/bin/env python3
"""PyPTO's benchmark suite (DESIGN.md §5): each case on PyPTO and on its peers (torch eager,
torch.compile, JAX jit when installed, NumPy where it applies), every result checked against a
float64 reference before it is timed, medians of interleaved timed rounds, read against the
machine's own measured limits (FMA peak, copy bandwidth).

    python bench/run.py                 # full run (4-7 minutes on 2 cores)
    python bench/run.py --quick         # same cases, fewer samples: within 3 minutes on 2 cores
    python bench/run.py --smoke         # tiny sizes, correctness only (what CI runs)
    python bench/run.py --json out.json --png out.png --cases matmul,attention

Prints a table and the bars; --json writes one record per (case, impl); a PNG chart is written
beside the JSON (or to --png). Exit status 1 when any impl computed a wrong result.
"""
import os
import sys

# These machines set OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE to hold NumPy's BLAS back; a benchmark
# must see the hardware as it is. The BLAS libraries read them when they load, so drop them and
# start the interpreter again before numpy or torch is imported. (--smoke keeps the environment
# as given: it is what the tests run.)
_HELD_BACK = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")
if ("--smoke" not in sys.argv and "--keep-env" not in sys.argv
        and any(k in os.environ for k in _HELD_BACK)):
    os.environ["PYPTO_BENCH_BLAS_ENV_CLEARED"] = ",".join(
        f"{k}={os.environ.pop(k)}" for k in _HELD_BACK if k in os.environ)
    os.execv(sys.executable, [sys.executable, *sys.orig_argv[1:]])

import argparse  # noqa: E402
import json  # noqa: E402
import signal  # noqa: E402
import time  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
# Run as a script, sys.path[0] is bench/ itself; its module names (cases, machine, report...)
# are generic, so import them only as bench.* and keep bench/ off the path.
if sys.path and os.path.abspath(sys.path[0] or os.curdir) == HERE:
    sys.path.pop(0)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--quick", action="store_true", help="fewer samples; within 3 min on 2 cores")
    mode.add_argument("--smoke", action="store_true", help="tiny sizes, correctness only (CI)")
    p.add_argument("--json", metavar="FILE", help="write the records as JSON")
    p.add_argument("--png", metavar="FILE", help="chart path (default: beside --json)")
    p.add_argument("--no-png", action="store_true", help="no chart")
    p.add_argument("--markdown", metavar="FILE", help="write the tables as Markdown")
    p.add_argument("--cases", help="comma-separated substrings of case names to run")
    p.add_argument("--threads", type=int, help="threads for every impl (default: all usable cores)")
    p.add_argument("--no-compile", action="store_true", help="skip torch.compile")
    p.add_argument("--no-jax", action="store_true", help="skip JAX even when installed")
    p.add_argument("--rounds", type=int, help="interleaved timing rounds per case")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--keep-env", action="store_true",
                   help="keep OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE as set")
    p.add_argument("--malloc-as-is", action="store_true",
                   help="don't keep freed memory in the process (see MALLOC_ENV)")
    p.add_argument("-v", "--verbose", action="store_true", help="tracebacks of failing impls")
    p.add_argument("--_worker", metavar="EVENTS", help=argparse.SUPPRESS)
    return p.parse_args(argv)


def setup_environment(args):
    """Thread counts and import paths, before numpy/torch/pypto load."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:
        cores = os.cpu_count() or 1
    threads = args.threads or cores
    if args.threads:
        for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
            os.environ[var] = str(threads)
    os.environ["PYPTO_NUM_THREADS"] = str(threads)
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    for p in (ROOT, os.path.join(ROOT, "python")):
        if p not in sys.path:
            sys.path.insert(0, p)
    # compile_probe.py subprocesses need the same paths
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [ROOT, os.path.join(ROOT, "python")] + [x for x in os.environ.get("PYTHONPATH", "").split(
            os.pathsep) if x])
    return threads, cores


def set_threads(threads, log):
    """The same thread count for every framework; returns pypto's target description."""
    import torch
    torch.set_num_threads(threads)
    try:
        import pypto
        pypto.set_num_threads(threads)
        return pypto.target()
    except Exception as e:  # pypto's own errors show per case; note it once here
        log(f"note: pypto not usable here ({type(e).__name__}: {e})")
        return None


def have_jax():
    import importlib.util
    return importlib.util.find_spec("jax") is not None


# Every functional op here allocates its output; glibc serves a 64 MiB block with a fresh mmap
# and unmaps it on free, so each call page-faults its whole output in again (~20 ms for 64 MiB
# on this VM: more than the op itself). That is the OS, not the kernel, and it hits every impl
# alike; the worker runs with freed memory kept in the heap for reuse instead.
MALLOC_ENV = {"MALLOC_MMAP_MAX_": "0", "MALLOC_TRIM_THRESHOLD_": str(1 << 62)}


def worker_command(argv):
    """This script again, as a worker, with the same options."""
    return [sys.executable, os.path.abspath(__file__), *argv]


def supervise(argv, args, mode, log):
    """Runs the cases in worker processes; when one dies (a crash in native code) or a case
    hangs past its time limit, records the failure against the impl that was running and
    starts a new worker for the rest. Returns (machine, plan, records)."""
    import subprocess
    import tempfile
    case_limit_s = {"smoke": 300, "quick": 300, "full": 1200}[mode]
    state = {"done": [], "failed": {}, "machine": None}
    plan, records = [], []
    with tempfile.TemporaryDirectory(prefix="pypto-bench-") as tmp:
        for attempt in range(8):
            path = os.path.join(tmp, f"events{attempt}.jsonl")
            open(path, "w").close()
            env = dict(os.environ, PYPTO_BENCH_STATE=json.dumps(state))
            if not args.malloc_as_is:
                env.update(MALLOC_ENV)
            # its own process group (so a hung worker is killed with its children), but the
            # same session: the scheduler's per-session group and its priority carry over
            proc = subprocess.Popen(worker_command([*argv, "--_worker", path]), env=env,
                                    preexec_fn=os.setpgrp)
            current, step, t_case, killed = None, None, time.perf_counter(), None
            pos = 0
            while True:
                try:
                    rc = proc.wait(timeout=0.5)
                except subprocess.TimeoutExpired:
                    rc = None
                with open(path) as f:
                    f.seek(pos)
                    chunk = f.read()
                # only whole lines; a partial last line is read again next time
                cut = chunk.rfind("\n") + 1
                pos += len(chunk[:cut].encode())
                for line in chunk[:cut].splitlines():
                    e = json.loads(line)
                    if e["ev"] == "machine":
                        state["machine"] = e["m"]
                    elif e["ev"] == "plan" and not plan:
                        plan = e["cases"]
                    elif e["ev"] == "case":
                        current, step, t_case = e["case"], None, time.perf_counter()
                    elif e["ev"] == "step":
                        step = e
                    elif e["ev"] == "records":
                        records.extend(e["records"])
                        state["done"].append(e["case"])
                        current, step = None, None
                if rc is not None:
                    break
                if current and time.perf_counter() - t_case > case_limit_s:
                    killed = f"timed out after {case_limit_s} s"
                    os.killpg(proc.pid, signal.SIGKILL)
            if rc == 0 and current is None:
                break
            if current is None:  # died outside any case (machine probe, imports)
                log(f"[bench] worker exited {rc} outside a case; giving up")
                break
            why = killed or _describe_exit(rc)
            impl = (step or {}).get("impl")
            what = (step or {}).get("what", "starting")
            log(f"[bench] worker {why} in {current} ({what}); continuing without it")
            if impl and impl != "(timing)" and current not in RUNNER_CASES:
                state["failed"][f"{current}/{impl}"] = f"{why} during its checked run"
            elif impl == "(timing)" and current not in RUNNER_CASES:
                # which impl is unknown; the peers are mature libraries, so blame PyPTO's
                for name in step.get("impls", []) or ["pypto"]:
                    if name.startswith("pypto"):
                        state["failed"][f"{current}/{name}"] = f"{why} while being timed"
            else:
                state["done"].append(current)
                records.append({"case": current, "shape": "", "impl": impl or "(case)",
                                "status": "error", "error": f"{why} ({what})", "vs": {},
                                "median_ms": None, "gflops": None, "gbs": None})
    return state["machine"], plan, records


# Cases that measure themselves cannot rerun without one impl: a crash fails the whole case.
RUNNER_CASES = ("compile", "scaling_1v2")


def _describe_exit(rc):
    if rc is not None and rc < 0:
        try:
            return f"crashed ({signal.Signals(-rc).name})"
        except ValueError:
            return f"crashed (signal {-rc})"
    return f"exited with status {rc}"


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    mode = "smoke" if args.smoke else "quick" if args.quick else "full"
    threads, cores = setup_environment(args)

    def log(msg):
        print(msg, file=sys.stderr, flush=True)

    if args._worker:
        from bench.worker import run_worker
        return run_worker(args, mode, threads, args._worker, log, set_threads, have_jax,
                          _HELD_BACK)

    t_start = time.perf_counter()
    from bench import bars as bars_mod
    from bench import machine, report
    from bench.engine import apply_limits

    m, plan, records = supervise(argv, args, mode, log)
    if m is None:
        log("[bench] no result: the worker failed before measuring the machine")
        return 2
    machine.remeasure(m, mode)
    apply_limits(records, m)
    bar_results = bars_mod.evaluate_all([b for c in plan for b in c["bars"]], records)
    elapsed = time.perf_counter() - t_start
    print(f"\nPyPTO benchmark ({mode}, {elapsed:.0f} s)\n")
    print(report.machine_summary(m) + "\n")
    print(report.text_table(records) + "\n")
    if bar_results:
        met = sum(1 for b in bar_results if b["met"])
        print(f"Bars (DESIGN.md §5): {met} of {len(bar_results)} met\n")
        print(report.bars_table(bar_results) + "\n")

    machine_rec = {"case": "machine", "shape": "", "impl": "limits", "status": "ok",
                   "median_ms": None, "gflops": m.get("fma_peak_all"), "gbs": m.get("copy_gbs"),
                   "vs": {}, "machine": m, "mode": mode, "elapsed_s": elapsed}
    if args.json:
        with open(args.json, "w") as f:
            json.dump([machine_rec] + records, f, indent=1, default=str)
        log(f"[bench] wrote {args.json}")
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(report.machine_summary(m).replace("\n", "  \n") + "\n\n")
            f.write(report.markdown_table(records) + "\n" + report.markdown_bars(bar_results))
        log(f"[bench] wrote {args.markdown}")
    png = args.png or (os.path.splitext(args.json)[0] + ".png" if args.json else None)
    if png and not args.no_png:
        try:
            report.chart(records, bar_results, png, title=f"PyPTO vs peers ({mode})")
            log(f"[bench] wrote {png}")
        except Exception as e:
            log(f"[bench] chart not written: {type(e).__name__}: {e}")

    wrong = [r for r in records if r["status"] == "wrong"]
    for r in wrong:
        log(f"[bench] WRONG RESULT: {r['case']} / {r['impl']}: {r['error']}")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
