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
from . import sim as _sim
from . import _C, interop
from .compiled import CompiledKernel, Lowered
from .errors import ArgumentError, KernelSourceError, PyptoError
from .dynamic_marks import mark_dynamic, marked_dims, marks, parse_dynamic  # noqa: F401 (pypto.mark_dynamic)
from .frontend.native import signature_names, user_call
from .frontend.source import SourceInfo
from .frontend.trace import trace_kernel
from .specialize import compile_options, default_backend, static_key
from .tensor import Tensor

# The compile options, the default backend and the cache key of compile-time values live in
# specialize.py (eager.py and torch_ops.py use them too).
_options, _static_key = compile_options, static_key


_torch_tensor = None  # torch.Tensor once torch is imported (it is optional)
_torch_parameter = None  # torch.nn.Parameter (the C++ call path takes both)
_MISS = _C.dispatch_miss  # what the C++ call path returns for a call it leaves to the Python path


def _torch_compiling():
    """True while torch.compile / torch.export traces the caller (dynamo folds is_compiling)."""
    torch = sys.modules.get("torch")
    return torch is not None and torch.compiler.is_compiling()


def _bind_torch(torch):
    """torch is imported: its compile check replaces the sys.modules look-up above, and the
    custom-op glue is loaded (outside any compiled region, as dynamo wants)."""
    global _torch_tensor, _torch_parameter, _torch_compiling, _torch_ops
    if _torch_ops is None:
        torch.utils._pytree.register_constant(JitFunction)  # a kernel passes through nonstrict_trace as is
        from . import torch_ops  # needs torch, which is optional: loaded once torch is
        _torch_ops = torch_ops
        if os.environ.get("PYPTO_SHARE_THREADS", "1") != "0":
            _C.share_threads_with_openmp()  # parallel loops on torch's OpenMP threads
    _torch_tensor = torch.Tensor
    _torch_parameter = torch.nn.Parameter
    _torch_compiling = torch.compiler.is_compiling
    _C.bind_torch(torch.Tensor, torch.nn.Parameter, torch.empty, torch.is_grad_enabled, _torch_glue(torch))


_torch_ops = None
_live_kernels = weakref.WeakSet()


def _torch_glue(torch):
    """pypto._torch_glue's C interface, when it was built (with torch installed at build time)
    against this torch version; else None (torch tensors are read through their attributes)."""
    if os.environ.get("PYPTO_TORCH_GLUE", "1") == "0":
        return None
    try:
        from . import _torch_glue  # loads libtorch: only once torch is imported
    except ImportError:
        return None
    return _torch_glue.api if _torch_glue.torch_version == torch.__version__ else None


@atexit.register
def _release_compiled():
    """Drop the compiled kernels before the interpreter tears the bindings down: references kept
    alive past that point (torch.compile's caches hold kernels) would be reported as leaks."""
    for k in list(_live_kernels):
        k._cache.clear()
        k._dispatch = _NoDispatch()  # (a _C object, as the kernels in the cache)
    _C.clear_last_calls()


class _NoDispatch:
    """A kernel's C++ call path after exit: every call takes the Python path."""
    fast_calls = 0

    def __call__(self, args):
        return _MISS

    def add(self, *spec):
        pass

    def clear(self):
        pass


def _call_traced(kernel, args, kwargs):
    if _torch_ops is None:
        raise PyptoError(f"kernel '{kernel.__name__}' was made before torch was imported and is first "
                         "called while torch compiles: call it once outside torch.compile, or import "
                         "torch before making the kernel")
    return _torch_ops.call_traced(kernel, args, kwargs)




def _call_with_module_hooks(kernel, m, args, kwargs):
    """pypto.jit(module)(*args) with the module's forward pre-hooks and forward hooks, run as
    torch's Module.__call__ runs them (in registration order; a hook's non-None result replaces
    the arguments or the output; with_kwargs hooks see and may replace the keyword arguments)."""
    for hid, hook in list(m._forward_pre_hooks.items()):
        if hid in m._forward_pre_hooks_with_kwargs:
            r = hook(m, args, kwargs)
            if r is not None:
                if not (isinstance(r, tuple) and len(r) == 2):
                    raise RuntimeError(f"forward pre-hook must return None or a tuple of (new_args, new_kwargs), "
                                       f"but got {r}.")
                args, kwargs = r
        else:
            r = hook(m, args)
            if r is not None:
                args = r if isinstance(r, tuple) else (r,)
    out = kernel._call_without_hooks(args, kwargs)
    for hid, hook in list(m._forward_hooks.items()):
        r = hook(m, args, kwargs, out) if hid in m._forward_hooks_with_kwargs else hook(m, args, out)
        if r is not None:
            out = r
    return out


def _has_empty(args):
    return any(interop.is_array(a) and 0 in interop.array_info(a)[1] for a in args)


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
    time; `variants` lists, per compiled variant, the values of those arguments it was built for.
    Dynamic shapes: `dynamic` lists per variant the dims compiled as symbols ({arg: [dims]}, empty
    for a static variant) and `why` per variant the reason (dynamic=..., mark_dynamic, automatic,
    or "static shapes"); `static_dims` maps (arg, dim) pairs the kernel needs as compile-time
    values to the kernel line that needed them. `fast_calls` counts the calls the C++ call path
    ran whole (the rest took the Python path: first calls, autograd, profiling, other argument
    kinds, errors)."""
    size: int
    specialised: dict
    variants: list
    dynamic: list = []
    why: list = []
    static_dims: dict = {}
    fast_calls: int = 0


def _follow_profiling(on):
    JitFunction._profile_calls = on
    _C.set_dispatch_profiling(on)  # profiled calls take the Python path


_profile.state.listeners.append(_follow_profiling)
_C.set_dispatch_profiling(_profile.state.on)

# Argument kinds of the C++ call path's specs (bind_dispatch.cpp's Kind), and the values it
# compares (compile-time arguments, bools, None, strings: keyed by value).
_SPEC_TORCH, _SPEC_NUMPY, _SPEC_INT, _SPEC_FLOAT, _SPEC_VALUE = range(5)
_VALUE_TYPES = (bool, type(None), int, float, str)


def _arg_specs(args, static, dyn):
    """Per argument, what the C++ call path matches to reach the variant these arguments reached
    (the signature key of arg_key / _dyn_key: dyn maps an argument to its dims compiled as
    symbols, numbered by the classes of their extents), or None when it cannot."""
    specs, classes = [], {}
    for i, a in enumerate(args):
        t = type(a)
        if i in static or t is bool or a is None or t is str:
            if t not in _VALUE_TYPES:
                return None
            specs.append((_SPEC_VALUE, a, None))
            continue
        if t is int or t is float:
            specs.append((_SPEC_INT if t is int else _SPEC_FLOAT, None, None))
            continue
        if t is np.ndarray:
            kind = _SPEC_NUMPY
        elif (t is _torch_tensor or t is _torch_parameter) and t is not None and a.is_cpu:
            kind = _SPEC_TORCH
        else:
            return None
        shape = tuple(a.shape)
        dims = dyn.get(i)
        if dims:
            shape = tuple(-1 - classes.setdefault(n, len(classes)) if d in dims else n for d, n in enumerate(shape))
        specs.append((kind, a.dtype, shape))
    return specs


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

    def __init__(self, fn, *, fusion=None, backend=None, tiles=None, parallel=True, double_buffer=True,
                 promote=True, alignment=None, profile=False, sim_target=None, dynamic=None):
        if isinstance(fn, JitFunction):
            fn = fn.__wrapped__
        # pypto.jit(module) calls as module(x) does, with the module's own hooks; pypto.jit(module.forward)
        # as module.forward(x) does, without them (submodules' hooks run either way: they are called).
        self._hooks_of = None
        if not inspect.isfunction(fn) and not inspect.ismethod(fn) and inspect.ismethod(getattr(fn, "forward", None)):
            self._hooks_of = fn if hasattr(fn, "_forward_hooks") else None
            fn = fn.forward  # an nn.Module: its forward, the module's tensors as implicit inputs
        self._self = None
        func = fn
        if inspect.ismethod(fn):
            self._self, func = fn.__self__, fn.__func__
        if not inspect.isfunction(func):
            raise PyptoError(f"pypto.jit expects a Python function or bound method, got {type(fn).__name__}")
        functools.update_wrapper(self, fn)
        self.__wrapped__ = fn
        if backend not in (None, "cpu", "interp", "sim"):
            raise PyptoError(f"unknown backend {backend!r} (expected 'cpu', 'interp' or 'sim')")
        if sim_target is not None and backend != "sim":
            raise PyptoError("sim_target= describes the simulated NPU: it needs backend='sim'")
        self._sim_target = _sim.target_text(sim_target)
        self._func = func
        self._signature = inspect.signature(func)
        # A function with *args / **kwargs is traced by running it (frontend/native.py); *args
        # takes no values (_bind refuses them), **kwargs is one more argument: the dict of a call's
        # extra keywords (its arrays kernel inputs, its other values part of the cache key).
        self._names = signature_names(self._signature)
        self._star = [p.name for p in self._signature.parameters.values() if p.name not in self._names]
        # a call binds its arguments by the signature (its positional count proves nothing)
        self._bind_always = any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in self._signature.parameters.values())
        self._k0 = 1 if self._self is not None else 0
        self._n = len(self._names) - self._k0
        self._backend = backend or default_backend()  # PYPTO_INTERPRET is read when the kernel is made
        self._options = _options(fusion, tiles, parallel, double_buffer, promote)
        self._made_with = dict(fusion=fusion, backend=backend, tiles=tiles, parallel=parallel,
                               double_buffer=double_buffer, promote=promote, alignment=alignment,
                               profile=profile, sim_target=sim_target, dynamic=dynamic)
        # Dynamic shapes: the mode, declared dims per arg index, dims learned by automatic dynamic
        # (a dim seen with a second extent), the first shape seen per arg, dims the kernel needs
        # as Python values ((arg, dim) -> kernel line) and why each dim became dynamic.
        self._dyn_mode, self._dyn_declared = parse_dynamic(dynamic, self._names, self._k0)
        self._dyn_learned = {}
        self._first_shapes = {}
        self._static_dims = {}
        self._dyn_why = {}
        self._auto_dynamic_failed = None  # why automatic dynamic was given up for this kernel
        if profile:
            self._profile_calls = True  # shadows the class-wide flag below
        if alignment is not None and (not isinstance(alignment, int) or isinstance(alignment, bool)
                                      or alignment < 1 or alignment & (alignment - 1)):
            raise PyptoError(f"alignment must be a power of two (bytes), got {alignment!r}")
        self._alignment = alignment if alignment and alignment > 1 else None
        self._cache = {}
        # The C++ call path (bind_dispatch.cpp): variants the Python path ran are registered in it,
        # for the signature-key state they were registered under (_key_state).
        self._dispatch = _C.Dispatch(self._n)
        self._dispatch_state = None
        self._dispatch_entries = set()
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
        for n in self._star:  # *args
            if b.arguments.get(n):
                raise ArgumentError(f"{self._func.__qualname__}() takes arguments ({', '.join(self._names[self._k0:])}): "
                                    f"a kernel takes nothing through *{n} (got {len(b.arguments[n])} more "
                                    "positional)")
        return tuple(b.arguments[n] for n in self._names)

    def _full_args(self, args, kwargs):
        if not kwargs and len(args) == self._n and not self._bind_always:
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

    # --- dynamic shapes ------------------------------------------------------------------------
    def _dynamic_dims(self, args, learn=False):
        """{arg index: set of dims} traced as dimension symbols for these arguments. Extents 0 and
        1 are never dynamic (they keep their meaning: empty, broadcasting); dims the kernel needs
        as Python values stay static. learn: automatic dynamic notes dims seen with a new extent."""
        mode = self._dyn_mode
        if self._backend == "sim":  # (the simulator runs static shapes)
            return {}
        out = {}
        for i in range(self._k0, len(args)):
            a = args[i]
            if not interop.is_array(a):
                continue
            shape = interop.array_info(a, f"argument '{self._names[i]}'")[1]
            # An empty dimension is always traced as a symbol (a program's shapes are >= 1): the
            # kernel runs with extent 0, its loops not at all, its reductions giving their start.
            empty = {d for d, n in enumerate(shape) if n == 0 and (i, d) not in self._static_dims}
            if mode == "off" and not marks:
                if empty:
                    out[i] = empty
                continue
            dims = set()
            if mode == "all":
                dims = set(range(len(shape)))
            elif mode == "dict" and i in self._dyn_declared:
                want = self._dyn_declared[i]
                dims = set(range(len(shape))) if want is None else {d % len(shape) for d in want
                                                                    if -len(shape) <= d < len(shape)}
            if marks:
                dims |= marked_dims(a) or set()
            if mode == "auto":
                first = self._first_shapes.get(i)
                if learn and first is None:
                    self._first_shapes[i] = tuple(shape)
                elif learn and len(first) == len(shape):
                    for d, (n0, n) in enumerate(zip(first, shape)):
                        if n0 != n and d not in self._dyn_learned.setdefault(i, set()):
                            self._dyn_learned[i].add(d)
                            self._dyn_why.setdefault((i, d), f"automatic: dim {d} of '{self._names[i]}' "
                                                             f"seen as {n0} and {n}")
                if first is None or len(first) == len(shape):  # learned dims are of the first rank
                    dims |= self._dyn_learned.get(i, set())
            dims = {d for d in dims if d < len(shape) and shape[d] > 1 and (i, d) not in self._static_dims} | empty
            if dims:
                out[i] = dims
        return out

    def _dyn_key(self, args, dyn):
        """Cache key of a dynamic variant: dynamic dims are replaced by the class of their extent
        (dims with equal extents share a symbol, so the equality pattern is part of the key)."""
        classes = {}
        parts = []
        for i in range(self._k0, len(args)):
            a = args[i]
            if i not in dyn:
                parts.append(_static_key(a) if i in self._static_args else arg_key(a))
                continue
            k = interop.array_key(a)
            shape = interop.array_info(a, "")[1]
            masked = tuple(("sym", classes.setdefault(n, len(classes))) if d in dyn[i] else n
                           for d, n in enumerate(shape))
            parts.append(("dyn", k[0], k[1], masked) + tuple(k[3:]))
        return ("dynamic",) + tuple(parts)

    def _dyn_lookup(self, args):
        dyn = self._dynamic_dims(args)
        if not dyn:
            return None
        return self._cached_entry(self._dyn_key(args, dyn), args)

    # --- calling -------------------------------------------------------------------------------
    def _cached_entry(self, key, args):
        for e in self._cache.get(key, ()):
            if e.simple:
                return e, ()
            imp = e.implicit_inputs(args)
            if imp is not None:
                return e, imp
        return None

    def _entry(self, args, static=False, compile=True):
        """(entry, implicit inputs) for these arguments, built on a miss. static: a variant
        with static shapes only (autograd's fallback where a dynamic program's derivative
        cannot be built). compile=False: a new variant's C++ compile is left to its first run
        (autograd compiles it with its backward, in parallel)."""
        backend = self._backend
        key = self._key(args)
        e = self._cached_entry(key, args) or (None if static else self._dyn_lookup(args))
        if e is not None:
            return e
        with self._lock:
            # Another thread may have traced and compiled this signature while we waited.
            e = self._cached_entry(self._key(args), args)  # the key may have learned static args
            if e is None and not static:
                e = self._dyn_lookup(args)
            if e is not None:
                return e
            try:
                e = self._compile(args, backend, static, compile)
            except KernelSourceError as err:
                # The message names the kernel's line; the tracer's own frames would only distract.
                raise err.with_traceback(None) from None
        imp = e.implicit_inputs(args) if not e.simple else ()
        if imp is None:
            raise PyptoError(f"kernel '{self.__name__}': its implicit inputs changed while it was traced")
        return e, imp

    def _compile(self, args, backend, static=False, compile=True):
        t0 = _now()
        src = self._source()
        dyn = {} if static else self._dynamic_dims(args, learn=True)
        try:
            trace = trace_kernel(src, self._names, args, self._static_args, self._unroll, backend,
                                 self._static_reasons, dyn, self._static_dims)
            dyn = {i: d for i, d in trace.dynamic.items() if d}  # less the dims the kernel needed static
            entry = CompiledKernel(trace, backend, self._options, args, src.name, compile)
        except PyptoError as err:
            if not dyn or self._dyn_mode != "auto" or (marks and any(marked_dims(a) for a in args)):
                raise
            # Automatic dynamic is an optimisation: a kernel that cannot be compiled with symbolic
            # dims (an op without dynamic support) keeps one static variant per shape.
            self._dyn_mode = "off"
            self._dyn_learned.clear()
            self._auto_dynamic_failed = str(err).splitlines()[0]
            return self._compile(args, backend, compile=compile)
        if backend == "sim":
            _sim.configure(entry.kernel, self._sim_target)
        entry.specialised = {self._names[i]: args[i] for i in sorted(self._static_args)
                             if i >= self._k0}
        entry.dynamic = {self._names[i]: sorted(d) for i, d in sorted(dyn.items())}
        entry.why = "; ".join(sorted({self._dim_reason(args, i, d) for i, ds in dyn.items() for d in ds})) \
            if dyn else "static shapes"
        entry.built_at_ns = _now()
        entry.build_seconds = (entry.built_at_ns - t0) / 1e9
        key = self._dyn_key(args, dyn) if dyn else self._key(args)
        self._cache.setdefault(key, []).append(entry)
        return entry

    def _dim_reason(self, args, i, d):
        if marks and d in (marked_dims(args[i]) or ()):
            return "pypto.mark_dynamic"
        if self._dyn_mode in ("all", "dict"):
            return f"dynamic={self._made_with['dynamic']!r}"
        return self._dyn_why.get((i, d), "automatic")

    def __call__(self, *args, **kwargs):
        m = self._hooks_of
        if m is not None and (m._forward_pre_hooks or m._forward_hooks):
            return _call_with_module_hooks(self, m, args, kwargs)
        # _call_without_hooks inlined: a Python frame is a tenth of a cached call's 1 us.
        if _torch_compiling():
            return _call_traced(self, args, kwargs)
        if not kwargs:
            out = self._dispatch(args)
            if out is not _MISS:
                return out
        return self._call(args, kwargs)

    def _call_without_hooks(self, args, kwargs):
        if _torch_compiling():  # a torch.library custom op in the graph (torch_ops.py)
            return _call_traced(self, args, kwargs)
        if not kwargs:
            out = self._dispatch(args)  # the whole call in C++ when a registered variant matches
            if out is not _MISS:
                return out
        return self._call(args, kwargs)

    def _call(self, args, kwargs):
        """The Python call path: every call the C++ one leaves (first calls, autograd, profiling,
        other argument kinds, errors), which registers the variants it runs with the C++ one."""
        t0 = _now()  # the call's wall time for get_last_profile (dynamo cannot trace clocks: after its check)
        if kwargs or len(args) != self._n or self._bind_always:
            args = self._bind(args, kwargs)
        elif self._k0:
            args = (self._self,) + args
        if self._alignment:
            _profile.check_alignment(self, args[self._k0:])
        if _autograd.wants_grad(args):
            _profile.forget()
            try:
                return _autograd.call(self, args)
            except PyptoError as err:
                if not _has_empty(args):
                    raise
                return self._eager_on_empty(args, err)
        if self._profile_calls:
            return self._profiled_call(args, t0)
        entries = self._cache.get(self._key(args))
        if entries is None and (self._dyn_learned or self._dyn_mode in ("all", "dict")):
            dyn = self._dynamic_dims(args)
            if dyn:
                entries = self._cache.get(self._dyn_key(args, dyn))
        if entries is not None:
            e = entries[0]
            if e.fast is not None:
                out = e.fast(args)
                _profile.record(e, t0, t0)
                self._register_fast(e, args)
                return out
            if e.simple:
                out = e.run(args, ())
                _profile.record(e, t0, t0)
                self._register_fast(e, args)
                return out
        try:
            e, imp = self._entry(args)
            if imp and _autograd.wants_grad(imp):  # an implicit input (a module's weight) requires grad
                _profile.forget()
                return _autograd.call(self, args)
        except PyptoError as err:
            if not _has_empty(args):
                raise
            return self._eager_on_empty(args, err)
        t_run = _now()
        out = e.run(args, imp)
        _profile.record(e, t0, t_run)
        if not imp:
            self._register_fast(e, args)
        return out

    def _eager_on_empty(self, args, err):
        """A call with an empty tensor that the kernel cannot be compiled for (an operation
        without dynamic extents): torch code runs as written, on no data, with torch's own
        semantics (and autograd); anything else raises the compile error."""
        empty = [f"'{n}' {tuple(interop.array_info(a)[1])}" for n, a in zip(self._names, args)
                 if interop.is_array(a) and 0 in interop.array_info(a)[1]]
        why = f"{err}\n(an empty argument: {', '.join(empty)}; this kernel has an operation without a form for "
        torch = sys.modules.get("torch")
        if torch is None or not any(isinstance(a, torch.Tensor) for a in args):
            raise type(err)(why + "empty extents)") from None
        call_args, call_kwargs = user_call(self._signature, dict(zip(self._names, args)))
        try:
            return self._func(*call_args, **call_kwargs)
        except Exception as e:  # noqa: BLE001 - not plain torch code, or torch refuses it too
            raise type(err)(why + f"empty extents, and run as torch code it raised {type(e).__name__}: {e})") \
                from None

    def _key_state(self):
        """What the signature key of a call depends on besides its arguments (each part only
        grows, but for the dynamic mode): variants registered under another state are dropped."""
        return (len(self._static_args), self._dyn_mode, sum(map(len, self._dyn_learned.values())),
                len(self._static_dims))

    def _register_fast(self, e, args):
        """Let the C++ call path run the next calls with the signature of these arguments, which
        just ran variant e (kwargs already bound, no implicit inputs)."""
        if e.dispatch is None or self._k0 or self._alignment or self._profile_calls or self._backend == "sim":
            return
        state = self._key_state()
        if state != self._dispatch_state:
            self._dispatch.clear()
            self._dispatch_entries.clear()
            self._dispatch_state = state
        if id(e) in self._dispatch_entries:
            return
        dyn = {self._names.index(n): set(d) for n, d in e.dynamic.items()} if e.dynamic else {}
        specs = _arg_specs(args, self._static_args, dyn)
        if specs is not None:
            self._dispatch.add(e, e.kernel, specs, *e.dispatch)
            self._dispatch_entries.add(id(e))

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

    def last_sim_report(self):
        """backend='sim': the pypto.SimReport (cycles, per-pipe busy time, bytes per memory path,
        timeline) of this kernel's last call, or None."""
        reports = [r for es in self._cache.values() for e in es if (r := _sim.report_of(e)) is not None]
        return max(reports, key=lambda r: r.sequence, default=None)

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
        self._dispatch.clear()
        self._dispatch_entries.clear()

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
            static_dims = {(self._names[i], d): r for (i, d), r in sorted(self._static_dims.items())}
            return CacheInfo(len(entries), why, [dict(getattr(e, "specialised", {})) for e in entries],
                             [dict(getattr(e, "dynamic", {})) for e in entries],
                             [getattr(e, "why", "static shapes") for e in entries], static_dims,
                             self._dispatch.fast_calls)

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


# kernel(...) without keywords runs _dispatch from C when a variant matches (bind_dispatch.cpp's
# jit_call), else the __call__ above, which torch.compile traces.
_C.install_call_slot(JitFunction)


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


if "torch" in sys.modules:
    _bind_torch(sys.modules["torch"])
