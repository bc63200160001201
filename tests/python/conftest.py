"""Shared fixtures of the Python suite: every kernel test runs on the interpreter and on the CPU
backend (the `backend` fixture); helpers live in pypto_testutil.py."""
import os
import sys

import pytest
from hypothesis import settings

sys.path.insert(0, os.path.dirname(__file__))

# CPU-backend tests run in a forked child each (crash_isolation.py): a crashing kernel fails its test.
pytest_plugins = ["crash_isolation", "pytester"]

# Kernels run on 4 threads even on a 2-core machine, so parallel loops split into several chunks
# (the pool hands out one chunk per thread) and their edges between threads are exercised.
os.environ.setdefault("PYPTO_NUM_THREADS", "4")

# The interpreter runs `parallel for` iterations shuffled (and reports races) in tests, so a loop
# wrongly made parallel gives a wrong result or a race error instead of passing in order.
os.environ.setdefault("PYPTO_INTERP_PARALLEL", "shuffle")

from pypto_testutil import backend_params  # noqa: E402 (after the environment above)

# Random programs, but the same ones on every run: CI must not fail by the luck of the draw.
# (HYPOTHESIS_PROFILE=explore draws new examples when hunting for bugs.)
settings.register_profile("ci", derandomize=True)
settings.register_profile("explore", derandomize=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture(autouse=True)
def _seeded_global_rng():
    """Tests that draw from the global NumPy/torch generators draw the same values whichever tests
    ran before them (or were deselected): a tolerance checked once holds in CI's order too."""
    import numpy as np
    np.random.seed(0)
    torch = sys.modules.get("torch")  # seeded where a test module imported it; never imported here
    if torch is not None:
        torch.manual_seed(0)


@pytest.fixture(params=backend_params())
def backend(request):
    """"interp" or "cpu" (a pypto_testutil.Backend); test_ops.py and test_random_programs.py
    override it with backend_params(tiled=True) to run with small tiles as well."""
    return request.param
