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

namespace pypto::sim {
struct SimReport;
}
namespace pypto::target {
struct NpuTarget;
}

namespace pypto::runtime {

// Sim: the NPU simulator (backends/sim) on the program with sync flags inserted.
enum class Backend { Interp, Cpu, Sim };

class Kernel {
 public:
  Kernel(const ir::Program& tensor_program, Backend backend, const passes::PipelineOptions& options);
  const passes::Lowered& lowered() const { return lowered_; }
  Backend backend() const { return backend_; }
  // levels: "tensor", "tile", "isa", "source" (generated C++; cpu backend only), "sim" (the ISA
  // with the sync flags the simulator runs; sim backend only)
  std::string as_text(const std::string& level) const;
  // Checks the arguments against the program's params (count, dtype, shape), then runs.
  // With `profile` (cpu backend), runs the profiling variant of the kernel (compiled on first
  // use) and records each nest's span and each parallel chunk's (cpu/compiler.h); the
  // interpreter records nothing.
  void run(const RunArgs& args, cpu::RunProfile* profile = nullptr);
  // run() in two steps, for callers that treat a failed check differently from a failed run
  // (the bindings' fast call path): checked() makes every check of run() (arguments, run-time
  // indices) and returns the arguments to run with (`args`, or `storage` holding them with
  // integral floats and dimension symbols normalised); run_checked() runs them unchecked.
  const RunArgs& checked(const RunArgs& args, RunArgs& storage) const;
  void run_checked(const RunArgs& checked_args, cpu::RunProfile* profile = nullptr);
  // Shapes of the Output params for inputs (the other params, in order) of these shapes: dynamic
  // extents evaluated from the dimension symbols the inputs bind.
  std::vector<std::vector<int64_t>> output_shapes(
      const std::vector<std::vector<int64_t>>& input_shapes) const;
  // Compiles now (cpu); returns seconds spent, 0 when it came from a cache.
  double compile();
  // The profiling variant (nest timer hooks); seconds spent, 0 when it came from a cache.
  double compile_profiling();
  bool compiled_from_cache() const { return from_cache_; }
  // Sim backend: the simulated NPU (docs/npu_sim.md text, read on top of the built-in one and
  // PYPTO_SIM_TARGET), whether runs record the timeline, and the report of the last run (null
  // before one).
  void set_sim_target(const std::string& description);
  void set_sim_timeline(bool on);
  std::shared_ptr<const sim::SimReport> last_sim_report() const;
  // Per tensor param, whether the kernel writes it (exec/arg_check.h).
  const std::vector<bool>& written() const { return written_; }

 private:
  passes::Lowered lowered_;
  Backend backend_;
  std::vector<bool> written_;
  std::string source_;
  std::shared_ptr<cpu::CompiledKernel> native_, profiling_;
  bool from_cache_ = false;
  // Sim: the ISA with flags, with single and (double_buffer) ping-pong buffers; the one that
  // fits the target runs.
  std::shared_ptr<const ir::Program> sim_program_;
  // The simulator lowers again for each target: tiles from its memories unless given.
  ir::Program sim_source_;
  passes::PipelineOptions sim_options_;
  std::shared_ptr<const target::NpuTarget> sim_target_;
  std::shared_ptr<const sim::SimReport> sim_report_;
  bool sim_timeline_ = false;
  mutable std::mutex mu_;
};

}  // namespace pypto::runtime
