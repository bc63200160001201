"""Tensor operations while tracing: each maps onto one or a few builder calls.

Arguments may be TensorValues, run-time scalars (Expr), Python numbers, or arrays met at trace
time (those become constant inputs of the kernel)."""
from __future__ import annotations

import math
import numbers

import numpy as np

from .. import _C
from .. import dtypes as _dt
from ..interop import is_array
from ..errors import PyptoError
from .signals import NeedsConcrete
from .values import DYNAMIC_BOUND, Expr, Opcode, TensorValue, is_expr
from . import masked_attention as MA
from . import tracer as _tracer

__all__ = []


def find_tracer(*xs):
    for x in xs:
        if isinstance(x, TensorValue):
            return x.tr
        if isinstance(x, (list, tuple)):
            t = find_tracer(*x)
            if t is not None:
                return t
    tr = _tracer.current()
    if tr is None:
        raise PyptoError("this operation is only available inside a @pypto.jit kernel")
    return tr


def operand(tr, x):
    """A builder operand: a View for tensors, the scalar itself otherwise."""
    if isinstance(x, TensorValue):
        if x.tr is not tr:
            raise PyptoError("a tensor from another kernel's trace was used")
        return x.bv
    if is_expr(x) or isinstance(x, (bool, int, float)):
        return x
    if isinstance(x, np.generic) and x.ndim == 0:
        return x.item()
    if isinstance(x, numbers.Real):
        return float(x)
    if is_array(x):
        return tr.const_input(x).bv
    if x is None:
        raise PyptoError("None is not a tensor or a number")
    raise PyptoError(f"expected a tensor or a number, got {type(x).__name__}")


def tensor_of(tr, x, what="argument"):
    o = operand(tr, x)
    if isinstance(o, _C.View):
        return o
    raise PyptoError(f"{what} must be a tensor, got {_describe(x)}")


def _describe(x):
    if is_expr(x):
        return f"the scalar {x}"
    return type(x).__name__ if not isinstance(x, (int, float)) else repr(x)


def traced(x):
    """A traced tensor for x (a real tensor becomes a kernel input)."""
    if isinstance(x, TensorValue):
        return x
    tr = find_tracer(x)
    return wrap(tr, tensor_of(tr, x))


def wrap(tr, view):
    return TensorValue(tr, view)


def static_int(v, what):
    """A compile-time integer (shape, dimension, count)."""
    if isinstance(v, bool):
        raise PyptoError(f"{what} must be an integer, got {v}")
    if isinstance(v, (int, np.integer)):
        return int(v)
    if is_expr(v):
        if v.is_const and not v.is_float:
            return int(v.value)
        if not v.is_const:
            raise NeedsConcrete(v, f"{what} must be known at compile time")
    raise PyptoError(f"{what} must be an integer, got {_describe(v)}")


def static_float(v, what):
    """A compile-time number (eps, ...)."""
    if is_expr(v):
        if v.is_const:
            return float(v.value)
        raise NeedsConcrete(v, f"{what} must be known at compile time")
    if isinstance(v, TensorValue):
        raise PyptoError(f"{what} must be a number, got a tensor")
    return float(v)


def static_shape(shape, what="shape"):
    if isinstance(shape, (int, np.integer, Expr)) and not isinstance(shape, bool):
        shape = (shape,)
    if not isinstance(shape, (tuple, list)):
        raise PyptoError(f"{what} must be a tuple of integers, got {_describe(shape)}")
    return [static_int(s, f"{what} entries") for s in shape]


def creation_shape(tr, shape, what="shape"):
    """A shape for a new tensor: ints, and for a dynamic dim its extent (an Expr of dimension
    symbols only; any other run-time value must be known at compile time)."""
    if isinstance(shape, (int, np.integer, Expr)) and not isinstance(shape, bool):
        shape = (shape,)
    if not isinstance(shape, (tuple, list)):
        raise PyptoError(f"{what} must be a tuple of integers, got {_describe(shape)}")
    out = []
    for s in shape:
        if is_expr(s) and not s.is_const and not s.is_float and tr.dim_vars and \
                all(v in tr.dim_vars for v in s.vars()):
            out.append(s)
        else:
            out.append(static_int(s, f"{what} entries"))
    return out


def dims_arg(dim):
    if dim is None:
        return []
    if isinstance(dim, (tuple, list)):
        return [static_int(d, "dim") for d in dim]
    return [static_int(dim, "dim")]


# --- elementwise -------------------------------------------------------------------------------

def binary(op, a, b):
    tr = find_tracer(a, b)
    oa, ob = operand(tr, a), operand(tr, b)
    if not isinstance(oa, _C.View) and not isinstance(ob, _C.View):
        raise PyptoError(f"{op.name} needs at least one tensor operand")
    r = wrap(tr, tr.b.binary(op, oa, ob))
    MA.note_binary(tr, op, a, b, r)
    return r


def unary(op, x):
    tr = find_tracer(x)
    return wrap(tr, tr.b.unary(op, tensor_of(tr, x)))


def compare(op, a, b):
    return binary(op, a, b)


def logical(op, a, b):
    tr = find_tracer(a, b)
    oa, ob = operand(tr, a), operand(tr, b)
    for o, x in ((oa, a), (ob, b)):
        if isinstance(o, _C.View) and o.dtype != "bool":
            raise PyptoError(f"& and | need bool tensors, got {o.dtype}; compare first (x > 0) or use "
                             "pypto.maximum / minimum")
    return wrap(tr, tr.b.binary(op, oa, ob))


_BITWISE_NAMES = {Opcode.TBAND: "bitwise_and (&)", Opcode.TBOR: "bitwise_or (|)", Opcode.TBXOR: "bitwise_xor (^)",
                  Opcode.TSHL: "left_shift (<<)", Opcode.TSHR: "right_shift (>>)"}
_BOOL_LOGICAL = {Opcode.TBAND: Opcode.TAND, Opcode.TBOR: Opcode.TOR, Opcode.TBXOR: Opcode.TCMP_NE}


def bitwise(op, a, b):
    """& | ^ << >> on integer tensors (two's complement, as torch); on bool tensors & | ^ are logical."""
    tr = find_tracer(a, b)
    oa, ob = operand(tr, a), operand(tr, b)
    name = _BITWISE_NAMES[op]
    all_bool = True
    for o, x in ((oa, a), (ob, b)):
        if isinstance(o, _C.View):
            d = _dt.to_dtype(o.dtype)
            if d.is_floating_point:
                raise PyptoError(f"{name} needs integer or bool tensors, got {d.name}")
            all_bool = all_bool and d is _dt.bool_
        elif isinstance(x, float):
            raise PyptoError(f"{name} needs integers, got {x!r}")
        elif not isinstance(x, bool):
            all_bool = False
    if all_bool:
        if op not in _BOOL_LOGICAL:
            raise PyptoError(f"{name} is not defined for bool tensors")
        return wrap(tr, tr.b.binary(_BOOL_LOGICAL[op], oa, ob))
    return wrap(tr, tr.b.binary(op, oa, ob))


def bitwise_not(x):
    """~x: bitwise not of an integer tensor, logical not of a bool tensor."""
    tr = find_tracer(x)
    v = tensor_of(tr, x)
    d = _dt.to_dtype(v.dtype)
    if d is _dt.bool_:
        return wrap(tr, tr.b.unary(Opcode.TNOT, v))
    if d.is_floating_point:
        raise PyptoError(f"~ (bitwise_not) needs an integer or bool tensor, got {d.name}")
    return wrap(tr, tr.b.unary(Opcode.TBNOT, v))


def logical_not(x):
    tr = find_tracer(x)
    v = tensor_of(tr, x)
    if v.dtype != "bool":
        raise PyptoError(f"~ needs a bool tensor, got {v.dtype}")
    return wrap(tr, tr.b.unary(Opcode.TNOT, v))


def power(a, b):
    """a ** b (TPOW; lower_composites turns a constant exponent of 1, 2 or -1 into TMOV, TMUL, TRECIP)."""
    return binary(Opcode.TPOW, a, b)


def floordiv(a, b):
    """a // b: exact for integers (TFLOORDIV), floor(a / b) for floats."""
    return binary(Opcode.TFLOORDIV, a, b)


def mod(a, b):
    """a % b with the divisor's sign, as Python (TREM)."""
    return binary(Opcode.TREM, a, b)


def gelu(x, approximate="none"):
    if approximate == "none":
        return unary(Opcode.TGELU, x)
    if approximate == "tanh":
        return unary(Opcode.TGELU_TANH, x)
    raise PyptoError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")


def clamp(x, lo=None, hi=None):
    """min(max(x, lo), hi), either bound optional (the CLAMP composite op)."""
    tr = find_tracer(x, lo, hi)
    return wrap(tr, tr.b.clamp(tensor_of(tr, x), None if lo is None else operand(tr, lo),
                               None if hi is None else operand(tr, hi)))


def hardtanh(x, lo, hi):
    """min(max(x, lo), hi) with scalar bounds, its gradient 0 at the bounds (torch's hardtanh and
    relu6; a clamp's gradient passes there); integer tensors as a clamp."""
    tr = find_tracer(x)
    t = tensor_of(tr, x)
    if not _dt.to_dtype(t.dtype).is_floating_point:
        return clamp(x, lo, hi)
    return wrap(tr, tr.b.hardtanh(t, float(lo), float(hi)))


def norm_sqrt(u):
    """sqrt(u) of a sum of squares (a 2-norm, a standard deviation, a distance), its gradient 0
    where u is 0, as torch's backward of those (sqrt's own gradient is inf there, and NaN once
    the sum of squares' backward multiplies it by 0: the zero diagonal of cdist(x, x))."""
    zero = compare(Opcode.TCMP_EQ, u, 0.0)
    return where(zero, 0.0, unary(Opcode.TSQRT, where(zero, 1.0, u)))


def where(cond, a, b):
    tr = find_tracer(cond, a, b)
    oc = operand(tr, cond)
    if not isinstance(oc, _C.View):
        raise PyptoError("where: the condition must be a tensor")
    return wrap(tr, tr.b.select(oc, operand(tr, a), operand(tr, b)))


def cast(x, dtype):
    tr = find_tracer(x)
    v = tensor_of(tr, x)
    d = _dt.to_dtype(dtype)
    if v.dtype == d.short:
        return x
    return wrap(tr, tr.b.cast(v, d.c))


def copy(x):
    tr = find_tracer(x)
    return wrap(tr, tr.b.copy(tensor_of(tr, x)))


# --- reductions and composites -----------------------------------------------------------------

_REDUCE = {"sum": Opcode.TROWSUM, "max": Opcode.TROWMAX, "min": Opcode.TROWMIN}


def detach(x):
    """x as a constant for autodiff (no gradient flows through it); scalars are returned as they are."""
    if not isinstance(x, TensorValue):
        return x
    tr = find_tracer(x)
    return wrap(tr, tr.b.detach(tensor_of(tr, x)))


def reduce(kind, x, dim=None, keepdim=False):
    tr = find_tracer(x)
    if isinstance(x, TensorValue) and x.ndim == 0 and dim is None:
        return x  # the reduction of a single value (as NumPy)
    dims = dims_arg(dim)
    if kind in ("max", "min") and isinstance(x, TensorValue) and x.ndim > 1:
        # Several dims (all, for max()) reduced as one, moved last first where they are not: a tie
        # for the extreme shares the gradient evenly among all the tied elements, as torch's
        # (reduced dim by dim, it would be shared per dim).
        n = x.ndim
        ds = sorted({d % n for d in dims} if dims else range(n))
        if len(ds) > 1 and all(isinstance(s, int) for s in x.shape):
            keep = [d for d in range(n) if d not in ds]
            moved = x if ds == list(range(n - len(ds), n)) else permute(x, keep + ds)
            lead = [x.shape[d] for d in keep]
            r = wrap(tr, tr.b.reduce(_REDUCE[kind], tensor_of(tr, reshape(moved, lead + [-1])), [-1], False))
            return reshape(r, [1 if d in ds else x.shape[d] for d in range(n)]) if keepdim else r
    return wrap(tr, tr.b.reduce(_REDUCE[kind], tensor_of(tr, x), dims, bool(keepdim)))


def mean(x, dim=None, keepdim=False):
    tr = find_tracer(x)
    return wrap(tr, tr.b.mean(tensor_of(tr, x), dims_arg(dim), bool(keepdim)))


def matmul(a, b):
    tr = find_tracer(a, b)
    p = None if getattr(tr, "attention_rewriting", False) else MA.plan(a, b)
    if p is not None:  # softmax(q k^T * s + a constant banded mask) @ v
        return _masked_attention_by_blocks(tr, b, *p)
    r = wrap(tr, tr.b.matmul(tensor_of(tr, a, "matmul operand"), tensor_of(tr, b, "matmul operand")))
    MA.note_matmul(tr, a, b, r)
    return r


def _masked_attention_by_blocks(tr, v, q, kt, scales, mask, blocks):
    """Row block [r0, r1) of the attention against keys [0, c) only (frontend/masked_attention.py)."""
    tr.attention_rewriting = True
    try:
        parts = []
        for (r0, r1), c in blocks:
            s = matmul(index(q, (Ellipsis, slice(r0, r1), slice(None))),
                       index(kt, (Ellipsis, slice(None), slice(0, c))))
            for op, scalar, side in scales:
                s = binary(op, s, scalar) if side == 0 else binary(op, scalar, s)
            s = binary(Opcode.TADD, s, np.ascontiguousarray(mask[r0:r1, :c]))
            parts.append(matmul(softmax(s, -1), index(v, (Ellipsis, slice(0, c), slice(None)))))
        return concat(parts, -2)
    finally:
        tr.attention_rewriting = False


def matmul_as(a, b, dtype):
    """a @ b with a result of `dtype` (operands of one dtype, e.g. int8 into int32)."""
    tr = find_tracer(a, b)
    return wrap(tr, tr.b.matmul_as(tensor_of(tr, a, "matmul operand"), tensor_of(tr, b, "matmul operand"),
                                   _dt.to_dtype(dtype).c))


def matmul_acc(dst, a, b):
    tr = find_tracer(dst, a, b)
    d = tensor_of(tr, dst)
    tr.note_write(d)
    tr.b.matmul_acc(d, tensor_of(tr, a, "matmul operand"), tensor_of(tr, b, "matmul operand"))


def softmax(x, dim=-1):
    tr = find_tracer(x)
    r = wrap(tr, tr.b.softmax(tensor_of(tr, x), static_int(dim, "dim")))
    MA.note_softmax(tr, x, dim, r)
    return r


def log_softmax(x, dim=-1):
    tr = find_tracer(x)
    return wrap(tr, tr.b.log_softmax(tensor_of(tr, x), static_int(dim, "dim")))


def _normalized_dims(x, normalized_shape, what):
    ns = static_shape(normalized_shape, "normalized_shape")
    if tuple(ns) != tuple(x.shape[len(x.shape) - len(ns):]) or len(ns) > len(x.shape):
        raise PyptoError(f"{what}: normalized_shape {tuple(ns)} does not match the last dimensions of the "
                         f"input of shape {tuple(x.shape)}")
    return len(ns)


def layer_norm(x, normalized_shape, weight=None, bias=None, eps=1e-5):
    tr = find_tracer(x, weight, bias)
    v = tensor_of(tr, x)
    nd = _normalized_dims(v, normalized_shape, "layer_norm")
    w = tensor_of(tr, weight, "weight") if weight is not None else None
    bb = tensor_of(tr, bias, "bias") if bias is not None else None
    return wrap(tr, tr.b.layer_norm(v, nd, w, bb, static_float(eps, 'eps')))


def rms_norm(x, normalized_shape, weight=None, eps=1e-6):
    tr = find_tracer(x, weight)
    v = tensor_of(tr, x)
    nd = _normalized_dims(v, normalized_shape, "rms_norm")
    w = tensor_of(tr, weight, "weight") if weight is not None else None
    return wrap(tr, tr.b.rms_norm(v, nd, w, static_float(eps, 'eps')))


def concat(xs, dim=0):
    if not isinstance(xs, (list, tuple)):
        raise PyptoError("concat expects a list or tuple of tensors")
    # Parts with no elements add nothing, as in torch: a real empty array (a cache's empty start,
    # torch.tensor([])) or an empty slice of a traced tensor (_empty_result).
    kept = [x for x in xs if isinstance(x, TensorValue) or int(np.prod(np.shape(x))) != 0]
    if not kept:
        raise PyptoError("concat: every tensor is empty")
    tr = find_tracer(*kept)
    return wrap(tr, tr.b.concat([tensor_of(tr, x, "concat input") for x in kept], static_int(dim, "dim")))


def _pair(v, what):
    if isinstance(v, (tuple, list)):
        if len(v) != 2:
            raise PyptoError(f"conv2d: {what} needs one or two values, got {len(v)}")
        return [static_int(v[0], what), static_int(v[1], what)]
    s = static_int(v, what)
    return [s, s]


def conv2d(input, weight, bias=None, stride=1, padding="same", dilation=1):
    tr = find_tracer(input, weight, bias)
    x = tensor_of(tr, input, "conv2d input")
    w = tensor_of(tr, weight, "conv2d weight")
    bv = tensor_of(tr, bias, "conv2d bias") if bias is not None else None
    st = _pair(stride, "stride")
    dl = _pair(dilation, "dilation")
    same = False
    pad = [0, 0]
    if isinstance(padding, str):
        if padding == "same":
            if st != [1, 1]:
                raise PyptoError(f"conv2d: padding='same' needs stride 1, got stride {tuple(st)}")
            same = True
        elif padding == "valid":
            pad = [0, 0]
        else:
            raise PyptoError(f"conv2d: padding must be 'same', 'valid', an int or a pair, got {padding!r}")
    else:
        pad = _pair(padding, "padding")
    return wrap(tr, tr.b.conv2d(x, w, bv, st, pad, dl, same))


# --- layout --------------------------------------------------------------------------------------

def transpose(x, d0=-2, d1=-1):
    tr = find_tracer(x)
    return wrap(tr, tr.b.transpose(tensor_of(tr, x), static_int(d0, "dim"), static_int(d1, "dim")))


def permute(x, dims):
    tr = find_tracer(x)
    return wrap(tr, tr.b.permute(tensor_of(tr, x), [static_int(d, "dim") for d in dims]))


def reshape(x, shape):
    tr = find_tracer(x)
    v = tensor_of(tr, x)
    shape = creation_shape(tr, shape)
    if any(is_expr(s) for s in shape) or DYNAMIC_BOUND in v.shape:  # dynamic dims stay in place: one step
        if len(shape) == len(x.shape) and all(_same_dim(a, b) for a, b in zip(shape, x.shape)):
            return x
        return wrap(tr, tr.b.reshape(v, shape))
    if shape == list(v.shape):
        return x
    n = math.prod(v.shape)
    if shape.count(-1) == 1 and n and math.prod(shape) != 0:
        shape[shape.index(-1)] = n // -math.prod(shape)
    # The builder copies once where the dims regroup by independent splits and merges, else as a
    # chain of single splits and merges (size-1 dims come free either way)
    return wrap(tr, tr.b.reshape(v, shape))


def _same_dim(a, b):
    if is_expr(a) or is_expr(b):
        return is_expr(a) and is_expr(b) and str(a) == str(b)
    return a == b


def unsqueeze(x, dim):
    tr = find_tracer(x)
    return wrap(tr, tr.b.unsqueeze(tensor_of(tr, x), static_int(dim, "dim")))


def squeeze(x, dim=None):
    tr = find_tracer(x)
    v = tensor_of(tr, x)
    if dim is None:
        for d in reversed(range(len(v.shape))):
            if v.shape[d] == 1:
                v = tr.b.squeeze(v, d)
        return wrap(tr, v)
    return wrap(tr, tr.b.squeeze(v, static_int(dim, "dim")))


def broadcast_to(x, shape):
    tr = find_tracer(x)
    v = tensor_of(tr, x)
    if isinstance(shape, (tuple, list)) and isinstance(x, TensorValue):
        # A dynamic dim asked for at its own extent (h.expand(b, n, rep, s, d), s = h.shape[-2]) stays.
        lead = len(shape) - x.ndim
        shape = [-1 if i >= lead and is_expr(s) and _same_dim(s, x.shape[i - lead]) else s
                 for i, s in enumerate(shape)]
    shape = static_shape(shape)
    shape = [v.shape[i - (len(shape) - len(v.shape))] if s == -1 else s for i, s in enumerate(shape)]
    if list(shape) == list(v.shape):
        return x
    return wrap(tr, tr.b.broadcast_to(v, shape))


# --- indexing and stores --------------------------------------------------------------------------

def _index_item(it, dim_size):
    if isinstance(it, bool):
        raise PyptoError("boolean indices are not supported")
    if isinstance(it, TensorValue):
        raise PyptoError("indexing a tensor with a tensor is not supported (use a slice or an integer)")
    if isinstance(it, np.integer):
        return int(it)
    if isinstance(it, int) or is_expr(it):
        if is_expr(it) and it.is_float:
            raise PyptoError(f"tensor indices must be integers, got {it}")
        return it
    if isinstance(it, slice):
        for part in (it.start, it.stop, it.step):
            if part is not None and not isinstance(part, (int, np.integer)) and not is_expr(part):
                raise PyptoError(f"slice bounds must be integers, got {_describe(part)}")
        step = it.step
        if step is not None:
            step = static_int(step, "a slice step")
            if step <= 0:
                raise PyptoError(f"slice steps must be positive, got {step}")
        return slice(it.start, it.stop, step)
    raise PyptoError(f"unsupported index {_describe(it)}: tensor indices must be integers, slices, `...` or None")


def index(x, key):
    """x[key] for a key of integers, slices, `...` and None: a view (no data movement). A key
    holding an index tensor goes through index_ops.index (a gather)."""
    tr = find_tracer(x)
    v = tensor_of(tr, x)
    items = list(key) if isinstance(key, tuple) else [key]
    n_ell = sum(1 for it in items if it is Ellipsis)
    if n_ell > 1:
        raise PyptoError("an index can only have a single ellipsis ('...')")
    rank = len(v.shape)
    used = sum(1 for it in items if it is not None and it is not Ellipsis)
    if used > rank:
        raise PyptoError(f"too many indices for a tensor of shape {tuple(v.shape)}: {used} given")
    out = []
    d = 0
    for it in items:
        if it is Ellipsis:
            out.extend([slice(None)] * (rank - used))
            d += rank - used
        elif it is None:
            out.append(None)
        else:
            out.append(_index_item(it, v.shape[d]))
            d += 1
    if all(isinstance(o, slice) and o == slice(None) for o in out):
        return x if isinstance(x, TensorValue) else wrap(tr, v)
    empty = _empty_result(tr, v, out)
    if empty is not None:
        return empty
    return wrap(tr, tr.b.slice(v, out))


def _empty_result(tr, v, items):
    """x[key] where a slice of a static dim selects nothing (x[..., d:] with d the dim's size, as
    transformers' rotary embeddings split a head): the tensor has no elements, so it is a real
    empty array of the result's shape (torch's in torch code), which torch.cat skips as torch does.
    None where the result has elements, or a size known only at run time."""
    shape, empty, d = [], False, 0
    for it in items:
        if it is None:
            shape.append(1)
            continue
        n = v.shape[d]
        d += 1
        if not isinstance(it, slice):
            continue
        parts = (it.start, it.stop, it.step)
        if not isinstance(n, int) or any(p is not None and not isinstance(p, (int, np.integer)) for p in parts):
            return None
        k = len(range(*slice(*(None if p is None else int(p) for p in parts)).indices(n)))
        empty |= k == 0
        shape.append(k)
    if not empty:
        return None
    shape += [n for n in v.shape[d:]]
    if not all(isinstance(n, int) for n in shape):
        return None
    dt = _dt.from_c(v.dtype_enum)
    if tr.torch_flavour:
        import torch
        return torch.empty(shape, dtype=dt.torch)
    if dt.np is None:
        return None  # NumPy has no bfloat16
    return np.empty(shape, dtype=dt.np)


def assign(dst, value):
    tr = find_tracer(dst)
    d = tensor_of(tr, dst)
    tr.note_write(d)
    tr.b.assign(d, operand(tr, value))


def update(op, dst, value):
    tr = find_tracer(dst)
    d = tensor_of(tr, dst)
    tr.note_write(d)
    tr.b.update(op, d, operand(tr, value))


# --- creation ------------------------------------------------------------------------------------

def full(shape, value, dtype=None):
    tr = find_tracer()
    if dtype is None:
        dtype = _dt.bool_ if isinstance(value, bool) else (
            _dt.int64 if isinstance(value, int) or (is_expr(value) and not value.is_float) else _dt.float32)
    d = _dt.to_dtype(dtype)
    if isinstance(value, TensorValue):
        raise PyptoError("full: the fill value must be a scalar")
    return wrap(tr, tr.b.full(creation_shape(tr, shape), d.c, operand(tr, value)))


def empty(shape, dtype=None):
    tr = find_tracer()
    d = _dt.to_dtype(dtype if dtype is not None else _dt.float32)
    return wrap(tr, tr.b.empty(creation_shape(tr, shape), d.c))


def arange(start, stop=None, step=1, dtype=None):
    tr = find_tracer()
    if stop is None:
        start, stop = 0, start
    if dtype is None:
        dtype = _dt.float32 if any(isinstance(v, float) or (is_expr(v) and v.is_float)
                                   for v in (start, stop, step)) else _dt.int64
    d = _dt.to_dtype(dtype)
    span = stop - start
    st = step.value if is_expr(step) and step.is_const else step
    if is_expr(span) and not span.is_const and isinstance(st, int) and st == 1 and not span.is_float and \
            tr.dim_vars and all(v in tr.dim_vars for v in span.vars()):
        # A length of dynamic dims (torch.arange(seq_len)): a run-time extent, no specialisation.
        return wrap(tr, tr.b.arange(start, 0, 1, d.c, span))
    if is_expr(span) and not span.is_const:
        raise NeedsConcrete(span, "the length of arange must be known at compile time")
    span = span.value if is_expr(span) else span
    if is_expr(st):
        raise NeedsConcrete(st, "the step of arange must be known at compile time")
    if st == 0:
        raise PyptoError("arange: step must not be zero")
    n = max(0, math.ceil(span / st))
    if n == 0:
        raise PyptoError("arange: empty range")
    return wrap(tr, tr.b.arange(start, n, step, d.c))


UFUNCS = {
    "add": lambda a, b: binary(Opcode.TADD, a, b),
    "subtract": lambda a, b: binary(Opcode.TSUB, a, b),
    "multiply": lambda a, b: binary(Opcode.TMUL, a, b),
    "true_divide": lambda a, b: binary(Opcode.TDIV, a, b),
    "divide": lambda a, b: binary(Opcode.TDIV, a, b),
    "power": power,
    "maximum": lambda a, b: binary(Opcode.TMAX, a, b),
    "minimum": lambda a, b: binary(Opcode.TMIN, a, b),
    "matmul": matmul,
    "negative": lambda a: unary(Opcode.TNEG, a),
    "absolute": lambda a: unary(Opcode.TABS, a),
    "exp": lambda a: unary(Opcode.TEXP, a),
    "log": lambda a: unary(Opcode.TLOG, a),
    "sqrt": lambda a: unary(Opcode.TSQRT, a),
    "tanh": lambda a: unary(Opcode.TTANH, a),
    "floor": lambda a: unary(Opcode.TFLOOR, a),
    "less": lambda a, b: compare(Opcode.TCMP_LT, a, b),
    "less_equal": lambda a, b: compare(Opcode.TCMP_LE, a, b),
    "greater": lambda a, b: compare(Opcode.TCMP_GT, a, b),
    "greater_equal": lambda a, b: compare(Opcode.TCMP_GE, a, b),
    "equal": lambda a, b: compare(Opcode.TCMP_EQ, a, b),
    "not_equal": lambda a, b: compare(Opcode.TCMP_NE, a, b),
}
