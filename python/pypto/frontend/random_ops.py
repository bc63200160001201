"""Random numbers inside kernels, counter-based as Triton's tl.rand: the value at an offset is a
pure function of (seed, offset), so a tiled, parallel or recomputed kernel draws the same numbers
in any order, the interpreter and the CPU agree bit for bit, and a backward pass regenerates a
dropout mask from its seed instead of storing it.

The generator is SplitMix64's output function (Steele, Lea and Flood, "Fast splittable
pseudorandom number generators", 2014) applied to the counter: bits(seed, k) =
mix(mix(seed ^ K) + (k + 1) * golden), all in wrapping int64 arithmetic, where mix is the 64-bit
finaliser (xor-shift 30, multiply, xor-shift 27, multiply, xor-shift 31). It is built from PTO
integer instructions only (TMUL wraps, TSHR is arithmetic, so a logical shift is TSHR then TBAND),
so no backend needs a new instruction. uniform = the top 24 bits / 2^24, in [0, 1); normal =
Box-Muller on the uniforms at offsets 2k and 2k + 1.

A kernel that asks for random numbers without a seed (torch.rand_like, F.dropout in training
mode, pypto.rand_like(x)) gets a fresh seed at every call: an implicit int64 input drawn from
torch's default generator (torch callers; torch.manual_seed makes runs repeat) or NumPy's global
one. Autograd saves that input with the others, so the backward sees the forward's mask."""
from __future__ import annotations

import math

from .. import dtypes as _dt
from ..errors import PyptoError
from . import tensor_ops as T
from .values import Opcode, TensorValue

_GOLDEN = 0x9E3779B97F4A7C15 - (1 << 64)  # the odd constants of SplitMix64, as signed int64
_M1 = 0xBF58476D1CE4E5B9 - (1 << 64)
_M2 = 0x94D049BB133111EB - (1 << 64)
_SEED_SALT = 0x2545F4914F6CDD1D


def _srl(z, k):
    """Logical shift right of an int64 tensor: the arithmetic shift, its sign fill masked off."""
    return T.bitwise(Opcode.TBAND, T.bitwise(Opcode.TSHR, z, k), (1 << (64 - k)) - 1)


def _mix(z):
    z = T.binary(Opcode.TMUL, T.bitwise(Opcode.TBXOR, z, _srl(z, 30)), _M1)
    z = T.binary(Opcode.TMUL, T.bitwise(Opcode.TBXOR, z, _srl(z, 27)), _M2)
    return T.bitwise(Opcode.TBXOR, z, _srl(z, 31))


def _offsets(offsets):
    if not isinstance(offsets, TensorValue):
        raise PyptoError("rand: offsets must be an integer tensor (e.g. pypto.arange(n) + block * n)")
    d = offsets.pdtype
    if d.is_floating_point or d is _dt.bool_:
        raise PyptoError(f"rand: offsets must be an integer tensor, got {d.name}")
    return offsets if d is _dt.int64 else T.cast(offsets, _dt.int64)


def _seed_like(off, seed):
    """The seed as an int64 tensor broadcast against the offsets (a Python int, a run-time int
    scalar or an integer tensor, e.g. a (1,) one)."""
    if isinstance(seed, bool) or isinstance(seed, float):
        raise PyptoError(f"rand: the seed must be an integer, got {seed!r}")
    if isinstance(seed, TensorValue):
        if seed.pdtype.is_floating_point:
            raise PyptoError(f"rand: the seed must be an integer tensor, got {seed.pdtype.name}")
        seed = seed if seed.pdtype is _dt.int64 else T.cast(seed, _dt.int64)
    return T.binary(Opcode.TADD, T.binary(Opcode.TMUL, off, 0), seed)


def random_bits(seed, offsets):
    """64 random bits (int64) per offset."""
    off = _offsets(offsets)
    key = _mix(T.bitwise(Opcode.TBXOR, _seed_like(off, seed), _SEED_SALT))
    counter = T.binary(Opcode.TMUL, T.binary(Opcode.TADD, off, 1), _GOLDEN)
    return _mix(T.binary(Opcode.TADD, key, counter))


def rand(seed, offsets):
    """Uniform float32 in [0, 1) at each offset: the top 24 random bits over 2^24."""
    top = T.cast(_srl(random_bits(seed, offsets), 40), _dt.float32)
    return T.binary(Opcode.TMUL, top, 2.0 ** -24)


def randn(seed, offsets):
    """Standard normal float32 at each offset (Box-Muller on the uniforms at 2k and 2k + 1)."""
    off = _offsets(offsets)
    u1 = rand(seed, T.binary(Opcode.TMUL, off, 2))
    u2 = rand(seed, T.binary(Opcode.TADD, T.binary(Opcode.TMUL, off, 2), 1))
    r = T.unary(Opcode.TSQRT, T.binary(Opcode.TMUL, T.unary(Opcode.TLOG1P, T.unary(Opcode.TNEG, u1)), -2.0))
    return T.binary(Opcode.TMUL, r, T.unary(Opcode.TCOS, T.binary(Opcode.TMUL, u2, 2.0 * math.pi)))


def element_offsets(x):
    """The row-major linear index of every element of x (int64, x's shape)."""
    shape = tuple(x.shape)
    n = math.prod(shape)
    if not all(isinstance(s, int) for s in shape):
        raise PyptoError("random numbers shaped like a tensor with a dynamic dim are not supported; pass "
                         "offsets to pypto.rand instead")
    if n == 0:
        raise PyptoError("random numbers for an empty tensor")
    flat = T.arange(0, n, 1, _dt.int64)
    return T.reshape(flat, shape) if len(shape) != 1 else flat


def _fresh_seed(x, seed):
    if seed is not None:
        return seed
    seed, use = T.find_tracer(x).fresh_seed()
    salt = (use * _GOLDEN) & ((1 << 64) - 1)
    return T.binary(Opcode.TADD, seed, salt - (1 << 64) if salt >= 1 << 63 else salt)


def _like_dtype(u, x, dtype):
    d = dtype if dtype is not None else (x.pdtype if x.pdtype.is_floating_point else _dt.float32)
    d = _dt.to_dtype(d)
    return u if d is _dt.float32 else T.cast(u, d)


def rand_like(x, seed=None, dtype=None):
    """Uniform [0, 1) numbers shaped like x (x's float dtype, else float32)."""
    return _like_dtype(rand(_fresh_seed(x, seed), element_offsets(x)), x, dtype)


def randn_like(x, seed=None, dtype=None):
    return _like_dtype(randn(_fresh_seed(x, seed), element_offsets(x)), x, dtype)


def dropout(x, p=0.5, training=True, seed=None):
    """Zero each element with probability p and scale the rest by 1 / (1 - p), as torch's
    dropout; identity when not training or p == 0."""
    return feature_dropout(x, p, training, "dropout", None, False, seed)


# SELU's negative saturation, -scale * alpha: what alpha dropout sets a dropped element to (before
# the affine correction that keeps the mean and variance).
_SELU_SATURATION = 1.7580993408473766


def _keep_mask(x, p, seed, lead):
    """True where an element is kept: one draw per element (lead None), or one per index of x's first
    `lead` dims (the channel dropouts: whole feature maps kept or dropped)."""
    sample = x if lead is None else T.index(x, (slice(None),) * lead + (slice(0, 1),) * (x.ndim - lead))
    return T.compare(Opcode.TCMP_GE, rand(_fresh_seed(x, seed), element_offsets(sample)), p)


def feature_dropout(x, p, training, what, lead=None, alpha=False, seed=None):
    """dropout1d/2d/3d (one draw per index of x's first `lead` dims: whole feature maps kept or
    dropped), alpha_dropout (lead None: per element) and feature_alpha_dropout. Alpha forms set
    dropped elements to SELU's saturation and apply torch's affine correction a x + b (mean and
    variance kept); identity when not training or p == 0; zeros at p == 1. A dropped element is
    x * 0 (+ b), as torch's multiply by the mask: NaN and inf stay NaN there."""
    p = float(p)
    if not 0.0 <= p <= 1.0:
        raise PyptoError(f"{what}: p must be in [0, 1], got {p}")
    if not training or p == 0.0:
        return x
    if p == 1.0:
        return T.binary(Opcode.TMUL, x, 0.0)
    keep = _keep_mask(x, p, seed, lead)
    zero = T.binary(Opcode.TMUL, x, 0.0)
    if not alpha:
        return T.where(keep, T.binary(Opcode.TMUL, x, 1.0 / (1.0 - p)), zero)
    s = _SELU_SATURATION
    a = 1.0 / math.sqrt((s * s * p + 1.0) * (1.0 - p))
    kept = T.binary(Opcode.TADD, T.binary(Opcode.TMUL, x, a), s * a * p)
    return T.where(keep, kept, T.binary(Opcode.TADD, zero, s * a * (p - 1.0)))


def _dropout_form(what, training_default, lead, alpha=False):
    """F.dropout1d/2d/3d, alpha_dropout, feature_alpha_dropout; lead(ndim): how many leading dims
    draw separately (None: every element), as torch reads the input's dims."""
    def f(input, p=0.5, training=training_default, inplace=False):  # noqa: A002
        return feature_dropout(input, p, training, what, lead(input.ndim), alpha)
    return f


def _channel_dims(what, batched):
    """(N, C, ...) draws per (n, c); the unbatched form, one dim fewer, per channel."""
    def lead(ndim):
        if ndim not in (batched - 1, batched):
            raise PyptoError(f"{what}: expects an input of {batched - 1} or {batched} dims, got {ndim}")
        return 2 if ndim == batched else 1
    return lead


# torch's channel and alpha dropouts (torch_functions.py reads this with the other ENTRIES).
DROPOUT_ENTRIES = [
    (_dropout_form("dropout1d", True, _channel_dims("dropout1d", 3)), ["dropout1d"]),
    (_dropout_form("dropout2d", True, lambda n: min(n, 2)), ["dropout2d"]),  # 3-d: (N, C, L), as torch
    (_dropout_form("dropout3d", True, _channel_dims("dropout3d", 5)), ["dropout3d"]),
    (_dropout_form("alpha_dropout", False, lambda n: None, True), ["alpha_dropout"]),
    (_dropout_form("feature_alpha_dropout", False, lambda n: min(n, 2), True), ["feature_alpha_dropout"]),
]
