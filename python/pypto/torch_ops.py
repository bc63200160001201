"""Kernels as torch custom ops, for torch.compile and torch.export.

Eager calls never come here (they take the direct path in jit.py). While torch compiles or
exports, a kernel call goes through `call_traced`, which dynamo leaves opaque
(`nonstrict_trace`) and AOT tracing runs with fake tensors: it registers (once per kernel and
argument kind signature) a `torch.library` op `pypto::<kernel>_<n>` whose inputs are the
kernel's tensors (explicit, then implicit ones such as a module's parameters) and run-time
scalars, whose outputs are the kernel's fresh outputs, and whose `mutates_args` are the
arguments the kernel stores into. Its fake implementation traces the kernel (no compile, no run)
for PyPTO's own output shapes and dtypes; with symbolic sizes it traces at a few sizes and
writes each output size as an expression of the input sizes."""
from __future__ import annotations

import itertools
import re
import threading

import torch
from torch.utils._python_dispatch import _disable_current_modes

from . import autograd
from . import dtypes as _dt
from . import interop
from .errors import PyptoError
from .frontend.trace import is_scalar_arg, rebuild, trace_kernel
from .specialize import static_key

_lib = torch.library.Library("pypto", "FRAGMENT")
_lock = threading.RLock()
_names = itertools.count()


class _Op:
    """One registered custom op: which kernel positions its inputs fill, and what it returns."""

    def __init__(self, kernel, slots, static, n_implicit, written, out_dtypes, scalar_types):
        self.kernel = kernel
        self.scalar_types = scalar_types
        self.slots = slots              # per kernel position: ("t", i) tensor input, ("s", j) scalar, ("c",)
        self.static = static            # per kernel position: the value used for ("c",) slots
        self.n_implicit = n_implicit
        self.written = written          # op input indices the kernel stores into
        self.out_dtypes = out_dtypes
        self.n_tensors = sum(1 for s in slots if s[0] == "t")
        self.n_scalars = sum(1 for s in slots if s[0] == "s")
        self.shape_cache = {}
        base = re.sub(r"\W", "_", kernel._func.__name__)[:40] or "kernel"
        self.name = f"{base}_{next(_names)}"
        self.op = self._register()

    # --- schema ---------------------------------------------------------------------------------
    def _register(self):
        ins = []
        for i in range(self.n_tensors + self.n_implicit):
            alias = f"(a{i}!)" if i in self.written else ""
            ins.append(f"Tensor{alias} t{i}")
        ins += [f"{ty} s{j}" for j, ty in enumerate(self.scalar_types)]
        outs = ", ".join("Tensor" for _ in self.out_dtypes)
        ret = f"({outs})" if len(self.out_dtypes) != 1 else "Tensor"
        if not self.out_dtypes:
            ret = "()"
        _lib.define(f"{self.name}({', '.join(ins)}) -> {ret}")
        _lib.impl(self.name, self._real, "CPU")
        torch.library.register_fake(f"pypto::{self.name}", self._fake, lib=_lib)
        op = getattr(torch.ops.pypto, self.name).default
        if not self.written:  # torch differentiates only ops that do not mutate their inputs
            self._register_backward()
        return op

    # --- the derived backward (autograd.py), itself a custom op so that compiled graphs hold it ------
    def _register_backward(self):
        scalars = [f"{ty} s{j}" for j, ty in enumerate(self.scalar_types)]
        _lib.define(f"{self.name}_bwd(Tensor[] inputs, Tensor[] outputs, Tensor?[] grads"
                    f"{''.join(', ' + a for a in scalars)}) -> Tensor[]")
        _lib.impl(f"{self.name}_bwd", self._backward_real, "CPU")
        torch.library.register_fake(f"pypto::{self.name}_bwd", self._backward_fake, lib=_lib)
        self.bwd = getattr(torch.ops.pypto, f"{self.name}_bwd").default
        torch.library.register_autograd(f"pypto::{self.name}", self._backward, setup_context=self._setup,
                                        lib=_lib)

    def _setup(self, ctx, inputs, output):
        nt = self.n_tensors + self.n_implicit
        outs = output if isinstance(output, (tuple, list)) else (output,)
        ctx.save_for_backward(*inputs[:nt], *outs)
        ctx.scalars = inputs[nt:]

    def _backward(self, ctx, *grads):
        nt = self.n_tensors + self.n_implicit
        saved = ctx.saved_tensors
        got = iter(self.bwd(list(saved[:nt]), list(saved[nt:]), list(grads), *ctx.scalars))
        out = [next(got) if t.is_floating_point() else None for t in saved[:nt]]
        return tuple(out) + (None,) * self.n_scalars

    def _backward_fake(self, inputs, outputs, grads, *scalars):
        return [torch.empty_like(t) for t in inputs if t.is_floating_point()]

    def _backward_real(self, inputs, outputs, grads, *scalars):
        kargs = self.kernel_args(inputs[:self.n_tensors], list(scalars))
        implicit = inputs[self.n_tensors:]
        kernel = self.kernel
        if kernel._vjp is not None:  # a hand-written backward (@kernel.defvjp): explicit arguments only
            g = autograd.vjp_call(kernel, kargs[kernel._k0:], list(outputs), list(grads))
            by_slot = {slot[1]: g[i - kernel._k0] for i, slot in enumerate(self.slots) if slot[0] == "t"}
        else:
            entry, _, d = autograd.grad_entry(kernel, kargs)
            got = d(entry.inputs(kargs, implicit) + list(outputs), dict(zip(d.results, grads)),
                    [kargs[i] for i in entry.scalar_idx], interop.TORCH)
            by_slot = {}
            for i, (kind, k) in enumerate(entry.plan):
                if i in got:
                    by_slot[self.slots[k][1] if kind == "a" else self.n_tensors + k] = got[i]
        return [by_slot[i] if by_slot.get(i) is not None else torch.zeros_like(t)
                for i, t in enumerate(inputs) if t.is_floating_point()]

    @staticmethod
    def scalar_type(v):
        return "float" if isinstance(v, float) else "SymInt"

    # --- filling kernel positions ------------------------------------------------------------------
    def kernel_args(self, tensors, scalars):
        out = []
        for slot, value in zip(self.slots, self.static):
            if slot[0] == "t":
                out.append(tensors[slot[1]])
            elif slot[0] == "s":
                out.append(scalars[slot[1]])
            else:
                out.append(value)
        return tuple(out)

    def _split(self, args):
        nt = self.n_tensors + self.n_implicit
        return list(args[:nt]), list(args[nt:])

    # --- the real implementation ------------------------------------------------------------------
    def _real(self, *args):
        tensors, scalars = self._split(args)
        kargs = self.kernel_args(tensors[:self.n_tensors], scalars)
        entry, _ = self.kernel._entry(kargs)
        implicit = tensors[self.n_tensors:]
        outs, _ = entry.run_flat(kargs, implicit)
        return _pack(outs)

    # --- the fake implementation --------------------------------------------------------------------
    def _fake(self, *args):
        tensors, scalars = self._split(args)
        shapes = [tuple(t.shape) for t in tensors]
        syms = _symbols(shapes)
        hints = {s: _hint_of(s, shapes) for s in syms}
        scal = [_hint(v) for v in scalars]
        base = self.out_shapes(tensors, shapes, hints, scal)
        if syms:
            out_shapes = self._symbolic(tensors, shapes, hints, scal, base)
        else:
            out_shapes = base
        return _pack([torch.empty(s, dtype=d) for s, d in zip(out_shapes, self.out_dtypes)])

    def out_shapes(self, tensors, shapes, values, scalars):
        """Concrete output shapes when the symbols of the input sizes take `values`."""
        concrete = [tuple(_eval(d, values) for d in shp) for shp in shapes]
        key = (tuple(concrete), tuple(scalars))
        got = self.shape_cache.get(key)
        if got is None:
            stand_ins = [_stand_in(c, t.dtype) for c, t in zip(concrete, tensors)]
            kargs = self.kernel_args(stand_ins[:self.n_tensors], scalars)
            trace = _trace(self.kernel, kargs)
            got = [tuple(o.shape) for o in trace.outputs]
            self.shape_cache[key] = got
        return got

    def _symbolic(self, tensors, shapes, hints, scalars, base):
        """Output sizes as expressions of the input size symbols: each group of symbols (those of
        equal value move together, as torch's duck sizing does) doubled alone gives a linear
        (c + a*s) or power (k * s**e) law per output size, checked with all of them tripled."""
        groups = {}
        for s, h in hints.items():
            groups.setdefault(h, []).append(s)
        per_group = {}
        try:
            for h, syms in groups.items():
                per_group[h] = self.out_shapes(tensors, shapes, {**hints, **{s: 2 * h for s in syms}}, scalars)
            check = self.out_shapes(tensors, shapes, {s: 3 * h for s, h in hints.items()}, scalars)
        except PyptoError:
            return _specialise(base, shapes)
        env = _shape_env(shapes)
        symint = {}
        for h, syms in groups.items():
            ints = [env.create_symintnode(s, hint=h) for s in syms]
            for other in ints[1:]:  # the laws assume these sizes stay equal
                torch._check(other == ints[0])
            symint[h] = ints[0]
        result = []
        for k, shp in enumerate(base):
            dims = []
            for d, o0 in enumerate(shp):
                expr = _fit(o0, {h: per_group[h][k][d] for h in groups}, {h: h for h in groups}, check[k][d],
                            symint)
                if expr is None:
                    return _specialise(base, shapes)
                dims.append(expr)
            result.append(tuple(dims))
        return result


def _pack(outs):
    if len(outs) == 1:
        return outs[0]
    return tuple(outs)


def _fit(o0, o_sym, hints, o_check, symint):
    """The law of one output size: constant, linear in the symbols, or a monomial."""
    moved = [s for s, v in o_sym.items() if v != o0]
    if not moved:
        return o0 if o_check == o0 else None
    # linear: o = c + sum a_s * s, with a_s = (o_s - o0) / h_s (an integer or 1/q)
    coeffs = {}
    for s in moved:
        num, h = o_sym[s] - o0, hints[s]
        coeffs[s] = (num, h)
    c_num = o0
    ok = True
    for s, (num, h) in coeffs.items():
        if num % h == 0:
            c_num -= num // h * h
        elif h % num == 0:
            c_num -= num
        else:
            ok = False
    if ok and c_num + sum(3 * num for num, _ in coeffs.values()) == o_check:
        expr = c_num
        for s, (num, h) in coeffs.items():
            expr = expr + (symint[s] * (num // h) if num % h == 0 else symint[s] // (h // num))
        return expr
    # monomial: o = k * prod s**e_s, doubling s multiplies o by 2**e_s
    exps = {}
    for s in moved:
        ratio = o_sym[s] / o0 if o0 else 0
        e = round(ratio).bit_length() - 1 if ratio >= 2 and float(ratio).is_integer() else -1
        if e < 1 or 2 ** e != ratio:
            return None
        exps[s] = e
    denom = 1
    for s, e in exps.items():
        denom *= hints[s] ** e
    if o0 % denom:
        return None
    k = o0 // denom
    if k * 3 ** sum(exps.values()) * denom != o_check:
        return None
    expr = k
    for s, e in exps.items():
        for _ in range(e):
            expr = expr * symint[s]
    return expr


def _specialise(base, shapes):
    """Sizes whose law we cannot state: guard on the current values (torch recompiles on change)."""
    for shp in shapes:
        for d in shp:
            if isinstance(d, torch.SymInt):
                torch._check(d == _hint(d))
    return base


def _symbols(shapes):
    out = {}
    for shp in shapes:
        for d in shp:
            if isinstance(d, torch.SymInt):
                for s in d.node.expr.free_symbols:
                    out[s] = True
    return list(out)


def _hint(v):
    if isinstance(v, (torch.SymInt, torch.SymFloat)):
        node = v.node
        if node.has_hint():
            return node.hint
        from torch.fx.experimental.symbolic_shapes import optimization_hint
        return optimization_hint(v)
    return v


def _hint_of(sym, shapes):
    for shp in shapes:
        for d in shp:
            if isinstance(d, torch.SymInt) and d.node.expr == sym:
                return int(_hint(d))
    env = _shape_env(shapes)
    return int(env.var_to_val[sym])


def _shape_env(shapes):
    for shp in shapes:
        for d in shp:
            if isinstance(d, torch.SymInt):
                return d.node.shape_env
    raise PyptoError("internal error: no symbolic size")


def _eval(d, values):
    if isinstance(d, torch.SymInt):
        return int(d.node.expr.xreplace(values))
    return int(d)


def _stand_in(shape, tdtype):
    """A real CPU tensor with the shape and dtype (one element of storage; tracing reads no
    data), made outside fake/proxy modes so that it leaves no node in the traced graph."""
    with _disable_current_modes():
        return torch.empty_strided(shape, (0,) * len(shape), dtype=tdtype, device="cpu")


def _trace(kernel, kargs):
    return trace_kernel(kernel._source(), kernel._names, kargs, kernel._static_args, kernel._unroll,
                        kernel._backend, kernel._static_reasons)


# --- the call while torch compiles ---------------------------------------------------------------


def _describe(kernel, args, trace):
    """(op key, slots, static values, explicit tensors, scalars) of a call."""
    slots, static, tensors, scalars, key = [], [], [], [], []
    for i, a in enumerate(args):
        if i < kernel._k0:
            slots.append(("c",))
            static.append(a)
            key.append(("self", id(a)))
        elif isinstance(a, torch.Tensor):
            slots.append(("t", len(tensors)))
            static.append(None)
            tensors.append(a)
            key.append(("t", a.dtype, a.dim()))
        elif (is_scalar_arg(a) or isinstance(a, (torch.SymInt, torch.SymFloat))) and i not in kernel._static_args:
            slots.append(("s", len(scalars)))
            static.append(None)
            scalars.append(a)
            key.append(("s", float if isinstance(a, (float, torch.SymFloat)) else int))
        else:
            if interop.is_array(a):
                raise PyptoError(f"kernel '{kernel.__name__}': under torch.compile its array arguments must "
                                 f"be torch tensors, got {type(a).__name__}")
            slots.append(("c",))
            static.append(a)
            key.append(("c", static_key(a)))
    implicit = [src for src in trace.tr.inputs if src[0] != "arg"]
    written = []
    arg_pos = {}
    for k, src in enumerate(trace.tr.inputs):
        if src[0] == "arg":
            arg_pos[k] = slots[src[1]][1]
    imp_pos = {k: len(tensors) + j for j, k in enumerate(
        [k for k, src in enumerate(trace.tr.inputs) if src[0] != "arg"])}
    for k in sorted(trace.tr.written):
        written.append(arg_pos[k] if k in arg_pos else imp_pos[k])
    out_dtypes = tuple(_dt.to_dtype(o.dtype).torch for o in trace.outputs)
    key += [("implicit", len(implicit)), ("written", tuple(written)), ("outs", out_dtypes)]
    return tuple(key), slots, static, tensors, scalars, implicit, written, out_dtypes


def _op_for(kernel, args):
    """The custom op for this call's argument kinds, the op's tensor and scalar inputs, the
    kernel's input arrays in param order, and the template of the returned value."""
    hint_args = tuple(_stand_in(tuple(_hint(d) for d in a.shape), a.dtype) if isinstance(a, torch.Tensor)
                      else _hint(a) for a in args)
    trace = _trace(kernel, hint_args)  # learns static scalars / unrolls before the key is made
    key, slots, static, tensors, scalars, implicit, written, out_dtypes = _describe(kernel, args, trace)
    with _lock:
        ops = kernel.__dict__.setdefault("_torch_ops", {})
        entry = ops.get(key)
        if entry is None:
            scalar_types = [_Op.scalar_type(v) for v in scalars]
            entry = ops[key] = _Op(kernel, slots, static, len(implicit), set(written), out_dtypes, scalar_types)
    imp_objs = [src[1].reader()(args) for src in implicit]
    imp_iter = iter(imp_objs)
    param_objs = [args[src[1]] if src[0] == "arg" else next(imp_iter) for src in trace.tr.inputs]
    return entry, tensors + imp_objs, scalars, param_objs, trace.template


_NONE = "\x00pypto:None"  # nonstrict_trace refuses None; it travels as this string


def _enc(v):
    if v is None:
        return _NONE
    if type(v) in (tuple, list):
        return type(v)(_enc(x) for x in v)
    return v


def _dec(v):
    if type(v) is str and v == _NONE:
        return None
    if type(v) in (tuple, list):
        return type(v)(_dec(x) for x in v)
    return v


def call_traced(kernel, args, kwargs):
    """A kernel call while torch compiles or exports, traced by dynamo: an opaque call (whose
    body AOT tracing runs with fake tensors). A module the kernel is bound to goes as itself, so
    that its parameters are tracked."""
    obj = kernel._self
    args = tuple(_enc(a) for a in args)
    kwargs = {k: _enc(v) for k, v in kwargs.items()}
    if isinstance(obj, torch.nn.Module):
        return _call_module(kernel, obj, args, kwargs)
    if obj is not None:
        raise PyptoError(f"kernel '{kernel.__name__}': under torch.compile a kernel can be bound to an "
                         f"nn.Module only, not to a {type(obj).__name__}")
    return _call(kernel, args, kwargs)


@torch._dynamo.nonstrict_trace
def _call_module(kernel, module, args, kwargs):
    return _run_op(kernel, module, args, kwargs)


@torch._dynamo.nonstrict_trace
def _call(kernel, args, kwargs):
    return _run_op(kernel, None, args, kwargs)


def _run_op(kernel, obj, args, kwargs):
    args = tuple(_dec(a) for a in args)
    kwargs = {k: _dec(v) for k, v in kwargs.items()}
    args = kernel._full_args(tuple(args), kwargs)
    if kernel._k0:
        args = (obj,) + args[1:]
    entry, tensors, scalars, param_objs, template = _op_for(kernel, args)
    outs = entry.op(*tensors, *scalars)
    if not isinstance(outs, (tuple, list)):
        outs = [outs]
    return rebuild(template, list(outs), param_objs, args)
