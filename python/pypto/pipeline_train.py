"""Training through a pipeline: forward and backward micro-batches on the 1F1B schedule.

`Pipeline.train(x, target, loss_fn, processes=N)` forks N - 1 workers (so they start from the
parameters as they are now), places the stage groups as `run` does, and streams the micro-batches:
rank r runs S - r - 1 forwards ahead, then alternates one forward and one backward, then finishes
the backwards (PipeDream's 1F1B: at most S - r activations kept per rank, against all M in GPipe).
Activations go down the chain and their gradients come back up it, through shared-memory links
(pipeline_shm) in both directions. The last rank computes the loss: the sum over micro-batches of
loss_fn(out_m, target_m) * n_m / N, which is loss_fn(model(x), target) for a loss that averages
over the batch. At the end every worker sends its stages' parameter gradients (and the last, the
loss) back to the caller, which adds them to the `.grad` of its own parameters, as
`loss.backward()` would have in one process.

Stages are callables of one torch tensor (torch modules, or modules calling PyPTO kernels, whose
derived backward takes part in torch autograd); their parameters are `stage.parameters()`.
"""
from __future__ import annotations

import os
import traceback
from collections import deque

import numpy as np

from . import pipeline_ports as ports
from .errors import PyptoError
from .pipeline_shm import Link

_LOSS, _GRAD, _NOGRAD = 10, 11, 12  # message kinds besides pipeline's _DATA, _ERROR, _DONE


def _params(stages):
    out = []
    for st in stages:
        if hasattr(st, "parameters"):
            out += list(st.parameters())
    return out


def train(pipe, x, target, loss_fn, processes=None):
    """See the module's docstring; returns the loss (a detached 0-d tensor)."""
    import torch

    x, target = torch.as_tensor(x), torch.as_tensor(target)
    if x.shape[0] != target.shape[0]:
        raise PyptoError(f"pipeline.train: {x.shape[0]} inputs but {target.shape[0]} targets")
    if pipe._workers is not None:
        raise PyptoError("pipeline.train forks its own workers: close() the started ones first")
    nproc = processes or min(len(pipe.stages), len(os.sched_getaffinity(0)))
    if nproc < 1 or nproc > len(pipe.stages):
        raise PyptoError(f"pipeline: processes must be between 1 and {len(pipe.stages)}, got {processes}")
    groups = pipe._groups(nproc, pipe._split(x)[0] if pipe.balance == "auto" else None)
    pieces, targets = pipe._split(x), pipe._split(target)
    weights = [p.shape[0] / x.shape[0] for p in pieces]
    all_params = _params(pipe.stages)
    cpus = sorted(os.sched_getaffinity(0))
    threads = pipe.threads or max(1, len(cpus) // nproc)
    fwd = [Link(r, r + 1) for r in range(nproc - 1)]  # activations, down the chain
    bwd = [Link(r + 1, r) for r in range(nproc - 1)]  # their gradients, back up
    links = fwd + bwd
    ports.LIVE_LINKS.update(links)
    pids = []
    for r in range(1, nproc):
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                ports.pin(ports.cpus_of(cpus, r, threads), threads)
                ports.keep_ends(links, r, child=True)
                ports.trace_start(r)
                _Rank(pipe, r, nproc, groups, fwd, bwd).run(pieces, targets, weights, loss_fn)
                ports.trace_flush()
            except PyptoError:  # a neighbour went away: the caller reports it
                code = 1
            except BaseException:  # noqa: B036 (a worker reports everything, then leaves)
                traceback.print_exc()
                code = 1
            os._exit(code)
        pids.append(pid)
    ports.keep_ends(links, 0, child=False)
    me = _Rank(pipe, 0, nproc, groups, fwd, bwd)
    ports.trace_start(0)
    ok = False
    try:
        with ports.Pinned(ports.cpus_of(cpus, 0, threads), threads):
            loss = me.run(pieces, targets, weights, loss_fn)
            if nproc > 1:
                loss = me.collect(all_params)
        ok = True
    finally:
        me.close()
        ports.trace_flush()
        ports.reap(pids, pipe.timeout if ok else 0.0)  # after an error: kill what still runs
    return loss


class _Rank:
    """One rank's part of a 1F1B training step."""

    def __init__(self, pipe, rank, world, groups, fwd, bwd):
        self.pipe, self.rank, self.world = pipe, rank, world
        self.stages = [pipe.stages[i] for i in groups[rank]]
        self.first = groups[rank][0]
        # down: activations in from rank-1, out to rank+1; up: gradients in from rank+1, out to rank-1
        self.down = ports.ShmPort((fwd[rank - 1] if rank > 0 else None, fwd[rank] if rank < world - 1 else None),
                                 pipe.timeout)
        self.up = ports.ShmPort((bwd[rank] if rank < world - 1 else None, bwd[rank - 1] if rank > 0 else None),
                               pipe.timeout)
        self.early = {id(self.down): deque(), id(self.up): deque()}  # messages taken while a send waited

    def close(self):
        self.down.close()
        self.up.close()

    # --- messages: a send that waits for room takes what arrives on the other direction meanwhile ---
    def _send(self, port, v, kind, m):
        other = self.up if port is self.down else self.down
        if other.inp is None:
            port.send(v, kind, m)
        else:
            port.send(v, kind, m, on_ready=self.early[id(other)].append, source=other)

    def _recv(self, port):
        q = self.early[id(port)]
        kind, m, v = q.popleft() if q else port.recv()
        if kind == ports.ERROR:
            if self.rank > 0:  # pass it on towards rank 0
                self._send(self.up, v, ports.ERROR, m)
            raise PyptoError(ports.untext(v))
        return kind, m, v

    def _fail(self, m, what):
        err = (f"pipeline stage {self.first} failed in the {what} of micro-batch {m} (rank {self.rank}):\n"
               f"{traceback.format_exc()}")
        if self.rank > 0:
            self._send(self.up, ports.text(err), ports.ERROR, m)
        raise PyptoError(err)

    # --- the schedule ---------------------------------------------------------------------------
    def run(self, pieces, targets, weights, loss_fn):
        import torch

        n = len(pieces)
        last = self.rank == self.world - 1
        saved = deque()
        loss = None
        if self.rank > 0:  # a worker sends back only this step's gradients: the caller adds them
            for p in _params(self.stages):
                p.grad = None

        def forward(m):
            nonlocal loss
            if self.rank == 0:
                x = pieces[m]
            else:
                x = torch.as_tensor(self._recv(self.down)[2]).requires_grad_(True)
            ports.trace("compute", m)
            try:
                with torch.enable_grad():
                    y = self.pipe._through(self.stages, x)
                    if last:
                        y = loss_fn(y, targets[m]) * weights[m]
            except Exception:
                self._fail(m, "forward")
            ports.trace("computed", m)
            if last:
                loss = y.detach() if loss is None else loss + y.detach()
            else:
                self._send(self.down, y.detach(), ports.DATA, m)
            saved.append((m, x, y))

        def backward():
            m, x, y = saved.popleft()
            ports.trace("backward", m)
            try:
                grad = None if last else torch.as_tensor(self._recv(self.up)[2])
                y.backward(grad)
            except PyptoError:
                raise
            except Exception:
                self._fail(m, "backward")
            ports.trace("backwarded", m)
            if self.rank > 0:
                self._send(self.up, x.grad if x.grad is not None else torch.zeros_like(x), ports.DATA, m)

        warm = min(self.world - self.rank - 1, n)
        for m in range(warm):
            forward(m)
        for m in range(warm, n):
            forward(m)
            backward()
        for _ in range(warm):
            backward()
        if self.rank > 0:  # this rank's gradients (and the loss) go to rank 0, then those from further down
            if last:
                self._send(self.up, loss, _LOSS, -1)
            params = _params(self.stages)
            base = len(_params(self.pipe.stages[:self.first]))
            for i, p in enumerate(params):
                if p.grad is None:
                    self._send(self.up, ports.text(""), _NOGRAD, base + i)
                else:
                    self._send(self.up, p.grad, _GRAD, base + i)
            if not last:
                while True:
                    kind, m, v = self._recv(self.up)
                    if kind == ports.DONE:
                        break
                    self._send(self.up, v, kind, m)
            self._send(self.up, ports.text(""), ports.DONE, -1)
        return loss

    def collect(self, all_params):
        """Rank 0: the loss and every worker's parameter gradients, added to the caller's `.grad`."""
        import torch

        loss = None
        while True:
            kind, i, v = self._recv(self.up)
            if kind == ports.DONE:
                break
            if kind == _LOSS:
                loss = torch.as_tensor(v)
            elif kind == _GRAD:
                p = all_params[i]
                g = torch.as_tensor(v).to(p.dtype)
                p.grad = g if p.grad is None else p.grad + g
        return loss
