"""Random op chains over random (ragged) shapes, traced from one kernel whose op list is a
compile-time argument: the interpreter and the CPU backend against NumPy float64."""
import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import pypto
from pypto_testutil import rel_err

OPS = ("add", "mul", "sub", "maximum", "tanh", "relu", "sigmoid", "exp_small", "rowsum", "softmax",
       "scale", "square")


def chain(x, y, ops):
    z = x
    for op in ops:
        if op == "add":
            z = z + y
        elif op == "mul":
            z = z * y
        elif op == "sub":
            z = y - z
        elif op == "maximum":
            z = pypto.maximum(z, y)
        elif op == "tanh":
            z = pypto.tanh(z)
        elif op == "relu":
            z = pypto.relu(z)
        elif op == "sigmoid":
            z = pypto.sigmoid(z)
        elif op == "exp_small":
            z = pypto.exp(pypto.tanh(z))
        elif op == "rowsum":
            z = z.sum(-1, keepdim=True) + y
        elif op == "softmax":
            z = pypto.softmax(z, dim=-1)
        elif op == "scale":
            z = z * 0.5 + 1.0
        elif op == "square":
            z = z * z
    return z


def reference(x, y, ops):
    z = x
    for op in ops:
        if op == "add":
            z = z + y
        elif op == "mul":
            z = z * y
        elif op == "sub":
            z = y - z
        elif op == "maximum":
            z = np.maximum(z, y)
        elif op == "tanh":
            z = np.tanh(z)
        elif op == "relu":
            z = np.maximum(z, 0)
        elif op == "sigmoid":
            z = 1 / (1 + np.exp(-z))
        elif op == "exp_small":
            z = np.exp(np.tanh(z))
        elif op == "rowsum":
            z = z.sum(-1, keepdims=True) + y
        elif op == "softmax":
            e = np.exp(z - z.max(-1, keepdims=True))
            z = e / e.sum(-1, keepdims=True)
        elif op == "scale":
            z = z * 0.5 + 1.0
        elif op == "square":
            z = z * z
    return z


_kernels = {b: pypto.jit(chain, backend=b) for b in ("interp", "cpu")}


# Storage dtype -> tolerance against float64 (f16 results are rounded to 11 bits when stored).
TOL = {"float32": 1e-4, "float64": 1e-10, "float16": 3e-3}


@settings(max_examples=16, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=st.integers(1, 40), cols=st.integers(1, 70), ops=st.lists(st.sampled_from(OPS), min_size=1, max_size=4),
       dtype=st.sampled_from(sorted(TOL)), seed=st.integers(0, 2**16))
def test_random_chains(rows, cols, ops, dtype, seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((rows, cols)).astype(dtype)
    y = rng.uniform(0.5, 1.5, (rows, cols)).astype(dtype)
    ref = reference(x.astype(np.float64), y.astype(np.float64), ops)
    outs = {}
    for backend, k in _kernels.items():
        outs[backend] = out = k(x, y, tuple(ops))
        assert np.asarray(out).dtype == np.dtype(dtype), (backend, dtype)
        assert rel_err(out, ref) < TOL[dtype], (backend, ops, rows, cols, dtype)
    # the differential check proper: the CPU backend against the interpreter
    assert rel_err(outs["cpu"], np.asarray(outs["interp"], np.float64)) < TOL[dtype], (ops, rows, cols, dtype)
