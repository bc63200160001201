// Kernel: lowers a tensor-level program once, then checks arguments and runs it on a backend.
#include "runtime/kernel.h"

#include "backends/cpu/codegen.h"
#include "backends/cpu/compiler.h"
#include "backends/interp/interpreter.h"
#include "exec/arg_check.h"
#include "ir/printer.h"
#include "runtime/index_checks.h"

namespace pypto::runtime {
namespace {

using ir::Error;

// Integral floats passed for integer scalars are normalised so every backend sees an int.
const RunArgs& normalised(const ir::Program& p, const RunArgs& args, RunArgs& storage) {
  bool need = false;
  for (size_t j = 0; j < p.scalars.size(); ++j)
    need |= !ir::is_float(p.scalars[j].dtype) && args.scalars[j].is_float;
  if (!need) return args;
  storage = args;
  for (size_t j = 0; j < p.scalars.size(); ++j) {
    ir::ScalarValue& v = storage.scalars[j];
    if (!ir::is_float(p.scalars[j].dtype) && v.is_float) v = ir::ScalarValue{false, int64_t(v.f), 0};
  }
  return storage;
}

}  // namespace

Kernel::Kernel(const ir::Program& tensor_program, Backend backend, const passes::PipelineOptions& options)
    : lowered_(passes::lower(tensor_program, options)),
      backend_(backend),
      written_(written_params(lowered_.isa)) {}

std::string Kernel::as_text(const std::string& level) const {
  if (level == "tensor") return ir::print(lowered_.tensor);
  if (level == "tile") return ir::print(lowered_.tile);
  if (level == "isa") return ir::print(lowered_.isa);
  if (level == "source") return cpu::generate_cpp(lowered_.isa);  // for either backend: it is inspection
  throw Error("unknown IR level '" + level + "'; valid levels are 'tensor', 'tile', 'isa', 'source'");
}

double Kernel::compile() {
  if (backend_ != Backend::Cpu) return 0;
  // mu_ guards only the members, never the code generation or the compiler run: a fork() while
  // another thread compiles must leave the child a usable kernel. compile_cpp itself makes
  // concurrent callers of one source wait for a single build.
  std::string source;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (native_) return 0;
    source = source_;
  }
  if (source.empty()) source = cpu::generate_cpp(lowered_.isa);
  cpu::CompileResult r = cpu::compile_cpp(source);
  std::lock_guard<std::mutex> l(mu_);
  source_ = std::move(source);
  if (native_) return 0;
  native_ = r.kernel;
  from_cache_ = r.from_memory || r.from_disk;
  return from_cache_ ? 0 : r.compile_seconds;
}

double Kernel::compile_profiling() {
  if (backend_ != Backend::Cpu) return 0;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (profiling_) return 0;
  }
  cpu::CompileResult r = cpu::compile_cpp(cpu::generate_cpp(lowered_.isa, /*profile=*/true));
  std::lock_guard<std::mutex> l(mu_);
  if (!profiling_) profiling_ = r.kernel;
  return r.from_memory || r.from_disk ? 0 : r.compile_seconds;
}

void Kernel::run(const RunArgs& args, cpu::RunProfile* profile) {
  const ir::Program& p = lowered_.isa;
  check_args(p, args, written_);
  RunArgs storage;
  const RunArgs& a = normalised(p, args, storage);
  check_indices(lowered_.tensor, a);
  if (backend_ == Backend::Interp) {
    interp::interpret(p, a);
    return;
  }
  std::shared_ptr<cpu::CompiledKernel> k;
  {
    std::lock_guard<std::mutex> l(mu_);
    k = profile ? profiling_ : native_;
  }
  if (!k) {
    profile ? compile_profiling() : compile();
    std::lock_guard<std::mutex> l(mu_);
    k = profile ? profiling_ : native_;
  }
  cpu::run(*k, a, profile);
}

}  // namespace pypto::runtime
