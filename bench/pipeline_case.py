"""Pipeline parallelism (pypto.pipeline, the seed's §3.2): a balanced 2-stage model, each stage a
PyPTO kernel on its own core with one thread, streamed in micro-batches through two worker
processes, against the same stages run one after another in one process on one core."""
import atexit
import os

import numpy as np

from bench.cases import rand
from bench.common import Bar, Case, Impl

STAGES, LAYERS = 2, 3  # each stage: LAYERS of relu(x @ W)
FULL = (2048, 512, 32)  # rows, width, micro-batches


def _stage_fn(ws):
    import pypto

    def stage(x):
        for w in ws:
            x = pypto.relu(pypto.matmul(x, w))
        return x
    return pypto.jit(stage)


def pipeline_case(ctx):
    # 32 micro-batches of 64 rows: GPipe's bubble (S-1)/(M+S-1) is 3.0% (at 16 it is 5.9%, which
    # leaves 2% against the 92% bar for every transfer, the split and the join)
    rows, d, micro = ctx.pick((64, 64, 4), (512, 256, 8), FULL)
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


# --- `python -m bench.pipeline_case`: the case's components, for reading the bar ---------------------

def _latency(transport, nbytes, reps):
    """One-way time of a message of `nbytes` (half a ping-pong round trip, median), between this
    process on core 0 and a forked one on core 1, both idle otherwise."""
    import os
    import time

    import torch
    from pypto import pipeline_ports as pl
    from pypto.pipeline_shm import Link

    links = [Link(0, 1), Link(1, 0)] if transport == "shm" else None
    port_no = pl.free_port()
    pid = os.fork()
    rank = 0 if pid else 1
    os.sched_setaffinity(0, {rank % len(os.sched_getaffinity(0))})
    if links:
        port = pl.ShmPort((links[1 - rank].as_reader(), links[rank].as_writer()), 30.0)
    else:
        torch.distributed.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port_no}", rank=rank,
                                             world_size=2)
        port = pl.GlooPort(rank, 2)
    t = torch.ones(nbytes // 4)
    times = []
    for i in range(reps + 10):
        t0 = time.perf_counter()
        if rank == 0:
            port.send(t, pl.DATA, i)
            port.recv()
        else:
            port.send(port.recv()[2], pl.DATA, i)
        port.flush()
        times.append((time.perf_counter() - t0) / 2)
    if not links:
        torch.distributed.destroy_process_group()
    if rank == 1:
        os._exit(0)
    os.waitpid(pid, 0)
    times = sorted(times[10:])
    return times[len(times) // 2]


def _overhead(nbytes, reps):
    """CPU time of sending and receiving one message through a shared-memory link (the receive
    finding the data there), median: what each rank spends per micro-batch besides computing."""
    import time

    from pypto import pipeline_ports as pl
    from pypto.pipeline_shm import Link

    link = Link(0, 0)
    port = pl.ShmPort((link, link), 30.0)
    x = np.ones(nbytes // 4, np.float32)
    times = []
    for i in range(reps):
        t0 = time.perf_counter()
        port.send(x, pl.DATA, i)
        port.recv()
        times.append(time.perf_counter() - t0)
        os.read(link.data_r, 1 << 16)  # the wake-ups this process sent itself
        os.read(link.space_r, 1 << 16)
    link.close()
    return float(np.median(times))


def main():
    import argparse
    import tempfile
    import time

    import pypto
    from pypto import pipeline_trace

    ap = argparse.ArgumentParser(description="the pipeline case's components: stage time, transfer latency "
                                 "(shared memory and gloo), bubble and stalls from per-rank traces")
    ap.add_argument("--rounds", type=int, default=15)
    args = ap.parse_args()
    rows, d, micro = FULL
    rng = np.random.default_rng(0)
    x = rand(rng, rows, d)
    weights = [[rand(rng, d, d, scale=d ** -0.5 * 1.4) for _ in range(LAYERS)] for _ in range(STAGES)]
    stages = [_stage_fn(ws) for ws in weights]
    seq = pypto.pipeline.Pipeline(stages, micro_batches=micro)
    ref = seq(x)
    piece = seq._split(x)[0]
    nbytes = piece.nbytes
    print(f"load average at start: {os.getloadavg()[0]:.1f} on {len(os.sched_getaffinity(0))} cores")
    for name in ("shm", "gloo"):
        print(f"one-way latency of a {nbytes >> 10} KiB activation ({name}): {_latency(name, nbytes, 200) * 1e6:.0f} us")
    trace = tempfile.mkdtemp(prefix="pypto-pipe-") + "/t"
    os.environ["PYPTO_PIPELINE_TRACE"] = trace
    pipe = pypto.pipeline.Pipeline(stages, micro_batches=micro, threads=1)
    pipe.start(STAGES)
    n = pypto.target()["num_threads"]
    one, two, stage = [], [], []
    for _ in range(args.rounds):  # interleaved: one core, one stage call alone, the pipeline
        pypto.set_num_threads(1)
        t0 = time.perf_counter()
        out1 = seq(x)
        one.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        stages[0](piece)
        stage.append(time.perf_counter() - t0)
        pypto.set_num_threads(n)
        t0 = time.perf_counter()
        out2 = pipe.run(x)
        two.append(time.perf_counter() - t0)
        assert np.array_equal(out1, ref) and np.array_equal(out2, ref)
    pipe.close()
    runs = pipeline_trace.summarize(trace)[1:]  # the first run faults the rings' pages in
    med = lambda v: float(np.median(v))  # noqa: E731
    print(f"stage call alone (1 thread): {med(stage) * 1e3:.3f} ms; in the workers: " + ", ".join(
        f"rank {r} {med([run['ranks'][r]['compute'] / run['ranks'][r]['stage_calls'] for run in runs]) * 1e3:.3f} ms"
        for r in runs[0]["ranks"]))
    print(f"one core: {med(one) * 1e3:.2f} ms; {STAGES}-stage pipeline: {med(two) * 1e3:.2f} ms; speed-up "
          f"{med(one) / med(two):.2f}x (bar 1.84x); medians of {args.rounds} interleaved rounds")
    print(f"bubble (traces, median): {med([r['bubble'] for r in runs]):.1%}, GPipe's: {runs[0]['gpipe_bubble']:.1%}; "
          f"transfer stall per message: median {med([r['stall_median'] for r in runs]) * 1e6:.0f} us")
    print("last run, per rank:\n" + pipeline_trace.format_runs(runs[-1:]))
    t_s, o, lat = med(stage), _overhead(nbytes, 300), _latency("shm", nbytes, 200)
    print(f"per message: {o * 1e6:.0f} us of copying and bookkeeping (send + receive, on the stage's core), "
          f"{lat * 1e6:.0f} us one-way latency")
    for s in (2, 8):  # GPipe forward: (M + S - 1) stage steps, M messages per rank, S - 1 latencies to fill
        for m in (16, 32, 64):
            eff = m * t_s / ((m + s - 1) * t_s + m * o + (s - 1) * lat)
            print(f"GPipe estimate, {s} stages x {m} micro-batches: {eff:.1%} of linear")

if __name__ == "__main__":
    main()
