"""Debugging and tuning aids: the profile of the last kernel call (pypto.get_last_profile), with
per-nest times when profiling is on (@pypto.jit(profile=True), PYPTO_PROFILE=1, kernel.profile,
pypto.profiling()), the time of a kernel over several tile sizes (pypto.tile_curve), and the
alignment check behind @pypto.jit(alignment=N).

Recording costs two clock reads and one thread-local store per call (in C++, shared by both
call paths); everything else (FLOP and
byte counts from the IR, rates, the table) is computed when someone asks, and the counts once per
compiled kernel. Per-nest times come from a profiling variant of the kernel (timer hooks around
each nest), which only profiled calls run."""
from __future__ import annotations

import os
import re
import statistics
import threading
import time
from typing import NamedTuple

from . import _C
from .errors import PyptoError
from .profiling import machine_peak, nest_table, write_chrome_trace
from .sim import report_of

_now = time.perf_counter_ns



def counts_for_shapes(cache, input_shapes, count):
    """count() for a dynamic kernel's call with inputs of `input_shapes` (its flops and bytes, or
    its nests'), kept in `cache` per shapes (at most 65 kept)."""
    key = tuple(map(tuple, input_shapes))
    if key not in cache:
        if len(cache) > 64:
            cache.clear()
        cache[key] = count()
    return cache[key]

class _State:
    """Whether calls run profiled: PYPTO_PROFILE=1, or while a pypto.profiling() region is open."""
    def __init__(self):
        self.env = os.environ.get("PYPTO_PROFILE", "") not in ("", "0")
        self.regions = []
        self.on = self.env
        self.lock = threading.Lock()
        self.listeners = []  # called with the new value of `on` (jit.py keeps its call-path flag)

    def update(self):
        self.on = self.env or bool(self.regions)
        for f in self.listeners:
            f(self.on)


state = _State()


def record(entry, t0, t_run, spans=None):
    """A kernel call that started at t0 and ran entry's kernel from t_run (perf_counter_ns);
    spans: (nest spans, chunk spans) of a profiled run."""
    last = (entry, t0, t_run, _now(), spans, threading.get_native_id(), getattr(entry, "last_shapes", None))
    _C.set_last_call(last)  # one slot per thread, shared with the C++ call path (bind_dispatch.cpp)
    if state.regions:
        with state.lock:
            for r in state.regions:
                r._calls.append(last)


def forget():
    _C.set_last_call(None)


class NestTime(NamedTuple):
    """One loop nest of a profiled call: the kernel lines it covers, its time on the calling
    thread, FLOPs and bytes moved between global memory and tiles (counted from the tile-level
    IR), the rates, and those rates as a fraction of the machine's peak (pypto.machine_peak)."""
    index: int
    lines: list
    ms: float
    flops: float
    bytes: float
    gflops: float
    gbytes_per_s: float
    threads: int       # threads that ran chunks of its parallel loops (1: it ran on the caller)


_PASS_LINE = re.compile(r"^\[pypto\] pass (\S+): ([0-9.eE+-]+) ms$", re.M)


def pass_times(log):
    """{pass name: ms} from a kernel's lowering log."""
    return {m.group(1): float(m.group(2)) for m in _PASS_LINE.finditer(log or "")}


class Profile:
    """What pypto.get_last_profile() returns. Times are wall-clock milliseconds on the calling
    thread; flops and bytes are counted from the kernel's tensor-level IR (not measured)."""

    def __init__(self, entry, t0, t_run, t1, spans=None, thread=None, input_shapes=None):
        self.kernel = entry.name
        self.t0_ns, self.t_run_ns, self.t1_ns = t0, t_run, t1
        self.thread = thread if thread is not None else threading.get_native_id()
        self.backend = entry.backend
        self.total_ms = (t1 - t0) / 1e6      # the whole call: argument checks, any trace/compile, run
        self.run_ms = (t1 - t_run) / 1e6     # allocating the outputs and running the kernel
        # (a dynamic kernel's counts are those of this call's sizes)
        self.flops, self.bytes, self.counts_exact = (entry.cost(input_shapes) if input_shapes is not None
                                                     else entry.cost())
        self.compile_ms = entry.compile_seconds * 1e3  # the C++ compile (0: it came from the disk cache)
        self.build_ms = entry.build_seconds * 1e3      # trace + lower + compile, when it was built
        self.built_by_this_call = entry.built_at_ns >= t0
        self.compiled_from_cache = entry.backend == "cpu" and entry.kernel.compiled_from_cache()
        self.threads = _C.num_threads() if entry.options.get("parallel", True) else 1
        secs = self.run_ms / 1e3
        self.gflops = self.flops / secs / 1e9 if secs > 0 else float("nan")
        self.gbytes_per_s = self.bytes / secs / 1e9 if secs > 0 else float("nan")
        self.passes = pass_times(entry.kernel.log)  # lowering time per pass, ms
        self.nest_spans, self.chunk_spans = (spans[0], spans[1]) if spans is not None else ([], [])
        # Event counts of a profiled CPU run: the calling thread over the run plus the workers over
        # their chunks (perf_event_open, user space only); the counters this machine cannot count
        # are in counters_unavailable with the reason, never reported as zero.
        self.counters = dict(spans[2]) if spans is not None and len(spans) > 2 else {}
        self.counters_unavailable = ({k: v for k, v in _C.perf_counter_status().items() if v}
                                     if spans is not None and self.backend == "cpu" else {})
        self.profiled = spans is not None
        self.nests = self._nests(entry, input_shapes) if spans is not None else []
        self.sim = report_of(entry)  # backend='sim': the pypto.SimReport of the run (cycles, pipes)

    def _nests(self, entry, input_shapes=None):
        infos = entry.nest_info(input_shapes)
        threads = {}
        for nest, tid, _, _ in self.chunk_spans:
            threads.setdefault(nest, set()).add(tid)
        out = []
        for nest, _, b, e in self.nest_spans:
            lines, _, flops, nbytes, _ = infos[nest] if 0 <= nest < len(infos) else ([], [], 0.0, 0.0, True)
            ms = (e - b) / 1e6
            rate = (lambda x: x / (ms * 1e6)) if ms > 0 else (lambda x: float("nan"))
            out.append(NestTime(nest, list(lines), ms, flops, nbytes, rate(flops), rate(nbytes),
                                max(1, len(threads.get(nest, ())))))
        return out

    def fraction_of_peak(self, nest=None):
        """(of peak GFLOP/s, of peak GB/s) for the whole run, or for nest `nest` (an index into
        .nests); the peak is measured once per machine (pypto.machine_peak)."""
        peak = machine_peak()
        g, b = (self.gflops, self.gbytes_per_s) if nest is None else (self.nests[nest].gflops,
                                                                      self.nests[nest].gbytes_per_s)
        return g / peak["gflops"], b / peak["gbytes_per_s"]

    def to_chrome_trace(self, path):
        """Write this call as a Chrome trace (chrome://tracing, ui.perfetto.dev): the call, its
        nests, and its parallel chunks, one track per thread."""
        write_chrome_trace([self], path)

    def __repr__(self):
        return f"<pypto.Profile {self.kernel}: {self.total_ms:.3f} ms, {self.gflops:.2f} GFLOP/s>"

    def __str__(self):
        approx = "" if self.counts_exact else " (estimate: some loop trip counts or extents not constant)"
        rows = [
            ("kernel", f"{self.kernel} ({self.backend} backend)"),
            ("total time", f"{self.total_ms:.3f} ms"),
            ("run time", f"{self.run_ms:.3f} ms"),
            ("FLOPs (from the IR)", f"{self.flops:,.0f}{approx}"),
            ("bytes (global in + out)", f"{self.bytes:,.0f}"),
            ("GFLOP/s", f"{self.gflops:.2f}"),
            ("GB/s", f"{self.gbytes_per_s:.2f}"),
            ("built by this call", "yes" if self.built_by_this_call else "no (cached kernel)"),
            ("C++ from the disk cache", "yes" if self.compiled_from_cache else "no"),
            ("compile time", f"{self.compile_ms:.1f} ms (build: {self.build_ms:.1f} ms)"),
            ("threads", str(self.threads)),
        ]
        if self.counters:
            rows.append(("event counters", ", ".join(f"{k} {v:,.0f}" for k, v in self.counters.items())))
            if self.counters.get("cycles") and self.counters.get("instructions"):
                rows.append(("instructions per cycle", f"{self.counters['instructions'] / self.counters['cycles']:.2f}"))
        if self.counters_unavailable:
            reasons = sorted(set(self.counters_unavailable.values()))
            rows.append(("counters unavailable", ", ".join(self.counters_unavailable) + ": " + "; ".join(reasons)))
        if self.passes:
            rows.append(("lowering passes", ", ".join(f"{k} {v:.2f} ms" for k, v in self.passes.items())))
        width = max(len(k) for k, _ in rows)
        text = "\n".join(f"{k:<{width}}  {v}" for k, v in rows)
        if self.nests:
            text += "\n\n" + nest_table(self)
        elif not self.profiled:
            text += "\n(per-nest times: profile the call, e.g. kernel.profile(*args) or pypto.profiling())"
        return text


def get_last_profile():
    """The profile of the last kernel call on this thread (under autograd: the last kernel it ran,
    the forward or the derived backward), or None (no call yet)."""
    last = _C.last_call()
    return Profile(*last) if last is not None else None


# --- alignment -------------------------------------------------------------------------------

def _address(a):
    """Data address of a NumPy array, torch tensor or pypto.Tensor; None for other values."""
    iface = getattr(a, "__array_interface__", None)
    if iface is not None:
        return iface["data"][0]
    ptr = getattr(a, "data_ptr", None)
    if callable(ptr):
        return ptr()
    data = getattr(a, "_data", None)
    if data is not None and hasattr(data, "__array_interface__"):
        return data.__array_interface__["data"][0]
    return None


def check_alignment(kernel, args):
    """Raise unless every array argument's address is a multiple of kernel's alignment= (bytes)."""
    alignment = kernel._alignment
    for name, a in zip(kernel._names[kernel._k0:], args):
        addr = _address(a)
        if addr is not None and addr % alignment:
            code = kernel._func.__code__
            raise PyptoError(f"kernel '{kernel.__name__}' ({code.co_filename}:{code.co_firstlineno}): argument "
                             f"'{name}' is not aligned to {alignment} bytes (address % {alignment} == "
                             f"{addr % alignment}); the kernel was made with alignment={alignment}: pass an "
                             "aligned array (e.g. a fresh copy), or drop the option")


# --- tile-size curve ---------------------------------------------------------------------------

class TilePoint(NamedTuple):
    config: dict   # the tiles= given to pypto.jit
    ms: float      # median run time over the repeats
    gflops: float


def default_tile_configs(args):
    """Square matmul tiles 16..256 whose three f32 tiles fit the L2 cache, and no larger than the
    largest dimension of the arguments (at least the three smallest are kept)."""
    l2 = _C.target()["caches"].get("l2") or 256 * 1024
    dims = [d for a in args for d in getattr(a, "shape", ())]
    largest = max(dims) if dims else 256
    sizes = [t for t in (16, 32, 64, 128, 256) if 3 * t * t * 4 <= l2]
    fitting = [t for t in sizes if t <= largest]
    sizes = fitting if len(fitting) >= 3 else sizes[:3]
    return [{"m": t, "n": t, "k": t} for t in sizes]


def tile_curve(kernel, args, png=None, tiles=None, repeats=5):
    """Time `kernel(*args)` under several tile configurations (each a tiles= dict for pypto.jit;
    default: square matmul tiles from the target description), with the repeats interleaved so
    that a change in machine load hits every configuration alike. Returns a list of TilePoint
    (config, ms, gflops) in the order tried; with png=path draws the curve (matplotlib), the
    fastest point marked."""
    if not callable(getattr(kernel, "with_options", None)):  # (profile.py sits below jit.py)
        raise PyptoError(f"tile_curve expects a @pypto.jit kernel, got {type(kernel).__name__}")
    args = tuple(args)
    configs = list(tiles) if tiles is not None else default_tile_configs(args)
    if len(configs) < 1:
        raise PyptoError("tile_curve: no tile configurations to try")
    variants = [kernel.with_options(tiles=c) for c in configs]
    flops = 0.0
    for v in variants:  # build and warm each one
        v(*args)
        flops = get_last_profile().flops
    times = [[] for _ in variants]
    for _ in range(max(1, int(repeats))):
        for i, v in enumerate(variants):
            v(*args)
            times[i].append(get_last_profile().run_ms)
    points = []
    for c, ts in zip(configs, times):
        ms = statistics.median(ts)
        points.append(TilePoint(dict(c), ms, flops / (ms * 1e6) if ms > 0 else float("nan")))
    if png is not None:
        _draw(points, png, kernel.__name__)
    return points


def _label(config):
    sq = {config.get(k) for k in "mnk"}
    if set(config) == set("mnk") and len(sq) == 1:
        return str(config["m"])
    return ",".join(f"{k}={v}" for k, v in config.items())


def _draw(points, path, name):
    from matplotlib.figure import Figure  # no pyplot: no global state, no display needed
    labels = [_label(p.config) for p in points]
    rates = [p.gflops for p in points]
    best = max(range(len(points)), key=lambda i: rates[i])
    fig = Figure(figsize=(6, 3.5))
    ax = fig.subplots()
    ax.plot(range(len(points)), rates, marker="o")
    ax.plot([best], [rates[best]], marker="*", markersize=16, color="tab:red", linestyle="none",
            label=f"fastest: {labels[best]} ({rates[best]:.1f} GFLOP/s)")
    ax.set_xticks(range(len(points)), labels)
    ax.set_xlabel("tile size")
    ax.set_ylabel("GFLOP/s")
    ax.set_title(f"{name}: GFLOP/s per tile size")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


class Profiling:
    """A region of profiled calls (pypto.profiling()). `.profiles`: one pypto.Profile per kernel
    call made inside the region, on any thread, in order; `to_chrome_trace(path)`; printing it
    shows each call's total and its nests."""

    def __init__(self):
        self._calls = []
        self._profiles = None

    def __enter__(self):
        with state.lock:
            state.regions.append(self)
            state.update()
        return self

    def __exit__(self, *exc):
        with state.lock:
            state.regions.remove(self)
            state.update()
        return False

    @property
    def profiles(self):
        if self._profiles is None or len(self._profiles) != len(self._calls):
            self._profiles = [Profile(*c) for c in list(self._calls)]
        return self._profiles

    def to_chrome_trace(self, path):
        write_chrome_trace(self.profiles, path)

    def __len__(self):
        return len(self._calls)

    def __str__(self):
        return "\n\n".join(str(p) for p in self.profiles) or "(no kernel calls in the region)"


def profiling():
    """Profile every kernel call in a `with` block:

        with pypto.profiling() as prof:
            y = model(x)
        print(prof)                        # per call: times, FLOPs, per-nest table
        prof.to_chrome_trace("trace.json")
    """
    return Profiling()
