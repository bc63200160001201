"""Ahead-of-time export: Lowered.export and ptoc -o write a shared library (loaded here with
ctypes), a standalone executable (run on .npy files) and the IR text; results match NumPy and
each other."""
import ctypes
import pathlib
import subprocess

import numpy as np
import pytest

import pypto
from pypto_testutil import rand, rel_err, requires_compiler

pytestmark = requires_compiler
PTOC = pathlib.Path(__file__).resolve().parents[2] / "build" / "ptoc"
EXAMPLE_C = pathlib.Path(__file__).resolve().parents[2] / "examples" / "aot_c" / "main.c"


def lin(x, w, b, s):
    return pypto.relu(pypto.matmul(x, w) + b) * s


def call_library(path, symbol, arrays, iscalars, fscalars, threads=2):
    lib = ctypes.CDLL(str(path))
    run = getattr(lib, f"pypto_{symbol}_run")
    run.restype = ctypes.c_int
    data = (ctypes.c_void_p * len(arrays))(*[a.ctypes.data for a in arrays])
    strides = [(ctypes.c_int64 * a.ndim)(*[s // a.itemsize for s in a.strides]) for a in arrays]
    ptrs = (ctypes.POINTER(ctypes.c_int64) * len(arrays))(*[ctypes.cast(s, ctypes.POINTER(ctypes.c_int64))
                                                            for s in strides])
    rc = run(data, ptrs, (ctypes.c_int64 * max(1, len(iscalars)))(*iscalars),
             (ctypes.c_double * max(1, len(fscalars)))(*fscalars), threads)
    sig = getattr(lib, f"pypto_{symbol}_signature")
    sig.restype = ctypes.c_char_p
    return rc, sig().decode()


def run_lin_exe(lowered, tmp_path, xwb, repeat):
    """Exports `lin` as an executable and runs it on x, w, b (s = 2.0); the result in out.npy."""
    lowered.export(tmp_path / "lin_exe", emit="exe")
    for name, a in zip("xwb", xwb):
        np.save(tmp_path / f"{name}.npy", a)
    run = subprocess.run([str(tmp_path / "lin_exe"), *(str(tmp_path / f"{n}.npy") for n in "xwb"),
                          str(tmp_path / "out.npy"), "s=2.0", "--repeat", str(repeat)],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    return run


def test_export_so_exe_and_ir_agree_with_numpy(tmp_path):
    x, w, b = rand(70, 40), rand(40, 50), rand(1, 50)
    lowered = pypto.jit(lin).lower(x, w, b, 2.0)
    want = np.maximum(x.astype(np.float64) @ w + b, 0) * 2.0

    files = lowered.export(tmp_path / "lin.so")
    assert (tmp_path / "lin.h").exists() and str(tmp_path / "lin.so") in files
    assert "int pypto_lin_run(" in (tmp_path / "lin.h").read_text()
    out = np.full((70, 50), np.nan, np.float32)
    rc, sig = call_library(tmp_path / "lin.so", "lin", [x, w, b, out], [2], [2.0])
    assert rc == 0 and sig.splitlines()[0] == "x f32[70, 40] in" and "s f64 scalar" in sig
    assert rel_err(out, want) < 1e-5

    run = run_lin_exe(lowered, tmp_path, (x, w, b), repeat=2)
    assert "ms (median of 2 runs" in run.stdout
    assert np.array_equal(np.load(tmp_path / "out.npy"), out)  # identical to the library's result

    bad = subprocess.run([str(tmp_path / "lin_exe"), str(tmp_path / "w.npy"), str(tmp_path / "w.npy"),
                          str(tmp_path / "b.npy"), str(tmp_path / "o.npy"), "s=1"], capture_output=True, text=True)
    assert bad.returncode == 1 and "wrong shape for x" in bad.stderr

    # A C program built against the exported header and library alone (examples/aot_c).
    c = subprocess.run(["cc", "-O2", "-std=c99", str(EXAMPLE_C), "-I", str(tmp_path), str(tmp_path / "lin.so"),
                        "-lm", "-o", str(tmp_path / "main")], capture_output=True, text=True, timeout=300)
    assert c.returncode == 0, c.stderr
    r = subprocess.run([str(tmp_path / "main")], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.startswith("max abs error"), r.stdout + r.stderr

    lowered.export(tmp_path / "lin.pto")
    assert (tmp_path / "lin.pto").read_text().startswith("func @lin(")


def test_ptoc_exports_a_library_from_ir_text(tmp_path):
    x, w, b = rand(24, 16), rand(16, 8), rand(1, 8)
    pypto.jit(lin).lower(x, w, b, 0.5).export(tmp_path / "k.pto")
    r = subprocess.run([str(PTOC), str(tmp_path / "k.pto"), "-o", str(tmp_path / "k.so")],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    out = np.full((24, 8), np.nan, np.float32)
    rc, _ = call_library(tmp_path / "k.so", "lin", [x, w, b, out], [0], [0.5], threads=1)
    assert rc == 0 and rel_err(out, np.maximum(x.astype(np.float64) @ w + b, 0) * 0.5) < 1e-5
    r = subprocess.run([str(PTOC), str(tmp_path / "k.pto"), "--emit", "cpp"], capture_output=True, text=True)
    assert r.returncode == 2 and "--emit needs -o" in r.stderr


def test_export_rejects_an_unknown_kind(tmp_path):
    lowered = pypto.jit(lin).lower(rand(4, 4), rand(4, 4), rand(1, 4), 1.0)
    with pytest.raises(pypto.PyptoError, match="unknown export kind"):
        lowered.export(tmp_path / "k.bin", emit="dll")


def test_export_of_a_dynamic_kernel_takes_the_size_at_run_time(tmp_path):
    """A kernel compiled with dim 0 of x dynamic exports once: the library takes the extent as an
    integer scalar after the caller's own, checks its range, and runs any length; the executable
    binds it from x.npy's shape and writes an output of the matching length."""
    kernel = pypto.jit(lin, dynamic={"x": [0]})
    w, b = rand(40, 50), rand(1, 50)
    lowered = kernel.lower(rand(70, 40), w, b, 2.0)
    lowered.export(tmp_path / "lin.so")
    header = (tmp_path / "lin.h").read_text()
    assert "x f32[x_0, 40] in" in header and "x_0 i64 scalar: dim 0 of x (dynamic)" in header
    for n in (1, 13, 257):
        x = rand(n, 40)
        out = np.full((n, 50), np.nan, np.float32)
        rc, sig = call_library(tmp_path / "lin.so", "lin", [x, w, b, out], [2, n], [2.0, 0.0])
        assert rc == 0 and sig.splitlines()[0] == "x f32[x_0, 40] in"
        assert rel_err(out, np.maximum(x.astype(np.float64) @ w + b, 0) * 2.0) < 1e-5, n
    lib = ctypes.CDLL(str(tmp_path / "lin.so"))
    lib.pypto_lin_error.restype = ctypes.c_char_p
    rc, _ = call_library(tmp_path / "lin.so", "lin", [x, w, b, out], [2, -3], [2.0, 0.0])
    assert rc == 1 and b"x_0 = -3 is out of range" in lib.pypto_lin_error()

    x = rand(29, 40)
    run_lin_exe(lowered, tmp_path, (x, w, b), repeat=1)
    got = np.load(tmp_path / "out.npy")
    assert got.shape == (29, 50) and rel_err(got, np.maximum(x.astype(np.float64) @ w + b, 0) * 2.0) < 1e-5
