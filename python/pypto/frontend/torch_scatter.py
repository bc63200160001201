"""torch's scatter-family functions beyond index_ops.py, inside kernels (torch_functions.py reads
ENTRIES, which also names index_ops' index_copy / index_copy_): scatter_reduce with reduce "sum" /
"mean", F.embedding_bag (sum / mean / max), diag_embed and heaviside. Each is composed of the index puts of index_ops.py and elementwise operations, so the
indices are checked when the kernel runs and each is differentiated like any other."""
from __future__ import annotations

from .. import dtypes as _dt
from ..errors import PyptoError
from . import index_ops as X
from . import tensor_ops as T
from .composite_ops import check_index_dtype, cumsum, pad
from .values import Opcode, TensorValue


def scatter_reduce(input, dim, index, src, reduce, *, include_self=True):  # noqa: A002
    """torch.scatter_reduce for reduce "sum" and "mean" (mean: the sum over the values scattered to
    a position, input's own value counted once when include_self, as torch; an integer mean rounds
    down). "prod" / "amax" / "amin" need a scatter with that combine, which the ISA lacks."""
    if reduce not in ("sum", "mean"):
        raise PyptoError(f"scatter_reduce: reduce={reduce!r} is not supported (only 'sum' and 'mean': the ISA's "
                         "scatter combines by addition); for 'amax' / 'amin' with few targets compare against "
                         "each target and reduce (torch.where + amax)")
    if not isinstance(src, TensorValue):
        raise PyptoError("scatter_reduce: src must be a tensor")
    base = input if include_self else X.scatter(input, dim, index, value=0)
    total = X.scatter_add(base, dim, index, src)
    if reduce == "sum":
        return total
    ones = T.full(index.shape, 1, input.dtype)
    count = X.scatter_add(T.full(input.shape, 1 if include_self else 0, input.dtype), dim, index, ones)
    count = T.binary(Opcode.TMAX, count, 1)  # a position nothing reaches keeps input's value
    if _dt.to_dtype(input.dtype).is_floating_point:
        return T.binary(Opcode.TDIV, total, count)
    return T.floordiv(total, count)


def _bags_of(n, offsets, include_last_offset):
    """The bag of each of n flattened indices from the bags' start offsets: a 1 at each start
    (past the first) summed up. Bags may be empty (equal offsets add 2 at one place)."""
    nb = offsets.shape[0] - (1 if include_last_offset else 0)
    starts = T.index(offsets, slice(1, nb)) if nb > 1 else None
    marks = T.full((n + 1,), 0, _dt.int64)
    if starts is not None:
        X.index_add_(marks, 0, starts, T.full((nb - 1,), 1, _dt.int64))
    return cumsum(T.index(marks, slice(0, n)), 0), nb


def embedding_bag(input, weight, offsets=None, max_norm=None, norm_type=2.0,  # noqa: A002
                  scale_grad_by_freq=False, mode="mean", sparse=False, per_sample_weights=None,
                  include_last_offset=False, padding_idx=None):
    """F.embedding_bag: the rows of weight looked up by input and reduced per bag (a row of a 2-d
    input, or the runs between offsets of a 1-d one). An index equal to padding_idx takes no part,
    an empty bag gives zeros, as torch."""
    if max_norm is not None or scale_grad_by_freq:
        raise PyptoError("embedding_bag: max_norm and scale_grad_by_freq are not supported")
    if mode not in ("sum", "mean", "max"):
        raise PyptoError(f"embedding_bag: mode must be 'sum', 'mean' or 'max', got {mode!r}")
    if per_sample_weights is not None and mode != "sum":
        raise PyptoError("embedding_bag: per_sample_weights needs mode='sum' (as torch)")
    if not isinstance(input, TensorValue):
        raise PyptoError("embedding_bag: the input must be a tensor")
    check_index_dtype(input, "embedding_bag")
    if input.ndim == 2:
        if offsets is not None:
            raise PyptoError("embedding_bag: offsets must be None for a 2-d input (each row is a bag)")
    elif input.ndim == 1:
        if offsets is None or not isinstance(offsets, TensorValue) or offsets.ndim != 1:
            raise PyptoError("embedding_bag: a 1-d input needs 1-d offsets (the start of each bag)")
        if mode == "max":
            raise PyptoError("embedding_bag: mode='max' with offsets is not supported (a scatter-max); "
                             "give a 2-d input of equal bags")
    else:
        raise PyptoError(f"embedding_bag: the input must be 1-d or 2-d, got shape {tuple(input.shape)}")
    rows = X.embedding(input, weight)  # (..., n, D)
    keep = None
    if padding_idx is not None:
        keep = T.compare(Opcode.TCMP_NE, input, X._padding_row(padding_idx, weight.shape[0]))
    weights = per_sample_weights
    if keep is not None:
        k = T.cast(keep, rows.dtype)
        weights = k if weights is None else T.binary(Opcode.TMUL, weights, k)
    if mode == "max":
        if keep is not None:
            rows = T.where(T.unsqueeze(keep, -1), rows, float("-inf"))
        best = T.reduce("max", rows, 1, False)
        return T.where(T.compare(Opcode.TCMP_EQ, best, float("-inf")), 0.0, best)  # an empty bag: zeros
    if weights is not None:
        rows = T.binary(Opcode.TMUL, rows, T.unsqueeze(T.cast(weights, rows.dtype), -1))
    if input.ndim == 2:
        total = T.reduce("sum", rows, 1, False)
        count = T.reduce("sum", T.cast(keep, rows.dtype), 1, True) if keep is not None else input.shape[1]
    else:
        bags, nb = _bags_of(input.shape[0], offsets, include_last_offset)
        total = X.index_add(T.full((nb, weight.shape[1]), 0, rows.dtype), 0, bags, rows)
        ones = T.cast(keep, rows.dtype) if keep is not None else T.full((input.shape[0],), 1, rows.dtype)
        count = T.unsqueeze(X.index_add(T.full((nb,), 0, rows.dtype), 0, bags, ones), 1)
    if mode == "sum":
        return total
    if isinstance(count, int):
        return T.binary(Opcode.TDIV, total, float(count))
    return T.binary(Opcode.TDIV, total, T.binary(Opcode.TMAX, count, 1.0))  # an empty bag: zeros


def diag_embed(input, offset=0, dim1=-2, dim2=-1):  # noqa: A002
    """Matrices with input's last dimension on their diagonal `offset` (dims dim1, dim2 of the
    result; the default: the last two)."""
    n = input.shape[-1]
    m = n + abs(offset)
    rank = input.ndim + 1
    d1, d2 = dim1 % rank, dim2 % rank
    if d1 == d2:
        raise PyptoError("diag_embed: dim1 and dim2 must differ")
    row = T.unsqueeze(T.arange(0, m), 1)
    col = T.unsqueeze(T.arange(0, m), 0)
    on = T.compare(Opcode.TCMP_EQ, T.binary(Opcode.TSUB, col, row), offset)  # (m, m)
    # the value at (row, col) of the diagonal: input[min(row, col)] (row for offset >= 0, col below)
    pos = T.binary(Opcode.TMIN, T.binary(Opcode.TMIN, row, col), n - 1)
    vals = X.index_select(input, -1, T.reshape(pos, (m * m,)))
    vals = T.reshape(vals, tuple(input.shape[:-1]) + (m, m))
    out = T.where(on, vals, T.full((1,), 0, input.dtype))
    if (d1, d2) == (rank - 2, rank - 1):
        return out
    if (d1, d2) == (rank - 1, rank - 2):
        return T.transpose(out, -2, -1)
    rest = [k for k in range(rank) if k not in (d1, d2)]
    order = [0] * rank  # out's dims (..., dim1, dim2) placed at rest + [d1, d2]
    for src, dst in enumerate(rest + [d1, d2]):
        order[dst] = src
    return T.permute(out, order)


def heaviside(input, values, *, out=None):  # noqa: A002
    """values where input == 0, else 1 where input > 0 and 0 elsewhere (a NaN input gives 0, as torch's)."""
    if out is not None:
        raise PyptoError("out= is not supported inside a kernel; assign the result instead")
    step = T.cast(T.compare(Opcode.TCMP_GT, input, 0), input.dtype)
    return T.where(T.compare(Opcode.TCMP_EQ, input, 0), values, step)


def block_diag(*tensors):
    """The tensors (0-d: 1 x 1, 1-d: one row, 2-d) along the diagonal of a zero matrix."""
    mats = []
    for t in tensors:
        if t.ndim > 2:
            raise PyptoError(f"block_diag: expects tensors of at most 2 dims, got shape {tuple(t.shape)}")
        mats.append(T.reshape(t, (1, 1)) if t.ndim == 0 else T.reshape(t, (1, -1)) if t.ndim == 1 else t)
    if not mats:
        raise PyptoError("block_diag: no tensors given")
    width = sum(m.shape[1] for m in mats)
    rows, col = [], 0
    for m in mats:
        rows.append(pad(m, (col, width - col - m.shape[1]), value=0))
        col += m.shape[1]
    return T.concat(rows, 0)


ENTRIES = [
    (X.index_copy, ["index_copy"]), (X.index_copy_, ["index_copy_"]), (scatter_reduce, ["scatter_reduce"]),
    (embedding_bag, ["embedding_bag"]), (diag_embed, ["diag_embed"]), (heaviside, ["heaviside"]),
    (block_diag, ["block_diag"]),
]
