"""Shared fixtures of the Python suite: every kernel test runs on the interpreter and on the CPU
backend (the `backend` fixture); helpers live in pypto_testutil.py."""
import os
import sys

import pytest
from hypothesis import settings

sys.path.insert(0, os.path.dirname(__file__))

# The interpreter runs `parallel for` iterations shuffled (and reports races) in tests, so a loop
# wrongly made parallel gives a wrong result or a race error instead of passing in order.
os.environ.setdefault("PYPTO_INTERP_PARALLEL", "shuffle")

# Random programs, but the same ones on every run: CI must not fail by the luck of the draw.
# (HYPOTHESIS_PROFILE=explore draws new examples when hunting for bugs.)
settings.register_profile("ci", derandomize=True)
settings.register_profile("explore", derandomize=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture(params=["interp", "cpu"])
def backend(request):
    return request.param
