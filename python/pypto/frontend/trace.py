"""Tracing a kernel: bind the arguments, walk the AST, restart when the walk learns that a loop
must be unrolled or a scalar argument must be a compile-time constant, and describe the result
(which outputs to allocate, how to rebuild the returned value)."""
from __future__ import annotations

import ast
import copy
import dataclasses
import inspect
import numbers
import sys

from .. import interop
from ..errors import KernelSourceError, PyptoError
from .native import native_reason, run_native
from .signals import NeedsConcrete, Restart
from .tracer import Path, Tracer
from .values import TensorValue, is_expr
from .walker import FunctionWalker
from . import composite_ops, index_ops, math_ops, tensor_ops, torch_functions, values

# TensorValue's methods call the operation modules, which sit above it: this driver binds them
# before anything is traced.
values.bind_operations(tensor_ops, composite_ops, index_ops, math_ops, torch_functions)

MAX_RESTARTS = 64


class Trace:
    """The result of tracing: the tracer (inputs, scalars, guards), the program, the output
    TensorValues and the template of the returned value."""

    def __init__(self, tr, program, outputs, template):
        self.tr = tr
        self.program = program
        self.outputs = outputs
        self.template = template
        self.dynamic = tr.dynamic  # arg index -> dims traced as dimension symbols


def is_scalar_arg(v):
    return isinstance(v, numbers.Real) and not isinstance(v, bool) and not interop.is_array(v)


def trace_kernel(src, names, args, static_args, unroll, backend, static_reasons=None, dynamic=None,
                 static_dims=None):
    """Trace `src` with positional values `args` (named `names`). `static_args` and `unroll` are
    sets the caller keeps: restarts add to them so later signatures start from what was learned.
    `static_reasons` (a dict the caller keeps, optional) gets, per specialised argument index,
    the kernel line that needed its value. `dynamic` maps arg indices to the dims traced as
    dimension symbols; a dim whose value the kernel needs at trace time is dropped from it and
    added to `static_dims` (a dict the caller keeps: (arg, dim) -> why)."""
    dynamic = {i: set(d) for i, d in (dynamic or {}).items()}
    for _ in range(MAX_RESTARTS):
        tr = Tracer(src.func.__name__, unroll, static_args, backend, dynamic)
        try:
            with tr:
                return _trace_once(tr, src, names, args)
        except Restart as r:
            if r.unroll is not None:
                unroll.add(r.unroll)
            if r.static_arg is not None:
                static_args.add(r.static_arg)
                if static_reasons is not None:
                    static_reasons[r.static_arg] = r.why
            if r.static_dim is not None:
                # Every dynamic dim sharing that symbol (the same extent) becomes static with it.
                i0, d0 = r.static_dim
                extent = interop.array_info(args[i0])[1][d0]
                for i, dims in dynamic.items():
                    shape = interop.array_info(args[i])[1]
                    for d in [d for d in dims if shape[d] == extent]:
                        dims.discard(d)
                        if static_dims is not None:
                            static_dims[(i, d)] = r.why
    raise PyptoError(f"kernel '{src.name}': tracing did not settle after {MAX_RESTARTS} attempts")


def _trace_once(tr, src, names, args):
    tr.torch_flavour = any(interop.array_kind(v) == interop.TORCH or _is_module(v) for v in args)
    signature = inspect.signature(src.func)
    native = native_reason(src.func, src.fdef, signature, bool(args) and _is_module(args[0])) is not None
    if native:
        # Python code reads its numbers as Python values (isinstance(n, int), slice(-n, None)):
        # a function run as Python takes them as compile-time constants, one variant per value.
        for i, v in enumerate(args):
            if is_scalar_arg(v) and i not in tr.static_args:
                raise Restart(static_arg=i, why=f"{src.filename}:{src.lineno(src.fdef)}: '{names[i]}' of a "
                                                "function run as Python (frontend/native.py)")
    bound = {}
    for i, (name, v) in enumerate(zip(names, args)):
        if interop.is_array(v):
            bound[name] = tr.tensor_param(name, v, ("arg", i))
        elif is_scalar_arg(v) and i not in tr.static_args:
            bound[name] = tr.scalar_param(name, isinstance(v, float) or not isinstance(v, numbers.Integral), i)
        elif _holds_arrays(v):  # a list / tuple / dict of tensors (a grouped GEMM's operands)
            bound[name] = _traced_container(tr, v, Path(("arg", i)))
        else:
            bound[name] = tr.from_python(v, Path(("arg", i)))
            tr.note_module_tensors(v, Path(("arg", i)))
            if _is_module(v):
                tr.guard_module_state(v)
    undo, effects = None, []
    try:
        if native:
            result, undo, effects = run_native(tr, src, signature, bound,
                                               [(v, Path(("arg", i))) for i, v in enumerate(args)
                                                if not interop.is_array(v)])
        else:
            result = FunctionWalker(tr, src).run(bound)
    except NeedsConcrete as e:
        _resolve_at_top(tr, src, e)
    try:
        outputs, template = describe_result(tr, result, effects)
        program = tr.finish(outputs)
    except PyptoError as e:
        if isinstance(e, KernelSourceError):
            raise
        raise KernelSourceError(src.where(_last_return(src.fdef), str(e))) from None
    finally:
        if undo is not None:
            undo()
    return Trace(tr, program, outputs, template)


def _holds_arrays(v, depth=0):
    if isinstance(v, (list, tuple)):
        return depth < 4 and any(interop.is_array(x) or _holds_arrays(x, depth + 1) for x in v)
    if type(v) is dict:
        return depth < 4 and any(interop.is_array(x) or _holds_arrays(x, depth + 1) for x in v.values())
    return False


def _traced_container(tr, v, path):
    """A copy of a list / tuple / dict argument with its arrays as kernel inputs (read afresh at
    every call through their item paths), its other values as they are."""
    def conv(x, p):
        if interop.is_array(x):
            return tr.implicit_input(x, p)
        if isinstance(x, (list, tuple)) or type(x) is dict:
            return _traced_container(tr, x, p)
        return x
    if type(v) is dict:
        return {k: conv(x, path.child(("item", k))) for k, x in v.items()}
    items = [conv(x, path.child(("item", j))) for j, x in enumerate(v)]
    return type(v)(*items) if hasattr(type(v), "_fields") else type(v)(items)


def _is_module(v):
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(v, torch.nn.Module)


def _resolve_at_top(tr, src, e):
    """A value needed at trace time is only known at run time: an int/float argument it depends
    on becomes a compile-time constant (an inferred meta-parameter, like Triton's tl.constexpr;
    its value joins the cache key), else the kernel line is reported."""
    where_src = getattr(e, "src", None) or src
    node = e.node if e.node is not None else src.fdef
    if e.expr is not None:
        why = f"{where_src.filename}:{where_src.lineno(node)}: {e.what}"
        args = sorted({tr.scalar_vars[v] for v in e.expr.vars() if v in tr.scalar_vars})
        if args:
            raise Restart(static_arg=args[0], why=why)
        dims = sorted({tr.dim_vars[v] for v in e.expr.vars() if v in tr.dim_vars})
        if dims:  # a dynamic dim needed as a Python value: that dim is specialised instead
            raise Restart(static_dim=dims[0], why=why)
    value = f": {e.expr} is only known when the kernel runs" if e.expr is not None else ""
    raise KernelSourceError(where_src.where(node, f"{e.what}{value}"))


def _last_return(fdef):
    for n in reversed(list(ast.walk(fdef))):
        if isinstance(n, ast.Return):
            return n
    return fdef


def describe_result(tr, result, effects=()):
    """Output TensorValues (deduplicated) and a template to rebuild the returned value:
    ("out", k) | ("input", k) | ("static", v) | ("seq", type, [templates]) | ("dict", keys, [templates], type)
    | ("obj", object, {attribute: template}, reader of the object from the call's arguments or None)
    | ("effects", template, [(reader of a container, "attr" | "item", key, template)])."""
    outputs = []
    index = {}

    def walk(v):
        if isinstance(v, TensorValue):
            view = v.bv
            if view.buffer_kind == "param" and view.is_whole and view.buffer_id in tr.param_index:
                return ("input", tr.param_index[view.buffer_id])
            k = index.get(id(v))
            if k is None:
                k = index[id(v)] = len(outputs)
                outputs.append(v)
            return ("out", k)
        if isinstance(v, (tuple, list)):
            kind = type(v) if type(v) in (tuple, list) or _is_namedtuple(v) else tuple
            return ("seq", kind, [walk(x) for x in v])
        if isinstance(v, dict):  # a dict subclass (an OrderedDict, a Hugging Face ModelOutput) kept
            return ("dict", list(v.keys()), [walk(x) for x in v.values()], type(v))
        if is_expr(v):
            if v.is_const:
                return ("static", v.value)
            raise PyptoError("a kernel cannot return a scalar known only at run time; return a tensor "
                             "(e.g. pypto.full((1,), value))")
        return walk_object(v)

    seen = set()

    def walk_object(v):
        """An object holding traced tensors in its attributes (a Hugging Face cache): at each call
        those attributes get the run's tensors, on the call's own object where it came from an
        argument, else on a shallow copy."""
        if not hasattr(v, "__dict__") or isinstance(v, type) or callable(v) or _is_module(v) or id(v) in seen:
            return ("static", v)
        seen.add(id(v))
        attrs = {k: walk(x) for k, x in vars(v).items()}
        traced = {k: t for k, t in attrs.items() if t[0] != "static"}
        if not traced:
            return ("static", v)
        path = tr.path_of(v)  # an argument's object (a cache passed in) is updated in place
        return ("obj", v, traced, path.reader() if path is not None else None)

    template = walk(result)
    if effects:  # assignments into the arguments, done again at each call (native.py)
        done = [(reader, kind, key, walk(v)) for reader, kind, key, v in effects]
        template = ("effects", template, done)
    return outputs, template


def rebuild(template, outs, inputs, args=None):
    """The returned value from the run's outputs; `args`, the call's arguments (None: not known),
    lets an object the kernel updated in one of them be updated in place, as the function did."""
    kind = template[0]
    if kind == "out":
        return outs[template[1]]
    if kind == "input":
        return inputs[template[1]]
    if kind == "static":
        return template[1]
    if kind == "effects":
        for reader, how, key, t in template[2]:
            if args is None:
                break
            try:
                target = reader(args)
            except Exception:  # noqa: BLE001 - the argument no longer has that container
                continue
            value = rebuild(t, outs, inputs, args)
            if how == "attr":
                setattr(target, key, value)
            else:
                target[key] = value
        return rebuild(template[1], outs, inputs, args)
    if kind == "obj":
        _, obj, attrs, reader = template
        target = None
        if reader is not None and args is not None:
            try:
                target = reader(args)
            except Exception:  # noqa: BLE001 - the argument changed shape: a copy, as for a fresh object
                target = None
        if target is None or type(target) is not type(obj):
            target = copy.copy(obj)
        for name, t in attrs.items():
            setattr(target, name, rebuild(t, outs, inputs, args))
        return target
    if kind == "seq":
        items = [rebuild(t, outs, inputs, args) for t in template[2]]
        return template[1](*items) if _is_namedtuple(template[1]) else template[1](items)
    items = {k: rebuild(t, outs, inputs, args) for k, t in zip(template[1], template[2])}
    cls = template[3]
    if cls is dict:
        return items
    # a dataclass mapping (ModelOutput) is built from its fields, other mappings from their items
    return cls(**items) if dataclasses.is_dataclass(cls) else cls(items)


def _is_namedtuple(v):
    t = v if isinstance(v, type) else type(v)
    return issubclass(t, tuple) and hasattr(t, "_fields")
