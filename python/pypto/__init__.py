"""PyPTO: write tensor kernels in Python (whole-tensor ops or explicit tile loops) and run them
compiled through the PTO virtual tile ISA: on the CPU backend (generated C++) or the reference
interpreter.

    import pypto

    @pypto.jit
    def fused_linear(x, w, b):
        return pypto.relu(pypto.add(pypto.matmul(x, w), b))

    y = fused_linear(x_np, w_np, b_np)   # NumPy in -> NumPy out; torch in -> torch out
"""
from . import _C
from .dtypes import (bfloat16, bool_, dtype, float16, float32, float64, int8, int16, int32, int64, to_dtype,
                     uint8)
from .errors import PyptoError
from .interop import from_numpy, from_torch, to_numpy, to_torch
from .api import jit
from .jit import JitFunction, mark_dynamic
from .ops import (abs, add, amax, amin, arange, broadcast_to, cast, cat, clamp, concat, conv2d, div,
                  divide, empty, empty_like, eq, erf, exp, floor, full, full_like, ge, gelu, gt, inplace,
                  layer_norm, le, log, log_softmax, lt, matmul, max, maximum, mean, min, minimum, mul,
                  multiply, ne, neg, ones, ones_like, permute, pow, prange, reciprocal, relu, reshape,
                  rms_norm, rsqrt, sigmoid, silu, softmax, sqrt, squeeze, static_range, sub, subtract, sum,
                  tanh, transpose, true_divide, unsqueeze, where, zeros, zeros_like)
from .ops_composite import (all, any, argmax, argmin, argsort, chunk, sort, topk, cummax, cummin, cumprod, cumsum, prod, rand, randn, rand_like, randn_like, dropout, embedding, flip, gather, index_add, index_select,
                            logsumexp, masked_select, one_hot, pad, repeat_interleave, roll, scatter, scatter_add, split, stack,
                            std, tril, triu, var)
from .ops_composite import (baddbmm, detach, binary_cross_entropy, binary_cross_entropy_with_logits, cross_entropy,
                            einsum, huber_loss, kl_div, l1_loss, mse_loss, nll_loss, normalize, outer, scaled_mm,
                            smooth_l1_loss, vector_norm)
from .ops_math import (absolute, arctan2, atan2, bitwise_and, bitwise_left_shift, bitwise_not, bitwise_or,
                       bitwise_right_shift, bitwise_xor, cbrt, ceil, ceil_div, clip, copysign, cos, digamma, equal, erfc,
                       erfinv, exp2, expm1, lgamma, trigamma,
                       fix, floor_divide, fmod, gcd, greater, greater_equal, hardsigmoid, hardswish, hypot,
                       isfinite, isinf, isnan, leaky_relu, less, less_equal, log1p, log2, log10, logical_and,
                       left_shift, logical_not, logical_or, logical_xor, lrelu, mish, mod, negative, not_equal, prelu,
                       remainder, right_shift, round, sign, signbit, sin, softplus, tan, trunc)
from .compiled import Lowered
from .autograd import grad, pto_autograd, to_pto_tensor, to_torch_tensor, torch_function, vjp
from .tensor import Tensor
from . import pipeline
from .profile import NestTime, Profile, TilePoint, get_last_profile, tile_curve
from .sim import SimReport
from .profile import profiling
from .profiling import machine_peak, plot_trace
from .autotune import Autotuned, TuningResult, autotune

bool = bool_  # noqa: A001  (pypto.bool, as torch.bool)

from . import ops as _ops, ops_composite as _ops_composite, ops_math as _ops_math, tensor as _tensor  # noqa: E402

_tensor.OPERATIONS.update({name: op for name, op in globals().items()
                           if callable(op) and getattr(op, "__module__", "") in
                           (_ops.__name__, _ops_composite.__name__, _ops_math.__name__)})

try:
    from . import isa  # the PTO ISA text tools (parse/print)
except ModuleNotFoundError as _e:  # pragma: no cover - only while the module is being written
    if _e.name != __name__ + ".isa":
        raise


def target():
    """What the start-up analysis found about this machine: arch, cores, caches (bytes), SIMD
    features, vector width in bytes, the preferred alignment of inputs in bytes (alignment:
    a cache line or the vector width, whichever is larger), and the thread pool size."""
    return _C.target()


def set_num_threads(n: int):
    """Size of the thread pool parallel loops run on (default: $PYPTO_NUM_THREADS or all cores)."""
    _C.set_num_threads(int(n))


def share_threads_with_torch(enable: bool = True):
    """Run parallel loops on the OpenMP threads torch already runs (the default once torch is
    imported: two pools on the same cores would fight) or, with False, on PyPTO's own pool.
    Returns the OpenMP runtime's path, or None when none is loaded or sharing is off."""
    if not enable:
        _C.stop_sharing_threads()
        return None
    return _C.share_threads_with_openmp() or None


def num_threads() -> int:
    return _C.num_threads()


def max_threads() -> int:
    """The most threads set_num_threads accepts (8 per available core, at least 64)."""
    return _C.max_threads()


__version__ = "0.1.0"
