"""torch.nn.functional's pooling and pixel rearrangements inside kernels (torch_functions.py reads
ENTRIES): max / average / power-average pooling in 1-d and 2-d with padding, dilation, ceil_mode,
count_include_pad and return_indices; adaptive average and maximum pooling; pixel_shuffle,
pixel_unshuffle and channel_shuffle. A pooling is an elementwise max / sum over the kernel's
strided views of the padded input (torch_nn.kernel_windows); where windows differ in size (ceil_mode's
last window, count_include_pad=False), the divisor is a table built while tracing."""
from __future__ import annotations

import sys

import numpy as np

from .. import dtypes as _dt
from ..errors import PyptoError
from .torch_nn import int_pair, kernel_windows
from .values import Opcode
from . import composite_ops as C
from . import index_ops as X
from . import tensor_ops as T


def _axis(n, k, s, p, d, ceil, what):
    """(outputs, extra padding after the end) of one axis, by torch's rule: with ceil_mode the last
    window may run past the padding, but must start inside the input or the leading padding."""
    span = d * (k - 1) + 1
    if p * 2 > span:
        raise PyptoError(f"{what}: padding {p} is more than half the kernel's extent {span}")
    if ceil:
        out = -(-(n + 2 * p - span) // s) + 1
        if (out - 1) * s >= n + p:
            out -= 1
    else:
        out = (n + 2 * p - span) // s + 1
    if out < 1:
        raise PyptoError(f"{what}: the kernel (extent {span}) does not fit the input of size {n} "
                         f"with padding {p}")
    return out, max(0, (out - 1) * s + span - (n + 2 * p))


def _pool_views(input, kernel_size, stride, padding, dilation, ceil_mode, fill, what):  # noqa: A002
    if input.ndim not in (3, 4):
        raise PyptoError(f"{what}: expects (N, C, H, W) or (C, H, W), got shape {tuple(input.shape)}")
    k = int_pair(kernel_size, what)
    s = int_pair(stride if stride not in (None, ()) else kernel_size, what)
    p, d = int_pair(padding, what), int_pair(dilation, what)
    H, W = input.shape[-2], input.shape[-1]
    (oh, eh), (ow, ew) = (_axis(n, *a, ceil_mode, what) for n, a in zip((H, W), zip(k, s, p, d)))
    x = C.pad(input, (0, ew, 0, eh), value=fill) if eh or ew else input
    return kernel_windows(x, k, s, p, d, fill, what), (k, s, p, d, (oh, ow), (H, W))


def max_pool2d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,  # noqa: A002
               return_indices=False):
    views, (k, s, p, d, (oh, ow), (H, W)) = _pool_views(input, kernel_size, stride, padding, dilation,
                                                        ceil_mode, float("-inf"), "max_pool2d")
    if not return_indices:
        out = views[0]
        for v in views[1:]:
            out = T.binary(Opcode.TMAX, out, v)
        return out
    # The window position of the first maximum (NaN counts as the largest), as a flat index into
    # the input's H x W plane: the window's top-left corner plus the offset of its tap.
    stacked = C.stack(views, 0)
    out = T.reduce("max", stacked, 0)
    tap = C.argmax(stacked, 0)
    corner = (np.arange(oh)[:, None] * s[0] - p[0]) * W + (np.arange(ow)[None, :] * s[1] - p[1])
    torch = sys.modules["torch"]
    base = torch.tensor(corner, dtype=torch.int64)
    row = T.binary(Opcode.TMUL, T.floordiv(tap, k[1]), d[0] * W)
    col = T.binary(Opcode.TMUL, T.mod(tap, k[1]), d[1])
    return out, T.binary(Opcode.TADD, T.binary(Opcode.TADD, row, col), base)


def _divisors(n, k, s, p, out, include_pad):
    """Per output position of one axis: the window's size counting padding (not ceil_mode's
    overhang), or the input elements it covers."""
    start = np.arange(out) * s - p
    end = np.minimum(start + k, n + p)
    if include_pad:
        return end - start
    return np.minimum(end, n) - np.maximum(start, 0)


def avg_pool2d(input, kernel_size, stride=None, padding=0, ceil_mode=False,  # noqa: A002
               count_include_pad=True, divisor_override=None):
    views, (k, s, p, _, (oh, ow), (H, W)) = _pool_views(input, kernel_size, stride, padding, 1, ceil_mode,
                                                        0.0, "avg_pool2d")
    total = views[0]
    for v in views[1:]:
        total = T.binary(Opcode.TADD, total, v)
    if divisor_override:
        return T.binary(Opcode.TDIV, total, float(divisor_override))
    dh = _divisors(H, k[0], s[0], p[0], oh, count_include_pad)
    dw = _divisors(W, k[1], s[1], p[1], ow, count_include_pad)
    table = dh[:, None] * dw[None, :]
    if (table == table.flat[0]).all():
        return T.binary(Opcode.TDIV, total, float(table.flat[0]))
    torch = sys.modules["torch"]
    return T.binary(Opcode.TDIV, total, torch.tensor(table, dtype=_dt.to_dtype(total.dtype).torch))


def _one_d(fn, input, kernel_size, stride, padding, *rest):  # noqa: A002
    """A 1-d pooling as the 2-d one over a (1, L) plane."""
    def first(v):
        return v[0] if isinstance(v, (tuple, list)) else v
    k, s, p = first(kernel_size), first(stride) if stride not in (None, ()) else None, first(padding)
    y = fn(T.unsqueeze(input, -2), (1, k), (1, s or k), (0, p), *rest)
    if isinstance(y, tuple):
        return tuple(T.squeeze(t, -2) for t in y)
    return T.squeeze(y, -2)


def max_pool1d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,  # noqa: A002
               return_indices=False):
    d = dilation[0] if isinstance(dilation, (tuple, list)) else dilation
    return _one_d(max_pool2d, input, kernel_size, stride, padding, (1, d), ceil_mode, return_indices)


def avg_pool1d(input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True):  # noqa: A002
    return _one_d(avg_pool2d, input, kernel_size, stride, padding, ceil_mode, count_include_pad)


def lp_pool2d(input, norm_type, kernel_size, stride=None, ceil_mode=False):  # noqa: A002
    """(sum of x^p over each window)^(1/p), as torch computes it: an average times the window size."""
    kh, kw = int_pair(kernel_size, "lp_pool2d")
    out = avg_pool2d(T.power(input, float(norm_type)), (kh, kw), stride, 0, ceil_mode)
    out = T.binary(Opcode.TMUL, T.binary(Opcode.TMUL, T.unary(Opcode.TSIGN, out), T.unary(Opcode.TRELU, T.unary(
        Opcode.TABS, out))), float(kh * kw))
    return T.power(out, 1.0 / float(norm_type))


def lp_pool1d(input, norm_type, kernel_size, stride=None, ceil_mode=False):  # noqa: A002
    k = kernel_size[0] if isinstance(kernel_size, (tuple, list)) else kernel_size
    s = stride[0] if isinstance(stride, (tuple, list)) and stride else stride
    y = lp_pool2d(T.unsqueeze(input, -2), norm_type, (1, k), (1, s or k), ceil_mode)
    return T.squeeze(y, -2)


def max_unpool2d(input, indices, kernel_size, stride=None, padding=0, output_size=None):  # noqa: A002
    """The inverse of max_pool2d(return_indices=True): each value written at its flat index into a
    zero plane of the output size ((H - 1) stride - 2 padding + kernel by default)."""
    if input.ndim not in (3, 4) or tuple(indices.shape) != tuple(input.shape):
        raise PyptoError(f"max_unpool2d: expects (N, C, H, W) or (C, H, W) values and indices of one shape, got "
                         f"{tuple(input.shape)} and {tuple(indices.shape)}")
    k = int_pair(kernel_size, "max_unpool2d")
    s = int_pair(stride if stride not in (None, ()) else kernel_size, "max_unpool2d")
    p = int_pair(padding, "max_unpool2d")
    if output_size is not None:
        oh, ow = (int(v) for v in tuple(output_size)[-2:])
    else:
        oh, ow = ((n - 1) * st - 2 * pd + kk for n, st, pd, kk in zip(input.shape[-2:], s, p, k))
    lead = tuple(input.shape[:-2])
    flat = T.reshape(input, lead + (-1,))
    plane = T.full(lead + (oh * ow,), 0.0, input.pdtype)
    out = X.scatter(plane, -1, T.reshape(indices, lead + (-1,)), flat, None, None)
    return T.reshape(out, lead + (oh, ow))


def max_unpool1d(input, indices, kernel_size, stride=None, padding=0, output_size=None):  # noqa: A002
    def first(v):
        return v[0] if isinstance(v, (tuple, list)) else v
    k = first(kernel_size)
    s = first(stride) if stride not in (None, ()) else k
    size = None if output_size is None else (1, tuple(output_size)[-1])
    y = max_unpool2d(T.unsqueeze(input, -2), T.unsqueeze(indices, -2), (1, k), (1, s), (0, first(padding)), size)
    return T.squeeze(y, -2)


# --- adaptive pooling -----------------------------------------------------------------------------

def _bounds(n, n_out):
    """torch's adaptive windows: output i covers inputs floor(i n / n_out) up to ceil((i + 1) n / n_out)."""
    if n_out < 1:
        raise PyptoError(f"adaptive pooling: output size must be >= 1, got {n_out}")
    return [((i * n) // n_out, -((-(i + 1) * n) // n_out)) for i in range(n_out)]


def _adaptive_axis(x, axis, n_out):
    """Adaptive average over one axis, as a product with that (n, n_out) matrix (built while tracing)."""
    n = x.shape[axis]
    if n_out == n:
        return x
    m = np.zeros((n, n_out))
    for i, (a, b) in enumerate(_bounds(n, n_out)):
        m[a:b, i] = 1.0 / (b - a)
    torch = sys.modules["torch"]
    w = torch.tensor(m, dtype=_dt.to_dtype(x.dtype).torch)
    moved = T.transpose(x, axis, -1)
    return T.transpose(T.matmul(moved, w), axis, -1)


def _size(v, n):
    return n if v is None else T.static_int(v, "output_size")


def adaptive_avg_pool2d(input, output_size):  # noqa: A002
    oh, ow = output_size if isinstance(output_size, (tuple, list)) else (output_size, output_size)
    H, W = input.shape[-2], input.shape[-1]
    oh, ow = _size(oh, H), _size(ow, W)
    if (oh, ow) == (1, 1):
        return T.mean(input, (-2, -1), True)
    if H % oh or W % ow:  # windows of unequal sizes: one averaging matrix per axis
        return _adaptive_axis(_adaptive_axis(input, -2, oh), -1, ow)
    return avg_pool2d(input, (H // oh, W // ow))


def adaptive_avg_pool1d(input, output_size):  # noqa: A002
    o = output_size[0] if isinstance(output_size, (tuple, list)) else output_size
    L = input.shape[-1]
    o = _size(o, L)
    if o == 1:
        return T.mean(input, -1, True)
    return _adaptive_axis(input, -1, o)


def _adaptive_max_axis(x, axis, n_out):
    """The maximum over each adaptive window of one axis (windows may overlap), joined along it."""
    n = x.shape[axis]
    if n_out == n:
        return x
    parts = []
    for a, b in _bounds(n, n_out):
        idx = [slice(None)] * x.ndim
        idx[axis] = slice(a, b)
        parts.append(T.reduce("max", T.index(x, tuple(idx)), axis, True))
    return T.concat(parts, axis)


def adaptive_max_pool2d(input, output_size, return_indices=False):  # noqa: A002
    oh, ow = output_size if isinstance(output_size, (tuple, list)) else (output_size, output_size)
    H, W = input.shape[-2], input.shape[-1]
    oh, ow = _size(oh, H), _size(ow, W)
    if H % oh == 0 and W % ow == 0:  # equal windows: a plain max pooling
        return max_pool2d(input, (H // oh, W // ow), return_indices=return_indices)
    if return_indices:
        raise PyptoError(f"adaptive_max_pool2d: return_indices needs the output size to divide the input's "
                         f"({H}x{W} into {oh}x{ow})")
    # max is separable: rows' windows, then columns'.
    return _adaptive_max_axis(_adaptive_max_axis(input, input.ndim - 2, oh), input.ndim - 1, ow)


def adaptive_max_pool1d(input, output_size, return_indices=False):  # noqa: A002
    o = output_size[0] if isinstance(output_size, (tuple, list)) else output_size
    y = adaptive_max_pool2d(T.unsqueeze(input, -2), (1, o), return_indices)
    if isinstance(y, tuple):
        return tuple(T.squeeze(t, -2) for t in y)
    return T.squeeze(y, -2)


# --- pixel and channel rearrangements -------------------------------------------------------------

def pixel_shuffle(input, upscale_factor):  # noqa: A002
    *lead, c, h, w = input.shape
    r = int(upscale_factor)
    if c % (r * r):
        raise PyptoError(f"pixel_shuffle: {c} channels are not a multiple of {r}^2")
    y = T.reshape(input, (-1, c // (r * r), r, r, h, w))
    y = T.permute(y, (0, 1, 4, 2, 5, 3))
    return T.reshape(y, (*lead, c // (r * r), h * r, w * r))


def pixel_unshuffle(input, downscale_factor):  # noqa: A002
    *lead, c, h, w = input.shape
    r = int(downscale_factor)
    if h % r or w % r:
        raise PyptoError(f"pixel_unshuffle: the plane {h}x{w} is not a multiple of {r}")
    y = T.reshape(input, (-1, c, h // r, r, w // r, r))
    y = T.permute(y, (0, 1, 3, 5, 2, 4))
    return T.reshape(y, (*lead, c * r * r, h // r, w // r))


def channel_shuffle(input, groups):  # noqa: A002
    """(N, g, C/g, ...) transposed to (N, C/g, g, ...): ShuffleNet's channel mix."""
    n, c, *rest = input.shape
    g = int(groups)
    if g < 1 or c % g:
        raise PyptoError(f"channel_shuffle: {c} channels are not divisible into {g} groups")
    y = T.reshape(input, (n, g, c // g, *rest))
    return T.reshape(T.transpose(y, 1, 2), (n, c, *rest))


ENTRIES = [
    (max_pool2d, ["max_pool2d", "max_pool2d_with_indices"]), (avg_pool2d, ["avg_pool2d"]),
    (max_pool1d, ["max_pool1d", "max_pool1d_with_indices"]), (avg_pool1d, ["avg_pool1d"]),
    (lp_pool2d, ["lp_pool2d"]), (lp_pool1d, ["lp_pool1d"]),
    (adaptive_avg_pool2d, ["adaptive_avg_pool2d"]), (adaptive_avg_pool1d, ["adaptive_avg_pool1d"]),
    (adaptive_max_pool2d, ["adaptive_max_pool2d", "adaptive_max_pool2d_with_indices"]),
    (adaptive_max_pool1d, ["adaptive_max_pool1d", "adaptive_max_pool1d_with_indices"]),
    (max_unpool2d, ["max_unpool2d"]), (max_unpool1d, ["max_unpool1d"]), (pixel_shuffle, ["pixel_shuffle"]), (pixel_unshuffle, ["pixel_unshuffle"]),
    (channel_shuffle, ["channel_shuffle", "native_channel_shuffle"]),
]
