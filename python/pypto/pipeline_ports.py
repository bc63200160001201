"""What the pipeline's processes share: the messages (a header and the raw bytes of a NumPy array
or torch tensor), the ports they go through (shared-memory links between forked processes,
torch.distributed sends between launched ones), pinning, reaping, and the per-rank trace.
Used by pipeline (forward runs) and pipeline_train (1F1B training)."""
from __future__ import annotations

import json
import os
import socket
import time

import numpy as np

from . import _C
from .errors import PyptoError

DATA, ERROR, DONE, STOP = 0, 1, 2, 3
DTYPES = ["float32", "float64", "float16", "bfloat16", "int32", "int64", "bool", "int8", "uint8", "int16"]
HEADER = 13  # kind, dtype code, ndim, up to 8 dims, micro-batch index, came from NumPy
LIVE_LINKS = set()  # shared-memory links with pipe ends open in this process (closed in new workers)


def torch_module():
    import torch
    return torch


def call_stage(stage, x):
    fn = getattr(stage, "compute", stage)
    return fn(x)


def keep_ends(links, rank, child):
    """Rank `rank` keeps the reading end of each link into it and the writing end of each link out
    of it, and closes the other pipe ends of `links` (a new worker: of every link this process had
    open), so that a dead neighbour shows as end-of-file."""
    for link in list(LIVE_LINKS | set(links)) if child else links:
        if link in links and link.dst == rank:
            link.as_reader()
        elif link in links and link.src == rank:
            link.as_writer()
        else:
            link.close()
            LIVE_LINKS.discard(link)


# --- messages ----------------------------------------------------------------------------------------
# A message is a header (HEADER int64s: kind, dtype code, ndim, up to 8 dims, micro-batch index,
# "deliver as NumPy") and the value's raw bytes. Values are NumPy arrays or torch tensors; bytes are
# moved as they are (bfloat16 too, which NumPy lacks), never pickled.

def payload(v):
    """(dtype name, shape, the value's bytes as a flat uint8 NumPy view) of a stage's result."""
    if isinstance(v, np.ndarray):
        v = np.ascontiguousarray(v)
        return v.dtype.name, v.shape, v.reshape(-1).view(np.uint8)
    torch = torch_module()
    if not isinstance(v, torch.Tensor):
        if not hasattr(v, "__dlpack__"):
            raise PyptoError(f"pipeline: a stage returned {type(v).__name__}, not a tensor")
        v = torch.from_dlpack(v)
    t = v.detach().cpu().contiguous()
    return str(t.dtype).replace("torch.", ""), tuple(t.shape), t.reshape(-1).view(torch.uint8).numpy()


def text(s):
    return np.frombuffer(s.encode("utf-8"), dtype=np.uint8).copy()


def untext(v):
    return bytes(np.asarray(v)).decode("utf-8", "replace")


def header(kind, m, name, shape, numpy):
    if len(shape) > 8:
        raise PyptoError(f"pipeline: activations of rank {len(shape)} (> 8) cannot cross a stage boundary")
    if name not in DTYPES:
        raise PyptoError(f"pipeline: activations of dtype {name} cannot cross a stage boundary")
    dims = list(shape) + [0] * (8 - len(shape))
    return np.array([kind, DTYPES.index(name), len(shape), *dims, m, int(numpy)], dtype=np.int64)


def empty_for(h, place=None):
    """(kind, micro-batch index, the array to receive into, its bytes) from a header: what
    `place(kind, m, shape, dtype name, as_numpy)` returns (rank 0: a slice of the output), else a
    new NumPy array where the sender's input was NumPy (and NumPy has the dtype), else a torch tensor."""
    kind, code, ndim, m = int(h[0]), int(h[1]), int(h[2]), int(h[11])
    shape, name = tuple(int(v) for v in h[3:3 + ndim]), DTYPES[code]
    as_numpy = bool(h[12]) and name != "bfloat16"
    v = place(kind, m, shape, name, as_numpy) if place is not None else None
    if v is None:
        v = np.empty(shape, dtype=name) if as_numpy else torch_module().empty(shape, dtype=getattr(torch_module(), name))
    if isinstance(v, np.ndarray):
        return kind, m, v, v.reshape(-1).view(np.uint8)
    return kind, m, v, v.reshape(-1).view(torch_module().uint8).numpy()


def dtype_name(v):
    return v.dtype.name if isinstance(v, np.ndarray) else str(v.dtype).replace("torch.", "")


class ShmPort:
    """A process's two shared-memory links (pipeline_shm): from the previous rank, to the next."""

    def __init__(self, links, timeout):
        self.inp, self.out = links  # None at the ends of a chain (training's two directions)
        for link in links:
            if link is not None:
                link.timeout = timeout
        self.header = np.zeros(HEADER, dtype=np.int64)
        self.header_bytes = self.header.view(np.uint8)

    def send(self, v, kind, m, numpy=None, on_ready=None, source=None):
        """Copy a header and the data into the link to the next rank; `on_ready(msg)` takes the
        messages that arrive at port `source` (default: this one's input) while the link is full."""
        name, shape, data = payload(v)
        h = header(kind, m, name, shape, isinstance(v, np.ndarray) if numpy is None else numpy)
        src = source or self

        def drain():
            if src.inp.ready():
                on_ready(src.recv())
                return None
            return (src.inp.data_r,)

        trace("send", m)
        wait = drain if on_ready is not None else None
        self.out.write((h.view(np.uint8), data), wait)
        trace("sent", m)

    def recv(self, place=None):
        """(kind, micro-batch index, value); the value is NumPy where the caller's input was, or
        what `place` gave (empty_for)."""
        trace("recv", -1)
        self.inp.read_into(self.header_bytes)
        kind, m, v, data = empty_for(self.header, place)
        if data.size:
            self.inp.read_into(data)
        self.inp.release()
        trace("received", m)
        return kind, m, v

    def flush(self):
        pass

    def close(self):
        for link in (self.inp, self.out):
            if link is not None:
                link.close()
                LIVE_LINKS.discard(link)


class GlooPort:
    """Point-to-point sends over a torch.distributed group (under torchrun, across machines):
    non-blocking header+data sends to the next rank, blocking receives from the previous one."""

    def __init__(self, rank, world):
        self.nxt, self.prev = (rank + 1) % world, (rank - 1) % world
        self.pending = []

    def send(self, v, kind, m, numpy=None, on_ready=None):
        torch = torch_module()
        name, shape, data = payload(v)
        h = header(kind, m, name, shape, isinstance(v, np.ndarray) if numpy is None else numpy)
        trace("send", m)
        self.pending.append(torch.distributed.isend(torch.from_numpy(h), self.nxt))
        if data.size:
            self.pending.append(torch.distributed.isend(torch.from_numpy(data), self.nxt))
        trace("sent", m)

    def recv(self, place=None):
        torch = torch_module()
        dist = torch.distributed
        h = torch.empty(HEADER, dtype=torch.int64)
        trace("recv", -1)
        try:
            dist.recv(h, self.prev)
            kind, m, v, data = empty_for(h.numpy(), place)
            if data.size:
                dist.recv(torch.from_numpy(data), self.prev)
        except RuntimeError as e:  # gloo: the peer closed the connection, or the timeout passed
            raise PyptoError(f"pipeline: rank {self.prev} stopped answering (the process died or hangs): "
                             f"{str(e).splitlines()[0] if str(e) else type(e).__name__}") from None
        trace("received", m)
        return kind, m, v

    def flush(self):
        for h in self.pending:
            h.wait()
        self.pending = []


# --- processes ----------------------------------------------------------------------------------------

def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pin(cpus, threads):
    """A worker keeps to its own cores, with as many threads as it has cores."""
    torch = torch_module()
    try:
        os.sched_setaffinity(0, set(cpus))
    except OSError:
        pass
    # torch ops in a forked worker stay on one thread: the parent's OpenMP pool (GNU libgomp) does
    # not survive fork(); PyPTO's kernels use their own pool there, with `threads` threads.
    torch.set_num_threads(1)
    _C.set_num_threads(int(threads))  # as pypto.set_num_threads (pypto/__init__.py sits above)


def cpus_of(cpus, rank, threads):
    """The cores of rank `rank`: its own `threads` of them, round the list."""
    first = rank * threads % len(cpus)
    return (cpus[first:] + cpus[:first])[:threads]


class Pinned:
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


def trace_start(rank):
    """Trace as `rank` (events of earlier runs as the same rank are kept)."""
    if os.environ.get("PYPTO_PIPELINE_TRACE") and (_TRACE["events"] is None or _TRACE["rank"] != rank):
        _TRACE["rank"], _TRACE["events"] = rank, []


def trace(event, m):
    if _TRACE["events"] is not None:
        _TRACE["events"].append((time.perf_counter(), event, m))  # CLOCK_MONOTONIC: one clock for all ranks


def trace_flush():
    events, prefix = _TRACE["events"], os.environ.get("PYPTO_PIPELINE_TRACE")
    if not prefix:  # tracing was switched off
        _TRACE["events"] = None
    if events is None or not prefix:
        return
    with open(f"{prefix}-rank{_TRACE['rank']}.json", "w") as f:
        json.dump({"rank": _TRACE["rank"], "pid": os.getpid(), "events": events}, f)


def reap(pids, timeout):
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
