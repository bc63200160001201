"""@pypto.jit: specialise a Python kernel on its arguments' signature, trace it once per
signature, and call the compiled kernel.

Specialisation key: for arrays (rank, dtype, shape, device), for Python ints and floats only
their type (they are run-time scalar parameters, not recompiles) unless the tracer learned that
the kernel needs one as a compile-time value (a loop step, a shape, a static_range bound: an
inferred meta-parameter, remembered per kernel), for everything else the value (or identity).
Implicit inputs (arrays reached through closures, globals, attributes) and the Python constants
read through them are re-read at every call and checked against the trace."""
from __future__ import annotations

import atexit
import functools
import inspect
import numbers
import os
import sys
import threading
import weakref
from typing import NamedTuple
from time import perf_counter_ns as _now

import numpy as np

from . import autograd as _autograd
from . import profile as _profile
from . import _C, interop
from .compiled import CompiledKernel, Lowered
from .frontend.errors import ArgumentError, KernelSourceError, PyptoError
from .frontend.source import SourceInfo
from .frontend.trace import trace_kernel
from .tensor import Tensor

_TILE_KEYS = {"m": "mm_tile_m", "n": "mm_tile_n", "k": "mm_tile_k", "rows": "tile_rows", "cols": "tile_cols",
              "mm_tile_m": "mm_tile_m", "mm_tile_n": "mm_tile_n", "mm_tile_k": "mm_tile_k",
              "tile_rows": "tile_rows", "tile_cols": "tile_cols"}


def default_backend():
    return "interp" if os.environ.get("PYPTO_INTERPRET", "") not in ("", "0") else "cpu"


def _static_key(a):
    """Key of a value that is part of the kernel's compile-time state."""
    t = type(a)
    if t in (int, float, bool, str, bytes) or a is None:
        return (t, a)
    if t in (tuple, list):
        return (t, tuple(_static_key(e) for e in a))
    if t is dict:
        return (t, tuple((k, _static_key(v)) for k, v in a.items()))
    if interop.is_array(a):
        return interop.array_key(a)
    try:
        hash(a)
        return ("h", a)
    except TypeError:
        return ("id", id(a))


_torch_tensor = None  # torch.Tensor once torch is imported (it is optional)


def _torch_compiling():
    """True while torch.compile / torch.export traces the caller (dynamo folds is_compiling)."""
    torch = sys.modules.get("torch")
    return torch is not None and torch.compiler.is_compiling()


def _bind_torch(torch):
    """torch is imported: its compile check replaces the sys.modules look-up above, and the
    custom-op glue is loaded (outside any compiled region, as dynamo wants)."""
    global _torch_tensor, _torch_compiling, _torch_ops
    if _torch_ops is None:
        from . import torch_ops
        _torch_ops = torch_ops
        if os.environ.get("PYPTO_SHARE_THREADS", "1") != "0":
            _C.share_threads_with_openmp()  # parallel loops on torch's OpenMP threads
    _torch_tensor = torch.Tensor
    _torch_compiling = torch.compiler.is_compiling


_torch_ops = None
_live_kernels = weakref.WeakSet()


@atexit.register
def _release_compiled():
    """Drop the compiled kernels before the interpreter tears the bindings down: references kept
    alive past that point (torch.compile's caches hold kernels) would be reported as leaks."""
    for k in list(_live_kernels):
        k._cache.clear()
    from . import eager
    eager._cache.clear()


def _call_traced(kernel, args, kwargs):
    if _torch_ops is None:
        raise PyptoError(f"kernel '{kernel.__name__}' was made before torch was imported and is first "
                         "called while torch compiles: call it once outside torch.compile, or import "
                         "torch before making the kernel")
    return _torch_ops.call_traced(kernel, args, kwargs)




def arg_key(a):
    """Key of one top-level argument (fast paths first: this runs on every call)."""
    t = type(a)
    if t is _torch_tensor:
        return ("torch", a.dtype, a.shape, a.is_cpu)
    if t is np.ndarray:
        return (t, a.dtype, a.shape)
    if t is int or t is float:
        return t
    if t is Tensor:
        return (t, a._dtype, a._data.shape)
    torch = sys.modules.get("torch")
    if torch is not None:
        _bind_torch(torch)
        if isinstance(a, torch.Tensor):
            return ("torch", a.dtype, a.shape, a.is_cpu)
    if t is bool or a is None:
        return (t, a)
    if isinstance(a, numbers.Real) and not interop.is_array(a):
        return float if not isinstance(a, numbers.Integral) else int
    return _static_key(a)


class CacheInfo(NamedTuple):
    """What `kernel.cache_info()` reports: `size` compiled variants; `specialised` maps each
    argument the kernel specialises on its value to the kernel line that needed it at compile
    time; `variants` lists, per compiled variant, the values of those arguments it was built for."""
    size: int
    specialised: dict
    variants: list


def _options(fusion, tiles, parallel, double_buffer, promote=True):
    o = {"parallel": bool(parallel), "double_buffer": bool(double_buffer), "promote": bool(promote)}
    if fusion == "off":  # not even elementwise chains fuse
        o["fusion"] = False
        o["fusion_off"] = True
    elif isinstance(fusion, (list, tuple)):
        o["fusion"] = bool(fusion)
        o["fusion_ops"] = [str(f) for f in fusion]
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
            if k not in _TILE_KEYS:
                raise PyptoError(f"unknown tile size '{k}' (known: m, n, k, rows, cols)")
            if not isinstance(v, int) or v <= 0:
                raise PyptoError(f"tile size '{k}' must be a positive int, got {v!r}")
            o[_TILE_KEYS[k]] = v
    return o


def _follow_profiling(on):
    JitFunction._profile_calls = on


_profile.state.listeners.append(_follow_profiling)


# A fork() while another thread traces or compiles leaves that thread's lock held in the child,
# where no thread would ever release it: the child gets fresh locks.
def _fresh_locks_in_child():
    for k in list(_live_kernels):
        k._lock = threading.RLock()


os.register_at_fork(after_in_child=_fresh_locks_in_child)


class JitFunction:
    """A kernel: call it with arrays (NumPy, torch, pypto.Tensor, DLPack) and Python values."""

    _pypto_jit = True
    # Whether calls run profiled: one attribute look-up on the call path. Class-wide, it follows
    # PYPTO_PROFILE and open pypto.profiling() regions; a kernel made with profile=True sets it
    # on itself.
    _profile_calls = _profile.state.on

    def __init__(self, fn, *, fusion=False, backend=None, tiles=None, parallel=True, double_buffer=True,
                 promote=True, alignment=None, profile=False):
        if isinstance(fn, JitFunction):
            fn = fn.__wrapped__
        if not inspect.isfunction(fn) and not inspect.ismethod(fn) and inspect.ismethod(getattr(fn, "forward", None)):
            fn = fn.forward  # an nn.Module: its forward, the module's tensors as implicit inputs
        self._self = None
        func = fn
        if inspect.ismethod(fn):
            self._self, func = fn.__self__, fn.__func__
        if not inspect.isfunction(func):
            raise PyptoError(f"pypto.jit expects a Python function or bound method, got {type(fn).__name__}")
        functools.update_wrapper(self, fn)
        self.__wrapped__ = fn
        if backend not in (None, "cpu", "interp"):
            raise PyptoError(f"unknown backend {backend!r} (expected 'cpu' or 'interp')")
        self._func = func
        self._signature = inspect.signature(func)
        params = list(self._signature.parameters.values())
        for p in params:
            if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
                raise PyptoError(f"kernel '{func.__qualname__}': unsupported construct in a kernel: star-args "
                                 f"(*{p.name} / **{p.name}) in the signature")
        self._names = [p.name for p in params]
        self._k0 = 1 if self._self is not None else 0
        self._n = len(params) - self._k0
        self._backend = backend or default_backend()  # PYPTO_INTERPRET is read when the kernel is made
        self._options = _options(fusion, tiles, parallel, double_buffer, promote)
        self._made_with = dict(fusion=fusion, backend=backend, tiles=tiles, parallel=parallel,
                               double_buffer=double_buffer, promote=promote, alignment=alignment,
                               profile=profile)
        if profile:
            self._profile_calls = True  # shadows the class-wide flag below
        if alignment is not None and (not isinstance(alignment, int) or isinstance(alignment, bool)
                                      or alignment < 1 or alignment & (alignment - 1)):
            raise PyptoError(f"alignment must be a power of two (bytes), got {alignment!r}")
        self._alignment = alignment if alignment and alignment > 1 else None
        self._cache = {}
        self._static_args = set()
        self._static_reasons = {}  # arg index -> "file:line: why its value is needed at compile time"
        self._unroll = set()
        self._src = None
        self._lock = threading.RLock()  # held while tracing and compiling: one trace per signature
        self._vjp = None  # a hand-written backward (@kernel.defvjp)
        torch = sys.modules.get("torch")
        if torch is not None and _torch_ops is None:
            _bind_torch(torch)
        _live_kernels.add(self)

    def _source(self):
        if self._src is None:
            self._src = SourceInfo(self._func)
        return self._src

    # --- binding -----------------------------------------------------------------------------
    def _bind(self, args, kwargs):
        try:
            if self._self is not None:
                b = self._signature.bind(self._self, *args, **kwargs)
            else:
                b = self._signature.bind(*args, **kwargs)
        except TypeError as e:
            raise ArgumentError(f"{self._func.__qualname__}() takes arguments ({', '.join(self._names[self._k0:])}): "
                                f"{e}") from None
        b.apply_defaults()
        return tuple(b.arguments[n] for n in self._names)

    def _full_args(self, args, kwargs):
        if not kwargs and len(args) == self._n:
            return (self._self,) + args if self._k0 else args
        return self._bind(args, kwargs)

    def _key(self, args):
        static = self._static_args
        if not static:
            if self._k0:
                return tuple([arg_key(a) for a in args[1:]])
            return tuple([arg_key(a) for a in args])
        return tuple(_static_key(a) if i in static else arg_key(a)
                     for i, a in enumerate(args) if i >= self._k0)

    # --- calling -------------------------------------------------------------------------------
    def _cached_entry(self, key, args):
        for e in self._cache.get(key, ()):
            if e.simple:
                return e, ()
            imp = e.implicit_inputs(args)
            if imp is not None:
                return e, imp
        return None

    def _entry(self, args):
        backend = self._backend
        key = self._key(args)
        e = self._cached_entry(key, args)
        if e is not None:
            return e
        with self._lock:
            # Another thread may have traced and compiled this signature while we waited.
            e = self._cached_entry(self._key(args), args)  # the key may have learned static args
            if e is not None:
                return e
            try:
                e = self._compile(args, backend)
            except KernelSourceError as err:
                # The message names the kernel's line; the tracer's own frames would only distract.
                raise err.with_traceback(None) from None
        imp = e.implicit_inputs(args) if not e.simple else ()
        if imp is None:
            raise PyptoError(f"kernel '{self.__name__}': its implicit inputs changed while it was traced")
        return e, imp

    def _compile(self, args, backend):
        t0 = _now()
        src = self._source()
        trace = trace_kernel(src, self._names, args, self._static_args, self._unroll, backend,
                             self._static_reasons)
        entry = CompiledKernel(trace, backend, self._options, args, src.name)
        entry.specialised = {self._names[i]: args[i] for i in sorted(self._static_args)
                             if i >= self._k0}
        entry.built_at_ns = _now()
        entry.build_seconds = (entry.built_at_ns - t0) / 1e9
        self._cache.setdefault(self._key(args), []).append(entry)
        return entry

    def __call__(self, *args, **kwargs):
        if _torch_compiling():  # a torch.library custom op in the graph (torch_ops.py)
            return _call_traced(self, args, kwargs)
        t0 = _now()  # the call's wall time for get_last_profile (dynamo cannot trace clocks: after its check)
        if kwargs or len(args) != self._n:
            args = self._bind(args, kwargs)
        elif self._k0:
            args = (self._self,) + args
        if self._alignment:
            _profile.check_alignment(self, args[self._k0:])
        if _autograd.wants_grad(args):
            _profile.forget()
            return _autograd.call(self, args)
        if self._profile_calls:
            return self._profiled_call(args, t0)
        entries = self._cache.get(self._key(args))
        if entries is not None:
            e = entries[0]
            if e.fast is not None:
                out = e.fast(args)
                _profile.record(e, t0, t0)
                return out
            if e.simple:
                out = e.run(args, ())
                _profile.record(e, t0, t0)
                return out
        e, imp = self._entry(args)
        if imp and _autograd.wants_grad(imp):  # an implicit input (a module's weight) requires grad
            _profile.forget()
            return _autograd.call(self, args)
        t_run = _now()
        out = e.run(args, imp)
        _profile.record(e, t0, t_run)
        return out

    def _profiled_call(self, args, t0):
        e, imp = self._entry(args)
        if imp and _autograd.wants_grad(imp):
            _profile.forget()
            return _autograd.call(self, args)
        if e.backend == "cpu":
            e.kernel.compile_profiling()  # before the clock starts: once per kernel (or from the disk cache)
        t_run = _now()
        out = e.run(args, imp, profiled=True)
        _profile.record(e, t0, t_run, e.last_spans)
        return out

    def profile(self, *args, **kwargs):
        """Run once on the profiling variant and return the pypto.Profile (per-nest times, FLOPs,
        bytes, rates; `.result` holds what the call returned)."""
        t0 = _now()
        args = self._full_args(args, kwargs)
        if self._alignment:
            _profile.check_alignment(self, args[self._k0:])
        out = self._profiled_call(args, t0)
        p = _profile.get_last_profile()
        p.result = out
        return p

    def with_options(self, **changes):
        """A new kernel from the same function with some jit options changed (e.g. tiles=...)."""
        return JitFunction(self.__wrapped__, **{**self._made_with, **changes})

    def lower(self, *args, **kwargs):
        """Trace and lower for these example arguments (without running); `.as_text(level)` shows
        the program at "tensor", "tile", "isa" or "source" level."""
        args = self._full_args(args, kwargs)
        e, _ = self._entry(args)
        return Lowered(e)

    def lower_backward(self, *args, **kwargs):
        """The derived backward kernel for these example arguments; `.as_text(level)` shows it."""
        return self.lower(*args, **kwargs).backward()

    def defvjp(self, backward):
        """Register a hand-written backward, used instead of the derived one (torch autograd,
        pypto.grad/vjp, pto_autograd): `backward(*args, out, grad_out)` returns one gradient (or
        None) per argument; `out`/`grad_out` are tuples when the kernel returns several tensors.

            @my_kernel.defvjp
            def my_kernel_backward(x, w, out, grad): return grad @ w.T, x.T @ grad
        """
        self._vjp = backward
        return backward

    # --- misc ----------------------------------------------------------------------------------
    def clear_cache(self):
        self._cache.clear()

    @property
    def cache_size(self):
        return sum(len(v) for v in self._cache.values())

    def cache_info(self):
        """How many variants are compiled and why (see CacheInfo): an int argument the kernel
        needs as a compile-time value (loop step, shape, static_range bound) is specialised on
        its value, so each value seen is one variant."""
        with self._lock:
            entries = [e for v in self._cache.values() for e in v]
            why = {self._names[i]: r for i, r in sorted(self._static_reasons.items())}
            return CacheInfo(len(entries), why, [dict(getattr(e, "specialised", {})) for e in entries])

    # Identity equality, stated so torch's pytree can pass a kernel as a constant.
    def __eq__(self, other):
        return self is other

    def __hash__(self):
        return id(self)

    def __get__(self, obj, objtype=None):
        if obj is None:
            return self
        return _BoundKernel(self, obj)

    def __repr__(self):
        return f"<pypto.jit kernel {self._func.__qualname__}>"


class _BoundKernel:
    """A @pypto.jit method looked up on an instance: the instance is the first argument (its
    arrays are implicit inputs, re-read at every call)."""

    _pypto_jit = True

    def __init__(self, kernel, obj):
        self._kernel = kernel
        self._self = obj
        self._signature = kernel._signature
        self.__wrapped__ = kernel.__wrapped__.__get__(obj)

    def _source(self):
        return self._kernel._source()

    def __call__(self, *args, **kwargs):
        return self._kernel(self._self, *args, **kwargs)

    def lower(self, *args, **kwargs):
        return self._kernel.lower(self._self, *args, **kwargs)

    def __repr__(self):
        return f"<bound pypto.jit kernel {self._kernel._func.__qualname__} of {self._self!r}>"


def jit(fn=None, *, fusion=False, backend=None, tiles=None, parallel=True, double_buffer=True, promote=True,
        alignment=None, profile=False, autotune=False):
    """Compile a Python function into a PyPTO kernel.

        @pypto.jit
        def f(x, w): ...
        @pypto.jit(fusion=True, backend="interp", tiles={"m": 64, "n": 64, "k": 64})
        def g(...): ...
        @pypto.jit(alignment=64)   # array arguments whose address is not a multiple of 64 raise
        def h(...): ...
        @pypto.jit(profile=True)   # every call runs the profiling variant: per-nest times
        def p(...): ...
        @pypto.jit(autotune=True)  # matmul tile sizes tuned per shape, the choice kept in the cache
        def t(...): ...
        compute = pypto.jit(self._compute)   # bound methods work: self.* arrays are implicit inputs
    """
    def wrap(f):
        k = JitFunction(f, fusion=fusion, backend=backend, tiles=tiles, parallel=parallel,
                        double_buffer=double_buffer, promote=promote, alignment=alignment, profile=profile)
        if autotune:
            from .autotune import Autotuned
            return Autotuned(k, configs=None)
        return k
    if fn is None:
        return wrap
    return wrap(fn)


if "torch" in sys.modules:
    _bind_torch(sys.modules["torch"])
