"""torch.nn.functional's convolution, pooling, normalisation, resampling and activation functions
inside kernels, as compositions of PyPTO operations (so that `pypto.jit(module)` of CNNs and of
torch's own transformer modules works): conv1d/conv2d with groups, batch_norm (inference),
group_norm, instance_norm, unfold, nearest upsampling and the remaining pointwise activations
(pooling and pixel rearrangements: torch_pool.py)."""
from __future__ import annotations

import math

import numpy as np

from .. import dtypes as _dt
from ..errors import PyptoError
from .index_ops import flip
from .values import Opcode, TensorValue
from . import composite_ops as C
from . import masked_attention as MA
from . import random_ops as R
from . import math_ops as M
from . import tensor_ops as T
from . import torch_more as MORE


def int_pair(v, what):
    if isinstance(v, (tuple, list)):
        if len(v) != 2:
            raise PyptoError(f"{what}: expected an int or a pair, got {v!r}")
        return int(v[0]), int(v[1])
    return int(v), int(v)


# --- convolution -----------------------------------------------------------------------------------

def conv2d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):  # noqa: A002
    """torch's conv2d: padding 0 by default (PyPTO's own conv2d defaults to 'same'); groups split
    the channels (a depthwise convolution is groups == channels)."""
    if groups == 1:
        patches = _patchify(input, weight, bias, stride, padding, dilation)
        return patches if patches is not None else T.conv2d(input, weight, bias, stride, padding, dilation)
    c_in, c_out = input.shape[-3], weight.shape[0]
    if c_in % groups or c_out % groups:
        raise PyptoError(f"conv2d: {c_in} input and {c_out} output channels do not split into {groups} groups")
    if groups == c_in == c_out and weight.ndim == 4 and input.ndim in (3, 4):
        return _depthwise(input, weight, bias, stride, padding, dilation)
    ci, co = c_in // groups, c_out // groups
    outs = []
    for g in range(groups):
        xg = T.index(input, (Ellipsis, slice(g * ci, (g + 1) * ci), slice(None), slice(None)))
        bg = T.index(bias, slice(g * co, (g + 1) * co)) if bias is not None else None
        outs.append(T.conv2d(xg, T.index(weight, slice(g * co, (g + 1) * co)), bg, stride, padding, dilation))
    return T.concat(outs, -3)


def _depthwise(input, weight, bias, stride, padding, dilation):  # noqa: A002
    """A depthwise convolution (one filter per channel): a TDWCONV per plane, its zero padding an
    operand (Builder::depthwise_conv2d: every tap of a block of outputs accumulated in registers)
    where the planes have static shapes and a row of windows fits a tile; else kh * kw multiply-adds of the
    padded input's shifted (strided) windows by per-channel weights, elementwise over all channels
    at once. (One convolution per channel made kh * kw 1 x 1 products each: MobileNetV2's
    240-channel layers, 2160 products forward and twice as many backward.)"""
    c, (kh, kw) = weight.shape[0], weight.shape[-2:]
    (sh, sw), (dh, dw) = int_pair(stride, "conv2d"), int_pair(dilation, "conv2d")
    if padding == "same":
        if (sh, sw) != (1, 1):
            raise PyptoError(f"conv2d: padding='same' needs stride 1, got stride {(sh, sw)}")
        th, tw = dh * (kh - 1), dw * (kw - 1)
        pt, pb, pl, pr = th // 2, th - th // 2, tw // 2, tw - tw // 2
    elif padding == "valid":
        pt = pb = pl = pr = 0
    else:
        ph, pw = int_pair(padding, "conv2d")
        pt, pb, pl, pr = ph, ph, pw, pw
    ho = (input.shape[-2] + pt + pb - dh * (kh - 1) - 1) // sh + 1
    wo = (input.shape[-1] + pl + pr - dw * (kw - 1) - 1) // sw + 1
    if ho < 1 or wo < 1:
        raise PyptoError(f"conv2d: a {kh} x {kw} kernel does not fit the padded {tuple(input.shape[-2:])} input")
    static = all(isinstance(e, int) for e in (c, input.shape[-2], input.shape[-1], kh, kw))
    tr = T.find_tracer(input, weight)
    if static and tr.b.depthwise_fits(kh, dh, input.shape[-1] + pl + pr):
        out = T.wrap(tr, tr.b.depthwise_conv2d(T.tensor_of(tr, input), T.tensor_of(tr, weight), [sh, sw],
                                               [pt, pb, pl, pr], [dh, dw]))
        if out.dtype != input.dtype and input.dtype in (_dt.bfloat16, _dt.float16) and weight.dtype == input.dtype:
            out = T.cast(out, input.dtype)  # (accumulated in f32, as torch)
        return out if bias is None else T.binary(Opcode.TADD, out, T.reshape(bias, [c, 1, 1]))
    x = C.pad(input, (pl, pr, pt, pb)) if pt or pb or pl or pr else input
    out = None
    for i in range(kh):
        for j in range(kw):
            window = T.index(x, (Ellipsis, slice(i * dh, i * dh + (ho - 1) * sh + 1, sh),
                                 slice(j * dw, j * dw + (wo - 1) * sw + 1, sw)))
            tap = T.index(weight, (slice(None), 0, slice(i, i + 1), slice(j, j + 1)))  # [c, 1, 1], a view
            term = T.binary(Opcode.TMUL, window, tap)
            out = term if out is None else T.binary(Opcode.TADD, out, term)
    return out if bias is None else T.binary(Opcode.TADD, out, T.reshape(bias, [c, 1, 1]))


def _patchify(input, weight, bias, stride, padding, dilation):  # noqa: A002
    """conv2d with the stride of its kernel, no padding or dilation (a vision transformer's patch
    embedding): each output pixel reads a patch of its own, so the convolution is one product of
    the patches as rows with the flattened kernel, not kh * kw shifted products. None otherwise."""
    if input.ndim not in (3, 4) or weight.ndim != 4:
        return None
    kh, kw = weight.shape[-2], weight.shape[-1]
    no_pad = padding == "valid" or (not isinstance(padding, str) and int_pair(padding, "conv2d") == (0, 0))
    if (kh, kw) == (1, 1) or int_pair(stride, "conv2d") != (kh, kw) or not no_pad or \
            int_pair(dilation, "conv2d") != (1, 1):
        return None
    c, H, W = input.shape[-3], input.shape[-2], input.shape[-1]
    oh, ow = H // kh, W // kw
    if oh < 1 or ow < 1 or weight.shape[1] != c:
        return None
    lead = list(input.shape[:-3])
    x = T.index(input, (Ellipsis, slice(0, oh * kh), slice(0, ow * kw)))
    x = T.reshape(x, lead + [c, oh, kh, ow, kw])
    n = len(lead)
    x = T.permute(x, list(range(n)) + [n + 1, n + 3, n, n + 2, n + 4])  # (.., oh, ow, c, kh, kw)
    x = T.reshape(x, lead + [oh * ow, c * kh * kw])
    y = T.matmul(x, T.transpose(T.reshape(weight, [weight.shape[0], c * kh * kw]), 0, 1))
    if bias is not None:
        y = T.binary(Opcode.TADD, y, bias)
    return T.reshape(T.transpose(y, -2, -1), lead + [weight.shape[0], oh, ow])


def conv1d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):  # noqa: A002
    """A conv2d over a height of one."""
    if isinstance(padding, str):
        pad = padding
    else:
        pad = (0, int(padding[0] if isinstance(padding, (tuple, list)) else padding))

    def one(v):
        return int(v[0] if isinstance(v, (tuple, list)) else v)
    y = conv2d(T.unsqueeze(input, -2), T.unsqueeze(weight, -2), bias, (1, one(stride)), pad,
               (1, one(dilation)), groups)
    return T.squeeze(y, -2)


def conv_transpose2d(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1,  # noqa: A002
                     dilation=1):
    """The adjoint of conv2d: the input spread out with stride-1 zeros between its pixels, padded,
    and convolved with the spatially flipped, in/out-swapped kernel."""
    if groups != 1 or int_pair(dilation, "conv_transpose2d") != (1, 1):
        raise PyptoError("conv_transpose2d: groups and dilation are not supported inside a kernel")
    sh, sw = int_pair(stride, "conv_transpose2d")
    ph, pw = int_pair(padding, "conv_transpose2d")
    oph, opw = int_pair(output_padding, "conv_transpose2d")
    kh, kw = weight.shape[-2], weight.shape[-1]
    if ph > kh - 1 or pw > kw - 1:
        raise PyptoError("conv_transpose2d: padding larger than kernel_size - 1 is not supported")
    lead, H, W = tuple(input.shape[:-2]), input.shape[-2], input.shape[-1]
    x = input
    if (sh, sw) != (1, 1):
        x = T.full(lead + ((H - 1) * sh + 1, (W - 1) * sw + 1), 0.0, input.dtype)
        T.assign(T.index(x, (Ellipsis, slice(None, None, sh), slice(None, None, sw))), input)
    x = C.pad(x, (kw - 1 - pw, kw - 1 - pw + opw, kh - 1 - ph, kh - 1 - ph + oph), value=0.0)
    w = flip(T.transpose(weight, 0, 1), (-2, -1))
    return T.conv2d(x, w, bias, 1, 0, 1)


# --- normalisation -----------------------------------------------------------------------------------

def _per_channel(v, ndim):
    """A (C,) vector shaped to broadcast over (N, C, ...) of rank ndim."""
    return T.reshape(v, (v.shape[0],) + (1,) * (ndim - 2))


def batch_norm(input, running_mean, running_var, weight=None, bias=None, training=False,  # noqa: A002
               momentum=0.1, eps=1e-5):
    """Inference batch norm from the running statistics; in training mode only without running
    statistics (the batch's own; updating module buffers is not supported inside a kernel)."""
    nd = input.ndim
    if training or running_mean is None:
        if running_mean is not None:
            raise PyptoError("batch_norm in training mode would update the running statistics, which a kernel "
                             "cannot do; call module.eval()")
        dims = (0,) + tuple(range(2, nd))
        mean = T.mean(input, dims, True)
        d = T.binary(Opcode.TSUB, input, mean)
        var = T.mean(T.binary(Opcode.TMUL, d, d), dims, True)
    else:
        mean, var = _per_channel(running_mean, nd), _per_channel(running_var, nd)
        d = T.binary(Opcode.TSUB, input, mean)
    y = T.binary(Opcode.TMUL, d, T.unary(Opcode.TRSQRT, T.binary(Opcode.TADD, var, float(eps))))
    if weight is not None:
        y = T.binary(Opcode.TMUL, y, _per_channel(weight, nd))
    if bias is not None:
        y = T.binary(Opcode.TADD, y, _per_channel(bias, nd))
    return y


def group_norm(input, num_groups, weight=None, bias=None, eps=1e-5):  # noqa: A002
    n, c = input.shape[0], input.shape[1]
    if c % num_groups:
        raise PyptoError(f"group_norm: {c} channels do not split into {num_groups} groups")
    g = T.reshape(input, (n, num_groups, -1))
    mean = T.mean(g, -1, True)
    d = T.binary(Opcode.TSUB, g, mean)
    var = T.mean(T.binary(Opcode.TMUL, d, d), -1, True)
    y = T.reshape(T.binary(Opcode.TMUL, d, T.unary(Opcode.TRSQRT, T.binary(Opcode.TADD, var, float(eps)))),
                  tuple(input.shape))
    if weight is not None:
        y = T.binary(Opcode.TMUL, y, _per_channel(weight, input.ndim))
    if bias is not None:
        y = T.binary(Opcode.TADD, y, _per_channel(bias, input.ndim))
    return y


def instance_norm(input, running_mean=None, running_var=None, weight=None, bias=None,  # noqa: A002
                  use_input_stats=True, momentum=0.1, eps=1e-5):
    if not use_input_stats:
        return batch_norm(input, running_mean, running_var, weight, bias, False, momentum, eps)
    if running_mean is not None:
        raise PyptoError("instance_norm with track_running_stats=True updates buffers, which a kernel cannot do")
    return group_norm(input, input.shape[1], weight, bias, eps)


# --- pooling and resampling ---------------------------------------------------------------------

def kernel_windows(input, kernel_size, stride, padding, dilation, fill, what):  # noqa: A002
    """The kernel's strided views of the (padded) input, each of the output's size."""
    if input.ndim not in (3, 4):
        raise PyptoError(f"{what}: expects (N, C, H, W) or (C, H, W), got shape {tuple(input.shape)}")
    kh, kw = int_pair(kernel_size, what)
    sh, sw = int_pair(stride if stride not in (None, ()) else kernel_size, what)
    ph, pw = int_pair(padding, what)
    dh, dw = int_pair(dilation, what)
    x = input
    if ph or pw:
        x = C.pad(x, (pw, pw, ph, ph), value=fill)
    H, W = x.shape[-2], x.shape[-1]
    oh, ow = (H - dh * (kh - 1) - 1) // sh + 1, (W - dw * (kw - 1) - 1) // sw + 1
    if oh < 1 or ow < 1:
        raise PyptoError(f"{what}: the kernel {kh}x{kw} does not fit the input {H}x{W}")
    views = []
    for i in range(kh):
        for j in range(kw):
            r0, c0 = i * dh, j * dw
            views.append(T.index(x, (Ellipsis, slice(r0, r0 + sh * (oh - 1) + 1, sh),
                                     slice(c0, c0 + sw * (ow - 1) + 1, sw))))
    return views


def unfold(input, kernel_size, dilation=1, padding=0, stride=1):  # noqa: A002
    """F.unfold (im2col): the kernel's strided windows stacked after the channels, (N, C*kh*kw, L)
    with the channel outer, as torch orders them."""
    views = kernel_windows(input, kernel_size, stride, padding, dilation, 0.0, "unfold")
    x = C.stack(views, -3)  # (N, C, kh*kw, oh, ow)
    lead = list(x.shape[:-4])
    return T.reshape(x, lead + [x.shape[-4] * len(views), x.shape[-2] * x.shape[-1]])


def local_response_norm(input, size, alpha=1e-4, beta=0.75, k=1.0):  # noqa: A002
    """x / (k + alpha * mean of x^2 over `size` neighbouring channels)^beta, the window zero-padded
    by size // 2 before and (size - 1) // 2 after each channel (torch's)."""
    if input.ndim < 3:
        raise PyptoError(f"local_response_norm: expects an input of 3 or more dimensions, got shape "
                         f"{tuple(input.shape)}")
    n = T.static_int(size, "size")
    if n < 1:
        raise PyptoError(f"local_response_norm: size must be >= 1, got {n}")
    sq = T.binary(Opcode.TMUL, input, input)
    channels = input.shape[1]
    padded = C.pad(sq, [0, 0] * (input.ndim - 2) + [n // 2, (n - 1) // 2])
    total = None
    for i in range(n):
        part = T.index(padded, (slice(None), slice(i, i + channels)))
        total = part if total is None else T.binary(Opcode.TADD, total, part)
    scale = T.binary(Opcode.TADD, T.binary(Opcode.TMUL, total, float(alpha) / n), float(k))
    return T.binary(Opcode.TDIV, input, T.power(scale, float(beta)))


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                                 enable_gqa=False):
    q, k, v = T.traced(query), T.traced(key), T.traced(value)
    hq, hk = (q.shape[-3], k.shape[-3]) if q.ndim >= 3 and k.ndim >= 3 else (1, 1)
    if hq != hk:
        if not enable_gqa or hq % hk:
            raise PyptoError(f"scaled_dot_product_attention: {hq} query heads and {hk} key/value heads need "
                             "enable_gqa=True and a whole number of query heads per key head")
        k = C.repeat_interleave(k, hq // hk, -3)
        v = C.repeat_interleave(v, hq // hk, -3)
    s = scale if scale is not None else 1.0 / math.sqrt(q.shape[-1])
    L, S = q.shape[-2], k.shape[-2]
    if is_causal and attn_mask is not None:
        raise PyptoError("scaled_dot_product_attention: give attn_mask or is_causal, not both")
    blocks = _causal_row_blocks(L, S) if is_causal and not (dropout_p > 0) else []
    if len(blocks) > 1:
        # Each block of query rows against the keys it can see: the products of the hidden half
        # are never computed (its weights are 0; a hidden key is never read, as torch masks it)
        parts = [T.matmul(_causal_softmax(T.index(q, (Ellipsis, slice(r0, r1), slice(None))),
                                          T.index(k, (Ellipsis, slice(0, min(S, r1)), slice(None))), s, r0),
                          T.index(v, (Ellipsis, slice(0, min(S, r1)), slice(None))))
                 for r0, r1 in blocks]
        return T.concat(parts, -2)
    if is_causal:
        return T.matmul(R.dropout(_causal_softmax(q, k, s, 0), dropout_p, True), v)
    scores = T.binary(Opcode.TMUL, T.matmul(q, T.transpose(k, -2, -1)), s)
    if attn_mask is not None:
        m = T.traced(attn_mask)
        if m.pdtype is _dt.bool_:
            scores = T.where(m, scores, float("-inf"))
        else:
            scores = T.binary(Opcode.TADD, scores, m)
    if attn_mask is None:
        p = T.softmax(scores, -1)
    else:
        # torch's safe softmax: a row the mask hides entirely (a left-padded sequence's padding
        # queries) gets weights 0, not NaN; its softmax runs on zeros, so no NaN reaches a gradient
        hidden = T.compare(Opcode.TCMP_EQ, T.reduce("max", scores, -1, True), float("-inf"))
        p = T.where(hidden, 0.0, T.softmax(T.where(hidden, 0.0, scores), -1))
    # dropout on the weights whenever dropout_p > 0, as torch (callers pass 0 in eval mode); the
    # mask is drawn as F.dropout's, from torch's default generator at each call
    return T.matmul(R.dropout(p, dropout_p, True), v)


def _causal_row_blocks(L, S):
    """Blocks [r0, r1) of the query rows of a causal attention with a static shape, block b reading
    keys [0, min(S, r1)) only; the rows that see all S keys form the last block. [] for one block."""
    if not isinstance(L, int) or not isinstance(S, int):
        return []
    blocks = MA.row_blocks(L, S)
    while len(blocks) > 1 and blocks[-2][1] >= S:  # rows that see every key: one block
        blocks[-2:] = [(blocks[-2][0], L)]
    return blocks


def _causal_softmax(q, k, s, r0):
    """softmax(q k^T s) over the keys, row i (query r0 + i) seeing keys j <= r0 + i (torch's
    is_causal: the lower triangle, aligned at the top left)."""
    scores = T.binary(Opcode.TMUL, T.matmul(q, T.transpose(k, -2, -1)), s)
    L, S = q.shape[-2], k.shape[-2]
    if isinstance(L, int) and isinstance(S, int) and L * S <= (1 << 24):
        # The mask held as a constant (at most 16 Mi booleans): the form the fusion passes join
        # with the products and the softmax into one nest (computed from aranges it is a nest of
        # its own between them: 512 queries 1.6x slower)
        visible = np.arange(S)[None, :] <= np.arange(r0, r0 + L)[:, None]
        return T.softmax(T.where(visible, scores, float("-inf")), -1)
    rows = T.unsqueeze(T.arange(r0, r0 + q.shape[-2]), 1)
    cols = T.unsqueeze(T.arange(0, k.shape[-2]), 0)
    return T.softmax(T.where(T.compare(Opcode.TCMP_LE, cols, rows), scores, float("-inf")), -1)


def interpolate(input, size=None, scale_factor=None, mode="nearest", align_corners=None,  # noqa: A002
                recompute_scale_factor=None, antialias=False):
    """Nearest-neighbour resampling by whole factors (each pixel repeated); other factors and the
    linear modes through torch_more.resample."""
    if mode not in ("nearest", "nearest-exact", "linear", "bilinear", "trilinear"):
        raise PyptoError(f"interpolate: mode={mode!r} is not supported inside a kernel "
                         "('nearest', 'nearest-exact', 'linear', 'bilinear', 'trilinear')")
    if antialias:
        raise PyptoError("interpolate: antialias=True is not supported inside a kernel")
    spatial = input.shape[2:]
    if size is not None:
        sizes = tuple(size) if isinstance(size, (tuple, list)) else (size,) * len(spatial)
        given = [None] * len(spatial)
    else:
        sf = scale_factor if isinstance(scale_factor, (tuple, list)) else (scale_factor,) * len(spatial)
        sizes = tuple(int(math.floor(n * float(f))) for n, f in zip(spatial, sf))
        given = [None if recompute_scale_factor else float(f) for f in sf]
    whole = all(s % n == 0 for s, n in zip(sizes, spatial)) and all(
        g is None or g == s // n for g, s, n in zip(given, sizes, spatial))
    if mode != "nearest" or not whole:
        return MORE.resample(input, sizes, given, mode, align_corners)
    factors = [s // n for s, n in zip(sizes, spatial)]
    y = input
    for k, f in enumerate(factors):
        if f != 1:
            y = C.repeat_interleave(y, f, 2 + k)
    return y


# --- attention -----------------------------------------------------------------------------------

def multi_head_attention_forward(query, key, value, embed_dim_to_check, num_heads, in_proj_weight,
                                 in_proj_bias, bias_k, bias_v, add_zero_attn, dropout_p, out_proj_weight,
                                 out_proj_bias, training=True, key_padding_mask=None, need_weights=True,
                                 attn_mask=None, use_separate_proj_weight=False, q_proj_weight=None,
                                 k_proj_weight=None, v_proj_weight=None, static_k=None, static_v=None,
                                 average_attn_weights=True, is_causal=False):
    """nn.MultiheadAttention's computation over (L, N, E) inputs (the module transposes
    batch-first inputs itself): projections, per-head scaled dot products with the masks,
    softmax, the output projection, and the head-averaged weights when asked for."""
    if bias_k is not None or bias_v is not None or add_zero_attn or static_k is not None or static_v is not None:
        raise PyptoError("multi_head_attention: bias_k/bias_v, add_zero_attn and static keys are not supported")
    if training and dropout_p > 0:
        raise PyptoError("multi_head_attention: dropout in training mode is not supported; call module.eval()")
    unbatched = query.ndim == 2
    if unbatched:
        query, key, value = (T.unsqueeze(t, 1) for t in (query, key, value))
        if key_padding_mask is not None:
            key_padding_mask = T.unsqueeze(key_padding_mask, 0)
    L, N, E = query.shape
    S = key.shape[0]
    H = num_heads
    hd = E // H
    if use_separate_proj_weight:
        wq, wk, wv = q_proj_weight, k_proj_weight, v_proj_weight
    else:
        wq, wk, wv = (T.index(in_proj_weight, slice(i * E, (i + 1) * E)) for i in range(3))
    bq = bk = bv = None
    if in_proj_bias is not None:
        bq, bk, bv = (T.index(in_proj_bias, slice(i * E, (i + 1) * E)) for i in range(3))

    def proj(x, w, b, n):  # (n, N, E) -> (N, H, n, hd)
        y = T.matmul(x, T.transpose(w, 0, 1))
        if b is not None:
            y = T.binary(Opcode.TADD, y, b)
        return T.permute(T.reshape(y, (n, N, H, hd)), (1, 2, 0, 3))
    q, k, v = proj(query, wq, bq, L), proj(key, wk, bk, S), proj(value, wv, bv, S)
    scores = T.binary(Opcode.TMUL, T.matmul(q, T.transpose(k, -2, -1)), hd ** -0.5)
    masks = []
    if attn_mask is not None:
        m = attn_mask if attn_mask.ndim == 2 else T.reshape(attn_mask, (N, H, L, S))
        masks.append(m)
    elif is_causal:
        masks.append(C.triu(T.full((L, S), float("-inf"), scores.dtype), 1))
    if key_padding_mask is not None:
        masks.append(T.reshape(key_padding_mask, (N, 1, 1, S)))
    for m in masks:
        if not m.dtype.is_floating_point:
            scores = T.where(m, float("-inf"), scores)
        else:
            scores = T.binary(Opcode.TADD, scores, m)
    p = T.softmax(scores, -1)
    ctx = T.reshape(T.permute(T.matmul(p, v), (2, 0, 1, 3)), (L, N, E))
    out = T.matmul(ctx, T.transpose(out_proj_weight, 0, 1))
    if out_proj_bias is not None:
        out = T.binary(Opcode.TADD, out, out_proj_bias)
    weights = None
    if need_weights:
        weights = T.mean(p, 1, False) if average_attn_weights else p
        if unbatched:
            weights = T.squeeze(weights, 0)
    if unbatched:
        out = T.squeeze(out, 1)
    return out, weights


# --- recurrent cells and layers --------------------------------------------------------------------

def _affine(x, w, b):
    y = T.matmul(x, T.transpose(w, 0, 1))
    return y if b is None else T.binary(Opcode.TADD, y, b)


def _sig(x):
    return T.unary(Opcode.TSIGMOID, x)


def _tanh(x):
    return T.unary(Opcode.TTANH, x)


def lstm_cell(input, hx, w_ih, w_hh, b_ih=None, b_hh=None):  # noqa: A002
    h, c = hx
    gates = T.binary(Opcode.TADD, _affine(input, w_ih, b_ih), _affine(h, w_hh, b_hh))
    i, f, g, o = C.chunk(gates, 4, -1)
    c2 = T.binary(Opcode.TADD, T.binary(Opcode.TMUL, _sig(f), c), T.binary(Opcode.TMUL, _sig(i), _tanh(g)))
    return T.binary(Opcode.TMUL, _sig(o), _tanh(c2)), c2


def gru_cell(input, hx, w_ih, w_hh, b_ih=None, b_hh=None):  # noqa: A002
    ir, iz, inn = C.chunk(_affine(input, w_ih, b_ih), 3, -1)
    hr, hz, hn = C.chunk(_affine(hx, w_hh, b_hh), 3, -1)
    r = _sig(T.binary(Opcode.TADD, ir, hr))
    z = _sig(T.binary(Opcode.TADD, iz, hz))
    n = _tanh(T.binary(Opcode.TADD, inn, T.binary(Opcode.TMUL, r, hn)))
    return T.binary(Opcode.TADD, n, T.binary(Opcode.TMUL, z, T.binary(Opcode.TSUB, hx, n)))  # (1-z) n + z h


def rnn_tanh_cell(input, hx, w_ih, w_hh, b_ih=None, b_hh=None):  # noqa: A002
    return _tanh(T.binary(Opcode.TADD, _affine(input, w_ih, b_ih), _affine(hx, w_hh, b_hh)))


def rnn_relu_cell(input, hx, w_ih, w_hh, b_ih=None, b_hh=None):  # noqa: A002
    return T.unary(Opcode.TRELU, T.binary(Opcode.TADD, _affine(input, w_ih, b_ih), _affine(hx, w_hh, b_hh)))


def _recurrent(kind, input, hx, params, has_biases, num_layers, dropout, train, bidirectional,  # noqa: A002
               batch_first):
    """torch.lstm / torch.gru / torch.rnn_tanh over a whole sequence: each layer and direction a
    loop over the time steps (unrolled at trace time), as nn.LSTM/GRU/RNN compute it."""
    if train and dropout > 0 and num_layers > 1:
        raise PyptoError(f"{kind}: dropout between layers in training mode is not supported; call module.eval()")
    dirs = 2 if bidirectional else 1
    per = 4 if has_biases else 2
    if len(params) != num_layers * dirs * per:
        raise PyptoError(f"{kind}: projections (proj_size) are not supported inside a kernel")
    cell = {"lstm": lstm_cell, "gru": gru_cell, "rnn_tanh": rnn_tanh_cell, "rnn_relu": rnn_relu_cell}[kind]
    x = T.transpose(input, 0, 1) if batch_first else input  # (T, N, F) or (T, F) unbatched
    steps = x.shape[0]
    h0 = hx[0] if kind == "lstm" else hx
    c0 = hx[1] if kind == "lstm" else None
    h_n, c_n = [], []
    for layer in range(num_layers):
        outs_dir = []
        for d in range(dirs):
            k = (layer * dirs + d) * per
            w_ih, w_hh = params[k], params[k + 1]
            b_ih, b_hh = (params[k + 2], params[k + 3]) if has_biases else (None, None)
            h = T.index(h0, layer * dirs + d)
            c = T.index(c0, layer * dirs + d) if c0 is not None else None
            outs = [None] * steps
            for t in (range(steps - 1, -1, -1) if d else range(steps)):
                xt = T.index(x, t)
                if kind == "lstm":
                    h, c = cell(xt, (h, c), w_ih, w_hh, b_ih, b_hh)
                else:
                    h = cell(xt, h, w_ih, w_hh, b_ih, b_hh)
                outs[t] = h
            outs_dir.append(C.stack(outs, 0))
            h_n.append(h)
            c_n.append(c)
        x = outs_dir[0] if dirs == 1 else T.concat(outs_dir, -1)
    out = T.transpose(x, 0, 1) if batch_first else x
    hn = C.stack(h_n, 0)
    return (out, hn, C.stack(c_n, 0)) if kind == "lstm" else (out, hn)


def _recurrent_op(kind):
    def f(input, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first):  # noqa: A002
        return _recurrent(kind, input, hx, params, has_biases, num_layers, dropout, train, bidirectional,
                          batch_first)
    return f


# --- pointwise activations ---------------------------------------------------------------------------

def _act(fn):
    def f(input, *args, inplace=False, **kwargs):  # noqa: A002
        return fn(input, *args, **kwargs)
    return f


def elu(x, alpha=1.0):
    neg = T.binary(Opcode.TMUL, T.binary(Opcode.TSUB, T.unary(Opcode.TEXP, T.clamp(x, None, 0.0)), 1.0), alpha)
    return T.where(T.compare(Opcode.TCMP_GT, x, 0.0), x, neg)


def selu(x):
    return T.binary(Opcode.TMUL, elu(x, 1.6732632423543772), 1.0507009873554805)


def celu(x, alpha=1.0):
    neg = T.binary(Opcode.TMUL, T.binary(Opcode.TSUB, T.unary(
        Opcode.TEXP, T.binary(Opcode.TDIV, T.clamp(x, None, 0.0), alpha)), 1.0), alpha)
    return T.where(T.compare(Opcode.TCMP_GT, x, 0.0), x, neg)


def hardtanh(x, min_val=-1.0, max_val=1.0):
    return T.hardtanh(x, min_val, max_val)


def relu6(x):
    return T.hardtanh(x, 0.0, 6.0)


def logsigmoid(x):
    return T.unary(Opcode.TNEG, M.softplus(T.unary(Opcode.TNEG, x)))


def softsign(x):
    return T.binary(Opcode.TDIV, x, T.binary(Opcode.TADD, T.unary(Opcode.TABS, x), 1.0))


def tanhshrink(x):
    return T.binary(Opcode.TSUB, x, T.unary(Opcode.TTANH, x))


def threshold(x, threshold, value):
    return T.where(T.compare(Opcode.TCMP_GT, x, threshold), x, value)


def glu(x, dim=-1):
    a, b = C.chunk(x, 2, dim)
    return T.binary(Opcode.TMUL, a, T.unary(Opcode.TSIGMOID, b))


ENTRIES = [
    (conv2d, ["conv2d"]), (conv1d, ["conv1d"]), (batch_norm, ["batch_norm"]), (group_norm, ["group_norm"]),
    (instance_norm, ["instance_norm"]), (interpolate, ["interpolate", "upsample"]),
    (conv_transpose2d, ["conv_transpose2d"]),
    (multi_head_attention_forward, ["multi_head_attention_forward"]),
    (lstm_cell, ["lstm_cell"]), (gru_cell, ["gru_cell"]), (rnn_tanh_cell, ["rnn_tanh_cell"]),
    (rnn_relu_cell, ["rnn_relu_cell"]), (_recurrent_op("lstm"), ["lstm"]), (_recurrent_op("gru"), ["gru"]),
    (_recurrent_op("rnn_tanh"), ["rnn_tanh"]), (_recurrent_op("rnn_relu"), ["rnn_relu"]),
    (_act(M.softplus), ["softplus"]), (_act(M.mish), ["mish"]), (_act(M.hardswish), ["hardswish"]),
    (_act(M.hardsigmoid), ["hardsigmoid"]), (_act(M.leaky_relu), ["leaky_relu"]), (M.prelu, ["prelu"]),
    (_act(elu), ["elu"]), (_act(selu), ["selu"]), (_act(celu), ["celu"]), (_act(hardtanh), ["hardtanh"]),
    (_act(relu6), ["relu6"]), (logsigmoid, ["logsigmoid"]), (softsign, ["softsign"]),
    (tanhshrink, ["tanhshrink"]), (_act(threshold), ["threshold"]), (glu, ["glu"]),
    (unfold, ["unfold"]), (local_response_norm, ["local_response_norm"]),
]

# Tensor attributes torch's own modules ask about (nn.MultiheadAttention's fast-path checks).
ATTRIBUTES = {"is_nested": False, "is_mkldnn": False}


def install_helpers(F):
    """torch's own modules call private helpers that insist on torch.Tensor (nn.MultiheadAttention
    asks F._none_or_dtype for a mask's dtype): the same helper, also answering for traced tensors."""
    orig = F._none_or_dtype
    if getattr(orig, "_pypto", False):
        return

    def _none_or_dtype(input):  # noqa: A002
        return input.dtype if isinstance(input, TensorValue) else orig(input)
    _none_or_dtype._pypto = True
    F._none_or_dtype = _none_or_dtype
