"""Shared-memory links between the pipeline's processes on one machine.

Why not gloo here: gloo's point-to-point send is a rendezvous. The data leaves the sender only
after the receiver has posted its receive, and a thread of the sender's event loop has woken up to
write it. In a pipeline the sender's core is busy computing the next micro-batch, so that thread
waits for a scheduler slice behind the compute, twice per message (a header, then the data whose
size the header gives). The receiver idles meanwhile: 2 stages of 1 ms spent ~20 ms per run
waiting (docs/guide.md, "Pipelines", has the measurements).

A link here is a one-way byte ring in memory shared by fork() (the writer copies in and moves on,
no handshake), and two pipes that carry wake-ups only: "data" from writer to reader, "space" back.
Each side publishes its position in the shared counters before it writes a wake-up byte, and a
side that waits re-checks the counters before it blocks, so no wake-up is lost; a full pipe (the
other side already has wake-ups pending) is ignored. A process that dies closes its pipe ends:
the other side reads end-of-file and reports it, and `timeout` bounds a silent one.
"""
from __future__ import annotations

import mmap
import os
import select
import time

import numpy as np

from .errors import PyptoError

RING_BYTES = 4 << 20  # per link (bigger messages go through in pieces)
_COUNTERS = 128  # head (bytes written) and tail (bytes read), each on its own cache line


class PeerGone(PyptoError):
    """The process at the other end of a link died or stayed silent past the timeout."""


class Link:
    """One direction between two processes: made before fork(), then `as_writer()` in the one
    process and `as_reader()` in the other (which closes the pipe ends each side does not use)."""

    def __init__(self, src, dst, capacity=None):
        self.src, self.dst = src, dst
        self.capacity = int(capacity or RING_BYTES)
        # shared with the processes forked later; populated now, so that no run pays the page faults
        flags = mmap.MAP_SHARED | mmap.MAP_ANONYMOUS | getattr(mmap, "MAP_POPULATE", 0)
        self.mem = mmap.mmap(-1, _COUNTERS + self.capacity, flags=flags)
        self.pos = np.frombuffer(self.mem, dtype=np.uint64, count=16)  # [0] head, [8] tail
        self.ring = np.frombuffer(self.mem, dtype=np.uint8, offset=_COUNTERS)
        self.data_r, self.data_w = os.pipe()
        self.space_r, self.space_w = os.pipe()
        self.fds = {self.data_r, self.data_w, self.space_r, self.space_w}  # still open here
        self.timeout = None
        self.freed = False  # the reader freed space and has not woken the writer yet

    def _keep(self, fds):
        for fd in self.fds - set(fds):
            os.close(fd)
        self.fds &= set(fds)
        for fd in self.fds:
            os.set_blocking(fd, False)  # waits go through select(): they have a timeout
        return self

    def as_writer(self):
        return self._keep((self.data_w, self.space_r))

    def as_reader(self):
        return self._keep((self.data_r, self.space_w))

    def close(self):
        """Close this process's pipe ends (in a process that is neither end: all four)."""
        return self._keep(())

    # --- writer ---------------------------------------------------------------------------------
    def write(self, parts, on_wait=None):
        """Copy the byte arrays `parts` (flat uint8) into the ring as one message, waiting for space
        as the reader frees it; one wake-up for the reader at the end (and before each wait).
        `on_wait()`: rank 0 drains its result link while it waits here (a cycle of full rings
        would otherwise deadlock); it returns None when it made progress, else the fds it waits on."""
        head = int(self.pos[0])
        for src in parts:
            done, n = 0, src.size
            while done < n:
                free = self.capacity - (head - int(self.pos[8]))
                if free == 0:
                    _wake(self.data_w)  # what is in the ring is published: let the reader take it
                    self._wait(self.space_r, "reading", on_wait)
                    continue
                at = head % self.capacity
                k = min(free, n - done, self.capacity - at)
                self.ring[at:at + k] = src[done:done + k]
                done += k
                head += k
                self.pos[0] = head  # publish (the wake-up below comes after)
        _wake(self.data_w)

    # --- reader ---------------------------------------------------------------------------------
    def read_into(self, dst):
        """Fill `dst` (a flat uint8 array) with the next bytes of the stream. The writer is woken
        by release() or before this waits, not after each piece."""
        done, n = 0, dst.size
        tail = int(self.pos[8])
        while done < n:
            avail = int(self.pos[0]) - tail
            if avail == 0:
                self.release()
                self._wait(self.data_r, "writing", None)
                continue
            at = tail % self.capacity
            k = min(avail, n - done, self.capacity - at)
            dst[done:done + k] = self.ring[at:at + k]
            done += k
            tail += k
            self.pos[8] = tail  # free the space
            self.freed = True

    def release(self):
        """Wake the writer if this reader freed space since it last did."""
        if self.freed:
            self.freed = False
            _wake(self.space_w)

    def ready(self):
        """Bytes are waiting to be read (without blocking)."""
        return int(self.pos[0]) != int(self.pos[8])

    def _wait(self, fd, doing, on_wait):
        """Block until `fd` has a wake-up (or, for rank 0, until `on_wait` drained something)."""
        peer = self.dst if doing == "reading" else self.src
        deadline = None if self.timeout is None else time.monotonic() + self.timeout
        while True:
            extra = on_wait() if on_wait is not None else ()
            if extra is None:  # on_wait made progress: re-check the counters
                return
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready, _, _ = select.select([fd, *extra], [], [], left)
            if fd in ready:
                try:
                    got = os.read(fd, 4096)  # drain: every pending wake-up is stale after a re-check
                except BlockingIOError:
                    return
                if not got:
                    raise PeerGone(f"pipeline: rank {peer} stopped answering (the process died)")
                return
            if not ready and left == 0.0:
                raise PeerGone(f"pipeline: rank {peer} stopped answering (silent for {self.timeout:g} s)")


def _wake(fd):
    try:
        os.write(fd, b"\x01")
    except BlockingIOError:  # the pipe is full: the other side has wake-ups pending already
        pass
    except BrokenPipeError:  # the other side is gone: its reader reports that, not the writer
        pass
