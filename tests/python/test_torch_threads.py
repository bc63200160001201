"""Sharing the cores with torch: once torch is imported, parallel loops run on the OpenMP
threads torch runs (no second pool of threads), and stay correct; with sharing off, PyPTO's own
pool comes back."""
import os
import subprocess
import sys
import textwrap


import torch  # noqa: F401 - a hard dependency (Makefile PY_PKGS): a missing torch must fail, not skip

SCRIPT = textwrap.dedent("""
    import os, sys
    import numpy as np
    import torch
    import pypto

    def threads():
        return len(os.listdir("/proc/self/task"))

    @pypto.jit
    def mm(a, b):
        return pypto.relu(a @ b)

    path = pypto.share_threads_with_torch()
    assert path and ("gomp" in path or "iomp" in path), path
    a, b = torch.randn(384, 256), torch.randn(256, 320)
    (torch.randn(512, 512) @ torch.randn(512, 512)).sum()   # torch's OpenMP team exists now
    mm(a, b)                                                 # compiled; loops measured
    before = threads()
    for _ in range(3):
        out = mm(a, b)
    ref = torch.relu(a.double() @ b.double())
    assert float((out.double() - ref).norm() / ref.norm()) < 1e-5
    shared_new = threads() - before
    pypto.share_threads_with_torch(False)
    out = mm(a, b)
    assert float((out.double() - ref).norm() / ref.norm()) < 1e-5
    own_new = threads() - before
    print(shared_new, own_new)
""")


def test_loops_run_on_torchs_openmp_threads(tmp_path):
    script = tmp_path / "threads_check.py"
    script.write_text(SCRIPT)
    env = dict(os.environ, PYPTO_NUM_THREADS="2", OMP_NUM_THREADS="2")
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    shared_new, own_new = map(int, r.stdout.split()[-2:])
    assert shared_new == 0      # no thread of PyPTO's own while it shares torch's
    assert own_new >= 1         # its own pool once sharing is off
