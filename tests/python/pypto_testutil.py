"""Helpers of the Python tests: random inputs (never zeros), NaN-poisoned outputs, relative
norm errors against float64 references, and jit with a chosen backend."""
import numpy as np

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


def jit(fn, backend, **kw):
    return pypto.jit(fn, backend=backend, **kw)


def f64(*xs):
    return [np.asarray(as_numpy(x), dtype=np.float64) for x in xs]
