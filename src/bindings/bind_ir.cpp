// Python bindings of the IR core: Program objects, text parse/print, verification, structural
// equality, the reference interpreter and direct access to the CPU backend (for ISA-level tests).
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include "backends/cpu/codegen.h"
#include "backends/cpu/compiler.h"
#include "backends/interp/interpreter.h"
#include "bindings/arrays.h"
#include "bindings/gil.h"
#include "exec/arg_check.h"
#include "ir/ir.h"
#include "ir/opcodes.h"
#include "ir/parser.h"
#include "ir/printer.h"
#include "ir/verifier.h"

namespace nb = nanobind;

namespace pypto::bindings {
namespace {

using ParamInfo = std::tuple<std::string, std::string, std::vector<int64_t>, bool>;

// Python ints (and bools) become integer scalars, floats become float scalars.
std::vector<ir::ScalarValue> to_scalars(const nb::list& xs) {
  std::vector<ir::ScalarValue> out;
  for (nb::handle h : xs) {
    ir::ScalarValue v;
    if (PyBool_Check(h.ptr()) || PyLong_Check(h.ptr())) {
      v.i = nb::cast<int64_t>(h);
    } else if (PyFloat_Check(h.ptr())) {
      v.is_float = true;
      v.f = nb::cast<double>(h);
    } else if (nb::hasattr(h, "__index__")) {  // NumPy integer scalars
      v.i = nb::cast<int64_t>(h.attr("__index__")());
    } else if (nb::hasattr(h, "__float__")) {  // NumPy float scalars
      v.is_float = true;
      v.f = nb::cast<double>(h.attr("__float__")());
    } else {
      throw ir::Error("scalar arguments must be int or float, got " +
                      std::string(nb::str(nb::handle(h.type())).c_str()));
    }
    out.push_back(v);
  }
  return out;
}

// `keep` holds the imported arrays (and so the caller's memory) alive for the run.
// `written`: per param, whether the program writes it (those must be writable arrays).
runtime::RunArgs to_run_args(const nb::list& tensors, const nb::list& scalars, std::vector<AnyArray>& keep,
                             const std::vector<bool>& written) {
  runtime::RunArgs args;
  for (size_t i = 0; i < tensors.size(); ++i) {
    AnyArray a;
    if (!nb::try_cast<AnyArray>(tensors[i], a, false))
      throw ir::Error("tensor argument " + std::to_string(i) +
                      ": expected an array (NumPy, PyTorch or DLPack), got " +
                      std::string(nb::str(nb::handle(tensors[i].type()).attr("__qualname__")).c_str()));
    try {
      args.tensors.push_back(to_tensor_arg(a));
      if (i < written.size() && written[i]) args.tensors.back().read_only = !is_writable(tensors[i]);
    } catch (const ir::Error& e) {
      throw ir::Error("tensor argument " + std::to_string(i) + ": " + e.what());
    }
    keep.push_back(std::move(a));
  }
  args.scalars = to_scalars(scalars);
  return args;
}

ir::Level parse_level(const std::string& s) {
  if (s == "tensor") return ir::Level::Tensor;
  if (s == "tile") return ir::Level::Tile;
  throw ir::Error("verify level must be 'tensor' or 'tile', got '" + s + "'");
}

}  // namespace

void bind_ir(nb::module_& m) {
  m.attr("DYNAMIC_BOUND") = ir::kDynamicBound;  // the static bound of a dynamic dim (ir.h)
  nb::class_<ir::Program>(m, "Program", "A PTO IR program (tensor or tile level).")
      .def(
          "text", [](const ir::Program& p) { return ir::print(p); }, "The program's text form.")
      .def("__str__", [](const ir::Program& p) { return ir::print(p); })
      .def("__repr__", [](const ir::Program& p) { return "<pypto Program '" + p.name + "'>"; })
      .def_prop_ro("name", [](const ir::Program& p) { return p.name; })
      .def_prop_ro(
          "params",
          [](const ir::Program& p) {
            std::vector<ParamInfo> out;
            for (const ir::BufferRef& b : p.params)
              out.emplace_back(b->name, std::string(ir::dtype_name(b->dtype)), b->shape,
                               b->kind == ir::BufferKind::Output);
            return out;
          },
          "Tensor params in calling order: (name, dtype, shape, is_output).")
      .def_prop_ro(
          "scalars",
          [](const ir::Program& p) {
            std::vector<std::tuple<std::string, std::string>> out;
            for (const ir::ScalarParam& s : p.scalars)
              if (!s.is_dim_symbol()) out.emplace_back(s.name, std::string(ir::dtype_name(s.dtype)));
            return out;
          },
          "Scalar params the caller passes, in calling order: (name, dtype).")
      .def(
          "output_shapes",
          [](const ir::Program& p, const std::vector<std::vector<int64_t>>& input_shapes) {
            return ir::output_shapes(p, input_shapes);
          },
          nb::arg("input_shapes"),
          "Shapes of the outputs for inputs of these shapes (dynamic dims evaluated).")
      .def("__eq__", [](const ir::Program& a, const ir::Program& b) { return ir::structural_equal(a, b); })
      .def("__hash__", [](const ir::Program& p) { return ir::structural_hash(p); });

  m.def(
      "parse_program", [](const std::string& text) { return ir::parse_program(text); }, nb::arg("text"),
      "Parse the text form of a program.");
  m.def(
      "verify", [](const ir::Program& p, const std::string& level) { ir::verify(p, parse_level(level)); },
      nb::arg("program"), nb::arg("level") = "tile",
      "Check the program's invariants at a level ('tensor' or 'tile'); raises PyptoError.");
  m.def("structural_equal",
        [](const ir::Program& a, const ir::Program& b) { return ir::structural_equal(a, b); });
  m.def("structural_hash", [](const ir::Program& p) { return ir::structural_hash(p); });
  m.def(
      "opcode_names",
      []() {
        std::vector<std::string> out;
#define PYPTO_X(name, cat, n) out.push_back(#name);
        PYPTO_OPCODES(PYPTO_X)
#undef PYPTO_X
        return out;
      },
      "Every opcode of the PTO ISA, in table order.");
  m.def(
      "opcode_table",
      []() {
        static const char* cats[] = {"memory", "fill",   "unary",  "binary", "compare", "select", "convert",
                                     "reduce", "expand", "matrix", "layout", "gather",  "sync"};
        std::vector<std::tuple<std::string, std::string, int>> out;
#define PYPTO_X(name, cat, n) out.emplace_back(#name, cats[int(ir::OpCategory::cat)], n);
        PYPTO_OPCODES(PYPTO_X)
#undef PYPTO_X
        return out;
      },
      "The opcode table: (name, category, number of operands incl. the destination; -1 variadic).");

  m.def(
      "interpret",
      [](const ir::Program& p, const nb::list& tensors, const nb::list& scalars) {
        std::vector<AnyArray> keep;
        runtime::RunArgs args = to_run_args(tensors, scalars, keep, runtime::written_params(p));
        interruptible_without_gil([&] { interp::interpret(p, args); });
      },
      nb::arg("program"), nb::arg("tensors"), nb::arg("scalars") = nb::list(),
      "Run a tile-level program on the reference interpreter, in place on the given arrays.");
  m.def(
      "cpu_source", [](const ir::Program& p) { return cpu::generate_cpp(p); }, nb::arg("program"),
      "The C++ source the CPU backend generates for a tile-level program.");
  m.def(
      "cpu_run",
      [](const ir::Program& p, const nb::list& tensors, const nb::list& scalars) {
        std::vector<AnyArray> keep;
        runtime::RunArgs args = to_run_args(tensors, scalars, keep, runtime::written_params(p));
        runtime::check_args(p, args, runtime::written_params(p));  // the CPU backend trusts its arguments
        runtime::bind_dim_symbols(p, args.tensors, args.scalars);
        interruptible_without_gil([&] {
          const cpu::CompileResult r = cpu::compile_cpp(cpu::generate_cpp(p));
          cpu::run(*r.kernel, args);
        });
      },
      nb::arg("program"), nb::arg("tensors"), nb::arg("scalars") = nb::list(),
      "Compile a tile-level program with the CPU backend (cached) and run it on the arrays.");
}

}  // namespace pypto::bindings
