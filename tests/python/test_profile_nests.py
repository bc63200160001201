"""Per-nest profiles (kernel.profile, pypto.profiling(), PYPTO_PROFILE), the Chrome trace and the
machine's peak rates."""
import json
import os
import sys

import numpy as np

import pypto
from pypto_testutil import rand, rel_err, requires_compiler

pytestmark = requires_compiler


def linear_rowsum(x, w, b):
    h = pypto.matmul(x, w)                # line of nest 0
    y = pypto.relu(h + b)
    return pypto.sum(y, 1)


def test_kernel_profile_times_each_nest_with_its_lines_and_counts():
    M, K, N = 256, 64, 128
    k = pypto.jit(linear_rowsum, tiles={"m": 64, "n": 64, "k": 64})
    x, w, b = rand(M, K), rand(K, N), rand(1, N)
    p = k.profile(x, w, b)
    want = np.maximum(x.astype(np.float64) @ w + b, 0).sum(1)
    assert rel_err(p.result, want) < 1e-5
    assert p.profiled and len(p.nests) >= 2
    assert sum(n.ms for n in p.nests) <= p.run_ms
    assert all(n.ms >= 0 for n in p.nests)
    mm = p.nests[0]
    assert mm.flops == 2 * M * N * K                   # counted from the tile-level IR
    assert mm.bytes >= (M * K + K * N + M * N) * 4     # at least every operand once
    assert any("pypto.matmul(x, w)" in line and "test_profile_nests.py" in line for line in mm.lines)
    assert any("pypto.relu" in line for n in p.nests[1:] for line in n.lines)
    assert {"fuse", "tile_ops", "parallelize"} <= set(p.passes)
    text = str(p)
    assert "nest" in text and "GFLOP/s" in text and "pypto.matmul(x, w)" in text
    g, bw = p.fraction_of_peak(0)
    assert g > 0 and bw > 0


def test_dynamic_kernel_counts_each_nest_at_the_calls_shapes():
    # A kernel called with a second shape goes dynamic: its nests' counts must be those of the
    # call's sizes, not of the dims' bound (once read as 1e28 FLOPs for a 32 x 64 x 32 product).
    k = pypto.jit(linear_rowsum)
    for M, K, N in ((96, 64, 48), (32, 64, 32), (200, 40, 72), (7, 3, 100)):
        x, w, b = rand(M, K), rand(K, N), rand(1, N)
        p = k.profile(x, w, b)
        want = np.maximum(x.astype(np.float64) @ w + b, 0).sum(1)
        assert rel_err(p.result, want) < 1e-5
        assert p.flops < 4 * M * N * K
        assert p.nests[0].flops == 2 * M * N * K
        # The other nests' tiles are windows of a fixed size whose valid part the loads carry: an
        # elementwise op may count its whole window, a bounded overestimate.
        assert all(0 <= n.flops <= 8 * p.flops for n in p.nests)
        assert all(0 < n.bytes <= 16 * 4 * (M * K + K * N + M * N) for n in p.nests)


COUNTERS = {"cycles", "instructions", "cache_misses", "branch_misses", "task_clock_ns", "page_faults",
            "context_switches"}


def test_event_counters_are_counted_or_reported_unavailable_with_the_reason():
    k = pypto.jit(linear_rowsum, tiles={"m": 64, "n": 64, "k": 64})
    small, big = (rand(64, 64), rand(64, 64), rand(1, 64)), (rand(512, 512), rand(512, 512), rand(1, 512))
    k.profile(*small)
    k.profile(*big)  # both variants compiled and their pages touched before the measured calls
    ps, pb = k.profile(*small), k.profile(*big)
    for p in (ps, pb):
        # Every counter is either counted or named with a reason; never both, never a silent zero.
        assert set(p.counters) | set(p.counters_unavailable) == COUNTERS
        assert not set(p.counters) & set(p.counters_unavailable)
        assert all(p.counters_unavailable.values())
        assert all(v >= 0 for v in p.counters.values())
    status = pypto._C.perf_counter_status()
    assert set(status) == COUNTERS
    if not status["task_clock_ns"]:  # software events: available wherever perf_event_open is
        # CPU time of the caller over the run plus the workers over their chunks: some, but no more
        # than every thread busy for the whole run (plus the clock's granularity).
        assert 0 < pb.counters["task_clock_ns"] <= pb.threads * pb.run_ms * 1e6 * 1.2 + 1e6
    if not status["instructions"]:  # a hardware PMU: 512^3 is 512x the work of 64^3
        assert pb.counters["instructions"] > 50 * ps.counters["instructions"]
        assert "instructions per cycle" in str(pb)
    if status["cycles"]:
        assert "counters unavailable" in str(pb) and status["cycles"] in str(pb)
    assert pypto.get_last_profile().counters == pb.counters
    plain = k(*small)
    assert pypto.get_last_profile().counters == {} and plain is not None  # unprofiled: no counters


def test_unprofiled_calls_have_no_nest_times_and_profiled_variant_matches():
    k = pypto.jit(linear_rowsum)
    x, w, b = rand(64, 32), rand(32, 48), rand(1, 48)
    plain = k(x, w, b)
    p = pypto.get_last_profile()
    assert not p.profiled and p.nests == [] and "kernel.profile" in str(p)
    assert np.array_equal(k.profile(x, w, b).result, plain)


def test_profiling_region_and_chrome_trace(tmp_path):
    k = pypto.jit(linear_rowsum)
    x, w, b = rand(256, 64), rand(64, 96), rand(1, 96)
    k(x, w, b)
    threads = pypto.num_threads()
    pypto.set_num_threads(2)
    try:
        with pypto.profiling() as prof:
            k(x, w, b)
            k(x, w, b)
    finally:
        pypto.set_num_threads(threads)
    k(x, w, b)  # outside: not recorded, not profiled
    assert not pypto.get_last_profile().profiled
    assert len(prof) == 2 and all(p.nests for p in prof.profiles)
    path = tmp_path / "trace.json"
    prof.to_chrome_trace(str(path))
    events = json.loads(path.read_text())["traceEvents"]
    spans = [e for e in events if e["ph"] == "X"]
    calls = [e for e in spans if e["cat"] == "call"]
    nests = [e for e in spans if e["cat"] == "nest"]
    chunks = [e for e in spans if e["cat"] == "chunk"]
    assert len(calls) == 2 and len(nests) == 2 * len(prof.profiles[0].nests) and chunks
    for c in calls:  # each call's nests lie inside it, on its thread
        inside = [n for n in nests if c["ts"] <= n["ts"] and n["ts"] + n["dur"] <= c["ts"] + c["dur"] + 1e-3]
        assert len(inside) == len(prof.profiles[0].nests) and all(n["tid"] == c["tid"] for n in inside)
    assert len({e["tid"] for e in chunks}) >= 1
    assert {e["args"]["name"].split()[0] for e in events if e["ph"] == "M"} >= {"caller"}


def test_profiling_region_records_the_kernels_autograd_runs():
    # A training step through torch autograd: the forward (the kernel itself, or the variant that
    # saves its products) and the derived backward are both recorded, each with its nests; outside
    # a region, get_last_profile() is the backward's call.
    import torch
    k = pypto.jit(linear_rowsum)
    x, w, b = (torch.from_numpy(a).requires_grad_() for a in (rand(64, 48), rand(48, 32), rand(1, 32)))
    k(x, w, b).sum().backward()  # compiled (forward and backward) outside the region
    with pypto.profiling() as prof:
        k(x, w, b).sum().backward()
    names = [p.kernel for p in prof.profiles]
    assert len(names) == 2 and names[1] == "linear_rowsum (backward)", names
    for p in prof.profiles:
        assert p.profiled and p.nests and p.flops > 0 and p.run_ms > 0
        assert sum(n.ms for n in p.nests) <= p.run_ms
    assert "linear_rowsum (backward)" in str(prof)
    w.grad = None
    k(x, w, b).sum().backward()
    last = pypto.get_last_profile()
    assert last is not None and last.kernel == "linear_rowsum (backward)" and not last.profiled
    want = np.maximum(x.detach().numpy().astype(np.float64) @ w.detach().numpy() + b.detach().numpy(), 0)
    assert rel_err(w.grad.numpy(), x.detach().numpy().T.astype(np.float64) @ (want > 0)) < 1e-5


def test_jit_profile_option_and_env_profile_every_call(monkeypatch):
    args = rand(32, 16), rand(16, 8), rand(1, 8)
    k = pypto.jit(linear_rowsum, profile=True)
    k(*args)
    assert pypto.get_last_profile().nests
    plain = pypto.jit(linear_rowsum)
    state = pypto.profile.state
    monkeypatch.setattr(state, "env", True)  # what PYPTO_PROFILE=1 sets at import
    state.update()
    try:
        plain(*args)
        assert pypto.get_last_profile().nests
    finally:
        monkeypatch.setattr(state, "env", False)
        state.update()
    plain(*args)
    assert not pypto.get_last_profile().profiled


def test_machine_peak_is_measured_once_and_cached(monkeypatch):
    profiling = sys.modules["pypto.profiling"]
    if not any(f.startswith("peak-") for f in os.listdir(pypto._C.cache_dir())):
        # Not cached yet (or measured on a busy machine, kept in memory only): measure as on an
        # idle machine, so it is written.
        monkeypatch.setattr(profiling, "_peak", None)
        monkeypatch.setattr(profiling.os, "getloadavg", lambda: (0.0, 0.0, 0.0))
    peak = pypto.machine_peak()
    assert peak["gflops"] > 0 and peak["gbytes_per_s"] > 0
    files = [f for f in os.listdir(pypto._C.cache_dir()) if f.startswith("peak-")]
    assert files
    assert pypto.machine_peak() is peak


def test_machine_peak_measured_on_a_busy_machine_is_not_kept(monkeypatch):
    """A peak measured while other work ran is low; cached, it would stay wrong for every later
    process. It is used by this process only and the file is left as it was."""
    profiling = sys.modules["pypto.profiling"]  # (pypto.profiling is the region function)
    path = os.path.join(pypto._C.cache_dir(), f"peak-{pypto._C.cpu_key()}.json")
    if not os.path.exists(path):  # measure as on an idle machine, so the file exists
        monkeypatch.setattr(profiling, "_peak", None)
        with monkeypatch.context() as idle:
            idle.setattr(profiling.os, "getloadavg", lambda: (0.0, 0.0, 0.0))
            pypto.machine_peak()
    before = open(path).read()
    monkeypatch.setattr(profiling, "_peak", None)
    os.remove(path)
    monkeypatch.setattr(profiling.os, "getloadavg", lambda: (50.0 * (os.cpu_count() or 1), 0.0, 0.0))
    try:
        busy = pypto.machine_peak()
        assert "not kept" in busy["how"] and busy["gflops"] > 0 and not os.path.exists(path)
    finally:
        with open(path, "w") as f:
            f.write(before)
        monkeypatch.setattr(profiling, "_peak", None)


def test_doc_figures_script_draws_the_curve_and_the_trace(tmp_path):
    """tools/doc_figures.py (the guide's pictures) runs, and plot_trace draws a simulator trace too."""
    import runpy
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    argv = sys.argv
    sys.argv = ["doc_figures.py", "--quick", "--out", str(tmp_path)]
    try:
        runpy.run_path(os.path.join(root, "tools", "doc_figures.py"), run_name="__main__")
    except SystemExit as e:
        assert e.code == 0
    finally:
        sys.argv = argv
    for name in ("tile_curve.png", "profile_trace.png"):
        assert (tmp_path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    k = pypto.jit(lambda x: pypto.exp(x) + 1.0, backend="sim")
    k(rand(64, 64))
    k.last_sim_report().to_chrome_trace(str(tmp_path / "sim.json"))
    pypto.plot_trace(str(tmp_path / "sim.json"), str(tmp_path / "sim.png"))
    assert (tmp_path / "sim.png").stat().st_size > 1000
