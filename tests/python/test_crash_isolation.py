"""crash_isolation.py: a test that kills its process or hangs fails alone; the run goes on."""
import os

INNER = '''
import os
import signal
import time

import pytest


@pytest.mark.isolated
def test_segfaults():
    os.kill(os.getpid(), signal.SIGSEGV)


@pytest.mark.isolated
def test_hangs():
    time.sleep(60)


@pytest.mark.isolated
def test_fails_normally():
    assert 1 == 2, "an ordinary failure"


@pytest.mark.isolated
def test_passes_in_child():
    assert os.getpid() != int(os.environ["PARENT_PID"])


def test_passes_in_parent():
    assert os.getpid() == int(os.environ["PARENT_PID"])
'''


def test_crash_and_hang_fail_only_their_own_test(pytester, monkeypatch):
    here = os.path.dirname(__file__)
    monkeypatch.setenv("PYTHONPATH", here + os.pathsep + os.environ.get("PYTHONPATH", ""))
    monkeypatch.setenv("PYPTO_TEST_TIMEOUT", "3")
    pytester.makepyfile(test_inner=INNER)
    pytester.makeconftest("import os\nos.environ['PARENT_PID'] = str(os.getpid())\n")
    r = pytester.runpytest_subprocess("-p", "crash_isolation", "-p", "no:cacheprovider", "-rf")
    r.assert_outcomes(passed=2, failed=3)
    r.stdout.fnmatch_lines(["*test_segfaults*crashed with SIGSEGV*", "*test_hangs*timed out after 3 s*",
                            "*an ordinary failure*"])
