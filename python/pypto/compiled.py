"""A traced kernel compiled for one signature, and the call path that runs it: gather the
caller's arrays (explicit arguments and implicit inputs re-read from their closures, globals
or attributes), allocate the outputs in the caller's array type, run, rebuild the result."""
from __future__ import annotations

import operator
import os

import numpy as np

from . import _C
from . import autograd
from . import dtypes as _dt
from . import interop
from . import profile as _profile
from .errors import PyptoError
from .frontend.trace import rebuild

_IMPLICIT_MISS = object()


class CompiledKernel:
    def __init__(self, trace, backend, options, args, name, compile=True):
        tr = trace.tr
        self.index_sites = list(tr.index_sites)
        self.name = name
        self.backend = backend
        # the tensor-level program and its builder (autodiff reads both; the builder knows the
        # kernel line of each statement). Not the whole trace: it holds reference cycles.
        self.program = trace.program
        self.builder = tr.b
        self.options = options
        self.grad = None        # pypto.autograd: the derived backwards (per wanted set), made on first use
        try:
            self.kernel = _C.Kernel(trace.program, backend, **options)
        except PyptoError as e:
            raise PyptoError(f"kernel '{name}': lowering failed: {e}") from None
        params = self.kernel.params()
        out_params = [p for p in params if p[3] == "output"]
        if len(out_params) != len(trace.outputs) or len(params) - len(out_params) != len(tr.inputs):
            raise PyptoError(f"kernel '{name}': internal error: the program's parameters do not match the "
                             f"trace ({len(params)} params, {len(tr.inputs)} inputs, {len(trace.outputs)} outputs)")
        # Inputs in param order: ("a", arg index) or ("m", implicit index).
        self.plan = []
        self.implicit = []       # (reader, key): re-read at every call, must keep their signature
        first_kind = None
        for src in tr.inputs:
            if src[0] == "arg":
                self.plan.append(("a", src[1]))
                obj = args[src[1]]
            else:
                _, path, obj = src
                self.plan.append(("m", len(self.implicit)))
                self.implicit.append((path.reader(), interop.array_key(obj)))
            if first_kind is None and src[0] == "arg":
                first_kind = interop.array_kind(obj)
        if first_kind is None:
            kinds = [interop.array_kind(s[2]) for s in tr.inputs if s[0] != "arg"]
            first_kind = kinds[0] if kinds else interop.NUMPY
        self.guards = [(path.reader(), value) for path, value in tr.guards]
        self.scalar_idx = list(tr.scalar_args)
        # Dynamic dims (None in a param's shape): outputs are allocated per call from the shapes
        # the inputs bind (Kernel.output_shapes).
        self.dynamic = any(n is None for p in params for n in p[2])
        self.first_kind = first_kind
        self.out_dtypes = [_dt.to_dtype(p[1]) for p in out_params]
        self.allocs = [] if self.dynamic else [interop.make_allocator(first_kind, p[2], _dt.to_dtype(p[1]))
                                               for p in out_params]
        self.template = trace.template
        self.simple = not self.implicit and not self.guards
        # Per input, how Kernel.run receives it (kinds are fixed by the signature key).
        kinds = []
        for src in tr.inputs:
            kinds.append(interop.array_kind(args[src[1]] if src[0] == "arg" else src[2]))
        self.convs = [interop.run_converter(k, self.dynamic) for k in kinds]
        written = self.kernel.written()
        # Inputs (by position in param order) that are torch tensors the kernel writes: checked
        # against autograd's rules before the run, their version counters bumped after it.
        self.written_torch = [j for j, k in enumerate(kinds) if k == interop.TORCH and written[j]]
        self.written_names = [p[0] for p in params]
        self.arg_only = [k for _, k in self.plan] if all(kind == "a" for kind, _ in self.plan) else None
        self.single_out = self.template == ("out", 0)
        self.compile_seconds = 0.0
        self.build_seconds = 0.0  # trace + lower + compile (set by JitFunction._compile)
        self.built_at_ns = 0      # perf_counter_ns when it was built
        self._cost = None
        self._dyn_costs = {}  # a dynamic kernel's counts per input shapes
        self._dyn_nests = {}  # and its per-nest counts
        self.last_shapes = None  # a dynamic kernel's input shapes in its last run
        self._nests = None
        # compile=False: a variant autograd may never run as is (it runs the forward that saves
        # products); Kernel.run compiles it on first use, or autograd with its backward.
        self.compile_pending = backend == "cpu" and not compile
        if backend == "cpu" and compile:
            self.compile()
        self.fast = self._make_fast()
        self.dispatch = self._dispatch_plan(kinds, out_params)

    def _make_fast(self):
        """A specialised call path for the common case (explicit array arguments only, all of one
        library, at most one returned output): fewer Python calls per kernel call."""
        if self.arg_only is None or not self.simple or len(self.allocs) > 1 or self.written_torch or self.dynamic:
            return None
        if self.allocs and not self.single_out:
            return None
        if not self.allocs and not (self.template[0] == "static" and self.template[1] is None):
            return None
        torch_all = all(c is interop._torch_arg for c in self.convs)
        torch_arg = interop._torch_arg
        if not torch_all and any(c is not None for c in self.convs):
            return None
        run = self.kernel.run
        name = self.name
        sites = self._index_sites
        sidx = tuple(self.scalar_idx)
        get = operator.itemgetter(*self.arg_only) if self.arg_only else (lambda args: ())
        single = len(self.arg_only) == 1
        alloc = self.allocs[0] if self.allocs else None

        def fast(args):
            items = get(args)
            if single:
                items = (items,)
            try:
                lst = [torch_arg(a) for a in items] if torch_all else list(items)
            except RuntimeError:  # a tensor without dense storage (sparse): say which, as a first call does
                for a in items:
                    interop.array_info(a)
                raise
            out = None
            if alloc is not None:
                out, r = _allocated(alloc, name)
                lst.append(r)
            try:
                run(lst, [args[i] for i in sidx] if sidx else [])
            except PyptoError as e:
                raise PyptoError(f"kernel '{name}' failed at run time: {e}{sites(e)}") from None
            return out
        return fast

    def _dispatch_plan(self, kinds, out_params):
        """How the C++ call path (_C.Dispatch.add) runs this variant: (input arguments, scalar
        arguments, torch outputs?, [(output dtype, shape or None when dynamic)], result kind,
        result items); None when it cannot (the Python path runs every call)."""
        if (self.backend not in ("cpu", "interp") or not self.simple or self.arg_only is None
                or self.written_torch or any(k not in (interop.TORCH, interop.NUMPY) for k in kinds)
                or self.first_kind not in (interop.TORCH, interop.NUMPY)):
            return None
        result = _result_plan(self.template)
        if result is None:
            return None
        torch_out = self.first_kind == interop.TORCH
        outs = []
        for p, dt in zip(out_params, self.out_dtypes):
            if torch_out:
                odt = getattr(interop._torch(), dt.name)
            elif dt.np is None:
                return None  # (bfloat16 for a NumPy caller: a pypto.Tensor)
            else:
                odt = np.dtype(dt.np)
            outs.append((odt, None if self.dynamic else tuple(p[2])))
        return (list(self.arg_only), list(self.scalar_idx), torch_out, outs) + result

    def _run_failed(self, message):
        """The C++ call path's run-time error (bind_dispatch.cpp), as the Python path raises it."""
        raise PyptoError(f"kernel '{self.name}' failed at run time: {message}{self._index_sites(message)}") from None

    def nest_info(self, input_shapes=None):
        """Per loop nest: (source lines, global buffers written, flops, bytes, exact), once; a
        dynamic kernel's for a call whose inputs had `input_shapes` (else at the dims' bound)."""
        if input_shapes is not None and self.dynamic:
            return _profile.counts_for_shapes(self._dyn_nests, input_shapes,
                                    lambda: [tuple(n) for n in self.kernel.nests(self.builder, input_shapes)])
        if self._nests is None:
            self._nests = [tuple(n) for n in self.kernel.nests(self.builder)]
        return self._nests

    def cost(self, input_shapes=None):
        """(flops, bytes, exact) counted from the tensor-level IR, once (runtime/kernel_cost.h); a
        dynamic kernel's for a call whose inputs had `input_shapes` (else at the dims' bound)."""
        if input_shapes is not None and self.dynamic:
            return _profile.counts_for_shapes(self._dyn_costs, input_shapes, lambda: tuple(self.kernel.cost(input_shapes)))
        if self._cost is None:
            self._cost = tuple(self.kernel.cost())
        return self._cost

    def _index_sites(self, err):
        """For an index out of range: the kernel lines that index by tensors."""
        if "MGATHER" not in str(err) and "MSCATTER" not in str(err) or not self.index_sites:
            return ""
        return "\n  indexing by tensors at " + "\n  and at ".join(self.index_sites)

    def compile(self):
        try:
            self.compile_seconds = self.kernel.compile()
        except PyptoError as e:
            msg = f"kernel '{self.name}': building the CPU kernel failed: {e}"
            text = str(e).lower()
            if "compil" in text or "pypto_cxx" in text or "not found" in text or "no such file" in text:
                msg += ("\nhint: pass backend='interp' to pypto.jit or set PYPTO_INTERPRET=1 to run kernels on "
                        "the interpreter, which needs no C++ compiler")
            raise PyptoError(msg) from None
        return self.compile_seconds

    def implicit_inputs(self, args):
        """The implicit inputs' current objects, or None when the guards or their signatures no
        longer match this trace (then the caller traces again)."""
        for reader, value in self.guards:
            try:
                v = reader(args)
            except Exception:  # noqa: BLE001 - a vanished attribute means: trace again
                return None
            if v is not value and (type(v) is not type(value) or v != value):
                return None
        objs = []
        for reader, key in self.implicit:
            try:
                v = reader(args)
            except Exception:  # noqa: BLE001
                return None
            if not interop.is_array(v) or interop.array_key(v) != key:
                return None
            objs.append(v)
        return objs

    def run(self, args, implicit=(), profiled=False):
        outs, objs = self.run_flat(args, implicit, profiled)
        if self.single_out:
            return outs[0]
        return rebuild(self.template, outs, objs, args)

    def inputs(self, args, implicit=()):
        """The arrays bound to the program's input params, in param order."""
        return [args[k] if kind == "a" else implicit[k] for kind, k in self.plan]

    def run_flat(self, args, implicit=(), profiled=False):
        """Run; (the fresh outputs in order, the input arrays in param order). profiled: run the
        profiling variant (cpu) and leave its spans in self.last_spans."""
        if self.arg_only is not None:
            objs = [args[i] for i in self.arg_only]
        else:
            objs = [args[k] if kind == "a" else implicit[k] for kind, k in self.plan]
        for j in self.written_torch:
            interop.check_torch_written(objs[j], f"kernel '{self.name}': argument {j + 1} "
                                                 f"('{self.written_names[j]}')")
        run_list = [o if c is None else c(o) for c, o in zip(self.convs, objs)]
        outs = []
        allocs = self.allocs
        if self.dynamic:
            self.last_shapes = [interop.array_info(o)[1] for o in objs]  # for the profile's counts
            shapes = self.kernel.output_shapes(self.last_shapes)
            allocs = [interop.make_allocator(self.first_kind, s, t, True) for s, t in zip(shapes, self.out_dtypes)]
        for alloc in allocs:
            o, r = _allocated(alloc, self.name)
            outs.append(o)
            run_list.append(r)
        try:
            if profiled and self.backend == "cpu":
                self.last_spans = self.kernel.run_profiled(run_list, [args[i] for i in self.scalar_idx])
            else:
                self.kernel.run(run_list, [args[i] for i in self.scalar_idx])
                self.last_spans = ([], []) if profiled else None
        except PyptoError as e:
            raise PyptoError(f"kernel '{self.name}' failed at run time: {e}{self._index_sites(e)}") from None
        finally:
            if self.written_torch:
                interop.bump_versions([objs[j] for j in self.written_torch])
        return outs, objs


# Result kinds of the C++ call path (bind_dispatch.cpp's Result).
_RESULT_NONE, _RESULT_SINGLE, _RESULT_TUPLE, _RESULT_LIST = range(4)


def _allocated(alloc, name):
    """alloc() (an output array and what the kernel receives for it); a failure to get its memory
    (a result too large for the machine) is a PyptoError naming the kernel."""
    try:
        return alloc()
    except (MemoryError, RuntimeError, ValueError) as e:
        raise PyptoError(f"kernel '{name}': cannot allocate an output: {str(e).splitlines()[0]}") from None


def _result_plan(template):
    """(result kind, items) for the C++ call path: an item is an output index, or -1 - j for the
    input param j returned as is; None for a template it does not rebuild (dicts, constants)."""
    def item(t):
        return t[1] if t[0] == "out" else -1 - t[1] if t[0] == "input" else None
    kind = template[0]
    if kind == "static":
        return (_RESULT_NONE, []) if template[1] is None else None
    if kind in ("out", "input"):
        return (_RESULT_SINGLE, [item(template)])
    if kind == "seq" and template[1] in (tuple, list):
        items = [item(t) for t in template[2]]
        if None in items:
            return None
        return (_RESULT_TUPLE if template[1] is tuple else _RESULT_LIST, items)
    return None


class Lowered:
    """What fn.lower(*args) returns: the compiled kernel for that signature, inspectable."""

    def __init__(self, entry: CompiledKernel):
        self._entry = entry
        self.kernel = entry.kernel

    def as_text(self, level="tensor"):
        levels = ("tensor", "tile", "isa", "source", "sim")  # sim: the ISA with the simulator's sync flags
        if level not in levels:
            raise PyptoError(f"unknown level {level!r}; expected one of {', '.join(levels)}")
        return self.kernel.as_text(level)

    def compile(self):
        return self._entry.compile()

    def export(self, path, emit=None):
        """Write this kernel ahead of time, for use without Python or PyPTO: emit="so" a shared
        library with a C header beside it (path with .h), "exe" a standalone executable that runs
        the kernel on .npy files and prints its time, "cpp" / "exe.cpp" their C++ source, "ir" the
        tile-level IR text (which `ptoc` reads). By default the path's suffix decides (.so, .cpp,
        .pto or .ir; anything else an executable). Returns the paths written. The C ABI is in
        docs/guide.md ("Ahead-of-time export")."""
        return self.kernel.export(os.fspath(path), emit or "")

    def backward(self):
        """The derived backward (its vector-Jacobian product), as a Lowered kernel."""
        return _LoweredBackward(autograd.derived(self._entry))

    @property
    def compiled_from_cache(self):
        return self.kernel.compiled_from_cache()

    @property
    def params(self):
        return self.kernel.params()

    @property
    def log(self):
        return self.kernel.log

    def __str__(self):
        return self.as_text("tensor")

    def __repr__(self):
        return f"<pypto.Lowered {self._entry.name} backend={self._entry.backend}>"


class _LoweredBackward:
    """fn.lower(...).backward(): the derived backward kernel, inspectable like Lowered."""

    def __init__(self, derived):
        self._derived = derived
        self.kernel = derived.kernel

    def as_text(self, level="tensor"):
        return Lowered.as_text(self, level)

    @property
    def params(self):
        return self.kernel.params()

    def __str__(self):
        return self.as_text("tensor")
