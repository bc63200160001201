"""What the machine allows: CPU description, single-precision FMA peak, copy bandwidth.

The FMA peak and the multi-threaded copy come from bench/probe.cpp, compiled here at run time
with `c++ -O3 -march=native` (so its vectors are as wide as the build target's) and cached by
content hash. Peaks are the best of several tries: these machines are shared and noisy, and a
limit is what the hardware can do, not what it did on average.
"""
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
PROBE_SRC = HERE / "probe.cpp"
CXX_FLAGS = ["-O3", "-march=native", "-ffp-contract=fast", "-std=c++17", "-pthread"]


def cpu_info():
    """Model name, logical cores usable by this process, SIMD features, caches."""
    info = {"model": platform.processor() or platform.machine(), "arch": platform.machine()}
    flags, model = set(), None
    try:
        text = Path("/proc/cpuinfo").read_text()
        for line in text.splitlines():
            key, _, val = line.partition(":")
            key = key.strip()
            if key in ("model name", "Model name") and not model:
                model = val.strip()
            elif key in ("flags", "Features") and not flags:
                flags = set(val.split())
    except OSError:
        pass
    if model:
        info["model"] = model
    try:
        info["cores"] = len(os.sched_getaffinity(0))
    except AttributeError:
        info["cores"] = os.cpu_count() or 1
    simd = [f for f in ("avx512f", "avx512_fp16", "amx_tile", "avx2", "fma", "sse4_2", "asimd", "sve")
            if f in flags]
    info["simd"] = simd
    for level, name in (("L1d", "index0"), ("L2", "index2"), ("L3", "index3")):
        p = Path(f"/sys/devices/system/cpu/cpu0/cache/{name}/size")
        if p.exists():
            info[level] = p.read_text().strip()
    return info


def _cache_dir():
    base = os.environ.get("PYPTO_BENCH_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "pypto-bench")
    return Path(base)


def build_probe(cxx=None):
    """Compile probe.cpp once per (source, compiler, flags); returns the binary path or raises."""
    cxx = cxx or os.environ.get("PYPTO_CXX", "c++")
    if shutil.which(cxx) is None:
        raise RuntimeError(f"no C++ compiler ({cxx}) to build the machine probe")
    src = PROBE_SRC.read_bytes()
    key = hashlib.sha256(src + " ".join([cxx] + CXX_FLAGS).encode()).hexdigest()[:16]
    out_dir = _cache_dir()
    out = out_dir / f"probe-{key}"
    if out.exists():
        return out
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out_dir) as tmp:
        tmp_bin = Path(tmp) / "probe"
        res = subprocess.run([cxx, *CXX_FLAGS, str(PROBE_SRC), "-o", str(tmp_bin)],
                             capture_output=True, text=True)
        if res.returncode != 0:
            raise RuntimeError(f"building the machine probe failed: {res.stderr.strip()[:400]}")
        os.replace(tmp_bin, out)  # atomic: concurrent runs never see a half-written binary
    return out


def _run(probe, *args):
    res = subprocess.run([str(probe), *map(str, args)], capture_output=True, text=True, timeout=120)
    if res.returncode != 0:
        raise RuntimeError(f"probe {' '.join(map(str, args))} failed: {res.stderr.strip()}")
    return res.stdout.split()


def fma_peak(probe, threads, seconds=0.15, tries=3):
    """Best single-precision FMA GFLOP/s with `threads` threads; returns (gflops, vector bits)."""
    best, best_bits = 0.0, None
    for _ in range(tries):
        vals = _run(probe, "fma", threads, seconds)
        for bits, g in zip(vals[0::2], vals[1::2]):
            if float(g) > best:
                best, best_bits = float(g), int(bits)
    return best, best_bits


def probe_copy(probe, threads, nbytes, reps=7, tries=2, kind="copy"):
    """Best GB/s (read + write) moving `nbytes` with `threads` threads; kind "copy" is memcpy,
    "copy_nt" streaming stores."""
    best = 0.0
    for _ in range(tries):
        vals = _run(probe, kind, threads, nbytes, reps)
        best = max(best, float(vals[0]))
    return best


def numpy_copy(nbytes, reps=7):
    """Best np.copyto GB/s (read + write), one thread."""
    n = nbytes // 4
    src = np.random.default_rng(0).standard_normal(n, dtype=np.float32)
    dst = np.empty_like(src)
    np.copyto(dst, src)
    best = 0.0
    for _ in range(reps):
        t0 = time.perf_counter()
        np.copyto(dst, src)
        best = max(best, 2 * src.nbytes / (time.perf_counter() - t0) * 1e-9)
    return best


def torch_copy(nbytes, reps=7):
    """Best torch copy_ GB/s (read + write); torch spreads a large copy over its threads."""
    import torch
    n = nbytes // 4
    src = torch.randn(n)
    dst = torch.empty_like(src)
    dst.copy_(src)
    best = 0.0
    for _ in range(reps):
        t0 = time.perf_counter()
        dst.copy_(src)
        best = max(best, 2 * n * 4 / (time.perf_counter() - t0) * 1e-9)
    return best


# Every copy figure counts towards "what the hardware allows"; the best of them is the limit.
COPY_KEYS = ("copy_gbs_probe", "copy_gbs_probe_nt", "copy_gbs_numpy", "copy_gbs_torch",
             "copy_gbs_dram")


def measure(threads, copy_bytes, big_copy_bytes=None, mode="full", log=print):
    """All limits the suite reads figures against. `copy_bytes` is the footprint of the
    memory-bound cases (their input size), so their bar compares like with like;
    `big_copy_bytes` (optional) gives a DRAM-sized figure for information."""
    m = {"cpu": cpu_info(), "threads": threads}
    try:  # a busy machine skews every figure: record how busy it was
        m["loadavg_1min"] = round(os.getloadavg()[0], 2)
    except OSError:
        pass
    # many short tries: on a shared machine a short window without contention is likelier
    secs, tries = {"smoke": (0.02, 1), "quick": (0.05, 4)}.get(mode, (0.05, 8))
    try:
        probe = build_probe()
        isa, bits = _run(probe, "info")
        m["probe_isa"] = f"{isa} ({bits}-bit)"
        m["fma_peak_1core"], m["fma_bits_1core"] = fma_peak(probe, 1, secs, tries)
        if threads > 1:
            m["fma_peak_all"], m["fma_bits_all"] = fma_peak(probe, threads, secs, tries)
        else:
            m["fma_peak_all"] = m["fma_peak_1core"]
        m["copy_gbs_probe"] = probe_copy(probe, threads, copy_bytes)
        m["copy_gbs_probe_nt"] = probe_copy(probe, threads, copy_bytes, kind="copy_nt")
        m["copy_gbs_probe_1core"] = max(probe_copy(probe, 1, copy_bytes),
                                        probe_copy(probe, 1, copy_bytes, kind="copy_nt"))
        if big_copy_bytes:
            m["copy_gbs_dram"] = probe_copy(probe, threads, big_copy_bytes, reps=3, tries=1)
    except Exception as e:  # no compiler, or the probe failed: NumPy/torch figures still stand
        m["probe_error"] = str(e)
        m.setdefault("fma_peak_1core", None)
        m.setdefault("fma_peak_all", None)
    m["copy_gbs_numpy"] = numpy_copy(copy_bytes)
    try:
        m["copy_gbs_torch"] = torch_copy(copy_bytes)
    except Exception as e:
        m["copy_gbs_torch"] = None
        log(f"torch copy failed: {e}")
    cands = [m.get(k) for k in COPY_KEYS]
    m["copy_gbs"] = max(c for c in cands if c)
    m["copy_bytes"] = copy_bytes
    return m


def remeasure(m, mode="full"):
    """Measure the FMA peak and copy bandwidth again (at the end of a run) and keep the best of
    both: a limit must not look low because the machine was busy when it was first measured."""
    secs, tries = {"smoke": (0.02, 1), "quick": (0.05, 2)}.get(mode, (0.05, 4))
    try:
        probe = build_probe()
        g1, _ = fma_peak(probe, 1, secs, tries)
        m["fma_peak_1core"] = max(m.get("fma_peak_1core") or 0, g1)
        if m["threads"] > 1:
            g, _ = fma_peak(probe, m["threads"], secs, tries)
            m["fma_peak_all"] = max(m.get("fma_peak_all") or 0, g)
        else:
            m["fma_peak_all"] = m["fma_peak_1core"]
        for key, kind in (("copy_gbs_probe", "copy"), ("copy_gbs_probe_nt", "copy_nt")):
            bw = probe_copy(probe, m["threads"], m["copy_bytes"], tries=1, kind=kind)
            m[key] = max(m.get(key) or 0, bw)
    except Exception as e:
        m.setdefault("probe_error", str(e))
    m["copy_gbs_numpy"] = max(m.get("copy_gbs_numpy") or 0, numpy_copy(m["copy_bytes"]))
    m["copy_gbs"] = max(m.get(k) or 0 for k in COPY_KEYS)
    try:
        m["loadavg_1min_end"] = round(os.getloadavg()[0], 2)
    except OSError:
        pass
    return m


def peak_for_threads(m, threads):
    """The FMA peak of `threads` cores: the per-core peak times the cores used (or the measured
    all-core figure, if that is higher)."""
    if not m.get("fma_peak_1core"):
        return None
    peak = m["fma_peak_1core"] * threads
    if threads == m.get("threads") and m.get("fma_peak_all"):
        peak = max(peak, m["fma_peak_all"])
    return peak
