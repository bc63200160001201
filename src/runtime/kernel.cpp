// Kernel: lowers a tensor-level program once, then checks arguments and runs it on a backend.
#include "runtime/kernel.h"
#include "ir/number_text.h"

#include <cmath>

#include "backends/cpu/codegen.h"
#include "backends/cpu/compiler.h"
#include "backends/interp/interpreter.h"
#include "ir/printer.h"

namespace pypto::runtime {
namespace {

using ir::Error;

std::string type_text(ir::DType t, const std::vector<int64_t>& shape) {
  std::string s = std::string(ir::dtype_name(t)) + "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

void check_args(const ir::Program& p, const RunArgs& args) {
  if (args.tensors.size() != p.params.size())
    throw Error("kernel '" + p.name + "' takes " + std::to_string(p.params.size()) + " tensor argument" +
                (p.params.size() == 1 ? "" : "s") + ", got " + std::to_string(args.tensors.size()));
  for (size_t i = 0; i < p.params.size(); ++i) {
    const ir::Buffer& b = *p.params[i];
    const TensorArg& t = args.tensors[i];
    // Messages are built only on failure: this check runs on every call of a cached kernel.
    auto who = [&] { return "argument " + std::to_string(i + 1) + " ('" + b.name + "')"; };
    if (t.dtype != b.dtype || t.shape != b.shape)
      throw Error(who() + ": expected " + type_text(b.dtype, b.shape) + ", got " +
                  type_text(t.dtype, t.shape));
    if (t.strides.size() != t.shape.size())
      throw Error(who() + ": has " + std::to_string(t.strides.size()) + " strides for " +
                  std::to_string(t.shape.size()) + " dimensions");
    if (!t.data && b.numel() > 0) throw Error(who() + ": null data pointer");
  }
  if (args.scalars.size() != p.scalars.size())
    throw Error("kernel '" + p.name + "' takes " + std::to_string(p.scalars.size()) + " scalar argument" +
                (p.scalars.size() == 1 ? "" : "s") + ", got " + std::to_string(args.scalars.size()));
  for (size_t j = 0; j < p.scalars.size(); ++j) {
    const ir::ScalarParam& s = p.scalars[j];
    const ir::ScalarValue& v = args.scalars[j];
    if (!ir::is_float(s.dtype) && v.is_float && v.f != std::floor(v.f))
      throw Error("scalar argument '" + s.name + "': expected an integer (" +
                  std::string(ir::dtype_name(s.dtype)) + "), got " + ir::format_g(v.f));
  }
}

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
    : lowered_(passes::lower(tensor_program, options)), backend_(backend) {}

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

void Kernel::run(const RunArgs& args) {
  const ir::Program& p = lowered_.isa;
  check_args(p, args);
  RunArgs storage;
  const RunArgs& a = normalised(p, args, storage);
  if (backend_ == Backend::Interp) {
    interp::interpret(p, a);
    return;
  }
  std::shared_ptr<cpu::CompiledKernel> k;
  {
    std::lock_guard<std::mutex> l(mu_);
    k = native_;
  }
  if (!k) {
    compile();
    std::lock_guard<std::mutex> l(mu_);
    k = native_;
  }
  cpu::run(*k, a);
}

}  // namespace pypto::runtime
