"""Calls inside a kernel: builtins and math functions that meet run-time scalars or tensors,
pypto ops (which dispatch on their arguments themselves), other @pypto.jit kernels (inlined by
walking their source), and plain Python callables (called at trace time)."""
from __future__ import annotations

import ast
import builtins
import math
import numbers
import sys

import numpy as np

from .. import _C
from .. import dtypes as _dt
from ..interop import Tensor, is_array
from ..errors import PyptoError
from .signals import NeedsConcrete
from .values import TensorValue, is_expr
from .expressions import concrete, first_symbolic, truth
from . import tensor_ops as T

_MUTATORS = {"append", "extend", "insert", "pop", "remove", "clear", "update", "add", "discard",
             "setdefault", "popitem", "sort", "reverse", "__setitem__", "__delitem__"}


def _no_tensor(name, *values):
    for v in values:
        if isinstance(v, TensorValue):
            alt = {"min": "pypto.minimum(a, b) or x.min()", "max": "pypto.maximum(a, b) or x.max()",
                   "sum": "x.sum()", "round": "a tensor op"}.get(name, "a pypto operation")
            raise PyptoError(f"builtin {name}() cannot take a tensor; use {alt}")


def _minmax(name, fold, args, kwargs):
    if kwargs:
        vals = concrete(tuple(args), f"{name}() with keyword arguments")
        return getattr(builtins, name)(*vals, **kwargs)
    items = list(args[0]) if len(args) == 1 else list(args)
    if not items:
        raise PyptoError(f"{name}() of an empty sequence")
    _no_tensor(name, *items)
    if any(is_expr(v) for v in items):
        acc = items[0]
        for v in items[1:]:
            acc = fold(acc, v)
        return acc
    return getattr(builtins, name)(items)


def b_min(ev, args, kwargs):
    return _minmax("min", _C.expr_min, args, kwargs)


def b_max(ev, args, kwargs):
    return _minmax("max", _C.expr_max, args, kwargs)


def b_abs(ev, args, kwargs):
    (x,) = args
    if is_expr(x):
        return _C.expr_max(x, -x)
    return abs(x)


def b_int(ev, args, kwargs):
    if len(args) == 1 and not kwargs:
        x = args[0]
        _no_tensor("int", x)
        if is_expr(x):
            if x.is_const:
                return int(x.value)
            return _C.cast(x, _C.DType.I64) if x.is_float else x
    return int(*args, **kwargs)


def b_float(ev, args, kwargs):
    if len(args) == 1:
        x = args[0]
        _no_tensor("float", x)
        if is_expr(x):
            if x.is_const:
                return float(x.value)
            return x if x.is_float else _C.cast(x, _C.DType.F64)
    return float(*args)


def b_bool(ev, args, kwargs):
    if len(args) == 1:
        x = args[0]
        t = truth(x)
        if t is None:
            return x != 0
        return t
    return bool(*args)


def b_len(ev, args, kwargs):
    (x,) = args
    if isinstance(x, TensorValue):
        return len(x)
    if is_expr(x):
        raise PyptoError("len() of a run-time scalar")
    ev.tr.guard_len(x)
    return len(x)


def b_range(ev, args, kwargs):
    vals = concrete(tuple(args), "range() outside a for loop needs bounds known at trace time")
    return range(*vals)


def b_isinstance(ev, args, kwargs):
    obj, cls = args
    if isinstance(obj, TensorValue):
        classes = cls if isinstance(cls, tuple) else (cls,)
        tensor_types = [TensorValue, Tensor, np.ndarray]
        torch = sys.modules.get("torch")
        if torch is not None:
            tensor_types.append(torch.Tensor)
        return any(c in tensor_types for c in classes)
    if is_expr(obj):
        classes = cls if isinstance(cls, tuple) else (cls,)
        want = float if obj.is_float else int
        return any(c in (want, numbers.Number, numbers.Real) or (want is int and c is numbers.Integral)
                   for c in classes)
    return isinstance(obj, cls)


def b_round(ev, args, kwargs):
    _no_tensor("round", *args)
    return round(*concrete(tuple(args), "round()"), **kwargs)


def b_pow(ev, args, kwargs):
    if len(args) == 2:
        return ev.binop(ast.Pow, args[0], args[1])
    return pow(*args)


def b_divmod(ev, args, kwargs):
    a, b = args
    return (a // b, a % b)


def b_sum(ev, args, kwargs):
    it = args[0]
    if isinstance(it, TensorValue):
        raise PyptoError("builtin sum() over a tensor: use x.sum(dim)")
    acc = args[1] if len(args) > 1 else kwargs.get("start", 0)
    for v in it:
        acc = acc + v
    return acc


def _owned(fn):
    def call(ev, args, kwargs):
        return ev.tr.own(fn(*args, **kwargs))
    return call


def _math_unary(pyfn, exprfn, op):
    def call(ev, args, kwargs):
        (x,) = args
        if isinstance(x, TensorValue):
            if op is None:
                raise PyptoError(f"math.{pyfn.__name__} on a tensor: use the pypto operation")
            return T.unary(op, x)
        if is_expr(x):
            if x.is_const:
                return pyfn(x.value)
            if exprfn is None:
                raise NeedsConcrete(x, f"math.{pyfn.__name__} needs a value known at trace time")
            return exprfn(x)
        return pyfn(x)
    return call


def _math_round(pyfn):
    def call(ev, args, kwargs):
        (x,) = args
        if is_expr(x):
            if x.is_const:
                return pyfn(x.value)
            if not x.is_float:
                return x
            raise NeedsConcrete(x, f"math.{pyfn.__name__} of a run-time float")
        return pyfn(x)
    return call


Op = _C.Opcode
SPECIAL = {
    id(builtins.min): b_min, id(builtins.max): b_max, id(builtins.abs): b_abs,
    id(builtins.int): b_int, id(builtins.float): b_float, id(builtins.bool): b_bool,
    id(builtins.len): b_len, id(builtins.range): b_range, id(builtins.isinstance): b_isinstance,
    id(builtins.round): b_round, id(builtins.pow): b_pow, id(builtins.divmod): b_divmod,
    id(builtins.sum): b_sum,
    id(builtins.list): _owned(list), id(builtins.dict): _owned(dict), id(builtins.set): _owned(set),
    id(math.sqrt): _math_unary(math.sqrt, _C.expr_sqrt, Op.TSQRT),
    id(math.exp): _math_unary(math.exp, _C.expr_exp, Op.TEXP),
    id(math.log): _math_unary(math.log, _C.expr_log, Op.TLOG),
    id(math.tanh): _math_unary(math.tanh, None, Op.TTANH),
    id(math.erf): _math_unary(math.erf, None, Op.TERF),
    id(math.floor): _math_round(math.floor), id(math.ceil): _math_round(math.ceil),
}


def check_mutation(ev, container):
    """Python containers may only be modified when the kernel made them, and not inside a loop
    that stays a loop (the change would happen once, not per iteration): such a loop unrolls."""
    if not ev.tr.is_owned(container):
        raise PyptoError(f"a kernel may not modify a {type(container).__name__} it did not create "
                         "(it belongs to the caller); copy it first, e.g. list(x)")
    if ev.tr.sym_depth > 0:
        raise NeedsConcrete(None, f"a Python {type(container).__name__} is modified inside a loop or "
                                  "an if whose condition is only known at run time")


def call_value(ev, f, args, kwargs):
    special = SPECIAL.get(id(f))
    if special is not None:
        return special(ev, args, kwargs)
    if getattr(f, "_pypto_jit", False):
        return ev.inline_kernel(f, args, kwargs)
    owner = getattr(f, "__self__", None)
    if isinstance(owner, (list, dict, set)) and getattr(f, "__name__", "") in _MUTATORS:
        check_mutation(ev, owner)
    if isinstance(f, TensorValue) or is_expr(f):
        raise PyptoError("a tensor or scalar is not callable")
    if _is_torch_callable(f):
        args, kwargs = _torch_dtypes(args, kwargs)
    try:
        result = f(*args, **kwargs)
    except (NeedsConcrete, PyptoError):
        raise
    except TypeError:
        s = first_symbolic(args, kwargs)
        if s is not None and _is_torch_callable(f) and getattr(f, "__name__", "") in _SIZED_CREATION:
            made = _SIZED_CREATION[f.__name__](args, kwargs)  # torch.arange(seq_len): no specialisation
            if made is not None:
                return made
        if s is not None:
            raise NeedsConcrete(s, f"calling {getattr(f, '__name__', 'a function')} with a value only "
                                   "known at run time") from None
        raise
    if is_array(result) and 0 not in tuple(result.shape):
        return ev.tr.const_input(result)
    return result  # an array with no elements (an empty slice) has nothing to read at run time


def _is_torch_callable(f):
    mod = getattr(f, "__module__", None)
    return isinstance(mod, str) and (mod == "torch" or mod.startswith("torch."))


def _torch_dtypes(args, kwargs):
    """A traced tensor's dtype is a pypto.dtype; torch callables such as torch.finfo(x.dtype) or
    torch.zeros(n, dtype=x.dtype) want a torch.dtype: convert at the call."""
    def conv(v):
        return v.torch if isinstance(v, _dt.dtype) else v
    if not any(isinstance(v, _dt.dtype) for v in (*args, *kwargs.values())):
        return args, kwargs
    return [conv(v) for v in args], {k: conv(v) for k, v in kwargs.items()}


# torch's creation functions given a length of dynamic dims (torch.arange(seq_len),
# torch.zeros(b, seq_len)): made by the kernel at run time instead of a variant per length. None
# where the arguments are not a plain size (torch then specialises as before).
_IGNORED_CREATION_KEYWORDS = ("device", "requires_grad", "pin_memory", "layout", "memory_format")


def _creation_dtype(kwargs, default):
    extra = [k for k in kwargs if k not in _IGNORED_CREATION_KEYWORDS + ("dtype",)]
    if extra:
        return None
    d = kwargs.get("dtype")
    return _dt.to_dtype(d) if d is not None else default


def _arange(args, kwargs):
    if not 1 <= len(args) <= 3:
        return None
    start, stop, step = (0, args[0], 1) if len(args) == 1 else (args[0], args[1], args[2] if len(args) == 3 else 1)
    floats = any(isinstance(v, float) or (is_expr(v) and v.is_float) for v in (start, stop, step))
    d = _creation_dtype(kwargs, _dt.float32 if floats else _dt.int64)
    return None if d is None else T.arange(start, stop, step, d)


def _sized(fill):
    def make(args, kwargs):
        shape = tuple(args[0]) if len(args) == 1 and isinstance(args[0], (tuple, list)) else tuple(args)
        value = fill
        if fill is None:  # torch.full(size, fill_value)
            if len(args) != 2 or not isinstance(args[0], (tuple, list)):
                return None
            shape, value = tuple(args[0]), args[1]
        default = _dt.bool_ if isinstance(value, bool) else _dt.int64 if isinstance(value, int) and fill is None \
            else _dt.float32
        d = _creation_dtype(kwargs, default)
        return None if d is None or isinstance(value, TensorValue) else T.full(shape, value, d)
    return make


_SIZED_CREATION = {"arange": _arange, "zeros": _sized(0.0), "ones": _sized(1.0), "empty": _sized(0.0),
                   "full": _sized(None)}
