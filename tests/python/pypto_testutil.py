"""Helpers of the Python tests: random inputs (never zeros), NaN-poisoned outputs, relative
norm errors against float64 references, and jit with a chosen backend."""
import os
import shutil

import numpy as np
import pytest

import pypto

RTOL = 1e-4
_rng = np.random.default_rng(1234)


def rand(*shape, dtype=np.float32, low=None):
    """Standard normal values; with `low`, uniform in [low, low + 1] (for log / sqrt)."""
    if low is not None:
        a = _rng.uniform(low, low + 1.0, size=shape)
    else:
        a = _rng.standard_normal(shape)
    return a.astype(dtype)


def edge_rand(*shape, dtype=np.float32, low=None, specials=True):
    """rand() plus the data that finds bugs in reductions and NaN rules (shape: 2-d, >= 5 x 3):
    row 0 all negative (a max starting at 0 shows), row 1 all ties, denormals at [2, 0:2]; with
    `specials`, +inf at [3, 0], -inf at [3, 1] and NaN at [4, 2] (with `low`, only values in the
    domain [low, ...): no negatives, and NaN / +inf only)."""
    a = rand(*shape, dtype=np.float64, low=low)
    tiny = float(np.finfo(dtype).tiny)
    if low is None:
        a[0] = -np.abs(a[0]) - 0.25
        a[2, 0:2] = (tiny / 4, -tiny / 8)
    else:
        a[2, 0:2] = (tiny / 4, tiny / 8)
    a[1] = a[1, 0]
    if specials:
        a[3, 0] = np.inf
        if low is None:
            a[3, 1] = -np.inf
        a[4, 2] = np.nan
    return a.astype(dtype)


def assert_close_edges(out, ref, tol=None):
    """assert_close for edge_rand data: where the reference is inf or NaN the output must be the
    same inf or NaN; elsewhere it must be finite and within `tol` (relative norm error)."""
    out = np.asarray(as_numpy(out), dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    assert out.shape == ref.shape, (out.shape, ref.shape)
    special = ~np.isfinite(ref)
    np.testing.assert_array_equal(out[special], ref[special], err_msg="inf/NaN positions or values differ")
    fin = ~special
    assert np.isfinite(out[fin]).all(), f"non-finite output where the reference is finite: {np.argwhere(fin & ~np.isfinite(out))[:5]}"
    e = float(np.linalg.norm(out[fin] - ref[fin]) / max(np.linalg.norm(ref[fin]), 1e-30))
    tol = RTOL if tol is None else tol
    assert e < tol, f"relative error {e:.3g} >= {tol:.1g}"


def poisoned(*shape, dtype=np.float32):
    return np.full(shape, np.nan, dtype=dtype)


def as_numpy(x):
    return pypto.to_numpy(x) if not isinstance(x, np.ndarray) else x


def rel_err(out, ref):
    out = np.asarray(as_numpy(out), dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    assert out.shape == ref.shape, (out.shape, ref.shape)
    assert np.isfinite(out).all(), "non-finite values in the output"
    return float(np.linalg.norm(out - ref) / max(np.linalg.norm(ref), 1e-30))


def assert_close(out, ref, tol=RTOL):
    e = rel_err(out, ref)
    assert e < tol, f"relative error {e:.3g} >= {tol:.1g}"


def have_compiler():
    """The CPU backend needs a C++ compiler: the one reason a CPU test may be skipped."""
    return shutil.which(os.environ.get("PYPTO_CXX") or "c++") is not None


requires_compiler = pytest.mark.skipif(not have_compiler(), reason="no C++ compiler (PYPTO_CXX or c++) found")

# Tile sizes small enough that the 33x70 shapes of the op tests span several tiles in both
# dimensions, with ragged last tiles (70 = 4*16 + 6 columns, 33 = 4*8 + 1 rows), wide row
# reductions split into column chunks, and matmuls with several M, N and K steps.
SMALL_TILES = {"m": 16, "n": 16, "k": 16, "rows": 8, "cols": 16}


class Backend(str):
    """A backend name ("interp" or "cpu") that may carry tile sizes for jit."""

    def __new__(cls, name, tiles=None):
        b = super().__new__(cls, name)
        b.tiles = tiles
        return b


def backend_params(tiled=False):
    """pytest params of the `backend` fixture: both backends with default tiles and, with `tiled`,
    both with SMALL_TILES too. CPU params skip only when no compiler is found."""
    out = [pytest.param(Backend("interp"), id="interp"),
           pytest.param(Backend("cpu"), id="cpu", marks=requires_compiler)]
    if tiled:
        out += [pytest.param(Backend("interp", SMALL_TILES), id="interp-small-tiles"),
                pytest.param(Backend("cpu", SMALL_TILES), id="cpu-small-tiles", marks=requires_compiler)]
    # PYPTO_TEST_SIM=1: the NPU simulator too (it runs the interpreter, so values are the same;
    # the sweep checks that every kernel places, syncs and times without error). Off by default:
    # it would double the interpreter's share of the suite.
    if os.environ.get("PYPTO_TEST_SIM", "") not in ("", "0"):
        out.append(pytest.param(Backend("sim"), id="sim"))
        if tiled:
            out.append(pytest.param(Backend("sim", SMALL_TILES), id="sim-small-tiles"))
    return out


def jit(fn, backend, **kw):
    if getattr(backend, "tiles", None) and "tiles" not in kw:
        kw["tiles"] = backend.tiles
    return pypto.jit(fn, backend=str(backend), **kw)


def f64(*xs):
    return [np.asarray(as_numpy(x), dtype=np.float64) for x in xs]
