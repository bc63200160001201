"""pypto.autotune and @pypto.jit(autotune=True): the fastest config wins, the choice persists
across processes, the DEBUG log shows the search."""
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import pypto
from pypto_testutil import rand, rel_err, requires_compiler

pytestmark = requires_compiler


def redo(x, R=1):
    y = pypto.zeros(x.shape)
    for _ in range(R):  # R rounds of the same work: R=1 is the clear winner
        y = pypto.exp(x)
    return y


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch):
    """A cache directory of its own: no choice stored by an earlier run."""
    monkeypatch.setenv("PYPTO_CACHE_DIR", str(tmp_path / "cache"))


def test_autotune_picks_the_config_that_clearly_wins(fresh_cache):
    k = pypto.autotune(pypto.jit(redo), configs=[{"R": 32}, {"R": 1}, {"R": 12}], repeats=3)
    x = rand(256, 512)
    out = k(x)
    assert rel_err(out, np.exp(x.astype(np.float64))) < 1e-6
    r = k.best_config(x)
    assert r.config == {"R": 1} and not r.from_cache and k.tunings == 1
    assert r.times[1] < r.times[0] and r.times[1] < r.times[2]
    k(rand(256, 512))             # same key: no new search
    assert k.tunings == 1
    k(rand(64, 512))              # another shape: tuned again
    assert k.tunings == 2


def test_autotune_of_tile_sizes_and_jit_option():
    a, b = rand(96, 64), rand(64, 80)
    configs = [{"tiles": {"m": 16, "n": 16, "k": 16}}, {"tiles": {"m": 32, "n": 32, "k": 32}}]
    k = pypto.autotune(pypto.jit(lambda a, b: pypto.matmul(a, b)), configs=configs, repeats=1)
    assert rel_err(k(a, b), a.astype(np.float64) @ b) < 1e-5
    assert k.best_config(a, b).config in configs

    @pypto.jit(autotune=True)
    def mm(a, b):
        return a @ b
    assert rel_err(mm(a, b), a.astype(np.float64) @ b) < 1e-5
    assert "tiles" in mm.best_config(a, b).config


def test_autotune_rejects_bad_arguments():
    with pytest.raises(pypto.PyptoError, match="empty"):
        pypto.autotune(pypto.jit(redo), configs=[])
    with pytest.raises(pypto.PyptoError, match="not an argument"):
        pypto.autotune(pypto.jit(redo), configs=[{"R": 1}], key=["nope"])


SCRIPT = textwrap.dedent("""
    import numpy as np, pypto
    @pypto.autotune(configs=[{"R": 24}, {"R": 1}], key=["R"], repeats=2)
    @pypto.jit
    def redo(x, R=1):
        y = pypto.zeros(x.shape)
        for _ in range(R):
            y = pypto.exp(x)
        return y
    x = np.random.default_rng(0).random((128, 256), dtype=np.float32)
    y = redo(x)
    assert np.allclose(y, np.exp(x), rtol=1e-6)
    r = redo.best_config(x)
    print("RESULT", r.config, r.from_cache, redo.tunings)
""")


def test_autotune_choice_is_reused_by_a_later_process(tmp_path):
    script = tmp_path / "tune.py"
    script.write_text(SCRIPT)
    env = dict(os.environ, PYPTO_CACHE_DIR=str(tmp_path / "cache"), PYPTO_LOG_LEVEL="DEBUG")
    env["PYTHONPATH"] = os.pathsep.join([os.path.dirname(pypto.__path__[0]), env.get("PYTHONPATH", "")])
    runs = [subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=600)
            for _ in range(2)]
    for r in runs:
        assert r.returncode == 0, r.stderr[-2000:]
    first, second = (r.stdout.split("RESULT")[1].strip() for r in runs)
    assert first == "{'R': 1} False 1"
    assert second == "{'R': 1} True 0"
    assert "autotune redo: timing 2 configs" in runs[0].stderr and "chose {'R': 1}" in runs[0].stderr
    assert "cached choice {'R': 1}" in runs[1].stderr and "autotune redo: timing" not in runs[1].stderr
