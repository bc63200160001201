"""Smoke run of the benchmark suite (bench/run.py --smoke): tiny sizes, every impl's result
checked against float64 before it is timed. Asserts that the suite runs end to end, that every
result it checked was right and that it writes its JSON and chart. No timing is asserted:
benchmarks are not timed tests."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RUN = ROOT / "bench" / "run.py"

# Cases the smoke run must report, and the impls that must have run and checked correct.
SMOKE_CASES = ["matmul_128", "seed_tile_matmul", "fused_linear", "attention", "softmax",
               "layer_norm", "rms_norm", "dispatch", "compile_cold", "warm_start"]
PEERS_MUST_PASS = {"torch", "numpy", "torch.sdpa", "torch.addcmul"}


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench")
    js, png = out / "smoke.json", out / "smoke.png"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "python"), env.get("PYTHONPATH", "")])
    res = subprocess.run([sys.executable, str(RUN), "--smoke", "--no-progress", "--json", str(js),
                          "--png", str(png)], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=600)
    return res, js, png


def _records(js):
    data = json.loads(js.read_text())
    assert isinstance(data, list) and data, "the JSON must be a non-empty list of records"
    return data


def test_suite_runs_and_writes_json(smoke):
    res, js, png = smoke
    assert res.returncode == 0, f"bench/run.py --smoke failed:\n{res.stdout[-4000:]}\n{res.stderr[-4000:]}"
    assert js.exists() and png.exists() and png.stat().st_size > 0
    recs = _records(js)
    assert recs[0]["case"] == "machine" and recs[0]["machine"]["cpu"]["cores"] >= 1
    for r in recs:
        for key in ("case", "shape", "impl", "median_ms", "gflops", "gbs", "vs"):
            assert key in r, (key, r)
    cases = {r["case"] for r in recs}
    assert set(SMOKE_CASES) <= cases, set(SMOKE_CASES) - cases
    assert "PyPTO benchmark (smoke" in res.stdout


def test_no_wrong_results(smoke):
    _, js, _ = smoke
    wrong = [(r["case"], r["impl"], r["error"]) for r in _records(js) if r["status"] == "wrong"]
    assert not wrong, wrong


def test_peers_checked_correct_then_timed(smoke):
    _, js, _ = smoke
    peers = [r for r in _records(js) if r["impl"] in PEERS_MUST_PASS]
    assert peers
    for r in peers:
        assert r["status"] == "ok", (r["case"], r["impl"], r["error"])
        assert r["rel_err"] is not None and r["rel_err"] < 1e-4, (r["case"], r["impl"])
        assert r["median_ms"] is not None and r["median_ms"] > 0


def test_pypto_checked_correct(smoke):
    """Every PyPTO kernel of the smoke run compiled, ran and matched the float64 reference."""
    _, js, _ = smoke
    pyp = [r for r in _records(js) if r["impl"].startswith("pypto")]
    assert {r["case"] for r in pyp} >= set(SMOKE_CASES)
    failed = [f"{r['case']}/{r['impl']}: {r['error']}" for r in pyp if r["status"] != "ok"]
    assert not failed, "PyPTO impls that failed in the smoke run:\n" + "\n".join(failed)
    for r in pyp:
        assert r["rel_err"] is not None and r["rel_err"] < 1e-4, (r["case"], r["impl"])


def test_a_crashing_kernel_costs_only_itself(tmp_path):
    """A kernel that kills the process (as a native crash would) is recorded against its impl;
    the suite goes on with the peers and the other cases in a new worker."""
    js = tmp_path / "crash.json"
    env = dict(os.environ, PYPTO_BENCH_TEST_CRASH="softmax")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "python"), env.get("PYTHONPATH", "")])
    res = subprocess.run([sys.executable, str(RUN), "--smoke", "--no-progress", "--no-png",
                          "--cases", "softmax,rms_norm", "--json", str(js)], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-4000:]
    recs = {(r["case"], r["impl"]): r for r in _records(js)}
    crashed = recs[("softmax", "pypto")]
    assert crashed["status"] == "error" and "crashed" in crashed["error"], crashed
    assert recs[("softmax", "torch")]["status"] == "ok"
    assert recs[("rms_norm", "torch")]["status"] == "ok"
    assert recs[("rms_norm", "pypto")]["status"] in ("ok", "error")  # ran, in the new worker
