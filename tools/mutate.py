#!/usr/bin/env python3
"""Mutation testing: does the test suite notice small plausible bugs?

Each mutant in tests/mutants.toml names a file, an exact snippet of it and its replacement. The
tool keeps a private copy of the repository (default build/mutate/tree: its own build dir and its
own ccache, never the developer's tree), syncs it with the working tree, builds it and checks that
the selected tests pass unmutated. Then for each mutant it applies the replacement, rebuilds, runs
only the tests that cover the mutated file (the [[cover]] table, or the mutant's own gtest/pytest
keys) under a per-mutant timeout, and restores the file.

Outcomes: killed (a test failed), survived (every selected test passed), stale (the snippet no
longer occurs exactly once: the code moved on), build-error (the mutant does not compile: not a
plausible slip), timeout (build or tests ran past --timeout) and not run (--budget-minutes
spent). Only killed and survived count: the score is killed / (killed + survived).

    tools/mutate.py [--only ID,...] [--timeout S] [--budget-minutes M] [--list] [--dir DIR] [--report FILE]
"""
import argparse
import fnmatch
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import tomllib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MUTANTS = os.path.join(ROOT, "tests", "mutants.toml")


def load(path):
    with open(path, "rb") as f:
        data = tomllib.load(f)
    mutants, covers = data.get("mutant", []), data.get("cover", [])
    ids = [m["id"] for m in mutants]
    dup = {i for i in ids if ids.count(i) > 1}
    if dup:
        sys.exit(f"mutate: duplicate mutant ids {sorted(dup)}")
    for m in mutants:
        for key in ("id", "file", "find", "replace", "why"):
            if key not in m:
                sys.exit(f"mutate: mutant {m.get('id', '?')} has no '{key}'")
    return mutants, covers


def needs_build(m, covers):
    """False for files read only at run time (the kernel headers, which the CPU backend compiles
    into each kernel): the copy is not rebuilt, and only Python tests can see such a mutant."""
    if "build" in m:
        return bool(m["build"])
    for c in covers:
        if any(fnmatch.fnmatch(m["file"], pat) for pat in c["files"]) and c.get("build") is False:
            return False
    return True


def selection(m, covers):
    """The tests covering the mutant's file: a gtest filter and pytest arguments."""
    gtest, pytest = [], []
    for c in covers:
        if any(fnmatch.fnmatch(m["file"], pat) for pat in c["files"]):
            if c.get("gtest"):
                gtest.append(c["gtest"])
            pytest += c.get("pytest", [])
    if "gtest" in m:
        gtest = [m["gtest"]] if m["gtest"] else []
    if "pytest" in m:
        pytest = list(m["pytest"])
    return ":".join(gtest), pytest


def tracked_files():
    out = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, check=True,
                         capture_output=True).stdout
    return [p for p in out.decode().split("\0") if p and os.path.isfile(os.path.join(ROOT, p))]


def sync_copy(tree):
    """Makes `tree` hold the working tree's files (tracked and untracked, not ignored). Unchanged
    files keep their mtime, so the copy's incremental build only redoes what changed."""
    os.makedirs(tree, exist_ok=True)
    files = tracked_files()
    keep = set(files)
    for p in files:
        src, dst = os.path.join(ROOT, p), os.path.join(tree, p)
        with open(src, "rb") as f:
            data = f.read()
        if os.path.exists(dst):
            with open(dst, "rb") as f:
                if f.read() == data:
                    continue
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        with open(dst, "wb") as f:
            f.write(data)
        shutil.copymode(src, dst)
    for d in ("src", "include", "python", "tests", "tools"):
        for dirpath, _, names in os.walk(os.path.join(tree, d)):
            for n in names:
                rel = os.path.relpath(os.path.join(dirpath, n), tree)
                if rel not in keep and not n.endswith((".so", ".pyc")) and "__pycache__" not in rel:
                    os.remove(os.path.join(tree, rel))


class Copy:
    def __init__(self, tree, venv, timeout):
        self.tree, self.venv, self.timeout = tree, venv, timeout
        self.build = os.path.join(tree, "build")
        self.env = dict(os.environ)
        self.env.update({
            "CCACHE_DIR": os.path.join(os.path.dirname(tree), "ccache"),
            "PYTHONPATH": os.path.join(tree, "python"),
            "PYPTO_CACHE_DIR": os.path.join(self.build, "test-cache"),
            "PYPTO_INCLUDE_DIR": os.path.join(tree, "include"),
            "PYTHONDONTWRITEBYTECODE": "1",
        })
        self.env.pop("PYPTO_INTERPRET", None)

    def sh(self, cmd, timeout=None):
        """Runs cmd in the copy; returns (ok, timed_out, tail of the output)."""
        # Its own process group, so a timeout ends the compilers and forked test children too.
        p = subprocess.Popen(cmd, cwd=self.tree, env=self.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             text=True, start_new_session=True)
        try:
            out, _ = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            out, _ = p.communicate()
            return False, True, (out or "")[-2000:]
        except BaseException:
            os.killpg(p.pid, signal.SIGKILL)
            raise
        return p.returncode == 0, False, (out or "")[-2000:]

    def configure(self):
        if os.path.exists(os.path.join(self.build, "build.ninja")):
            return
        ok, _, out = self.sh([
            os.path.join(self.venv, "bin", "cmake"), "-S", ".", "-B", "build", "-G", "Ninja",
            "-DCMAKE_MAKE_PROGRAM=" + os.path.join(self.venv, "bin", "ninja"),
            "-DCMAKE_BUILD_TYPE=Release", "-DCMAKE_CXX_COMPILER_LAUNCHER=ccache",
            "-DPython_EXECUTABLE=" + os.path.join(self.venv, "bin", "python")])
        if not ok:
            sys.exit("mutate: cmake configure of the copy failed:\n" + out)

    def compile(self, timeout):
        return self.sh([os.path.join(self.venv, "bin", "cmake"), "--build", "build"], timeout)

    def run_tests(self, gtest, pytest, deadline):
        """Returns (passed, why) for the selected tests, stopping at the first failure."""
        if gtest:
            left = max(1.0, deadline - time.monotonic())
            ok, to, out = self.sh([os.path.join(self.build, "pypto_cpp_tests"), "--gtest_brief=1",
                                   "--gtest_filter=" + gtest], left)
            if to:
                return False, "timeout (C++ tests)"
            if not ok:
                failed = [ln.strip() for ln in out.splitlines() if "[  FAILED  ]" in ln]
                tail = out.strip().splitlines()
                return False, "C++: " + (failed[0] if failed else (tail[-1] if tail else "exit status non-zero"))
        if pytest:
            left = max(1.0, deadline - time.monotonic())
            ok, to, out = self.sh([os.path.join(self.venv, "bin", "python"), "-m", "pytest", "-q", "-x",
                                   "-p", "no:cacheprovider", *pytest], left)
            if to:
                return False, "timeout (pytest)"
            if not ok:
                lines = [ln for ln in out.splitlines() if ln.startswith(("FAILED", "ERROR"))]
                return False, "pytest: " + (lines[0] if lines else out.strip().splitlines()[-1])
        return True, ""


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", help="comma-separated mutant ids")
    ap.add_argument("--timeout", type=float, default=300, help="seconds per mutant (build + tests)")
    ap.add_argument("--list", action="store_true", help="list the mutants and their tests, run nothing")
    ap.add_argument("--dir", default=os.path.join(ROOT, "build", "mutate"), help="private copy + ccache")
    ap.add_argument("--venv", default=os.environ.get("VENV", os.path.join(ROOT, ".venv")))
    ap.add_argument("--report", help="also write the results as JSON here")
    ap.add_argument("--budget-minutes", type=float, default=0,
                    help="start no new mutant after this long (0: no limit); the rest are 'not run'")
    args = ap.parse_args()

    mutants, covers = load(MUTANTS)
    if args.only:
        want = set(args.only.split(","))
        unknown = want - {m["id"] for m in mutants}
        if unknown:
            sys.exit(f"mutate: unknown mutant ids {sorted(unknown)}")
        mutants = [m for m in mutants if m["id"] in want]
    if args.list:
        for m in mutants:
            g, p = selection(m, covers)
            print(f"{m['id']:40} {m['file']}\n    {m['why']}\n    gtest: {g or '-'}  pytest: {' '.join(p) or '-'}")
        return 0

    venv = os.path.abspath(args.venv)
    tree = os.path.join(os.path.abspath(args.dir), "tree")
    print(f"mutate: {len(mutants)} mutants; private copy {tree}", flush=True)
    sync_copy(tree)
    copy = Copy(tree, venv, args.timeout)
    copy.configure()
    ok, _, out = copy.compile(None)
    if not ok:
        sys.exit("mutate: the unmutated copy does not build:\n" + out)

    # Every selection must pass unmutated, or a "kill" would mean nothing.
    selections = {}
    for m in mutants:
        g, p = selection(m, covers)
        if not g and not p:
            sys.exit(f"mutate: no tests cover {m['file']} (mutant {m['id']}): add a [[cover]] entry")
        selections.setdefault((g, tuple(p)), []).append(m["id"])
    for (g, p), ids in selections.items():
        t0 = time.monotonic()
        ok, why = copy.run_tests(g, list(p), time.monotonic() + 4 * args.timeout)
        print(f"baseline {'ok  ' if ok else 'FAIL'} {time.monotonic() - t0:6.1f}s  gtest={g or '-'} "
              f"pytest={' '.join(p) or '-'}", flush=True)
        if not ok:
            sys.exit(f"mutate: the tests of {ids} fail on the unmutated tree: {why}")

    # Mutants that rebuild one source file are cheap; kernel-header mutants recompile every kernel
    # their tests run: run the cheap ones first, so a time budget leaves out the costly ones.
    mutants.sort(key=lambda m: m["file"].startswith("include/"))
    started = time.monotonic()
    results = []
    for k, m in enumerate(mutants, 1):
        if args.budget_minutes and time.monotonic() - started > 60 * args.budget_minutes:
            results.append({"id": m["id"], "file": m["file"], "status": "not run", "why": "time budget spent",
                            "seconds": 0})
            continue
        path = os.path.join(tree, m["file"])
        t0 = time.monotonic()
        with open(path, encoding="utf-8") as f:
            original = f.read()
        stat = os.stat(path)
        build = needs_build(m, covers)
        n = original.count(m["find"])
        if n != 1:
            status, why = "stale", f"snippet found {n} times in {m['file']}"
        else:
            with open(path, "w", encoding="utf-8") as f:
                f.write(original.replace(m["find"], m["replace"]))
            try:
                deadline = t0 + args.timeout
                ok, to, out = copy.compile(max(1.0, deadline - time.monotonic())) if build else (True, False, "")
                if to:
                    status, why = "timeout", "the build ran past the per-mutant timeout"
                elif not ok:
                    err = [ln for ln in out.splitlines() if "error" in ln]
                    status, why = "build-error", (err[0] if err else out.strip().splitlines()[-1])[:200]
                else:
                    g, p = selection(m, covers)
                    passed, why = copy.run_tests(g, p, deadline)
                    # A timeout is its own outcome: on a loaded machine it says nothing about the
                    # tests (a mutant that hangs a kernel fails its test through crash_isolation).
                    status = "survived" if passed else ("timeout" if why.startswith("timeout") else "killed")
            finally:
                with open(path, "w", encoding="utf-8") as f:
                    f.write(original)
                if not build:  # nothing was built from the mutant: keep the build tree up to date
                    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
        dt = time.monotonic() - t0
        results.append({"id": m["id"], "file": m["file"], "status": status, "why": why, "seconds": round(dt, 1)})
        print(f"[{k}/{len(mutants)}] {status:11} {dt:6.1f}s {m['id']}: {why[:160]}", flush=True)
    copy.compile(None)  # leave the copy built from the unmutated sources

    killed = [r for r in results if r["status"] == "killed"]
    survived = [r for r in results if r["status"] == "survived"]
    stale = [r for r in results if r["status"] == "stale"]
    broken = [r for r in results if r["status"] == "build-error"]
    slow = [r for r in results if r["status"] in ("timeout", "not run")]
    counted = len(killed) + len(survived)
    score = 100.0 * len(killed) / counted if counted else 0.0
    print(f"\nmutate: {len(killed)} killed, {len(survived)} survived, {len(stale)} stale, "
          f"{len(broken)} build errors, {len(slow)} timed out or not run; score {score:.1f}% of {counted}")
    for r in survived:
        m = next(x for x in mutants if x["id"] == r["id"])
        print(f"  SURVIVED {r['id']} ({r['file']}): {m['why']}")
    for r in stale + broken + slow:
        print(f"  {r['status'].upper()} {r['id']}: {r['why']}")
    if args.report:
        with open(args.report, "w") as f:
            json.dump({"score": score, "results": results}, f, indent=1)
    return 0 if counted and score >= 95.0 else 1


if __name__ == "__main__":
    sys.exit(main())
