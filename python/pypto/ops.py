"""The pypto operations.

Each works in three modes, chosen by its arguments:
  * inside a kernel being traced (a traced tensor among the arguments, or a creation op while a
    kernel is traced): emits IR through the builder;
  * on plain numbers (or run-time scalars): folds (`pypto.sqrt(64)` is 8.0);
  * eagerly on arrays outside any kernel (NumPy, torch, pypto.Tensor): runs a small kernel made
    for that op and signature, compiled once and cached.
"""
from __future__ import annotations

import builtins
import functools
import inspect

import numpy as np

from . import _C
from . import dtypes as _dt
from . import interop
from .eager import call_eager
from .frontend import tensor_ops as T
from .frontend import tracer as _tracer
from .errors import PyptoError
from .frontend.intrinsics import MATMUL, PRANGE, STATIC_RANGE, intrinsic, register_public_op
from .frontend.values import TensorValue, is_expr
from .tensor import Tensor

Op = _C.Opcode
_TRACE, _EAGER, _CONST = 0, 1, 2


def _mode(args, kwargs):
    found_array = False
    for a in list(args) + list(kwargs.values()):
        items = a if isinstance(a, (list, tuple)) else (a,)
        for x in items:
            if isinstance(x, TensorValue):
                return _TRACE
            if not found_array and interop.is_array(x):
                found_array = True
    if found_array:
        return _TRACE if _tracer.current() is not None else _EAGER
    return _CONST


def _eager(fn, args, kwargs):
    return call_eager(fn, args, kwargs)


def make_op(trace_impl, const_impl=None, name=None):
    """Make a public op from its tracing implementation and its constant folding."""
    def decorate(public):
        opname = name or public.__name__
        signature = inspect.signature(public)

        def op(*args, **kwargs):
            m = _mode(args, kwargs)
            if m == _TRACE:
                try:  # a misspelt argument is named against the public op, not its implementation
                    signature.bind(*args, **kwargs)
                except TypeError as e:
                    raise TypeError(f"pypto.{opname}(): {e}") from None
                # The builder labels what this call emits with the op's name (Builder::begin_group).
                b = T.find_tracer(*args, *kwargs.values()).b
                b.begin_group(opname)
                try:
                    return trace_impl(*args, **kwargs)
                finally:
                    b.end_group()
            if m == _EAGER:
                return _eager(op, args, kwargs)
            if const_impl is not None:
                return const_impl(*args, **kwargs)
            raise PyptoError(f"pypto.{opname} needs a tensor argument")
        op.__name__ = op.__qualname__ = opname
        op.__doc__ = public.__doc__
        op.__wrapped__ = public
        return register_public_op(op)
    return decorate


def _scalar_unary(pyfn, exprfn=None):
    def f(x, *args, **kwargs):
        if is_expr(x):
            if x.is_const:
                return pyfn(x.value, *args, **kwargs)
            if exprfn is None:
                raise PyptoError("this operation on a run-time scalar is not supported; use a tensor")
            return exprfn(x)
        return pyfn(x, *args, **kwargs)
    return f


def make_unary(op, pyfn, exprfn=None, doc=""):
    def public(x):
        pass
    public.__doc__ = doc
    return make_op(lambda x: T.unary(op, x), _scalar_unary(pyfn, exprfn), None)(public)


def _elem(name):
    """Constant folding by the element function `name` of include/pto/elem.hpp (the backends' own)."""
    return lambda x: _C.elem_unary(name, float(x))


def _keep_int(name, pyfn):
    """Integers stay exact Python ints; floats go through the element function."""
    return lambda x: pyfn(x) if isinstance(x, int) else _C.elem_unary(name, float(x))


exp = make_unary(Op.TEXP, _elem("exp"), _C.expr_exp, "Elementwise e**x.")
exp.__name__ = "exp"
log = make_unary(Op.TLOG, _elem("log"), _C.expr_log, "Elementwise natural logarithm.")
log.__name__ = "log"
sqrt = make_unary(Op.TSQRT, _elem("sqrt"), _C.expr_sqrt, "Elementwise square root; on a number it folds (sqrt(64) == 8.0).")
sqrt.__name__ = "sqrt"
rsqrt = make_unary(Op.TRSQRT, _elem("rsqrt"), lambda x: 1.0 / _C.expr_sqrt(x), "1/sqrt(x).")
rsqrt.__name__ = "rsqrt"
abs = make_unary(Op.TABS, _keep_int("abs", lambda x: x if x >= 0 else -x), lambda x: _C.expr_max(x, -x),  # noqa: A001
             "Absolute value.")
abs.__name__ = "abs"
neg = make_unary(Op.TNEG, lambda x: -x, lambda x: -x, "Negation.")
neg.__name__ = "neg"
tanh = make_unary(Op.TTANH, _elem("tanh"), None, "Hyperbolic tangent.")
tanh.__name__ = "tanh"
sigmoid = make_unary(Op.TSIGMOID, _elem("sigmoid"), None, "1/(1+exp(-x)).")
sigmoid.__name__ = "sigmoid"
relu = make_unary(Op.TRELU, _keep_int("relu", lambda x: x if x > 0 else 0), lambda x: _C.expr_max(x, 0), "max(x, 0).")
relu.__name__ = "relu"
silu = make_unary(Op.TSILU, _elem("silu"), None, "x * sigmoid(x).")
silu.__name__ = "silu"
erf = make_unary(Op.TERF, _elem("erf"), None, "The error function.")
erf.__name__ = "erf"
floor = make_unary(Op.TFLOOR, _keep_int("floor", lambda x: x), None, "Elementwise floor.")
floor.__name__ = "floor"
reciprocal = make_unary(Op.TRECIP, _elem("recip"), lambda x: 1.0 / x, "1/x.")
reciprocal.__name__ = "reciprocal"


def _fold_minmax(name, a, b):
    """Python ints stay exact; floats fold by pto/elem.hpp (NaN propagates)."""
    if isinstance(a, int) and isinstance(b, int):
        return builtins.max(a, b) if name == "max" else builtins.min(a, b)
    return _C.elem_binary(name, float(a), float(b))


def _gelu_const(x, approximate="none"):
    if approximate not in ("none", "tanh"):
        raise PyptoError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")
    return _C.elem_unary("gelu_tanh" if approximate == "tanh" else "gelu", float(x))


@make_op(T.gelu, _scalar_unary(_gelu_const))
def gelu(x, approximate="none"):
    """GELU; approximate='none' (erf form) or 'tanh'."""


def make_binary(op, pyfn, exprfn=None):
    def const(a, b):
        if is_expr(a) or is_expr(b):
            if exprfn is None:
                raise PyptoError("this operation on run-time scalars is not supported; use a tensor")
            return exprfn(a, b)
        return pyfn(a, b)
    return make_op(lambda a, b: T.binary(op, a, b), const)


@make_binary(Op.TADD, lambda a, b: a + b, lambda a, b: a + b)
def add(a, b):
    """a + b with NumPy broadcasting."""


@make_binary(Op.TSUB, lambda a, b: a - b, lambda a, b: a - b)
def sub(a, b):
    """a - b with NumPy broadcasting."""


@make_binary(Op.TMUL, lambda a, b: a * b, lambda a, b: a * b)
def mul(a, b):
    """a * b with NumPy broadcasting."""


@make_binary(Op.TDIV, lambda a, b: a / b, lambda a, b: a / b)
def div(a, b):
    """a / b (true division) with NumPy broadcasting."""


@make_binary(Op.TMAX, lambda a, b: _fold_minmax("max", a, b), _C.expr_max)
def maximum(a, b):
    """Elementwise maximum."""


@make_binary(Op.TMIN, lambda a, b: _fold_minmax("min", a, b), _C.expr_min)
def minimum(a, b):
    """Elementwise minimum."""


@make_op(T.power, lambda a, b: a ** b)
def pow(a, b):  # noqa: A001
    """a ** b."""


subtract, multiply, divide, true_divide = sub, mul, div, div


def _cmp(op, pyfn):
    return make_op(lambda a, b: T.compare(op, a, b), pyfn)


eq = _cmp(Op.TCMP_EQ, lambda a, b: a == b)(lambda a, b: None)
eq.__name__ = "eq"
ne = _cmp(Op.TCMP_NE, lambda a, b: a != b)(lambda a, b: None)
ne.__name__ = "ne"
lt = _cmp(Op.TCMP_LT, lambda a, b: a < b)(lambda a, b: None)
lt.__name__ = "lt"
le = _cmp(Op.TCMP_LE, lambda a, b: a <= b)(lambda a, b: None)
le.__name__ = "le"
gt = _cmp(Op.TCMP_GT, lambda a, b: a > b)(lambda a, b: None)
gt.__name__ = "gt"
ge = _cmp(Op.TCMP_GE, lambda a, b: a >= b)(lambda a, b: None)
ge.__name__ = "ge"


@make_op(T.where, lambda c, a, b: a if c else b)
def where(cond, a, b):
    """cond ? a : b elementwise (cond: a bool tensor)."""


@make_op(T.clamp)
def clamp(x, min=None, max=None):  # noqa: A002
    """Clamp into [min, max]."""


@intrinsic(MATMUL)
@make_op(T.matmul)
def matmul(a, b):
    """Matrix product as numpy.matmul: 1-d operands, batched (broadcast) leading dimensions."""


def _reduction(reduce):
    """A reduction's tracing implementation: torch's spelling (dim, keepdim) or NumPy's (axis,
    keepdims), not both."""
    def impl(x, dim=None, keepdim=False, *, axis=None, keepdims=None):
        if axis is not None and dim is not None:
            raise PyptoError("give the reduced dimensions as dim or as axis, not both")
        return reduce(x, axis if axis is not None else dim, keepdim if keepdims is None else keepdims)
    return impl


@make_op(_reduction(functools.partial(T.reduce, "sum")))
def sum(x, dim=None, keepdim=False, *, axis=None, keepdims=None):  # noqa: A001
    """Sum over `dim` (int, tuple, or None = all); `axis` / `keepdims` as in NumPy."""


@make_op(_reduction(T.mean))
def mean(x, dim=None, keepdim=False, *, axis=None, keepdims=None):
    """Mean over `dim` (int, tuple, or None = all); `axis` / `keepdims` as in NumPy."""


@make_op(_reduction(functools.partial(T.reduce, "max")))
def max(x, dim=None, keepdim=False, *, axis=None, keepdims=None):  # noqa: A001
    """Maximum over `dim` (values only); `axis` / `keepdims` as in NumPy."""


@make_op(_reduction(functools.partial(T.reduce, "min")))
def min(x, dim=None, keepdim=False, *, axis=None, keepdims=None):  # noqa: A001
    """Minimum over `dim` (values only); `axis` / `keepdims` as in NumPy."""


amax, amin = max, min


@make_op(T.softmax)
def softmax(x, dim=-1):
    """Softmax along `dim`."""


@make_op(T.log_softmax)
def log_softmax(x, dim=-1):
    """Log-softmax along `dim`."""


@make_op(T.layer_norm)
def layer_norm(x, normalized_shape, weight=None, bias=None, eps=1e-5):
    """Layer normalisation over the trailing `normalized_shape` dimensions."""


@make_op(T.rms_norm)
def rms_norm(x, normalized_shape, weight=None, eps=1e-6):
    """RMS normalisation over the trailing `normalized_shape` dimensions."""


@make_op(T.transpose)
def transpose(x, dim0=-2, dim1=-1):
    """Swap two dimensions (a view)."""


@make_op(lambda x, *dims: T.permute(x, dims[0] if len(dims) == 1 and isinstance(dims[0], (tuple, list)) else dims))
def permute(x, *dims):
    """Reorder dimensions (a view)."""


@make_op(lambda x, *shape: T.reshape(x, shape[0] if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else shape))
def reshape(x, *shape):
    """Reshape (one -1 allowed)."""


@make_op(T.unsqueeze)
def unsqueeze(x, dim):
    """Insert a size-1 dimension."""


@make_op(T.squeeze)
def squeeze(x, dim=None):
    """Remove size-1 dimensions."""


@make_op(T.broadcast_to)
def broadcast_to(x, shape):
    """Broadcast to `shape` (a copy)."""


@make_op(T.concat)
def concat(tensors, dim=0):
    """Concatenate along `dim`."""


cat = concat


@make_op(T.cast)
def cast(x, dtype):
    """Convert to `dtype`."""


@make_op(T.conv2d)
def conv2d(input, weight, bias=None, stride=1, padding="same", dilation=1):  # noqa: A002
    """2-d convolution over NCHW (or CHW) input with OIHW weight. padding: 'same' (stride 1),
    'valid', an int or a pair."""


def inplace(x):
    """Lets the next elementwise op that reads `x` (a whole tensor: an argument or a result) write
    its result into x's buffer instead of a new one, when the result has x's shape and dtype:
    `y = pypto.exp(pypto.inplace(t))` computes `TEXP t, t`, and y is t. x's old value is gone
    afterwards (an argument's buffer is the caller's: it receives the result). Outside a kernel
    it returns x unchanged."""
    tr = _tracer.current()
    if tr is None or not isinstance(x, TensorValue):
        return x
    return T.wrap(tr, tr.b.inplace(T.tensor_of(tr, x)))


# --- creation ------------------------------------------------------------------------------

def _creation(trace_fn, eager_fn):
    def op(*args, **kwargs):
        if _tracer.current() is not None:
            return trace_fn(*args, **kwargs)
        return eager_fn(*args, **kwargs)
    op.__name__ = trace_fn.__name__
    return op


def _np_dtype(dtype, default=_dt.float32):
    return _dt.to_dtype(dtype) if dtype is not None else default


def _eager_full(shape, value, dtype=None):
    if dtype is None:
        dtype = _dt.bool_ if isinstance(value, bool) else _dt.int64 if isinstance(value, int) else _dt.float32
    return Tensor(np.full(tuple(shape) if isinstance(shape, (tuple, list)) else (shape,), value,
                          dtype=np.float32 if _dt.to_dtype(dtype) is _dt.bfloat16 else _dt.to_dtype(dtype).np),
                  dtype)


def zeros(shape, dtype=None):
    """A tensor of zeros (float32 unless `dtype`)."""
    if _tracer.current() is not None:
        return T.full(shape, 0, _np_dtype(dtype))
    return _eager_full(shape, 0, _np_dtype(dtype))


def ones(shape, dtype=None):
    """A tensor of ones (float32 unless `dtype`)."""
    if _tracer.current() is not None:
        return T.full(shape, 1, _np_dtype(dtype))
    return _eager_full(shape, 1, _np_dtype(dtype))


def full(shape, fill_value, dtype=None):
    """A tensor filled with `fill_value` (which may be a run-time scalar inside a kernel)."""
    if _tracer.current() is not None:
        return T.full(shape, fill_value, dtype)
    return _eager_full(shape, fill_value, dtype)


def empty(shape, dtype=None):
    """An uninitialised tensor (float32 unless `dtype`)."""
    if _tracer.current() is not None:
        return T.empty(shape, _np_dtype(dtype))
    return Tensor.empty(tuple(shape) if isinstance(shape, (tuple, list)) else (shape,), _np_dtype(dtype))


def _like(x, fill, dtype):
    if isinstance(x, TensorValue):
        d = _dt.to_dtype(dtype) if dtype is not None else x.dtype
        if fill is None:
            return T.empty(x.shape, d)
        return T.full(x.shape, fill, d)
    d, shape = interop.array_info(x)
    d = _dt.to_dtype(dtype) if dtype is not None else d
    kind = interop.array_kind(x)
    if kind == interop.NUMPY and d.np is not None:
        return np.empty(shape, d.np) if fill is None else np.full(shape, fill, d.np)
    if kind == interop.TORCH:
        import torch
        tdt = getattr(torch, d.name)
        return torch.empty(shape, dtype=tdt) if fill is None else torch.full(shape, fill, dtype=tdt)
    if fill is None:
        return empty(shape, d)
    return full(shape, fill, d)


def empty_like(x, dtype=None):
    """An uninitialised tensor with x's shape and dtype."""
    return _like(x, None, dtype)


def zeros_like(x, dtype=None):
    """Zeros with x's shape and dtype."""
    return _like(x, 0, dtype)


def ones_like(x, dtype=None):
    """Ones with x's shape and dtype."""
    return _like(x, 1, dtype)


def full_like(x, fill_value, dtype=None):
    """`fill_value` with x's shape and dtype."""
    return _like(x, fill_value, dtype)


def arange(start, end=None, step=1, dtype=None):
    """[start, end) by step (int64 unless a bound is a float or `dtype` says otherwise)."""
    if _tracer.current() is not None:
        return T.arange(start, end, step, dtype)
    a = np.arange(start, end, step) if end is not None else np.arange(start)
    return Tensor(a, dtype if dtype is not None else (_dt.float32 if a.dtype.kind == "f" else _dt.int64))


# --- loops ---------------------------------------------------------------------------------

@intrinsic(PRANGE)
def prange(*args):
    """A loop whose iterations are independent: `for i in pypto.prange(0, n, 64)` runs them in
    parallel on the cores. Outside a kernel it is range()."""
    return range(*args)


@intrinsic(STATIC_RANGE)
def static_range(*args):
    """A loop unrolled while tracing (its index is a Python int). Outside a kernel it is range()."""
    return range(*args)
