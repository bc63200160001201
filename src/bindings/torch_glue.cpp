// pypto._torch_glue: torch tensors read and made through libtorch's C++ API for the C++ call
// path of jit kernels (torch_glue.h), where each Python attribute costs about 50 ns and
// torch.empty's argument parser most of a microsecond. Built only where torch is installed at
// build time (CMakeLists.txt), and used only with the torch version it was built against (jit.py).
#include "bindings/torch_glue.h"

#include <ATen/PythonTorchFunctionTLS.h>
#include <ATen/core/grad_mode.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_native.h>
#include <ATen/record_function.h>
#include <c10/core/impl/TorchDispatchModeTLS.h>
#include <torch/csrc/Dtype.h>
#include <torch/csrc/DynamicTypes.h>
#include <torch/csrc/autograd/python_variable.h>

namespace pypto::bindings {
namespace {

int read(PyObject* o, TorchTensorView* v) noexcept {
  try {
    if (!THPVariable_Check(o)) return 0;
    const at::Tensor& t = THPVariable_Unpack(o);
    if (!t.defined() || !t.is_cpu() || t.layout() != at::kStrided || !t.has_storage() || t.is_neg() ||
        t.is_conj())
      return 0;
    const c10::DispatchKeySet ks = t.key_set();
    if (ks.has(c10::DispatchKey::Python) || ks.has(c10::DispatchKey::Functionalize) ||
        ks.has_any(c10::functorch_transforms_ks))
      return 0;
    if (t.requires_grad() && at::GradMode::is_enabled()) return 0;
    const int64_t rank = t.dim();
    if (rank > kTorchGlueMaxRank) return 0;
    v->rank = int(rank);
    for (int64_t d = 0; d < rank; ++d) {
      v->shape[d] = t.size(d);
      v->strides[d] = t.stride(d);
    }
    v->data = t.data_ptr();
    v->dtype = reinterpret_cast<PyObject*>(torch::getTHPDtype(t.scalar_type()));
    return 1;
  } catch (...) {
    return 0;
  }
}

PyObject* empty(const int64_t* shape, int rank, PyObject* dtype, void** data) noexcept {
  try {
    if (!THPDtype_Check(dtype) || at::impl::torch_function_mode_enabled() ||
        c10::impl::TorchDispatchModeTLS::stack_len() > 0)
      return nullptr;
    const c10::IntArrayRef size(shape, size_t(rank));
    const at::ScalarType st = reinterpret_cast<THPDtype*>(dtype)->scalar_type;
    // The CPU kernel of aten::empty itself (its fill of uninitialised memory under deterministic
    // algorithms included), past the dispatcher (~0.15 us of an 8x8 call): with no mode active a
    // CPU factory call dispatches there; torch.profiler's record functions need the dispatcher.
    at::Tensor t = at::hasCallbacks()
                       ? at::empty(size, at::TensorOptions().dtype(st))
                       : at::native::empty_cpu(size, st, std::nullopt, std::nullopt, std::nullopt);
    *data = t.data_ptr();
    PyObject* out = THPVariable_Wrap(std::move(t));
    if (!out) PyErr_Clear();
    return out;
  } catch (...) {
    return nullptr;
  }
}

TorchGlue g_glue = {kTorchGlueVersion, &read, &empty};

PyModuleDef g_module = {PyModuleDef_HEAD_INIT, "_torch_glue",
                        "torch tensors read and made through libtorch for PyPTO's C++ call path", -1};

}  // namespace
}  // namespace pypto::bindings

PyMODINIT_FUNC PyInit__torch_glue() {
  using namespace pypto::bindings;
  if (!THPVariableClass) {
    PyErr_SetString(PyExc_ImportError, "pypto._torch_glue: import torch first");
    return nullptr;
  }
  PyObject* m = PyModule_Create(&g_module);
  if (!m) return nullptr;
  if (PyModule_AddObject(m, "api", PyCapsule_New(&g_glue, kTorchGlueCapsule, nullptr)) < 0 ||
      PyModule_AddStringConstant(m, "torch_version", PYPTO_TORCH_VERSION) < 0) {
    Py_DECREF(m);
    return nullptr;
  }
  return m;
}
