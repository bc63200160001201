"""Crash isolation for the Python suite (a pytest plugin, loaded by conftest.py).

A test that runs a compiled kernel (the `backend` fixture's CPU parameters, or any test marked
`@pytest.mark.isolated`) runs in a forked child: if the kernel kills the process (SIGSEGV,
SIGABRT, a hang), that one test fails with the signal named, and every later test still runs.
The child sends its test reports back through a pipe; the parent logs them as its own.

Why our own ~80 lines rather than pytest-forked: no new package in the shared venv, a per-test
timeout (a deadlocked kernel fails its test instead of hanging the run), and the automatic
selection of CPU tests. PYPTO_TEST_FORK=0 runs everything in-process (for a debugger).
"""
import os
import pickle
import select
import signal
import sys
import time
import traceback

import pytest
from _pytest.reports import TestReport
from _pytest.runner import runtestprotocol

TIMEOUT_S = float(os.environ.get("PYPTO_TEST_TIMEOUT", "600"))


def pytest_configure(config):
    config.addinivalue_line("markers", "isolated: run in a forked child, so a crash fails only this test")


def wants_fork(item):
    if os.environ.get("PYPTO_TEST_FORK", "1") == "0" or not hasattr(os, "fork"):
        return False
    if item.get_closest_marker("isolated"):
        return True
    params = getattr(getattr(item, "callspec", None), "params", {})
    return str(params.get("backend", "")).startswith("cpu")


def _crash_report(item, why, duration):
    return TestReport(item.nodeid, item.location, {k: 1 for k in item.keywords}, "failed",
                      f"{item.nodeid}: {why}", "call", [], duration)


def _run_in_child(item, nextitem):
    rfd, wfd = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: run the test, send the reports, leave without running atexit handlers
        os.close(rfd)
        code = 0
        # GNU OpenMP (torch's intra-op runtime) is not fork-safe: a child that enters a parallel
        # region after the parent has run one waits forever on the parent's thread team. Torch on
        # one thread runs its loops inline; PyPTO's own pool re-forms after fork (runtime).
        torch = sys.modules.get("torch")
        if torch is not None:
            torch.set_num_threads(1)
        try:
            reports = runtestprotocol(item, log=False, nextitem=nextitem)
            data = [item.config.hook.pytest_report_to_serializable(config=item.config, report=r) for r in reports]
            payload = pickle.dumps(data)
            with os.fdopen(wfd, "wb") as f:
                f.write(payload)
        except BaseException:  # noqa: BLE001 - anything escaping here must not reach the parent's loop
            try:
                os.write(2, ("crash_isolation: the forked test failed to report:\n" + traceback.format_exc()).encode())
            except Exception:  # noqa: BLE001
                pass
            code = 3
        os._exit(code)
    os.close(wfd)
    t0 = time.monotonic()
    chunks, timed_out = [], False
    while True:
        left = TIMEOUT_S - (time.monotonic() - t0)
        if left <= 0:
            timed_out = True
            os.kill(pid, signal.SIGKILL)
            break
        ready, _, _ = select.select([rfd], [], [], min(left, 1.0))
        if ready:
            b = os.read(rfd, 1 << 20)
            if not b:
                break
            chunks.append(b)
    os.close(rfd)
    _, status = os.waitpid(pid, 0)
    duration = time.monotonic() - t0
    if timed_out:
        return [_crash_report(item, f"timed out after {TIMEOUT_S:.0f} s (PYPTO_TEST_TIMEOUT); killed", duration)]
    if os.WIFSIGNALED(status):
        sig = signal.Signals(os.WTERMSIG(status)).name
        return [_crash_report(item, f"the test process crashed with {sig} (run with PYPTO_TEST_FORK=0 "
                                    "to debug it in-process)", duration)]
    try:
        data = pickle.loads(b"".join(chunks))
    except Exception:  # noqa: BLE001
        return [_crash_report(item, f"the test process exited with status {os.WEXITSTATUS(status)} "
                                    "without reporting", duration)]
    return [item.config.hook.pytest_report_from_serializable(config=item.config, data=d) for d in data]


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_protocol(item, nextitem):
    if not wants_fork(item):
        return None
    item.ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
    for rep in _run_in_child(item, nextitem):
        item.ihook.pytest_runtest_logreport(report=rep)
    # The child set up and tore down this item's fixtures in its own memory; the parent still holds
    # what earlier in-process items set up (a module's fixtures, say): tear down what the next item
    # does not need, as the in-process protocol would.
    item.session._setupstate.teardown_exact(nextitem)
    item.ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
    return True
