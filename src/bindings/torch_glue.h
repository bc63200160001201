// The C interface between _C's fast call path (bind_dispatch.cpp) and pypto._torch_glue
// (torch_glue.cpp), an optional module built against libtorch: jit.py hands its PyCapsule
// (named kTorchGlueCapsule) to _C.bind_torch. Plain C types only: the two modules are built
// with different compile options (torch's C++ standard and ABI flags).
#pragma once
#include <Python.h>

#include <cstdint>

namespace pypto::bindings {

constexpr int kTorchGlueVersion = 1;
constexpr const char* kTorchGlueCapsule = "pypto._torch_glue.api";
constexpr int kTorchGlueMaxRank = 8;

struct TorchTensorView {
  void* data;
  PyObject* dtype;  // borrowed: the torch.dtype (torch keeps them for the process's life)
  int rank;
  int64_t shape[kTorchGlueMaxRank];
  int64_t strides[kTorchGlueMaxRank];  // in elements
};

struct TorchGlue {
  int version;  // kTorchGlueVersion
  // A plain strided CPU tensor's layout: 1; 0 when the fast path must leave it to Python
  // (autograd records the call, another device or layout, a lazily negated or conjugated view,
  // a wrapper of torch.func or functionalization, a rank above kTorchGlueMaxRank). Never raises.
  int (*read)(PyObject* tensor, TorchTensorView* out);
  // torch.empty(shape, dtype=dtype) as a new reference, its data pointer in *data; null (no
  // Python error set) when a torch function or dispatch mode is active, which the Python call
  // of torch.empty must see.
  PyObject* (*empty)(const int64_t* shape, int rank, PyObject* dtype, void** data);
};

}  // namespace pypto::bindings
