"""Symbolic values of a kernel being traced.

* TensorValue: a tensor (a builder View) with NumPy/torch-like operators and methods, so that
  plain Python helper functions called from a kernel work on it too.
* Scalars known only at run time (loop indices, scalar arguments, shape arithmetic on them) are
  the C++ builder's Expr objects, which carry their own Python operators.
* Everything else (ints, floats, tuples, lists, None, modules, objects) is a plain Python value,
  evaluated at trace time.
"""
from __future__ import annotations

import sys

from .. import _C
from .. import dtypes as _dt
from ..errors import PyptoError

Expr = _C.Expr
Opcode = _C.Opcode
DYNAMIC_BOUND = _C.DYNAMIC_BOUND  # the static shape entry of a dynamic dim (ir.h)
# NumPy scalars mixed with run-time scalars (np.float32(2) * i) defer to Expr's own operators.
Expr.__array_ufunc__ = None


def is_expr(x):
    return type(x) is Expr


def is_symbolic(x):
    """A run-time scalar (not a constant)."""
    return type(x) is Expr and not x.is_const


def const_value(x):
    """Python value of a constant Expr; other values unchanged."""
    if type(x) is Expr and x.is_const:
        return x.value
    return x


class TensorValue:
    """A tensor inside a kernel being traced: a view of a parameter, an output or a temporary."""

    __slots__ = ("tr", "bv", "shape", "pdtype", "__weakref__")
    __array_priority__ = 1000  # NumPy defers binary operators to us

    def __init__(self, tr, view):
        self.tr = tr
        self.bv = view
        shape = tuple(view.shape)
        if DYNAMIC_BOUND in shape:  # a dynamic dim is its run-time extent, an Expr over dimension symbols
            valid = view.valid_shape
            shape = tuple(valid[i] if n == DYNAMIC_BOUND else n for i, n in enumerate(shape))
        self.shape = shape
        self.pdtype = _dt.from_c(view.dtype_enum)  # the pypto.dtype, whatever the caller's flavour

    @property
    def dtype(self):
        """A pypto.dtype; a torch.dtype when the kernel was called with torch tensors, so that torch
        code passes it on (torch.zeros_like(m, dtype=x.dtype), torch.finfo(x.dtype))."""
        return self.pdtype.torch if self.tr.torch_flavour else self.pdtype

    # --- introspection ---------------------------------------------------------------------------
    @property
    def ndim(self):
        return len(self.shape)

    def dim(self):
        return len(self.shape)

    def size(self, dim=None):
        return self.shape if dim is None else self.shape[dim]

    def numel(self):
        n = 1
        for s in self.shape:
            n *= s
        return n

    @property
    def device(self):
        torch = sys.modules.get("torch")  # torch code reads x.device.type
        return torch.device("cpu") if torch is not None else "cpu"

    @property
    def T(self):
        return T.permute(self, tuple(reversed(range(self.ndim))))

    @property
    def mT(self):
        return T.transpose(self, -2, -1)

    def __len__(self):
        if not self.shape:
            raise PyptoError("len() of a 0-d tensor")
        return self.shape[0]

    def __iter__(self):
        if not self.shape:
            raise PyptoError("iteration over a 0-d tensor")
        if self.shape[0] > 1024:
            raise PyptoError(f"iterating over a tensor with {self.shape[0]} rows at trace time; "
                             "use `for i in range(x.shape[0])` for a loop")
        return (T.index(self, i) for i in range(self.shape[0]))

    def __bool__(self):
        raise PyptoError("a tensor has no truth value while a kernel is traced (its data is only known "
                         "when the kernel runs); use pypto.where(cond, a, b) for a data-dependent choice")

    def __array__(self, *a, **k):
        raise PyptoError("a traced tensor cannot be converted to a NumPy array inside a kernel; "
                         "use pypto operations on it")

    def __repr__(self):
        return f"<traced tensor {self.bv.buffer_name} {self.pdtype.name}{list(self.shape)}>"

    __hash__ = object.__hash__

    # --- arithmetic ----------------------------------------------------------------------------
    def __add__(self, o): return T.binary(Opcode.TADD, self, o)
    def __radd__(self, o): return T.binary(Opcode.TADD, o, self)
    def __sub__(self, o): return T.binary(Opcode.TSUB, self, o)
    def __rsub__(self, o): return T.binary(Opcode.TSUB, o, self)
    def __mul__(self, o): return T.binary(Opcode.TMUL, self, o)
    def __rmul__(self, o): return T.binary(Opcode.TMUL, o, self)
    def __truediv__(self, o): return T.binary(Opcode.TDIV, self, o)
    def __rtruediv__(self, o): return T.binary(Opcode.TDIV, o, self)
    def __floordiv__(self, o): return T.floordiv(self, o)
    def __rfloordiv__(self, o): return T.floordiv(o, self)
    def __mod__(self, o): return T.mod(self, o)
    def __rmod__(self, o): return T.mod(o, self)
    def __pow__(self, o): return T.power(self, o)
    def __rpow__(self, o): return T.power(o, self)
    def __matmul__(self, o): return T.matmul(self, o)
    def __rmatmul__(self, o): return T.matmul(o, self)
    def __neg__(self): return T.unary(Opcode.TNEG, self)
    def __pos__(self): return self
    def __abs__(self): return T.unary(Opcode.TABS, self)
    def __invert__(self): return T.bitwise_not(self)
    def __and__(self, o): return T.bitwise(Opcode.TBAND, self, o)
    def __rand__(self, o): return T.bitwise(Opcode.TBAND, o, self)
    def __or__(self, o): return T.bitwise(Opcode.TBOR, self, o)
    def __ror__(self, o): return T.bitwise(Opcode.TBOR, o, self)
    def __xor__(self, o): return T.bitwise(Opcode.TBXOR, self, o)
    def __rxor__(self, o): return T.bitwise(Opcode.TBXOR, o, self)
    def __lshift__(self, o): return T.bitwise(Opcode.TSHL, self, o)
    def __rlshift__(self, o): return T.bitwise(Opcode.TSHL, o, self)
    def __rshift__(self, o): return T.bitwise(Opcode.TSHR, self, o)
    def __rrshift__(self, o): return T.bitwise(Opcode.TSHR, o, self)
    def __lt__(self, o): return T.compare(Opcode.TCMP_LT, self, o)
    def __le__(self, o): return T.compare(Opcode.TCMP_LE, self, o)
    def __gt__(self, o): return T.compare(Opcode.TCMP_GT, self, o)
    def __ge__(self, o): return T.compare(Opcode.TCMP_GE, self, o)

    def __eq__(self, o):
        if o is None:
            return False
        return T.compare(Opcode.TCMP_EQ, self, o)

    def __ne__(self, o):
        if o is None:
            return True
        return T.compare(Opcode.TCMP_NE, self, o)

    # In-place operators (used by plain Python helpers; the AST walker handles `+=` itself).
    def __iadd__(self, o): T.update(Opcode.TADD, self, o); return self
    def __isub__(self, o): T.update(Opcode.TSUB, self, o); return self
    def __imul__(self, o): T.update(Opcode.TMUL, self, o); return self
    def __itruediv__(self, o): T.update(Opcode.TDIV, self, o); return self

    def __getitem__(self, key): return X.index(self, key)
    def __setitem__(self, key, value): X.setitem(self, key, value)

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        """torch.rsqrt(x), F.linear(x, w), torch.cat([x, y])... on traced tensors map to pypto ops."""
        return TF.dispatch(func, args, kwargs)

    def __getattr__(self, name):
        """Tensor methods defined by the torch mapping (x.repeat, x.narrow, x.type_as...)."""
        if name.startswith("__"):
            raise AttributeError(name)
        if name in TF.ATTRIBUTES:
            return TF.ATTRIBUTES[name]
        impl = TF.method(name)
        if impl is None:
            if "torch" in sys.modules and hasattr(sys.modules["torch"].Tensor, name):
                raise TF.unsupported(f"torch.Tensor.{name}")
            raise AttributeError(f"a traced tensor has no attribute '{name}'")
        return lambda *a, **k: impl(self, *a, **k)

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        """np.exp(x), np.maximum(x, y)... on traced tensors map to pypto ops."""
        fn = T.UFUNCS.get(ufunc.__name__) if method == "__call__" and not kwargs else None
        if fn is None:
            raise PyptoError(f"numpy.{ufunc.__name__} is not supported on traced tensors; use pypto operations")
        return fn(*inputs)

    # --- methods -------------------------------------------------------------------------------
    def sum(self, dim=None, keepdim=False, **kw):
        return T.reduce("sum", _dtype_kw(self, kw), _dim(dim, kw), _keep(keepdim, kw))

    def mean(self, dim=None, keepdim=False, **kw):
        return T.mean(_dtype_kw(self, kw), _dim(dim, kw), _keep(keepdim, kw))

    def max(self, dim=None, keepdim=False, **kw):
        if dim is not None and not kw and self.tr.torch_flavour:
            return TF.torch_max(self, dim, keepdim)  # torch: (values, indices)
        return T.reduce("max", self, _dim(dim, kw), _keep(keepdim, kw))

    def min(self, dim=None, keepdim=False, **kw):
        if dim is not None and not kw and self.tr.torch_flavour:
            return TF.torch_min(self, dim, keepdim)
        return T.reduce("min", self, _dim(dim, kw), _keep(keepdim, kw))

    def amax(self, dim=None, keepdim=False, **kw): return T.reduce("max", self, _dim(dim, kw), _keep(keepdim, kw))
    def amin(self, dim=None, keepdim=False, **kw): return T.reduce("min", self, _dim(dim, kw), _keep(keepdim, kw))

    def detach(self): return T.detach(self)

    def softmax(self, dim=-1, dtype=None): return T.softmax(self if dtype is None else T.cast(self, dtype), dim)

    def log_softmax(self, dim=-1, dtype=None):
        return T.log_softmax(self if dtype is None else T.cast(self, dtype), dim)

    def exp(self): return T.unary(Opcode.TEXP, self)
    def log(self): return T.unary(Opcode.TLOG, self)
    def sqrt(self): return T.unary(Opcode.TSQRT, self)
    def rsqrt(self): return T.unary(Opcode.TRSQRT, self)
    def abs(self): return T.unary(Opcode.TABS, self)
    def neg(self): return T.unary(Opcode.TNEG, self)
    def tanh(self): return T.unary(Opcode.TTANH, self)
    def sigmoid(self): return T.unary(Opcode.TSIGMOID, self)
    def relu(self): return T.unary(Opcode.TRELU, self)
    def silu(self): return T.unary(Opcode.TSILU, self)
    def erf(self): return T.unary(Opcode.TERF, self)
    def floor(self): return T.unary(Opcode.TFLOOR, self)
    def reciprocal(self): return T.unary(Opcode.TRECIP, self)
    def gelu(self, approximate="none"): return T.gelu(self, approximate)
    def pow(self, e): return T.power(self, e)
    def maximum(self, o): return T.binary(Opcode.TMAX, self, o)
    def minimum(self, o): return T.binary(Opcode.TMIN, self, o)
    def clamp(self, min=None, max=None): return T.clamp(self, min, max)
    clip = clamp
    def matmul(self, o): return T.matmul(self, o)
    def masked_fill(self, mask, value): return T.where(mask, value, self)

    def tril(self, diagonal=0): return C.tril(self, diagonal)
    def cumsum(self, dim=None, dtype=None): return C.cumsum(self, dim, dtype)
    def cumprod(self, dim=None, dtype=None): return C.cumprod(self, dim, dtype)
    def prod(self, dim=None, keepdim=False, dtype=None): return C.prod(self, dim, keepdim, dtype)
    def cummax(self, dim): return self._torch_pair("cummax", C.cummax(self, dim))
    def cummin(self, dim): return self._torch_pair("cummin", C.cummin(self, dim))
    def sort(self, dim=-1, descending=False, stable=True):
        return self._torch_pair("sort", C.sort(self, dim, descending))

    def argsort(self, dim=-1, descending=False, stable=True): return C.argsort(self, dim, descending)

    def topk(self, k, dim=-1, largest=True, sorted=True):
        return self._torch_pair("topk", C.topk(self, k, dim, largest))

    def _torch_pair(self, name, pair):
        """(values, indices) as torch returns it to torch code (r.values, r.indices), else a tuple."""
        return getattr(sys.modules["torch"].return_types, name)(pair) if self.tr.torch_flavour else pair
    def sin(self): return T.unary(Opcode.TSIN, self)
    def cos(self): return T.unary(Opcode.TCOS, self)
    def tan(self): return T.unary(Opcode.TTAN, self)
    def exp2(self): return T.unary(Opcode.TEXP2, self)
    def expm1(self): return T.unary(Opcode.TEXPM1, self)
    def log2(self): return T.unary(Opcode.TLOG2, self)
    def log10(self): return T.unary(Opcode.TLOG10, self)
    def log1p(self): return T.unary(Opcode.TLOG1P, self)
    def erfc(self): return T.unary(Opcode.TERFC, self)
    def erfinv(self): return T.unary(Opcode.TERFINV, self)
    def lgamma(self): return T.unary(Opcode.TLGAMMA, self)
    def digamma(self): return T.unary(Opcode.TDIGAMMA, self)
    def ceil(self): return T.unary(Opcode.TCEIL, self)
    def trunc(self): return T.unary(Opcode.TTRUNC, self)
    def sign(self): return T.unary(Opcode.TSIGN, self)
    def round(self, decimals=0): return M.round_(self, decimals)
    def signbit(self): return M.signbit(self)
    def isnan(self): return M.isnan(self)
    def isinf(self): return M.isinf(self)
    def isfinite(self): return M.isfinite(self)
    def atan2(self, o): return T.binary(Opcode.TATAN2, self, o)
    def hypot(self, o): return T.binary(Opcode.THYPOT, self, o)
    def copysign(self, o): return T.binary(Opcode.TCOPYSIGN, self, o)
    def fmod(self, o): return T.binary(Opcode.TFMOD, self, o)
    def remainder(self, o): return T.binary(Opcode.TREM, self, o)
    def gcd(self, o): return M.gcd(self, o)
    def logical_not(self): return T.unary(Opcode.TNOT, self)
    def triu(self, diagonal=0): return C.triu(self, diagonal)
    def var(self, dim=None, unbiased=None, keepdim=False, **kw): return C.var(self, dim, unbiased, keepdim, **kw)
    def std(self, dim=None, unbiased=None, keepdim=False, **kw): return C.std(self, dim, unbiased, keepdim, **kw)
    def logsumexp(self, dim=None, keepdim=False): return C.logsumexp(self, dim, keepdim)
    def any(self, dim=None, keepdim=False): return C.any(self, dim, keepdim)
    def all(self, dim=None, keepdim=False): return C.all(self, dim, keepdim)
    def argmax(self, dim=None, keepdim=False): return C.argmax(self, dim, keepdim)
    def argmin(self, dim=None, keepdim=False): return C.argmin(self, dim, keepdim)
    def roll(self, shifts, dims=None): return C.roll(self, shifts, dims)
    def flip(self, *dims): return X.flip(self, _varargs(dims))
    def index_select(self, dim, index): return X.index_select(self, dim, index)
    def gather(self, dim, index): return X.gather(self, dim, index)
    def scatter(self, dim, index, src=None, value=None, reduce=None): return X.scatter(self, dim, index, src, value, reduce)
    def scatter_add(self, dim, index, src): return X.scatter_add(self, dim, index, src)
    def index_add(self, dim, index, source, alpha=1): return X.index_add(self, dim, index, source, alpha)
    def index_add_(self, dim, index, source, alpha=1): return X.index_add_(self, dim, index, source, alpha)
    def index_put_(self, indices, values, accumulate=False): return X.index_put_(self, indices, values, accumulate)
    def repeat_interleave(self, repeats, dim=None, *, output_size=None): return C.repeat_interleave(self, repeats, dim)
    def split(self, split_size=None, dim=0, **kw): return TF.split(self, split_size, dim, **kw)
    def chunk(self, chunks, dim=0): return C.chunk(self, chunks, dim)

    def transpose(self, dim0=-2, dim1=-1): return T.transpose(self, dim0, dim1)
    def permute(self, *dims, **kw): return TF.permute(self, *dims, **kw)
    def reshape(self, *shape, **kw): return TF.reshape(self, *shape, **kw)
    view = reshape
    def flatten(self, start_dim=0, end_dim=-1):
        return TF.flatten(self, start_dim, end_dim)
    def unsqueeze(self, dim): return T.unsqueeze(self, dim)
    def squeeze(self, dim=None): return T.squeeze(self, dim)
    def expand(self, *shape): return T.broadcast_to(self, _varargs(shape))
    def broadcast_to(self, shape): return T.broadcast_to(self, shape)
    def contiguous(self): return self
    def clone(self): return T.copy(self)
    def copy(self): return T.copy(self)
    def to(self, *args, **kwargs):
        if len(args) == 1 and not kwargs and not isinstance(args[0], (str, TensorValue)) \
                and type(args[0]).__name__ != "device":
            return T.cast(self, args[0])
        return TF.to(self, *args, **kwargs)
    def astype(self, dtype): return T.cast(self, dtype)
    def type(self, dtype): return T.cast(self, dtype)
    def float(self): return T.cast(self, _dt.float32)
    def double(self): return T.cast(self, _dt.float64)
    def half(self): return T.cast(self, _dt.float16)
    def bfloat16(self): return T.cast(self, _dt.bfloat16)
    def int(self): return T.cast(self, _dt.int32)
    def long(self): return T.cast(self, _dt.int64)
    def short(self): return T.cast(self, _dt.int16)
    def char(self): return T.cast(self, _dt.int8)
    def byte(self): return T.cast(self, _dt.uint8)
    def bool(self): return T.cast(self, _dt.bool_)


def _varargs(a):
    if len(a) == 1 and isinstance(a[0], (tuple, list)):
        return tuple(a[0])
    return tuple(a)


def _dim(dim, kw):
    if "axis" in kw:
        return kw.pop("axis")
    if kw and set(kw) - {"keepdims"}:
        raise PyptoError(f"unexpected keyword argument(s): {', '.join(kw)}")
    return dim


def _dtype_kw(x, kw):
    """sum(dtype=...) / mean(dtype=...) as torch spells it: convert first."""
    d = kw.pop("dtype", None)
    return x if d is None else T.cast(x, d)


def _keep(keepdim, kw):
    return kw.get("keepdims", keepdim)


# The operation modules the methods above call. They build TensorValues, so they sit above this
# module: the tracing driver (trace.py) hands them in, as nothing is traced before it runs.
T = C = X = M = TF = None


def bind_operations(tensor_ops, composite_ops, index_ops, math_ops, torch_functions):
    global T, C, X, M, TF
    T, C, X, M, TF = tensor_ops, composite_ops, index_ops, math_ops, torch_functions
