// Compiles generated C++ into a shared object with the system compiler and loads it.
// Compiler: $PYPTO_CXX, else `c++`. Flags: -O3 -march=native -std=c++17 -fPIC -shared.
// Cache: in memory, then on disk under $PYPTO_CACHE_DIR (default ~/.cache/pypto), keyed by a hash
// of the source, the compiler's identity (`c++ --version`), the flags and PTO_HEADERS_VERSION.
// Writes go to a temporary file renamed into place, so concurrent processes never see a partial
// object; an entry that fails to load or fails its checksum is rebuilt.
#pragma once
#include <memory>
#include <string>

#include "runtime/tensor_arg.h"

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

// The directory holding the installed include/pto headers (set by the Python package at import).
void set_include_dir(const std::string& dir);
std::string include_dir();

}  // namespace pypto::cpu
