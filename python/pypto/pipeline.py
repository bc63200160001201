"""Pipeline parallelism over processes (the seed's §3.2): shared memory on one machine,
torch.distributed across machines.

A model is a list of stages (PyPTO kernels, objects with a `.compute` method such as the seed's
`PipelineStage`, or any callable of one tensor). `Pipeline(stages).run(x, processes=N)` splits
the input into micro-batches along dimension 0, places contiguous groups of stages on N worker
processes (forked here, each pinned to its own cores, joined by shared-memory rings:
pipeline_shm), and streams the micro-batches through them: while stage group k works on
micro-batch m, group k+1 works on m-1 (GPipe's forward schedule). Activations cross process
boundaries as a small header (kind, dtype, shape) and the raw data; arrays are never pickled. Under `torchrun` (the process group already set up, one rank per stage group),
`Pipeline(stages).run(x)` runs the same schedule across the launched ranks, on one machine or
many, with point-to-point torch.distributed sends (gloo, or NCCL where GPUs are): rank 0 feeds the input and returns the output; the other ranks return None.

Failure: a stage that raises sends the error down the chain, and the caller (rank 0) raises a
`PyptoError` with the stage, the micro-batch and the original traceback; a process that dies or
stops answering is reported after `timeout` seconds. The activation crossing each boundary is
checked against the shape the first micro-batch established.
"""
from __future__ import annotations

import os
import time
import traceback

import numpy as np

from .errors import PyptoError
from . import pipeline_ports as ports
from . import pipeline_train
from .pipeline_shm import Link

def balance(times, groups):
    """Split stages with measured `times` into `groups` contiguous groups minimising the slowest
    group's total (the pipeline's throughput bound): the group sizes, in order."""
    n = len(times)
    if not 1 <= groups <= n:
        raise PyptoError(f"pipeline: cannot place {n} stages on {groups} processes")
    pre = np.concatenate([[0.0], np.cumsum(times)])
    best = [[float("inf")] * (n + 1) for _ in range(groups + 1)]
    cut = [[0] * (n + 1) for _ in range(groups + 1)]
    best[0][0] = 0.0
    for g in range(1, groups + 1):
        for i in range(g, n + 1):
            for j in range(g - 1, i):
                cost = max(best[g - 1][j], pre[i] - pre[j])
                if cost < best[g][i]:
                    best[g][i], cut[g][i] = cost, j
    sizes, i = [], n
    for g in range(groups, 0, -1):
        sizes.append(i - cut[g][i])
        i = cut[g][i]
    return sizes[::-1]


class Pipeline:
    """Stages run as a pipeline over processes. `micro_batches`: how many pieces dimension 0 of
    the input is split into; `balance`: stage counts per process, "auto" (measured stage times)
    or None (as even as possible); `threads`: threads per process (default: the cores available
    divided among the processes); `timeout`: seconds a process may stay silent."""

    def __init__(self, stages, *, micro_batches=4, balance=None, threads=None, timeout=120.0):
        self.stages = list(stages)
        if not self.stages:
            raise PyptoError("pipeline: no stages")
        if int(micro_batches) < 1:
            raise PyptoError(f"pipeline: micro_batches must be >= 1, got {micro_batches}")
        self.micro_batches = int(micro_batches)
        self.balance = balance
        self.threads = threads
        self.timeout = float(timeout)
        self.last_stats = None
        self._workers = None

    # --- in one process (the reference, and what the seed's wave loop computes) ---------------------
    def __call__(self, x):
        outs = [self._through(self.stages, piece) for piece in self._split(x)]
        return self._join(outs, x)

    @staticmethod
    def _through(stages, x):
        for st in stages:
            x = ports.call_stage(st, x)
        return x

    def _split(self, x):
        n = x.shape[0]
        m = min(self.micro_batches, n)
        bounds = [round(i * n / m) for i in range(m + 1)]
        return [x[bounds[i]:bounds[i + 1]] for i in range(m)]

    @staticmethod
    def _join(outs, like):
        if isinstance(outs[0], np.ndarray):
            return np.concatenate(outs, 0)
        return ports.torch_module().cat([ports.torch_module().as_tensor(o) for o in outs], 0)

    def _groups(self, nproc, sample):
        if self.balance == "auto":
            times = []
            x = sample
            for st in self.stages:
                ports.call_stage(st, x)  # compile / warm up
                samples = []
                for _ in range(5):
                    t0 = time.perf_counter()
                    y = ports.call_stage(st, x)
                    samples.append(time.perf_counter() - t0)
                times.append(float(np.median(samples)))
                x = y
            sizes = balance(times, nproc)
        elif self.balance is not None:
            sizes = [int(s) for s in self.balance]
            if len(sizes) != nproc or sum(sizes) != len(self.stages) or min(sizes) < 1:
                raise PyptoError(f"pipeline: balance {self.balance} does not place {len(self.stages)} stages on "
                                 f"{nproc} processes")
        else:
            sizes = balance([1.0] * len(self.stages), nproc)
        groups, k = [], 0
        for s in sizes:
            groups.append(list(range(k, k + s)))
            k += s
        return groups

    # --- over processes ---------------------------------------------------------------------------
    def run(self, x, processes=None):
        """Run over processes: on the workers start() made, or under torchrun (a process group
        exists) one stage group per rank (ranks other than 0 may pass None for x); else fork
        `processes` workers for this one call (default: one per usable core, at most one per stage)."""
        if self._workers is not None:
            if processes not in (None, self._workers["processes"]):
                raise PyptoError(f"pipeline: started with {self._workers['processes']} processes, not {processes}")
            return self._run_started(x)
        dist = ports.torch_module().distributed
        if dist.is_available() and dist.is_initialized():
            return self._run_ranked(x, dist.get_rank(), dist.get_world_size())
        with self.start(processes, sample=x):
            return self._run_started(x)

    def train(self, x, target, loss_fn, processes=None):
        """One training step over processes on the 1F1B schedule (pipeline_train): forward and
        backward micro-batches, the loss sum_m loss_fn(out_m, target_m) * n_m / N (for a loss that
        averages over the batch, loss_fn(model(x), target)); every stage parameter's `.grad`
        gets this step's gradient added, as loss.backward() in one process would. Returns the loss.
        Forks its workers for the call, so they start from the current parameters."""
        return pipeline_train.train(self, x, target, loss_fn, processes)

    def start(self, processes=None, sample=None):
        """Fork the worker processes once: later run() calls stream through them, until close()
        (or the end of a `with` block). The processes are joined by shared-memory links
        (pipeline_shm: gloo's rendezvous sends stalled a busy pipeline). The caller is rank 0:
        during run() it computes the first stage group on its share of the cores, feeds the next
        rank and collects the results; workers are ranks 1..N-1 (a driver that only fed and
        collected would be one process more than there are stage groups, fighting the workers
        for cores). `sample`: an input, to measure stage times for balance="auto"."""
        if self._workers is not None:
            raise PyptoError("pipeline: already started")
        nproc = processes or min(len(self.stages), len(os.sched_getaffinity(0)))
        if nproc < 1 or nproc > len(self.stages):
            raise PyptoError(f"pipeline: processes must be between 1 and {len(self.stages)}, got {processes}")
        if self.balance == "auto" and sample is None:
            raise PyptoError('pipeline: balance="auto" measures the stages: give start() a sample input')
        groups = self._groups(nproc, self._split(sample)[0] if sample is not None else None)
        cpus = sorted(os.sched_getaffinity(0))
        threads = self.threads or max(1, len(cpus) // nproc)
        links = [Link(r, (r + 1) % nproc) for r in range(nproc)] if nproc > 1 else []
        ports.LIVE_LINKS.update(links)
        pids = []
        for r in range(1, nproc):
            pid = os.fork()
            if pid == 0:  # a worker: never returns into the caller's code
                code = 0
                try:
                    ports.pin(ports.cpus_of(cpus, r, threads), threads)
                    ports.trace_start(r)
                    port = ports.ShmPort(self._own_links(links, r, child=True), self.timeout)
                    while self._stage_loop(port, r, groups[r]):
                        pass
                except (RuntimeError, PyptoError):  # a neighbour went away: the caller reports it
                    code = 1
                except BaseException:  # noqa: B036 (a worker reports everything, then leaves)
                    traceback.print_exc()
                    code = 1
                ports.trace_flush()
                os._exit(code)
            pids.append(pid)
        port = ports.ShmPort(self._own_links(links, 0, child=False), self.timeout) if nproc > 1 else None
        ports.trace_start(0)
        self._workers = {"pids": pids, "groups": groups, "processes": nproc, "threads": threads, "port": port}
        return self

    @staticmethod
    def _own_links(links, rank, child):
        """The ring's link into rank `rank` and the one out of it (see ports.keep_ends)."""
        ports.keep_ends(links, rank, child)
        n = len(links)
        return links[(rank - 1) % n], links[rank]

    def close(self):
        """Stop the workers (a no-op when none run)."""
        w = self._workers
        if w is None:
            return
        if w["processes"] == 1:  # no workers, no links
            self._workers = None
            return
        port = w["port"]
        try:
            port.send(ports.text("stop"), ports.STOP, -1)
            while port.recv()[0] != ports.STOP:
                pass
        except Exception:  # noqa: BLE001 (a broken pipeline: the workers are killed below)
            self._kill()
            return
        self._workers = None
        port.close()
        ports.trace_flush()
        ports.reap(w["pids"], self.timeout)

    def _kill(self):
        w, self._workers = self._workers, None
        if w is not None:
            if w.get("port") is not None:
                w["port"].close()
            ports.reap(w["pids"], 0.0)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _run_started(self, x):
        w = self._workers
        pieces = self._split(x)
        t0 = time.perf_counter()
        ports.trace("run", -1)
        n = w["processes"]
        try:
            with ports.Pinned(ports.cpus_of(sorted(os.sched_getaffinity(0)), 0, w["threads"]), w["threads"]):
                if n == 1:
                    outs = [self._through(self.stages, p) for p in pieces]
                else:
                    outs = self._feed_and_collect(w["port"], pieces, w["groups"][0])
        except BaseException:
            self._kill()  # an error leaves messages in flight: this pipeline cannot go on
            raise
        ports.trace("ran", -1)
        self.last_stats = {"seconds": time.perf_counter() - t0, "groups": w["groups"],
                           "micro_batches": len(pieces), "processes": w["processes"], "threads": w["threads"]}
        return outs if not isinstance(outs, list) else self._join(outs, x)

    def _run_ranked(self, x, rank, world):
        """Under torchrun: rank 0 feeds the input, runs the first stage group and collects the
        output from the last rank; every other rank runs its group until the input is done."""
        groups = self._ranked_groups(x, rank, world)
        port = ports.GlooPort(rank, world)
        ports.trace_start(rank)
        try:
            if rank != 0:
                self._stage_loop(port, rank, groups[rank])
                return None
            pieces = self._split(x)
            if world == 1:
                return self._join([self._through(self.stages, p) for p in pieces], x)
            ports.trace("run", -1)
            outs = self._feed_and_collect(port, pieces, groups[0])
            ports.trace("ran", -1)
            return outs if not isinstance(outs, list) else self._join(outs, x)
        finally:
            ports.trace_flush()

    def _ranked_groups(self, x, rank, world):
        if self.balance != "auto":
            return self._groups(world, None)
        torch = ports.torch_module()
        sizes = torch.zeros(world, dtype=torch.int64)
        if rank == 0:
            groups = self._groups(world, self._split(x)[0])
            sizes[:] = torch.tensor([len(g) for g in groups])
        torch.distributed.broadcast(sizes, 0)
        self.balance, auto = [int(v) for v in sizes], self.balance
        try:
            return self._groups(world, None)
        finally:
            self.balance = auto

    def _feed_and_collect(self, port, pieces, own):
        """Rank 0: send every micro-batch (through its own stages `own` first) down the pipeline,
        then the end mark; receive the results from the last rank (also while a send waits for
        room, so that full links cannot deadlock)."""
        stages = [self.stages[i] for i in own]
        got = []
        output = _Output(pieces)

        def take(msg):
            kind, m, t = msg
            if kind == ports.ERROR:
                raise PyptoError(ports.untext(t))
            got.append(msg)

        for m, p in enumerate(pieces):
            try:
                ports.trace("compute", m)
                y = self._through(stages, p)
                ports.trace("computed", m)
            except Exception:
                err = f"pipeline stage {own[0]} failed on micro-batch {m} (rank 0):\n{traceback.format_exc()}"
                port.send(ports.text(err), ports.ERROR, m, on_ready=take)
                raise
            port.send(y, ports.DATA, m, on_ready=take)
        port.send(ports.text(""), ports.DONE, len(pieces), on_ready=take)
        while not got or got[-1][0] != ports.DONE:
            take(port.recv(output.place))
        port.flush()
        outs = [t for kind, m, t in got if kind == ports.DATA]
        if len(outs) != len(pieces):
            raise PyptoError(f"pipeline: {len(outs)} results came back for {len(pieces)} micro-batches")
        return output.whole if output.placed == len(pieces) else outs

    def _stage_loop(self, port, rank, ids):
        """A worker: receive a micro-batch from rank-1, run its stages, send to rank+1 (the last
        worker sends to rank 0), until the end of the input (True: wait for the next), the stop
        mark or an error (False)."""
        stages = [self.stages[i] for i in ids]
        shape_in = None
        where = f"pipeline stage {ids[0]}" + (f"-{ids[-1]}" if len(ids) > 1 else "")
        while True:
            try:
                kind, m, t = port.recv()
            except PyptoError as e:  # the neighbour died: say which, downstream, to the caller
                port.send(ports.text(str(e)), ports.ERROR, -1)
                kind = ports.ERROR
                break
            if kind != ports.DATA:
                port.send(t, kind, m, numpy=True)
                break
            numpy = isinstance(t, np.ndarray)
            if shape_in is None:
                shape_in = tuple(t.shape[1:])
            elif tuple(t.shape[1:]) != shape_in:
                msg = (f"{where}: micro-batch {m} arrives with shape {tuple(t.shape)}; the first had "
                       f"(N, {', '.join(map(str, shape_in))})")
                port.send(ports.text(msg), ports.ERROR, m)
                kind = ports.ERROR
                break
            try:
                ports.trace("compute", m)
                out = self._through(stages, t)
                ports.trace("computed", m)
            except Exception:
                err = f"{where} failed on micro-batch {m} (rank {rank}):\n{traceback.format_exc()}"
                port.send(ports.text(err), ports.ERROR, m)
                kind = ports.ERROR
                break
            port.send(out, ports.DATA, m, numpy=numpy)
        port.flush()
        return kind == ports.DONE


class _Output:
    """Rank 0 receives each micro-batch's result straight into its rows of the whole output (no
    concatenation at the end), while the results have the pieces' rows and one dtype and shape."""

    def __init__(self, pieces):
        self.rows = [p.shape[0] for p in pieces]
        self.starts = np.concatenate([[0], np.cumsum(self.rows)]).astype(int).tolist()
        self.whole, self.placed = None, 0

    def place(self, kind, m, shape, name, as_numpy):
        if kind != ports.DATA or not 0 <= m < len(self.rows) or not shape or shape[0] != self.rows[m]:
            return None
        if self.whole is None:
            full = (self.starts[-1],) + shape[1:]
            torch = ports.torch_module()
            self.whole = np.empty(full, dtype=name) if as_numpy else torch.empty(full, dtype=getattr(torch, name))
        elif (tuple(self.whole.shape[1:]) != shape[1:] or ports.dtype_name(self.whole) != name
              or isinstance(self.whole, np.ndarray) != as_numpy):
            return None
        self.placed += 1
        return self.whole[self.starts[m]:self.starts[m + 1]]


def run(stages, x, *, processes=None, micro_batches=4, **kw):
    """The seed's pipeline, over processes: `pypto.pipeline.run(pipeline, x, processes=2)` in place
    of the seed's `run_pipeline(pipeline, x)`; returns the last stage's output."""
    return Pipeline(stages, micro_batches=micro_batches, **kw).run(x, processes=processes)

