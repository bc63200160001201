"""torch functions on traced tensors: `torch.*`, `torch.nn.functional.*` and tensor methods that
PyPTO can express map to PyPTO operations (TensorValue.__torch_function__ and the tensor methods
TensorValue does not define itself come here). A torch function with no mapping raises a
PyptoError naming it, the line that called it and the nearest pypto operation.

Real torch tensors met here (a module's weights, a table computed at trace time) become kernel
inputs, as any array reached from a kernel does."""
from __future__ import annotations

import difflib
import linecache
import os
import sys

from .. import dtypes as _dt
from . import composite_ops as C
from . import contract_ops as K
from . import index_ops as X
from . import random_ops as R
from . import torch_math as TM
from . import torch_more as MORE
from . import torch_scatter as SCAT
from . import torch_special as SP
from . import torch_pool as POOL
from . import torch_nn as NN
from . import tensor_ops as T
from ..errors import PyptoError
from .intrinsics import public_op_names
from .values import Opcode, TensorValue

_table = None          # torch callable -> implementation
_methods = {}          # tensor method name -> implementation (self first)


def _torch():
    return sys.modules["torch"]


# --- implementations, with torch's argument names ------------------------------------------------

def _alpha(x, alpha):
    return x if alpha == 1 else T.binary(Opcode.TMUL, x, alpha)


def add(input, other, *, alpha=1, out=None):  # noqa: A002
    _no_out(out)
    return T.binary(Opcode.TADD, input, _alpha(other, alpha))


def sub(input, other, *, alpha=1, out=None):  # noqa: A002
    _no_out(out)
    return T.binary(Opcode.TSUB, input, _alpha(other, alpha))


def rsub(input, other, *, alpha=1):  # noqa: A002
    return T.binary(Opcode.TSUB, other, _alpha(input, alpha))


def mul(input, other, *, out=None):  # noqa: A002
    _no_out(out)
    return T.binary(Opcode.TMUL, input, other)


def div(input, other, *, rounding_mode=None, out=None):  # noqa: A002
    _no_out(out)
    if rounding_mode is None:
        return T.binary(Opcode.TDIV, input, other)
    if rounding_mode == "floor":
        return T.floordiv(input, other)
    if rounding_mode == "trunc":
        q = T.binary(Opcode.TDIV, input, other)
        t = T.where(T.compare(Opcode.TCMP_LT, q, 0), T.unary(Opcode.TNEG, T.unary(Opcode.TFLOOR, T.unary(
            Opcode.TNEG, q))), T.unary(Opcode.TFLOOR, q))
        dts = [x.dtype for x in (input, other) if isinstance(x, TensorValue)]
        return T.cast(t, dts[0]) if dts and all(not d.is_floating_point for d in dts) else t
    raise PyptoError(f"div: rounding_mode must be None, 'floor' or 'trunc', got {rounding_mode!r}")


def _no_out(out):
    if out is not None:
        raise PyptoError("out= is not supported inside a kernel; assign the result instead (y[...] = f(x))")


def _unary(op):
    def f(input, *, out=None):  # noqa: A002
        _no_out(out)
        return T.unary(op, input)
    return f


def _activation(op):
    def f(input, inplace=False):  # noqa: A002
        return T.unary(op, input)
    return f


def square(input):  # noqa: A002
    return T.binary(Opcode.TMUL, input, input)


def _public(name):
    """The public pypto.X of that name (the package, not one of its modules: ops live in several)."""
    return getattr(sys.modules[__name__.split(".")[0]], name, None)


def _math(name):
    def f(input, *, out=None):  # noqa: A002
        _no_out(out)
        fn = _public(name)
        if fn is None:
            raise PyptoError(f"torch.{name}: PyPTO has no {name} operation yet")
        return fn(input)
    return f


def _scan(name):
    def f(input, dim, *, dtype=None, out=None):  # noqa: A002
        _no_out(out)
        return _public(name)(input, dim, dtype=dtype)
    return f


def pow(input, exponent, *, out=None):  # noqa: A001,A002
    _no_out(out)
    return T.power(input, exponent)


def clamp(input, min=None, max=None, *, out=None):  # noqa: A001,A002
    _no_out(out)
    return T.clamp(input, min, max)


def where(condition, input=None, other=None):  # noqa: A002
    if input is None or other is None:
        raise PyptoError("torch.where(condition) (the indices of true elements) has a data-dependent size; "
                         "use torch.where(condition, a, b)")
    return T.where(condition, input, other)


def masked_fill(input, mask, value):  # noqa: A002
    return T.where(mask, value, input)


def masked_fill_(input, mask, value):  # noqa: A002
    T.assign(input, T.where(mask, value, input))
    return input


def _cmp(op):
    def f(input, other, *, out=None):  # noqa: A002
        _no_out(out)
        return T.compare(op, input, other)
    return f


def logical_not(input):  # noqa: A002
    return T.logical_not(_as_bool(input))


def logical_and(input, other):  # noqa: A002
    return T.logical(Opcode.TAND, _as_bool(input), _as_bool(other))


def logical_or(input, other):  # noqa: A002
    return T.logical(Opcode.TOR, _as_bool(input), _as_bool(other))


def _as_bool(x):
    return x if not isinstance(x, TensorValue) or x.pdtype is _dt.bool_ else T.compare(Opcode.TCMP_NE, x, 0)


# reductions

def _cast_opt(x, dtype):
    return T.cast(x, dtype) if dtype is not None else x


def _dims(dim):
    return None if dim is None or dim == () or dim == [] else dim


def sum(input, dim=None, keepdim=False, *, dtype=None):  # noqa: A001,A002
    return T.reduce("sum", _cast_opt(input, dtype), _dims(dim), keepdim)


def mean(input, dim=None, keepdim=False, *, dtype=None):  # noqa: A002
    return T.mean(_cast_opt(input, dtype), _dims(dim), keepdim)


def amax(input, dim=(), keepdim=False):  # noqa: A002
    return T.reduce("max", input, _dims(dim), keepdim)


def amin(input, dim=(), keepdim=False):  # noqa: A002
    return T.reduce("min", input, _dims(dim), keepdim)


def _minmax(kind, op, arg):
    def f(input, dim=None, keepdim=False, *, out=None):  # noqa: A002
        _no_out(out)
        if isinstance(dim, TensorValue) or _torch_tensor(dim):
            return _elementwise_extreme(op)(input, dim)   # torch.max(a, b): elementwise
        if dim is None:
            return T.reduce(kind, input, None, False)
        # The values by the reduction, a tie's gradient shared among the tied elements (torch gives
        # it to the index returned). Read at the indices instead, `.values` alone cost an argmax
        # and a gather: 34 vs 8 ms at 4096 x 4096; and where ties are common (the zeros a ReLU
        # leaves) the ReLU's own zero gradient makes the parameters' gradients the same.
        values = T.reduce(kind, input, dim, keepdim)
        return _torch().return_types.max((values, arg(input, dim, keepdim))) if kind == "max" else \
            _torch().return_types.min((values, arg(input, dim, keepdim)))
    return f


def _elementwise_extreme(op):
    """torch.maximum / minimum (and max / min of two tensors) of floats: a tie's gradient is split
    evenly between the two, as torch's (the TMAX / TMIN rule gives it all to the first operand,
    which max pooling's first-index choice relies on). At a tie the value is a / 2 + b / 2 = a."""
    wins = Opcode.TCMP_GT if op is Opcode.TMAX else Opcode.TCMP_LT

    def f(a, b, **kwargs):
        if not any(_float_tensor(v) for v in (a, b)):
            return T.binary(op, a, b)
        tie = T.binary(Opcode.TADD, T.binary(Opcode.TMUL, a, 0.5), T.binary(Opcode.TMUL, b, 0.5))
        return T.where(T.compare(wins, a, b), a, T.where(T.compare(wins, b, a), b, tie))
    return f


def _float_tensor(v):
    if isinstance(v, TensorValue):
        return v.dtype.is_floating_point
    return _torch_tensor(v) and v.is_floating_point()


torch_max = _minmax("max", Opcode.TMAX, C.argmax)
torch_min = _minmax("min", Opcode.TMIN, C.argmin)


def _torch_tensor(x):
    t = sys.modules.get("torch")
    return t is not None and isinstance(x, t.Tensor)


def var(input, dim=None, unbiased=None, keepdim=False, *, correction=None):  # noqa: A002
    if isinstance(unbiased, (int, bool)) and not isinstance(unbiased, bool) and dim is None:
        dim, unbiased = unbiased, None
    return C.var(input, _dims(dim), unbiased, keepdim, correction=correction)


def std(input, dim=None, unbiased=None, keepdim=False, *, correction=None):  # noqa: A002
    return C.std(input, _dims(dim), unbiased, keepdim, correction=correction)


# linear algebra

def matmul(input, other, *, out=None):  # noqa: A002
    _no_out(out)
    return T.matmul(input, other)


def _rank(x, n, what):
    shape = x.shape if isinstance(x, TensorValue) else tuple(x.shape)
    if len(shape) != n:
        raise PyptoError(f"{what} expects {n}-d tensors, got shape {tuple(shape)}")


def mm(input, mat2, *, out=None):  # noqa: A002
    _rank(input, 2, "torch.mm")
    _rank(mat2, 2, "torch.mm")
    return matmul(input, mat2, out=out)


def bmm(input, mat2, *, out=None):  # noqa: A002
    _rank(input, 3, "torch.bmm")
    _rank(mat2, 3, "torch.bmm")
    return matmul(input, mat2, out=out)


def addmm(input, mat1, mat2, *, beta=1, alpha=1, out=None):  # noqa: A002
    _no_out(out)
    prod = _alpha(T.matmul(mat1, mat2), alpha)
    return T.binary(Opcode.TADD, _alpha(input, beta), prod) if beta != 0 else prod


def linear(input, weight, bias=None):  # noqa: A002
    y = T.matmul(input, T.transpose(_tv(weight), -2, -1) if _ndim(weight) == 2 else weight)
    return T.binary(Opcode.TADD, y, bias) if bias is not None else y


_tv = T.traced


def _ndim(x):
    return len(x.shape)


# nn.functional

def softmax(input, dim=None, _stacklevel=3, dtype=None):  # noqa: A002
    if dim is None:
        raise PyptoError("softmax: give dim (torch's implicit dim choice is deprecated)")
    return T.softmax(_cast_opt(input, dtype), dim)


def log_softmax(input, dim=None, _stacklevel=3, dtype=None):  # noqa: A002
    if dim is None:
        raise PyptoError("log_softmax: give dim")
    return T.log_softmax(_cast_opt(input, dtype), dim)


def gelu(input, approximate="none"):  # noqa: A002
    return T.gelu(input, approximate)


def layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-5):  # noqa: A002
    return T.layer_norm(input, normalized_shape, weight, bias, eps)


def rms_norm(input, normalized_shape, weight=None, eps=None):  # noqa: A002
    if eps is None:  # torch's default: the machine epsilon of the input's dtype
        eps = _torch().finfo(_dt.to_dtype(input.dtype).torch).eps
    return T.rms_norm(input, normalized_shape, weight, eps)


def dropout(input, p=0.5, training=True, inplace=False):  # noqa: A002
    return R.dropout(input, p, training)


def _random_like(impl):
    def f(input, *, dtype=None, layout=None, device=None, requires_grad=False,  # noqa: A002
          memory_format=None, generator=None):
        if generator is not None:
            raise PyptoError("a generator= is not supported inside a kernel: the seed comes from torch's "
                             "default generator at each call (or pass one to pypto.rand)")
        return impl(input, None, None if dtype is None else _dt.to_dtype(dtype))
    return f


def embedding(input, weight, padding_idx=None, max_norm=None, norm_type=2.0, scale_grad_by_freq=False,  # noqa: A002
              sparse=False):
    fn = _public("embedding")
    if fn is None:
        raise PyptoError("embedding: PyPTO has no gather/embedding operation yet")
    if max_norm is not None:
        raise PyptoError("embedding: max_norm is not supported inside a kernel")
    if scale_grad_by_freq:
        raise PyptoError("embedding: scale_grad_by_freq is not supported inside a kernel")
    return fn(input, weight, padding_idx)


def pad(input, pad, mode="constant", value=None):  # noqa: A002
    return C.pad(input, pad, mode, value)


# layout

def _varargs(a):
    return tuple(a[0]) if len(a) == 1 and isinstance(a[0], (tuple, list)) else tuple(a)


def cat(tensors, dim=0, *, out=None):
    _no_out(out)
    return T.concat(list(tensors), dim)  # real tensors become kernel inputs there; empty ones are skipped


def stack(tensors, dim=0, *, out=None):
    _no_out(out)
    return C.stack([_tv(t) for t in tensors], dim)


def flatten(input, start_dim=0, end_dim=-1):  # noqa: A002
    shape = list(input.shape)
    if not shape:
        return T.reshape(input, (1,))
    s, e = start_dim % len(shape), end_dim % len(shape)
    n = 1
    for d in shape[s:e + 1]:
        n *= d
    return T.reshape(input, shape[:s] + [n] + shape[e + 1:])


def unflatten(input, dim, sizes):  # noqa: A002
    shape = list(input.shape)
    d = dim % len(shape)
    return T.reshape(input, shape[:d] + list(sizes) + shape[d + 1:])


def repeat(input, *sizes):  # noqa: A002
    """x.repeat(r0, r1, ...): tile the tensor (a broadcast of an interleaved view, then a reshape)."""
    reps = [T.static_int(r, "repeats") for r in _varargs(sizes)]
    shape = list(input.shape)
    if len(reps) < len(shape):
        raise PyptoError(f"repeat: {len(reps)} repeat counts for a tensor of rank {len(shape)}")
    shape = [1] * (len(reps) - len(shape)) + shape
    x = T.reshape(input, [v for s in shape for v in (1, s)])
    x = T.broadcast_to(x, [v for r, s in zip(reps, shape) for v in (r, s)])
    return T.reshape(x, [r * s for r, s in zip(reps, shape)])


def expand(input, *sizes):  # noqa: A002
    return T.broadcast_to(input, _varargs(sizes))


def narrow(input, dim, start, length):  # noqa: A002
    d = dim % input.ndim
    return T.index(input, (slice(None),) * d + (slice(start, start + length),))


def select(input, dim, index):  # noqa: A002
    d = dim % input.ndim
    return T.index(input, (slice(None),) * d + (index,))


def unbind(input, dim=0):  # noqa: A002
    return tuple(select(input, dim, i) for i in range(input.shape[dim]))


def to(input, *args, **kwargs):  # noqa: A002
    """x.to(dtype) / x.to(device) / x.to(other) / x.to(device, dtype): devices must be the CPU."""
    dtype = kwargs.pop("dtype", None)
    kwargs.pop("non_blocking", None)
    kwargs.pop("copy", None)
    kwargs.pop("memory_format", None)
    device = kwargs.pop("device", None)
    if kwargs:
        raise PyptoError(f"to(): unexpected arguments {', '.join(kwargs)}")
    t = sys.modules.get("torch")
    for a in args:
        if isinstance(a, TensorValue) or (t is not None and isinstance(a, t.Tensor)):
            dtype = a.dtype
        elif isinstance(a, str) or (t is not None and isinstance(a, t.device)):
            device = a
        elif isinstance(a, bool):
            continue
        else:
            dtype = a
    if device is not None and str(device).split(":")[0] != "cpu":
        raise PyptoError(f"to({device!r}): a kernel runs on the CPU")
    return T.cast(input, dtype) if dtype is not None else input


def type_as(input, other):  # noqa: A002
    return T.cast(input, other.dtype)


def _new(fill):
    """x.new_zeros(size) / new_ones / new_full(size, value) / new_empty: x's dtype unless given."""
    def f(input, *size, fill_value=None, dtype=None, **_):  # noqa: A002
        if fill is None and size and not isinstance(size[-1], (tuple, list)) and len(size) >= 2 \
                and isinstance(size[0], (tuple, list)):
            size, fill_value = size[:-1], size[-1]  # new_full(size, value)
        shape = _varargs(size)
        d = _dt.to_dtype(dtype if dtype is not None else input.dtype)
        value = fill if fill is not None else fill_value
        return T.full(shape, value, d) if value is not None else T.empty(shape, d)
    return f


def _like(fill):
    def f(input, fill_value=None, *, dtype=None, **_):  # noqa: A002
        value = fill if fill is not None else fill_value
        d = dtype if dtype is not None else input.dtype
        return T.full(input.shape, value, _dt.to_dtype(d)) if value is not None else T.empty(input.shape, d)
    return f


def _identity(input, *a, **k):  # noqa: A002
    return input


# --- torch's parameter names, for calls that spell them (F.one_hot(t, num_classes=8),
# torch.gather(x, 1, index=i), x.transpose(dim0=1, dim1=2)); the implementations beneath name
# them for PyPTO's own API.

def _size_arg(args, kw, name):
    """x.view(2, 3) / x.view((2, 3)) / x.view(size=(2, 3))."""
    if name in kw:
        if args:
            raise PyptoError(f"got {name}= and positional sizes")
        return tuple(kw.pop(name))
    return _varargs(args)


def _no_extra(fname, kw):
    if kw:
        raise PyptoError(f"{fname}() got an unexpected keyword argument '{next(iter(kw))}'")


def gather(input, dim, index, *, sparse_grad=False, out=None):  # noqa: A002
    _no_out(out)
    return X.gather(input, dim, index)


def scatter(input, dim, index, src=None, value=None, *, reduce=None, out=None):  # noqa: A002
    _no_out(out)
    if value is None and src is not None and not isinstance(src, TensorValue) and not _is_torch_tensor(src):
        src, value = None, src  # torch.scatter(x, 0, i, 1.5): the scalar overload
    return X.scatter(input, dim, index, src, value, reduce)


def scatter_add(input, dim, index, src, *, out=None):  # noqa: A002
    _no_out(out)
    return X.scatter_add(input, dim, index, src)


def index_select(input, dim, index, *, out=None):  # noqa: A002
    _no_out(out)
    return X.index_select(input, dim, index)


def index_add(input, dim, index, source, *, alpha=1, out=None):  # noqa: A002
    _no_out(out)
    return X.index_add(input, dim, index, source, alpha)


def index_add_(input, dim, index, source, *, alpha=1):  # noqa: A002
    return X.index_add_(input, dim, index, source, alpha)


def one_hot(tensor, num_classes=-1):
    return C.one_hot(tensor, num_classes)


def transpose(input, dim0, dim1):  # noqa: A002
    return T.transpose(input, dim0, dim1)


def swapaxes(input, axis0, axis1):  # noqa: A002
    return T.transpose(input, axis0, axis1)


def permute(input, *dims, **kw):  # noqa: A002
    d = _size_arg(dims, kw, "dims")
    _no_extra("permute", kw)
    return T.permute(input, d)


def reshape(input, *shape, **kw):  # noqa: A002
    if kw.pop("order", "C") != "C":  # NumPy's x.reshape(shape, order=...)
        raise PyptoError("reshape: only order='C' is supported")
    s = _size_arg(shape, kw, "shape" if "shape" in kw else "size")
    _no_extra("reshape", kw)
    return T.reshape(input, s)


def reshape_as(input, other):  # noqa: A002
    return T.reshape(input, tuple(other.shape))


def expand_as(input, other):  # noqa: A002
    return T.broadcast_to(input, tuple(other.shape))


def broadcast_to(input, size):  # noqa: A002
    return T.broadcast_to(input, tuple(size))


def clamp_min(input, min):  # noqa: A002
    return T.clamp(input, min, None)


def clamp_max(input, max):  # noqa: A002
    return T.clamp(input, None, max)


def floor_divide(input, other, *, out=None):  # noqa: A002
    _no_out(out)
    return T.floordiv(input, other)


def remainder(input, other, *, out=None):  # noqa: A002
    _no_out(out)
    return T.mod(input, other)


def outer(input, vec2, *, out=None):  # noqa: A002
    _no_out(out)
    return K.outer(input, vec2)


def repeat_interleave(input, repeats=None, dim=None, *, output_size=None):  # noqa: A002
    return C.repeat_interleave(input, repeats, dim)


def split(tensor, split_size_or_sections=None, dim=0, *, split_size=None):
    return C.split(tensor, split_size if split_size is not None else split_size_or_sections, dim)


def _is_torch_tensor(a):
    t = sys.modules.get("torch")
    return t is not None and isinstance(a, t.Tensor)


# --- the table -----------------------------------------------------------------------------------

def _entries():
    """(implementation, names): each name is looked up in torch, torch.Tensor and
    torch.nn.functional; those that exist map to the implementation."""
    return [
        (add, ["add", "__add__", "__iadd__"]), (sub, ["sub", "subtract", "__sub__", "__isub__"]),
        (rsub, ["rsub", "__rsub__"]), (lambda a, b: add(b, a), ["__radd__"]),
        (mul, ["mul", "multiply", "__mul__", "__imul__"]), (lambda a, b: mul(b, a), ["__rmul__"]),
        (div, ["div", "divide", "true_divide", "__truediv__", "__itruediv__"]),
        (lambda a, b: T.binary(Opcode.TDIV, b, a), ["__rtruediv__"]),
        (floor_divide, ["floor_divide"]), (lambda a, b: T.floordiv(a, b), ["__floordiv__"]),
        (remainder, ["remainder"]), (lambda a, b: T.mod(a, b), ["__mod__"]),
        (pow, ["pow", "__pow__", "float_power"]), (lambda a, b: T.power(b, a), ["__rpow__"]),
        (matmul, ["matmul", "__matmul__"]), (lambda a, b: T.matmul(b, a), ["__rmatmul__"]),
        (mm, ["mm"]), (bmm, ["bmm"]), (addmm, ["addmm"]), (linear, ["linear"]),
        (_unary(Opcode.TNEG), ["neg", "negative", "__neg__"]), (_unary(Opcode.TABS), ["abs", "absolute", "__abs__"]),
        (_unary(Opcode.TEXP), ["exp"]), (_unary(Opcode.TLOG), ["log"]), (_unary(Opcode.TSQRT), ["sqrt"]),
        (_unary(Opcode.TRSQRT), ["rsqrt"]), (_unary(Opcode.TTANH), ["tanh"]), (_unary(Opcode.TERF), ["erf"]),
        (_unary(Opcode.TSIGMOID), ["sigmoid"]), (_unary(Opcode.TFLOOR), ["floor"]),
        (_unary(Opcode.TRECIP), ["reciprocal"]), (square, ["square"]),
        (_math("sin"), ["sin"]), (_math("cos"), ["cos"]), (_math("tan"), ["tan"]),
        (_math("exp2"), ["exp2"]), (_math("expm1"), ["expm1"]), (_math("log2"), ["log2"]),
        (_math("log10"), ["log10"]), (_math("log1p"), ["log1p"]), (_math("ceil"), ["ceil"]),
        (_math("trunc"), ["trunc", "fix"]), (_math("sign"), ["sign"]),
        (_scan("cumsum"), ["cumsum"]), (_scan("cumprod"), ["cumprod"]),
        (_activation(Opcode.TRELU), ["relu"]), (_activation(Opcode.TSILU), ["silu"]), (gelu, ["gelu"]),
        (clamp, ["clamp", "clip"]), (clamp_min, ["clamp_min"]), (clamp_max, ["clamp_max"]),
        (_elementwise_extreme(Opcode.TMAX), ["maximum"]), (_elementwise_extreme(Opcode.TMIN), ["minimum"]),
        (lambda a, b, **k: T.binary(Opcode.TMAX, a, b), ["fmax"]),
        (lambda a, b, **k: T.binary(Opcode.TMIN, a, b), ["fmin"]),
        (where, ["where"]), (masked_fill, ["masked_fill"]), (masked_fill_, ["masked_fill_"]),
        (_cmp(Opcode.TCMP_EQ), ["eq", "__eq__"]), (_cmp(Opcode.TCMP_NE), ["ne", "not_equal", "__ne__"]),
        (_cmp(Opcode.TCMP_LT), ["lt", "less", "__lt__"]), (_cmp(Opcode.TCMP_LE), ["le", "less_equal", "__le__"]),
        (_cmp(Opcode.TCMP_GT), ["gt", "greater", "__gt__"]),
        (_cmp(Opcode.TCMP_GE), ["ge", "greater_equal", "__ge__"]),
        (logical_not, ["logical_not", "__invert__"]), (logical_and, ["logical_and", "__and__"]),
        (logical_or, ["logical_or", "__or__"]),
        (sum, ["sum"]), (mean, ["mean"]), (amax, ["amax"]), (amin, ["amin"]),
        (torch_max, ["max"]), (torch_min, ["min"]),
        (var, ["var"]), (std, ["std"]), (C.logsumexp, ["logsumexp"]), (C.any, ["any"]), (C.all, ["all"]),
        (C.argmax, ["argmax"]), (C.argmin, ["argmin"]),
        (softmax, ["softmax"]), (log_softmax, ["log_softmax"]), (layer_norm, ["layer_norm"]),
        (rms_norm, ["rms_norm"]), (dropout, ["dropout"]),
        (_random_like(R.rand_like), ["rand_like"]), (_random_like(R.randn_like), ["randn_like"]), (NN.scaled_dot_product_attention,
                                                            ["scaled_dot_product_attention"]),
        (embedding, ["embedding"]), (pad, ["pad"]),
        (gather, ["gather"]), (scatter, ["scatter"]), (scatter_add, ["scatter_add"]),
        (index_select, ["index_select"]), (index_add, ["index_add"]), (index_add_, ["index_add_"]),
        (X.index_put_, ["index_put_"]), (X.flip, ["flip"]),
        (cat, ["cat", "concat", "concatenate"]), (stack, ["stack"]), (split, ["split"]), (C.chunk, ["chunk"]),
        (unbind, ["unbind"]), (reshape, ["reshape", "view"]),
        (reshape_as, ["reshape_as", "view_as"]),
        (transpose, ["transpose", "swapdims"]), (swapaxes, ["swapaxes"]), (permute, ["permute"]),
        (lambda x: T.transpose(x, 0, 1) if x.ndim == 2 else x, ["t"]),
        (T.unsqueeze, ["unsqueeze"]), (T.squeeze, ["squeeze"]), (flatten, ["flatten"]), (unflatten, ["unflatten"]),
        (expand, ["expand"]), (expand_as, ["expand_as"]),
        (broadcast_to, ["broadcast_to"]), (repeat, ["repeat"]), (repeat_interleave, ["repeat_interleave"]),
        (narrow, ["narrow"]), (select, ["select"]), (C.tril, ["tril"]), (C.triu, ["triu"]), (C.roll, ["roll"]),
        (to, ["to"]), (type_as, ["type_as"]), (_identity, ["contiguous", "requires_grad_"]),
        (T.detach, ["detach"]),
        (lambda x, **k: T.copy(x), ["clone"]),
        (_like(0), ["zeros_like"]), (_like(1), ["ones_like"]), (_like(None), ["full_like", "empty_like"]),
        (lambda x, d=_dt.float32: T.cast(x, d), ["type"]),
        (one_hot, ["one_hot"]),
        (lambda x, i: X.index(x, i), ["__getitem__"]),
        (_new(0), ["new_zeros"]), (_new(1), ["new_ones"]), (_new(None), ["new_full", "new_empty"]),
        (K.einsum, ["einsum"]), (outer, ["outer", "ger"]), (K.baddbmm, ["baddbmm"]),
        (K.vector_norm, ["vector_norm"]), (K.norm, ["norm"]), (K.normalize, ["normalize"]),
        (K.mse_loss, ["mse_loss"]), (K.l1_loss, ["l1_loss"]), (K.smooth_l1_loss, ["smooth_l1_loss"]),
        (K.huber_loss, ["huber_loss"]), (K.nll_loss, ["nll_loss"]), (K.cross_entropy, ["cross_entropy"]),
        (K.binary_cross_entropy, ["binary_cross_entropy"]), (K.kl_div, ["kl_div"]),
        (K.binary_cross_entropy_with_logits, ["binary_cross_entropy_with_logits"]),
        (lambda x: x.dtype.is_floating_point, ["is_floating_point"]),
        (lambda x, **k: True, ["is_contiguous"]), (lambda x: x.dtype.itemsize, ["element_size"]),
        (lambda x: -1, ["get_device"]),
    ]


def _build():
    global _table
    torch = _torch()
    import torch.nn.functional as F
    table = {}
    entries = _entries() + NN.ENTRIES + TM.ENTRIES + MORE.ENTRIES + SCAT.ENTRIES + SP.ENTRIES + POOL.ENTRIES + R.DROPOUT_ENTRIES
    # The in-place forms torch has of the functions above (x.add_(y), torch.relu_(x)): the
    # out-of-place result written back into x. Not those that change x's shape (x.squeeze_(),
    # x.t_()): a kernel's tensors keep theirs, so these stay unsupported.
    named = {n for _, names in entries for n in names}
    reshaping = {"squeeze", "unsqueeze", "t", "transpose", "swapaxes", "swapdims"}
    entries += [(MORE.inplace(impl), [n + "_"]) for impl, names in entries for n in names
                if not n.startswith("_") and not n.endswith("_") and n + "_" not in named and
                n not in reshaping and hasattr(torch.Tensor, n + "_")]
    for impl, names in entries:
        for name in names:
            _methods.setdefault(name, impl)
            for ns in (torch, torch.Tensor, F, torch.special, torch.linalg):
                f = getattr(ns, name, None)
                if f is not None and callable(f):
                    table.setdefault(f, impl)
    for impl, names in MORE.TENSOR_METHODS:  # over the function of the same name
        for name in names:
            _methods[name] = impl
            table[getattr(torch.Tensor, name)] = impl
    _table = table
    NN.install_helpers(F)


def dispatch(func, args, kwargs):
    """TensorValue.__torch_function__: the PyPTO implementation of a torch function."""
    if _table is None:
        _build()
    impl = _table.get(func)
    if impl is None:
        impl = _methods.get(getattr(func, "__name__", None)) if _is_tensor_method(func) else None
    if impl is None:
        raise unsupported(_name_of(func))
    if kwargs and kwargs.get("inplace") and args and isinstance(args[0], TensorValue):
        # F.relu(h, inplace=True), nn.ReLU(inplace=True): the result is written back into h,
        # which the caller may go on using instead of the returned tensor.
        kw = {k: v for k, v in kwargs.items() if k != "inplace"}
        T.assign(args[0], impl(*args, **kw))
        return args[0]
    return impl(*args, **(kwargs or {}))


# What torch code asks a tensor about itself (a traced tensor lives on the CPU, needs no grad).
ATTRIBUTES = {"requires_grad": False, "is_cuda": False, "is_sparse": False, "is_quantized": False,
              "is_meta": False, "grad": None, "is_leaf": True, **NN.ATTRIBUTES}


def method(name):
    """A tensor method TensorValue lacks (x.repeat, x.narrow...), or None."""
    if _table is None:
        if "torch" not in sys.modules:
            return None
        _build()
    return _methods.get(name)


def _is_tensor_method(func):
    t = sys.modules.get("torch")
    qual = getattr(func, "__qualname__", "")
    return t is not None and (qual.startswith("Tensor.") or qual.startswith("TensorBase.") or
                              getattr(func, "__objclass__", None) in (t.Tensor, t._C.TensorBase))


def _name_of(func):
    mod = getattr(func, "__module__", None) or ""
    name = getattr(func, "__name__", repr(func))
    if _is_tensor_method(func):
        return f"torch.Tensor.{name}"
    if mod.startswith("torch.nn.functional"):
        return f"torch.nn.functional.{name}"
    if mod in ("torch", "torch._C._VariableFunctions", "torch.functional", "") or mod.startswith("torch._C"):
        return f"torch.{name}"
    return f"{mod}.{name}"


def unsupported(name):
    """The error for a torch function PyPTO cannot express: the function, where it was called
    from (when that is not the kernel's own line, which the walker adds) and the nearest pypto.X."""
    short = name.rsplit(".", 1)[-1].strip("_")
    public = public_op_names()
    # (a close spelling only: at 0.6, histc suggested stack, unique unsqueeze, cov conv2d)
    near = [short] if short in public else difflib.get_close_matches(short, public, n=1, cutoff=0.8)
    msg = f"{name} is not supported inside a PyPTO kernel"
    where = _caller_line()
    if where:
        msg += f" (called at {where})"
    msg += f"; the nearest PyPTO operation is pypto.{near[0]}" if near else "; PyPTO has no counterpart"
    return PyptoError(msg)


_PKG = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _caller_line():
    """file:line: source of the innermost user frame (None when the kernel's walked body made
    the call: the walker names that line itself)."""
    torch_dir = os.path.dirname(os.path.abspath(_torch().__file__))
    f = sys._getframe(1)
    while f is not None:
        fn = os.path.abspath(f.f_code.co_filename)
        if fn.startswith(_PKG):
            if fn.startswith(os.path.join(_PKG, "frontend", "walker")) or \
                    fn.startswith(os.path.join(_PKG, "frontend", "expressions")):
                return None
        elif not fn.startswith(torch_dir):
            line = linecache.getline(fn, f.f_lineno).strip()
            return f"{fn}:{f.f_lineno}: {line}" if line else f"{fn}:{f.f_lineno}"
        f = f.f_back
    return None
