// C++ text of the IR's scalar expressions for the CPU code generator (cpp_expr.h).
#include "backends/cpu/cpp_expr.h"

#include "ir/printer.h"
#include "pto/elem.hpp"

namespace pypto::cpu {

using namespace ir;

namespace {
bool fl(const Expr& e) { return is_float(e->dtype); }
}  // namespace

ExprText::ExprText(const std::map<std::string, DType>& vars,
                   std::function<std::string(const std::string&)> name)
    : vars_(vars), name_(std::move(name)) {}

std::string ExprText::as_f(const Expr& e) const { return fl(e) ? expr(e) : "double(" + expr(e) + ")"; }
std::string ExprText::as_i(const Expr& e) const {
  return fl(e) ? "pto::elem::cast<int64_t>(" + expr(e) + ")" : expr(e);
}

std::string ExprText::expr(const Expr& e) const {
  if (!e) throw Error("cpu codegen: missing expression");
  const auto& a = e->args;
  auto arg = [&](size_t i) -> const Expr& {
    if (i >= a.size() || !a[i]) throw Error("cpu codegen: malformed expression `" + to_string(e) + "`");
    return a[i];
  };
  const bool f = fl(e);
  switch (e->op) {
    case ExprOp::Int:
      return f ? float_literal(double(e->ival)) : int_literal(e->ival);
    case ExprOp::Float:
      return f ? float_literal(e->fval) : int_literal(pto::elem::cast<int64_t>(e->fval));
    case ExprOp::Var: {
      auto it = vars_.find(e->name);
      if (it == vars_.end()) throw Error("cpu codegen: variable '" + e->name + "' is used outside its scope");
      std::string v = name_(e->name);
      if (f && !is_float(it->second)) return "double(" + v + ")";
      if (!f && is_float(it->second)) return "pto::elem::cast<int64_t>(" + v + ")";
      return v;
    }
    case ExprOp::Add:
    case ExprOp::Sub:
    case ExprOp::Mul: {
      const char* o = e->op == ExprOp::Add ? " + " : e->op == ExprOp::Sub ? " - " : " * ";
      return f ? "(" + as_f(arg(0)) + o + as_f(arg(1)) + ")" : "(" + as_i(arg(0)) + o + as_i(arg(1)) + ")";
    }
    case ExprOp::Div:
      return f ? "(" + as_f(arg(0)) + " / " + as_f(arg(1)) + ")"
               : "pto::elem::floordiv<int64_t>(" + as_i(arg(0)) + ", " + as_i(arg(1)) + ")";
    case ExprOp::Mod:
      return f ? "pto::elem::floormod<double>(" + as_f(arg(0)) + ", " + as_f(arg(1)) + ")"
               : "pto::elem::floormod<int64_t>(" + as_i(arg(0)) + ", " + as_i(arg(1)) + ")";
    case ExprOp::Min:
    case ExprOp::Max: {
      const std::string fn = std::string(e->op == ExprOp::Min ? "pto::elem::min<" : "pto::elem::max<") +
                             (f ? "double>(" : "int64_t>(");
      return f ? fn + as_f(arg(0)) + ", " + as_f(arg(1)) + ")"
               : fn + as_i(arg(0)) + ", " + as_i(arg(1)) + ")";
    }
    case ExprOp::Lt:
    case ExprOp::Le:
    case ExprOp::Eq:
    case ExprOp::Ne: {
      const char* o = e->op == ExprOp::Lt   ? " < "
                      : e->op == ExprOp::Le ? " <= "
                      : e->op == ExprOp::Eq ? " == "
                                            : " != ";
      bool any_f = fl(arg(0)) || fl(arg(1));
      std::string x = any_f ? as_f(arg(0)) : expr(arg(0)), y = any_f ? as_f(arg(1)) : expr(arg(1));
      return wrap_bool(f, "(" + x + o + y + ")");
    }
    case ExprOp::And:
    case ExprOp::Or: {
      const char* o = e->op == ExprOp::And ? " && " : " || ";
      return wrap_bool(f, "((" + expr(arg(0)) + " != 0)" + o + "(" + expr(arg(1)) + " != 0))");
    }
    case ExprOp::Not:
      return wrap_bool(f, "(" + expr(arg(0)) + " == 0)");
    case ExprOp::Select:
      return f ? "((" + expr(arg(0)) + " != 0) ? " + as_f(arg(1)) + " : " + as_f(arg(2)) + ")"
               : "((" + expr(arg(0)) + " != 0) ? " + as_i(arg(1)) + " : " + as_i(arg(2)) + ")";
    case ExprOp::Cast:
      return cast_expr(e->dtype, arg(0));
    case ExprOp::Sqrt:
      return "pto::elem::sqrt<double>(" + as_f(arg(0)) + ")";
    case ExprOp::Exp:
      return "pto::elem::exp<double>(" + as_f(arg(0)) + ")";
    case ExprOp::Log:
      return "pto::elem::log<double>(" + as_f(arg(0)) + ")";
    case ExprOp::BitAnd:
    case ExprOp::BitOr:
    case ExprOp::BitXor:
    case ExprOp::Shl:
    case ExprOp::Shr: {
      const char* fn = e->op == ExprOp::BitAnd   ? "band"
                       : e->op == ExprOp::BitOr  ? "bor"
                       : e->op == ExprOp::BitXor ? "bxor"
                       : e->op == ExprOp::Shl    ? "shl"
                                                 : "shr";
      return std::string("pto::elem::") + fn + "<int64_t>(" + as_i(arg(0)) + ", " + as_i(arg(1)) + ")";
    }
    case ExprOp::BitNot:
      return "pto::elem::bnot<int64_t>(" + as_i(arg(0)) + ")";
  }
  throw Error("cpu codegen: unknown expression `" + to_string(e) + "`");
}

// A C++ boolean for an `if`: comparisons and logic print bare, anything else is tested != 0.
std::string ExprText::condition(const Expr& c) const {
  std::string e = expr(c);
  if (c && !fl(c) && e.rfind("int64_t(", 0) == 0 && e.back() == ')' && ir::is_logical_op(c->op))
    return e.substr(7);  // drop the int64_t cast, keep the parentheses
  return e + " != 0";
}

std::string ExprText::wrap_bool(bool as_float, const std::string& cond) {
  return as_float ? "double" + cond : "int64_t" + cond;
}

std::string ExprText::cast_expr(DType t, const Expr& x) const {
  switch (t) {
    case DType::F32:
      return "double(float(" + as_f(x) + "))";
    case DType::F64:
      return as_f(x);
    case DType::F16:
    case DType::BF16:
      return "double(float(" + as_f(x) + "))";  // storage types compute in f32
    case DType::I32:
      return "int64_t(pto::elem::cast<int32_t>(" + expr(x) + "))";
    case DType::I64:
      return as_i(x);
    case DType::Bool:
      return "int64_t(" + expr(x) + " != 0)";
    case DType::I8:
    case DType::U8:
    case DType::I16:
      return "int64_t(pto::elem::cast<" + std::string(ctype(t)) + ">(" + expr(x) + "))";
  }
  return expr(x);
}

IExpr ExprText::iexpr(const Expr& e) const {
  if (auto c = as_int(e); c && !fl(e)) return ic(*c);
  return {as_i(e), std::nullopt};
}

}  // namespace pypto::cpu
