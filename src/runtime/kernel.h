// A compiled kernel: one tensor-level program lowered once and ready to run on a backend.
#pragma once
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "exec/tensor_arg.h"
#include "passes/pipeline.h"

namespace pypto::cpu {
struct CompiledKernel;
struct RunProfile;
}  // namespace pypto::cpu

namespace pypto::runtime {

enum class Backend { Interp, Cpu };

class Kernel {
 public:
  Kernel(const ir::Program& tensor_program, Backend backend, const passes::PipelineOptions& options);
  const passes::Lowered& lowered() const { return lowered_; }
  Backend backend() const { return backend_; }
  // levels: "tensor", "tile", "isa", "source" (generated C++; cpu backend only)
  std::string as_text(const std::string& level) const;
  // Checks the arguments against the program's params (count, dtype, shape), then runs.
  // With `profile` (cpu backend), runs the profiling variant of the kernel (compiled on first
  // use) and records each nest's span and each parallel chunk's (cpu/compiler.h); the
  // interpreter records nothing.
  void run(const RunArgs& args, cpu::RunProfile* profile = nullptr);
  // Compiles now (cpu); returns seconds spent, 0 when it came from a cache.
  double compile();
  // The profiling variant (nest timer hooks); seconds spent, 0 when it came from a cache.
  double compile_profiling();
  bool compiled_from_cache() const { return from_cache_; }
  // Per tensor param, whether the kernel writes it (exec/arg_check.h).
  const std::vector<bool>& written() const { return written_; }

 private:
  passes::Lowered lowered_;
  Backend backend_;
  std::vector<bool> written_;
  std::string source_;
  std::shared_ptr<cpu::CompiledKernel> native_, profiling_;
  bool from_cache_ = false;
  std::mutex mu_;
};

}  // namespace pypto::runtime
