"""Pipeline parallelism over processes with torch.distributed (the seed's §3.2).

A model is a list of stages (PyPTO kernels, objects with a `.compute` method such as the seed's
`PipelineStage`, or any callable of one tensor). `Pipeline(stages).run(x, processes=N)` splits
the input into micro-batches along dimension 0, places contiguous groups of stages on N worker
processes (forked here, joined by a gloo process group over loopback, each pinned to its own
cores), and streams the micro-batches through them: while stage group k works on micro-batch m,
group k+1 works on m-1 (GPipe's forward schedule). Activations cross process boundaries as
point-to-point tensor sends (a small header with kind, dtype and shape, then the data; arrays are
never pickled). Under `torchrun` (the process group already set up, one rank per stage group),
`Pipeline(stages).run(x)` runs the same schedule across the launched ranks, on one machine or
many: rank 0 feeds the input and returns the output; the other ranks return None.

Failure: a stage that raises sends the error down the chain, and the caller (rank 0) raises a
`PyptoError` with the stage, the micro-batch and the original traceback; a process that dies or
stops answering is reported after `timeout` seconds. The activation crossing each boundary is
checked against the shape the first micro-batch established.
"""
from __future__ import annotations

import datetime
import os
import socket
import time
import traceback

import numpy as np

from . import _C
from .errors import PyptoError

_DATA, _ERROR, _DONE, _STOP = 0, 1, 2, 3
_DTYPES = ["float32", "float64", "float16", "bfloat16", "int32", "int64", "bool", "int8", "uint8", "int16"]
_HEADER = 13  # kind, dtype code, ndim, up to 8 dims, micro-batch index, came from NumPy


def _torch():
    import torch
    return torch


def _call_stage(stage, x):
    fn = getattr(stage, "compute", stage)
    return fn(x)


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
            x = _call_stage(st, x)
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
        return _torch().cat([_torch().as_tensor(o) for o in outs], 0)

    def _groups(self, nproc, sample):
        if self.balance == "auto":
            times = []
            x = sample
            for st in self.stages:
                _call_stage(st, x)  # compile / warm up
                samples = []
                for _ in range(5):
                    t0 = time.perf_counter()
                    y = _call_stage(st, x)
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
        dist = _torch().distributed
        if dist.is_available() and dist.is_initialized():
            return self._run_ranked(x, dist.get_rank(), dist.get_world_size())
        with self.start(processes, sample=x):
            return self._run_started(x)

    def start(self, processes=None, sample=None):
        """Fork the worker processes once: later run() calls stream through them, until close()
        (or the end of a `with` block). The caller becomes rank 0 of a gloo group over loopback:
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
        port = _free_port()
        cpus = sorted(os.sched_getaffinity(0))
        threads = self.threads or max(1, len(cpus) // nproc)
        pids = []
        for r in range(1, nproc):
            pid = os.fork()
            if pid == 0:  # a worker: never returns into the caller's code
                code = 0
                try:
                    _pin(_cpus_of(cpus, r, threads), threads)
                    _init(port, r, nproc, self.timeout)
                    while self._stage_loop(r, nproc, groups[r]):
                        pass
                except (RuntimeError, PyptoError):  # a neighbour went away: the caller reports it
                    code = 1
                except BaseException:  # noqa: B036 (a worker reports everything, then leaves)
                    traceback.print_exc()
                    code = 1
                os._exit(code)
            pids.append(pid)
        self._workers = {"pids": pids, "groups": groups, "processes": nproc, "threads": threads}
        try:
            if nproc > 1:
                _init(port, 0, nproc, self.timeout)
        except Exception:
            self._kill()
            raise
        return self

    def close(self):
        """Stop the workers (a no-op when none run)."""
        w = self._workers
        if w is None:
            return
        torch = _torch()
        if w["processes"] == 1:  # no workers, no group
            self._workers = None
            return
        try:
            for h in _send(torch, _text("stop"), 1, _STOP, -1):
                h.wait()
            while _recv(torch, w["processes"] - 1)[0] != _STOP:
                pass
        except Exception:  # noqa: BLE001 (a broken pipeline: the workers are killed below)
            self._kill()
            return
        self._workers = None
        _shutdown(torch.distributed)
        _reap(w["pids"], self.timeout)

    def _kill(self):
        w, self._workers = self._workers, None
        _shutdown(_torch().distributed)
        if w is not None:
            _reap(w["pids"], 0.0)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _run_started(self, x):
        w = self._workers
        pieces = self._split(x)
        t0 = time.perf_counter()
        n = w["processes"]
        try:
            with _pinned(_cpus_of(sorted(os.sched_getaffinity(0)), 0, w["threads"]), w["threads"]):
                if n == 1:
                    outs = [self._through(self.stages, p) for p in pieces]
                else:
                    outs = self._feed_and_collect(pieces, w["groups"][0], nxt=1, last=n - 1)
        except BaseException:
            self._kill()  # an error leaves messages in flight: this pipeline cannot go on
            raise
        self.last_stats = {"seconds": time.perf_counter() - t0, "groups": w["groups"],
                           "micro_batches": len(pieces), "processes": w["processes"], "threads": w["threads"]}
        return self._join(outs, x)

    def _run_ranked(self, x, rank, world):
        """Under torchrun: rank 0 feeds the input, runs the first stage group and collects the
        output from the last rank; every other rank runs its group until the input is done."""
        groups = self._ranked_groups(x, rank, world)
        if rank != 0:
            self._stage_loop(rank, world, groups[rank])
            return None
        pieces = self._split(x)
        if world == 1:
            return self._join([self._through(self.stages, p) for p in pieces], x)
        return self._join(self._feed_and_collect(pieces, groups[0], nxt=1, last=world - 1), x)

    def _ranked_groups(self, x, rank, world):
        if self.balance != "auto":
            return self._groups(world, None)
        torch = _torch()
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

    def _feed_and_collect(self, pieces, own, nxt, last):
        """Rank 0: send every micro-batch (through its own stages `own` first) to rank `nxt`, then
        the end mark; receive the results from rank `last`."""
        torch = _torch()
        stages = [self.stages[i] for i in own]
        pending = []
        for m, p in enumerate(pieces):
            try:
                y = self._through(stages, p)
            except Exception:
                err = f"pipeline stage {own[0]} failed on micro-batch {m} (rank 0):\n{traceback.format_exc()}"
                pending += _send(torch, _text(err), nxt, _ERROR, m)
                raise
            pending += _send(torch, _as_tensor(y), nxt, _DATA, m)
        pending += _send(torch, _text(""), nxt, _DONE, len(pieces))
        outs = []
        while True:
            kind, m, t = _recv(torch, last)
            if kind == _ERROR:
                raise PyptoError(bytes(t.numpy()).decode("utf-8", "replace"))
            if kind == _DONE:
                break
            outs.append(t.numpy() if t.pypto_numpy else t)
        for h in pending:
            h.wait()
        if len(outs) != len(pieces):
            raise PyptoError(f"pipeline: {len(outs)} results came back for {len(pieces)} micro-batches")
        return outs

    def _stage_loop(self, rank, world, ids):
        """A worker: receive a micro-batch from rank-1, run its stages, send to rank+1 (the last
        worker sends to rank 0), until the end of the input (True: wait for the next), the stop
        mark or an error (False)."""
        torch = _torch()
        stages = [self.stages[i] for i in ids]
        nxt = rank + 1 if rank + 1 < world else 0
        pending, shape_in = [], None
        where = f"pipeline stage {ids[0]}" + (f"-{ids[-1]}" if len(ids) > 1 else "")
        while True:
            try:
                kind, m, t = _recv(torch, rank - 1)
            except PyptoError as e:  # the neighbour died: say which, downstream, to the caller
                pending += _send(torch, _text(str(e)), nxt, _ERROR, -1)
                kind = _ERROR
                break
            if kind != _DATA:
                pending += _send(torch, t, nxt, kind, m)
                break
            if shape_in is None:
                shape_in = tuple(t.shape[1:])
            elif tuple(t.shape[1:]) != shape_in:
                msg = (f"{where}: micro-batch {m} arrives with shape {tuple(t.shape)}; the first had "
                       f"(N, {', '.join(map(str, shape_in))})")
                pending += _send(torch, _text(msg), nxt, _ERROR, m)
                kind = _ERROR
                break
            try:
                out = _as_tensor(self._through(stages, t.numpy() if t.pypto_numpy else t))
            except Exception:
                err = f"{where} failed on micro-batch {m} (rank {rank}):\n{traceback.format_exc()}"
                pending += _send(torch, _text(err), nxt, _ERROR, m)
                kind = _ERROR
                break
            pending += _send(torch, out, nxt, _DATA, m, numpy=t.pypto_numpy)
        for h in pending:
            h.wait()
        return kind == _DONE


# --- messages ----------------------------------------------------------------------------------------

def _as_tensor(y):
    torch = _torch()
    if isinstance(y, np.ndarray):
        t = torch.from_numpy(np.ascontiguousarray(y))
        t.pypto_numpy = True
        return t
    if isinstance(y, torch.Tensor):
        return y.detach().contiguous()
    if hasattr(y, "__dlpack__"):
        return torch.from_dlpack(y)
    raise PyptoError(f"pipeline: a stage returned {type(y).__name__}, not a tensor")


def _text(s):
    torch = _torch()
    return torch.tensor(list(s.encode("utf-8")), dtype=torch.uint8)


def _send(torch, t, dst, kind, m, numpy=None):
    """A header, then the data (both non-blocking): the handles to wait on."""
    if t.ndim > 8:
        raise PyptoError(f"pipeline: activations of rank {t.ndim} (> 8) cannot cross a stage boundary")
    h = torch.zeros(_HEADER, dtype=torch.int64)
    name = str(t.dtype).replace("torch.", "")
    if name not in _DTYPES:
        raise PyptoError(f"pipeline: activations of dtype {name} cannot cross a stage boundary")
    h[0], h[1], h[2] = kind, _DTYPES.index(name), t.ndim
    h[3:3 + t.ndim] = torch.tensor(t.shape, dtype=torch.int64)
    h[11] = m
    h[12] = int(getattr(t, "pypto_numpy", False) if numpy is None else numpy)
    dist = torch.distributed
    return [dist.isend(h, dst), dist.isend(t, dst)]


def _recv(torch, src):
    """(kind, micro-batch index, tensor); the tensor's `pypto_numpy` says what the sender had."""
    dist = torch.distributed
    h = torch.empty(_HEADER, dtype=torch.int64)
    try:
        dist.recv(h, src)
        kind, code, ndim, m = int(h[0]), int(h[1]), int(h[2]), int(h[11])
        t = torch.empty(tuple(int(v) for v in h[3:3 + ndim]), dtype=getattr(torch, _DTYPES[code]))
        dist.recv(t, src)
    except RuntimeError as e:  # gloo: the peer closed the connection, or the timeout passed
        raise PyptoError(f"pipeline: rank {src} stopped answering (the process died or hangs): "
                         f"{str(e).splitlines()[0] if str(e) else type(e).__name__}") from None
    t.pypto_numpy = bool(h[12])
    return kind, m, t


# --- processes ----------------------------------------------------------------------------------------

def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _init(port, rank, world, timeout):
    dist = _torch().distributed
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=timeout))


def _pin(cpus, threads):
    """A worker keeps to its own cores, with as many threads as it has cores."""
    torch = _torch()
    try:
        os.sched_setaffinity(0, set(cpus))
    except OSError:
        pass
    # torch ops in a forked worker stay on one thread: the parent's OpenMP pool (GNU libgomp) does
    # not survive fork(); PyPTO's kernels use their own pool there, with `threads` threads.
    torch.set_num_threads(1)
    _C.set_num_threads(int(threads))  # as pypto.set_num_threads (pypto/__init__.py sits above)


def _cpus_of(cpus, rank, threads):
    """The cores of rank `rank`: its own `threads` of them, round the list."""
    first = rank * threads % len(cpus)
    return (cpus[first:] + cpus[:first])[:threads]


class _pinned:
    """The caller computes the first stage group on its own cores and threads for the length of a
    run, and gets its affinity and thread count back afterwards."""

    def __init__(self, cpus, threads):
        self.cpus, self.threads = cpus, threads

    def __enter__(self):
        self.saved = (os.sched_getaffinity(0), _C.num_threads())
        try:
            os.sched_setaffinity(0, set(self.cpus))
        except OSError:
            pass
        _C.set_num_threads(int(self.threads))

    def __exit__(self, *exc):
        try:
            os.sched_setaffinity(0, self.saved[0])
        except OSError:
            pass
        _C.set_num_threads(int(self.saved[1]))


def _shutdown(dist):
    try:
        if dist.is_initialized():
            dist.destroy_process_group()
    except Exception:  # noqa: BLE001 (tearing down after an error: nothing more to report)
        pass


def _reap(pids, timeout):
    """Wait for the workers (after an error: none; they may be blocked on a dead neighbour)."""
    deadline = time.monotonic() + min(timeout, 30.0)
    for pid in pids:
        while True:
            done, _ = os.waitpid(pid, os.WNOHANG)
            if done or time.monotonic() > deadline:
                break
            time.sleep(0.01)
        if not done:
            os.kill(pid, 9)
            os.waitpid(pid, 0)


def run(stages, x, *, processes=None, micro_batches=4, **kw):
    """The seed's pipeline, over processes: `pypto.pipeline.run(pipeline, x, processes=2)` in place
    of the seed's `run_pipeline(pipeline, x)`; returns the last stage's output."""
    return Pipeline(stages, micro_batches=micro_batches, **kw).run(x, processes=processes)
