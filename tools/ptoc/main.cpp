// ptoc: the PTO command line. Reads a program in the IR text form, verifies it, prints it, lowers
// it, shows generated C++ and runs it on .npy data, without Python.
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <iterator>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "backends/cpu/codegen.h"
#include "backends/cpu/compiler.h"
#include "backends/cpu/export.h"
#include "backends/interp/interpreter.h"
#include "ir/number_text.h"
#include "ir/parser.h"
#include "ir/printer.h"
#include "ir/verifier.h"
#include "npy.h"
#include "passes/pipeline.h"

namespace {

using namespace pypto;

const char* kUsage = R"(usage: ptoc FILE.pto [options]       (FILE '-' reads standard input)

  --level tile|tensor   level of the input program (default tile). A tensor-level program is
                        lowered to PTO ISA by the compiler's pipeline before --emit-cpp / --run.
  --verify              verify the program (--run always does)
  --print               print the program as read (normalised text)
  --lower               print the lowered PTO ISA program (tensor-level input)
  --emit-cpp            print the C++ the cpu backend generates
  --run                 run the program; each input param needs --in, each scalar --scalar
  --in NAME=FILE.npy    data for param NAME (converted to the param's dtype; shape must match)
  --out NAME=FILE.npy   after the run, write param NAME to FILE (params not given by --in start
                        filled with NaN, or the lowest integer, so unwritten elements show)
  --scalar NAME=VALUE   value of scalar param NAME
  --backend interp|cpu  executor for --run (default interp: the reference interpreter)
  -o PATH               export the (lowered) program ahead of time: a shared library with a C
                        header beside it, a standalone executable running it on .npy files, the
                        C++ source, or the tile-level IR text
  --emit so|exe|cpp|exe.cpp|ir   what -o writes (default: by PATH's suffix: .so, .cpp, .pto/.ir,
                        anything else an executable)
exit status: 0 success, 1 error (message on stderr), 2 bad usage
)";

struct Options {
  std::string file;
  ir::Level level = ir::Level::Tile;
  bool verify = false, print = false, lower = false, emit_cpp = false, run = false;
  std::map<std::string, std::string> in, out, scalars;
  std::vector<std::string> out_order;
  std::string backend = "interp";
  std::string output, emit;
};

[[noreturn]] void usage_error(const std::string& msg) {
  std::cerr << "ptoc: " << msg << "\n" << kUsage;
  std::exit(2);
}

std::pair<std::string, std::string> split_binding(const std::string& opt, const std::string& s) {
  size_t eq = s.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == s.size())
    usage_error(opt + " expects NAME=VALUE, got '" + s + "'");
  return {s.substr(0, eq), s.substr(eq + 1)};
}

Options parse_args(int argc, char** argv) {
  Options o;
  std::vector<std::string> args(argv + 1, argv + argc);
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto value = [&]() -> const std::string& {
      if (i + 1 >= args.size()) usage_error(a + " needs a value");
      return args[++i];
    };
    if (a == "-h" || a == "--help") {
      std::cout << kUsage;
      std::exit(0);
    } else if (a == "--verify") {
      o.verify = true;
    } else if (a == "--print") {
      o.print = true;
    } else if (a == "--lower") {
      o.lower = true;
    } else if (a == "--emit-cpp") {
      o.emit_cpp = true;
    } else if (a == "--run") {
      o.run = true;
    } else if (a == "--level") {
      const std::string& v = value();
      if (v == "tile")
        o.level = ir::Level::Tile;
      else if (v == "tensor")
        o.level = ir::Level::Tensor;
      else
        usage_error("--level is tile or tensor, got '" + v + "'");
    } else if (a == "-o") {
      o.output = value();
    } else if (a == "--emit" || a.rfind("--emit=", 0) == 0) {
      o.emit = a == "--emit" ? value() : a.substr(7);
      if (o.emit != "so" && o.emit != "exe" && o.emit != "cpp" && o.emit != "exe.cpp" && o.emit != "ir")
        usage_error("--emit is so, exe, cpp, exe.cpp or ir, got '" + o.emit + "'");
    } else if (a == "--backend") {
      o.backend = value();
      if (o.backend != "interp" && o.backend != "cpu")
        usage_error("--backend is interp or cpu, got '" + o.backend + "'");
    } else if (a == "--in" || a == "--out" || a == "--scalar") {
      auto [k, v] = split_binding(a, value());
      auto& m = a == "--in" ? o.in : a == "--out" ? o.out : o.scalars;
      if (m.count(k)) usage_error(a + " " + k + " given twice");
      m[k] = v;
      if (a == "--out") o.out_order.push_back(k);
    } else if (!a.empty() && a[0] == '-' && a != "-") {
      usage_error("unknown option " + a);
    } else if (o.file.empty()) {
      o.file = a;
    } else {
      usage_error("more than one input file");
    }
  }
  if (o.file.empty()) usage_error("no input file");
  if (!o.emit.empty() && o.output.empty()) usage_error("--emit needs -o PATH");
  if ((!o.in.empty() || !o.out.empty() || !o.scalars.empty()) && !o.run)
    usage_error("--in/--out/--scalar need --run");
  return o;
}

std::string read_text(const std::string& file) {
  if (file == "-")
    return std::string(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
  std::ifstream in(file, std::ios::binary);
  if (!in) throw ir::Error("cannot open " + file);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

ir::ScalarValue parse_scalar(const std::string& name, const std::string& text, ir::DType t) {
  const char* s = text.c_str();
  char* end = nullptr;
  ir::ScalarValue v;
  if (ir::is_float(t)) {  // locale-independent (ir/number_text.h)
    v.is_float = true;
    const auto f = ir::parse_double(text);
    if (!f)
      throw ir::Error("--scalar " + name + ": '" + text + "' is not a " + std::string(ir::dtype_name(t)));
    v.f = *f;
    return v;
  } else {
    v.i = std::strtoll(s, &end, 10);
  }
  if (end == s || *end != '\0')
    throw ir::Error("--scalar " + name + ": '" + text + "' is not a " + std::string(ir::dtype_name(t)));
  return v;
}

// Binds .npy data and scalars to the program's params, runs it, writes the requested outputs.
void run(const ir::Program& isa, const Options& o) {
  for (const auto& [k, v] : o.in) {
    bool known = false;
    for (const auto& b : isa.params) known |= b->name == k;
    if (!known) throw ir::Error("--in " + k + ": the program has no tensor param %" + k);
  }
  for (const auto& [k, v] : o.out) {
    bool known = false;
    for (const auto& b : isa.params) known |= b->name == k;
    if (!known) throw ir::Error("--out " + k + ": the program has no tensor param %" + k);
  }
  for (const auto& [k, v] : o.scalars) {
    bool known = false;
    for (const auto& s : isa.scalars) known |= s.name == k;
    if (!known) throw ir::Error("--scalar " + k + ": the program has no scalar param %" + k);
  }

  std::vector<ptoc::Array> arrays;
  arrays.reserve(isa.params.size());
  for (const auto& b : isa.params) {
    auto it = o.in.find(b->name);
    if (it == o.in.end()) {
      if (b->kind != ir::BufferKind::Output)
        throw ir::Error("input param %" + b->name + " needs data: --in " + b->name + "=FILE.npy");
      arrays.push_back(ptoc::poisoned(b->dtype, b->shape));
      continue;
    }
    ptoc::Array a = ptoc::read_npy(it->second);
    if (a.shape != b->shape) {
      auto str = [](const std::vector<int64_t>& s) {
        std::string r = "(";
        for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
        return r + ")";
      };
      throw ir::Error("--in " + b->name + ": " + it->second + " has shape " + str(a.shape) +
                      ", the param is " + str(b->shape));
    }
    arrays.push_back(ptoc::convert(a, b->dtype));
  }
  runtime::RunArgs args;
  for (size_t i = 0; i < arrays.size(); ++i) {
    runtime::TensorArg t;
    t.data = arrays[i].data.data();
    t.dtype = arrays[i].dtype;
    t.shape = arrays[i].shape;
    t.strides.assign(t.shape.size(), 1);
    for (size_t d = t.shape.size(); d-- > 1;) t.strides[d - 1] = t.strides[d] * t.shape[d];
    args.tensors.push_back(t);
  }
  for (const auto& s : isa.scalars) {
    auto it = o.scalars.find(s.name);
    if (it == o.scalars.end())
      throw ir::Error("scalar param %" + s.name + " needs a value: --scalar " + s.name + "=VALUE");
    args.scalars.push_back(parse_scalar(s.name, it->second, s.dtype));
  }

  if (o.backend == "cpu") {
    auto compiled = cpu::compile_cpp(cpu::generate_cpp(isa));
    cpu::run(*compiled.kernel, args);
  } else {
    interp::interpret(isa, args);
  }

  for (const auto& name : o.out_order) {
    for (size_t i = 0; i < isa.params.size(); ++i)
      if (isa.params[i]->name == name) ptoc::write_npy(o.out.at(name), arrays[i]);
  }
}

int ptoc_main(const Options& o) {
  ir::Program p = ir::parse_program(read_text(o.file));
  const bool exporting = !o.output.empty();
  if (o.verify || o.run || o.lower || o.emit_cpp || exporting) ir::verify(p, o.level);
  if (o.print) std::cout << ir::print(p);
  ir::Program isa = p;
  if (o.level == ir::Level::Tensor && (o.lower || o.emit_cpp || o.run || exporting))
    isa = passes::lower(p, {}).isa;
  if (exporting) {
    cpu::ExportKind kind =
        o.emit.empty() ? cpu::export_kind_for_path(o.output) : cpu::parse_export_kind(o.emit);
    for (const std::string& f : cpu::export_kernel(isa, o.output, kind))
      std::cerr << "ptoc: wrote " << f << "\n";
  }
  if (o.lower) std::cout << ir::print(isa);
  if (o.emit_cpp) std::cout << cpu::generate_cpp(isa);
  if (o.run) run(isa, o);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o = parse_args(argc, argv);
  try {
    return ptoc_main(o);
  } catch (const std::exception& e) {
    std::cerr << "ptoc: error: " << e.what() << "\n";
    return 1;
  }
}
