"""Random op chains over random (ragged) shapes, traced from one kernel whose op list is a
compile-time argument: the interpreter and the CPU backend, each with the default tiles and with
small tiles (so most shapes span several tiles with ragged edges), against NumPy float64.

The chains mix elementwise ops, row and column reductions (sum, max, min), broadcasting of row
and column vectors, a square matmul and a loop carrying a tensor across iterations, over every
storage dtype (f32, f64, f16, bf16, i8, u8, i16, i32, i64). Inputs include all-negative rows and
ties; the narrow integers take their whole range, extremes included, so sums widen and products
wrap (compared with torch, whose promotion rules PyPTO follows: a uint8 sum is int64)."""
import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import pypto
from pypto_testutil import SMALL_TILES, as_numpy, rel_err, requires_compiler

# Every op keeps z's shape (rows, cols); `y` has that shape, `w` is cols x cols.
FLOAT_OPS = ("add", "mul", "sub", "maximum", "minimum", "tanh", "relu", "sigmoid", "exp_small", "softmax", "scale",
             "square", "rowsum", "rowmax", "rowmin", "colsum", "colmax", "colmin", "bcast_row", "bcast_col", "matmul",
             "loop")
INT_OPS = ("add", "mul", "sub", "maximum", "minimum", "rowsum", "rowmax", "colsum", "colmin", "bcast_row",
           "bcast_col", "loop")


def chain(x, y, w, ops):
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
        elif op == "minimum":
            z = pypto.minimum(z, y)
        elif op == "tanh":
            z = pypto.tanh(z)
        elif op == "relu":
            z = pypto.relu(z)
        elif op == "sigmoid":
            z = pypto.sigmoid(z)
        elif op == "exp_small":
            z = pypto.exp(pypto.tanh(z))
        elif op == "softmax":
            z = pypto.softmax(z, dim=-1)
        elif op == "scale":
            z = z * 0.5 + 1.0
        elif op == "square":
            z = z * z
        elif op == "rowsum":
            z = z.sum(-1, keepdim=True) + y
        elif op == "rowmax":
            z = pypto.max(z, -1, keepdim=True) - y
        elif op == "rowmin":
            z = y - pypto.min(z, -1, keepdim=True)
        elif op == "colsum":
            z = z.sum(0, keepdim=True) + y
        elif op == "colmax":
            z = pypto.max(z, 0, keepdim=True) - y
        elif op == "colmin":
            z = y - pypto.min(z, 0, keepdim=True)
        elif op == "bcast_row":
            z = z + y[0:1, :]
        elif op == "bcast_col":
            z = z * y[:, 0:1]
        elif op == "matmul":
            z = pypto.tanh(z @ w)
        elif op == "loop":
            for _ in range(3):  # a real loop in the IR: z is carried across its iterations
                z = z + y
    return z


def reference(x, y, w, ops):
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
        elif op == "minimum":
            z = np.minimum(z, y)
        elif op == "tanh":
            z = np.tanh(z)
        elif op == "relu":
            z = np.maximum(z, 0)
        elif op == "sigmoid":
            z = 1 / (1 + np.exp(-z))
        elif op == "exp_small":
            z = np.exp(np.tanh(z))
        elif op == "softmax":
            e = np.exp(z - z.max(-1, keepdims=True))
            z = e / e.sum(-1, keepdims=True)
        elif op == "scale":
            z = z * 0.5 + 1.0
        elif op == "square":
            z = z * z
        elif op == "rowsum":
            z = z.sum(-1, keepdims=True) + y
        elif op == "rowmax":
            z = z.max(-1, keepdims=True) - y
        elif op == "rowmin":
            z = y - z.min(-1, keepdims=True)
        elif op == "colsum":
            z = z.sum(0, keepdims=True) + y
        elif op == "colmax":
            z = z.max(0, keepdims=True) - y
        elif op == "colmin":
            z = y - z.min(0, keepdims=True)
        elif op == "bcast_row":
            z = z + y[0:1, :]
        elif op == "bcast_col":
            z = z * y[:, 0:1]
        elif op == "matmul":
            z = np.tanh(z @ w)
        elif op == "loop":
            z = z + 3 * y
    return z


CONFIGS = [("interp", None), ("cpu", None), ("interp", SMALL_TILES), ("cpu", SMALL_TILES)]
_kernels = {(b, str(t)): pypto.jit(chain, backend=b, tiles=t) for b, t in CONFIGS}

# Storage dtype -> tolerance of the relative norm error against float64: a few units of the
# dtype's rounding error grown over a 4-op chain (f16/bf16 results are rounded to 11/8 bits at
# every store of an unfused op). Integers are exact.
TOL = {"float32": 2e-5, "float64": 1e-12, "float16": 3e-3, "bfloat16": 2e-2, "int32": 0, "int64": 0, "int8": 0,
       "uint8": 0, "int16": 0}
NARROW_INTS = ("int8", "uint8", "int16")


def inputs(rng, rows, cols, dtype):
    """x: normal values with, when there are several rows, an all-negative row and a row of ties
    (so max/min reductions and their NaN-free edges are exercised); y in [0.5, 1.5]; w scaled so
    the matmul keeps magnitudes. Integers: small values, ties included; narrow integers: their
    whole range with its extremes."""
    if dtype in NARROW_INTS:
        ii = np.iinfo(dtype)
        x, y = (rng.integers(ii.min, ii.max, (rows, cols), endpoint=True) for _ in range(2))
        x.flat[:2] = [ii.min, ii.max][:x.size]
        return [a.astype(dtype) for a in (x, y, np.zeros((cols, cols)))]
    if dtype in ("int32", "int64"):
        x = rng.integers(-3, 4, (rows, cols))
        y = rng.integers(-2, 3, (rows, cols))
        y[y == 0] = 1
        w = rng.integers(-1, 2, (cols, cols))
        return [a.astype(dtype) for a in (x, y, w)]
    x = rng.standard_normal((rows, cols))
    if rows >= 2:
        x[0] = -np.abs(x[0]) - 0.5  # all negative: a max starting from 0 would show
        x[1] = x[1, 0]              # ties
    y = rng.uniform(0.5, 1.5, (rows, cols))
    w = rng.standard_normal((cols, cols)) / np.sqrt(cols)
    return [a.astype(dtype) if dtype != "bfloat16" else a for a in (x, y, w)]


def narrow_int_reference(x, y, ops):
    """The chain in torch (wrapping narrow arithmetic, sums widening to int64), as NumPy."""
    z, y = torch.from_numpy(x), torch.from_numpy(y)
    for op in ops:
        z = {"add": lambda: z + y, "mul": lambda: z * y, "sub": lambda: y - z,
             "maximum": lambda: torch.maximum(z, y), "minimum": lambda: torch.minimum(z, y),
             "rowsum": lambda: z.sum(-1, keepdim=True) + y, "rowmax": lambda: z.amax(-1, keepdim=True) - y,
             "colsum": lambda: z.sum(0, keepdim=True) + y, "colmin": lambda: y - z.amin(0, keepdim=True),
             "bcast_row": lambda: z + y[0:1, :], "bcast_col": lambda: z * y[:, 0:1],
             "loop": lambda: z + y + y + y}[op]()
    return z.numpy()


def to_kernel_arg(a, dtype):
    return torch.from_numpy(a).to(torch.bfloat16) if dtype == "bfloat16" else a


def as_f64(a):
    if isinstance(a, torch.Tensor):
        return a.to(torch.float64).numpy()
    return np.asarray(as_numpy(a), dtype=np.float64)


@requires_compiler
@pytest.mark.isolated
@settings(max_examples=24, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), rows=st.integers(1, 40), cols=st.integers(1, 70), seed=st.integers(0, 2**16),
       dtype=st.sampled_from(sorted(TOL)))
def test_random_chains(data, rows, cols, seed, dtype):
    pool = INT_OPS if "int" in dtype else FLOAT_OPS
    ops = tuple(data.draw(st.lists(st.sampled_from(pool), min_size=1, max_size=4), label="ops"))
    rng = np.random.default_rng(seed)
    x, y, w = inputs(rng, rows, cols, dtype)
    args = [to_kernel_arg(a, dtype) for a in (x, y, w)]
    if dtype in NARROW_INTS:
        ref = narrow_int_reference(x, y, ops)
        want_dtype = ref.dtype
    else:
        ref = reference(*(as_f64(a) for a in args), ops)
        # Integer sums widen to int64 (as in NumPy and torch); floats keep their storage dtype.
        want_dtype = reference(x, y, w, ops).dtype if dtype.startswith("int") else dtype
    outs = {}
    for (backend, tiles), k in _kernels.items():
        out = k(*args, ops)
        where = (backend, tiles, ops, rows, cols, dtype)
        if dtype == "bfloat16":
            assert isinstance(out, torch.Tensor) and out.dtype == torch.bfloat16, where
        else:
            assert np.asarray(out).dtype == np.dtype(want_dtype), where
        outs[backend, tiles] = got = as_f64(out)
        if TOL[dtype] == 0:
            np.testing.assert_array_equal(got, ref, err_msg=str(where))
        else:
            assert rel_err(got, ref) < TOL[dtype], where
    # The differential check proper: every configuration against the interpreter with default tiles.
    base = outs["interp", "None"]
    for key, got in outs.items():
        if TOL[dtype] == 0:
            np.testing.assert_array_equal(got, base, err_msg=str((key, ops)))
        else:
            assert rel_err(got, base) < TOL[dtype], (key, ops, rows, cols, dtype)
