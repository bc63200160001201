"""The CPU backend's kernel cache across processes.

Each test runs small programs in fresh subprocesses that share one PYPTO_CACHE_DIR: a second
process starts warm from the disk cache (it reports the kernel came from the cache and writes
nothing), two processes compiling the same kernel at the same time both succeed, and a truncated
shared object left in the cache is detected by its checksum and rebuilt.

The child builds its kernel with the C++ builder bindings (pypto._C.Builder / Kernel), so these
tests do not depend on the front end; one more test goes through the public `pypto.jit`.
"""
import hashlib
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import pypto
from pypto import _C
from pypto_testutil import requires_compiler

# relu(x @ w + b) through the builder; compile() reports whether the object came from a cache.
CHILD = textwrap.dedent(
    """
    import json, time
    import numpy as np
    from pypto import _C

    t0 = time.perf_counter()
    b = _C.Builder("cache_probe")
    x = b.add_param("x", _C.DType.F32, [37, 29])
    w = b.add_param("w", _C.DType.F32, [29, 23])
    bias = b.add_param("b", _C.DType.F32, [23])
    y = b.unary(_C.Opcode.TRELU, b.binary(_C.Opcode.TADD, b.matmul(x, w), bias))
    k = _C.Kernel(b.finish([y]), "cpu")
    k.compile()
    seconds = time.perf_counter() - t0

    rng = np.random.default_rng(0)
    X = (rng.random((37, 29)) + 0.25).astype(np.float32)
    W = (rng.random((29, 23)) - 0.5).astype(np.float32)
    B = (rng.random(23) - 0.5).astype(np.float32)
    out = np.full((37, 23), np.nan, np.float32)
    k.run([X, W, B, out], [])
    ref = np.maximum(X.astype(np.float64) @ W.astype(np.float64) + B, 0.0)
    err = float(np.linalg.norm(out - ref) / np.linalg.norm(ref))
    print(json.dumps({"err": err, "from_cache": bool(k.compiled_from_cache()), "seconds": seconds}))
    """
)

# The same through the public API: fn.lower(...) exposes the Kernel when the front end has it.
JIT_CHILD = textwrap.dedent(
    """
    import json, time
    import numpy as np
    import pypto

    @pypto.jit
    def fused_linear(x, w, b):
        return pypto.relu(pypto.add(pypto.matmul(x, w), b))

    rng = np.random.default_rng(0)
    x = (rng.random((37, 29)) + 0.25).astype(np.float32)
    w = (rng.random((29, 23)) - 0.5).astype(np.float32)
    b = (rng.random(23) - 0.5).astype(np.float32)
    t0 = time.perf_counter()
    y = np.asarray(fused_linear(x, w, b))
    seconds = time.perf_counter() - t0
    ref = np.maximum(x.astype(np.float64) @ w.astype(np.float64) + b, 0.0)
    err = float(np.linalg.norm(y - ref) / np.linalg.norm(ref))
    print(json.dumps({"err": err, "from_cache": None, "seconds": seconds}))
    """
)


def _env(cache_dir):
    env = dict(os.environ)
    env["PYPTO_CACHE_DIR"] = str(cache_dir)
    env.pop("PYPTO_INTERPRET", None)
    env.pop("PYPTO_CXX", None)
    pkg_parent = str(Path(_C.__file__).resolve().parent.parent)
    rest = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join([pkg_parent] + rest)
    return env


def _start(cache_dir, child=CHILD):
    # The child runs from a file beside the cache directory: @pypto.jit reads its kernel's source.
    script = Path(cache_dir).parent / ("jit_child.py" if child is JIT_CHILD else "child.py")
    script.write_text(child)
    return subprocess.Popen(
        [sys.executable, str(script)],
        env=_env(cache_dir),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _finish(proc, timeout=300):
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, f"child failed ({proc.returncode}):\n{err}\n{out}"
    result = json.loads(out.strip().splitlines()[-1])
    assert result["err"] < 1e-5, result
    return result


def _run(cache_dir, child=CHILD):
    return _finish(_start(cache_dir, child))


def _snapshot(cache_dir):
    return {p.name: (p.stat().st_size, p.stat().st_mtime_ns) for p in Path(cache_dir).iterdir()}


def _check_entries(cache_dir):
    """Only finished entries remain, each object matching its checksum file."""
    names = sorted(p.name for p in Path(cache_dir).iterdir())
    assert not [n for n in names if ".tmp." in n], names
    objects = list(Path(cache_dir).glob("*.so"))
    assert objects, names
    for so in objects:
        size, digest = so.with_suffix(".sum").read_text().split()
        assert int(size) == so.stat().st_size
        assert hashlib.sha256(so.read_bytes()).hexdigest() == digest
    return objects


@pytest.fixture
def cache(tmp_path):
    d = tmp_path / "cache"
    d.mkdir()
    return d


@requires_compiler
def test_second_process_starts_warm_from_disk(cache):
    cold = _run(cache)
    assert cold["from_cache"] is False
    _check_entries(cache)
    before = _snapshot(cache)

    warm = _run(cache)
    assert warm["from_cache"] is True
    assert _snapshot(cache) == before  # a disk hit compiles nothing and writes nothing
    print(f"cold {cold['seconds'] * 1e3:.0f} ms, warm {warm['seconds'] * 1e3:.0f} ms (build + lower + compile)")


@requires_compiler
def test_two_processes_compile_the_same_kernel_at_once(cache):
    procs = [_start(cache) for _ in range(2)]
    results = [_finish(p) for p in procs]
    assert all(r["err"] < 1e-5 for r in results)
    _check_entries(cache)
    before = _snapshot(cache)
    assert _run(cache)["from_cache"] is True
    assert _snapshot(cache) == before


@requires_compiler
def test_truncated_cache_entry_is_rebuilt(cache):
    _run(cache)
    objects = _check_entries(cache)
    sizes = {}
    for so in objects:
        data = so.read_bytes()
        sizes[so.name] = len(data)
        so.write_bytes(data[: len(data) // 3])  # no live process has it loaded
    result = _run(cache)
    assert result["from_cache"] is False  # the checksum caught it: rebuilt, not loaded
    for so in objects:
        assert so.stat().st_size == sizes[so.name], "the truncated object was not rebuilt"
    _check_entries(cache)
    assert _run(cache)["from_cache"] is True


def test_missing_compiler_is_a_clear_error(cache):
    env = _env(cache)
    env["PYPTO_CXX"] = str(cache / "no-such-compiler")
    script = cache.parent / "child.py"
    script.write_text(CHILD)
    proc = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0
    assert "no C++ compiler found" in proc.stderr
    assert "PYPTO_CXX" in proc.stderr
    assert "backend='interp'" in proc.stderr
    assert "Segmentation fault" not in proc.stderr


@requires_compiler
def test_jit_kernels_start_warm_from_disk(cache):
    _run(cache, JIT_CHILD)
    _check_entries(cache)
    before = _snapshot(cache)
    _run(cache, JIT_CHILD)
    assert _snapshot(cache) == before


# Two kernels with a large f32 matmul (one MMATMUL each): the packed GEMM they call is compiled
# once, into a library of its own in the cache, which both load.
GEMM_CHILD = textwrap.dedent(
    """
    import json
    import numpy as np
    import pypto

    @pypto.jit
    def plain(a, b):
        return pypto.matmul(a, b)

    @pypto.jit
    def scaled(a, b):
        return pypto.matmul(a, b) * 0.5

    @pypto.jit
    def linear(a, b, c):  # the product with its bias and relu fused: pto::mmatmul_bias
        return pypto.relu(pypto.matmul(a, b) + c)

    rng = np.random.default_rng(0)
    a, b = rng.random((200, 300), np.float32) - 0.5, rng.random((300, 150), np.float32) - 0.5
    c = rng.random(150, np.float32) - 0.5
    ref = a.astype(np.float64) @ b
    assert "pto::MMATMUL" in plain.lower(a, b).as_text("source")
    assert "pto::mmatmul_bias(" in linear.lower(a, b, c).as_text("source")
    err = max(float(np.linalg.norm(np.asarray(plain(a, b)) - ref) / np.linalg.norm(ref)),
              float(np.linalg.norm(2 * np.asarray(scaled(a, b)) - ref) / np.linalg.norm(ref)),
              float(np.linalg.norm(np.asarray(linear(a, b, c)) - np.maximum(ref + c, 0))
                    / np.linalg.norm(np.maximum(ref + c, 0))))
    print(json.dumps({"err": err, "from_cache": None, "seconds": 0}))
    """
)


@requires_compiler
@pytest.mark.parametrize("shared", ["1", "0"])
def test_matmul_kernels_share_one_compiled_gemm(cache, shared, monkeypatch):
    monkeypatch.setenv("PYPTO_SHARED_GEMM", shared)
    script = cache.parent / "gemm_child.py"
    script.write_text(GEMM_CHILD)

    def run():
        env = dict(_env(cache), PYPTO_LOG_LEVEL="DEBUG")
        proc = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True,
                              timeout=300)
        assert proc.returncode == 0, proc.stderr
        assert json.loads(proc.stdout.strip().splitlines()[-1])["err"] < 1e-5
        return proc.stderr

    log = run()
    objects = _check_entries(cache)
    gemm = [so for so in objects if "PTO_SHARED_GEMM_DEFINE" in so.with_suffix(".cpp").read_text()]
    # The library comes from the package's prebuilt/ (make build) where it holds this machine's
    # build, else it is compiled into the cache.
    from_package = "shared GEMM library: loaded " + str(_prebuilt_dir()) in log
    assert from_package == (shared == "1" and _prebuilt_dir().is_dir() and any(_prebuilt_dir().glob("*.so")))
    assert len(gemm) == (1 if shared == "1" and not from_package else 0) and len(objects) == 3 + len(gemm)
    # every kernel's product calls the library instead of compiling the GEMM inline (~10 s of g++)
    kernel_compiles = [ln for ln in log.splitlines() if "compiling:" in ln and "DEFINE" not in ln]
    assert len(kernel_compiles) == 3
    assert all(("-DPTO_SHARED_GEMM " in ln) == (shared == "1") for ln in kernel_compiles), kernel_compiles
    before = _snapshot(cache)
    run()  # warm: the library and both kernels load from the cache (or the package)
    assert _snapshot(cache) == before


def _prebuilt_dir():
    return Path(_C.__file__).resolve().parent / "prebuilt"


@requires_compiler
def test_fresh_cache_takes_the_prebuilt_gemm_library(cache):
    """`make build` compiles the shared GEMM library into the package (prebuild_shared_gemm): a
    process with an empty kernel cache loads it from there instead of compiling it (~3 s)."""
    lib = Path(_C.prebuild_shared_gemm())
    assert lib.parent == _prebuilt_dir() and lib.with_suffix(".sum").is_file()
    assert sorted(p.name for p in _prebuilt_dir().iterdir()) == sorted(
        lib.with_suffix(ext).name for ext in (".cpp", ".lock", ".so", ".sum"))
    assert Path(_C.prebuild_shared_gemm()) == lib  # a second call finds it built
    script = cache.parent / "gemm_child.py"
    script.write_text(GEMM_CHILD)
    env = dict(_env(cache), PYPTO_LOG_LEVEL="DEBUG", PYPTO_SHARED_GEMM="1")
    proc = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.strip().splitlines()[-1])["err"] < 1e-5
    assert f"shared GEMM library: loaded {lib}" in proc.stderr
    sources = [so.with_suffix(".cpp").read_text() for so in _check_entries(cache)]
    assert len(sources) == 3 and not any("PTO_SHARED_GEMM_DEFINE" in s for s in sources)
    # another compiler's build is not this one: the library is compiled into the cache again
    cache2 = cache.parent / "cache2"
    env.update(PYPTO_CACHE_DIR=str(cache2), PYPTO_CXXFLAGS="-DPYPTO_TEST_OTHER_FLAGS")
    proc = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "shared GEMM library: loaded" not in proc.stderr
    sources = [so.with_suffix(".cpp").read_text() for so in _check_entries(cache2)]
    assert sum("PTO_SHARED_GEMM_DEFINE" in s for s in sources) == 1


@requires_compiler
def test_gemm_library_that_cannot_be_built_leaves_the_gemm_inline(cache, tmp_path):
    """The kernels compile while the library builds; when the library's compile fails, each
    kernel is compiled again with the GEMM inline, and the results stay right."""
    script = cache.parent / "gemm_child.py"
    script.write_text(GEMM_CHILD)
    cxx = tmp_path / "cxx_without_gemm_library.sh"
    cxx.write_text('#!/bin/sh\nfor a; do src="$a"; done\n'
                   'if grep -q -e PTO_SHARED_GEMM_DEFINE -- "$src" 2>/dev/null; then echo refused >&2; exit 1; fi\n'
                   'exec c++ "$@"\n')
    cxx.chmod(0o755)
    env = _env(cache)
    env.update(PYPTO_CXX=str(cxx), PYPTO_SHARED_GEMM="1")
    proc = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.strip().splitlines()[-1])["err"] < 1e-5
    # no library; the first kernel was compiled against it (side by side with its build), then
    # inline; the others inline only, the library being known to be unavailable by then
    sources = [so.with_suffix(".cpp").read_text() for so in _check_entries(cache)]
    assert not any("PTO_SHARED_GEMM_DEFINE" in s for s in sources)
    assert len(sources) == 4 and all("pto::MMATMUL" in s or "pto::mmatmul_bias(" in s for s in sources)


@requires_compiler
@pytest.mark.parametrize("pch", ["1", "0", "no home"])
def test_the_headers_are_precompiled_once_for_every_kernel_cache(tmp_path, pch):
    """pto/pto.hpp is precompiled once into ~/.cache/pypto/pch/<key>/ (even when PYPTO_CACHE_DIR
    points elsewhere, so a fresh kernel cache reuses it), and each kernel's compile puts that
    directory first on its include path; PYPTO_PCH=0, or a HOME where nothing can be made:
    neither. The kernel is right either way, and a second process with another kernel cache
    builds no second header."""
    home, log, cxx = tmp_path / "home", tmp_path / "compiles.log", tmp_path / "logging-cxx"
    home.mkdir() if pch != "no home" else home.write_text("a file, not a directory")
    cxx.write_text('#!/bin/sh\ncase "$*" in *--version*) exec c++ "$@";; esac\n'
                   f'echo "$*" >> "{log}"\nexec c++ "$@"\n')
    cxx.chmod(0o755)
    for run in ("first", "second"):
        cache = tmp_path / f"cache-{run}"
        env = _env(cache)
        env.update(HOME=str(home), PYPTO_CXX=str(cxx), PYPTO_PCH="0" if pch == "0" else "1")
        script = tmp_path / "child.py"
        script.write_text(CHILD)
        proc = subprocess.Popen([sys.executable, str(script)], env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        _finish(proc)
    lines = log.read_text().splitlines()
    header_builds = [line for line in lines if "c++-header" in line]
    kernel_compiles = [line.split() for line in lines if "c++-header" not in line]
    headers = list((home / ".cache" / "pypto" / "pch").glob("*/pto/pto.hpp.gch")) if home.is_dir() else []
    if pch != "1":
        assert not header_builds and not headers
        assert not any(w.startswith(f"-I{home}") for words in kernel_compiles for w in words)
        return
    assert len(header_builds) == 1 and len(headers) == 1, lines
    assert oct(headers[0].stat().st_mode & 0o777) == "0o600"
    pch_dir = f"-I{headers[0].parent.parent}"
    for words in kernel_compiles:
        includes = [w for w in words if w.startswith("-I")]
        assert includes[0] == pch_dir and len(includes) == 2, words
