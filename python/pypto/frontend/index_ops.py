"""Indexing by tensors while tracing: x[idx], x[:, idx], x[idx] = v, index_select, embedding,
gather, scatter, index_add, index_copy, flip. Each is a builder call (src/ir/builder_index.cpp); the indices
are checked when the kernel runs (an index out of range raises PyptoError, never a wild access)."""
from __future__ import annotations

from ..errors import PyptoError
from .. import dtypes as _dt
from ..interop import is_array
from .composite_ops import check_index_dtype, cumsum
from .tensor_ops import (arange, assign, binary, broadcast_to, cast, copy, find_tracer, full, operand, reduce, reshape,
                         static_int, tensor_of, where, wrap)
from .tensor_ops import index as view_index
from .values import Opcode, TensorValue


def _is_index_tensor(it):
    if isinstance(it, TensorValue):
        return True
    return is_array(it) and not isinstance(it, (int, float))


def has_tensor_index(key):
    items = key if isinstance(key, tuple) else (key,)
    return any(_is_index_tensor(it) for it in items)


def _split_key(tr, v, key):
    """The key with its one index tensor replaced by `:`, the view dimension that tensor indexes,
    and the index tensor (a View)."""
    items = list(key) if isinstance(key, tuple) else [key]
    pos = [k for k, it in enumerate(items) if _is_index_tensor(it)]
    if len(pos) > 1:
        raise PyptoError("indexing with more than one index tensor is not supported; index one dimension "
                         "at a time")
    k = pos[0]
    idx = tensor_of(tr, items[k], "an index")
    if idx.dtype == "bool":
        raise PyptoError("reading x[mask] is not supported (the result's size would depend on the data); use "
                         "pypto.masked_select(x, mask) (values and count, in a buffer of x's size) or "
                         "pypto.where(mask, x, fill); x[mask] = value is supported")
    if idx.dtype.startswith("f"):
        raise PyptoError(f"tensors used as indices must be integer tensors, got {idx.dtype}")
    check_index_dtype(idx, "x[index]")
    rank = len(v.shape)
    dim = 0
    used = sum(1 for it in items if it is not None and it is not Ellipsis)
    for it in items[:k]:
        if it is Ellipsis:
            dim += rank - used
        elif it is None or isinstance(it, slice):
            dim += 1
        # an integer index drops its dimension
    items[k] = slice(None)
    return tuple(items), dim, idx


def index(x, key):
    """x[key]: a view, or a gather when the key holds an index tensor."""
    return getitem(x, key) if has_tensor_index(key) else view_index(x, key)


def getitem(x, key):
    tr = find_tracer(x)
    v = tensor_of(tr, x)
    items = list(key) if isinstance(key, tuple) else [key]
    if sum(1 for it in items if _is_index_tensor(it)) > 1:
        return _getitem_many(tr, x, v, items)
    rest, dim, idx = _split_key(tr, v, key)
    base = view_index(x if isinstance(x, TensorValue) else wrap(tr, v), rest)
    tr.note_index_site()
    return wrap(tr, tr.b.take(base.bv, dim, idx, True))


def _getitem_many(tr, x, v, items):
    """x[i, j] with several index tensors in adjacent positions (numpy's rule: the broadcast index
    shape replaces those dimensions): one gather of x's indexed dimensions merged into one, at the
    linear index i * n_j + j. Each index is wrapped (negative from the end) and checked against its
    own dimension: one out of range makes the linear index out of range, a run-time error."""
    pos = [k for k, it in enumerate(items) if _is_index_tensor(it)]
    if pos != list(range(pos[0], pos[0] + len(pos))):
        raise PyptoError("indexing with index tensors in non-adjacent positions is not supported; index one "
                         "dimension at a time")
    idxs = []
    for k in pos:
        t = tensor_of(tr, items[k], "an index")
        if t.dtype == "bool" or t.dtype.startswith("f"):
            raise PyptoError(f"x[i, j] with several index tensors needs integer ones, got {t.dtype}")
        check_index_dtype(t, "x[index]")
        idxs.append(cast(wrap(tr, t), "int64"))
        items[k] = slice(None)
    base = view_index(x if isinstance(x, TensorValue) else wrap(tr, v), tuple(items))
    dim = _split_key(tr, v, tuple(items[:pos[0]]) + (idxs[0],) + tuple(items[pos[0] + 1:]))[1]
    sizes = list(base.shape[dim:dim + len(pos)])
    total = 1
    for n in sizes:
        total *= n
    linear, bad = None, None
    for t, n in zip(idxs, sizes):
        t = where(binary(Opcode.TCMP_LT, t, 0), binary(Opcode.TADD, t, n), t)
        out = binary(Opcode.TOR, binary(Opcode.TCMP_LT, t, 0), binary(Opcode.TCMP_GE, t, n))
        bad = out if bad is None else binary(Opcode.TOR, bad, out)
        linear = t if linear is None else binary(Opcode.TADD, binary(Opcode.TMUL, linear, n), t)
    linear = where(bad, total, linear)
    shape = list(base.shape)
    merged = reshape(base, shape[:dim] + [total] + shape[dim + len(pos):])
    tr.note_index_site()
    return wrap(tr, tr.b.take(merged.bv, dim, linear.bv, True))


def _mask_over(tr, x, mask, what):
    """A bool mask shaped like x's leading dimensions (as torch), reshaped to broadcast over x."""
    m = tensor_of(tr, mask, "a mask")
    ms, xs = tuple(m.shape), tuple(x.shape)
    if len(ms) > len(xs) or xs[:len(ms)] != ms:
        raise PyptoError(f"{what}: a mask of shape {ms} does not match the leading dimensions of {xs}")
    m = wrap(tr, m)
    return m if len(ms) == len(xs) else reshape(m, ms + (1,) * (len(xs) - len(ms)))


def _is_mask(tr, key):
    return not isinstance(key, tuple) and _is_index_tensor(key) and tensor_of(tr, key, "a mask").dtype == "bool"


def setitem(x, key, value):
    """x[key] = value: a store into a view, a scatter when the key holds an index tensor, or, for a
    bool mask, a select: x = where(mask, value, x) (value: a number or a tensor broadcastable to x)."""
    if not has_tensor_index(key):
        return assign(view_index(x, key), value)
    if _is_mask(find_tracer(x, key), key):
        tr = find_tracer(x, key, value)
        xv = x if isinstance(x, TensorValue) else wrap(tr, tensor_of(tr, x))
        return assign(xv, where(_mask_over(tr, xv, key, "x[mask] = value"), value, xv))
    tr = find_tracer(x, value)
    v = tensor_of(tr, x)
    rest, dim, idx = _split_key(tr, v, key)
    base = view_index(x if isinstance(x, TensorValue) else wrap(tr, v), rest)
    tr.note_index_site()
    tr.b.put(base.bv, dim, idx, operand(tr, value), False, True)


def index_select(x, dim, index_):
    tr = find_tracer(x, index_)
    idx = tensor_of(tr, index_, "index")
    check_index_dtype(idx, "index_select")
    if len(idx.shape) > 1:
        raise PyptoError(f"index_select: the index must be 0-d or 1-d, got shape {tuple(idx.shape)}")
    tr.note_index_site()
    return wrap(tr, tr.b.take(tensor_of(tr, x), static_int(dim, "dim"), idx, False))


def embedding(input, weight, padding_idx=None, max_norm=None, norm_type=2.0, scale_grad_by_freq=False,  # noqa: A002
              sparse=False):
    if max_norm is not None:
        raise PyptoError("embedding: max_norm is not supported")
    if scale_grad_by_freq:
        raise PyptoError("embedding: scale_grad_by_freq is not supported")
    tr = find_tracer(input, weight)
    w = tensor_of(tr, weight, "embedding weight")
    if len(w.shape) != 2:
        raise PyptoError(f"embedding: weight must be 2-d, got shape {tuple(w.shape)}")
    ids = tensor_of(tr, input, "embedding input")
    check_index_dtype(ids, "embedding")
    tr.note_index_site()
    rows = wrap(tr, tr.b.take(w, 0, ids, False))
    if padding_idx is None:
        return rows
    # As torch: the padding row is looked up like any other but gets no gradient.
    pad = _padding_row(padding_idx, wrap(tr, w).shape[0])
    at_pad = tr.b.unsqueeze(binary(Opcode.TCMP_EQ, wrap(tr, ids), pad).bv, -1)
    return wrap(tr, tr.b.select(at_pad, tr.b.detach(rows.bv), rows.bv))


def _padding_row(padding_idx, n):
    """embedding's padding_idx as a row number in [0, n) (negative counts from the end)."""
    p = static_int(padding_idx, "embedding: padding_idx")
    if not isinstance(n, int):
        if p < 0:
            raise PyptoError("embedding: a negative padding_idx needs a static number of embeddings")
        return p
    if not -n <= p < n:
        raise PyptoError(f"embedding: padding_idx {p} is out of range for {n} embeddings")
    return p % n


def gather(x, dim, index_):
    tr = find_tracer(x, index_)
    tr.note_index_site()
    return wrap(tr, tr.b.gather_elements(tensor_of(tr, x), static_int(dim, "dim"), tensor_of(tr, index_, "index")))


def scatter(x, dim, index_, src=None, value=None, reduce=None):
    if reduce not in (None, "add", "sum"):
        raise PyptoError(f"scatter: reduce={reduce!r} is not supported (None or 'add')")
    if (src is None) == (value is None):
        raise PyptoError("scatter: give exactly one of src and value")
    tr = find_tracer(x, index_, src)
    s = operand(tr, src if src is not None else value)
    tr.note_index_site()
    return wrap(tr, tr.b.scatter_elements(tensor_of(tr, x), static_int(dim, "dim"), tensor_of(tr, index_, "index"), s,
                                          reduce is not None))


def scatter_add(x, dim, index_, src):
    return scatter(x, dim, index_, src, reduce="add")


def index_add(x, dim, index_, source, alpha=1):
    """Out of place: a copy of x with source's slices added at the indexed positions."""
    y = copy(x)
    index_add_(y, dim, index_, source, alpha)
    return y


def _put_along(x, dim, index_, source, accumulate, what, source_keeps_dim=False):
    """x's slices along dim at a 0-d or 1-d index set to (or added) source's, in place; an index
    out of range (a negative one too) raises when the kernel runs. source_keeps_dim: a 0-d index's
    source has the dim, of size 1 (index_copy, as torch)."""
    tr = find_tracer(x, index_, source)
    idx = tensor_of(tr, index_, "index")
    check_index_dtype(idx, what)
    if len(idx.shape) > 1:
        raise PyptoError(f"{what}: the index must be 0-d or 1-d, got shape {tuple(idx.shape)}")
    if source_keeps_dim and len(idx.shape) == 0:
        idx = tr.b.reshape(idx, [1])
    s = operand(tr, source)
    tr.note_index_site()
    tr.b.put(tensor_of(tr, x), static_int(dim, "dim"), idx, s, accumulate, False)
    return x


def index_add_(x, dim, index_, source, alpha=1):
    return _put_along(x, dim, index_, source if alpha == 1 else binary(Opcode.TMUL, source, alpha), True,
                      "index_add")


def index_copy(x, dim, index_, source):
    """Out of place: a copy of x with source's slices at the indexed positions."""
    y = copy(x)
    index_copy_(y, dim, index_, source)
    return y


def index_copy_(x, dim, index_, source):
    """x's slices along dim replaced by source's (a static KV cache's `k_cache.index_copy_(2, pos, k)`)."""
    return _put_along(x, dim, index_, source, False, "index_copy", source_keeps_dim=True)


def index_put_(x, indices, values, accumulate=False):
    if not isinstance(indices, (tuple, list)) or len(indices) != 1:
        raise PyptoError("index_put_: only a single index tensor is supported")
    tr = find_tracer(x, values)
    tr.note_index_site()
    tr.b.put(tensor_of(tr, x), 0, tensor_of(tr, indices[0], "index"), operand(tr, values), bool(accumulate), True)
    return x


def flip(x, dims):
    tr = find_tracer(x)
    ds = dims if isinstance(dims, (tuple, list)) else (dims,)
    return wrap(tr, tr.b.flip(tensor_of(tr, x), [static_int(d, "dims") for d in ds]))


def masked_select(x, mask, fill=0):
    """The elements of x where mask is true, in row-major order, in a 1-d
    buffer of x.numel() elements whose tail past the count is `fill`; returns (values, count).
    The buffer's size is static (the bound), the count is an int64 0-d tensor. The mask has x's
    shape, the shape of x's leading dimensions (as in x[mask]), or broadcasts to x's shape."""
    tr = find_tracer(x, mask)
    xv = x if isinstance(x, TensorValue) else wrap(tr, tensor_of(tr, x))
    m = tensor_of(tr, mask, "mask")
    if m.dtype != "bool":
        raise PyptoError(f"masked_select: the mask must be a bool tensor, got {_dt.to_dtype(m.dtype).name}")
    n = 1
    for s in xv.shape:
        n *= s
    flat_x = reshape(xv, (n,))
    ms, xs = tuple(m.shape), tuple(xv.shape)
    mw = _mask_over(tr, xv, mask, "masked_select") if len(ms) < len(xs) and xs[:len(ms)] == ms else wrap(tr, m)
    flat_m = reshape(broadcast_to(mw, xs), (n,))
    taken = cast(flat_m, _dt.int64)
    count = reduce("sum", taken)
    # Selected elements go to their rank among the selected; the others to a dump slot at n.
    slot = where(flat_m, binary(Opcode.TSUB, cumsum(taken, 0), 1), n)
    buf = full((n + 1,), 0, xv.dtype)
    tr.note_index_site()
    buf = wrap(tr, tr.b.scatter_elements(buf.bv, 0, slot.bv, operand(tr, where(flat_m, flat_x, 0)), True))
    values = view_index(buf, (slice(0, n),))
    if fill != 0:
        values = where(binary(Opcode.TCMP_LT, arange(n), count), values, fill)
    return values, count
