"""pypto.Tensor: a CPU tensor that owns its memory (NumPy-backed) and speaks DLPack.

bfloat16 has no NumPy type, so a bf16 Tensor stores its bits in a uint16 array and exports them
through DLPack with the bfloat16 type code (torch.from_dlpack sees a real bf16 tensor)."""
from __future__ import annotations

import sys

import numpy as np

from . import _C
from . import dtypes as _dt

# Array kinds: which library's type a kernel's outputs follow.
NUMPY, TORCH, PYPTO, DLPACK = "numpy", "torch", "pypto", "dlpack"


def loaded_torch():
    """torch when the process has imported it (never imports it: torch is optional)."""
    return sys.modules.get("torch")


def array_kind(x):
    """NUMPY / TORCH / PYPTO / DLPACK for an array, None for anything else."""
    if isinstance(x, np.ndarray):
        return NUMPY
    if isinstance(x, Tensor):
        return PYPTO
    t = loaded_torch()
    if t is not None and isinstance(x, t.Tensor):
        return TORCH
    if hasattr(x, "__dlpack__") and not isinstance(x, type) and not isinstance(x, np.generic):
        return DLPACK
    return None


def is_array(x):
    return array_kind(x) is not None


def as_numpy_storage(data, dtype=None, copy=True):
    """(NumPy storage array, pypto dtype) for Tensor(): bf16 data is stored as uint16 bits."""
    want = _dt.to_dtype(dtype) if dtype is not None else None
    k = array_kind(data)
    if k == PYPTO:
        src, src_dt = data._data, data._dtype
    elif k == TORCH:
        torch = loaded_torch()
        t = data.detach()
        if t.device.type != "cpu":
            t = t.cpu()
        src_dt = _dt.to_dtype(t.dtype)
        src = t.view(torch.int16).numpy().view(np.uint16) if src_dt is _dt.bfloat16 else t.numpy()
    elif k in (NUMPY, DLPACK):
        if k == DLPACK:
            name, _, _ = _C.array_info(data)
            if name == "bf16":
                t = loaded_torch()
                if t is None:
                    raise ValueError("importing a bfloat16 DLPack array needs torch")
                return as_numpy_storage(t.from_dlpack(data), dtype, copy)
            data = np.from_dlpack(data)
        src = data
        src_dt = _dt.to_dtype(src.dtype)
    else:
        src = np.asarray(data)
        if src.dtype == np.float64 and want is None and not isinstance(data, np.ndarray):
            src = src.astype(np.float32)  # Python floats default to float32, like torch
        if src.dtype.kind == "i" and want is None and src.dtype not in (np.int32, np.int16, np.int8):
            src = src.astype(np.int64)
        src_dt = _dt.to_dtype(src.dtype)
    out_dt = want or src_dt
    if out_dt is src_dt:
        return (np.array(src, copy=True) if copy else src), out_dt
    # dtype conversion (always a copy)
    f = _dt.bf16_bits_to_f32(src) if src_dt is _dt.bfloat16 else src
    if out_dt is _dt.bfloat16:
        return _dt.f32_to_bf16_bits(np.asarray(f, dtype=np.float32)), out_dt
    return np.asarray(f).astype(out_dt.np), out_dt




# The pypto operations, by name, that a Tensor offers as methods. The public API (pypto/__init__.py)
# fills this in: the operations sit above tensors, which cannot import them.
OPERATIONS = {}


class Tensor:
    """A PyPTO tensor on the CPU.

    Tensor(data, dtype=None) copies `data` (a NumPy array, a torch tensor, a nested list, a scalar
    or anything with __dlpack__); pypto.from_numpy / pypto.from_torch share memory instead."""

    # metadata: set on a kernel's outputs when it was called with tensors from
    # pypto.to_pto_tensor (the seed's §5.1 bridge; pypto.pto_autograd reads it).
    __slots__ = ("_data", "_dtype", "_dl", "_autograd", "metadata", "__weakref__")

    def __init__(self, data, dtype=None):
        arr, dt = as_numpy_storage(data, dtype, copy=True)
        self._data = arr
        self._dtype = dt
        self._dl = None
        self._autograd = False
        self.metadata = None

    # --- construction without copies -------------------------------------------------------
    @classmethod
    def _wrap(cls, storage: np.ndarray, dtype: _dt.dtype) -> "Tensor":
        t = cls.__new__(cls)
        t._data = storage
        t._dtype = dtype
        t._dl = None
        t._autograd = False
        t.metadata = None
        return t

    @classmethod
    def empty(cls, shape, dtype=_dt.float32) -> "Tensor":
        dtype = _dt.to_dtype(dtype)
        return cls._wrap(np.empty(tuple(shape), dtype=dtype.np if dtype.np is not None else np.uint16), dtype)

    # --- properties ----------------------------------------------------------------------------
    @property
    def shape(self):
        return self._data.shape

    @property
    def dtype(self) -> _dt.dtype:
        return self._dtype

    @property
    def ndim(self):
        return self._data.ndim

    @property
    def strides(self):
        """Strides in elements."""
        return tuple(s // self._data.itemsize for s in self._data.strides)

    @property
    def device(self):
        return "cpu"

    def size(self, dim=None):
        return self.shape if dim is None else self.shape[dim]

    def numel(self):
        return int(self._data.size)

    def __len__(self):
        return len(self._data)

    # --- conversion ------------------------------------------------------------------------------
    def numpy(self) -> np.ndarray:
        """The data as a NumPy array: shares memory, except bfloat16 (converted to float32)."""
        if self._dtype is _dt.bfloat16:
            return _dt.bf16_bits_to_f32(self._data)
        return self._data

    def __array__(self, dtype=None, copy=None):
        a = self.numpy()
        if dtype is not None:
            a = a.astype(dtype, copy=False)
        return np.array(a, copy=True) if copy else a

    def _run_arg(self):
        """What Kernel.run receives: the storage itself, or a bf16-typed DLPack view of it."""
        if self._dtype is _dt.bfloat16:
            if self._dl is None:
                self._dl = _C.dlpack_view(self._data, "bf16")
            return self._dl
        return self._data

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        kw = {}
        if max_version is not None:
            kw["max_version"] = max_version
        if dl_device is not None:
            kw["dl_device"] = dl_device
        if copy is not None:
            kw["copy"] = copy
        return self._run_arg().__dlpack__(**kw)

    def __dlpack_device__(self):
        return (1, 0)

    def torch(self):
        import torch
        return torch.from_dlpack(self)

    def astype(self, dtype) -> "Tensor":
        return Tensor(self, dtype)

    to = astype

    # --- indexing (NumPy views) ------------------------------------------------------------------
    def __getitem__(self, key):
        r = self._data[key]
        if isinstance(r, np.ndarray):
            return Tensor._wrap(r, self._dtype)
        if self._dtype is _dt.bfloat16:
            return float(_dt.bf16_bits_to_f32(np.asarray(r)))
        return r.item()

    def __setitem__(self, key, value):
        if isinstance(value, (int, float, bool)):
            if self._dtype is _dt.bfloat16:
                self._data[key] = _dt.f32_to_bf16_bits(np.float32(value))
            else:
                self._data[key] = value
            return
        arr, _ = as_numpy_storage(value, self._dtype, copy=False)
        self._data[key] = arr

    # pypto operations as methods (eager): t.sin(), t.argmax(1), t.index_select(0, idx), ...
    def __getattr__(self, name):
        op = OPERATIONS.get(name) if not name.startswith("_") else None
        if op is not None:
            return lambda *args, **kwargs: op(self, *args, **kwargs)
        raise AttributeError(f"'pypto.Tensor' object has no attribute '{name}'")

    def __repr__(self):
        body = np.array2string(self.numpy(), separator=", ", prefix="pypto.Tensor(")
        return f"pypto.Tensor({body}, dtype={self._dtype.name})"

    def __eq__(self, other):  # elementwise comparison would surprise in `in` / `==` checks
        return self is other

    __hash__ = object.__hash__
