"""NumPy / PyTorch / DLPack glue: recognising arrays, their dtypes and shapes, the argument a
kernel run receives, allocating outputs in the caller's array type, and conversions."""
from __future__ import annotations

import numpy as np

from . import _C
from . import dtypes as _dt
from . import out_pool
from .errors import AutogradError, PyptoError
# Array kinds and the conversion into a Tensor's storage live in tensor.py (Tensor() needs them);
# the glue below and its callers use them from here too.
from .tensor import DLPACK, NUMPY, PYPTO, TORCH, Tensor, array_kind, as_numpy_storage, is_array, loaded_torch

_torch = loaded_torch


def array_info(x, what="argument"):
    """(pypto dtype, shape tuple) of an array; PyptoError for unsupported dtypes or devices."""
    k = array_kind(x)
    try:
        if k == NUMPY:
            return _dt.to_dtype(x.dtype), x.shape
        if k == PYPTO:
            return x._dtype, x._data.shape
        if k == TORCH:
            if x.device.type != "cpu":
                raise PyptoError(f"{what} is a torch tensor on device '{x.device}': only CPU tensors are "
                                 "supported (move it with .cpu())")
            if x.layout != _torch().strided:
                raise PyptoError(f"{what} is a torch tensor with layout {x.layout}: only dense (strided) "
                                 "tensors are supported (convert it with .to_dense())")
            return _dt.to_dtype(x.dtype), tuple(x.shape)
        if k == DLPACK:
            name, shape, dev = _C.array_info(x)
            if dev != "cpu":
                raise PyptoError(f"{what} lives on a non-CPU device: only CPU arrays are supported")
            return _dt.to_dtype(name), tuple(shape)
    except ValueError as e:
        if isinstance(e, PyptoError):
            raise
        raise PyptoError(f"{what} has an unsupported dtype: {e}") from None
    raise PyptoError(f"{what} is not an array: {type(x).__name__}")


def array_key(x):
    """What a kernel specialises on for an array: its library, dtype, shape and device."""
    t = type(x)
    if t is np.ndarray:
        return (t, x.dtype, x.shape)
    if t is Tensor:
        return (t, x._dtype, x._data.shape)
    tm = _torch()
    if tm is not None and isinstance(x, tm.Tensor):
        return (TORCH, x.dtype, x.shape, x.device)
    if isinstance(x, np.ndarray):
        return (np.ndarray, x.dtype, x.shape)
    if isinstance(x, Tensor):
        return (Tensor, x._dtype, x._data.shape)
    return (t,) + tuple(_C.array_info(x))


def run_arg(x):
    """What Kernel.run receives for a caller's array (no copies)."""
    t = type(x)
    if t is np.ndarray:
        return x
    if t is Tensor or isinstance(x, Tensor):
        return x._run_arg()
    tm = _torch()
    if tm is not None and isinstance(x, tm.Tensor):
        return (x.data_ptr(), x.stride())
    return x


def _torch_arg(x):
    if x.is_neg() or x.is_conj():
        # A lazily negated (torch._neg_view) or conjugated view: its memory holds the un-negated
        # values. Read the resolved copy, kept alive by the tuple's third item.
        x = x.resolve_conj().resolve_neg()
        return (x.data_ptr(), x.stride(), x)
    return (x.data_ptr(), x.stride())


def check_torch_written(x, what, recording=False):
    """Refuse, as torch's own in-place operations do, a kernel write that autograd could not see
    or that would land in the wrong values. `recording`: the call is being recorded by autograd
    (which sees the write: only a leaf is refused then)."""
    torch = _torch()
    if x.requires_grad and (recording or torch.is_grad_enabled()):
        if x.is_leaf:
            raise AutogradError(f"{what}: the kernel writes a leaf tensor that requires grad (torch refuses "
                                "in-place operations on it too); write under torch.no_grad() or pass a tensor "
                                "that does not require grad")
        if not recording:
            raise AutogradError(f"{what}: the kernel writes a tensor that requires grad, a write autograd "
                                "cannot record; write under torch.no_grad() or into a tensor that does not "
                                "require grad")
    if x.is_neg() or x.is_conj():
        raise PyptoError(f"{what}: the kernel writes a lazily negated or conjugated view (torch._neg_view, "
                         ".conj()); pass x.resolve_neg() / x.resolve_conj()")


def bump_versions(xs):
    """Tell autograd that the kernel wrote these tensors (as an in-place torch op would), so a
    backward that saved one of them raises instead of using the new values."""
    inc = _torch().autograd.graph.increment_version
    for x in xs:
        inc(x)


def _pypto_arg(x):
    return x._run_arg()


def _torch_arg_dynamic(x):
    """(data pointer, strides, keep, shape): a param with dynamic dims needs the shape too."""
    if x.is_neg() or x.is_conj():
        x = x.resolve_conj().resolve_neg()
    return (x.data_ptr(), x.stride(), x, tuple(x.shape))


def run_converter(kind, dynamic=False):
    """A function array -> Kernel.run entry for arrays of `kind`, or None for "pass as is".
    Torch tensors go as (data pointer, strides): their dtype and shape were matched by the
    signature key, and DLPack export is slow (with dynamic dims the shape goes along)."""
    if kind == TORCH:
        return _torch_arg_dynamic if dynamic else _torch_arg
    if kind == PYPTO:
        return _pypto_arg
    return None


def _contiguous_strides(shape):
    st, s = [], 1
    for n in reversed(shape):
        st.append(s)
        s *= n
    return tuple(reversed(st))


def make_allocator(kind, shape, dtype: _dt.dtype, dynamic=False):
    """A function () -> (object returned to the caller, object passed to Kernel.run). dynamic: the
    param has dynamic dims (a torch output goes with its shape)."""
    shape = tuple(shape)
    if kind == TORCH:
        torch = _torch()
        tdt = getattr(torch, dtype.name)
        empty = torch.empty
        strides = _contiguous_strides(shape)
        if dynamic:
            def alloc():
                o = empty(shape, dtype=tdt)
                return o, (o.data_ptr(), strides, o, shape)
            return alloc

        def alloc():
            o = empty(shape, dtype=tdt)
            return o, (o.data_ptr(), strides)
        return alloc
    if kind in (NUMPY, DLPACK) and dtype.np is not None:
        npdt = dtype.np
        # A large result from a kept slab (out_pool.py): no page faults and zero-fill per call.
        empty = out_pool.empty if int(np.prod(shape, dtype=np.int64)) * np.dtype(npdt).itemsize >= out_pool.MIN_BYTES else np.empty

        def alloc():
            o = empty(shape, npdt)
            return o, o
        return alloc

    def alloc():  # pypto.Tensor (also NumPy callers' bfloat16 results: NumPy has no bf16)
        o = Tensor.empty(shape, dtype)
        return o, o._run_arg()
    return alloc


def from_numpy(a: np.ndarray) -> Tensor:
    """A pypto.Tensor sharing the NumPy array's memory."""
    if not isinstance(a, np.ndarray):
        raise TypeError(f"from_numpy expects a numpy.ndarray, got {type(a).__name__}")
    return Tensor._wrap(a, _dt.to_dtype(a.dtype))


def from_torch(t) -> Tensor:
    """A pypto.Tensor sharing the (CPU) torch tensor's memory."""
    arr, dt = as_numpy_storage(t, None, copy=False)
    return Tensor._wrap(arr, dt)


def to_torch(x):
    """A torch tensor sharing memory with a pypto.Tensor, NumPy array or DLPack array."""
    import torch
    if isinstance(x, torch.Tensor):
        return x
    if isinstance(x, np.ndarray):
        return torch.from_numpy(x)
    return torch.from_dlpack(x)


def to_numpy(x) -> np.ndarray:
    if isinstance(x, np.ndarray):
        return x
    if isinstance(x, Tensor):
        return x.numpy()
    t = _torch()
    if t is not None and isinstance(x, t.Tensor):
        x = x.detach().cpu()
        return x.float().numpy() if x.dtype == t.bfloat16 else x.numpy()
    return np.from_dlpack(x)
