#!/usr/bin/env python3
"""A/B of bench cases between two commits, for a no-regression check of a change:

    python bench/ab.py main~3 main --cases layer_norm,vector_add --pairs 5

Each commit is checked out into its own worktree (under --dir, kept for reuse) and built there
(`make build`, with the shared VENV, and ccache where the machine has it); then bench/run.py runs
the cases on A and on B in turn, A B A B ..., --pairs times (pairing keeps a ratio meaningful while
the machine's speed drifts). Prints, per case, PyPTO's median time over the runs of each side and
the ratio B/A of the per-pair ratios' median: above 1 means B is slower. Only the pypto impls are
timed (--no-compile, --no-jax); peers do not enter the ratio. The worktrees stay registered with
git for reuse: remove them with `git worktree remove DIR` when done."""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def sh(cmd, **kw):
    print("+", " ".join(cmd), file=sys.stderr, flush=True)
    subprocess.run(cmd, check=True, **kw)


def tree_for(commit, base_dir, venv):
    """A worktree at `commit`, built; reused when it is already there at that commit."""
    sha = subprocess.run(["git", "-C", ROOT, "rev-parse", commit], check=True, capture_output=True,
                         text=True).stdout.strip()
    path = os.path.join(base_dir, sha[:12])
    if not os.path.isdir(path):
        sh(["git", "-C", ROOT, "worktree", "add", "--detach", path, sha])
    launcher = ["CMAKE_ARGS=-DCMAKE_CXX_COMPILER_LAUNCHER=ccache"] if shutil.which("ccache") else []
    sh(["make", "build", f"VENV={venv}", *launcher], cwd=path)
    return path


def run_once(tree, cases, extra):
    """{(case, shape, impl): median_ms} of one bench/run.py run in `tree`, pypto impls only."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "r.json")
        env = dict(os.environ, PYTHONPATH=os.path.join(tree, "python"))
        sh([sys.executable, "bench/run.py", "--cases", cases, "--json", out, "--no-png", "--no-compile",
            "--no-jax", "--no-progress", *extra], cwd=tree, env=env, stdout=subprocess.DEVNULL)
        with open(out) as f:
            records = json.load(f)
    return {(r["case"], str(r.get("shape")), r["impl"]): r["median_ms"] for r in records
            if r.get("impl", "").startswith("pypto") and r.get("status") == "ok" and r.get("median_ms")}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("a", help="baseline commit")
    p.add_argument("b", help="commit under test")
    p.add_argument("--cases", required=True, help="bench/run.py --cases (comma-separated substrings)")
    p.add_argument("--pairs", type=int, default=5, help="A B runs of the whole case list (default 5)")
    p.add_argument("--dir", default=os.path.join(tempfile.gettempdir(), "pypto-ab"), help="worktrees here")
    p.add_argument("--venv", default=os.environ.get("VENV", "/work/main/.venv"), help="the shared venv")
    p.add_argument("--quick", action="store_true", help="bench/run.py --quick (fewer samples per run)")
    args = p.parse_args(argv)
    os.makedirs(args.dir, exist_ok=True)
    trees = [tree_for(c, args.dir, args.venv) for c in (args.a, args.b)]
    extra = ["--quick"] if args.quick else []
    runs = {0: [], 1: []}
    for _ in range(args.pairs):
        for side in (0, 1):
            runs[side].append(run_once(trees[side], args.cases, extra))
    keys = sorted(set.intersection(*(set(r) for r in runs[0] + runs[1])))
    print(f"{'case':<28} {'shape':<24} {'impl':<14} {'A ms':>9} {'B ms':>9} {'B/A':>6}")
    for k in keys:
        a = [r[k] for r in runs[0]]
        b = [r[k] for r in runs[1]]
        ratio = statistics.median(y / x for x, y in zip(a, b))
        print(f"{k[0]:<28} {k[1]:<24} {k[2]:<14} {statistics.median(a):9.3f} {statistics.median(b):9.3f} "
              f"{ratio:6.3f}")


if __name__ == "__main__":
    main()
