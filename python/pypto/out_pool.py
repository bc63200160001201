"""Reuse of large NumPy result buffers between kernel calls.

A result of tens of MiB allocated afresh by each call is a fresh mapping: the first touch of each
page faults and the kernel zero-fills it (for a 64 MiB result, 64 MiB of zeros written through
the caches, then overwritten by the kernel's own stores, the first write evicted to memory at the
cost of a third stream of traffic). For a memory-bound kernel that is about as long as the kernel
itself. Results of at least MIN_BYTES therefore come from slabs this module keeps: a slab whose
arrays are all gone (its reference count shows no array based on it) is handed out again for a
result of the same size, already mapped. Contents are undefined, as np.empty's.

At most MAX_BYTES of slabs are kept (PYPTO_OUTPUT_POOL_MB; 0 turns reuse off); beyond it results
are plain np.empty arrays, and free slabs are dropped first to make room."""
from __future__ import annotations

import os
import sys

import numpy as np

from . import _C
from .errors import PyptoError

MIN_BYTES = 4 << 20  # below this malloc's own free lists reuse memory, and a call is short


def _max_bytes() -> int:
    v = os.environ.get("PYPTO_OUTPUT_POOL_MB", "").strip()
    if not v:
        return 1 << 30
    if not v.isdigit():
        raise PyptoError(f"PYPTO_OUTPUT_POOL_MB={v!r}: expected a number of MiB (0: no reuse)")
    return int(v) << 20


MAX_BYTES = None  # read from the environment at the first large result
_ALIGN = 64
_slabs: list = []  # every slab kept, in use or free
_kept = 0  # their bytes


def _refs_when_free() -> int:
    """sys.getrefcount of a slab no array is based on, taken as the loops below take it (a list's
    reference, the loop variable's, the argument's): measured, not assumed per Python version."""
    for s in [np.empty(1, np.uint8)]:
        return sys.getrefcount(s)
    return 0


_FREE_REFS = _refs_when_free()


def empty(shape, dtype) -> np.ndarray:
    """np.empty(shape, dtype) for a result of at least MIN_BYTES, from a free slab of its size
    where there is one (64-byte aligned)."""
    global _kept, MAX_BYTES
    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if MAX_BYTES is None and nbytes >= MIN_BYTES:
        MAX_BYTES = _max_bytes()
    if nbytes < MIN_BYTES or MAX_BYTES == 0:
        return np.empty(shape, dtype)
    size = nbytes + _ALIGN
    found = None
    for s in _slabs:
        if s.nbytes == size and sys.getrefcount(s) <= _FREE_REFS:
            found = s
            break
    if found is None:
        if _kept + size > MAX_BYTES:  # make room: drop free slabs, the oldest first
            for s in list(_slabs):
                if _kept + size <= MAX_BYTES:
                    break
                if sys.getrefcount(s) <= _FREE_REFS:
                    _slabs.remove(s)
                    _kept -= s.nbytes
            s = None  # (not `del s`: with no slab kept the loop never bound it)
        if _kept + size > MAX_BYTES:
            return np.empty(shape, dtype)
        found = np.empty(size, np.uint8)
        _slabs.append(found)
        _kept += size
    off = -found.ctypes.data % _ALIGN
    return found[off:off + nbytes].view(dtype).reshape(shape)


_C.set_output_pool(empty, MIN_BYTES)  # the C++ call path's NumPy results (bind_dispatch.cpp)
