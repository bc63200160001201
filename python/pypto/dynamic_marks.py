"""pypto.mark_dynamic and the dynamic= option of pypto.jit: which dimensions of which arguments a
kernel compiles as dimension symbols (jit.py's _dynamic_dims reads both)."""
from __future__ import annotations

import weakref

from . import _C, interop
from .errors import PyptoError

# pypto.mark_dynamic: id(array) -> (weak reference or the array, dims)
marks = {}


def mark_dynamic(t, dim):
    """Compile the next kernel call that receives `t` with dimension `dim` (an int or a list;
    negative counts from the end) as a dynamic dimension: one kernel for every extent of it."""
    if not interop.is_array(t):
        raise PyptoError(f"pypto.mark_dynamic expects an array (NumPy, torch, pypto.Tensor), got {type(t).__name__}")
    _, shape = interop.array_info(t, "pypto.mark_dynamic's argument")
    dims = dim if isinstance(dim, (list, tuple)) else [dim]
    norm = set()
    for d in dims:
        if not isinstance(d, int) or not -len(shape) <= d < len(shape):
            raise PyptoError(f"pypto.mark_dynamic: dimension {d!r} is out of range for shape {tuple(shape)}")
        norm.add(d % len(shape))
    key = id(t)
    old = marks.get(key)
    if old is not None and _marked_object(old) is t:
        norm |= old[1]
    try:
        ref = weakref.ref(t, lambda _r, k=key: _unmark(k))
    except TypeError:
        ref = t
    marks[key] = (ref, norm)
    _C.set_dynamic_marks(True)  # the C++ call path leaves dynamic variants to _dynamic_dims
    return t


def _unmark(key):
    marks.pop(key, None)
    _C.set_dynamic_marks(bool(marks))


def _marked_object(entry):
    ref = entry[0]
    return ref() if isinstance(ref, weakref.ref) else ref


def marked_dims(a):
    e = marks.get(id(a))
    if e is None or _marked_object(e) is not a:
        return None
    return e[1]


def parse_dynamic(dynamic, names, k0):
    """dynamic= of pypto.jit -> (mode, {arg index: set of dims or None for all})."""
    if dynamic is None:
        return "auto", {}
    if dynamic is False:
        return "off", {}
    if dynamic is True:
        return "all", {}
    if isinstance(dynamic, dict):
        out = {}
        for name, dims in dynamic.items():
            if name not in names[k0:]:
                raise PyptoError(f"dynamic={{...}} names '{name}', which is not an argument of the kernel "
                                 f"(arguments: {', '.join(names[k0:])})")
            if dims is True or dims is None:
                out[names.index(name)] = None
                continue
            dims = dims if isinstance(dims, (list, tuple, set)) else [dims]
            if not all(isinstance(d, int) and not isinstance(d, bool) for d in dims):
                raise PyptoError(f"dynamic={{'{name}': ...}} expects a list of dimension indices, got {dims!r}")
            out[names.index(name)] = set(dims)
        return "dict", out
    raise PyptoError(f"dynamic must be True, False, None or a dict {{argument: [dims]}}, got {dynamic!r}")
