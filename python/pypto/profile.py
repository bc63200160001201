"""Debugging and tuning aids: the profile of the last kernel call (pypto.get_last_profile), the
time of a kernel over several tile sizes (pypto.tile_curve), and the alignment check behind
@pypto.jit(alignment=N).

Recording costs two clock reads and one thread-local store per call; everything else (FLOP and
byte counts from the IR, rates, the table) is computed when someone asks, and the counts once per
compiled kernel."""
from __future__ import annotations

import statistics
import threading
import time
from typing import NamedTuple

from . import _C
from .frontend.errors import PyptoError

_tls = threading.local()
_now = time.perf_counter_ns


def record(entry, t0, t_run):
    """A kernel call that started at t0 and ran entry's kernel from t_run (perf_counter_ns)."""
    _tls.last = (entry, t0, t_run, _now())


def forget():
    _tls.last = None


class Profile:
    """What pypto.get_last_profile() returns. Times are wall-clock milliseconds on the calling
    thread; flops and bytes are counted from the kernel's tensor-level IR (not measured)."""

    def __init__(self, entry, t0, t_run, t1):
        self.kernel = entry.name
        self.backend = entry.backend
        self.total_ms = (t1 - t0) / 1e6      # the whole call: argument checks, any trace/compile, run
        self.run_ms = (t1 - t_run) / 1e6     # allocating the outputs and running the kernel
        self.flops, self.bytes, self.counts_exact = entry.cost()
        self.compile_ms = entry.compile_seconds * 1e3  # the C++ compile (0: it came from the disk cache)
        self.build_ms = entry.build_seconds * 1e3      # trace + lower + compile, when it was built
        self.built_by_this_call = entry.built_at_ns >= t0
        self.compiled_from_cache = entry.backend == "cpu" and entry.kernel.compiled_from_cache()
        self.threads = _C.num_threads() if entry.options.get("parallel", True) else 1
        secs = self.run_ms / 1e3
        self.gflops = self.flops / secs / 1e9 if secs > 0 else float("nan")
        self.gbytes_per_s = self.bytes / secs / 1e9 if secs > 0 else float("nan")

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
        width = max(len(k) for k, _ in rows)
        return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)


def get_last_profile():
    """The profile of the last kernel call on this thread, or None (no call yet, or the last one
    went through autograd)."""
    last = getattr(_tls, "last", None)
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
