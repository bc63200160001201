"""OpInfo-style sweep of the pypto ops: for every op in OPS, random inputs over each supported
dtype and shapes 1 x 1 and ragged (with a broadcast second operand), compared with torch in
float64 on the interpreter (int8, uint8 and int16, with their extreme values, for every op that
takes int32); the CPU backend then runs all ops of one dtype in a single kernel (one
compile) and must agree with torch too. Unsupported dtypes (of the data, and int8/uint8/int16
index tensors) and empty tensors raise PyptoError naming the op.

Every op takes the same arguments (x, y, i, j): x the data (shape S), y a second operand that
broadcasts against x (shape S[-1:]), i a vector of row indices into x (negative ones included),
j an index tensor of x's shape along the last dimension (for gather/scatter)."""
import numpy as np
import pytest
import torch

import pypto
from sweep_ops import OPS, ops_for

SHAPES = {"one": (1, 1), "ragged": (7, 37)}
FLOATS = ("float32", "float64")
INTS = ("int32", "int64")
NARROW_INTS = ("int8", "uint8", "int16")  # every op that takes int32 takes these too (extreme values)


def make_args(op, dtype, shape, seed=0):
    rng = np.random.default_rng(seed)
    rows, cols = shape
    if dtype in NARROW_INTS:
        ii = np.iinfo(dtype)
        x = rng.integers(ii.min, ii.max, size=shape, endpoint=True)
        x.flat[:4] = [ii.min, ii.max, 0, ii.max - 1][:x.size]
        y = rng.integers(1, 9, size=(cols,))  # divisors: never 0
        y[:2] = [1, 7][:cols]
    elif dtype in INTS:
        x = rng.integers(1, 9, size=shape) * rng.choice([-1, 1], size=shape)
        y = rng.integers(1, 9, size=(cols,))
    elif dtype == "bool":
        x = rng.random(shape) < 0.5
        y = rng.random((cols,)) < 0.5
    else:
        x = rng.standard_normal(shape)
        y = rng.standard_normal((cols,))
        if op.domain == "pos":
            x, y = np.abs(x) + 0.25, np.abs(y) + 0.25
        elif op.domain == "unit":
            x, y = np.tanh(x) * 0.9, np.tanh(y) * 0.9
    np_dt = np.dtype(dtype if dtype != "bool" else np.bool_)
    i = rng.integers(-rows, rows, size=(3,))
    j = rng.integers(0, cols, size=shape)
    return x.astype(np_dt), y.astype(np_dt), i.astype(np.int64), j.astype(np.int64)


def torch_args(args):
    x, y, i, j = args
    conv = (lambda a: torch.tensor(a, dtype=torch.float64)) if x.dtype.kind == "f" else torch.tensor
    return conv(x), conv(y), torch.tensor(i), torch.tensor(j)


def flat(r):
    if isinstance(r, (tuple, list)):
        return [z for p in r for z in flat(p)]
    return [r]


def compare(name, got, want, tol):
    got, want = flat(got), flat(want)
    assert len(got) == len(want), f"{name}: {len(got)} results, expected {len(want)}"
    for g, w in zip(got, want):
        g = np.asarray(pypto.to_numpy(g) if not isinstance(g, np.ndarray) else g)
        w = w.numpy() if isinstance(w, torch.Tensor) else np.asarray(w)
        assert g.shape == w.shape, f"{name}: shape {g.shape}, expected {w.shape}"
        if w.dtype == np.bool_ or w.dtype.kind in "iu":
            np.testing.assert_array_equal(g.astype(np.float64), w.astype(np.float64), err_msg=name)
            continue
        g64, w64 = g.astype(np.float64), w.astype(np.float64)
        np.testing.assert_array_equal(np.isnan(g64), np.isnan(w64), err_msg=f"{name}: NaN positions")
        ok = ~np.isnan(w64)
        np.testing.assert_array_equal(np.isinf(g64[ok]), np.isinf(w64[ok]), err_msg=f"{name}: inf positions")
        fin = ok & np.isfinite(w64)
        d = np.linalg.norm(g64[fin] - w64[fin]) / max(np.linalg.norm(w64[fin]), 1e-30)
        assert d < tol, f"{name}: relative error {d:.3g} >= {tol:.1g}"


def run(fn, backend, args):
    def kernel(x, y, i, j):
        return fn(x, y, i, j)
    return pypto.jit(kernel, backend=backend)(*args)


CASES = [(op, dt, s) for op in OPS for dt in op.dtypes for s in SHAPES]


@pytest.mark.parametrize("op,dtype,shape", CASES, ids=[f"{o.name}-{d}-{s}" for o, d, s in CASES])
def test_interp_matches_torch(op, dtype, shape):
    args = make_args(op, dtype, SHAPES[shape])
    want = op.ref(*torch_args(args))
    compare(op.name, run(op.fn, "interp", args), want, op.tol)


# The CPU backend compiles one kernel per group; float64 and int32 differ from float32 and int64
# only in the tile type, so (to keep make test lean) they run on the interpreter only.
CPU_DTYPES = ("float32", "int64", "bool")
GROUPS = sorted({(dt, op.domain) for op in OPS for dt in op.dtypes if dt in CPU_DTYPES})


@pytest.mark.parametrize("dtype,domain", GROUPS, ids=[f"{d}-{m}" for d, m in GROUPS])
def test_cpu_runs_every_op_in_one_kernel(dtype, domain):
    run_all([op for op in ops_for(dtype) if op.domain == domain], dtype, "cpu")


def run_all(ops, dtype, backend):
    args = make_args(ops[0], dtype, SHAPES["ragged"])

    def kernel(x, y, i, j):
        out = []
        for op in ops:
            out.append(op.fn(x, y, i, j))
        return tuple(out)

    got = pypto.jit(kernel, backend=backend)(*args)
    want = torch_args(args)
    for op, g in zip(ops, got):
        compare(op.name, g, op.ref(*want), op.tol)


# The narrow integers on every op that takes int32, all ops of one dtype in one kernel on each
# backend; each must equal torch, whose wrapping and promotion PyPTO follows.
NARROW_OPS = [op for op in OPS if "int32" in op.dtypes]


@pytest.mark.parametrize("backend", ["interp", "cpu"])
@pytest.mark.parametrize("dtype", NARROW_INTS)
def test_every_int_op_on_narrow_ints_matches_torch(dtype, backend):
    run_all(NARROW_OPS, dtype, backend)


BAD = [(op, dt) for op in OPS for dt in op.bad_dtypes]


@pytest.mark.parametrize("op,dtype", BAD, ids=[f"{o.name}-{d}" for o, d in BAD])
def test_unsupported_dtype_names_the_op(op, dtype):
    args = make_args(op, dtype, SHAPES["ragged"])
    with pytest.raises(pypto.PyptoError, match=op.error_name):
        run(op.fn, "interp", args)


# Index tensors are int32 or int64 (as torch, which reads a uint8 index as a mask): int8, uint8 and
# int16 ones are refused, naming the op.
BAD_INDEX = [(op, dt) for op in OPS for dt in op.bad_index_dtypes]


@pytest.mark.parametrize("op,dtype", BAD_INDEX, ids=[f"{o.name}-index-{d}" for o, d in BAD_INDEX])
def test_unsupported_index_dtype_names_the_op(op, dtype):
    x, y, i, j = make_args(op, op.dtypes[0], SHAPES["ragged"])
    with pytest.raises(pypto.PyptoError, match=f"{op.error_name}: index tensors must be int32 or int64, got {dtype}"):
        run(op.fn, "interp", (x, y, i.astype(dtype), j.astype(dtype)))


@pytest.mark.parametrize("op", OPS[:: max(1, len(OPS) // 8)], ids=lambda o: o.name)
def test_empty_tensor_as_torch(op):
    """Empty rows run as torch runs them (an empty result of torch's shape and dtype), or, where
    torch refuses them, a PyptoError naming the problem."""
    x, y, i, j = make_args(op, op.dtypes[0], (2, 3))
    args = (x[:0], y, i, j[:0])
    try:
        want = op.ref(*torch_args(args))
    except (RuntimeError, IndexError, ValueError):
        with pytest.raises(pypto.PyptoError, match="empty|dimension|size|shape|range"):
            run(op.fn, "interp", args)
        return
    compare(op.name, run(op.fn, "interp", args), want, op.tol)


def test_unsupported_element_types_are_a_pypto_error():
    # a clear error, not TypeError("not a dtype"); int8/uint8/int16 are supported (test_ints.py)
    for d in (torch.complex64, torch.float8_e4m3fn, np.uint16, np.complex128, "uint32"):
        with pytest.raises(pypto.PyptoError, match="unsupported dtype"):
            pypto.to_dtype(d)
    with pytest.raises(pypto.PyptoError, match="unsupported dtype"):
        pypto.zeros((2, 2), dtype=torch.complex64)
    assert pypto.to_dtype(torch.int8) is pypto.int8 and pypto.to_dtype("int8") is pypto.int8


def test_index_out_of_range_names_the_kernel_line_on_both_backends():
    table = np.random.default_rng(3).standard_normal((10, 4)).astype(np.float32)

    def lookup(ids, table):
        return pypto.embedding(ids, table)

    for backend in ("interp", "cpu"):
        k = pypto.jit(lookup, backend=backend)
        np.testing.assert_array_equal(k(np.array([9, 0]), table), table[[9, 0]])
        for bad in (np.array([10, 0]), np.array([0, -1])):
            with pytest.raises(pypto.PyptoError, match=r"index (10|-1) is out of range for a dimension of size 10"
                               r"(.|\n)*return pypto.embedding\(ids, table\)"):
                k(bad, table)


def test_scatter_with_an_index_out_of_range_writes_nothing_outside():
    def put(x, i, v):
        x[i] = v
        return x

    for backend in ("interp", "cpu"):
        x = np.zeros((6, 3), np.float32)
        guard = np.zeros((8, 3), np.float32)
        guard[1:7] = x  # x is a view into the middle of guard: a wild write would show
        view = guard[1:7]
        with pytest.raises(pypto.PyptoError, match="MSCATTER: index 6 is out of range"):
            pypto.jit(put, backend=backend)(view, np.array([1, 6]), np.ones((2, 3), np.float32))
        assert not guard[0].any() and not guard[7].any()


def test_one_hot_class_out_of_range_is_an_error_on_both_backends():
    # torch raises for a class >= num_classes or < 0; a zero row would make cross_entropy with a
    # bad target silently 0 for that row
    def hot(c):
        return pypto.one_hot(c, 5)

    for backend in ("interp", "cpu"):
        k = pypto.jit(hot, backend=backend)
        np.testing.assert_array_equal(k(np.array([4, 0, 2])), np.eye(5, dtype=np.int64)[[4, 0, 2]])
        for bad, cls in ((np.array([1, 5, 0]), 5), (np.array([[0, -1]], np.int32), -1)):
            with pytest.raises(pypto.PyptoError, match=rf"index {cls} is out of range for a dimension of size 5"
                               r"(.|\n)*return pypto.one_hot\(c, 5\)"):
                k(bad)


def test_cross_entropy_with_a_target_out_of_range_is_an_error():
    def loss(x, t):
        return torch.nn.functional.cross_entropy(x, t)

    x = torch.randn(3, 4, dtype=torch.float64)
    k = pypto.jit(loss, backend="cpu")
    torch.testing.assert_close(k(x, torch.tensor([3, 0, -100])),
                               torch.nn.functional.cross_entropy(x, torch.tensor([3, 0, -100])))
    with pytest.raises(pypto.PyptoError, match="index 4 is out of range for a dimension of size 4"):
        k(x, torch.tensor([1, 4, 0]))


def test_sin_cos_float32_within_one_ulp_over_a_wide_range():
    # the CPU backend's vectorised sin/cos (pto/cpu/trig.hpp) against float64, the interpreter's too
    rng = np.random.default_rng(8)
    x = (rng.uniform(-1, 1, 4000) * 2.0 ** rng.integers(-30, 40, 4000)).astype(np.float32)
    x[:8] = [0.0, -0.0, np.inf, -np.inf, np.nan, 1048576.0, 3.0e38, np.float32(np.pi / 2)]

    def trig(x):
        return pypto.sin(x), pypto.cos(x)

    for backend in ("cpu", "interp"):
        for got, ref in zip(pypto.jit(trig, backend=backend)(x), (np.sin(x.astype(np.float64)), np.cos(x.astype(np.float64)))):
            got = np.asarray(got)
            np.testing.assert_array_equal(np.isnan(got), np.isnan(ref))
            ok = ~np.isnan(ref)
            ulp = np.spacing(np.abs(ref[ok].astype(np.float32)))
            assert (np.abs(got[ok] - ref[ok]) <= ulp).all(), backend
        assert np.signbit(np.asarray(pypto.jit(trig, backend=backend)(x)[0])[1])  # sin(-0) = -0
