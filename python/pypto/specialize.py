"""Specialisation: what a compiled kernel is specialised on besides its argument types. The
compile options of a kernel (fusion, tiles, parallel, double buffering), the default backend and
the cache key of a value that is part of a kernel's compile-time state. Shared by @pypto.jit
(jit.py), eager ops (eager.py) and the torch.compile glue (torch_ops.py)."""
from __future__ import annotations

import os

from . import _C, interop
from .errors import PyptoError

TILE_KEYS = {"m": "mm_tile_m", "n": "mm_tile_n", "k": "mm_tile_k", "rows": "tile_rows", "cols": "tile_cols",
             "mm_tile_m": "mm_tile_m", "mm_tile_n": "mm_tile_n", "mm_tile_k": "mm_tile_k",
             "tile_rows": "tile_rows", "tile_cols": "tile_cols"}


def default_backend():
    return "interp" if os.environ.get("PYPTO_INTERPRET", "") not in ("", "0") else "cpu"


def static_key(a):
    """Key of a value that is part of the kernel's compile-time state."""
    t = type(a)
    if t in (int, float, bool, str, bytes) or a is None:
        return (t, a)
    if t in (tuple, list):
        return (t, tuple(static_key(e) for e in a))
    if t is dict:
        return (t, tuple((k, static_key(v)) for k, v in a.items()))
    if interop.is_array(a):
        return interop.array_key(a)
    try:
        hash(a)
        return ("h", a)
    except TypeError:
        return ("id", id(a))


DEFAULT_UNFUSED = ("matmul", "conv2d")


def backward_options(options):
    """The compile options of a derived backward: a fusion list also fuses what the default list
    fuses. The list was written for the forward's ops; the backward's are others (a relu's mask
    and select, a norm's reductions), which would otherwise each make a pass over memory."""
    ops = options.get("fusion_ops")
    if not ops:
        return options
    default = [n for n in _C.fusion_names() if n not in DEFAULT_UNFUSED]
    return dict(options, fusion_ops=list(dict.fromkeys([*ops, *default])))


def compile_options(fusion, tiles, parallel, double_buffer, promote=True):
    o = {"parallel": bool(parallel), "double_buffer": bool(double_buffer), "promote": bool(promote)}
    if fusion is None:  # the default: every kind but the matrix ops (their own nests, packed tiles)
        fusion = [n for n in _C.fusion_names() if n not in DEFAULT_UNFUSED]
    if fusion == "off":  # nothing fuses, not even inside a composite op
        o["fusion"] = False
        o["fusion_off"] = True
    elif isinstance(fusion, (list, tuple)):
        names = [str(f) for f in fusion]
        known = _C.fusion_names()
        for n in names:
            if n not in known:
                raise PyptoError(f"fusion: unknown kind of op {n!r} (known: {', '.join(known)})")
        o["fusion"] = bool(fusion)
        o["fusion_ops"] = names
    else:
        o["fusion"] = bool(fusion)
    if tiles is not None:
        if isinstance(tiles, (tuple, list)):
            if len(tiles) != 3:
                raise PyptoError("tiles=(m, n, k) needs three sizes; or pass a dict like {'m': 64, 'n': 64, 'k': 64}")
            tiles = dict(zip("mnk", tiles))
        if not isinstance(tiles, dict):
            raise PyptoError("tiles must be a dict like {'m': 64, 'n': 64, 'k': 64, 'rows': 32, 'cols': 256}")
        for k, v in tiles.items():
            if k not in TILE_KEYS:
                raise PyptoError(f"unknown tile size '{k}' (known: m, n, k, rows, cols)")
            if not isinstance(v, int) or v <= 0:
                raise PyptoError(f"tile size '{k}' must be a positive int, got {v!r}")
            o[TILE_KEYS[k]] = v
    return o
