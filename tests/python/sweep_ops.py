"""The op table of the sweep (test_op_sweep.py): each op as a function of (x, y, i, j) in pypto
and the same in torch (float64 references), with the dtypes it supports."""
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

import pypto

FLOATS = ("float32", "float64")
INTS = ("int32", "int64")
NUM = FLOATS + INTS
ALL = NUM + ("bool",)
NARROW_INTS = ("int8", "uint8", "int16")


@dataclass
class Op:
    name: str
    fn: object
    ref: object
    dtypes: tuple = FLOATS
    domain: str = "any"            # "pos": inputs in (0.25, inf); "unit": in (-0.9, 0.9)
    tol: float = 1e-5
    bad_dtypes: tuple = ()         # dtypes that must raise PyptoError naming the op
    bad_index_dtypes: tuple = ()   # dtypes of the index tensors i and j that must raise it
    error_name: str = field(default="")

    def __post_init__(self):
        self.error_name = self.error_name or self.name


OPS = [
    Op("tril", lambda x, y, i, j: pypto.tril(x, 1), lambda x, y, i, j: torch.tril(x, 1), ALL),
    Op("triu", lambda x, y, i, j: x.triu(-1), lambda x, y, i, j: torch.triu(x, -1), ALL),
    Op("var", lambda x, y, i, j: pypto.var(x, 1), lambda x, y, i, j: torch.var(x, 1)),
    Op("std", lambda x, y, i, j: x.std(0, correction=0, keepdim=True),
       lambda x, y, i, j: torch.std(x, 0, correction=0, keepdim=True)),
    Op("logsumexp", lambda x, y, i, j: pypto.logsumexp(x, -1), lambda x, y, i, j: torch.logsumexp(x, -1)),
    Op("any", lambda x, y, i, j: pypto.any(x, 1), lambda x, y, i, j: torch.any(x, 1), ALL),
    Op("all", lambda x, y, i, j: x.all(), lambda x, y, i, j: torch.all(x), ALL),
    Op("argmax", lambda x, y, i, j: pypto.argmax(x, 1), lambda x, y, i, j: torch.argmax(x, 1), NUM,
       bad_dtypes=("bool",)),
    Op("argmin", lambda x, y, i, j: x.argmin(), lambda x, y, i, j: torch.argmin(x), NUM, bad_dtypes=("bool",)),
    Op("stack", lambda x, y, i, j: pypto.stack([x, x], 1), lambda x, y, i, j: torch.stack([x, x], 1), ALL),
    Op("roll", lambda x, y, i, j: pypto.roll(x, 3, 1), lambda x, y, i, j: torch.roll(x, 3, 1), ALL),
    Op("split", lambda x, y, i, j: pypto.split(x, 2, 1), lambda x, y, i, j: torch.split(x, 2, 1), ALL),
    Op("chunk", lambda x, y, i, j: x.chunk(3, 1), lambda x, y, i, j: torch.chunk(x, 3, 1), ALL),
    Op("repeat_interleave", lambda x, y, i, j: pypto.repeat_interleave(x, 2, 0),
       lambda x, y, i, j: torch.repeat_interleave(x, 2, 0), ALL),
    Op("one_hot", lambda x, y, i, j: pypto.one_hot(j, 40), lambda x, y, i, j: F.one_hot(j, 40), ALL,
       bad_index_dtypes=NARROW_INTS),
    Op("pad", lambda x, y, i, j: pypto.pad(x, (1, 2, 2, 0), value=3),
       lambda x, y, i, j: F.pad(x, (1, 2, 2, 0), value=3), NUM),
    Op("flip", lambda x, y, i, j: pypto.flip(x, (0, 1)), lambda x, y, i, j: torch.flip(x, (0, 1)), ALL),
    Op("getitem", lambda x, y, i, j: x[i], lambda x, y, i, j: x[i], ALL, bad_index_dtypes=NARROW_INTS,
       error_name=r"x\[index\]"),
    Op("getitem_col", lambda x, y, i, j: x[:, j[0]], lambda x, y, i, j: x[:, j[0]], ALL,
       bad_index_dtypes=NARROW_INTS, error_name=r"x\[index\]"),
    Op("index_select", lambda x, y, i, j: pypto.index_select(x, 1, j[0]),
       lambda x, y, i, j: torch.index_select(x, 1, j[0]), ALL, bad_index_dtypes=NARROW_INTS),
    Op("embedding", lambda x, y, i, j: pypto.embedding(j, x.T), lambda x, y, i, j: F.embedding(j, x.T), NUM,
       bad_index_dtypes=NARROW_INTS),
    Op("gather", lambda x, y, i, j: pypto.gather(x, 1, j), lambda x, y, i, j: torch.gather(x, 1, j), ALL),
    Op("scatter", lambda x, y, i, j: pypto.scatter(x, 1, j[:, :1], x),
       lambda x, y, i, j: torch.scatter(x, 1, j[:, :1], x), ALL),
    Op("scatter_add", lambda x, y, i, j: pypto.scatter_add(x, 1, j, x), lambda x, y, i, j: torch.scatter_add(x, 1, j, x),
       NUM),
    Op("index_add", lambda x, y, i, j: pypto.index_add(x, 0, i % x.shape[0], pypto.broadcast_to(y, (3, x.shape[1]))),
       lambda x, y, i, j: torch.index_add(x, 0, i % x.shape[0], y.expand(3, x.shape[1])), NUM,
       bad_index_dtypes=NARROW_INTS),
    Op("cumsum", lambda x, y, i, j: pypto.cumsum(x, 1), lambda x, y, i, j: torch.cumsum(x, 1), ALL),
    Op("cumsum0", lambda x, y, i, j: x.cumsum(0), lambda x, y, i, j: torch.cumsum(x, 0), NUM),
    Op("cumprod", lambda x, y, i, j: pypto.cumprod(x * 0.5, 1) if x.dtype.is_floating_point else pypto.cumprod(x, 0),
       lambda x, y, i, j: torch.cumprod(x * 0.5, 1) if x.is_floating_point() else torch.cumprod(x, 0), NUM),
    Op("prod", lambda x, y, i, j: pypto.prod(x * 0.5 + 0.75, 1) if x.dtype.is_floating_point else x.prod(0),
       lambda x, y, i, j: torch.prod(x * 0.5 + 0.75, 1) if x.is_floating_point() else torch.prod(x, 0), NUM),
    Op("prod_all", lambda x, y, i, j: pypto.prod(x * 0.1 + 0.95, keepdim=True),
       lambda x, y, i, j: torch.prod(x * 0.1 + 0.95).reshape(1, 1), FLOATS),
    Op("cummax", lambda x, y, i, j: pypto.cummax(x, 1), lambda x, y, i, j: tuple(torch.cummax(x, 1)), NUM,
       bad_dtypes=("bool",)),
    Op("cummin", lambda x, y, i, j: x.cummin(0), lambda x, y, i, j: tuple(torch.cummin(x, 0)), NUM),
    Op("sort", lambda x, y, i, j: pypto.sort(x * 0 + pypto.round(x), 1), lambda x, y, i, j: tuple(torch.sort(x * 0 + torch.round(x), dim=1, stable=True)),
       NUM, bad_dtypes=("bool",)),
    Op("sort_desc0", lambda x, y, i, j: x.sort(0, descending=True), lambda x, y, i, j: tuple(torch.sort(x, dim=0, descending=True, stable=True)), NUM),
    Op("argsort_nan", lambda x, y, i, j: pypto.argsort(pypto.log(x), 1), lambda x, y, i, j: torch.argsort(torch.log(x), dim=1, stable=True)),
    Op("topk", lambda x, y, i, j: pypto.topk(x, 1, 1), lambda x, y, i, j: tuple(torch.topk(x, 1, 1))),
    Op("topk_smallest", lambda x, y, i, j: x.topk(1, 0, largest=False), lambda x, y, i, j: tuple(torch.topk(x, 1, 0, largest=False))),
    # integer ties: torch picks any of the tied indices, so compare the values
    Op("topk_int_values", lambda x, y, i, j: pypto.topk(x, 1, 1)[0], lambda x, y, i, j: torch.topk(x, 1, 1).values, INTS),
    # element-wise math
    Op("sin", lambda x, y, i, j: pypto.sin(x), lambda x, y, i, j: torch.sin(x)),
    Op("cos", lambda x, y, i, j: x.cos(), lambda x, y, i, j: torch.cos(x)),
    Op("tan", lambda x, y, i, j: pypto.tan(x), lambda x, y, i, j: torch.tan(x), domain="unit"),
    Op("exp2", lambda x, y, i, j: pypto.exp2(x), lambda x, y, i, j: torch.exp2(x)),
    Op("expm1", lambda x, y, i, j: x.expm1(), lambda x, y, i, j: torch.expm1(x)),
    Op("log2", lambda x, y, i, j: pypto.log2(x), lambda x, y, i, j: torch.log2(x), domain="pos"),
    Op("log10", lambda x, y, i, j: x.log10(), lambda x, y, i, j: torch.log10(x), domain="pos"),
    Op("log1p", lambda x, y, i, j: pypto.log1p(x), lambda x, y, i, j: torch.log1p(x), domain="pos"),
    Op("cbrt", lambda x, y, i, j: pypto.cbrt(x), lambda x, y, i, j: torch.sign(x) * torch.abs(x) ** (1 / 3)),
    Op("ceil", lambda x, y, i, j: pypto.ceil(x * 3), lambda x, y, i, j: torch.ceil(x * 3)),
    Op("round", lambda x, y, i, j: pypto.round(x * 2), lambda x, y, i, j: torch.round(x * 2)),
    Op("trunc", lambda x, y, i, j: x.trunc(), lambda x, y, i, j: torch.trunc(x)),
    Op("sign", lambda x, y, i, j: pypto.sign(x), lambda x, y, i, j: torch.sign(x), NUM),
    Op("atan2", lambda x, y, i, j: pypto.atan2(x, y), lambda x, y, i, j: torch.atan2(x, y)),
    Op("hypot", lambda x, y, i, j: pypto.hypot(x, y), lambda x, y, i, j: torch.hypot(x, y)),
    Op("copysign", lambda x, y, i, j: pypto.copysign(y, x), lambda x, y, i, j: torch.copysign(y, x)),
    Op("fmod", lambda x, y, i, j: pypto.fmod(x * 5, y), lambda x, y, i, j: torch.fmod(x * 5, y), NUM),
    Op("remainder", lambda x, y, i, j: pypto.remainder(x * 5, y), lambda x, y, i, j: torch.remainder(x * 5, y), NUM),
    Op("mod_operator", lambda x, y, i, j: (x * 5) % y, lambda x, y, i, j: (x * 5) % y, NUM),
    Op("floordiv_operator", lambda x, y, i, j: (x * 5) // y, lambda x, y, i, j: torch.div(x * 5, y, rounding_mode="floor"),
       NUM),
    Op("gcd", lambda x, y, i, j: pypto.gcd(x * 6, y), lambda x, y, i, j: torch.gcd(x * 6, y), INTS, bad_dtypes=FLOATS),
    Op("ceil_div", lambda x, y, i, j: pypto.ceil_div(x * 7, y), lambda x, y, i, j: -torch.div(-x * 7, y, rounding_mode="floor"),
       INTS, bad_dtypes=FLOATS),
    Op("softplus", lambda x, y, i, j: pypto.softplus(x * 8), lambda x, y, i, j: F.softplus(x * 8)),
    Op("mish", lambda x, y, i, j: pypto.mish(x), lambda x, y, i, j: F.mish(x)),
    Op("hardswish", lambda x, y, i, j: pypto.hardswish(x * 3), lambda x, y, i, j: F.hardswish(x * 3)),
    Op("hardsigmoid", lambda x, y, i, j: pypto.hardsigmoid(x * 3), lambda x, y, i, j: F.hardsigmoid(x * 3)),
    Op("leaky_relu", lambda x, y, i, j: pypto.leaky_relu(x, 0.2), lambda x, y, i, j: F.leaky_relu(x, 0.2)),
    Op("lrelu", lambda x, y, i, j: pypto.lrelu(x), lambda x, y, i, j: F.leaky_relu(x)),
    Op("prelu", lambda x, y, i, j: pypto.prelu(x, y), lambda x, y, i, j: F.prelu(x, y)),
    Op("isnan", lambda x, y, i, j: pypto.isnan(pypto.log(x)), lambda x, y, i, j: torch.isnan(torch.log(x))),
    Op("isinf", lambda x, y, i, j: pypto.isinf(x / (x > 0.5)), lambda x, y, i, j: torch.isinf(x / (x > 0.5))),
    Op("isfinite", lambda x, y, i, j: x.isfinite(), lambda x, y, i, j: torch.isfinite(x), ALL),
    Op("signbit", lambda x, y, i, j: pypto.signbit(x), lambda x, y, i, j: torch.signbit(x), NUM),
    Op("logical_and", lambda x, y, i, j: pypto.logical_and(x, y), lambda x, y, i, j: torch.logical_and(x, y), ALL),
    Op("logical_or", lambda x, y, i, j: pypto.logical_or(x, y), lambda x, y, i, j: torch.logical_or(x, y), ALL),
    Op("logical_xor", lambda x, y, i, j: pypto.logical_xor(x, y), lambda x, y, i, j: torch.logical_xor(x, y), ALL),
    Op("logical_not", lambda x, y, i, j: pypto.logical_not(x), lambda x, y, i, j: torch.logical_not(x), ALL),
    Op("clip", lambda x, y, i, j: pypto.clip(x, -0.5, 0.5), lambda x, y, i, j: torch.clip(x, -0.5, 0.5)),
]


def ops_for(dtype):
    return [op for op in OPS if dtype in op.dtypes]
