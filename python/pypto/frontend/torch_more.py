"""More torch functions inside kernels (torch_functions.py reads ENTRIES), each composed of PyPTO
operations, so each is differentiated like any other: the in-place forms of the tensor methods
(x.add_(y), x.clamp_(...), F.relu(x, inplace=True)), zero_/fill_/copy_, std_mean/var_mean,
aminmax, median/kthvalue/quantile, tile, take_along_dim, meshgrid, diff, tensordot, diagonal/diag/
trace, kron, cross, cdist, count_nonzero, index_fill, addmv/addr/addbmm, F.bilinear, expit,
xlog1py, rrelu (eval), and the margin, embedding and likelihood losses."""
from __future__ import annotations

import math
import sys
from collections import namedtuple

import numpy as np

from ..errors import PyptoError
from . import composite_ops as C
from . import contract_ops as K
from . import index_ops as X
from . import tensor_ops as T
from .values import Opcode, TensorValue


def _torch():
    return sys.modules["torch"]


def _dims(dim, ndim):
    return dim % ndim if isinstance(dim, int) else dim


# --- in place --------------------------------------------------------------------------------

def inplace(impl):
    """x.f_(...) for an out-of-place x.f(...): the result written back into x (in x's dtype)."""
    def f(input, *args, **kwargs):  # noqa: A002
        T.assign(input, impl(input, *args, **kwargs))
        return input
    return f


def zero_(input):  # noqa: A002
    T.assign(input, 0)
    return input


def fill_(input, value):  # noqa: A002
    T.assign(input, value)
    return input


def copy_(input, src, non_blocking=False):  # noqa: A002
    T.assign(input, T.broadcast_to(src, tuple(input.shape)) if isinstance(src, TensorValue) else src)
    return input


# --- statistics ------------------------------------------------------------------------------

def std_mean(input, dim=None, *, correction=1, keepdim=False, unbiased=None):  # noqa: A002
    if unbiased is not None:
        correction = 1 if unbiased else 0
    return (C.std(input, dim, None, keepdim, correction=correction), T.mean(input, dim, keepdim))


def var_mean(input, dim=None, *, correction=1, keepdim=False, unbiased=None):  # noqa: A002
    if unbiased is not None:
        correction = 1 if unbiased else 0
    return (C.var(input, dim, None, keepdim, correction=correction), T.mean(input, dim, keepdim))


_AMinMax = namedtuple("aminmax", ["min", "max"])


def aminmax(input, *, dim=None, keepdim=False):  # noqa: A002
    return _AMinMax(T.reduce("min", input, dim, keepdim), T.reduce("max", input, dim, keepdim))


def _sorted_pick(input, dim, pos, keepdim):  # noqa: A002
    """(values, indices) of the pos-th smallest along dim (a stable sort: ties keep order)."""
    vals, idx = C.sort(input, dim, False)
    key = [slice(None)] * input.ndim
    key[_dims(dim, input.ndim)] = slice(pos, pos + 1) if keepdim else pos
    return T.index(vals, tuple(key)), T.index(idx, tuple(key))


def median(input, dim=None, keepdim=False):  # noqa: A002
    """The lower median, as torch; without dim over all elements (values only)."""
    if dim is None:
        flat = T.reshape(input, (-1,))
        return _sorted_pick(flat, 0, (flat.shape[0] - 1) // 2, False)[0]
    n = input.shape[_dims(dim, input.ndim)]
    return _torch().return_types.median(_sorted_pick(input, dim, (n - 1) // 2, keepdim))


def kthvalue(input, k, dim=-1, keepdim=False):  # noqa: A002
    n = input.shape[_dims(dim, input.ndim)]
    if not 1 <= k <= n:
        raise PyptoError(f"kthvalue: k={k} is out of range for a dimension of size {n}")
    return _torch().return_types.kthvalue(_sorted_pick(input, dim, k - 1, keepdim))


def quantile(input, q, dim=None, keepdim=False, *, interpolation="linear"):  # noqa: A002
    if isinstance(q, TensorValue) or not isinstance(q, (int, float)):
        raise PyptoError("quantile: q must be a number inside a kernel")
    if interpolation != "linear":
        raise PyptoError(f"quantile: interpolation={interpolation!r} is not supported ('linear')")
    if not 0 <= q <= 1:
        raise PyptoError(f"quantile: q={q} must be in [0, 1]")
    x, d = (T.reshape(input, (-1,)), 0) if dim is None else (input, dim)
    n = x.shape[_dims(d, x.ndim)]
    pos = q * (n - 1)
    lo, frac = int(math.floor(pos)), pos - math.floor(pos)
    vals = C.sort(x, d, False)[0]
    key = [slice(None)] * x.ndim
    key[_dims(d, x.ndim)] = slice(lo, lo + 1)
    a = T.index(vals, tuple(key))
    key[_dims(d, x.ndim)] = slice(min(lo + 1, n - 1), min(lo + 1, n - 1) + 1)
    out = a + (T.index(vals, tuple(key)) - a) * frac if frac else a
    if dim is None:
        return T.reshape(out, ()) if not keepdim else T.reshape(out, (1,) * input.ndim)
    return out if keepdim else T.squeeze(out, d)


def count_nonzero(input, dim=None):  # noqa: A002
    return T.reduce("sum", T.cast(T.compare(Opcode.TCMP_NE, input, 0), "int64"), dim, False)


def searchsorted(sorted_sequence, input, *, out_int32=False, right=False, side=None, sorter=None,  # noqa: A002
                 out=None):
    """The insertion points of `input` in the last dimension of `sorted_sequence`: per value, the
    count of entries below it (left) or not above it (right), by comparing with every entry (as
    fast as a binary search for the short boundary tables models use, and exact)."""
    if sorter is not None or out is not None:
        raise PyptoError("searchsorted: sorter= and out= are not supported inside a kernel")
    if side is not None:
        if side not in ("left", "right"):
            raise PyptoError(f"searchsorted: side must be 'left' or 'right', got {side!r}")
        if right and side == "left":
            raise PyptoError("searchsorted: side='left' contradicts right=True")
        right = side == "right"
    seq, vals = sorted_sequence, input
    if not isinstance(vals, TensorValue):
        raise PyptoError("searchsorted: the values must be a tensor inside a kernel")
    if seq.ndim != 1 and tuple(seq.shape[:-1]) != tuple(vals.shape[:-1]):
        raise PyptoError(f"searchsorted: a {seq.ndim}-d sorted_sequence {tuple(seq.shape)} needs values with the "
                         f"same leading dimensions, got {tuple(vals.shape)}")
    rows = seq if seq.ndim == 1 else T.unsqueeze(seq, -2)  # (..., 1, B) against (..., M, 1)
    below = T.compare(Opcode.TCMP_LE if right else Opcode.TCMP_LT, rows, T.unsqueeze(vals, -1))
    counts = T.reduce("sum", T.cast(below, "int64"), -1, False)
    return T.cast(counts, "int32") if out_int32 else counts


def bucketize(input, boundaries, *, out_int32=False, right=False, out=None):  # noqa: A002
    if boundaries.ndim != 1:
        raise PyptoError(f"bucketize: boundaries must be 1-d, got shape {tuple(boundaries.shape)}")
    return searchsorted(boundaries, input, out_int32=out_int32, right=right, out=out)


# --- shapes and indexing ---------------------------------------------------------------------

def tile(input, *dims):  # noqa: A002
    """torch.tile(x, (2, 1)), x.tile((2, 1)) and x.tile(2, 1)."""
    if len(dims) == 1 and isinstance(dims[0], (tuple, list)):
        dims = dims[0]
    reps = tuple(dims)
    if not reps:
        raise PyptoError("tile: no repetition counts given")
    reps = (1,) * (input.ndim - len(reps)) + reps
    return input.repeat(*reps)


def take_along_dim(input, indices, dim=None):  # noqa: A002
    if dim is None:
        return X.gather(T.reshape(input, (-1,)), 0, T.reshape(indices, (-1,)))
    d = _dims(dim, input.ndim)
    shape = [max(a, b) for a, b in zip(input.shape, indices.shape)]
    xs, ids = list(shape), list(shape)
    xs[d], ids[d] = input.shape[d], indices.shape[d]
    return X.gather(T.broadcast_to(input, tuple(xs)), d, T.broadcast_to(indices, tuple(ids)))


def meshgrid(*tensors, indexing="ij"):
    if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)):
        tensors = tuple(tensors[0])
    if indexing not in ("ij", "xy"):
        raise PyptoError(f"meshgrid: indexing must be 'ij' or 'xy', got {indexing!r}")
    ts = list(tensors)
    shape = tuple(t.shape[0] if t.ndim else 1 for t in ts)
    out = []
    for i, t in enumerate(ts):
        view = [1] * len(ts)
        view[i] = shape[i]
        out.append(T.broadcast_to(T.reshape(t, tuple(view)), shape))
    if indexing == "xy" and len(ts) >= 2:  # 'ij' with the first two dims swapped
        out = [T.transpose(o, 0, 1) for o in out]
    return tuple(out)


def diff(input, n=1, dim=-1, prepend=None, append=None):  # noqa: A002
    d = _dims(dim, input.ndim)
    parts = [p for p in (prepend, input, append) if p is not None]
    x = T.concat(parts, d) if len(parts) > 1 else input
    for _ in range(n):
        m = x.shape[d]
        lo = [slice(None)] * x.ndim
        hi = [slice(None)] * x.ndim
        lo[d], hi[d] = slice(0, m - 1), slice(1, m)
        a, b = T.index(x, tuple(hi)), T.index(x, tuple(lo))
        x = T.logical(Opcode.TBXOR, a, b) if x.pdtype.name == "bool" else b.__rsub__(a)
    return x


def tensor_unfold(input, dimension, size, step):  # noqa: A002
    """Tensor.unfold (not F.unfold, im2col): the windows of `size` elements every `step` along
    `dimension`, that dimension becoming the window count and the window a new last dimension."""
    d = _dims(T.static_int(dimension, "dimension"), max(input.ndim, 1))
    size, step = T.static_int(size, "size"), T.static_int(step, "step")
    length = input.shape[d] if input.ndim else 1
    if not isinstance(length, int):
        raise PyptoError("Tensor.unfold: the unfolded dimension must be static")
    if step < 1 or size < 1 or size > length:
        raise PyptoError(f"Tensor.unfold: size {size} and step {step} do not fit a dimension of {length} "
                         f"(1 <= size <= {length}, step >= 1)")
    x = input if input.ndim else T.reshape(input, [1])
    n = (length - size) // step + 1
    parts = []
    for j in range(size):  # part j: element j of every window
        key = [slice(None)] * x.ndim
        key[d] = slice(j, j + (n - 1) * step + 1, step)
        parts.append(T.index(x, tuple(key)))
    out = C.stack(parts, -1)
    return out if input.ndim else T.reshape(out, [size])  # a 0-d input: one window, as torch


def tensordot(a, b, dims=2, out=None):
    if out is not None:
        raise PyptoError("out= is not supported inside a kernel")
    if isinstance(dims, int):
        da, db = list(range(a.ndim - dims, a.ndim)), list(range(dims))
    else:
        da, db = ([dims[0]] if isinstance(dims[0], int) else list(dims[0])), \
                 ([dims[1]] if isinstance(dims[1], int) else list(dims[1]))
    da, db = [_dims(d, a.ndim) for d in da], [_dims(d, b.ndim) for d in db]
    fa = [i for i in range(a.ndim) if i not in da]
    fb = [i for i in range(b.ndim) if i not in db]
    k = math.prod(a.shape[i] for i in da)
    am = T.reshape(T.permute(a, fa + da), (math.prod(a.shape[i] for i in fa), k))
    bm = T.reshape(T.permute(b, db + fb), (k, math.prod(b.shape[i] for i in fb)))
    return T.reshape(T.matmul(am, bm), tuple(a.shape[i] for i in fa) + tuple(b.shape[i] for i in fb))


def diagonal(input, offset=0, dim1=0, dim2=1):  # noqa: A002
    d1, d2 = _dims(dim1, input.ndim), _dims(dim2, input.ndim)
    rest = [i for i in range(input.ndim) if i not in (d1, d2)]
    x = T.permute(input, rest + [d1, d2])
    r, c = input.shape[d1], input.shape[d2]
    n = max(0, min(r, c - offset) if offset >= 0 else min(r + offset, c))
    if n == 0:
        raise PyptoError("diagonal: the diagonal is empty")
    start = offset if offset >= 0 else -offset * c
    idx = T.arange(start, start + n * (c + 1), c + 1)
    flat = T.reshape(x, tuple(x.shape[:-2]) + (r * c,))
    return X.index_select(flat, flat.ndim - 1, idx)


_diagonal_of = diagonal  # (diag's parameter `diagonal` hides the function)


def diag(input, diagonal=0):  # noqa: A002
    if input.ndim == 2:
        return _diagonal_of(input, diagonal)
    if input.ndim != 1:
        raise PyptoError(f"diag: expects a 1-D or 2-D tensor, got {input.ndim}-D")
    n, k = input.shape[0], diagonal
    m = n + abs(k)
    rows, cols = T.unsqueeze(T.arange(0, m), 1), T.unsqueeze(T.arange(0, m), 0)
    on = T.compare(Opcode.TCMP_EQ, cols - rows, k)
    v = C.pad(input, (0, abs(k)))
    src = T.broadcast_to(T.unsqueeze(v, 1), (m, m)) if k >= 0 else T.broadcast_to(T.unsqueeze(v, 0), (m, m))
    return T.where(on, src, 0)


def trace(input):  # noqa: A002
    return T.reduce("sum", diagonal(input), None, False)


def kron(input, other):  # noqa: A002
    if input.ndim != other.ndim:
        raise PyptoError("kron: the two tensors must have the same rank inside a kernel")
    r = input.ndim
    a = T.reshape(input, tuple(s for d in input.shape for s in (d, 1)))
    b = T.reshape(other, tuple(s for d in other.shape for s in (1, d)))
    return T.reshape(a * b, tuple(input.shape[i] * other.shape[i] for i in range(r)))


def cross(input, other, dim=None):  # noqa: A002
    x, y = input, other
    if dim is None:  # torch.linalg.cross: the last; torch.cross: the first of size 3
        dim = -1 if input.shape[-1] == 3 else next((i for i, s in enumerate(input.shape) if s == 3), -1)
    d = _dims(dim, input.ndim)
    if input.shape[d] != 3:
        raise PyptoError(f"cross: dimension {dim} must have size 3, got {input.shape[d]}")

    def c(t, i):
        key = [slice(None)] * t.ndim
        key[d] = slice(i, i + 1)
        return T.index(t, tuple(key))
    parts = [c(x, 1) * c(y, 2) - c(x, 2) * c(y, 1), c(x, 2) * c(y, 0) - c(x, 0) * c(y, 2),
             c(x, 0) * c(y, 1) - c(x, 1) * c(y, 0)]
    return T.concat(parts, d)


def rot90(input, k=1, dims=(0, 1)):  # noqa: A002
    d0, d1 = _dims(dims[0], input.ndim), _dims(dims[1], input.ndim)
    k %= 4
    if k == 0:
        return T.copy(input)
    if k == 2:
        return X.flip(input, [d0, d1])
    return T.transpose(X.flip(input, [d1] if k == 1 else [d0]), d0, d1)


def matrix_norm(A, ord="fro", dim=(-2, -1), keepdim=False, *, dtype=None, out=None):  # noqa: N803
    d0, d1 = _dims(dim[0], A.ndim), _dims(dim[1], A.ndim)
    if ord == "fro":
        return T.norm_sqrt(T.reduce("sum", A * A, [d0, d1], keepdim))
    if ord in (1, -1, math.inf, -math.inf):
        inner, outer = (d0, d1) if ord in (1, -1) else (d1, d0)
        sums = T.reduce("sum", T.unary(Opcode.TABS, A), inner, True)
        r = T.reduce("max" if ord > 0 else "min", sums, outer, True)
        return r if keepdim else T.squeeze(T.squeeze(r, max(d0, d1)), min(d0, d1))
    raise PyptoError(f"matrix_norm: ord={ord!r} is not supported inside a kernel ('fro', 1, -1, inf, -inf)")


def masked_scatter(input, mask, source):  # noqa: A002
    """input where mask is false; where true, source's elements in order (row-major)."""
    m = T.broadcast_to(mask, tuple(input.shape))
    flat = T.reshape(T.cast(m, "int64"), (-1,))
    pos = T.clamp(C.cumsum(flat, 0, None) - 1, 0, None)
    vals = X.index_select(T.reshape(source, (-1,)), 0, pos)
    return T.where(m, T.reshape(vals, tuple(input.shape)), input)


def _resample_scale(n_in, n_out, align_corners, factor):
    if align_corners:
        return (n_in - 1) / (n_out - 1) if n_out > 1 else 0.0
    return 1.0 / factor if factor is not None else n_in / n_out


def _linear_matrix(n_in, n_out, align_corners, factor):
    """The (n_out, n_in) matrix of torch's linear resampling along one axis."""
    scale = _resample_scale(n_in, n_out, align_corners, factor)
    m = np.zeros((n_out, n_in))
    for o in range(n_out):
        src = scale * o if align_corners else max(scale * (o + 0.5) - 0.5, 0.0)
        i0 = min(int(math.floor(src)), n_in - 1)
        i1 = min(i0 + 1, n_in - 1)
        lam = src - i0
        m[o, i0] += 1.0 - lam
        m[o, i1] += lam
    return m


def resample(input, sizes, factors, mode, align_corners):  # noqa: A002
    """F.interpolate over the spatial dims (2..): 'linear' / 'bilinear' / 'trilinear' as one matrix
    per axis (built while tracing, a kernel input), 'nearest' / 'nearest-exact' by index."""
    torch = _torch()
    y = input
    for k, (n_out, f) in enumerate(zip(sizes, factors)):
        axis = 2 + k
        n_in = input.shape[axis]
        if n_in == n_out and f in (None, 1, 1.0):
            continue
        if mode in ("linear", "bilinear", "trilinear"):
            m = torch.tensor(_linear_matrix(n_in, n_out, bool(align_corners), f), dtype=input.dtype)
            y = T.transpose(T.matmul(m, T.transpose(y, axis, -2)), axis, -2)
        else:
            scale = _resample_scale(n_in, n_out, False, f)
            off = 0.5 if mode == "nearest-exact" else 0.0
            idx = [min(int(math.floor((o + off) * scale)), n_in - 1) for o in range(n_out)]
            y = X.index_select(y, axis, torch.tensor(idx, dtype=torch.int64))
    return y


def cdist(x1, x2, p=2.0, compute_mode=None):
    d = T.unsqueeze(x1, -2) - T.unsqueeze(x2, -3)
    if p == 2:
        return T.norm_sqrt(T.reduce("sum", d * d, -1, False))
    if p == 1:
        return T.reduce("sum", T.unary(Opcode.TABS, d), -1, False)
    if p == math.inf:
        return T.reduce("max", T.unary(Opcode.TABS, d), -1, False)
    return T.power(T.reduce("sum", T.power(T.unary(Opcode.TABS, d), float(p)), -1, False), 1.0 / float(p))


def index_fill(input, dim, index, value):  # noqa: A002
    d = _dims(dim, input.ndim)
    n = input.shape[d]
    idx = T.reshape(index, (-1,))
    hit = C.any(T.compare(Opcode.TCMP_EQ, T.unsqueeze(T.arange(0, n), 1), T.unsqueeze(idx, 0)), 1, False)
    shape = [1] * input.ndim
    shape[d] = n
    return T.where(T.reshape(hit, tuple(shape)), value, input)


# --- products --------------------------------------------------------------------------------

def _scaled_sum(input, prod, beta, alpha):  # noqa: A002
    if alpha != 1:
        prod = prod * alpha
    return prod if beta == 0 else (input if beta == 1 else input * beta) + prod


def addmv(input, mat, vec, *, beta=1, alpha=1, out=None):  # noqa: A002
    return _scaled_sum(input, T.matmul(mat, vec), beta, alpha)


def addr(input, vec1, vec2, *, beta=1, alpha=1, out=None):  # noqa: A002
    return _scaled_sum(input, K.outer(vec1, vec2), beta, alpha)


def addbmm(input, batch1, batch2, *, beta=1, alpha=1, out=None):  # noqa: A002
    return _scaled_sum(input, T.reduce("sum", T.matmul(batch1, batch2), 0, False), beta, alpha)


def bilinear(input1, input2, weight, bias=None):
    """y[..., k] = input1 @ weight[k] @ input2 (+ bias[k])."""
    y = K.einsum("...i,kij,...j->...k", input1, weight, input2)
    return y + bias if bias is not None else y


# --- elementwise -----------------------------------------------------------------------------

def xlog1py(input, other, *, out=None):  # noqa: A002
    v = input * T.unary(Opcode.TLOG1P, other)
    zero = T.logical(Opcode.TAND, T.compare(Opcode.TCMP_EQ, input, 0), T.compare(Opcode.TCMP_EQ, other, other))
    return T.where(zero, 0.0, v)


def rrelu(input, lower=1.0 / 8, upper=1.0 / 3, training=False, inplace=False):  # noqa: A002
    if training:
        raise PyptoError("rrelu: training mode draws a random slope per element; not supported in a kernel")
    return T.where(T.compare(Opcode.TCMP_GE, input, 0), input, input * ((lower + upper) / 2))


# --- losses ----------------------------------------------------------------------------------

def _reduced(loss, reduction, what):
    return K._reduce_loss(loss, reduction, what)


def margin_ranking_loss(input1, input2, target, margin=0.0, size_average=None, reduce=None, reduction="mean"):
    return _reduced(T.clamp((input1 - input2) * (-target) + margin, 0.0, None), reduction, "margin_ranking_loss")


def soft_margin_loss(input, target, size_average=None, reduce=None, reduction="mean"):  # noqa: A002
    return _reduced(_torch().nn.functional.softplus(-target * input), reduction, "soft_margin_loss")


def hinge_embedding_loss(input, target, margin=1.0, size_average=None, reduce=None, reduction="mean"):  # noqa: A002
    pos = T.where(T.compare(Opcode.TCMP_EQ, target, 1), input, 0.0)
    neg = T.where(T.compare(Opcode.TCMP_EQ, target, -1), T.clamp(margin - input, 0.0, None), 0.0)
    return _reduced(pos + neg, reduction, "hinge_embedding_loss")


def cosine_embedding_loss(input1, input2, target, margin=0.0, size_average=None, reduce=None, reduction="mean"):
    F = _torch().nn.functional
    cos = F.cosine_similarity(input1, input2, dim=-1, eps=1e-12)
    loss = T.where(T.compare(Opcode.TCMP_EQ, target, 1), 1.0 - cos,
                   T.where(T.compare(Opcode.TCMP_EQ, target, -1), T.clamp(cos - margin, 0.0, None), 0.0))
    return _reduced(loss, reduction, "cosine_embedding_loss")


def triplet_margin_loss(anchor, positive, negative, margin=1.0, p=2.0, eps=1e-6, swap=False, size_average=None,
                        reduce=None, reduction="mean"):
    F = _torch().nn.functional
    d_ap = F.pairwise_distance(anchor, positive, p, eps)
    d_an = F.pairwise_distance(anchor, negative, p, eps)
    if swap:
        d_an = T.binary(Opcode.TMIN, d_an, F.pairwise_distance(positive, negative, p, eps))
    return _reduced(T.clamp(d_ap - d_an + margin, 0.0, None), reduction, "triplet_margin_loss")


def poisson_nll_loss(input, target, log_input=True, full=False, size_average=None, eps=1e-8, reduce=None,  # noqa: A002
                     reduction="mean"):
    torch = _torch()
    loss = torch.exp(input) - target * input if log_input else input - target * torch.log(input + eps)
    if full:
        st = target * torch.log(target) - target + 0.5 * torch.log(2 * math.pi * target)
        loss = loss + T.where(T.compare(Opcode.TCMP_GT, target, 1), st, 0.0)
    return _reduced(loss, reduction, "poisson_nll_loss")


def gaussian_nll_loss(input, target, var, full=False, eps=1e-6, reduction="mean"):  # noqa: A002
    torch = _torch()
    v = T.clamp(var, eps, None)
    if v.ndim == input.ndim - 1 or (v.ndim == input.ndim and v.shape[-1] == 1 and input.shape[-1] != 1):
        v = T.unsqueeze(v, -1) if v.ndim == input.ndim - 1 else v
    loss = 0.5 * (torch.log(v) + (input - target) * (input - target) / v)
    if full:
        loss = loss + 0.5 * math.log(2 * math.pi)
    return _reduced(loss, reduction, "gaussian_nll_loss")


def multilabel_soft_margin_loss(input, target, weight=None, size_average=None, reduce=None,  # noqa: A002
                                reduction="mean"):
    F = _torch().nn.functional
    loss = -(target * F.logsigmoid(input) + (1 - target) * F.logsigmoid(-input))
    if weight is not None:
        loss = loss * weight
    return _reduced(T.mean(loss, -1, False), reduction, "multilabel_soft_margin_loss")


# Tensor methods that share a name with a function of another meaning (x.unfold is not F.unfold).
TENSOR_METHODS = [(tensor_unfold, ["unfold"])]

ENTRIES = [
    (zero_, ["zero_"]), (fill_, ["fill_"]), (copy_, ["copy_"]),
    (std_mean, ["std_mean"]), (var_mean, ["var_mean"]), (aminmax, ["aminmax"]),
    (median, ["median"]), (kthvalue, ["kthvalue"]), (quantile, ["quantile"]), (count_nonzero, ["count_nonzero"]),
    (searchsorted, ["searchsorted"]), (bucketize, ["bucketize"]),
    (tile, ["tile"]), (take_along_dim, ["take_along_dim"]), (meshgrid, ["meshgrid"]), (diff, ["diff"]),
    (tensordot, ["tensordot"]), (diagonal, ["diagonal"]), (diag, ["diag"]), (trace, ["trace"]), (kron, ["kron"]),
    (cross, ["cross"]), (cdist, ["cdist"]), (index_fill, ["index_fill"]), (rot90, ["rot90"]),
    (matrix_norm, ["matrix_norm"]), (masked_scatter, ["masked_scatter"]),
    (addmv, ["addmv"]), (addr, ["addr"]), (addbmm, ["addbmm"]), (bilinear, ["bilinear"]),
    (lambda input, **k: T.unary(Opcode.TSIGMOID, input), ["expit"]), (xlog1py, ["xlog1py"]), (rrelu, ["rrelu"]),
    (margin_ranking_loss, ["margin_ranking_loss"]), (soft_margin_loss, ["soft_margin_loss"]),
    (hinge_embedding_loss, ["hinge_embedding_loss"]), (cosine_embedding_loss, ["cosine_embedding_loss"]),
    (triplet_margin_loss, ["triplet_margin_loss"]), (poisson_nll_loss, ["poisson_nll_loss"]),
    (gaussian_nll_loss, ["gaussian_nll_loss"]), (multilabel_soft_margin_loss, ["multilabel_soft_margin_loss"]),
]
