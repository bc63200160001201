"""Element types: pypto.float32 ... pypto.bool, and conversion from NumPy / PyTorch / strings."""
from __future__ import annotations

import sys

import numpy as np

from . import _C
from .errors import PyptoError  # (a ValueError)


class dtype:
    """A PyPTO element type. Compares equal to its own name ("float32") for convenience."""

    __slots__ = ("name", "short", "c", "np", "itemsize", "is_floating_point")

    def __init__(self, name, short, c, np_type, itemsize, is_float):
        self.name = name
        self.short = short            # the IR's spelling: "f32"
        self.c = c                    # _C.DType
        self.np = np_type             # NumPy dtype (None for bfloat16: NumPy has no bf16)
        self.itemsize = itemsize
        self.is_floating_point = is_float

    def __repr__(self):
        return f"pypto.{self.name}"

    __str__ = __repr__

    def __eq__(self, other):
        if isinstance(other, dtype):
            return self is other
        try:
            return to_dtype(other) is self
        except (TypeError, ValueError):
            return False

    def __hash__(self):
        return hash(self.name)

    def __reduce__(self):
        return (to_dtype, (self.name,))

    @property
    def torch(self):
        import torch
        return getattr(torch, self.name)


float32 = dtype("float32", "f32", _C.DType.F32, np.dtype(np.float32), 4, True)
float16 = dtype("float16", "f16", _C.DType.F16, np.dtype(np.float16), 2, True)
bfloat16 = dtype("bfloat16", "bf16", _C.DType.BF16, None, 2, True)
float64 = dtype("float64", "f64", _C.DType.F64, np.dtype(np.float64), 8, True)
int32 = dtype("int32", "i32", _C.DType.I32, np.dtype(np.int32), 4, False)
int64 = dtype("int64", "i64", _C.DType.I64, np.dtype(np.int64), 8, False)
int16 = dtype("int16", "i16", _C.DType.I16, np.dtype(np.int16), 2, False)
int8 = dtype("int8", "i8", _C.DType.I8, np.dtype(np.int8), 1, False)
uint8 = dtype("uint8", "u8", _C.DType.U8, np.dtype(np.uint8), 1, False)
bool_ = dtype("bool", "bool", _C.DType.Bool, np.dtype(np.bool_), 1, False)

ALL = (float32, float16, bfloat16, float64, int32, int64, int16, int8, uint8, bool_)
_BY_NAME = {}
for _d in ALL:
    _BY_NAME[_d.name] = _d
    _BY_NAME[_d.short] = _d
_BY_NAME.update({"float": float32, "half": float16, "double": float64, "int": int64, "long": int64, "short": int16,
                 "bf16": bfloat16, "bool_": bool_})
_BY_C = {d.c: d for d in ALL}
_BY_NP = {d.np: d for d in ALL if d.np is not None}
_BY_TORCH = {}  # filled lazily: torch is optional


def _torch_map():
    if not _BY_TORCH:
        torch = sys.modules.get("torch")
        if torch is None:
            return _BY_TORCH
        for d in ALL:
            _BY_TORCH[getattr(torch, d.name)] = d
    return _BY_TORCH


def from_c(c):
    return _BY_C[c]


def to_dtype(x) -> dtype:
    """pypto dtype from a pypto dtype, a name ("float32", "f32"), a NumPy dtype or type, a torch
    dtype or a _C.DType. Raises TypeError for anything else, ValueError for unsupported types."""
    if isinstance(x, dtype):
        return x
    if isinstance(x, str):
        d = _BY_NAME.get(x)
        if d is None:
            raise _unsupported(repr(x))
        return d
    if isinstance(x, _C.DType):
        return _BY_C[x]
    if x is float:
        return float32
    if x is int:
        return int64
    if x is bool:
        return bool_
    tm = _torch_map()
    if tm and x in tm:
        return tm[x]
    if type(x).__module__ == "torch" and type(x).__name__ == "dtype":  # torch.int8, torch.complex64...
        raise _unsupported(str(x))
    try:
        npd = np.dtype(x)
    except TypeError:
        raise TypeError(f"not a dtype: {x!r}") from None
    d = _BY_NP.get(npd)
    if d is None:
        raise _unsupported(str(npd))
    return d


def _unsupported(name):
    return PyptoError(f"unsupported dtype {name} (supported: {', '.join(d.name for d in ALL)})")


def result_float(d: dtype) -> dtype:
    """The type float math on `d` produces (integers and bool compute in float32)."""
    return d if d.is_floating_point else float32


# bfloat16 has no NumPy type: its values are stored as the upper 16 bits of a float32.
def f32_to_bf16_bits(a: np.ndarray) -> np.ndarray:
    a = np.ascontiguousarray(a, dtype=np.float32)
    u = a.view(np.uint32).astype(np.uint64)
    rounded = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)  # round to nearest even
    nan = np.isnan(a)
    if nan.any():
        rounded[nan] = 0x7FC0
    return rounded


def bf16_bits_to_f32(bits: np.ndarray) -> np.ndarray:
    return (bits.astype(np.uint32) << 16).view(np.float32)
