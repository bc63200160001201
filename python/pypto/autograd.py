"""Kernels that take part in automatic differentiation (glue only).

The backward of a kernel is derived in C++ from its tensor-level program
(src/passes/autodiff.cpp, `_C.autodiff`) and compiled through the same pipeline as any kernel;
this module moves arrays between it and its callers:

* torch: a kernel called with tensors that require grad (grad mode on) runs as a
  torch.autograd.Function, so its outputs carry a grad_fn; `pypto.torch_function(kernel)` gives
  that callable explicitly.
* the seed's §5.1 names: `to_pto_tensor`, `to_torch_tensor`, an output's `.metadata`,
  `pto_autograd(metadata, grad_output)`.
* NumPy: `pypto.grad(kernel, argnums)`, `pypto.vjp(kernel, *args)`.
* `@kernel.defvjp`: a hand-written backward replaces the derived one.
* `vjp_call(kernel, args, outputs, grad_outputs)`: the derived (or hand-written) backward of one
  call, for other integrations (torch.library.register_autograd).
"""
from __future__ import annotations

import atexit
import concurrent.futures
import sys
import weakref

import numpy as np

from . import _C
from . import dtypes as _dt
from . import interop, specialize
from . import profile as _profile
from .errors import PyptoError
from .frontend.trace import rebuild
from .tensor import Tensor


# --- the derived backward of one compiled kernel ---------------------------------------------

class Derived:
    """The backward kernel of one CompiledKernel (one signature of a @pypto.jit kernel). With
    dynamic dims (one variant for every sequence length) the backward is dynamic too: its shapes
    are bound per call from the arrays it gets."""

    def __init__(self, entry, wanted=None, save=False):
        prog, args, grads, results, with_saves = _C.autodiff(entry.program, entry.builder, list(wanted or ()),
                                                             save)
        self.program = prog
        self.args = args            # per backward input: (role, forward param index)
        self.grads = grads          # per backward output: the forward param it is the gradient of
        self.results = results      # forward params that are results: outputs, then written inputs
        self.n_inputs = len(entry.plan)
        self.written = [r for r in results if r < self.n_inputs]
        self.name = entry.name  # (no reference to the entry: it holds this object)
        self.kernel = _C.Kernel(prog, entry.backend, **specialize.backward_options(entry.options))
        self.kernel_run = _RunOf(f"{self.name} (backward)", self.kernel, entry)
        params = self.kernel.params()
        self.in_params = [p for p in params if p[3] != "output"]
        self.out_params = [p for p in params if p[3] == "output"]
        self.dynamic = any(n is None for p in params for n in p[2])
        fparams = entry.kernel.params()
        self.n_params = len(fparams)
        # save: the forward that also returns the values the backward reads that a matmul
        # computes or reads (params n_params.. of the backward's "saved" args), so that they are
        # not recomputed.
        self.forward = self.forward_run = None
        runs = [self.kernel_run]
        if with_saves is not None:
            self.forward = _C.Kernel(with_saves, entry.backend, **entry.options)
            self.forward_run = _RunOf(f"{self.name} (forward, saving products)", self.forward, entry)
            runs.append(self.forward_run)
            fparams = self.forward.params()
        self.param_dtypes = [_dt.to_dtype(p[1]) for p in fparams]
        self.param_shapes = [tuple(p[2]) for p in fparams]  # a dynamic dim is None
        if entry.backend == "cpu":
            # the forward variant left uncompiled for autograd runs as is when nothing is saved
            pending = entry.compile_pending and with_saves is None
            secs = _compile_together([r.kernel for r in runs] + ([entry.kernel] if pending else []))
            for r, t in zip(runs, secs):
                r.compile_seconds = t
            if pending:
                entry.compile_seconds, entry.compile_pending = secs[-1], False

    def run_forward(self, inputs, scalars, kind):
        """Runs the forward with saves on its inputs (in param order): (its outputs, {param index:
        saved product})."""
        n = len(inputs)
        in_shapes = self.param_shapes[:n]
        out_shapes = self.param_shapes[n:]
        if self.forward_run.dynamic:
            in_shapes = [_shape(a) for a in inputs]
            out_shapes = self.forward.output_shapes(in_shapes)
        outs = _launch(self.forward, zip(inputs, self.param_dtypes, in_shapes),
                       zip(out_shapes, self.param_dtypes[n:]), kind, scalars, f"kernel '{self.name}'",
                       self.forward_run)
        n_out = self.n_params - n
        return outs[:n_out], dict(enumerate(outs[n_out:], self.n_params))

    def __call__(self, values, cotangents, scalars, kind):
        """values: forward param index -> array (inputs; results as after the call), a list or a
        dict; cotangents: forward param index -> array or None (zeros). Returns {forward input
        param: gradient}."""
        arrays = [cotangents.get(idx) if role == "cotangent" else values[idx] for role, idx in self.args]
        if self.dynamic:
            # the shapes of this call: of the arrays given; a zero cotangent's, its result's
            have = range(len(values)) if isinstance(values, list) else values
            known = []
            for a, (role, idx) in zip(arrays, self.args):
                if a is None and idx in have:
                    a = values[idx]
                known.append(None if a is None else _shape(a))
            shapes = self.kernel.param_shapes(known)
            in_shapes, out_shapes = shapes[:len(arrays)], shapes[len(arrays):]
        else:
            in_shapes = [self.param_shapes[idx] for _, idx in self.args]
            out_shapes = [p[2] for p in self.out_params]
        ins = ((a, self.param_dtypes[idx], shape) for a, (_, idx), shape in zip(arrays, self.args, in_shapes))
        grads = _launch(self.kernel, ins, ((shape, _dt.to_dtype(p[1])) for shape, p in zip(out_shapes, self.out_params)),
                        kind, scalars, f"backward of kernel '{self.name}'", self.kernel_run)
        return dict(zip(self.grads, grads))


def _shape(a):
    return tuple(a.shape)


class _RunOf:
    """A kernel autograd derived (a backward, or a forward that also saves its products), as
    pypto.Profile reads a compiled kernel: its calls are recorded like any kernel call, so
    pypto.profiling() and pypto.get_last_profile() show them, per-nest times included. Holds the
    forward's builder (source lines), not its entry."""

    def __init__(self, name, kernel, entry):
        self.name, self.kernel, self.backend = name, kernel, entry.backend
        self.options, self.builder = entry.options, entry.builder
        self.compile_seconds = 0.0  # set once it is compiled
        self.build_seconds, self.built_at_ns, self.last_shapes = 0.0, 0, None
        self.dynamic = any(n is None for p in kernel.params() for n in p[2])
        self._cost = self._nests = None
        self._dyn_costs, self._dyn_nests = {}, {}

    def cost(self, input_shapes=None):
        if input_shapes is not None and self.dynamic:
            return _profile.counts_for_shapes(self._dyn_costs, input_shapes,
                                              lambda: tuple(self.kernel.cost(input_shapes)))
        if self._cost is None:
            self._cost = tuple(self.kernel.cost())
        return self._cost

    def nest_info(self, input_shapes=None):
        if input_shapes is not None and self.dynamic:
            return _profile.counts_for_shapes(self._dyn_nests, input_shapes,
                                              lambda: [tuple(n) for n in self.kernel.nests(self.builder, input_shapes)])
        if self._nests is None:
            self._nests = [tuple(n) for n in self.kernel.nests(self.builder)]
        return self._nests


def _compile_together(kernels):
    """Compiles native kernels at once (a backward, the forward that saves products, the forward
    itself): each C++ compile is a compiler process run without the GIL, so on several cores they
    overlap. Returns the seconds of each."""
    if len(kernels) == 1:
        return [kernels[0].compile()]
    with concurrent.futures.ThreadPoolExecutor(len(kernels) - 1) as pool:
        rest = [pool.submit(k.compile) for k in kernels[1:]]
        first = kernels[0].compile()
        return [first] + [f.result() for f in rest]


def _launch(kernel, inputs, outputs, kind, scalars, what, run_of=None):
    """Runs `kernel` on `inputs` ((array, dtype, shape) each, in param order) and new `outputs`
    ((shape, dtype) each, allocated as `kind`); returns the outputs. The prepared inputs are held
    until the run ends. With `run_of` (its _RunOf) the call is recorded for the profile, and run
    on the profiling variant inside pypto.profiling()."""
    t0 = _profile._now()
    dynamic = run_of is not None and run_of.dynamic
    run, held, shapes = [], [], []
    for a, dtype, shape in inputs:
        arg, keep = _prepared(a, dtype, tuple(shape), dynamic)
        run.append(arg)
        held.append(keep)
        shapes.append(tuple(shape))
    outs = []
    for shape, dtype in outputs:
        obj, arg = interop.make_allocator(kind, shape, dtype, dynamic)()
        outs.append(obj)
        run.append(arg)
    if dynamic:
        run_of.last_shapes = shapes  # for the profile's counts
    profiled = run_of is not None and _profile.state.on and run_of.backend == "cpu"
    if profiled:
        kernel.compile_profiling()  # before the clock starts (once per kernel)
    t_run = _profile._now()
    try:
        if profiled:
            spans = kernel.run_profiled(run, list(scalars))
        else:
            kernel.run(run, list(scalars))
            spans = None
    except PyptoError as e:
        raise PyptoError(f"{what} failed at run time: {e}") from None
    if run_of is not None:
        _profile.record(run_of, t0, t_run, spans)
    return outs


def _prepared(a, dtype, shape, dynamic=False):
    """(what Kernel.run takes, the array to keep alive) for a param of this dtype and shape;
    None means zeros. dynamic: a torch tensor goes with its shape (the kernel binds its dims)."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(a, torch.Tensor):
        a = a.detach()
        tdt = getattr(torch, dtype.name)
        if a.dtype != tdt or tuple(a.shape) != shape or not a.is_contiguous():
            a = a.to(tdt).expand(shape).contiguous()
        return ((a.data_ptr(), a.stride(), a, shape) if dynamic else (a.data_ptr(), a.stride())), a
    if a is None:
        a = np.zeros(shape, dtype.np)
        return a, a
    if isinstance(a, Tensor):
        if a._dtype == dtype and tuple(a.shape) == shape:
            return a, a
        a = a.numpy()
    a = np.asarray(a)
    if a.dtype != dtype.np or a.shape != shape or not a.flags.c_contiguous:
        a = np.ascontiguousarray(np.broadcast_to(a, shape), dtype.np)
    return a, a


def derived(entry, wanted=None, save=False):
    """The backward of a compiled kernel for the gradients of the input params `wanted` marks
    (a tuple of bools in param order; None: all), made once (a refusal too: it is raised again).
    save: for a caller that runs the forward through it (Derived.run_forward), saving matmul
    products instead of recomputing them (not for a kernel that writes into its arguments)."""
    if entry.grad is None:
        entry.grad = {}
    d = entry.grad.get((wanted, save))
    if d is None:
        try:
            d = Derived(entry, wanted, save)
            if d.forward is not None and d.written:
                d = Derived(entry, wanted)
        except PyptoError as e:
            d = e
        entry.grad[(wanted, save)] = d
    if isinstance(d, PyptoError):
        raise PyptoError(str(d)) from None
    return d


def grad_entry(kernel, full, save=False, by_requires_grad=False):
    """(entry, implicit inputs, derived backward) for a call of `kernel` with `full` that records
    for autograd. The variant a plain call takes, dynamic dims included (a training loop over
    varying lengths compiles one forward and one backward); where the dynamic program's derivative
    cannot be built, a static variant per shape. by_requires_grad: only the gradients of the inputs
    that require grad (torch)."""
    for static in (False, True):
        entry, imp = kernel._entry(full, static=static, compile=False)
        wanted = None
        if by_requires_grad:
            w = tuple(bool(getattr(a, "requires_grad", False)) for a in entry.inputs(full, imp))
            wanted = None if all(w) else w
        if not static and entry.dynamic:
            try:
                return entry, imp, derived(entry, wanted, save)
            except PyptoError:
                continue
        return entry, imp, derived(entry, wanted, save)


def _kernel_entry(fn, args):
    """(kernel, compiled entry, implicit inputs, full args) for a call of `fn` with `args` whose
    backward runs: the entry grad_entry picks (any, for a hand-written backward)."""
    kernel = getattr(fn, "_kernel", fn)  # a bound kernel method
    full = fn._full_args(tuple(args), {}) if not hasattr(fn, "_kernel") else (fn._self,) + tuple(args)
    if kernel._vjp is not None:
        entry, imp = kernel._entry(full)
    else:
        entry, imp, _ = grad_entry(kernel, full)
    return kernel, entry, imp, full


def _values(entry, inputs, outputs):
    return list(inputs) + list(outputs)


def _scalars(entry, full):
    return [full[i] for i in entry.scalar_idx]


# --- one call's backward, for any caller ---------------------------------------------------------

def written_args(fn, *args):
    """Positions (in `args`) of the arguments a call of `fn` writes into (C[...] = ...)."""
    kernel, entry, imp, full = _kernel_entry(fn, args)
    d = derived(entry)
    k0 = kernel._k0
    return [entry.plan[i][1] - k0 for i in d.written if entry.plan[i][0] == "a"]


def vjp_call(fn, args, outputs, grad_outputs):
    """Gradients of one call `outputs = fn(*args)`, one per positional argument (None where an
    argument is not a floating-point array). `outputs`: the kernel's output arrays in order (a
    single-output kernel: [out]); `grad_outputs`: their cotangents, then those of the arguments
    the call wrote into (`written_args`), None meaning zeros. Arguments the kernel wrote into
    hold their new values. Runs the kernel's @defvjp backward when it has one."""
    kernel, entry, imp, full = _kernel_entry(fn, args)
    if kernel._vjp is not None:
        out = outputs[0] if len(outputs) == 1 else tuple(outputs)
        g = grad_outputs[0] if len(grad_outputs) == 1 else tuple(grad_outputs)
        return _custom_grads(kernel, args, out, g)
    d = derived(entry)
    inputs = entry.inputs(full, imp)
    values = _values(entry, inputs, outputs)
    cot = dict(zip(d.results, grad_outputs))
    kind = interop.array_kind(inputs[0]) if inputs else interop.NUMPY
    got = d(values, cot, _scalars(entry, full), kind)
    grads = [None] * len(args)
    for i, (src, k) in enumerate(entry.plan):
        if src == "a" and i in got and k >= kernel._k0:
            grads[k - kernel._k0] = got[i]
    return tuple(grads)


def _custom_grads(kernel, args, out, grad):
    g = kernel._vjp(*args, out, grad)
    if not isinstance(g, (tuple, list)):
        g = (g,)
    if len(g) != len(args):
        raise PyptoError(f"the @defvjp backward of kernel '{kernel.__name__}' returned {len(g)} gradients for "
                         f"{len(args)} arguments")
    return tuple(g)


# --- torch.autograd ----------------------------------------------------------------------------

def wants_grad(args):
    """Whether a kernel call must record for autograd: a torch tensor that requires grad (grad
    mode on), or a tensor from pypto.to_pto_tensor. On every call's path: cheap checks first."""
    for a in args:
        rg = getattr(a, "requires_grad", None)  # torch tensors (and only they, of array kinds)
        if rg:
            return sys.modules["torch"].is_grad_enabled()
        if rg is None and type(a) is Tensor and a._autograd:
            return True
    return False


_function = None
_live_records = weakref.WeakSet()  # recorded calls (in torch graphs, in .metadata) not yet freed


@atexit.register
def _release_records():
    """A graph or an output still alive at exit holds its call's compiled kernels; drop them
    before the interpreter tears the bindings down (nanobind would report them as leaked)."""
    for r in list(_live_records):
        r.__dict__.clear()


def _torch_function_class():
    global _function
    if _function is not None:
        return _function
    import torch

    class KernelFunction(torch.autograd.Function):
        """One kernel call as a node of torch's graph; backward runs the derived kernel."""

        @staticmethod
        def forward(ctx, call, *inputs):
            for i in call.written:
                interop.check_torch_written(inputs[i], f"kernel '{call.entry.name}': input {i + 1}", recording=True)
            outs = call.run(inputs)
            written = [inputs[i] for i in call.written]
            if written:
                ctx.mark_dirty(*written)
            results = list(outs) + written
            ctx.call = call
            ctx.n_out = len(outs)
            nondiff = [r for r in results if not r.is_floating_point()]
            if nondiff:
                ctx.mark_non_differentiable(*nondiff)
            ctx.save_for_backward(*call.to_save(inputs, results))
            return tuple(results)

        @staticmethod
        def backward(ctx, *grads):
            if torch.is_grad_enabled():
                raise RuntimeError(f"kernel '{ctx.call.entry.name}': double backward (create_graph=True) is not "
                                   "supported: the derived backward is not itself differentiated")
            return (None,) + ctx.call.backward(ctx.saved_tensors, grads)

    _function = KernelFunction
    return _function


def _torch_from_numpy(x):
    import torch
    return torch.from_numpy(x)


class _TorchCall:
    """What a recorded call keeps: the compiled entry, its scalars and where its tensors go.
    It holds no tensor after the forward (a tensor here would make a reference cycle through
    torch's graph, which the garbage collector cannot see): what backward needs is saved."""

    def __init__(self, kernel, entry, full, imp, derived_backward):
        _live_records.add(self)
        self.kernel = kernel
        self.entry = entry
        self.full = full
        self.imp = imp
        self.scalars = _scalars(entry, full)
        self.custom = kernel._vjp is not None
        self.derived = derived_backward
        self.products = None  # the saved products of the forward run, until to_save
        self.written = self.derived.written if self.derived else []
        # the custom backward's arguments: non-array values kept, arrays taken from the saved inputs
        self.skeleton = None
        if self.custom:
            slot = {k: i for i, (src, k) in enumerate(entry.plan) if src == "a"}
            self.skeleton = [("in", slot[k]) if k in slot else ("value", a)
                             for k, a in enumerate(full) if k >= kernel._k0]

    def run(self, inputs):
        d = self.derived
        if d is not None and d.forward is not None:
            outs, self.products = d.run_forward(inputs, self.scalars, interop.TORCH)
        else:
            e, profiled = self.entry, _profile.state.on
            if profiled and e.backend == "cpu":
                e.kernel.compile_profiling()
            t_run = _profile._now()
            outs, _ = e.run_flat(self.full, self.imp, profiled)
            _profile.record(e, t_run, t_run, e.last_spans if profiled else None)
        self.full = self.imp = None
        return outs

    def to_save(self, inputs, results):
        self.n_inputs = len(inputs)
        if self.custom:
            return list(inputs) + list(results)
        d = self.derived
        saved = []
        for role, idx in d.args:
            if role == "input":
                # save_for_backward takes tensors only: a NumPy constant (an implicit input, e.g. a
                # mask the backward selects with) goes as a tensor viewing the same memory
                x = inputs[idx]
                saved.append(_torch_from_numpy(x) if isinstance(x, np.ndarray) else x)
            elif role == "saved":
                saved.append(self.products[idx] if idx >= d.n_params else results[d.results.index(idx)])
        self.products = None
        return saved

    def backward(self, saved, grads):
        if self.custom:
            inputs = saved[:self.n_inputs]
            args = tuple(inputs[v] if kind == "in" else v for kind, v in self.skeleton)
            n_out = len(grads) - len(self.written)
            outs = saved[self.n_inputs:self.n_inputs + n_out]
            out = outs[0] if len(outs) == 1 else tuple(outs)
            g = grads[0] if n_out == 1 else tuple(grads[:n_out])
            got = _custom_grads(self.kernel, args, out, g)
            res = [None] * self.n_inputs
            for i, (src, k) in enumerate(self.entry.plan):
                if src == "a":
                    res[i] = got[k - self.kernel._k0]
            return tuple(res)
        d = self.derived
        values = {}
        it = iter(saved)
        for role, idx in d.args:
            if role != "cotangent":
                values[idx] = next(it)
        cot = dict(zip(d.results, grads))
        got = d(values, cot, self.scalars, interop.TORCH)
        return tuple(got.get(i) for i in range(self.n_inputs))


def call(kernel, full):
    """A kernel call that records for autograd (JitFunction.__call__ sends it here)."""
    entry, imp = kernel._entry(full, compile=kernel._vjp is not None)
    inputs = entry.inputs(full, imp)
    if any(type(a) is Tensor for a in inputs):
        return _call_pto(kernel, entry, imp, full)
    d = None
    if kernel._vjp is None:
        entry, imp, d = grad_entry(kernel, full, save=True, by_requires_grad=True)
        inputs = entry.inputs(full, imp)
    c = _TorchCall(kernel, entry, full, imp, d)
    results = _torch_function_class().apply(c, *inputs)
    outs = results[:len(results) - len(c.written)]
    if entry.single_out:
        return outs[0]
    return rebuild(entry.template, list(outs), inputs, full)


def torch_function(kernel):
    """The kernel as a torch.autograd.Function-backed callable: its outputs always carry a
    grad_fn when an input requires grad (the same path a plain call takes under grad mode)."""
    def fn(*args, **kwargs):
        full = kernel._full_args(args, kwargs) if not hasattr(kernel, "_kernel") else \
            (kernel._self,) + kernel._kernel._bind(args, kwargs)[1:]
        k = getattr(kernel, "_kernel", kernel)
        return call(k, full)
    fn.__name__ = getattr(kernel, "__name__", "kernel")
    fn.__wrapped__ = kernel
    return fn


# --- the seed's §5.1 names ---------------------------------------------------------------------

class Metadata:
    """What a kernel output from to_pto_tensor arguments carries: enough to run its backward."""

    def __init__(self, kernel, entry, full, imp, outs):
        _live_records.add(self)
        self.kernel, self.entry, self.full, self.imp, self.outs = kernel, entry, full, imp, outs


def _call_pto(kernel, entry, imp, full):
    outs, inputs = entry.run_flat(full, imp)
    meta = Metadata(kernel, entry, full, imp, outs)
    for o in outs:
        if isinstance(o, Tensor):
            o.metadata = meta
    if entry.single_out:
        return outs[0]
    return rebuild(entry.template, outs, inputs, full)


def to_pto_tensor(x):
    """A pypto.Tensor sharing x's memory (torch tensor, NumPy array or pypto.Tensor); a kernel
    called with it returns outputs whose `.metadata` pto_autograd takes."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(x, torch.Tensor):
        t = interop.from_torch(x.detach())
    elif isinstance(x, Tensor):
        t = Tensor._wrap(x._data, x._dtype)
    else:
        t = interop.from_numpy(np.asarray(x))
    t._autograd = True
    return t


def to_torch_tensor(x):
    """A torch tensor sharing x's memory (None stays None)."""
    return None if x is None else interop.to_torch(x)


def pto_autograd(metadata, grad_output):
    """The gradients of the inputs of the call that made `metadata` (a kernel output's
    `.metadata`), given the output's cotangent: one per array argument, as pypto.Tensors."""
    if not isinstance(metadata, Metadata):
        raise PyptoError("pto_autograd expects a kernel output's .metadata (call the kernel with tensors from "
                         "pypto.to_pto_tensor)")
    grads = grad_output if isinstance(grad_output, (tuple, list)) else (grad_output,)
    k0 = metadata.kernel._k0
    args = metadata.full[k0:]
    got = vjp_call(metadata.kernel, args, metadata.outs, list(grads))
    return tuple(g for g, a in zip(got, args) if interop.is_array(a))


# --- NumPy: pypto.grad / pypto.vjp -----------------------------------------------------------------

def vjp(kernel, *args):
    """pypto.vjp(kernel, *args) -> (outputs, pullback): pullback(cotangent) returns one gradient
    per argument (None where not differentiable). pypto.vjp(kernel) returns f(*args) doing that."""
    if not args:
        return lambda *a: vjp(kernel, *a)
    k, entry, imp, full = _kernel_entry(kernel, args)
    outs, inputs = entry.run_flat(full, imp)
    result = outs[0] if entry.single_out else rebuild(entry.template, outs, inputs, full)

    def pullback(*cotangents):
        if len(cotangents) == 1 and isinstance(cotangents[0], (tuple, list)):
            cotangents = tuple(cotangents[0])
        return vjp_call(kernel, args, outs, list(cotangents))
    return result, pullback


def grad(kernel, argnums=0):
    """pypto.grad(kernel, argnums=0): a function returning the gradient of the kernel's output
    (which must hold one element) with respect to argument `argnums` (an int or a tuple)."""
    def g(*args):
        out, pullback = vjp(kernel, *args)
        arr = interop.to_numpy(out) if not isinstance(out, np.ndarray) else out
        if arr.size != 1:
            raise PyptoError(f"pypto.grad: kernel '{getattr(kernel, '__name__', '?')}' returns shape {arr.shape}; "
                             f"grad needs a single element (use pypto.vjp for other outputs)")
        cot = np.ones(arr.shape, arr.dtype)
        grads = pullback(cot)
        if isinstance(argnums, int):
            return grads[argnums]
        return tuple(grads[i] for i in argnums)
    return g
