"""Draws docs/images/sim_conv2d_timeline.png: the timeline of the seed's double-buffered conv2d
(tests/python/seed, pypto.seed_kernels.conv2d_memopt) on the simulated NPU (backend="sim",
docs/npu_sim.md), one track per pipe per core.

The built-in target has 32 cores, more than the conv's 20 output rows, so each core would have
one row and nothing to overlap; the picture uses 2 cores (10 rows each), where each core runs its
share as a double-buffered loop. Top: the whole run, single- and double-buffered on one time
axis. Bottom: a window of the double-buffered run: DMA spans are drawn solid while they occupy
their engine and light until their data arrives (the latency); ping tiles blue, pong tiles orange.

`python tools/sim_timeline.py [--out DIR]` (deterministic: the cycles are the model's)."""
import argparse
import pathlib

import numpy as np

import pypto
from pypto.seed_kernels import conv2d_memopt

PIPES = ("MTE2", "M", "V", "MTE3")  # drawn top to bottom per core


def run(double_buffer, cores):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 8, 20, 18)).astype(np.float32)
    w = rng.standard_normal((16, 8, 3, 3)).astype(np.float32)
    b = rng.standard_normal((16, 1, 1)).astype(np.float32)
    k = pypto.jit(conv2d_memopt, backend="sim", double_buffer=double_buffer, sim_target={"machine.cores": cores})
    k(x, w, b)
    return k.last_sim_report()


def tracks(rep, cores):
    """{(core, pipe): [(begin, end, arrive, what)]}"""
    out = {(c, p): [] for c in range(cores) for p in PIPES}
    for (core, pipe, b, e, what), arrive in zip(rep.spans, rep.arrivals):
        if (core, pipe) in out:
            out[(core, pipe)].append((b, e, arrive, what))
    return out


def draw_run(ax, rep, cores, y0, label):
    ys = []
    for (core, pipe), spans in tracks(rep, cores).items():
        y = y0 + core * len(PIPES) + PIPES.index(pipe)
        ys.append((y, f"{label} core {core} {pipe}"))
        ax.broken_barh([(b, max(e - b, 1)) for b, e, _, _ in spans], (y - 0.4, 0.8), color="tab:gray")
    return ys


def draw_window(ax, rep, cores, lo, hi):
    ys = []
    for (core, pipe), spans in tracks(rep, cores).items():
        y = core * len(PIPES) + PIPES.index(pipe)
        ys.append((y, f"core {core} {pipe}"))
        for b, e, arrive, what in spans:
            if arrive < lo or b > hi:
                continue
            color = "tab:orange" if "_pong" in what else "tab:blue"
            if arrive > e:  # in flight: the DMA engine is free again, the data not there yet
                ax.broken_barh([(e, arrive - e)], (y - 0.25, 0.5), color=color, alpha=0.25)
            ax.broken_barh([(b, max(e - b, 1))], (y - 0.4, 0.8), color=color)
    ax.set_xlim(lo, hi)
    return ys


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=str(pathlib.Path(__file__).resolve().parents[1] / "docs" / "images"))
    ap.add_argument("--cores", type=int, default=2)
    a = ap.parse_args(argv)
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    single, double = run(False, a.cores), run(True, a.cores)
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(12, 9), gridspec_kw={"height_ratios": [1.2, 1]})
    ys = draw_run(top, single, a.cores, len(PIPES) * a.cores + 1, "single")
    ys += draw_run(top, double, a.cores, 0, "double")
    top.set_yticks([y for y, _ in ys], [t for _, t in ys], fontsize=7)
    top.invert_yaxis()
    top.set_xlabel("cycle")
    top.set_title(f"seed conv2d 3x8x20x18, 16 filters 3x3, on {a.cores} simulated cores: "
                  f"single-buffered {single.cycles:,} cycles, double-buffered {double.cycles:,} "
                  f"({single.cycles / double.cycles:.2f}x)", fontsize=9)
    # A window of three trips of one filter tap's loop, in the middle of the double-buffered run.
    loads = sorted(b for (core, pipe, b, _, what) in double.spans if core == 0 and pipe == "MTE2" and "_pong" in what)
    start = loads[len(loads) // 2] - 300
    ys = draw_window(bottom, double, a.cores, start, start + 2500)
    bottom.set_yticks([y for y, _ in ys], [t for _, t in ys], fontsize=7)
    bottom.invert_yaxis()
    bottom.set_xlabel("cycle")
    bottom.set_title("double-buffered, zoomed: ping tiles blue, pong tiles orange; light: a DMA's "
                     "data in flight (latency) after its engine is free", fontsize=9)
    fig.tight_layout()
    out = pathlib.Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "sim_conv2d_timeline.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    print(path)
    return path


if __name__ == "__main__":
    main()
