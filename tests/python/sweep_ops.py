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


@dataclass
class Op:
    name: str
    fn: object
    ref: object
    dtypes: tuple = FLOATS
    domain: str = "any"            # "pos": inputs in (0.25, inf); "unit": in (-0.9, 0.9)
    tol: float = 1e-5
    bad_dtypes: tuple = ()         # dtypes that must raise PyptoError naming the op
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
    Op("one_hot", lambda x, y, i, j: pypto.one_hot(j, 40), lambda x, y, i, j: F.one_hot(j, 40), ALL),
    Op("pad", lambda x, y, i, j: pypto.pad(x, (1, 2, 2, 0), value=3),
       lambda x, y, i, j: F.pad(x, (1, 2, 2, 0), value=3), NUM),
    Op("flip", lambda x, y, i, j: pypto.flip(x, (0, 1)), lambda x, y, i, j: torch.flip(x, (0, 1)), ALL),
    Op("getitem", lambda x, y, i, j: x[i], lambda x, y, i, j: x[i], ALL),
    Op("getitem_col", lambda x, y, i, j: x[:, j[0]], lambda x, y, i, j: x[:, j[0]], ALL),
    Op("index_select", lambda x, y, i, j: pypto.index_select(x, 1, j[0]),
       lambda x, y, i, j: torch.index_select(x, 1, j[0]), ALL),
    Op("embedding", lambda x, y, i, j: pypto.embedding(j, x.T), lambda x, y, i, j: F.embedding(j, x.T), NUM),
    Op("gather", lambda x, y, i, j: pypto.gather(x, 1, j), lambda x, y, i, j: torch.gather(x, 1, j), ALL),
    Op("scatter", lambda x, y, i, j: pypto.scatter(x, 1, j[:, :1], x),
       lambda x, y, i, j: torch.scatter(x, 1, j[:, :1], x), ALL),
    Op("scatter_add", lambda x, y, i, j: pypto.scatter_add(x, 1, j, x), lambda x, y, i, j: torch.scatter_add(x, 1, j, x),
       NUM),
    Op("index_add", lambda x, y, i, j: pypto.index_add(x, 0, i % x.shape[0], pypto.broadcast_to(y, (3, x.shape[1]))),
       lambda x, y, i, j: torch.index_add(x, 0, i % x.shape[0], y.expand(3, x.shape[1])), NUM),
]


def ops_for(dtype):
    return [op for op in OPS if dtype in op.dtypes]
