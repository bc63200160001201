"""Eager mode: a pypto op called outside any kernel on arrays runs a small kernel built for that
op and argument signature (compiled once, cached like any kernel)."""
from __future__ import annotations

import atexit
import threading

from . import interop
from .compiled import CompiledKernel
from .errors import PyptoError
from .frontend.trace import Trace, describe_result
from .frontend.tracer import Tracer
from .specialize import compile_options, default_backend, static_key

_cache = {}
_lock = threading.Lock()
# Drop the compiled kernels before the interpreter tears the bindings down (as jit.py does).
atexit.register(_cache.clear)


def _flatten(args, kwargs):
    """Arrays among the arguments (also inside top-level lists/tuples), in a fixed order."""
    found = []

    def visit(v):
        if interop.is_array(v):
            found.append(v)
        elif isinstance(v, (list, tuple)):
            for x in v:
                if interop.is_array(x):
                    found.append(x)
    for a in args:
        visit(a)
    for k in sorted(kwargs):
        visit(kwargs[k])
    return found


def _substitute(v, it):
    if interop.is_array(v):
        return next(it)
    if isinstance(v, (list, tuple)):
        return type(v)(next(it) if interop.is_array(x) else x for x in v)
    return v


def call_eager(fn, args, kwargs):
    arrays = _flatten(args, kwargs)
    backend = default_backend()
    key = (fn, backend, static_key(tuple(args)), static_key(dict(sorted(kwargs.items()))))
    entry = _cache.get(key)
    if entry is None:
        with _lock:
            entry = _cache.get(key) or _build(fn, args, kwargs, arrays, backend)
            _cache[key] = entry
    arrays = tuple(arrays)
    # Implicit inputs of an eager op: only a fresh random seed (pypto.dropout, rand_like), drawn anew.
    return entry.run(arrays, entry.implicit_inputs(arrays) if entry.implicit else ())


def _build(fn, args, kwargs, arrays, backend):
    name = getattr(fn, "__name__", "op")
    tr = Tracer(f"eager_{name}", backend=backend)
    tr.seed_from_torch = any(interop.array_kind(a) == interop.TORCH for a in arrays)
    with tr:
        params = iter([tr.tensor_param(f"x{i}", a, ("arg", i)) for i, a in enumerate(arrays)])
        targs = [_substitute(a, params) for a in args]
        tkw = {k: _substitute(kwargs[k], params) for k in sorted(kwargs)}
        result = fn(*targs, **tkw)
        outputs, template = describe_result(tr, result)
        program = tr.finish(outputs)
    trace = Trace(tr, program, outputs, template)
    try:
        return CompiledKernel(trace, backend, compile_options(False, None, True, True), tuple(arrays), f"pypto.{name}")
    except PyptoError:
        raise
