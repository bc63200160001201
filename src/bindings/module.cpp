// The pypto._C extension module: ties the binding files together and turns the core's
// pypto::ir::Error into the Python exception pypto.PyptoError (a ValueError).
#include <nanobind/nanobind.h>
#include <cstdlib>
#include <string>

#include "ir/types.h"

namespace nb = nanobind;

namespace pypto::bindings {
void bind_ir(nb::module_& m);
void bind_builder(nb::module_& m);
void bind_runtime(nb::module_& m);
void bind_elem(nb::module_& m);
void bind_sim(nb::module_& m);
void bind_dispatch(nb::module_& m);
}  // namespace pypto::bindings

NB_MODULE(_C, m) {
  m.doc() = "PyPTO core: IR builder, passes, interpreter and CPU backend";
  // pypto releases its compiled kernels at exit (jit.py); objects the program itself still holds
  // when the interpreter stops (a traceback, torch.compile's caches) are not leaks of the
  // bindings, so nanobind's report of them is off unless PYPTO_LEAK_WARNINGS=1 asks for it.
  {
    const char* w = std::getenv("PYPTO_LEAK_WARNINGS");
    nb::set_leak_warnings(w != nullptr && std::string(w) == "1");
  }
  static nb::object error_type = nb::steal(PyErr_NewExceptionWithDoc(
      "pypto.PyptoError", "An error in a PyPTO kernel: shapes, dtypes, unsupported constructs, or IR.",
      PyExc_ValueError, nullptr));
  m.attr("PyptoError") = error_type;
  nb::register_exception_translator(
      [](const std::exception_ptr& p, void*) {
        try {
          std::rethrow_exception(p);
        } catch (const pypto::ir::Error& e) {
          PyErr_SetString(error_type.ptr(), e.what());
        }
      },
      nullptr);
  pypto::bindings::bind_ir(m);
  pypto::bindings::bind_builder(m);
  pypto::bindings::bind_runtime(m);
  pypto::bindings::bind_elem(m);
  pypto::bindings::bind_sim(m);
  pypto::bindings::bind_dispatch(m);
}
