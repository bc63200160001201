"""Attention written out by hand over a constant banded mask, found while tracing and computed by
blocks of query rows, each against only the keys its rows can see.

    scores = q @ k.transpose(-2, -1) / math.sqrt(d)            # any chain of scalar * and /
    probs = softmax(scores + causal, dim=-1)                   # causal: a constant, -inf above a band
    out = probs @ v

A Llama block's attention in plain torch code is this (the mask from torch.full(...).triu(1) in
its forward, which runs as Python, so the mask is a constant of the trace; a mask that is an
argument, a closure's or a module buffer is read afresh at every call and is not inspected).
The ops are recorded as they are traced (`note_*`: each result remembers the op and operands that
made it); at `probs @ v` the chain is recognised (`plan`) and, where the mask's rows end early
enough (a causal mask: half the keys), tensor_ops re-emits it block by block: row block [r0, r1)
multiplies keys [0, c) where c is the end of the last finite column in those rows, so exp(-inf)
= 0 weights are never computed. The full-size ops traced first are then unused, and the pipeline's dead code
elimination drops them. The results are those of the full computation: the columns left out are
-inf in every row of the block (weight 0, and they take no part in the row's maximum), as long as
no score there is +inf or NaN (inf + -inf: NaN in the full form; the blocked form never reads
those keys, as torch's own masked attention kernels do not)."""
from __future__ import annotations

import numbers

import numpy as np

from .values import Opcode, TensorValue

_MAX_MASK = 1 << 24  # elements of a mask worth inspecting
_SCALE_OPS = (Opcode.TMUL, Opcode.TDIV)


def _origins(tr):
    o = getattr(tr, "attention_origins", None)
    if o is None:
        o = tr.attention_origins = {}
    return o


def _origin(x):
    if not isinstance(x, TensorValue):
        return None
    o = getattr(x.tr, "attention_origins", None)
    entry = o.get(id(x)) if o else None
    return entry[1] if entry is not None and entry[0] is x else None


def _note(tr, result, info):
    if not getattr(tr, "attention_rewriting", False):
        _origins(tr)[id(result)] = (result, info)  # the result is kept: its id stays its own


def note_matmul(tr, a, b, result):
    if isinstance(a, TensorValue) and isinstance(b, TensorValue) and a.ndim >= 2 and b.ndim >= 2:
        _note(tr, result, ("matmul", a, b))


def note_binary(tr, op, a, b, result):
    """A scalar scaling of a product's scores, or the addition of a constant mask to them."""
    x, other, side = (a, b, 0) if isinstance(a, TensorValue) else (b, a, 1)
    o = _origin(x)
    if o is None or o[0] not in ("matmul", "scale"):
        return
    if op in _SCALE_OPS and isinstance(other, numbers.Real) and not isinstance(other, bool):
        _note(tr, result, ("scale", x, op, other, side))
    elif op is Opcode.TADD:
        ends = _row_ends(_constant(tr, other), x.shape)
        if ends is not None:
            _note(tr, result, ("mask", x, ends[0], ends[1]))


def _constant(tr, x):
    """The array behind x when it is a constant of the trace (made by the traced code itself, e.g.
    torch.full(..).triu(1): its values are fixed by what the trace is specialised on), whole; else
    None (arguments, closures, module buffers are read afresh at every call)."""
    if not isinstance(x, TensorValue):
        return x
    k = tr.param_index.get(x.bv.buffer_id)
    if k is None or k >= len(tr.inputs):
        return None
    entry = tr.inputs[k]
    if entry[0] != "implicit" or entry[1].root[0] not in ("const",) or entry[1].steps:
        return None
    arr = entry[2]
    return arr if tuple(getattr(arr, "shape", ())) == tuple(x.shape) else None


def note_softmax(tr, x, dim, result):
    o = _origin(x)
    if o is not None and o[0] == "mask" and dim in (-1, x.ndim - 1):
        _note(tr, result, ("softmax", x))


def _row_ends(mask, shape):
    """(ends, mask as a 2-D array) for a constant mask of shape (.., L, S) with leading dims 1, where
    ends[i] is 1 + the last column of row i that is not -inf; None for anything else."""
    if mask is None:
        return None
    try:
        arr = np.asarray(mask.detach().cpu().numpy() if hasattr(mask, "detach") else mask)
    except Exception:  # noqa: BLE001 - not an array we can read: not a mask
        return None
    if arr.ndim < 2 or arr.size > _MAX_MASK or arr.dtype.kind != "f" or len(shape) < 2:
        return None
    if any(n != 1 for n in arr.shape[:-2]) or tuple(arr.shape[-2:]) != tuple(shape[-2:]):
        return None
    arr2 = arr.reshape(arr.shape[-2:])
    finite = arr2 != -np.inf
    S = arr2.shape[1]
    ends = np.where(finite.any(1), S - np.argmax(finite[:, ::-1], 1), 0)
    return ends, arr2


def row_blocks(L, S):
    """Blocks [r0, r1) of L query rows for attention over S keys: at most 8 of at least 64 rows
    (multiples of 16); [] below 128 queries or keys."""
    if L < 128 or S < 128:
        return []
    n = min(8, L // 64)
    r = (-(-L // n) + 15) // 16 * 16
    return [(r0, min(L, r0 + r)) for r0 in range(0, L, r)]


def _blocks(ends, L, S):
    """Row blocks [r0, r1) and the keys [0, c) each reads; None where blocking saves too little."""
    blocks = row_blocks(L, S)
    if not blocks:
        return None
    cols = [max(1, int(ends[r0:r1].max())) for r0, r1 in blocks]
    if sum((r1 - r0) * c for (r0, r1), c in zip(blocks, cols)) > 0.75 * L * S:
        return None
    return list(zip(blocks, cols))


def plan(p, v):
    """For probs @ v where probs is a softmax over a constant banded mask added to (scaled)
    q @ kT: (q, kT, the scalings innermost first as (op, scalar, side), the 2-D mask, [((r0, r1),
    keys)]) to compute it by row blocks; None otherwise."""
    o = _origin(p)
    if o is None or o[0] != "softmax" or not isinstance(v, TensorValue):
        return None
    m = _origin(o[1])
    if m is None or m[0] != "mask":
        return None
    scales, x = [], m[1]
    while (xo := _origin(x)) is not None and xo[0] == "scale":
        scales.append(xo[2:])
        x = xo[1]
    mm = _origin(x)
    if mm is None or mm[0] != "matmul":
        return None
    L, S = p.shape[-2], p.shape[-1]
    if not all(isinstance(n, int) for n in (L, S)) or v.ndim < 2 or v.shape[-2] != S:
        return None
    blocks = _blocks(m[2], L, S)
    if blocks is None:
        return None
    return mm[1], mm[2], scales[::-1], m[3], blocks
