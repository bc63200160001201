"""Composite operations built from matmul, reductions and elementwise ops: einsum, outer
products, vector norms, normalisation and the common loss functions.

Each is a composition of primitives, so it fuses, tiles, runs on every backend and is
differentiated by the autodiff pass like any other kernel code."""
from __future__ import annotations

import math

from .. import dtypes as _dt
from ..errors import PyptoError
from .values import TensorValue
from . import tensor_ops as T
from . import composite_ops as C
from .._C import Opcode

# --- einsum ----------------------------------------------------------------------------------------


def _parse_einsum(equation, ranks):
    eq = equation.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(ranks):
        raise PyptoError(f"einsum '{equation}': {len(terms)} operand terms for {len(ranks)} operands")
    used = set(c for c in eq if c.isalpha())
    spare = [c for c in "ZYXWVUTSRQPONMLKJIHGFEDCBAzyxwvutsrqponmlkjihgfedcba" if c not in used]
    ell = None
    out_terms = []
    for term, rank in zip(terms, ranks):
        if "..." in term:
            n = rank - (len(term) - 3)
            if n < 0:
                raise PyptoError(f"einsum '{equation}': term '{term}' has more subscripts than dimensions")
            if ell is None or len(ell) < n:
                ell = (ell or "") + "".join(spare[len(ell or ""):n])
            term = term.replace("...", ell[len(ell) - n:] if n else "")
        if len(term) != rank or not all(c.isalpha() for c in term):
            raise PyptoError(f"einsum '{equation}': term '{term}' does not match an operand of rank {rank}")
        if len(set(term)) != len(term):
            raise PyptoError(f"einsum '{equation}': repeated subscripts within one operand (diagonals) "
                             "are not supported")
        out_terms.append(term)
    if arrow:
        out = rhs.replace("...", ell or "")
    else:
        counts = {}
        for t in out_terms:
            for c in t:
                counts[c] = counts.get(c, 0) + 1
        out = (ell or "") + "".join(sorted(c for c, k in counts.items() if k == 1 and c not in (ell or "")))
    if not all(c in "".join(out_terms) for c in out) or len(set(out)) != len(out):
        raise PyptoError(f"einsum '{equation}': output subscripts '{out}' must each appear once and in an input")
    return out_terms, out


def _sizes(terms, xs, equation):
    size = {}
    for t, x in zip(terms, xs):
        for c, n in zip(t, x.shape):
            if size.get(c, n) not in (n, 1) and n != 1:
                raise PyptoError(f"einsum '{equation}': subscript '{c}' has sizes {size[c]} and {n}")
            size[c] = n if size.get(c, 1) == 1 else size[c]
    return size


def _sum_out(x, term, keep):
    """Sum x (subscripts `term`) over the subscripts not in `keep`."""
    dims = tuple(i for i, c in enumerate(term) if c not in keep)
    if not dims:
        return x, term
    return T.reduce("sum", x, dims, False), "".join(c for c in term if c in keep)


def _arrange(x, term, order):
    """x (subscripts `term`) permuted to `order` (a permutation of term)."""
    if term == order:
        return x
    return T.permute(x, tuple(term.index(c) for c in order))


def _contract(a, ta, b, tb, keep, size):
    """The product of a and b summed over subscripts in both and not in `keep`: one batched matmul."""
    a, ta = _sum_out(a, ta, keep + tb)
    b, tb = _sum_out(b, tb, keep + ta)
    batch = "".join(c for c in ta if c in tb and c in keep)
    contr = "".join(c for c in ta if c in tb and c not in keep)
    m = "".join(c for c in ta if c not in tb)
    n = "".join(c for c in tb if c not in ta)

    def prod(s):
        return math.prod(size[c] for c in s)
    bshape = tuple(size[c] for c in batch)
    a2 = T.reshape(_expand(_arrange(a, ta, batch + m + contr), batch + m + contr, size),
                   bshape + (prod(m), prod(contr)))
    b2 = T.reshape(_expand(_arrange(b, tb, batch + contr + n), batch + contr + n, size), bshape + (prod(contr), prod(n)))
    r = T.matmul(a2, b2) if contr else T.binary(Opcode.TMUL, a2, b2)
    return T.reshape(r, bshape + tuple(size[c] for c in m + n)), batch + m + n


def _expand(x, term, size):
    want = tuple(size[c] for c in term)
    return x if tuple(x.shape) == want else T.broadcast_to(x, want)


def einsum(equation, *operands):
    """Einstein summation over one or more operands (`'ij,jk->ik'`, `'bhqd,bhkd->bhqk'`,
    `'...ij->...ji'`, implicit output as NumPy). Pairs contract left to right, each as one
    batched matmul. Repeated subscripts within one operand (diagonals) are not supported."""
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = tuple(operands[0])
    if not isinstance(equation, str) or not operands:
        raise PyptoError("einsum(equation, *operands): an equation string and at least one operand")
    tr = T.find_tracer(*operands)
    xs = [T.tensor_of(tr, x, "einsum operand") for x in operands]
    xs = [T.wrap(tr, v) for v in xs]
    terms, out = _parse_einsum(equation, [x.ndim for x in xs])
    size = _sizes(terms, xs, equation)
    acc, ta = xs[0], terms[0]
    for i in range(1, len(xs)):
        later = out + "".join(terms[i + 1:])
        acc, ta = _contract(acc, ta, xs[i], terms[i], later, size)
    acc, ta = _sum_out(acc, ta, out)
    return _expand(_arrange(acc, ta, out), out, size) if ta != out else acc


def outer(a, b):
    """The outer product of two vectors: a[:, None] * b[None, :]."""
    if a.ndim != 1 or b.ndim != 1:
        raise PyptoError(f"outer: expects two vectors, got ranks {a.ndim} and {b.ndim}")
    return T.binary(Opcode.TMUL, T.unsqueeze(a, 1), T.unsqueeze(b, 0))


def baddbmm(input, batch1, batch2, *, beta=1, alpha=1):  # noqa: A002
    """beta * input + alpha * (batch1 @ batch2), as torch.baddbmm / torch.addmm."""
    prod = T.matmul(batch1, batch2)
    if alpha != 1:
        prod = T.binary(Opcode.TMUL, prod, alpha)
    if beta == 0:
        return prod
    return T.binary(Opcode.TADD, input if beta == 1 else T.binary(Opcode.TMUL, input, beta), prod)


def _scale_operand(s, n, axis, what):
    """A scaled_mm scale: a number, a 1-element tensor, or n values (shape (n,), or (n, 1) / (1, n))."""
    if not isinstance(s, TensorValue):
        return float(s)
    shape = tuple(s.shape)
    if shape in ((), (1,), (1, 1)):
        return T.reshape(s, (1, 1)) if shape != (1, 1) else s
    want = (n, 1) if axis == 0 else (1, n)
    if shape == (n,):
        return T.unsqueeze(s, 1 - axis)
    if shape != want:
        raise PyptoError(f"scaled_mm: {what} must have shape {want}, ({n},) or (1,), got {shape}")
    return s


def scaled_mm(a, b, scale_a=1.0, scale_b=1.0, bias=None, out_dtype=None):
    """(a @ b) * scale_a[:, None] * scale_b[None, :] (+ bias): integer inputs (int8, uint8,
    int16, int32) multiply exactly in int32 (wrapping past 2^31), float inputs in float32; the
    scales and bias apply in float32, and the result is out_dtype (float32 by default)."""
    if not (isinstance(a, TensorValue) and isinstance(b, TensorValue)) or a.ndim != 2 or b.ndim != 2:
        raise PyptoError("scaled_mm: a and b must be 2-D tensors")
    if a.pdtype is _dt.bool_ or b.pdtype is _dt.bool_ or a.pdtype is _dt.int64 or b.pdtype is _dt.int64:
        raise PyptoError(f"scaled_mm: unsupported operand dtypes {a.pdtype.name} and {b.pdtype.name} "
                         "(int8, uint8, int16, int32, or a float type)")
    integer = not a.pdtype.is_floating_point and not b.pdtype.is_floating_point
    acc_t = _dt.int32 if integer else _dt.float32
    m, n = a.shape[0], b.shape[1]
    # The scales' views first, so that the product's epilogue (cast, scales, bias) is one chain of
    # element-wise ops after the matmul, which fusion makes one pass (or part of the matmul's nest).
    sa = _scale_operand(scale_a, m, 0, "scale_a")
    sb = _scale_operand(scale_b, n, 1, "scale_b")
    if a.pdtype is _dt.int8 and b.pdtype is _dt.int8:
        # int8 operands stay int8 into an int32 result: the int8 dot product (VNNI where the CPU
        # has it, pto/cpu/matmul_int8.hpp) instead of two int32 copies and an int32 matmul.
        prod = T.matmul_as(a, b, acc_t)
    else:
        prod = T.matmul(T.cast(a, acc_t) if a.pdtype is not acc_t else a,
                        T.cast(b, acc_t) if b.pdtype is not acc_t else b)
    out = T.cast(prod, _dt.float32) if integer else prod
    out = T.binary(Opcode.TMUL, out, sa)
    out = T.binary(Opcode.TMUL, out, sb)
    if bias is not None:
        out = T.binary(Opcode.TADD, out, bias)
    want = _dt.to_dtype(out_dtype) if out_dtype is not None else _dt.float32
    return out if want is _dt.float32 else T.cast(out, want)


# --- norms ---------------------------------------------------------------------------------------


def vector_norm(x, ord=2, dim=None, keepdim=False, *, dtype=None):  # noqa: A002
    """The vector p-norm over `dim` (all elements when None): ord 2, 1, inf, -inf, 0 or any p > 0."""
    if dtype is not None:
        x = T.cast(x, dtype)
    if not x.dtype.is_floating_point:
        x = T.cast(x, _dt.float32)
    a = T.unary(Opcode.TABS, x)
    if ord == 2:
        return T.norm_sqrt(T.reduce("sum", T.binary(Opcode.TMUL, x, x), dim, keepdim))
    if ord == 1:
        return T.reduce("sum", a, dim, keepdim)
    if ord == math.inf:
        return T.reduce("max", a, dim, keepdim)
    if ord == -math.inf:
        return T.reduce("min", a, dim, keepdim)
    if ord == 0:
        return T.reduce("sum", T.cast(T.compare(Opcode.TCMP_NE, x, 0), x.dtype), dim, keepdim)
    if isinstance(ord, (int, float)) and ord > 0:
        return T.power(T.reduce("sum", T.power(a, float(ord)), dim, keepdim), 1.0 / ord)
    raise PyptoError(f"vector_norm: unsupported ord {ord!r}")


def norm(x, p="fro", dim=None, keepdim=False, out=None, dtype=None):
    """torch.norm: the Frobenius / vector p-norm (matrix norms other than 'fro' are not supported)."""
    if out is not None:
        raise PyptoError("norm: out= is not supported in a kernel; assign the result instead")
    if p in ("fro", None):
        p = 2
    if isinstance(p, str):
        raise PyptoError(f"norm: matrix norm {p!r} is not supported (only 'fro' and vector p-norms)")
    return vector_norm(x, p, dim, keepdim, dtype=dtype)


def normalize(x, p=2.0, dim=1, eps=1e-12, out=None):
    """x / max(||x||_p over dim, eps), as torch.nn.functional.normalize."""
    if out is not None:
        raise PyptoError("normalize: out= is not supported in a kernel; assign the result instead")
    n = vector_norm(x, p, dim, True)
    return T.binary(Opcode.TDIV, x, T.clamp(n, eps, None))


# --- losses ----------------------------------------------------------------------------------------


def _reduce_loss(loss, reduction, what, weight_sum=None):
    if reduction == "none":
        return loss
    if reduction == "sum":
        return T.reduce("sum", loss, None, False)
    if reduction == "mean":
        if weight_sum is not None:
            return T.binary(Opcode.TDIV, T.reduce("sum", loss, None, False), weight_sum)
        return T.mean(loss, None, False)
    raise PyptoError(f"{what}: reduction must be 'mean', 'sum' or 'none', got {reduction!r}")


def _check_same(input, target, what):  # noqa: A002
    if isinstance(target, TensorValue) and tuple(target.shape) != tuple(input.shape):
        raise PyptoError(f"{what}: input shape {tuple(input.shape)} and target shape {tuple(target.shape)} differ")


def mse_loss(input, target, reduction="mean", **_):  # noqa: A002
    _check_same(input, target, "mse_loss")
    d = T.binary(Opcode.TSUB, input, target)
    return _reduce_loss(T.binary(Opcode.TMUL, d, d), reduction, "mse_loss")


def l1_loss(input, target, reduction="mean", **_):  # noqa: A002
    _check_same(input, target, "l1_loss")
    return _reduce_loss(T.unary(Opcode.TABS, T.binary(Opcode.TSUB, input, target)), reduction, "l1_loss")


def smooth_l1_loss(input, target, reduction="mean", beta=1.0, **_):  # noqa: A002
    _check_same(input, target, "smooth_l1_loss")
    a = T.unary(Opcode.TABS, T.binary(Opcode.TSUB, input, target))
    if beta == 0:
        return _reduce_loss(a, reduction, "smooth_l1_loss")
    quad = T.binary(Opcode.TMUL, T.binary(Opcode.TMUL, a, a), 0.5 / beta)
    lin = T.binary(Opcode.TSUB, a, 0.5 * beta)
    return _reduce_loss(T.where(T.compare(Opcode.TCMP_LT, a, beta), quad, lin), reduction, "smooth_l1_loss")


def huber_loss(input, target, reduction="mean", delta=1.0, weight=None):  # noqa: A002
    if weight is not None:
        raise PyptoError("huber_loss: weight= is not supported")
    return T.binary(Opcode.TMUL, smooth_l1_loss(input, target, reduction, beta=delta), delta)


def _class_dim_last(x):
    """(N, C, d1, ...) -> (N, d1, ..., C): the class dimension last, as the row ops want it."""
    if x.ndim <= 2:
        return x
    return T.permute(x, (0,) + tuple(range(2, x.ndim)) + (1,))


def _nll(logp, target, weight, ignore_index, reduction, what):
    """Negative log-likelihood of class indices `target` under log-probabilities `logp` (class dim
    last). The pick is a one-hot product, so the gradient with respect to logp is derived."""
    n_cls = logp.shape[-1]
    orig = target
    if target.dtype.is_floating_point:
        raise PyptoError(f"{what}: class-index targets must be an integer tensor")
    if tuple(target.shape) != tuple(logp.shape[:-1]):
        raise PyptoError(f"{what}: target shape {tuple(target.shape)} does not match input {tuple(logp.shape)}")
    if ignore_index is not None:
        target = T.where(T.compare(Opcode.TCMP_EQ, target, ignore_index), 0, target)
    hot = T.cast(C.one_hot(target, n_cls), logp.dtype)
    w = hot if weight is None else T.binary(Opcode.TMUL, hot, weight)
    if ignore_index is not None:
        keep = T.cast(T.compare(Opcode.TCMP_NE, T.unsqueeze(orig, -1), ignore_index), logp.dtype)
        w = T.binary(Opcode.TMUL, w, keep)
    loss = T.unary(Opcode.TNEG, T.reduce("sum", T.binary(Opcode.TMUL, logp, w), -1, False))
    wsum = T.reduce("sum", w, None, False)  # mean: over the weights of the targets not ignored
    return _reduce_loss(loss, reduction, what, wsum)


def nll_loss(input, target, weight=None, ignore_index=-100, reduction="mean", **_):  # noqa: A002
    """torch.nn.functional.nll_loss over log-probabilities (N, C) or (N, C, d1, ...)."""
    return _nll(_class_dim_last(input), target, weight, ignore_index, reduction, "nll_loss")


def cross_entropy(input, target, weight=None, ignore_index=-100, reduction="mean", label_smoothing=0.0,
                  **_):  # noqa: A002
    """torch.nn.functional.cross_entropy: class indices or class probabilities as the target,
    class weights, ignore_index and label smoothing, over (N, C) or (N, C, d1, ...) logits."""
    logp = T.log_softmax(_class_dim_last(input), -1)
    n_cls = logp.shape[-1]
    if isinstance(target, TensorValue) and target.dtype.is_floating_point:
        tgt = _class_dim_last(target)
        if tuple(tgt.shape) != tuple(logp.shape):
            raise PyptoError(f"cross_entropy: probability target shape {tuple(target.shape)} differs from "
                             f"the input's {tuple(input.shape)}")
        if label_smoothing:
            tgt = T.binary(Opcode.TADD, T.binary(Opcode.TMUL, tgt, 1.0 - label_smoothing), label_smoothing / n_cls)
        w = tgt if weight is None else T.binary(Opcode.TMUL, tgt, weight)
        loss = T.unary(Opcode.TNEG, T.reduce("sum", T.binary(Opcode.TMUL, logp, w), -1, False))
        return _reduce_loss(loss, reduction, "cross_entropy")
    nll = _nll(logp, target, weight, ignore_index, reduction, "cross_entropy")
    if not label_smoothing:
        return nll
    if weight is not None or ignore_index != -100:
        raise PyptoError("cross_entropy: label_smoothing with class weights or ignore_index is not supported")
    smooth = _reduce_loss(T.unary(Opcode.TNEG, T.mean(logp, -1, False)), reduction, "cross_entropy")
    return T.binary(Opcode.TADD, T.binary(Opcode.TMUL, nll, 1.0 - label_smoothing),
                    T.binary(Opcode.TMUL, smooth, label_smoothing))


def binary_cross_entropy_with_logits(input, target, weight=None, reduction="mean", pos_weight=None,
                                     **_):  # noqa: A002
    """The logistic loss on logits, computed stably: (1 - y) x + (1 + (pw - 1) y) softplus(-x)."""
    _check_same(input, target, "binary_cross_entropy_with_logits")
    # softplus(-x) = max(-x, 0) + log1p(exp(-|x|)), finite for every x
    sp = T.binary(Opcode.TADD, T.clamp(T.unary(Opcode.TNEG, input), 0.0, None),
                  T.unary(Opcode.TLOG, T.binary(Opcode.TADD, T.unary(Opcode.TEXP, T.unary(
                      Opcode.TNEG, T.unary(Opcode.TABS, input))), 1.0)))
    coef = 1.0 if pos_weight is None else T.binary(
        Opcode.TADD, T.binary(Opcode.TMUL, T.binary(Opcode.TSUB, pos_weight, 1.0), target), 1.0)
    loss = T.binary(Opcode.TADD, T.binary(Opcode.TMUL, T.binary(Opcode.TSUB, 1.0, target), input),
                    sp if pos_weight is None else T.binary(Opcode.TMUL, coef, sp))
    if weight is not None:
        loss = T.binary(Opcode.TMUL, loss, weight)
    return _reduce_loss(loss, reduction, "binary_cross_entropy_with_logits")


def binary_cross_entropy(input, target, weight=None, reduction="mean", **_):  # noqa: A002
    """-(y log p + (1 - y) log(1 - p)) with the logs clamped at -100, as torch does."""
    _check_same(input, target, "binary_cross_entropy")
    lp = T.clamp(T.unary(Opcode.TLOG, input), -100.0, None)
    lq = T.clamp(T.unary(Opcode.TLOG, T.binary(Opcode.TSUB, 1.0, input)), -100.0, None)
    loss = T.unary(Opcode.TNEG, T.binary(Opcode.TADD, T.binary(Opcode.TMUL, target, lp),
                                         T.binary(Opcode.TMUL, T.binary(Opcode.TSUB, 1.0, target), lq)))
    if weight is not None:
        loss = T.binary(Opcode.TMUL, loss, weight)
    return _reduce_loss(loss, reduction, "binary_cross_entropy")


def kl_div(input, target, reduction="mean", log_target=False, **_):  # noqa: A002
    """target * (log target - input) pointwise (input holds log-probabilities), as torch."""
    _check_same(input, target, "kl_div")
    if log_target:
        loss = T.binary(Opcode.TMUL, T.unary(Opcode.TEXP, target), T.binary(Opcode.TSUB, target, input))
    else:
        safe = T.clamp(target, 1e-30, None)  # 0 * log 0 is 0
        loss = T.binary(Opcode.TMUL, target, T.binary(Opcode.TSUB, T.unary(Opcode.TLOG, safe), input))
    if reduction == "batchmean":
        return T.binary(Opcode.TDIV, T.reduce("sum", loss, None, False), input.shape[0])
    return _reduce_loss(loss, reduction, "kl_div")
