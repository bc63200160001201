// Python bindings of the IR builder: Builder, View, Expr (scalar expressions with Python
// operators), Index, and the Opcode / DType enums. The front end (python/pypto/frontend) drives
// these while it walks a kernel's AST.
#include <nanobind/nanobind.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <cmath>
#include <string>
#include <vector>

#include "ir/builder.h"
#include "ir/printer.h"
#include "passes/autodiff.h"

namespace pypto::bindings {
namespace nb = nanobind;
using namespace nb::literals;
using ir::DType;
using ir::Expr;
using ir::ExprOp;
using ir::Opcode;
using ir::View;

namespace {

// ir::Expr is a shared_ptr to a const node; a small box gives Python a plain value type.
struct PyExpr {
  Expr e;
};

// A creation shape from Python: ints, and Exprs for dynamic dims (their extents; a constant Expr
// is a static dim). Returns the static shape and the extents (empty when all are static).
std::pair<std::vector<int64_t>, std::vector<Expr>> shape_and_extents(nb::handle shape) {
  std::vector<int64_t> s;
  std::vector<Expr> ext;
  bool dynamic = false;
  for (nb::handle h : nb::borrow<nb::sequence>(shape)) {
    PyExpr* pe = nullptr;
    if (nb::try_cast<PyExpr*>(h, pe) && pe && !ir::as_int(pe->e)) {
      s.push_back(ir::kDynamicBound);
      ext.push_back(pe->e);
      dynamic = true;
      continue;
    }
    s.push_back(pe ? *ir::as_int(pe->e) : nb::cast<int64_t>(h));
    ext.push_back(nullptr);
  }
  if (!dynamic) ext.clear();
  return {s, ext};
}

// Scalars from Python: Expr, bool, int or float. `fdt` is the type a Python float takes.
Expr to_expr(nb::handle h, DType fdt = DType::F32) {
  if (nb::isinstance<PyExpr>(h)) return nb::cast<const PyExpr&>(h).e;
  if (PyBool_Check(h.ptr())) return ir::int_imm(h.ptr() == Py_True ? 1 : 0);
  if (PyLong_Check(h.ptr())) {
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(h.ptr(), &overflow);
    if (overflow)
      throw ir::Error("integer " + nb::cast<std::string>(nb::str(h)) + " does not fit in 64 bits");
    return ir::int_imm(v);
  }
  if (PyFloat_Check(h.ptr())) return ir::float_imm(PyFloat_AsDouble(h.ptr()), fdt);
  // NumPy scalars and anything else that converts cleanly.
  if (PyObject_HasAttrString(h.ptr(), "__index__")) return ir::int_imm(nb::cast<int64_t>(nb::int_(h)));
  if (PyObject_HasAttrString(h.ptr(), "__float__"))
    return ir::float_imm(nb::cast<double>(nb::float_(h)), fdt);
  throw nb::type_error(
      ("expected a scalar (int, float or symbolic expression), got " +
       nb::cast<std::string>(nb::str(nb::handle((PyObject*)Py_TYPE(h.ptr())).attr("__name__"))))
          .c_str());
}

// A tensor operand (View) or a scalar; Python floats take the float type of `like`.
ir::Operand to_operand(nb::handle h, DType fdt) {
  if (nb::isinstance<View>(h)) return nb::cast<const View&>(h);
  return to_expr(h, fdt);
}

DType float_type_of(nb::handle h) {
  if (nb::isinstance<View>(h)) {
    DType t = nb::cast<const View&>(h).buf->dtype;
    if (ir::is_float(t)) return ir::compute_dtype(t);
  }
  if (nb::isinstance<PyExpr>(h)) {
    DType t = nb::cast<const PyExpr&>(h).e->dtype;
    if (ir::is_float(t)) return t;
  }
  return DType::F32;
}

// The float type a Python float mixed into an operation with these operands should take.
DType float_type(std::initializer_list<nb::handle> hs) {
  for (nb::handle h : hs)
    if (nb::isinstance<View>(h) || nb::isinstance<PyExpr>(h)) {
      DType t = float_type_of(h);
      if (t != DType::F32) return t;
    }
  return DType::F32;
}

Expr lift(const PyExpr& a, nb::handle b) {
  return to_expr(b, ir::is_float(a.e->dtype) ? a.e->dtype : DType::F32);
}

std::string expr_str(const Expr& e) { return ir::to_string(e); }

[[noreturn]] void not_constant(const Expr& e, const char* what) {
  throw nb::type_error(("the symbolic value " + expr_str(e) +
                        " is only known when the kernel runs, so it cannot be used as " + what +
                        " at trace time")
                           .c_str());
}

Expr true_div(const Expr& a, const Expr& b) {
  DType t = ir::is_float(a->dtype) ? a->dtype : (ir::is_float(b->dtype) ? b->dtype : DType::F32);
  auto fa = ir::is_float(a->dtype) ? a : ir::cast(a, t);
  auto fb = ir::is_float(b->dtype) ? b : ir::cast(b, t);
  return ir::div(fa, fb);
}

std::vector<ir::Index> to_indices(nb::handle seq) {
  std::vector<ir::Index> out;
  for (nb::handle h : seq) {
    ir::Index ix;
    if (h.is_none()) {
      ix.kind = ir::Index::NewAxis;
    } else if (nb::isinstance<ir::Index>(h)) {
      ix = nb::cast<ir::Index>(h);
    } else if (PySlice_Check(h.ptr())) {
      nb::object st = h.attr("start"), sp = h.attr("stop"), sz = h.attr("step");
      ix.kind = ir::Index::Slice;
      if (!st.is_none()) ix.start = to_expr(st);
      if (!sp.is_none()) ix.stop = to_expr(sp);
      if (!sz.is_none()) {
        Expr s = to_expr(sz);
        auto c = ir::as_int(s);
        if (!c) throw ir::Error("slice steps must be compile-time integers, got " + expr_str(s));
        if (*c <= 0) throw ir::Error("slice steps must be positive, got " + std::to_string(*c));
        ix.step = *c;
      }
    } else if (h.ptr() == Py_Ellipsis) {
      throw ir::Error("`...` must be expanded before calling Builder.slice");
    } else {
      ix.kind = ir::Index::Int;
      ix.start = to_expr(h);
      if (ir::is_float(ix.start->dtype))
        throw ir::Error("tensor indices must be integers, got " + expr_str(ix.start));
    }
    out.push_back(std::move(ix));
  }
  return out;
}

std::vector<int64_t> vshape(const View& v) { return v.shape(); }

const char* kind_name(ir::BufferKind k) {
  switch (k) {
    case ir::BufferKind::Param:
      return "param";
    case ir::BufferKind::Output:
      return "output";
    default:
      return "temp";
  }
}

// Arithmetic operators of Expr: Expr op (Expr | int | float), in both orders.
bool is_scalar_like(nb::handle h) {
  if (nb::isinstance<PyExpr>(h) || PyLong_Check(h.ptr()) || PyFloat_Check(h.ptr())) return true;
  if (nb::isinstance<View>(h) || PyObject_HasAttrString(h.ptr(), "__len__")) return false;
  if (!PyObject_HasAttrString(h.ptr(), "__index__") && !PyObject_HasAttrString(h.ptr(), "__float__"))
    return false;
  // NumPy scalars are numbers; arrays and tensors (ndim > 0, or anything else with a shape) are not.
  if (PyObject_HasAttrString(h.ptr(), "shape")) {
    nb::object nd = nb::getattr(h, "ndim", nb::none());
    return !nd.is_none() && PyLong_Check(nd.ptr()) && PyLong_AsLong(nd.ptr()) == 0 &&
           !PyObject_HasAttrString(h.ptr(), "__dlpack_device__");
  }
  return true;
}

// Arithmetic operators of Expr: Expr op (Expr | int | float), in both orders. Other operand
// types get NotImplemented so that Python asks them (a tensor value's reflected operator).
template <class F>
void def_arith(nb::class_<PyExpr>& c, const char* name, const char* rname, F f) {
  c.def(
      name,
      [f](const PyExpr& a, nb::handle b) -> nb::object {
        if (!is_scalar_like(b)) return nb::borrow(Py_NotImplemented);
        return nb::cast(PyExpr{f(a.e, lift(a, b))});
      },
      nb::is_operator());
  c.def(
      rname,
      [f](const PyExpr& a, nb::handle b) -> nb::object {
        if (!is_scalar_like(b)) return nb::borrow(Py_NotImplemented);
        return nb::cast(PyExpr{f(lift(a, b), a.e)});
      },
      nb::is_operator());
}

}  // namespace

void bind_builder(nb::module_& m) {
  if (!nb::type<DType>().is_valid()) {
    nb::enum_<DType>(m, "DType")
        .value("F32", DType::F32)
        .value("F16", DType::F16)
        .value("BF16", DType::BF16)
        .value("F64", DType::F64)
        .value("I32", DType::I32)
        .value("I64", DType::I64)
        .value("Bool", DType::Bool)
        .value("I8", DType::I8)
        .value("U8", DType::U8)
        .value("I16", DType::I16);
  }
  m.def("dtype_name", [](DType t) { return std::string(ir::dtype_name(t)); });
  m.def("parse_dtype", [](const std::string& s) {
    auto t = ir::parse_dtype(s);
    if (!t) throw ir::Error("unknown dtype '" + s + "'");
    return *t;
  });
  m.def("dtype_bytes", &ir::dtype_bytes);

  if (!nb::type<Opcode>().is_valid()) {
    auto op = nb::enum_<Opcode>(m, "Opcode");
#define PYPTO_X(name, cat, n) op.value(#name, Opcode::name);
    PYPTO_OPCODES(PYPTO_X)
#undef PYPTO_X
  }

  // --- Expr ------------------------------------------------------------------------------------
  auto ex =
      nb::class_<PyExpr>(m, "Expr", "A scalar expression: loop index, shape arithmetic or runtime scalar.");
  ex.def(
      "__init__", [](PyExpr* p, nb::handle v) { new (p) PyExpr{to_expr(v)}; }, "value"_a,
      "Make a constant from an int or float (or copy an Expr).");
  def_arith(ex, "__add__", "__radd__", [](const Expr& a, const Expr& b) { return a + b; });
  def_arith(ex, "__sub__", "__rsub__", [](const Expr& a, const Expr& b) { return a - b; });
  def_arith(ex, "__mul__", "__rmul__", [](const Expr& a, const Expr& b) { return a * b; });
  def_arith(ex, "__floordiv__", "__rfloordiv__", [](const Expr& a, const Expr& b) {
    if (ir::is_float(a->dtype) || ir::is_float(b->dtype))
      throw ir::Error("floor division of float scalars is not supported: " + expr_str(a) + " // " +
                      expr_str(b));
    return ir::div(a, b);
  });
  def_arith(ex, "__mod__", "__rmod__", [](const Expr& a, const Expr& b) { return ir::mod(a, b); });
  def_arith(ex, "__and__", "__rand__",
            [](const Expr& a, const Expr& b) { return ir::bitwise(ExprOp::BitAnd, a, b); });
  def_arith(ex, "__or__", "__ror__",
            [](const Expr& a, const Expr& b) { return ir::bitwise(ExprOp::BitOr, a, b); });
  def_arith(ex, "__xor__", "__rxor__",
            [](const Expr& a, const Expr& b) { return ir::bitwise(ExprOp::BitXor, a, b); });
  def_arith(ex, "__lshift__", "__rlshift__",
            [](const Expr& a, const Expr& b) { return ir::bitwise(ExprOp::Shl, a, b); });
  def_arith(ex, "__rshift__", "__rrshift__",
            [](const Expr& a, const Expr& b) { return ir::bitwise(ExprOp::Shr, a, b); });
  ex.def("__invert__", [](const PyExpr& a) { return PyExpr{ir::bit_not(a.e)}; });
  def_arith(ex, "__truediv__", "__rtruediv__", true_div);
  def_arith(ex, "__lt__", "__gt__", [](const Expr& a, const Expr& b) { return ir::cmp(ExprOp::Lt, a, b); });
  def_arith(ex, "__le__", "__ge__", [](const Expr& a, const Expr& b) { return ir::cmp(ExprOp::Le, a, b); });
  ex.def(
      "__eq__",
      [](const PyExpr& a, nb::handle b) -> nb::object {
        if (!is_scalar_like(b)) return nb::borrow(Py_NotImplemented);
        return nb::cast(PyExpr{ir::cmp(ExprOp::Eq, a.e, lift(a, b))});
      },
      nb::is_operator());
  ex.def(
      "__ne__",
      [](const PyExpr& a, nb::handle b) -> nb::object {
        if (!is_scalar_like(b)) return nb::borrow(Py_NotImplemented);
        return nb::cast(PyExpr{ir::cmp(ExprOp::Ne, a.e, lift(a, b))});
      },
      nb::is_operator());
  ex.def("__neg__", [](const PyExpr& a) { return PyExpr{ir::int_imm(0) - a.e}; });
  ex.def("__pos__", [](const PyExpr& a) { return a; });
  ex.def("__hash__", [](const PyExpr& a) { return int64_t(ir::expr_hash(a.e)); });
  ex.def("__bool__", [](const PyExpr& a) {
    if (auto c = ir::as_float(a.e)) return *c != 0;
    not_constant(a.e, "a truth value (in an `if`, `and`, `or` or `not`)");
  });
  ex.def("__index__", [](const PyExpr& a) {
    if (auto c = ir::as_int(a.e)) return *c;
    not_constant(a.e, "a Python integer");
  });
  ex.def("__int__", [](const PyExpr& a) {
    if (auto c = ir::as_int(a.e)) return *c;
    if (auto f = ir::as_float(a.e)) return int64_t(*f);
    not_constant(a.e, "a Python integer");
  });
  ex.def("__float__", [](const PyExpr& a) {
    if (auto f = ir::as_float(a.e)) return *f;
    not_constant(a.e, "a Python float");
  });
  ex.def("__repr__", [](const PyExpr& a) { return "Expr(" + expr_str(a.e) + ")"; });
  ex.def("__str__", [](const PyExpr& a) { return expr_str(a.e); });
  ex.def_prop_ro("is_const", [](const PyExpr& a) { return ir::is_const(a.e); });
  ex.def_prop_ro("is_float", [](const PyExpr& a) { return ir::is_float(a.e->dtype); });
  ex.def_prop_ro(
      "value",
      [](const PyExpr& a) -> nb::object {
        if (auto c = ir::as_int(a.e); c && !ir::is_float(a.e->dtype)) return nb::int_(*c);
        if (auto f = ir::as_float(a.e)) return nb::float_(*f);
        return nb::none();
      },
      "The Python value of a constant expression, else None.");
  ex.def_prop_ro("dtype", [](const PyExpr& a) { return a.e->dtype; });
  ex.def(
      "vars",
      [](const PyExpr& a) {
        std::vector<std::string> out;
        ir::collect_vars(a.e, out);
        return out;
      },
      "Names of the variables the expression depends on.");
  ex.def(
      "same", [](const PyExpr& a, const PyExpr& b) { return ir::expr_equal(a.e, b.e); },
      "Structural equality (== builds a comparison expression instead).");
  ex.def(
      "bounds",
      [](const PyExpr& a, const std::map<std::string, std::pair<int64_t, int64_t>>& vb)
          -> std::optional<std::pair<int64_t, int64_t>> {
        ir::VarBounds b;
        for (auto& [k, v] : vb) b[k] = ir::Interval{v.first, v.second};
        auto r = ir::bounds(a.e, b);
        if (!r) return std::nullopt;
        return std::make_pair(r->lo, r->hi);
      },
      "vars"_a = std::map<std::string, std::pair<int64_t, int64_t>>{});

  m.def("int_imm", [](int64_t v) { return PyExpr{ir::int_imm(v)}; });
  m.def(
      "float_imm", [](double v, DType t) { return PyExpr{ir::float_imm(v, t)}; }, "v"_a,
      "dtype"_a = DType::F32);
  m.def(
      "var", [](const std::string& n, DType t) { return PyExpr{ir::var(n, t)}; }, "name"_a,
      "dtype"_a = DType::I64);
  m.def(
      "as_expr", [](nb::handle h) { return PyExpr{to_expr(h)}; },
      "Convert an int, float or Expr to an Expr.");
  m.def("expr_min", [](nb::handle a, nb::handle b) {
    DType t = float_type({a, b});
    return PyExpr{ir::min(to_expr(a, t), to_expr(b, t))};
  });
  m.def("expr_max", [](nb::handle a, nb::handle b) {
    DType t = float_type({a, b});
    return PyExpr{ir::max(to_expr(a, t), to_expr(b, t))};
  });
  m.def("select", [](nb::handle c, nb::handle a, nb::handle b) {
    DType t = float_type({a, b});
    return PyExpr{ir::select(to_expr(c), to_expr(a, t), to_expr(b, t))};
  });
  m.def("cast", [](nb::handle a, DType t) { return PyExpr{ir::cast(to_expr(a), t)}; });
  m.def("logic_and",
        [](nb::handle a, nb::handle b) { return PyExpr{ir::logic(ExprOp::And, to_expr(a), to_expr(b))}; });
  m.def("logic_or",
        [](nb::handle a, nb::handle b) { return PyExpr{ir::logic(ExprOp::Or, to_expr(a), to_expr(b))}; });
  m.def("logic_not", [](nb::handle a) { return PyExpr{ir::logic_not(to_expr(a))}; });
  m.def("expr_sqrt", [](nb::handle a) { return PyExpr{ir::unary_math(ExprOp::Sqrt, to_expr(a))}; });
  m.def("expr_exp", [](nb::handle a) { return PyExpr{ir::unary_math(ExprOp::Exp, to_expr(a))}; });
  m.def("expr_log", [](nb::handle a) { return PyExpr{ir::unary_math(ExprOp::Log, to_expr(a))}; });

  // --- Index -----------------------------------------------------------------------------------
  nb::class_<ir::Index>(m, "Index", "One entry of a subscript (after `...` is expanded).")
      .def_static("int_",
                  [](nb::handle i) {
                    ir::Index ix;
                    ix.kind = ir::Index::Int;
                    ix.start = to_expr(i);
                    return ix;
                  })
      .def_static(
          "slice",
          [](nb::handle start, nb::handle stop, int64_t step) {
            ir::Index ix;
            ix.kind = ir::Index::Slice;
            if (!start.is_none()) ix.start = to_expr(start);
            if (!stop.is_none()) ix.stop = to_expr(stop);
            ix.step = step;
            return ix;
          },
          "start"_a = nb::none(), "stop"_a = nb::none(), "step"_a = 1)
      .def_static("newaxis",
                  [] {
                    ir::Index ix;
                    ix.kind = ir::Index::NewAxis;
                    return ix;
                  })
      .def_prop_ro("kind", [](const ir::Index& ix) {
        return ix.kind == ir::Index::Int ? "int" : ix.kind == ir::Index::Slice ? "slice" : "newaxis";
      });

  // --- View ------------------------------------------------------------------------------------
  nb::class_<View>(m, "View", "A rectangular window of a buffer, as the builder sees it.")
      .def_prop_ro("shape", &vshape, "The static shape.")
      .def_prop_ro("dtype", [](const View& v) { return std::string(ir::dtype_name(v.buf->dtype)); })
      .def_prop_ro("dtype_enum", [](const View& v) { return v.buf->dtype; })
      .def_prop_ro("rank", [](const View& v) { return v.rank(); })
      .def_prop_ro("valid_shape",
                   [](const View& v) {
                     std::vector<PyExpr> out;
                     for (auto& e : v.valid_shape()) out.push_back(PyExpr{e});
                     return out;
                   })
      .def_prop_ro("buffer_name", [](const View& v) { return v.buf->name; })
      .def_prop_ro("buffer_kind", [](const View& v) { return kind_name(v.buf->kind); })
      .def_prop_ro("buffer_id", [](const View& v) { return uintptr_t(v.buf.get()); })
      .def_prop_ro("is_whole", &View::is_whole)
      .def("__repr__", [](const View& v) { return ir::print(v); });

  // --- Builder ---------------------------------------------------------------------------------
  using B = ir::Builder;
  nb::class_<B>(m, "Builder", "Builds a tensor-level program one statement at a time.")
      .def(nb::init<std::string>(), "name"_a)
      .def("add_param", &B::add_param, "name"_a, "dtype"_a, "shape"_a,
           "symbols"_a = std::vector<std::string>{})
      .def(
          "add_scalar_param",
          [](B& b, const std::string& n, DType t) { return PyExpr{b.add_scalar_param(n, t)}; }, "name"_a,
          "dtype"_a)
      .def(
          "begin_for",
          [](B& b, const std::string& hint, nb::handle lo, nb::handle hi, nb::handle step, bool par) {
            return PyExpr{b.begin_for(hint, to_expr(lo), to_expr(hi), to_expr(step), par)};
          },
          "hint"_a, "lo"_a, "hi"_a, "step"_a = 1, "parallel"_a = false)
      .def("end_for", &B::end_for)
      .def("begin_group", &B::begin_group, "label"_a)
      .def("end_group", &B::end_group)
      .def(
          "begin_if", [](B& b, nb::handle c) { b.begin_if(to_expr(c)); }, "cond"_a)
      .def("begin_else", &B::begin_else)
      .def("end_if", &B::end_if)
      .def("let", [](B& b, const std::string& hint, nb::handle v) { return PyExpr{b.let(hint, to_expr(v))}; })
      .def(
          "empty",
          [](B& b, nb::handle shape, DType t) {
            auto [s, ext] = shape_and_extents(shape);
            return b.empty(std::move(s), t, ext);
          },
          "shape"_a, "dtype"_a, "A new tensor; an Expr entry is a dynamic dim of that extent.")
      .def(
          "full",
          [](B& b, nb::handle shape, DType t, nb::handle v) {
            auto [s, ext] = shape_and_extents(shape);
            return b.full(std::move(s), t, to_expr(v, ir::is_float(t) ? ir::compute_dtype(t) : DType::F32),
                          ext);
          },
          "shape"_a, "dtype"_a, "value"_a)
      .def(
          "arange",
          [](B& b, nb::handle start, int64_t n, nb::handle step, DType t, nb::handle extent) {
            DType ft = ir::is_float(t) ? ir::compute_dtype(t) : DType::F32;
            // extent: a run-time length (an expression of dynamic dims) instead of n.
            return b.arange(to_expr(start, ft), n, to_expr(step, ft), t,
                            extent.is_none() ? Expr() : to_expr(extent, DType::I64));
          },
          "start"_a, "n"_a, "step"_a, "dtype"_a, "extent"_a = nb::none())
      .def(
          "slice", [](B& b, const View& v, nb::handle idx) { return b.slice(v, to_indices(idx)); }, "view"_a,
          "indices"_a,
          "indices: a sequence of int | Expr | slice (bounds int/Expr/None) | None (new axis) | Index")
      .def("permute", &B::permute)
      .def("transpose", &B::transpose)
      .def("unsqueeze", &B::unsqueeze)
      .def("squeeze", &B::squeeze)
      .def(
          "reshape",
          [](B& b, const ir::View& v, nb::handle shape) {
            auto [s, ext] = shape_and_extents(shape);
            return b.reshape(v, std::move(s), ext);
          },
          "v"_a, "shape"_a, "An Expr entry is a dynamic dim of that extent (it must stay in place).")
      .def("broadcast_to", &B::broadcast_to)
      .def("unary", &B::unary)
      .def("binary",
           [](B& b, Opcode op, nb::handle x, nb::handle y) {
             DType t = float_type({x, y});
             return b.binary(op, to_operand(x, t), to_operand(y, t));
           })
      .def("select",
           [](B& b, nb::handle c, nb::handle x, nb::handle y) {
             DType t = float_type({x, y});
             return b.select(to_operand(c, t), to_operand(x, t), to_operand(y, t));
           })
      .def("cast", &B::cast)
      .def("copy", &B::copy)
      .def("inplace", &B::inplace, "x"_a)
      .def("reduce", &B::reduce, "row_op"_a, "x"_a, "dims"_a, "keepdim"_a)
      .def("mean", &B::mean, "x"_a, "dims"_a, "keepdim"_a)
      .def("matmul", &B::matmul)
      .def("matmul_as", &B::matmul_as)
      .def("matmul_acc", &B::matmul_acc, "dst"_a, "a"_a, "b"_a)
      .def("softmax", &B::softmax)
      .def("log_softmax", &B::log_softmax)
      .def(
          "layer_norm",
          [](B& b, const View& x, int nd, std::optional<View> w, std::optional<View> bias, double eps) {
            return b.layer_norm(x, nd, w ? &*w : nullptr, bias ? &*bias : nullptr, eps);
          },
          "x"_a, "normalized_dims"_a, "weight"_a = nb::none(), "bias"_a = nb::none(), "eps"_a = 1e-5)
      .def(
          "rms_norm",
          [](B& b, const View& x, int nd, std::optional<View> w, double eps) {
            return b.rms_norm(x, nd, w ? &*w : nullptr, eps);
          },
          "x"_a, "normalized_dims"_a, "weight"_a = nb::none(), "eps"_a = 1e-6)
      .def("concat", &B::concat)
      .def(
          "clamp",
          [](B& b, const View& x, nb::handle lo, nb::handle hi) {
            DType t = float_type({nb::cast(x), lo, hi});
            std::optional<ir::Operand> l, h;
            if (!lo.is_none()) l = to_operand(lo, t);
            if (!hi.is_none()) h = to_operand(hi, t);
            return b.clamp(x, l ? &*l : nullptr, h ? &*h : nullptr);
          },
          "x"_a, "lo"_a = nb::none(), "hi"_a = nb::none())
      .def("hardtanh", &B::hardtanh, "x"_a, "lo"_a, "hi"_a)
      .def("tril", &B::tril, "x"_a, "k"_a)
      .def("triu", &B::triu, "x"_a, "k"_a)
      .def("variance", &B::variance, "x"_a, "dims"_a, "correction"_a, "keepdim"_a)
      .def("logsumexp", &B::logsumexp, "x"_a, "dims"_a, "keepdim"_a)
      .def("any", &B::any, "x"_a, "dims"_a, "keepdim"_a)
      .def("all", &B::all, "x"_a, "dims"_a, "keepdim"_a)
      .def("argmax", &B::argmax, "x"_a, "dim"_a, "keepdim"_a)
      .def("argmin", &B::argmin, "x"_a, "dim"_a, "keepdim"_a)
      .def("stack", &B::stack, "xs"_a, "dim"_a)
      .def("roll", &B::roll, "x"_a, "shift"_a, "dim"_a)
      .def("repeat_interleave", &B::repeat_interleave, "x"_a, "repeats"_a, "dim"_a)
      .def("one_hot", &B::one_hot, "idx"_a, "num_classes"_a)
      .def("scan", &B::scan, "combine"_a, "x"_a, "dim"_a)
      .def("scan_extreme", &B::scan_extreme, "combine"_a, "x"_a, "dim"_a)
      .def("gather_rows", &B::gather_rows, "src"_a, "idx"_a)
      .def("scatter_rows", &B::scatter_rows, "dst"_a, "src"_a, "idx"_a, "accumulate"_a)
      .def("take", &B::take, "x"_a, "dim"_a, "idx"_a, "wrap_negative"_a)
      .def(
          "put",
          [](B& b, const View& x, int dim, const View& idx, nb::handle v, bool acc, bool wrap) {
            b.put(x, dim, idx,
                  to_operand(v, ir::is_float(x.buf->dtype) ? ir::compute_dtype(x.buf->dtype) : DType::F32),
                  acc, wrap);
          },
          "x"_a, "dim"_a, "idx"_a, "value"_a, "accumulate"_a, "wrap_negative"_a)
      .def("gather_elements", &B::gather_elements, "x"_a, "dim"_a, "idx"_a)
      .def(
          "scatter_elements",
          [](B& b, const View& x, int dim, const View& idx, nb::handle v, bool acc) {
            return b.scatter_elements(
                x, dim, idx,
                to_operand(v, ir::is_float(x.buf->dtype) ? ir::compute_dtype(x.buf->dtype) : DType::F32),
                acc);
          },
          "x"_a, "dim"_a, "idx"_a, "src"_a, "accumulate"_a)
      .def("flip", &B::flip, "x"_a, "dims"_a)
      .def("argsort", &B::argsort, "x"_a, "dim"_a, "descending"_a)
      .def("sort", &B::sort, "x"_a, "dim"_a, "descending"_a)
      .def("topk", &B::topk, "x"_a, "k"_a, "dim"_a, "largest"_a)
      .def(
          "pad",
          [](B& b, const View& x, std::vector<int64_t> pads, nb::handle v) {
            DType t = x.buf->dtype;
            return b.pad(x, pads, to_expr(v, ir::is_float(t) ? ir::compute_dtype(t) : DType::F32));
          },
          "x"_a, "pads"_a, "value"_a)
      .def(
          "conv2d",
          [](B& b, const View& x, const View& w, std::optional<View> bias, std::vector<int64_t> stride,
             std::vector<int64_t> padding, std::vector<int64_t> dilation,
             bool same) { return b.conv2d(x, w, bias ? &*bias : nullptr, stride, padding, dilation, same); },
          "x"_a, "w"_a, "bias"_a = nb::none(), "stride"_a = std::vector<int64_t>{1, 1},
          "padding"_a = std::vector<int64_t>{0, 0}, "dilation"_a = std::vector<int64_t>{1, 1},
          "same_padding"_a = false)
      .def("depthwise_conv2d", &B::depthwise_conv2d, "x"_a, "w"_a, "stride"_a, "padding"_a, "dilation"_a,
           "A depthwise convolution, padding {top, bottom, left, right}: a TDWCONV per plane.")
      .def_static("depthwise_fits", &B::depthwise_fits, "kh"_a, "dh"_a, "wp"_a)
      .def(
          "assign",
          [](B& b, const View& dst, nb::handle src) {
            b.assign(dst, to_operand(src, ir::compute_dtype(dst.buf->dtype)));
          },
          "dst"_a, "src"_a)
      .def(
          "update",
          [](B& b, Opcode op, const View& dst, nb::handle src) {
            b.update(op, dst,
                     to_operand(
                         src, ir::is_float(dst.buf->dtype) ? ir::compute_dtype(dst.buf->dtype) : DType::F32));
          },
          "op"_a, "dst"_a, "src"_a)
      .def("finish", &B::finish, "outputs"_a)
      .def("detach", &B::detach, "x"_a, "A copy autodiff treats as a constant (no gradient flows through).")
      .def("set_location", &B::set_location, "where"_a,
           "Source location of the statements built from now on (named by autodiff's errors).")
      .def_static("broadcast_shapes", &B::broadcast_shapes);

  m.def(
      "autodiff",
      [](const ir::Program& forward, const B* builder, const std::vector<bool>& wanted, bool save_products) {
        passes::Locate locate;
        passes::IsDetached detached;
        if (builder) {
          locate = [builder](const ir::StmtNode* s) { return builder->location(s); };
          detached = [builder](const ir::Buffer* b) { return builder->is_detached(b); };
        }
        passes::Backward bw = passes::autodiff(forward, locate, wanted, detached, save_products);
        std::vector<std::pair<std::string, int>> args;
        for (auto& a : bw.args)
          args.emplace_back(a.role == passes::Backward::Role::Input   ? "input"
                            : a.role == passes::Backward::Role::Saved ? "saved"
                                                                      : "cotangent",
                            a.param);
        std::optional<ir::Program> with_saves;
        if (!bw.forward_with_saves.params.empty()) with_saves = bw.forward_with_saves;
        return std::make_tuple(bw.program, args, bw.grads, bw.results, with_saves);
      },
      "forward"_a, "builder"_a = nb::none(), "wanted"_a = std::vector<bool>(), "save_products"_a = false,
      "The tensor-level program of `forward`'s vector-Jacobian product (passes/autodiff.h), for the "
      "gradients of the params `wanted` marks (all when empty): "
      "(program, [(role, forward param index)] per backward param, forward param index per gradient output, "
      "forward param indices of the results, the forward with the saved products as extra outputs or None).");
}

}  // namespace pypto::bindings
