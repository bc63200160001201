"""What profiled calls produce (the region itself, `with pypto.profiling() as prof:`, is in
profile.py, which uses this module): the per-nest table; the Chrome
trace (chrome://tracing, ui.perfetto.dev) of profiled calls; the machine's peak rates, measured
once per machine and kept in the kernel cache directory."""
from __future__ import annotations

import json
import os
import threading
import time

import numpy as np

from . import _C


def nest_table(p):
    """The per-nest lines of a profile: time, share of the run, rates, fraction of peak, lines."""
    peak = machine_peak()
    head = f"{'nest':>4} {'ms':>9} {'%run':>5} {'GFLOP/s':>9} {'GB/s':>8} {'%peak':>6} {'thr':>3}  source"
    rows = [head]
    for n in p.nests:
        share = 100 * n.ms / p.run_ms if p.run_ms > 0 else float("nan")
        # The bound that matters: compute-bound nests against peak FLOP/s, the rest against GB/s.
        frac = max(n.gflops / peak["gflops"], n.gbytes_per_s / peak["gbytes_per_s"])
        where = "; ".join(_short(w) for w in n.lines[:3]) or "(no source line)"
        if len(n.lines) > 3:
            where += f"; +{len(n.lines) - 3} more"
        rows.append(f"{n.index:>4} {n.ms:>9.4f} {share:>5.1f} {n.gflops:>9.2f} {n.gbytes_per_s:>8.2f} "
                    f"{100 * frac:>5.1f}% {n.threads:>3}  {where}")
    rows.append(f"peak of this machine: {peak['gflops']:.1f} GFLOP/s, {peak['gbytes_per_s']:.1f} GB/s "
                f"({peak['how']})")
    return "\n".join(rows)


def _short(where):
    """'path/to/file.py:12: text' -> 'file.py:12: text'."""
    path, sep, rest = where.partition(":")
    return os.path.basename(path) + sep + rest if sep else where


# --- Chrome trace ------------------------------------------------------------------------------

def write_chrome_trace(profiles, path):
    """Chrome trace event JSON ("X" complete events, microseconds): per call a span on the calling
    thread, inside it one span per nest, and per parallel chunk a span on the thread that ran it."""
    pid = os.getpid()
    events, threads = [], {}
    for i, p in enumerate(profiles):
        caller = p.thread
        threads.setdefault(caller, "caller")
        events.append(_span(f"{p.kernel} (call {i})", "call", p.t0_ns, p.t1_ns, pid, caller,
                            {"run_ms": p.run_ms, "flops": p.flops, "bytes": p.bytes, "backend": p.backend}))
        by_index = {n.index: n for n in p.nests}
        for nest, tid, b, e in p.nest_spans:
            n = by_index.get(nest)
            args = {"lines": n.lines, "flops": n.flops, "bytes": n.bytes, "gflops": n.gflops} if n else {}
            events.append(_span(f"{p.kernel} nest {nest}", "nest", b, e, pid, tid, args))
        for nest, tid, b, e in p.chunk_spans:
            threads.setdefault(tid, "worker")
            events.append(_span(f"{p.kernel} nest {nest} chunk", "chunk", b, e, pid, tid, {"nest": nest}))
    for tid, kind in threads.items():
        events.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid,
                       "args": {"name": f"{kind} {tid}"}})
    with open(path, "w") as f:
        json.dump({"traceEvents": events, "displayTimeUnit": "ms"}, f)


def _span(name, cat, b, e, pid, tid, args):
    return {"name": name, "cat": cat, "ph": "X", "ts": b / 1e3, "dur": max(0, e - b) / 1e3, "pid": pid,
            "tid": tid, "args": args}


def plot_trace(trace, png, title=None):
    """Draw a Chrome trace (a path to its JSON, or the loaded dict) as a PNG timeline: one row per
    thread (its thread_name), each complete ("X") span a bar; spans inside others (a nest inside a
    call) are drawn thinner on top, so a call, its nests and the workers' chunks read at a glance.
    Works for pypto.profiling()'s traces and the simulator's (pypto.SimReport.to_chrome_trace)."""
    from matplotlib.figure import Figure  # no pyplot: no global state, no display needed
    if not isinstance(trace, dict):
        with open(trace) as f:
            trace = json.load(f)
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    names = {(e.get("pid"), e.get("tid")): e["args"]["name"] for e in events
             if e.get("ph") == "M" and e.get("name") == "thread_name"}
    spans = [e for e in events if e.get("ph") == "X"]
    if not spans:
        raise ValueError("plot_trace: the trace has no complete ('X') events")
    rows = sorted({(e.get("pid"), e.get("tid")) for e in spans}, key=lambda r: (str(r[0]), str(r[1])))
    t0 = min(e["ts"] for e in spans)
    kinds = sorted({e.get("cat") or e["name"] for e in spans})
    colors = {k: f"C{i % 10}" for i, k in enumerate(kinds)}
    fig = Figure(figsize=(9, 0.6 + 0.55 * len(rows)))
    ax = fig.subplots()
    for y, row in enumerate(rows):
        mine = sorted((e for e in spans if (e.get("pid"), e.get("tid")) == row), key=lambda e: (e["ts"], -e["dur"]))
        open_ends = []  # ends of the enclosing spans: depth = how many still enclose this one
        for e in mine:
            open_ends = [end for end in open_ends if end > e["ts"]]
            depth = len(open_ends)
            h = 0.8 * 0.6 ** depth
            ax.barh(y, e["dur"] / 1e3, left=(e["ts"] - t0) / 1e3, height=h,
                    color=colors[e.get("cat") or e["name"]], edgecolor="black", linewidth=0.3)
            open_ends.append(e["ts"] + e["dur"])
    ax.set_yticks(range(len(rows)), [names.get(r, f"thread {r[1]}") for r in rows])
    ax.invert_yaxis()
    ax.set_xlabel("ms from the first span")
    ax.legend(handles=[ax.barh(0, 0, color=colors[k], label=k) for k in kinds], loc="upper left",
              bbox_to_anchor=(1.0, 1.0), fontsize=8)
    if title:
        ax.set_title(title)
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    fig.savefig(png, dpi=100)


# --- the machine's peak rates ------------------------------------------------------------------

_peak = None
_peak_lock = threading.Lock()


def machine_peak():
    """{"gflops", "gbytes_per_s", "how"}: the best rate of a float32 BLAS matmul (NumPy's) and of
    a large array copy on this machine, best of three, with every thread. Measured once per
    machine (keyed by the CPU's model and flags) and kept in the kernel cache directory, unless
    the machine was oversubscribed (load average above its core count): then for this process only."""
    global _peak
    with _peak_lock:
        if _peak is not None:
            return _peak
        path = os.path.join(_C.cache_dir(), f"peak-{_C.cpu_key()}.json")
        try:
            with open(path) as f:
                _peak = json.load(f)
            if {"gflops", "gbytes_per_s", "how"} <= set(_peak):
                return _peak
        except (OSError, ValueError):
            pass
        busy = os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0
        _peak = _measure_peak()
        cores = os.cpu_count() or 1
        if busy > cores:
            # Other work was running: the rates are low, and a cached figure would stay wrong for
            # every later process. Use them in this process only; the next one measures again.
            _peak["how"] += f" (under load: load average {busy:.1f} on {cores} cores; not kept)"
            return _peak
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as f:
            json.dump(_peak, f)
        os.replace(tmp, path)
        return _peak


def _measure_peak():
    rng = np.random.default_rng(0)
    n = 1024
    a = rng.random((n, n), dtype=np.float32)
    b = rng.random((n, n), dtype=np.float32)
    gflops = 2 * n ** 3 / _best(lambda: a @ b) / 1e9
    src = rng.random(16 << 20, dtype=np.float32)  # 64 MiB: past the caches
    dst = np.empty_like(src)
    gbs = 2 * src.nbytes / _best(lambda: np.copyto(dst, src)) / 1e9
    return {"gflops": gflops, "gbytes_per_s": gbs,
            "how": "measured: NumPy float32 matmul 1024^3 and a 64 MiB copy, best of 3"}


def _best(fn, repeats=3):
    fn()
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best
