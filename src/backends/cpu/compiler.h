// Compiles generated C++ into a shared object with the system compiler and loads it.
// Compiler: $PYPTO_CXX, else `c++`, run with a time limit ($PYPTO_COMPILE_TIMEOUT seconds, default
// 600). Flags: -O3 -march=native -std=c++17 -fPIC -shared plus $PYPTO_CXXFLAGS, which may not
// change floating-point semantics or the ABI (refused with an error).
// Cache: in memory, then on disk under a private directory (kernel_cache.h), keyed by a hash of the
// source, the compiler's identity (`c++ --version`), the flags and the header tree. Concurrent
// callers of one key, threads or processes, wait for a single build.
#pragma once
#include <memory>
#include <string>

#include "exec/tensor_arg.h"

namespace pypto::cpu {

struct CompiledKernel;  // opaque: the loaded object and its entry point

struct CompileResult {
  std::shared_ptr<CompiledKernel> kernel;
  bool from_memory = false, from_disk = false;
  double compile_seconds = 0;
};

// Throws ir::Error if no compiler is found ("no C++ compiler ... set PYPTO_CXX or use
// backend='interp'") or if compilation fails (message includes the compiler's output).
CompileResult compile_cpp(const std::string& source);

// Runs the kernel on the runtime's thread pool.
void run(const CompiledKernel& k, const runtime::RunArgs& args);

// The directory holding the include/pto headers: set_include_dir's, else $PYPTO_INCLUDE_DIR, else
// found beside the library at run time (<package>/include, or the source tree's include/).
void set_include_dir(const std::string& dir);
std::string include_dir();

}  // namespace pypto::cpu
