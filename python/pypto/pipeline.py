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

import json
import os
import socket
import time
import traceback

import numpy as np

from . import _C
from .errors import PyptoError
from .pipeline_shm import Link

_DATA, _ERROR, _DONE, _STOP = 0, 1, 2, 3
_DTYPES = ["float32", "float64", "float16", "bfloat16", "int32", "int64", "bool", "int8", "uint8", "int16"]
_HEADER = 13  # kind, dtype code, ndim, up to 8 dims, micro-batch index, came from NumPy
_LIVE_LINKS = set()  # shared-memory links with pipe ends open in this process (closed in new workers)


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
        _LIVE_LINKS.update(links)
        pids = []
        for r in range(1, nproc):
            pid = os.fork()
            if pid == 0:  # a worker: never returns into the caller's code
                code = 0
                try:
                    _pin(_cpus_of(cpus, r, threads), threads)
                    _trace_start(r)
                    port = _ShmPort(self._own_links(links, r, child=True), self.timeout)
                    while self._stage_loop(port, r, groups[r]):
                        pass
                except (RuntimeError, PyptoError):  # a neighbour went away: the caller reports it
                    code = 1
                except BaseException:  # noqa: B036 (a worker reports everything, then leaves)
                    traceback.print_exc()
                    code = 1
                _trace_flush()
                os._exit(code)
            pids.append(pid)
        port = _ShmPort(self._own_links(links, 0, child=False), self.timeout) if nproc > 1 else None
        _trace_start(0)
        self._workers = {"pids": pids, "groups": groups, "processes": nproc, "threads": threads, "port": port}
        return self

    @staticmethod
    def _own_links(links, rank, child):
        """Rank `rank` keeps the reading end of the link into it and the writing end of the one out
        of it, and closes the other pipe ends of this pipeline (a new worker: of every pipeline
        this process had open), so that a dead neighbour shows as end-of-file."""
        n = len(links)
        inp, out = links[(rank - 1) % n], links[rank]
        for link in list(_LIVE_LINKS) if child else links:
            if link is inp:
                link.as_reader()
            elif link is out:
                link.as_writer()
            else:
                link.close()
                _LIVE_LINKS.discard(link)
        return inp, out

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
            port.send(_text("stop"), _STOP, -1)
            while port.recv()[0] != _STOP:
                pass
        except Exception:  # noqa: BLE001 (a broken pipeline: the workers are killed below)
            self._kill()
            return
        self._workers = None
        port.close()
        _trace_flush()
        _reap(w["pids"], self.timeout)

    def _kill(self):
        w, self._workers = self._workers, None
        if w is not None:
            if w.get("port") is not None:
                w["port"].close()
            _reap(w["pids"], 0.0)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _run_started(self, x):
        w = self._workers
        pieces = self._split(x)
        t0 = time.perf_counter()
        _trace("run", -1)
        n = w["processes"]
        try:
            with _pinned(_cpus_of(sorted(os.sched_getaffinity(0)), 0, w["threads"]), w["threads"]):
                if n == 1:
                    outs = [self._through(self.stages, p) for p in pieces]
                else:
                    outs = self._feed_and_collect(w["port"], pieces, w["groups"][0])
        except BaseException:
            self._kill()  # an error leaves messages in flight: this pipeline cannot go on
            raise
        _trace("ran", -1)
        self.last_stats = {"seconds": time.perf_counter() - t0, "groups": w["groups"],
                           "micro_batches": len(pieces), "processes": w["processes"], "threads": w["threads"]}
        return self._join(outs, x)

    def _run_ranked(self, x, rank, world):
        """Under torchrun: rank 0 feeds the input, runs the first stage group and collects the
        output from the last rank; every other rank runs its group until the input is done."""
        groups = self._ranked_groups(x, rank, world)
        port = _GlooPort(rank, world)
        _trace_start(rank)
        try:
            if rank != 0:
                self._stage_loop(port, rank, groups[rank])
                return None
            pieces = self._split(x)
            if world == 1:
                return self._join([self._through(self.stages, p) for p in pieces], x)
            _trace("run", -1)
            outs = self._feed_and_collect(port, pieces, groups[0])
            _trace("ran", -1)
            return self._join(outs, x)
        finally:
            _trace_flush()

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

    def _feed_and_collect(self, port, pieces, own):
        """Rank 0: send every micro-batch (through its own stages `own` first) down the pipeline,
        then the end mark; receive the results from the last rank (also while a send waits for
        room, so that full links cannot deadlock)."""
        stages = [self.stages[i] for i in own]
        got = []

        def take(msg):
            kind, m, t = msg
            if kind == _ERROR:
                raise PyptoError(bytes(t.numpy()).decode("utf-8", "replace"))
            got.append(msg)

        for m, p in enumerate(pieces):
            try:
                _trace("compute", m)
                y = self._through(stages, p)
                _trace("computed", m)
            except Exception:
                err = f"pipeline stage {own[0]} failed on micro-batch {m} (rank 0):\n{traceback.format_exc()}"
                port.send(_text(err), _ERROR, m, on_ready=take)
                raise
            port.send(_as_tensor(y), _DATA, m, on_ready=take)
        port.send(_text(""), _DONE, len(pieces), on_ready=take)
        while not got or got[-1][0] != _DONE:
            take(port.recv())
        port.flush()
        outs = [t.numpy() if t.pypto_numpy else t for kind, m, t in got if kind == _DATA]
        if len(outs) != len(pieces):
            raise PyptoError(f"pipeline: {len(outs)} results came back for {len(pieces)} micro-batches")
        return outs

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
                port.send(_text(str(e)), _ERROR, -1)
                kind = _ERROR
                break
            if kind != _DATA:
                port.send(t, kind, m)
                break
            if shape_in is None:
                shape_in = tuple(t.shape[1:])
            elif tuple(t.shape[1:]) != shape_in:
                msg = (f"{where}: micro-batch {m} arrives with shape {tuple(t.shape)}; the first had "
                       f"(N, {', '.join(map(str, shape_in))})")
                port.send(_text(msg), _ERROR, m)
                kind = _ERROR
                break
            try:
                _trace("compute", m)
                out = _as_tensor(self._through(stages, t.numpy() if t.pypto_numpy else t))
                _trace("computed", m)
            except Exception:
                err = f"{where} failed on micro-batch {m} (rank {rank}):\n{traceback.format_exc()}"
                port.send(_text(err), _ERROR, m)
                kind = _ERROR
                break
            port.send(out, _DATA, m, numpy=t.pypto_numpy)
        port.flush()
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


def _header(torch, t, kind, m, numpy):
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
    return h


def _empty_for(torch, h):
    """(kind, micro-batch index, the tensor to receive into) from a header."""
    kind, code, ndim, m = int(h[0]), int(h[1]), int(h[2]), int(h[11])
    t = torch.empty(tuple(int(v) for v in h[3:3 + ndim]), dtype=getattr(torch, _DTYPES[code]))
    t.pypto_numpy = bool(h[12])
    return kind, m, t


def _bytes_of(t):
    """The bytes of a contiguous tensor, as a NumPy view (bfloat16 has no NumPy dtype)."""
    return t.reshape(-1).view(_torch().uint8).numpy()


class _ShmPort:
    """A process's two shared-memory links (pipeline_shm): from the previous rank, to the next."""

    def __init__(self, links, timeout):
        self.inp, self.out = links
        self.inp.timeout = self.out.timeout = timeout
        self.header = _torch().zeros(_HEADER, dtype=_torch().int64)

    def send(self, t, kind, m, numpy=None, on_ready=None):
        """Copy a header and the data into the link to the next rank; `on_ready(msg)` (rank 0)
        takes results that arrive while the link is full."""
        torch = _torch()
        h = _header(torch, t, kind, m, numpy)

        def drain():
            if on_ready is None:
                return ()
            if self.inp.ready():
                on_ready(self.recv())
                return None
            return (self.inp.data_r,)

        _trace("send", m)
        self.out.write(h.numpy(), drain)
        if t.numel():
            self.out.write(_bytes_of(t.contiguous()), drain)
        _trace("sent", m)

    def recv(self):
        torch = _torch()
        _trace("recv", -1)
        self.inp.read_into(self.header.numpy())
        kind, m, t = _empty_for(torch, self.header)
        if t.numel():
            self.inp.read_into(_bytes_of(t))
        _trace("received", m)
        return kind, m, t

    def flush(self):
        pass

    def close(self):
        for link in (self.inp, self.out):
            link.close()
            _LIVE_LINKS.discard(link)


class _GlooPort:
    """Point-to-point sends over a torch.distributed group (under torchrun, across machines):
    non-blocking header+data sends to the next rank, blocking receives from the previous one."""

    def __init__(self, rank, world):
        self.nxt, self.prev = (rank + 1) % world, (rank - 1) % world
        self.pending = []

    def send(self, t, kind, m, numpy=None, on_ready=None):
        torch = _torch()
        h = _header(torch, t, kind, m, numpy)
        _trace("send", m)
        self.pending += [torch.distributed.isend(h, self.nxt), torch.distributed.isend(t, self.nxt)]
        _trace("sent", m)

    def recv(self):
        torch = _torch()
        dist = torch.distributed
        h = torch.empty(_HEADER, dtype=torch.int64)
        _trace("recv", -1)
        try:
            dist.recv(h, self.prev)
            kind, m, t = _empty_for(torch, h)
            dist.recv(t, self.prev)
        except RuntimeError as e:  # gloo: the peer closed the connection, or the timeout passed
            raise PyptoError(f"pipeline: rank {self.prev} stopped answering (the process died or hangs): "
                             f"{str(e).splitlines()[0] if str(e) else type(e).__name__}") from None
        _trace("received", m)
        return kind, m, t

    def flush(self):
        for h in self.pending:
            h.wait()
        self.pending = []


# --- processes ----------------------------------------------------------------------------------------

def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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


# --- tracing (PYPTO_PIPELINE_TRACE=prefix: each rank writes prefix-rank<r>.json; pipeline_trace reads them)

_TRACE = {"rank": None, "events": None}


def _trace_start(rank):
    """Trace as `rank` (events of earlier runs as the same rank are kept)."""
    if os.environ.get("PYPTO_PIPELINE_TRACE") and (_TRACE["events"] is None or _TRACE["rank"] != rank):
        _TRACE["rank"], _TRACE["events"] = rank, []


def _trace(event, m):
    if _TRACE["events"] is not None:
        _TRACE["events"].append((time.perf_counter(), event, m))  # CLOCK_MONOTONIC: one clock for all ranks


def _trace_flush():
    events, prefix = _TRACE["events"], os.environ.get("PYPTO_PIPELINE_TRACE")
    if not prefix:  # tracing was switched off
        _TRACE["events"] = None
    if events is None or not prefix:
        return
    with open(f"{prefix}-rank{_TRACE['rank']}.json", "w") as f:
        json.dump({"rank": _TRACE["rank"], "pid": os.getpid(), "events": events}, f)


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
