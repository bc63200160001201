// Kernel: lowers a tensor-level program once, then checks arguments and runs it on a backend.
#include "runtime/kernel.h"

#include <stdexcept>

#include "backends/cpu/codegen.h"
#include "backends/cpu/compiler.h"
#include "backends/interp/interpreter.h"
#include "backends/sim/simulator.h"
#include "exec/arg_check.h"
#include "ir/printer.h"
#include "runtime/index_checks.h"

namespace pypto::runtime {
namespace {

using ir::Error;

// Integral floats passed for integer scalars are normalised so every backend sees an int; the
// dimension symbols are bound from the argument shapes.
const RunArgs& normalised(const ir::Program& p, const RunArgs& args, RunArgs& storage) {
  bool need = p.has_dynamic_dims();
  for (size_t j = 0; j < p.caller_scalars(); ++j)
    need |= !ir::is_float(p.scalars[j].dtype) && args.scalars[j].is_float;
  if (!need) return args;
  storage = args;
  bind_dim_symbols(p, storage.tensors, storage.scalars);
  for (size_t j = 0; j < p.scalars.size(); ++j) {
    ir::ScalarValue& v = storage.scalars[j];
    if (!ir::is_float(p.scalars[j].dtype) && v.is_float) v = ir::ScalarValue{false, int64_t(v.f), 0};
  }
  return storage;
}

// The simulated NPU multiplies tiles only: no whole-matrix MMATMUL in its programs, and a
// convolution is its taps' tile products (no padded copy for an implicit GEMM).
passes::PipelineOptions backend_options(passes::PipelineOptions o, Backend backend) {
  if (backend == Backend::Sim) {
    o.memory_matmul = false;
    o.composite_lowerings[ir::Opcode::CONV2D] = passes::lower_conv2d_per_tap;
  }
  return o;
}

}  // namespace

Kernel::Kernel(const ir::Program& tensor_program, Backend backend, const passes::PipelineOptions& options)
    : lowered_(passes::lower(tensor_program, backend_options(options, backend))),
      backend_(backend),
      written_(written_params(lowered_.isa)) {
  if (backend_ == Backend::Sim) {
    sim_source_ = tensor_program;
    sim_options_ = backend_options(options, backend);
    set_sim_target("");
  }
}

void Kernel::set_sim_target(const std::string& description) {
  std::shared_ptr<const target::NpuTarget> t;
  try {
    target::NpuTarget base = target::npu_target_from_env();
    t = std::make_shared<const target::NpuTarget>(target::parse_npu_target(description, base));
  } catch (const std::invalid_argument& e) {
    throw Error(e.what());
  }
  // Tiles as given, else from the target's memories (target::npu_tile_sizes), halved until the
  // double-buffered program fits. Ping-pong buffers where they fit, else single ones; a program
  // whose single buffers do not fit (at the smallest tiles) fails here, naming the tile.
  passes::PipelineOptions o = sim_options_;
  const bool given =
      o.tile_rows > 0 || o.tile_cols > 0 || o.mm_tile_m > 0 || o.mm_tile_n > 0 || o.mm_tile_k > 0;
  target::NpuTileSizes sizes = target::npu_tile_sizes(*t);
  passes::Lowered low;
  std::shared_ptr<const ir::Program> program;
  for (;;) {
    if (!given) {  // the shapes that do not change values (columns and k stay the pipeline's)
      o.tile_rows = sizes.rows;
      o.mm_tile_m = sizes.m;
      o.mm_tile_n = sizes.n;
    }
    low = passes::lower(sim_source_, o);
    if (o.double_buffer) {
      auto doubled = std::make_shared<const ir::Program>(sim::insert_sync(sim::ping_pong(low.isa, t->cores)));
      try {
        sim::place_tiles(*doubled, *t);
        program = doubled;
        break;
      } catch (const Error&) {
        if (!given && sizes.halve()) continue;
      }
    }
    auto single = std::make_shared<const ir::Program>(sim::insert_sync(low.isa));
    try {
      sim::place_tiles(*single, *t);
      program = single;
      break;
    } catch (const Error&) {
      if (given || o.double_buffer || !sizes.halve()) throw;
    }
  }
  std::lock_guard<std::mutex> l(mu_);
  sim_target_ = std::move(t);
  sim_program_ = std::move(program);
  lowered_ = std::move(low);
}

void Kernel::set_sim_timeline(bool on) {
  std::lock_guard<std::mutex> l(mu_);
  sim_timeline_ = on;
}

std::shared_ptr<const sim::SimReport> Kernel::last_sim_report() const {
  std::lock_guard<std::mutex> l(mu_);
  return sim_report_;
}

std::string Kernel::as_text(const std::string& level) const {
  if (level == "tensor") return ir::print(lowered_.tensor);
  if (level == "tile") return ir::print(lowered_.tile);
  if (level == "isa") return ir::print(lowered_.isa);
  if (level == "source") return cpu::generate_cpp(lowered_.isa);  // for either backend: it is inspection
  if (level == "sim") {
    std::lock_guard<std::mutex> l(mu_);
    if (!sim_program_)
      throw Error("IR level 'sim' is the simulator's program: make the kernel with backend='sim'");
    return ir::print(*sim_program_);
  }
  throw Error("unknown IR level '" + level + "'; valid levels are 'tensor', 'tile', 'isa', 'source', 'sim'");
}

std::vector<std::vector<int64_t>> Kernel::output_shapes(
    const std::vector<std::vector<int64_t>>& input_shapes) const {
  return ir::output_shapes(lowered_.tensor, input_shapes);
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
  cpu::CompileResult r = cpu::compile_cpp(source, /*inline_gemm=*/false, /*lazy_wide_rows=*/true);
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
  RunArgs storage;
  run_checked(checked(args, storage), profile);
}

const RunArgs& Kernel::checked(const RunArgs& args, RunArgs& storage) const {
  const ir::Program& p = lowered_.isa;
  check_args(p, args, written_);
  const RunArgs& a = normalised(p, args, storage);
  check_indices(lowered_.tensor, a);
  return a;
}

void Kernel::run_checked(const RunArgs& a, cpu::RunProfile* profile) {
  const ir::Program& p = lowered_.isa;
  if (backend_ == Backend::Interp) {
    interp::interpret(p, a);
    return;
  }
  if (backend_ == Backend::Sim) {
    std::shared_ptr<const target::NpuTarget> t;
    std::shared_ptr<const ir::Program> program;
    bool timeline;
    {
      std::lock_guard<std::mutex> l(mu_);
      t = sim_target_;
      program = sim_program_;
      timeline = sim_timeline_;
    }
    auto report = std::make_shared<const sim::SimReport>(sim::simulate(*program, a, *t, timeline));
    std::lock_guard<std::mutex> l(mu_);
    sim_report_ = std::move(report);
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
  try {
    cpu::run(*k, a, profile);
  } catch (const cpu::WideRowsMissing&) {
    // Rows wider than every fused tile: the kernel was compiled without their unfused code and
    // returned before touching any data. Compile it in full (once) and run that.
    std::string source;
    {
      std::lock_guard<std::mutex> l(mu_);
      source = source_;
    }
    std::shared_ptr<cpu::CompiledKernel> full = cpu::compile_cpp(source).kernel;
    {
      std::lock_guard<std::mutex> l(mu_);
      native_ = full;
    }
    cpu::run(*full, a, profile);
  }
}

}  // namespace pypto::runtime
