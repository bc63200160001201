"""Draws the pictures of docs/guide.md §14 (Debugging and tuning) on this machine:

  docs/images/tile_curve.png     pypto.tile_curve of a 512^3 float32 matmul over square tiles
  docs/images/profile_trace.png  pypto.plot_trace of a pypto.profiling() region: two calls of a
                                 three-nest kernel, the nests on the caller, the chunks per thread

Run it on an idle machine (the curve is a timing): `python tools/doc_figures.py [--out DIR]`.
--quick uses small sizes (what tests/python/test_profile_nests.py runs)."""
import argparse
import os
import pathlib
import sys
import tempfile

import numpy as np

import pypto


def matmul(x, w):
    return pypto.matmul(x, w)


def mlp(x, w1, w2):
    h = pypto.relu(pypto.matmul(x, w1))
    y = pypto.matmul(h, w2)
    return pypto.softmax(y, -1)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=str(pathlib.Path(__file__).resolve().parents[1] / "docs" / "images"))
    ap.add_argument("--quick", action="store_true", help="small sizes, two repeats (a smoke test)")
    a = ap.parse_args(argv)
    out = pathlib.Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    n = 128 if a.quick else 512
    x, w = (rng.random((n, n), dtype=np.float32) for _ in range(2))
    tiles = [{"m": t, "n": t, "k": t} for t in ((16, 32, 64) if a.quick else (16, 32, 64, 128, 256))]
    curve = pypto.tile_curve(pypto.jit(matmul), (x, w), png=str(out / "tile_curve.png"), tiles=tiles,
                             repeats=2 if a.quick else 7)
    for p in curve:
        print(f"tiles {p.config}: {p.ms:.3f} ms, {p.gflops:.1f} GFLOP/s")
    m, d = (64, 64) if a.quick else (1024, 512)
    xs, w1, w2 = (rng.random(s, dtype=np.float32) for s in ((m, d), (d, 2 * d), (2 * d, d)))
    k = pypto.jit(mlp)
    k(xs, w1, w2)
    k.profile(xs, w1, w2)  # compiles the profiling variant outside the picture
    with pypto.profiling() as region:
        for _ in range(2):
            k(xs, w1, w2)
    with tempfile.TemporaryDirectory() as tmp:
        trace = os.path.join(tmp, "trace.json")
        region.to_chrome_trace(trace)
        pypto.plot_trace(trace, str(out / "profile_trace.png"),
                         title=f"pypto.profiling(): two calls of mlp ({m}x{d}), {pypto._C.num_threads()} threads")
    print(f"wrote {out / 'tile_curve.png'} and {out / 'profile_trace.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
