"""Public composite operations: triangular masks, statistics, selection by value and layout.

Like every pypto op each works inside a kernel (traced), and eagerly on arrays outside one."""
from __future__ import annotations

from .frontend import composite_ops as C
from .frontend import tensor_ops as _T
from .ops import make_op


@make_op(C.tril)
def tril(x, diagonal=0):
    """The lower triangle of the last two dimensions (x[.., i, j] where j - i <= diagonal), zeros elsewhere."""


@make_op(C.triu)
def triu(x, diagonal=0):
    """The upper triangle of the last two dimensions (x[.., i, j] where j - i >= diagonal), zeros elsewhere."""


@make_op(C.var)
def var(x, dim=None, unbiased=None, keepdim=False, *, correction=None):
    """Variance over `dim` (int, tuple or None = all) with Bessel's correction unless
    unbiased=False / correction=0."""


@make_op(C.std)
def std(x, dim=None, unbiased=None, keepdim=False, *, correction=None):
    """Standard deviation: sqrt(var(...))."""


@make_op(C.logsumexp)
def logsumexp(x, dim=None, keepdim=False):
    """log(sum(exp(x))) over `dim`, computed stably (rows of -inf give -inf)."""


@make_op(C.any)
def any(x, dim=None, keepdim=False):  # noqa: A001
    """Whether any element over `dim` is nonzero (bool)."""


@make_op(C.all)
def all(x, dim=None, keepdim=False):  # noqa: A001
    """Whether every element over `dim` is nonzero (bool)."""


@make_op(C.argmax)
def argmax(x, dim=None, keepdim=False):
    """Index (int64) of the first maximum over `dim` (None: of the flattened tensor); NaN counts as
    the maximum, as torch."""


@make_op(C.argmin)
def argmin(x, dim=None, keepdim=False):
    """Index (int64) of the first minimum over `dim` (None: of the flattened tensor)."""


@make_op(C.stack)
def stack(tensors, dim=0):
    """Join tensors of one shape along a new dimension."""


@make_op(C.roll)
def roll(x, shifts, dims=None):
    """Rotate elements along `dims` by `shifts` (None: over the flattened tensor)."""


@make_op(C.repeat_interleave)
def repeat_interleave(x, repeats, dim=None):
    """Repeat each element `repeats` times along `dim` (None: the flattened tensor)."""


@make_op(C.one_hot)
def one_hot(x, num_classes=-1):
    """int64 one-hot encoding of an integer tensor: a new last dimension of size num_classes."""


@make_op(C.pad)
def pad(x, pad, mode="constant", value=None):
    """Constant padding as torch.nn.functional.pad: (before, after) pairs from the last dimension
    backwards; negative amounts crop."""


@make_op(C.split)
def split(x, split_size_or_sections, dim=0):
    """Views of consecutive pieces along `dim`: pieces of split_size (the last may be smaller) or
    of the listed sizes."""


@make_op(C.chunk)
def chunk(x, chunks, dim=0):
    """Split into `chunks` pieces of ceil(n / chunks) (the last may be smaller)."""


__all__ = ["tril", "triu", "var", "std", "logsumexp", "any", "all", "argmax", "argmin", "stack", "roll",
           "repeat_interleave", "one_hot", "pad", "split", "chunk"]


@make_op(C.cumsum)
def cumsum(x, dim=None, dtype=None):
    """Inclusive cumulative sum along `dim` (ints and bool accumulate in int64, as torch)."""


@make_op(C.cumprod)
def cumprod(x, dim=None, dtype=None):
    """Inclusive cumulative product along `dim`."""


@make_op(C.prod)
def prod(x, dim=None, keepdim=False, dtype=None):
    """The product along `dim` (every element when None), multiplied in order; int and bool give int64."""


# --- random numbers (frontend/random_ops.py: counter-based, seed + offset) ---------------------
from .frontend import random_ops as _R  # noqa: E402


@make_op(_R.rand)
def rand(seed, offsets):
    """Uniform float32 in [0, 1) at each integer offset, a pure function of (seed, offset), as
    Triton's tl.rand: tiles and threads draw the same numbers in any order."""


@make_op(_R.randn)
def randn(seed, offsets):
    """Standard normal float32 at each integer offset (Box-Muller on rand at 2k and 2k + 1)."""


@make_op(_R.rand_like)
def rand_like(x, seed=None, dtype=None):
    """Uniform [0, 1) numbers shaped like x; seed None: a fresh seed at every call."""


@make_op(_R.randn_like)
def randn_like(x, seed=None, dtype=None):
    """Standard normal numbers shaped like x; seed None: a fresh seed at every call."""


@make_op(_R.dropout)
def dropout(x, p=0.5, training=True, seed=None):
    """Zero each element with probability p, scale the others by 1 / (1 - p) (torch's dropout);
    seed None: a fresh mask at every call, the same one in its backward."""


__all__ += ["rand", "randn", "rand_like", "randn_like", "dropout"]


@make_op(C.cummax)
def cummax(x, dim):
    """(values, int64 indices) of the running maximum along `dim`, as torch.cummax."""


@make_op(C.cummin)
def cummin(x, dim):
    """(values, int64 indices) of the running minimum along `dim`."""


@make_op(C.sort)
def sort(x, dim=-1, descending=False, stable=True):
    """(values, int64 indices) sorted along `dim`; stable; NaN last (first when descending), as torch."""


@make_op(C.argsort)
def argsort(x, dim=-1, descending=False, stable=True):
    """The int64 indices that sort x along `dim` (stable)."""


@make_op(C.topk)
def topk(x, k, dim=-1, largest=True, sorted=True):  # noqa: A002
    """(values, int64 indices) of the k largest (or smallest) along `dim`, in sorted order."""


__all__ += ["cumsum", "cumprod", "prod", "cummax", "cummin", "sort", "argsort", "topk"]


# --- indexing by tensors ------------------------------------------------------------------------
from .frontend import index_ops as _X  # noqa: E402


@make_op(_X.index_select)
def index_select(x, dim, index):
    """Slices of x along `dim` at the (0-d or 1-d) integer `index`; every index must be in range."""


@make_op(_X.embedding)
def embedding(input, weight, padding_idx=None, max_norm=None, norm_type=2.0, scale_grad_by_freq=False,  # noqa: A002
              sparse=False):
    """Rows of `weight` at the integer tensor `input` (any shape): shape input.shape + (dim,)."""


@make_op(_X.gather)
def gather(x, dim, index):
    """torch.gather: out[i][j] = x[index[i][j]][j] (dim 0) and so on; index has x's rank."""


@make_op(_X.scatter)
def scatter(x, dim, index, src=None, value=None, reduce=None):
    """torch.scatter (out of place): a copy of x with src (or value) written at index along dim;
    reduce='add' accumulates."""


@make_op(_X.masked_select)
def masked_select(x, mask, fill=0):
    """(values, count): the elements of x where mask is true, in row-major order, in a 1-d buffer
    of x.numel() elements (the static bound) whose tail past count is fill."""


@make_op(_X.scatter_add)
def scatter_add(x, dim, index, src):
    """torch.scatter_add (out of place)."""


@make_op(_X.index_add)
def index_add(x, dim, index, source, alpha=1):
    """A copy of x with alpha * source added at the positions `index` along dim (repeats accumulate)."""


@make_op(_X.flip)
def flip(x, dims):
    """Reverse the order of elements along `dims`."""


__all__ += ["index_select", "embedding", "gather", "scatter", "scatter_add", "index_add", "flip"]


@make_op(_T.detach)
def detach(x):
    """x as a constant for differentiation (torch's x.detach(), JAX's stop_gradient): the value
    passes, no gradient flows back through it."""


__all__ += ["detach"]


# --- contractions, norms and losses ---------------------------------------------------------
from .frontend import contract_ops as _K  # noqa: E402


@make_op(_K.einsum)
def einsum(equation, *operands):
    """Einstein summation ('ij,jk->ik', 'bhqd,bhkd->bhqk', '...ij->...ji', implicit output as
    NumPy); pairs contract left to right, each as one batched matmul; no diagonals."""


@make_op(_K.outer)
def outer(a, b):
    """The outer product of two vectors."""


@make_op(_K.baddbmm)
def baddbmm(input, batch1, batch2, *, beta=1, alpha=1):  # noqa: A002
    """beta * input + alpha * (batch1 @ batch2)."""


@make_op(_K.scaled_mm)
def scaled_mm(a, b, scale_a=1.0, scale_b=1.0, bias=None, out_dtype=None):
    """(a @ b) * scale_a * scale_b (+ bias) with per-row scale_a (M,) / (M, 1) and per-column
    scale_b (N,) / (1, N) (or single numbers): int8/uint8/int16/int32 inputs multiply exactly in
    int32, float inputs in float32; the result is float32 unless out_dtype says otherwise."""


@make_op(_K.vector_norm)
def vector_norm(x, ord=2, dim=None, keepdim=False, *, dtype=None):  # noqa: A002
    """The vector p-norm over `dim` (all elements when None): ord 2, 1, inf, -inf, 0 or p > 0."""


@make_op(_K.normalize)
def normalize(x, p=2.0, dim=1, eps=1e-12):
    """x / max(||x||_p over dim, eps), as torch.nn.functional.normalize."""


@make_op(_K.mse_loss)
def mse_loss(input, target, reduction="mean"):  # noqa: A002
    """Mean squared error ('mean', 'sum' or 'none')."""


@make_op(_K.l1_loss)
def l1_loss(input, target, reduction="mean"):  # noqa: A002
    """Mean absolute error."""


@make_op(_K.smooth_l1_loss)
def smooth_l1_loss(input, target, reduction="mean", beta=1.0):  # noqa: A002
    """Quadratic below beta, linear above, as torch."""


@make_op(_K.huber_loss)
def huber_loss(input, target, reduction="mean", delta=1.0):  # noqa: A002
    """delta * smooth_l1_loss(beta=delta), as torch."""


@make_op(_K.cross_entropy)
def cross_entropy(input, target, weight=None, ignore_index=-100, reduction="mean",  # noqa: A002
                  label_smoothing=0.0):
    """Cross entropy of logits (N, C) or (N, C, d1, ...) against class indices or probabilities."""


@make_op(_K.nll_loss)
def nll_loss(input, target, weight=None, ignore_index=-100, reduction="mean"):  # noqa: A002
    """Negative log-likelihood of class indices under log-probabilities."""


@make_op(_K.binary_cross_entropy)
def binary_cross_entropy(input, target, weight=None, reduction="mean"):  # noqa: A002
    """-(y log p + (1 - y) log(1 - p)), logs clamped at -100 as torch."""


@make_op(_K.binary_cross_entropy_with_logits)
def binary_cross_entropy_with_logits(input, target, weight=None, reduction="mean", pos_weight=None):  # noqa: A002
    """The logistic loss on logits, computed stably."""


@make_op(_K.kl_div)
def kl_div(input, target, reduction="mean", log_target=False):  # noqa: A002
    """target * (log target - input) with input as log-probabilities; reduction 'batchmean' too."""


__all__ += ["einsum", "outer", "baddbmm", "vector_norm", "normalize", "mse_loss", "l1_loss", "smooth_l1_loss",
            "huber_loss", "cross_entropy", "nll_loss", "binary_cross_entropy",
            "binary_cross_entropy_with_logits", "kl_div"]
