"""The runtime survives its own failures and trusts only the user's own files.

Risky cases run in a fresh subprocess each, so that a crash or a hang fails one test, not the
run: an exception (std::bad_alloc) inside a parallel loop, a daemon thread calling kernels at
interpreter exit, fork() while another thread compiles, SIGINT during a long kernel, a compiler
that never exits, bad thread counts, cache directories other users could tamper with, concurrent
cold calls of one kernel (one trace, one compile) and the headers found beside the package.
"""
import os
import shutil
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import pypto
from pypto import _C

PKG_PARENT = str(Path(_C.__file__).resolve().parent.parent)
REPO = Path(__file__).resolve().parents[2]


def child_env(tmp_path, **extra):
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYPTO_INTERPRET", "PYPTO_CXX", "PYPTO_CXXFLAGS", "PYPTO_NUM_THREADS",
                        "PYPTO_COMPILE_TIMEOUT")}
    env["PYPTO_CACHE_DIR"] = str(tmp_path / "cache")
    rest = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join([PKG_PARENT] + rest)
    env.update({k: str(v) for k, v in extra.items()})
    return env


def run_child(tmp_path, code, timeout=180, name="child.py", **extra):
    """Runs `code` from a file (@pypto.jit reads kernel source) in a fresh interpreter."""
    script = tmp_path / name
    script.write_text(textwrap.dedent(code))
    return subprocess.run([sys.executable, str(script)], env=child_env(tmp_path, **extra),
                          capture_output=True, text=True, timeout=timeout)


def logging_compiler(tmp_path, delay=0.0):
    """A PYPTO_CXX that logs each compile (not `--version`) to compiles.log, optionally slowly."""
    log = tmp_path / "compiles.log"
    cxx = tmp_path / "logging-cxx"
    cxx.write_text("#!/bin/sh\n"
                   'case "$*" in *--version*) exec c++ "$@";; esac\n'
                   f'echo "$*" >> "{log}"\n'
                   f"sleep {delay}\n"
                   'exec c++ "$@"\n')
    cxx.chmod(0o755)
    return cxx, log


def compiles(log):
    """The kernels' compiles (not a build of the precompiled header, `-x c++-header`)."""
    lines = log.read_text().splitlines() if log.exists() else []
    return [line for line in lines if "c++-header" not in line]


# ---- failures inside the runtime ------------------------------------------------------------------

def test_bad_alloc_in_parallel_workers_is_a_memory_error(tmp_path):
    # One malloc arena (MALLOC_ARENA_MAX=1) so that every thread's big tile fails under the limit.
    r = run_child(tmp_path, """
        import resource
        import numpy as np
        import pypto

        @pypto.jit(tiles={"rows": 32, "cols": 65536})
        def big(x, out):
            for i in pypto.prange(0, x.shape[0], 32):
                out[i:i+32, :] = pypto.exp(x[i:i+32, :]) * 2.0

        @pypto.jit
        def warm_up(x, out):
            for i in pypto.prange(0, x.shape[0], 8):
                out[i:i+8, :] = x[i:i+8, :] * 2.0

        pypto.set_num_threads(4)
        x = np.random.default_rng(0).standard_normal((128, 65536)).astype(np.float32)
        out = np.full_like(x, np.nan)
        big.lower(x, out).compile()
        small = np.ones((32, 8), np.float32)
        warm_up(small, small.copy())  # the pool's threads exist before the limit
        # A full run first: the cost model then knows the loop is big, so under the limit all four
        # iterations start at once on the pool's threads and the workers' allocations fail too
        # (otherwise the caller's first, measured iteration fails alone, before any worker runs).
        big(x, out)
        vm = int([l for l in open("/proc/self/status") if l.startswith("VmSize")][0].split()[1]) * 1024
        resource.setrlimit(resource.RLIMIT_AS, (vm + (4 << 20), resource.RLIM_INFINITY))
        try:
            big(x, out)
            print("no error")
        except MemoryError:
            print("MemoryError")
        resource.setrlimit(resource.RLIMIT_AS, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
        big(x, out)
        err = np.linalg.norm(out - np.exp(x.astype(np.float64)) * 2) / np.linalg.norm(np.exp(x) * 2)
        print("rerun ok", err < 1e-5)
    """, MALLOC_ARENA_MAX=1)
    assert r.returncode == 0, r.stderr
    assert "MemoryError" in r.stdout and "rerun ok True" in r.stdout, r.stdout + r.stderr


def test_daemon_threads_calling_kernels_at_exit(tmp_path):
    r = run_child(tmp_path, """
        import threading, time
        import numpy as np
        import pypto

        @pypto.jit
        def f(x):
            return pypto.exp(x) + 1.0

        x = np.random.default_rng(0).standard_normal((256, 256)).astype(np.float32)
        f(x)

        def loop():
            while True:
                f(x)

        for _ in range(3):
            threading.Thread(target=loop, daemon=True).start()
        time.sleep(0.3)
        print("exiting")
    """)
    assert r.returncode == 0, r.stderr
    assert "terminate" not in r.stderr and "leaked" not in r.stderr, r.stderr


def test_fork_while_another_thread_compiles(tmp_path):
    cxx, log = logging_compiler(tmp_path, delay=2)
    r = run_child(tmp_path, """
        import os, threading, time
        import numpy as np
        import pypto

        @pypto.jit
        def f(x):
            return x * 3.0 + 1.0

        @pypto.jit
        def g(x, out):
            for i in pypto.prange(0, x.shape[0], 8):
                out[i:i+8, :] = pypto.exp(x[i:i+8, :])

        x = np.random.default_rng(0).standard_normal((64, 32)).astype(np.float32)
        t = threading.Thread(target=f, args=(x,))
        t.start()
        time.sleep(1.0)              # the thread is inside the (slow) compiler now
        pid = os.fork()
        if pid == 0:                 # the child: the same kernel, and a parallel one
            ok = np.allclose(f(x), x * 3 + 1)
            out = np.full_like(x, np.nan)
            g(x, out)
            ok = ok and np.allclose(out, np.exp(x), rtol=1e-5)
            os._exit(0 if ok else 1)
        deadline = time.time() + 90
        while time.time() < deadline:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            time.sleep(0.1)
        else:
            os.kill(pid, 9)
            print("child hung")
            raise SystemExit(1)
        t.join()
        print("child status", os.waitstatus_to_exitcode(status))
    """, PYPTO_CXX=cxx)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "child status 0" in r.stdout, r.stdout + r.stderr


def test_fork_after_parallel_loops_on_torch_threads(tmp_path):
    # Once torch is imported parallel loops run on its OpenMP threads; libgomp hangs in a forked
    # child whose parent used them, so the child must fall back to PyPTO's own pool.
    r = run_child(tmp_path, """
        import os, time
        import numpy as np
        import torch
        import pypto

        @pypto.jit
        def g(x, out):
            for i in pypto.prange(0, x.shape[0], 8):
                out[i:i+8, :] = pypto.exp(x[i:i+8, :])

        x = np.random.default_rng(0).standard_normal((256, 64)).astype(np.float32)
        out = np.full_like(x, np.nan)
        g(x, out)
        pid = os.fork()
        if pid == 0:
            out2 = np.full_like(x, np.nan)
            g(x, out2)
            os._exit(0 if np.allclose(out2, np.exp(x), rtol=1e-5) else 1)
        deadline = time.time() + 60
        while time.time() < deadline:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            time.sleep(0.1)
        else:
            os.kill(pid, 9)
            print("child hung")
            raise SystemExit(1)
        print("child status", os.waitstatus_to_exitcode(status))
    """)
    assert r.returncode == 0 and "child status 0" in r.stdout, r.stdout + r.stderr


@pytest.mark.parametrize("backend", ["cpu", "interp"])
def test_sigint_interrupts_a_long_kernel(tmp_path, backend):
    # No timing decides the outcome: the long run has 2**40 steps, so it ends only if SIGINT stops
    # it (a watchdog thread outside the GIL exits the child after 60 s otherwise). Its short runs
    # come first: the fast path keeps the GIL for a kernel measured short, which must not extend
    # to a call whose trip count differs (the timer thread could not even send the signal). Then
    # SIGINTs from another process (as Ctrl-C comes) at scattered moments around the call's start,
    # some before the kernel's handler is installed: Python's pending signal must stop the call,
    # not wait behind it (a Python thread cannot send one there: the caller holds the GIL). A shell starts
    # background jobs with SIGINT ignored and the child inherits that: it restores Python's
    # handler first, so the test does not depend on how the suite was launched.
    r = run_child(tmp_path, f"""
        import faulthandler, os, signal, subprocess, threading, time
        signal.signal(signal.SIGINT, signal.default_int_handler)
        import numpy as np
        import pypto

        @pypto.jit(backend={backend!r})
        def slow(x, out, reps):
            for r in range(reps):
                for i in pypto.prange(0, x.shape[0], 16):
                    out[i:i+16, :] = pypto.exp(x[i:i+16, :]) * 0.5 + out[i:i+16, :]

        x = np.random.default_rng(0).standard_normal((16, 64)).astype(np.float32)
        out = np.zeros_like(x)
        for _ in range(3):
            slow(x, out, 1)
        faulthandler.dump_traceback_later(60, exit=True)
        kill = lambda: os.kill(os.getpid(), signal.SIGINT)
        threading.Timer(0.5, kill).start()
        t0 = time.perf_counter()
        try:
            slow(x, out, 1 << 40)
            print("not interrupted")
        except KeyboardInterrupt:
            print("interrupted after", time.perf_counter() - t0)
        for k in range(12):
            killers = []
            try:  # (under load the signal may already come while the killer starts)
                killers.append(subprocess.Popen(["sh", "-c", f"sleep 0.00{{k % 4}}; kill -INT {{os.getpid()}}"]))
                slow(x, out, 1 << 40)
                print("not interrupted", k)
            except KeyboardInterrupt:
                pass
            for p in killers:
                p.wait()
        faulthandler.cancel_dump_traceback_later()
        out[:] = 0
        slow(x, out, 1)
        print("still works", np.allclose(out, np.exp(x) * 0.5, rtol=1e-5))
    """)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "interrupted after" in r.stdout and "not interrupted" not in r.stdout, r.stdout
    assert float(r.stdout.split("interrupted after")[1].split()[0]) < 30
    assert "still works True" in r.stdout


def test_thread_count_is_capped():
    before = pypto.num_threads()
    for n in (10**6, 10**12):
        with pytest.raises(pypto.PyptoError, match="limit"):
            pypto.set_num_threads(n)
    assert pypto.num_threads() == before


@pytest.mark.parametrize("value,message", [("1000000", "limit"), ("many", "not a whole number")])
def test_bad_pypto_num_threads_is_an_error(tmp_path, value, message):
    r = run_child(tmp_path, """
        import numpy as np
        import pypto

        @pypto.jit(backend="interp")
        def f(x):
            return x + 1.0

        try:
            pypto.num_threads()
            print("accepted")
        except pypto.PyptoError as e:
            print("PyptoError:", e)
    """, PYPTO_NUM_THREADS=value)
    assert r.returncode == 0, r.stderr
    assert "PyptoError:" in r.stdout and "PYPTO_NUM_THREADS" in r.stdout and message in r.stdout, r.stdout


# ---- the compiler ----------------------------------------------------------------------------------

@pytest.mark.parametrize("hang_on_version", [False, True])
def test_compiler_that_never_exits_times_out(tmp_path, hang_on_version):
    cxx = tmp_path / "stuck-cxx"
    version = "sleep 1000" if hang_on_version else "echo stuck 1.0; exit 0"
    cxx.write_text(f'#!/bin/sh\ncase "$*" in *--version*) {version};; esac\nsleep 1000\n')
    cxx.chmod(0o755)
    r = run_child(tmp_path, """
        import time
        import numpy as np
        import pypto

        @pypto.jit
        def f(x):
            return x + 1.0

        t0 = time.perf_counter()
        try:
            f(np.ones((4, 4), np.float32))
            print("returned")
        except pypto.PyptoError as e:
            print("PyptoError after", time.perf_counter() - t0, ":", e)
    """, timeout=120, PYPTO_CXX=cxx, PYPTO_COMPILE_TIMEOUT=1)
    assert r.returncode == 0, r.stderr
    assert "PyptoError after" in r.stdout, r.stdout
    assert "PYPTO_COMPILE_TIMEOUT" in r.stdout and str(cxx) in r.stdout, r.stdout
    assert float(r.stdout.split("PyptoError after")[1].split()[0]) < 30


@pytest.mark.parametrize("flag", ["-ffast-math", "-Ofast", "-fsanitize=address"])
def test_cxxflags_that_change_semantics_are_refused(monkeypatch, flag):
    sanitized = "libasan" in open("/proc/self/maps").read()
    if flag.startswith("-fsanitize") and sanitized:
        flag = "-fsanitize=thread"  # the sanitizer build runs ASan, never TSan

    @pypto.jit
    def refused_flags_probe(x):
        return pypto.exp(x) * 1.25

    monkeypatch.setenv("PYPTO_CXXFLAGS", f"-O2 {flag}")
    with pytest.raises(pypto.PyptoError, match=f"refusing '{flag}'"):
        refused_flags_probe(np.ones((4, 4), np.float32))


# ---- the cache ---------------------------------------------------------------------------------------

KERNEL = """
    import numpy as np
    import pypto

    @pypto.jit
    def f(x):
        return pypto.exp(x) * 2.0 + 0.25

    x = np.random.default_rng(1).standard_normal((40, 24)).astype(np.float32)
    try:
        y = f(x)
        print("ok", np.allclose(y, np.exp(x) * 2 + 0.25, rtol=1e-5))
    except pypto.PyptoError as e:
        print("PyptoError:", e)
"""


def test_world_writable_cache_dir_is_refused(tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir()
    cache.chmod(0o777)
    r = run_child(tmp_path, KERNEL)
    assert r.returncode == 0, r.stderr
    assert "PyptoError:" in r.stdout and str(cache) in r.stdout and "other users can write" in r.stdout, r.stdout
    assert not list(cache.iterdir())  # nothing was loaded from it, nothing written into it


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a directory to another user needs root")
def test_cache_dir_or_symlink_of_another_user_is_refused(tmp_path):
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o700)
    os.chown(theirs, 65534, 65534)
    r = run_child(tmp_path, KERNEL, PYPTO_CACHE_DIR=theirs)
    assert "PyptoError:" in r.stdout and "another user" in r.stdout, r.stdout + r.stderr
    mine = tmp_path / "mine"
    mine.mkdir(mode=0o700)
    link = tmp_path / "planted"
    link.symlink_to(mine)
    os.lchown(link, 65534, 65534)
    r = run_child(tmp_path, KERNEL, PYPTO_CACHE_DIR=link)
    assert "PyptoError:" in r.stdout and "symlink" in r.stdout, r.stdout + r.stderr


def test_no_home_uses_a_private_temporary_cache(tmp_path):
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    code = KERNEL + """
    import os, stat
    made = [d for d in os.listdir(os.environ["TMPDIR"]) if d.startswith("pypto-cache-")]
    print("temp dirs", made)
    for d in made:
        print("mode", oct(stat.S_IMODE(os.stat(os.path.join(os.environ["TMPDIR"], d)).st_mode)))
    """
    env = child_env(tmp_path, TMPDIR=tmp, HOME="")
    env.pop("PYPTO_CACHE_DIR")
    script = tmp_path / "child.py"
    script.write_text(textwrap.dedent(code))
    r = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stderr
    assert "ok True" in r.stdout, r.stdout
    assert "temp dirs ['pypto-cache-" in r.stdout and "mode 0o700" in r.stdout, r.stdout
    assert not list(tmp.iterdir()), "the temporary cache outlived its process"


def test_cache_files_are_private_under_umask_0(tmp_path):
    r = run_child(tmp_path, "import os\nos.umask(0)\n" + textwrap.dedent(KERNEL))
    assert "ok True" in r.stdout, r.stdout + r.stderr
    cache = tmp_path / "cache"
    assert stat.S_IMODE(cache.stat().st_mode) == 0o700
    files = list(cache.iterdir())
    assert files
    for p in files:
        want = 0o700 if p.suffix == ".so" else 0o600
        assert stat.S_IMODE(p.stat().st_mode) == want, (p.name, oct(p.stat().st_mode))


def test_no_absolute_build_path_compiled_in():
    data = Path(_C.__file__).read_bytes()
    assert str(REPO / "include").encode() not in data


def test_headers_found_beside_an_installed_package(tmp_path):
    site = tmp_path / "site"
    shutil.copytree(Path(_C.__file__).parent, site / "pypto",
                    ignore=shutil.ignore_patterns("__pycache__", "include"))
    shutil.copytree(REPO / "include" / "pto", site / "pypto" / "include" / "pto")
    cxx, log = logging_compiler(tmp_path)
    env = child_env(tmp_path, PYPTO_CXX=cxx)
    env["PYTHONPATH"] = str(site)
    script = tmp_path / "child.py"
    script.write_text(textwrap.dedent(KERNEL))
    r = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=180,
                       cwd=tmp_path)
    assert "ok True" in r.stdout, r.stdout + r.stderr
    (line,) = compiles(log)
    assert f"-I{site / 'pypto' / 'include'}" in line.split(), line


# ---- concurrency --------------------------------------------------------------------------------------

def test_concurrent_cold_calls_trace_and_compile_once(tmp_path):
    cxx, log = logging_compiler(tmp_path, delay=0.5)
    r = run_child(tmp_path, """
        import sys, threading
        import numpy as np
        import pypto

        jit_module = sys.modules["pypto.jit"]
        traces = []
        real_trace = jit_module.trace_kernel
        def counting_trace(*a, **k):
            traces.append(1)
            return real_trace(*a, **k)
        jit_module.trace_kernel = counting_trace

        @pypto.jit
        def f(x):
            return pypto.exp(x) * 3.0 + 1.5

        x = np.random.default_rng(0).standard_normal((64, 48)).astype(np.float32)
        barrier = threading.Barrier(8)
        results = [None] * 8
        def call(i):
            barrier.wait()
            results[i] = f(x)
        threads = [threading.Thread(target=call, args=(i,)) for i in range(8)]
        [t.start() for t in threads]
        [t.join() for t in threads]
        ok = all(np.allclose(y, np.exp(x) * 3 + 1.5, rtol=1e-5) for y in results)
        print("traces", len(traces), "entries", f.cache_size, "ok", ok)
    """, PYPTO_CXX=cxx)
    assert r.returncode == 0, r.stderr
    assert "traces 1 entries 1 ok True" in r.stdout, r.stdout
    assert len(compiles(log)) == 1, compiles(log)


def test_processes_sharing_a_cache_compile_once(tmp_path):
    cxx, log = logging_compiler(tmp_path, delay=1.0)
    script = tmp_path / "child.py"
    script.write_text(textwrap.dedent(KERNEL))
    env = child_env(tmp_path, PYPTO_CXX=cxx)
    procs = [subprocess.Popen([sys.executable, str(script)], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(3)]
    outs = [p.communicate(timeout=180) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0 and "ok True" in out, out + err
    assert len(compiles(log)) == 1, compiles(log)
    assert not [p for p in (tmp_path / "cache").iterdir() if ".tmp." in p.name]


def test_an_output_too_large_for_memory_is_a_pypto_error():
    """A result of 2^40 floats (4 TiB): the allocation fails as a PyptoError naming the kernel,
    for torch and NumPy callers (torch's allocator raised its own RuntimeError)."""
    import torch

    def huge(a):
        return pypto.zeros((1 << 20, 1 << 20)) + a[0, 0]
    for x in (torch.randn(4, 4), np.ones((4, 4), np.float32)):
        with pytest.raises(pypto.PyptoError, match="cannot allocate an output"):
            pypto.jit(huge, backend="interp")(x)
