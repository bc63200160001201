// Running long C++ work (compile, lower, run) without the GIL, safely at interpreter exit and
// interruptibly by Ctrl-C.
//
// Exit: Python (<= 3.13) ends a daemon thread that takes the GIL back during shutdown with
// pthread_exit(). Its forced unwinding aborts the process ("terminate called without an active
// exception") as soon as it meets a noexcept frame, such as nb::gil_scoped_release's destructor.
// Here the GIL is taken back outside any destructor, and a thread that Python ends this way parks
// until the process exits instead of unwinding through nanobind.
#pragma once
#include <Python.h>
#include <cxxabi.h>
#include <nanobind/nanobind.h>
#include <unistd.h>

#include <optional>
#include <type_traits>
#include <utility>

#include "exec/interrupt.h"

namespace pypto::bindings {

// The parked thread keeps its Python references: nanobind's leak report at exit would only be noise.
[[noreturn]] inline void park_forever() {
  nanobind::set_leak_warnings(false);
  for (;;) pause();
}

inline bool python_finalizing() {
#if PY_VERSION_HEX >= 0x030D0000
  return Py_IsFinalizing();
#else
  return _Py_IsFinalizing();
#endif
}

inline void restore_gil(PyThreadState* ts) {
  if (python_finalizing()) park_forever();
  try {
    PyEval_RestoreThread(ts);
  } catch (abi::__forced_unwind&) {
    park_forever();  // never leaves the handler, so the unwinding is neither finished nor lost
  }
}

// f() with the GIL released; the GIL is held again when it returns or throws.
template <class F>
decltype(auto) without_gil(F&& f) {
  PyThreadState* ts = PyEval_SaveThread();
  if constexpr (std::is_void_v<decltype(f())>) {
    try {
      f();
    } catch (...) {
      restore_gil(ts);
      throw;
    }
    restore_gil(ts);
  } else {
    std::decay_t<decltype(f())> result{};  // results here are plain values (seconds, counts)
    try {
      result = f();
    } catch (...) {
      restore_gil(ts);
      throw;
    }
    restore_gil(ts);
    return result;
  }
}

// Like without_gil, and on Python's main thread a SIGINT stops the work (kernels poll between loop
// iterations, the compiler driver while it waits): Python's own handler then runs, normally raising
// KeyboardInterrupt; if it does not raise, KeyboardInterrupt is raised anyway since the work is
// incomplete. A SIGINT that came before the scope's handler was installed only reached Python's
// handler: the pending signal is handled here, before the work starts, or the work would run to
// its end (a kernel of unbounded length, forever) with the interrupt waiting behind it.
template <class F>
decltype(auto) interruptible_without_gil(F&& f) {
  std::optional<runtime::SigintScope> scope;
  if (_PyOS_IsMainThread()) scope.emplace();
  if (scope && scope->active() && PyErr_CheckSignals() != 0) {
    scope.reset();
    throw nanobind::python_error();
  }
  try {
    return without_gil(std::forward<F>(f));
  } catch (const runtime::Interrupted&) {
    scope.reset();
    if (PyErr_CheckSignals() == 0) PyErr_SetNone(PyExc_KeyboardInterrupt);
    throw nanobind::python_error();
  }
}

}  // namespace pypto::bindings
