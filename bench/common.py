"""The suite's building blocks: what a case and an implementation are, how results are checked
and how time is measured.

A Case holds a float64 reference (computed lazily, once) and a list of Impls. An Impl's `setup`
builds everything it needs (compiles, allocates, moves inputs) and returns a zero-argument
callable that runs the operation once and returns its output; a failure in setup or in the
checked run becomes that impl's error and never stops the suite.
"""
import statistics
import time
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional

import numpy as np


@dataclass
class Impl:
    name: str                                # "pypto", "torch", "torch.compile", "jax", "numpy", ...
    setup: Callable[[], Callable[[], Any]]
    threads: Optional[int] = None            # None: the suite's thread count
    inner: int = 1                           # calls per timed sample (for very short calls)
    compiled: bool = False                   # setup compiles (its time is reported, not timed)
    skip: Optional[str] = None               # a reason not to run it (e.g. "jax not installed")
    fail: Optional[str] = None               # it crashed an earlier worker: report, don't run


@dataclass
class Bar:
    """One performance bar of DESIGN.md §5 for this case's `impl`.
    kind: "vs" (speedup over `other` >= target), "peak" (fraction of the FMA peak >= target),
    "bw" (fraction of copy bandwidth >= target), "max_us" (per-call time <= target),
    "max_ms" (time <= target), "scaling" (time of `other` / time of impl >= target)."""
    kind: str
    target: float
    impl: str = "pypto"
    other: Optional[str] = None
    label: str = ""


@dataclass
class Case:
    name: str
    shape: str
    impls: List[Impl]
    reference: Optional[Callable[[], np.ndarray]] = None   # float64 result
    flops: Optional[float] = None
    bytes: Optional[float] = None
    tol: float = 1e-4
    bars: List[Bar] = field(default_factory=list)
    unit: str = "ms"                         # "us" for per-call cases
    runner: Optional[Callable] = None        # a case that measures itself (compile, scaling)
    note: str = ""
    steps: int = 1                           # progress steps a runner makes
    params: Dict[str, Any] = field(default_factory=dict)  # runner settings (sizes)
    sub_cases: List["Case"] = field(default_factory=list)  # cases a runner reports under

    @property
    def bound(self):
        """What limits it: "compute" (read against the FMA peak) or "memory" (copy bandwidth)."""
        return "memory" if self.flops is None else "compute"


def to_numpy(out):
    """Whatever an impl returns (ndarray, torch tensor, JAX array, pypto tensor) as float64."""
    if isinstance(out, (list, tuple)):
        out = out[0]
    if isinstance(out, np.ndarray):
        return out.astype(np.float64, copy=False)
    mod = type(out).__module__
    if mod.startswith("torch"):
        return out.detach().cpu().double().numpy()
    if hasattr(out, "block_until_ready") or mod.startswith("jax"):
        return np.asarray(out, dtype=np.float64)
    try:
        return np.from_dlpack(out).astype(np.float64)
    except Exception:
        return np.asarray(out, dtype=np.float64)


def rel_err(out, ref):
    out = to_numpy(out)
    ref = np.asarray(ref, dtype=np.float64)
    if out.shape != ref.shape:
        raise ValueError(f"output shape {out.shape} != reference shape {ref.shape}")
    if not np.isfinite(out).all():
        return float("inf")
    return float(np.linalg.norm(out - ref) / max(np.linalg.norm(ref), 1e-30))


def short_error(e, limit=160):
    """One line naming the exception, for the table."""
    msg = f"{type(e).__name__}: {e}".strip().splitlines()
    line = msg[0] if msg else type(e).__name__
    return line if len(line) <= limit else line[:limit - 3] + "..."


def format_exc():
    return traceback.format_exc(limit=6)


@dataclass
class Timing:
    """Settings for the timed runs. Each impl of a case is timed in `rounds` interleaved rounds
    (A B C A B C ...) so that a machine-wide slowdown hits every impl alike; the figure is the
    median over all samples."""
    warmup_s: float = 0.2
    min_warmup: int = 2
    rounds: int = 5
    round_s: float = 0.2          # wanted time per impl per round
    min_samples: int = 2          # per impl per round
    max_samples: int = 200
    # Idle time before each impl's samples of a round: a peer's worker threads keep spinning after
    # its last call (OpenBLAS's for ~0.1 s), which would take a core from whichever impl runs next
    # (measured: pypto's 2-thread 1024^3 matmul 5.3 ms alone, 10 ms right after NumPy's).
    settle_s: float = 0.0


def warm(fn, t: Timing):
    """Run until warm; returns the time of one call (s), for sizing the timed samples."""
    t_end = time.perf_counter() + t.warmup_s
    n, last = 0, 0.0
    while n < t.min_warmup or time.perf_counter() < t_end:
        t0 = time.perf_counter()
        fn()
        last = time.perf_counter() - t0
        n += 1
        if n >= t.min_warmup and last > t.warmup_s:
            break
    return last


def sample(fn, n, inner=1):
    """n timed samples of `inner` calls each; returns seconds per call for each sample."""
    out = []
    pc = time.perf_counter
    if inner == 1:
        for _ in range(n):
            t0 = pc()
            fn()
            out.append(pc() - t0)
    else:
        for _ in range(n):
            t0 = pc()
            for _ in range(inner):
                fn()
            out.append((pc() - t0) / inner)
    return out


def timed_rounds(fns: Dict[str, Callable], inners: Dict[str, int], per_call: Dict[str, float],
                 t: Timing, on_round=None):
    """Interleaved rounds over several callables; returns {name: [seconds per call, ...]}."""
    samples = {k: [] for k in fns}
    for r in range(t.rounds):
        for k, fn in fns.items():
            inner = inners.get(k, 1)
            per = max(per_call.get(k, 1e-3) * inner, 1e-7)
            n = int(min(t.max_samples, max(t.min_samples, t.round_s / per)))
            if t.settle_s > 0 and len(fns) > 1:
                time.sleep(t.settle_s)
            samples[k].extend(sample(fn, n, inner))
        if on_round:
            on_round(r)
    return samples


def median(xs):
    return statistics.median(xs) if xs else None
