"""Shared fixtures of the Python suite: every kernel test runs on the interpreter and on the CPU
backend (the `backend` fixture); helpers live in pypto_testutil.py."""
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))


@pytest.fixture(params=["interp", "cpu"])
def backend(request):
    return request.param
