"""Tracing implementations of the composite operations (masks, statistics, selection by value,
layout): argument handling only; each is one call of the C++ builder (src/ir/builder_ops.cpp),
except split/chunk, which are plain views."""
from __future__ import annotations

from .. import dtypes as _dt
from ..errors import PyptoError
from .tensor_ops import (cast, dims_arg, find_tracer, index, norm_sqrt, operand, static_float, static_int, tensor_of,
                         wrap)
from .values import Opcode, TensorValue


def check_index_dtype(idx, what):
    """Index tensors are int32 or int64 (as torch, which reads a uint8 index as a mask): an int8,
    uint8 or int16 one is an error naming the op, not a failure deep in lowering."""
    name = str(getattr(idx.dtype, "name", idx.dtype))
    name = {"i8": "int8", "u8": "uint8", "i16": "int16"}.get(name, name)  # a View's short names
    if name in ("int8", "uint8", "int16"):
        raise PyptoError(f"{what}: index tensors must be int32 or int64, got {name}")


def _flat(tr, v):
    return tr.b.reshape(v, [-1]) if len(v.shape) != 1 else v


def tril(x, diagonal=0):
    tr = find_tracer(x)
    return wrap(tr, tr.b.tril(tensor_of(tr, x), static_int(diagonal, "diagonal")))


def triu(x, diagonal=0):
    tr = find_tracer(x)
    return wrap(tr, tr.b.triu(tensor_of(tr, x), static_int(diagonal, "diagonal")))


def _correction(unbiased, correction, what):
    if correction is not None and unbiased is not None:
        raise PyptoError(f"{what}: give either unbiased or correction, not both")
    if correction is not None:
        return static_float(correction, "correction")
    return 1.0 if unbiased is None or unbiased else 0.0


def var(x, dim=None, unbiased=None, keepdim=False, *, correction=None):
    if isinstance(dim, bool):  # torch.var(x, unbiased)
        dim, unbiased = None, dim
    tr = find_tracer(x)
    c = _correction(unbiased, correction, "var")
    return wrap(tr, tr.b.variance(tensor_of(tr, x), dims_arg(dim), c, bool(keepdim)))


def std(x, dim=None, unbiased=None, keepdim=False, *, correction=None):
    return norm_sqrt(var(x, dim, unbiased, keepdim, correction=correction))


def logsumexp(x, dim=None, keepdim=False):
    tr = find_tracer(x)
    return wrap(tr, tr.b.logsumexp(tensor_of(tr, x), dims_arg(dim), bool(keepdim)))


def any(x, dim=None, keepdim=False):  # noqa: A001
    tr = find_tracer(x)
    return wrap(tr, tr.b.any(tensor_of(tr, x), dims_arg(dim), bool(keepdim)))


def all(x, dim=None, keepdim=False):  # noqa: A001
    tr = find_tracer(x)
    return wrap(tr, tr.b.all(tensor_of(tr, x), dims_arg(dim), bool(keepdim)))


def _arg(kind, x, dim, keepdim):
    tr = find_tracer(x)
    v = tensor_of(tr, x)
    if dim is None:  # over the flattened tensor (as torch)
        rank = len(v.shape)
        r = getattr(tr.b, kind)(_flat(tr, v), 0, False)
        if keepdim and rank:
            r = tr.b.reshape(r, [1] * rank)
        return wrap(tr, r)
    return wrap(tr, getattr(tr.b, kind)(v, static_int(dim, "dim"), bool(keepdim)))


def argmax(x, dim=None, keepdim=False):
    return _arg("argmax", x, dim, keepdim)


def argmin(x, dim=None, keepdim=False):
    return _arg("argmin", x, dim, keepdim)


def stack(xs, dim=0):
    if not isinstance(xs, (list, tuple)) or not xs:
        raise PyptoError("stack expects a non-empty list or tuple of tensors")
    tr = find_tracer(*xs)
    return wrap(tr, tr.b.stack([tensor_of(tr, x, "stack input") for x in xs], static_int(dim, "dim")))


def roll(x, shifts, dims=None):
    tr = find_tracer(x)
    v = tensor_of(tr, x)
    if dims is None:
        shape = list(v.shape)
        return wrap(tr, tr.b.reshape(tr.b.roll(_flat(tr, v), static_int(shifts, "shifts"), 0), shape))
    sh = shifts if isinstance(shifts, (tuple, list)) else (shifts,)
    ds = dims if isinstance(dims, (tuple, list)) else (dims,)
    if len(sh) != len(ds):
        raise PyptoError(f"roll: {len(sh)} shifts for {len(ds)} dims")
    for s, d in zip(sh, ds):
        v = tr.b.roll(v, static_int(s, "shifts"), static_int(d, "dims"))
    return wrap(tr, v)


def repeat_interleave(x, repeats, dim=None):
    tr = find_tracer(x)
    v = tensor_of(tr, x)
    if isinstance(repeats, TensorValue):
        raise PyptoError("repeat_interleave: repeats must be an integer (a tensor of repeats would make the "
                         "output size data-dependent)")
    r = static_int(repeats, "repeats")
    if dim is None:
        return wrap(tr, tr.b.repeat_interleave(_flat(tr, v), r, 0))
    return wrap(tr, tr.b.repeat_interleave(v, r, static_int(dim, "dim")))


def one_hot(x, num_classes=-1):
    tr = find_tracer(x)
    n = static_int(num_classes, "num_classes")
    if n < 0:
        raise PyptoError("one_hot: num_classes must be given inside a kernel (the output size cannot depend "
                         "on the data)")
    v = tensor_of(tr, x)
    check_index_dtype(v, "one_hot")
    tr.note_index_site()  # a class out of range is a run-time error naming this line
    return wrap(tr, tr.b.one_hot(v, n))


def pad(x, pad, mode="constant", value=None):
    tr = find_tracer(x)
    amounts = [static_int(p, "pad") for p in pad]
    if mode == "constant":
        return wrap(tr, tr.b.pad(tensor_of(tr, x), amounts, operand(tr, 0 if value is None else value)))
    if mode not in ("reflect", "replicate", "circular"):
        raise PyptoError(f"pad: mode must be 'constant', 'reflect', 'replicate' or 'circular', got {mode!r}")
    if value is not None and value != 0:
        raise PyptoError(f"pad: a fill value is only for mode='constant' (got value={value} with mode={mode!r})")
    return _pad_from_edges(tr, tensor_of(tr, x), amounts, mode)


def _pad_from_edges(tr, v, amounts, mode):
    """reflect / replicate / circular padding: per padded dimension (the last one first, as torch
    reads `pad`), slices of x joined to it by a concat: reflect mirrors x without its edge element,
    replicate repeats the edge element, circular wraps around."""
    rank = len(v.shape)
    if len(amounts) % 2 or len(amounts) // 2 > rank:
        raise PyptoError(f"pad: {len(amounts)} padding sizes for a tensor of rank {rank} (two per padded "
                         "dimension, the last dimension first)")
    for i in range(len(amounts) // 2):
        d = rank - 1 - i
        lo, hi, n = amounts[2 * i], amounts[2 * i + 1], v.shape[d]
        if lo < 0 or hi < 0:
            raise PyptoError(f"pad: negative padding ({lo}, {hi}) is only supported with mode='constant'")
        if mode == "reflect" and max(lo, hi) >= n:
            raise PyptoError(f"pad: reflect padding ({lo}, {hi}) must be smaller than the dimension's size {n}")
        if mode == "circular" and max(lo, hi) > n:
            raise PyptoError(f"pad: circular padding ({lo}, {hi}) must not exceed the dimension's size {n}")

        def part(a, b):
            return tensor_of(tr, index(wrap(tr, v), (slice(None),) * d + (slice(a, b),)))

        def edge(at, count):  # the element at `at`, `count` times along d
            e = part(at, at + 1)
            return tr.b.broadcast_to(e, [count if k == d else s for k, s in enumerate(v.shape)])

        parts = []
        if lo:
            parts.append({"reflect": lambda: tr.b.flip(part(1, lo + 1), [d]), "circular": lambda: part(n - lo, n),
                          "replicate": lambda: edge(0, lo)}[mode]())
        parts.append(v)
        if hi:
            parts.append({"reflect": lambda: tr.b.flip(part(n - 1 - hi, n - 1), [d]), "circular": lambda: part(0, hi),
                          "replicate": lambda: edge(n - 1, hi)}[mode]())
        if len(parts) > 1:
            v = tr.b.concat(parts, d)
    return wrap(tr, v)


def _split_sizes(n, split_size_or_sections, what):
    if isinstance(split_size_or_sections, (list, tuple)):
        sizes = [static_int(s, "split sizes") for s in split_size_or_sections]
        if sum(sizes) != n or (sizes and min(sizes) < 0):
            raise PyptoError(f"{what}: split sizes {sizes} do not add up to the dimension's size {n}")
        return sizes
    s = static_int(split_size_or_sections, "split_size")
    if s < 1:
        raise PyptoError(f"{what}: split_size must be >= 1, got {s}")
    return [min(s, n - i) for i in range(0, n, s)]


def split(x, split_size_or_sections, dim=0):
    tr = find_tracer(x)
    v = tensor_of(tr, x)
    rank = len(v.shape)
    d = static_int(dim, "dim")
    if not -rank <= d < rank:
        raise PyptoError(f"split: dim {d} is out of range for a tensor of rank {rank}")
    d %= rank
    xv = x if isinstance(x, TensorValue) else wrap(tr, v)
    out, start = [], 0
    for s in _split_sizes(v.shape[d], split_size_or_sections, "split"):
        out.append(index(xv, (slice(None),) * d + (slice(start, start + s),)))  # s == 0: an empty array
        start += s
    return tuple(out)


def chunk(x, chunks, dim=0):
    tr = find_tracer(x)
    v = tensor_of(tr, x)
    c = static_int(chunks, "chunks")
    if c < 1:
        raise PyptoError(f"chunk: chunks must be >= 1, got {c}")
    rank = len(v.shape)
    d = static_int(dim, "dim")
    if not -rank <= d < rank:
        raise PyptoError(f"chunk: dim {d} is out of range for a tensor of rank {rank}")
    n = v.shape[d % rank]
    return split(x, -(-n // c), dim)


def _scan(op, x, dim, dtype=None):
    tr = find_tracer(x)
    if dim is None:
        raise PyptoError("cumsum/cumprod: dim must be given")
    v = tensor_of(tr, x)
    if dtype is not None:
        v = tensor_of(tr, cast(wrap(tr, v), dtype))
    return wrap(tr, tr.b.scan(getattr(Opcode, op), v, static_int(dim, "dim")))


def cumsum(x, dim=None, dtype=None):
    return _scan("TADD", x, dim, dtype)


def cumprod(x, dim=None, dtype=None):
    return _scan("TMUL", x, dim, dtype)


def prod(x, dim=None, keepdim=False, dtype=None):
    """The product along `dim` (all elements when None): the last element of the running product,
    so the factors multiply in order, as torch's CPU loop does. Ints and bool give int64."""
    tr = find_tracer(x)
    v = wrap(tr, tensor_of(tr, x))
    if dtype is None and not v.pdtype.is_floating_point:
        dtype = _dt.int64
    if dim is None:
        flat = v.reshape((-1,)) if v.ndim != 1 else v
        last = cumprod(flat, 0, dtype)[flat.shape[0] - 1]
        return last.reshape(tuple(1 for _ in v.shape)) if keepdim else last
    d = static_int(dim, "dim") % max(v.ndim, 1)
    running = cumprod(v, d, dtype)
    n = v.shape[d]
    key = (slice(None),) * d + ((slice(n - 1, n) if keepdim else n - 1),)
    return running[key]


def _scan_extreme(op, x, dim):
    tr = find_tracer(x)
    values, indices = tr.b.scan_extreme(getattr(Opcode, op), tensor_of(tr, x), static_int(dim, "dim"))
    return wrap(tr, values), wrap(tr, indices)


def cummax(x, dim):
    return _scan_extreme("TMAX", x, dim)


def cummin(x, dim):
    return _scan_extreme("TMIN", x, dim)


def sort(x, dim=-1, descending=False, stable=True):
    tr = find_tracer(x)
    values, indices = tr.b.sort(tensor_of(tr, x), static_int(dim, "dim"), bool(descending))
    return wrap(tr, values), wrap(tr, indices)


def argsort(x, dim=-1, descending=False, stable=True):
    tr = find_tracer(x)
    return wrap(tr, tr.b.argsort(tensor_of(tr, x), static_int(dim, "dim"), bool(descending)))


def topk(x, k, dim=-1, largest=True, sorted=True):  # noqa: A002
    tr = find_tracer(x)
    values, indices = tr.b.topk(tensor_of(tr, x), static_int(k, "k"), static_int(dim, "dim"), bool(largest))
    return wrap(tr, values), wrap(tr, indices)
