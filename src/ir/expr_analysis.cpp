// Reading expressions: interval bounds, evaluation, text form, variables and substitution.
//
// Text form (parsed back by ir/parser.cpp, which rebuilds exactly the printed tree):
//   variables `%name` (or `%"any text"` when the name is not [A-Za-z0-9_.]+; the parser knows
//   each variable's dtype from its declaration); integers in decimal (`-3`); i64 is the plain
//   form, other integer-typed constants print as `cast<i32>(5)`. Floats print the shortest
//   decimal that reads back to the same value and always contain `.` or `e`: f32 with an `f`
//   suffix (`1.5f`, `1e+20f`), f64 without (`1.5`), f16/bf16 as `cast<f16>(1.5)`; non-finite values
//   are `inf`, `-inf`, `nan` (+`f` for f32). Every binary operator is parenthesised:
//   `(a + b)`, `(a - b)`, `(a * b)`, `(a // b)` (integer floor division), `(a / b)` (float
//   division), `(a % b)`, `(a < b)`, `(a <= b)`, `(a == b)`, `(a != b)`, `(a && b)`, `(a || b)`;
//   `!a`; calls `min(a, b)`, `max(a, b)`, `select(c, a, b)`, `cast<f32>(a)`, `sqrt(a)`,
//   `exp(a)`, `log(a)`. A cast of a constant that did not fold prints as `cast<i64>((nanf))`.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>

#include "ir/expr.h"
#include "ir/expr_impl.h"
#include "ir/number_text.h"
#include "pto/elem.hpp"

namespace pypto::ir {
namespace detail {

std::string var_token(const std::string& name) {
  bool plain = !name.empty() && std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '.';
  });
  if (plain) return "%" + name;
  std::string s = "%\"";
  for (char c : name) {
    if (c == '"' || c == '\\') s += '\\';
    s += c;
  }
  return s + "\"";
}

std::string float_literal(double v, DType t) {
  const bool f32 = t == DType::F32;
  std::string body;
  if (std::isnan(v)) {
    body = "nan";
  } else if (std::isinf(v)) {
    body = v < 0 ? "-inf" : "inf";
  } else {
    // The shortest %g form that reads back to the same value (in f32 for f32 constants).
    // Locale-independent (ir/number_text.h): 2.5 prints as "2.5" under any locale.
    for (int prec = 1; prec <= 17; ++prec) {
      body = format_g(v, prec);
      const double back = parse_double(body).value_or(NAN);
      if (f32 ? float(back) == float(v) : back == v) break;
    }
    if (body.find_first_of(".e") == std::string::npos) body += ".0";
  }
  if (f32) return body + "f";
  if (t == DType::F64) return body;
  return "cast<" + std::string(dtype_name(t)) + ">(" + body + ")";
}

std::string int_literal(int64_t v, DType t) {
  std::string s = std::to_string(v);
  if (t == DType::I64) return s;
  return "cast<" + std::string(dtype_name(t)) + ">(" + s + ")";
}

}  // namespace detail

// ---- bounds -----------------------------------------------------------------------------------

namespace {
using I128 = __int128;
constexpr I128 kMin = std::numeric_limits<int64_t>::min();
constexpr I128 kMax = std::numeric_limits<int64_t>::max();

std::optional<Interval> make_iv(I128 lo, I128 hi) {
  if (lo < kMin || hi > kMax || lo > hi) return std::nullopt;
  return Interval{int64_t(lo), int64_t(hi)};
}

std::optional<Interval> corners(I128 a, I128 b, I128 c, I128 d) {
  return make_iv(std::min({a, b, c, d}), std::max({a, b, c, d}));
}

std::optional<bool> decided(const std::optional<Interval>& b) {
  if (!b) return std::nullopt;
  if (b->lo > 0 || b->hi < 0) return true;
  if (b->lo == 0 && b->hi == 0) return false;
  return std::nullopt;
}

Interval bool_iv(std::optional<bool> r) {
  if (!r) return {0, 1};
  return *r ? Interval{1, 1} : Interval{0, 0};
}
}  // namespace

std::optional<Interval> bounds(const Expr& e, const VarBounds& vars) {
  if (!e) return std::nullopt;
  auto arg = [&](size_t i) { return bounds(e->args[i], vars); };
  switch (e->op) {
    case ExprOp::Int:
      return Interval{e->ival, e->ival};
    case ExprOp::Float:
      return std::nullopt;
    case ExprOp::Var: {
      auto it = vars.find(e->name);
      if (it == vars.end()) return std::nullopt;
      return it->second;
    }
    default:
      break;
  }
  if (is_float(e->dtype)) return std::nullopt;
  switch (e->op) {
    case ExprOp::Add:
    case ExprOp::Sub:
    case ExprOp::Mul:
    case ExprOp::Min:
    case ExprOp::Max: {
      auto a = arg(0), b = arg(1);
      if (!a || !b) return std::nullopt;
      if (e->op == ExprOp::Add) return make_iv(I128(a->lo) + b->lo, I128(a->hi) + b->hi);
      if (e->op == ExprOp::Sub) return make_iv(I128(a->lo) - b->hi, I128(a->hi) - b->lo);
      if (e->op == ExprOp::Min) return Interval{std::min(a->lo, b->lo), std::min(a->hi, b->hi)};
      if (e->op == ExprOp::Max) return Interval{std::max(a->lo, b->lo), std::max(a->hi, b->hi)};
      return corners(I128(a->lo) * b->lo, I128(a->lo) * b->hi, I128(a->hi) * b->lo, I128(a->hi) * b->hi);
    }
    case ExprOp::Div: {
      auto a = arg(0), b = arg(1);
      if (!a || !b || (b->lo <= 0 && b->hi >= 0)) return std::nullopt;
      // Floor division is monotonic in each argument on a divisor range of one sign.
      using detail::floordiv;
      return corners(floordiv(a->lo, b->lo), floordiv(a->lo, b->hi), floordiv(a->hi, b->lo),
                     floordiv(a->hi, b->hi));
    }
    case ExprOp::Mod: {
      auto b = arg(1);
      if (!b || (b->lo <= 0 && b->hi >= 0)) return std::nullopt;
      auto a = arg(0);
      if (b->lo == b->hi && a) {
        int64_t k = b->lo;
        if (detail::floordiv(a->lo, k) == detail::floordiv(a->hi, k)) {
          int64_t x = detail::floormod(a->lo, k), y = detail::floormod(a->hi, k);
          return Interval{std::min(x, y), std::max(x, y)};
        }
      }
      if (b->lo > 0) {
        int64_t hi = b->hi - 1;
        if (a && a->lo >= 0) hi = std::min(hi, a->hi);
        return Interval{0, hi};
      }
      return Interval{b->lo + 1, 0};
    }
    case ExprOp::Lt:
    case ExprOp::Le:
    case ExprOp::Eq:
    case ExprOp::Ne: {
      if (is_float(e->args[0]->dtype) || is_float(e->args[1]->dtype)) return Interval{0, 1};
      auto a = arg(0), b = arg(1);
      if (!a || !b) return Interval{0, 1};
      std::optional<bool> r;
      switch (e->op) {
        case ExprOp::Lt:
          if (a->hi < b->lo)
            r = true;
          else if (a->lo >= b->hi)
            r = false;
          break;
        case ExprOp::Le:
          if (a->hi <= b->lo)
            r = true;
          else if (a->lo > b->hi)
            r = false;
          break;
        case ExprOp::Eq:
          if (a->lo == a->hi && b->lo == b->hi && a->lo == b->lo)
            r = true;
          else if (a->hi < b->lo || b->hi < a->lo)
            r = false;
          break;
        default:
          if (a->lo == a->hi && b->lo == b->hi && a->lo == b->lo)
            r = false;
          else if (a->hi < b->lo || b->hi < a->lo)
            r = true;
          break;
      }
      return bool_iv(r);
    }
    case ExprOp::And:
    case ExprOp::Or: {
      auto a = decided(arg(0)), b = decided(arg(1));
      if (e->op == ExprOp::And) {
        if ((a && !*a) || (b && !*b)) return Interval{0, 0};
        if (a && b) return Interval{1, 1};
      } else {
        if ((a && *a) || (b && *b)) return Interval{1, 1};
        if (a && b) return Interval{0, 0};
      }
      return Interval{0, 1};
    }
    case ExprOp::Not: {
      auto a = decided(arg(0));
      return bool_iv(a ? std::optional<bool>(!*a) : std::nullopt);
    }
    case ExprOp::Select: {
      auto c = decided(arg(0));
      if (c) return *c ? arg(1) : arg(2);
      auto a = arg(1), b = arg(2);
      if (!a || !b) return std::nullopt;
      return Interval{std::min(a->lo, b->lo), std::max(a->hi, b->hi)};
    }
    case ExprOp::Cast: {
      if (is_float(e->args[0]->dtype)) return std::nullopt;
      auto a = arg(0);
      if (!a) return std::nullopt;
      if (e->dtype == DType::Bool) return bool_iv(decided(a));
      if (e->dtype == DType::I32 &&
          (a->lo < std::numeric_limits<int32_t>::min() || a->hi > std::numeric_limits<int32_t>::max()))
        return std::nullopt;
      return a;
    }
    case ExprOp::BitAnd: {  // a non-negative operand bounds the result: its bits are a superset
      auto a = arg(0), b = arg(1);
      std::optional<int64_t> hi;
      for (const auto& x : {a, b})
        if (x && x->lo >= 0) hi = hi ? std::min(*hi, x->hi) : x->hi;
      if (hi) return Interval{0, *hi};
      return std::nullopt;
    }
    default:
      return std::nullopt;
  }
}

// ---- evaluation -------------------------------------------------------------------------------

namespace {
ScalarValue ival(int64_t v) { return ScalarValue{false, v, 0}; }
ScalarValue fval(double v, DType t) {
  if (t != DType::F64) v = double(float(v));
  return ScalarValue{true, 0, v};
}
// Scalar-expression semantics are pto/elem.hpp's, shared with folding (expr.cpp) and compiled
// code (backends/cpu/codegen.cpp): float -> int saturates (NaN -> 0), x // 0 == x % 0 == 0.
int64_t as_i(const ScalarValue& v) { return v.is_float ? pto::elem::cast<int64_t>(v.f) : v.i; }
}  // namespace

ScalarValue eval(const Expr& e, const ScalarEnv& env) {
  if (!e) throw Error("eval: null expression");
  const bool fl = is_float(e->dtype);
  auto arg = [&](size_t i) { return eval(e->args[i], env); };
  switch (e->op) {
    case ExprOp::Int:
      return fl ? fval(double(e->ival), e->dtype) : ival(e->ival);
    case ExprOp::Float:
      return fl ? fval(e->fval, e->dtype) : ival(as_i(ScalarValue{true, 0, e->fval}));
    case ExprOp::Var: {
      auto it = env.find(e->name);
      if (it == env.end()) throw Error("eval: unknown variable %" + e->name);
      return fl ? fval(it->second.as_double(), e->dtype) : ival(as_i(it->second));
    }
    case ExprOp::Add:
    case ExprOp::Sub:
    case ExprOp::Mul:
    case ExprOp::Div:
    case ExprOp::Mod:
    case ExprOp::Min:
    case ExprOp::Max: {
      ScalarValue a = arg(0), b = arg(1);
      if (fl) {
        double x = a.as_double(), y = b.as_double(), r = 0;
        switch (e->op) {
          case ExprOp::Add:
            r = x + y;
            break;
          case ExprOp::Sub:
            r = x - y;
            break;
          case ExprOp::Mul:
            r = x * y;
            break;
          case ExprOp::Div:
            r = x / y;
            break;  // IEEE: x / 0 is inf or nan
          case ExprOp::Mod:
            r = pto::elem::floormod(x, y);
            break;
          case ExprOp::Min:
            r = pto::elem::min(x, y);
            break;
          default:
            r = pto::elem::max(x, y);
            break;
        }
        return fval(r, e->dtype);
      }
      int64_t x = as_i(a), y = as_i(b);
      switch (e->op) {
        case ExprOp::Add:
          return ival(int64_t(uint64_t(x) + uint64_t(y)));
        case ExprOp::Sub:
          return ival(int64_t(uint64_t(x) - uint64_t(y)));
        case ExprOp::Mul:
          return ival(int64_t(uint64_t(x) * uint64_t(y)));
        case ExprOp::Div:
          return ival(pto::elem::floordiv(x, y));
        case ExprOp::Mod:
          return ival(pto::elem::floormod(x, y));
        case ExprOp::Min:
          return ival(std::min(x, y));
        default:
          return ival(std::max(x, y));
      }
    }
    case ExprOp::Lt:
    case ExprOp::Le:
    case ExprOp::Eq:
    case ExprOp::Ne: {
      ScalarValue a = arg(0), b = arg(1);
      bool r;
      if (a.is_float || b.is_float) {
        double x = a.as_double(), y = b.as_double();
        r = e->op == ExprOp::Lt   ? x < y
            : e->op == ExprOp::Le ? x <= y
            : e->op == ExprOp::Eq ? x == y
                                  : x != y;
      } else {
        r = e->op == ExprOp::Lt   ? a.i < b.i
            : e->op == ExprOp::Le ? a.i <= b.i
            : e->op == ExprOp::Eq ? a.i == b.i
                                  : a.i != b.i;
      }
      return ival(r);
    }
    case ExprOp::And: {
      if (arg(0).as_double() == 0) return ival(0);  // short-circuit, as in C and Python
      return ival(arg(1).as_double() != 0);
    }
    case ExprOp::Or: {
      if (arg(0).as_double() != 0) return ival(1);
      return ival(arg(1).as_double() != 0);
    }
    case ExprOp::Not:
      return ival(arg(0).as_double() == 0);
    case ExprOp::Select: {
      ScalarValue r = arg(0).as_double() != 0 ? arg(1) : arg(2);
      return fl ? fval(r.as_double(), e->dtype) : ival(as_i(r));
    }
    case ExprOp::Cast: {
      ScalarValue a = arg(0);
      if (e->dtype == DType::Bool) return ival(a.as_double() != 0);
      if (fl) return fval(a.as_double(), e->dtype);
      if (e->dtype == DType::I32)
        return ival(a.is_float ? pto::elem::cast<int32_t>(a.f) : pto::elem::cast<int32_t>(a.i));
      return ival(as_i(a));
    }
    case ExprOp::Sqrt:
    case ExprOp::Exp:
    case ExprOp::Log: {
      double x = arg(0).as_double();
      double r = e->op == ExprOp::Sqrt  ? pto::elem::sqrt(x)
                 : e->op == ExprOp::Exp ? pto::elem::exp(x)
                                        : pto::elem::log(x);
      return fval(r, fl ? e->dtype : DType::F64);
    }
    case ExprOp::BitAnd:
    case ExprOp::BitOr:
    case ExprOp::BitXor:
    case ExprOp::Shl:
    case ExprOp::Shr: {
      int64_t x = as_i(arg(0)), y = as_i(arg(1));
      switch (e->op) {
        case ExprOp::BitAnd:
          return ival(pto::elem::band(x, y));
        case ExprOp::BitOr:
          return ival(pto::elem::bor(x, y));
        case ExprOp::BitXor:
          return ival(pto::elem::bxor(x, y));
        case ExprOp::Shl:
          return ival(pto::elem::shl(x, y));
        default:
          return ival(pto::elem::shr(x, y));
      }
    }
    case ExprOp::BitNot:
      return ival(pto::elem::bnot(as_i(arg(0))));
  }
  throw Error("eval: unknown operator");
}

// ---- text -------------------------------------------------------------------------------------

namespace {
const char* binop_token(const ExprNode& n) {
  switch (n.op) {
    case ExprOp::Add:
      return "+";
    case ExprOp::Sub:
      return "-";
    case ExprOp::Mul:
      return "*";
    case ExprOp::Div:
      return is_float(n.dtype) ? "/" : "//";
    case ExprOp::Mod:
      return "%";
    case ExprOp::Lt:
      return "<";
    case ExprOp::Le:
      return "<=";
    case ExprOp::Eq:
      return "==";
    case ExprOp::Ne:
      return "!=";
    case ExprOp::And:
      return "&&";
    case ExprOp::Or:
      return "||";
    case ExprOp::BitAnd:
      return "&";
    case ExprOp::BitOr:
      return "|";
    case ExprOp::BitXor:
      return "^";
    case ExprOp::Shl:
      return "<<";
    case ExprOp::Shr:
      return ">>";
    default:
      return nullptr;
  }
}

void write(const Expr& e, std::string& out) {
  if (!e) {
    out += "<null>";
    return;
  }
  switch (e->op) {
    case ExprOp::Int:
      // An Int leaf carrying a float dtype can only come from hand-made nodes; keep it exact.
      out += is_float(e->dtype)
                 ? "cast<" + std::string(dtype_name(e->dtype)) + ">(" + std::to_string(e->ival) + ")"
                 : detail::int_literal(e->ival, e->dtype);
      return;
    case ExprOp::Float:
      out += detail::float_literal(e->fval, e->dtype);
      return;
    case ExprOp::Var:
      out += detail::var_token(e->name);
      return;
    default:
      break;
  }
  if (const char* tok = binop_token(*e); tok && e->args.size() == 2) {
    out += '(';
    write(e->args[0], out);
    out += ' ';
    out += tok;
    out += ' ';
    write(e->args[1], out);
    out += ')';
    return;
  }
  const char* fn = nullptr;
  switch (e->op) {
    case ExprOp::Not:
    case ExprOp::BitNot:
      out += e->op == ExprOp::Not ? '!' : '~';
      write(e->args.empty() ? nullptr : e->args[0], out);
      return;
    case ExprOp::Min:
      fn = "min";
      break;
    case ExprOp::Max:
      fn = "max";
      break;
    case ExprOp::Select:
      fn = "select";
      break;
    case ExprOp::Sqrt:
      fn = "sqrt";
      break;
    case ExprOp::Exp:
      fn = "exp";
      break;
    case ExprOp::Log:
      fn = "log";
      break;
    case ExprOp::Cast:
      out += "cast<";
      out += dtype_name(e->dtype);
      out += '>';
      break;
    default:
      fn = "?";
      break;
  }
  if (fn) out += fn;
  out += '(';
  for (size_t i = 0; i < e->args.size(); ++i) {
    if (i) out += ", ";
    // `cast<T>(literal)` spells a constant of type T; a real cast of a constant (one that could
    // not be folded, e.g. nan to i64) gets extra parentheses to keep the two apart.
    bool wrap = e->op == ExprOp::Cast && is_const(e->args[i]);
    if (wrap) out += '(';
    write(e->args[i], out);
    if (wrap) out += ')';
  }
  out += ')';
}
}  // namespace

std::string to_string(const Expr& e) {
  std::string s;
  write(e, s);
  return s;
}

// ---- variables --------------------------------------------------------------------------------

void collect_vars(const Expr& e, std::vector<std::string>& out) {
  if (!e) return;
  if (e->op == ExprOp::Var) {
    if (std::find(out.begin(), out.end(), e->name) == out.end()) out.push_back(e->name);
    return;
  }
  for (const auto& a : e->args) collect_vars(a, out);
}

Expr substitute(const Expr& e, const std::map<std::string, Expr>& repl) {
  if (!e) return e;
  if (e->op == ExprOp::Var) {
    auto it = repl.find(e->name);
    return it == repl.end() ? e : it->second;
  }
  if (e->args.empty()) return e;
  std::vector<Expr> args;
  args.reserve(e->args.size());
  bool changed = false;
  for (const auto& a : e->args) {
    args.push_back(substitute(a, repl));
    changed |= args.back() != a;
  }
  if (!changed) return e;  // keep the node (and its sharing) when nothing was replaced
  return make_expr(e->op, e->dtype, std::move(args));
}

}  // namespace pypto::ir
