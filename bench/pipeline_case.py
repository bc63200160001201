"""Pipeline parallelism (pypto.pipeline, the seed's §3.2): a balanced 2-stage model, each stage a
PyPTO kernel on its own core with one thread, streamed in micro-batches through two worker
processes, against the same stages run one after another in one process on one core."""
import atexit

import numpy as np

from bench.cases import rand
from bench.common import Bar, Case, Impl

STAGES, LAYERS = 2, 3  # each stage: LAYERS of relu(x @ W)


def _stage_fn(ws):
    import pypto

    def stage(x):
        for w in ws:
            x = pypto.relu(pypto.matmul(x, w))
        return x
    return pypto.jit(stage)


def pipeline_case(ctx):
    rows, d, micro = ctx.pick((64, 64, 4), (512, 256, 8), (1024, 512, 16))
    rng = ctx.rng()
    x = rand(rng, rows, d)
    weights = [[rand(rng, d, d, scale=d ** -0.5 * 1.4) for _ in range(LAYERS)] for _ in range(STAGES)]

    def reference():
        r = x.astype(np.float64)
        for ws in weights:
            for w in ws:
                r = np.maximum(r @ w, 0.0)
        return r

    def sequential():
        import pypto
        p = pypto.pipeline.Pipeline([_stage_fn(ws) for ws in weights], micro_batches=micro)
        p(x)  # compile

        def run():  # one core: one PyPTO thread, restored afterwards
            n = pypto.target()["num_threads"]
            pypto.set_num_threads(1)
            try:
                return p(x)
            finally:
                pypto.set_num_threads(n)
        return run

    def pipelined():
        import pypto
        p = pypto.pipeline.Pipeline([_stage_fn(ws) for ws in weights], micro_batches=micro, threads=1)
        p(x)  # compile in the parent: the forked workers inherit the loaded kernels
        p.start(STAGES)
        atexit.register(p.close)
        return lambda: p.run(x)

    flops = 2.0 * rows * d * d * LAYERS * STAGES
    bubble = (STAGES - 1) / (micro + STAGES - 1)
    return Case(
        "pipeline", f"{STAGES} stages x {LAYERS} layers, {rows}x{d}, {micro} micro-batches",
        [Impl("pypto.pipeline", pipelined, compiled=True), Impl("pypto[1 core]", sequential, threads=1, compiled=True)],
        reference=reference, flops=flops, bytes=4.0 * (2 * rows * d + STAGES * LAYERS * d * d),
        bars=[Bar("vs", 1.84, impl="pypto.pipeline", other="pypto[1 core]",
                  label="2-stage pipeline >= 1.84x one process on one core (92% of linear)")],
        note=f"GPipe forward schedule; the bubble of {micro} micro-batches over {STAGES} stages is "
             f"{bubble:.0%} in theory (efficiency = time[1 core] / (2 x time[pipeline]))")


def pipeline_cases(ctx):
    return [pipeline_case(ctx)]
