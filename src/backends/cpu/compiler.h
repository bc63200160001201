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
#include <vector>

#include "exec/perf_counters.h"
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
// A kernel with a large f32 matmul calls the shared GEMM library (PYPTO_SHARED_GEMM) unless
// `inline_gemm`, which compiles the GEMM into the kernel. `lazy_wide_rows`: a kernel with rows
// wider than its dynamic row groups' tiles is compiled without them (codegen.h); run() then
// throws WideRowsMissing for a call that needs them.
CompileResult compile_cpp(const std::string& source, bool inline_gemm = false, bool lazy_wide_rows = false);

// Builds the shared GEMM library for this machine, compiler and headers into the package's
// prebuilt/ directory (kernel_cache.h, prebuilt_dir), where compile_cpp finds it when the kernel
// cache lacks it; removes that directory's other entries. Returns the library's path; throws
// ir::Error when the directory cannot be made or the compile fails. `make build` calls it.
std::string prebuild_shared_gemm();

// Thrown by run() for a kernel compiled with lazy wide rows when the call needs those rows; the
// kernel touched no data. The caller compiles the source without lazy_wide_rows and runs that.
struct WideRowsMissing {};

// What a profiled run records (steady_clock nanoseconds, the clock of Python's perf_counter_ns
// on Linux): each nest's span on the calling thread, and each chunk of a parallel loop on the
// thread that ran it, tagged with the nest it belongs to.
struct ProfileSpan {
  int32_t nest = -1;
  int64_t thread = 0;  // the OS thread id
  int64_t begin_ns = 0, end_ns = 0;
};
struct RunProfile {
  std::vector<ProfileSpan> nests, chunks;
  // Event counts of the run (exec/perf_counters.h): the calling thread over the whole run, plus
  // each worker thread over the parallel chunks it ran.
  exec::CounterTotals counters;
};

// Runs the kernel on the runtime's thread pool. With `profile` (the kernel should be the profiling
// variant, whose nest hooks it records), also records the spans above.
void run(const CompiledKernel& k, const runtime::RunArgs& args, RunProfile* profile = nullptr);

// The directory holding the include/pto headers: set_include_dir's, else $PYPTO_INCLUDE_DIR, else
// found beside the library at run time (<package>/include, or the source tree's include/).
void set_include_dir(const std::string& dir);
// Compiles the C++ file `source_path` into `out_path` with the compiler and flags compile_cpp uses
// (a shared object, or with shared=false an executable); throws ir::Error with the compiler's
// output on failure. No cache: for exports (export.h).
void compile_file(const std::string& source_path, const std::string& out_path, bool shared);

// A short hash of this CPU's model and feature flags (part of every cache key), and the cache
// directory (created if missing): per-machine records such as autotune results live there too.
std::string host_cpu_key();
std::string cache_dir();
std::string include_dir();

}  // namespace pypto::cpu
