// Scalar expressions: leaves, the simplifying constructors and structural identity.
//
// Canonical forms the constructors maintain (integer expressions):
//  * A sum is c0 + sum(k_i * t_i) over atoms t_i (anything that is not +, -, or a multiple by a
//    constant) in compare() order, written with the positive terms first, then the negative ones
//    subtracted, then the constant: `((%i * 2) + %j) - %k) + 3`, `(64 - %i)`.
//  * min/max take their operands in compare() order; terms and a constant common to both
//    operands are pulled out (`min(i + a, i + b)` -> `min(a, b) + i`, `min(x + 5, y + 5)` ->
//    `min(x, y) + 5`), and the terms of a sum that cancel a term of an operand of a min/max in
//    the sum (coefficient +-1) move into it: `min(i + 64, M) - i` -> `min(64, M - i)`. Moving only
//    cancelling terms makes the result independent of the order the expression was built in.
//  * A min/max or comparison whose operands' difference has constant bounds is decided.
// Float expressions only fold constants and drop `+ 0`, `* 1`, `/ 1`: reassociating floats would
// change results.
#include "ir/expr.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "ir/expr_impl.h"
#include "ir/structural.h"
#include "pto/elem.hpp"

namespace pypto::ir {
namespace detail {

// Scalars are i64, i32, f32 or f64 (bool values are i64 0/1), so the tensor table serves them.
DType promote(DType a, DType b) { return promote_types(a, b); }

DType result_dtype(ExprOp op, DType t, const std::vector<Expr>& args) {
  switch (op) {
    case ExprOp::Int:
    case ExprOp::Float:
    case ExprOp::Var:
    case ExprOp::Cast:
      return t;
    case ExprOp::Add:
    case ExprOp::Sub:
    case ExprOp::Mul:
    case ExprOp::Div:
    case ExprOp::Mod:
    case ExprOp::Min:
    case ExprOp::Max:
      return args.size() == 2 ? promote(args[0]->dtype, args[1]->dtype) : t;
    case ExprOp::Lt:
    case ExprOp::Le:
    case ExprOp::Eq:
    case ExprOp::Ne:
    case ExprOp::And:
    case ExprOp::Or:
    case ExprOp::Not:
      return DType::I64;
    case ExprOp::Select:
      return args.size() == 3 ? promote(args[1]->dtype, args[2]->dtype) : t;
    case ExprOp::Sqrt:
    case ExprOp::Exp:
    case ExprOp::Log:
      // Float math keeps a float argument's (compute) type; an integer argument computes in f32,
      // PyPTO's default float.
      return args.size() == 1 && is_float(args[0]->dtype) ? compute_dtype(args[0]->dtype) : DType::F32;
    case ExprOp::BitAnd:
    case ExprOp::BitOr:
    case ExprOp::BitXor:
    case ExprOp::Shl:
    case ExprOp::Shr:
    case ExprOp::BitNot:
      return DType::I64;
  }
  return t;
}

Expr make_raw(ExprOp op, DType t, std::vector<Expr> args) {
  auto n = std::make_shared<ExprNode>();
  n->op = op;
  n->dtype = result_dtype(op, t, args);
  n->args = std::move(args);
  return n;
}

Expr make_int(int64_t v, DType t) {
  auto n = std::make_shared<ExprNode>();
  n->op = ExprOp::Int;
  n->dtype = t;
  n->ival = v;
  return n;
}

Expr make_float_raw(double v, DType t) {
  auto n = std::make_shared<ExprNode>();
  n->op = ExprOp::Float;
  n->dtype = t;
  // One NaN: structural equality compares bit patterns, and the text form has one `nan`.
  n->fval = std::isnan(v) ? std::numeric_limits<double>::quiet_NaN() : v;
  return n;
}

// The scalar language's // and % are pto/elem.hpp's (x // 0 == 0), as in compiled code.
int64_t floordiv(int64_t a, int64_t b) { return pto::elem::floordiv(a, b); }
int64_t floormod(int64_t a, int64_t b) { return pto::elem::floormod(a, b); }

int compare(const Expr& a, const Expr& b) {
  if (a.get() == b.get()) return 0;
  if (!a || !b) return a ? 1 : -1;
  auto cmp3 = [](auto x, auto y) { return x < y ? -1 : (y < x ? 1 : 0); };
  if (int c = cmp3(int(a->op), int(b->op))) return c;
  if (int c = cmp3(int(a->dtype), int(b->dtype))) return c;
  if (int c = cmp3(a->ival, b->ival)) return c;
  if (int c = cmp3(structural::double_bits(a->fval), structural::double_bits(b->fval))) return c;
  if (int c = a->name.compare(b->name)) return c < 0 ? -1 : 1;
  if (int c = cmp3(a->args.size(), b->args.size())) return c;
  for (size_t i = 0; i < a->args.size(); ++i)
    if (int c = compare(a->args[i], b->args[i])) return c;
  return 0;
}

}  // namespace detail

using detail::is_int_dtype;
using detail::make_raw;
using detail::promote;

namespace {

// Integer arithmetic that wraps (two's complement) rather than invoking undefined behaviour.
int64_t wadd(int64_t a, int64_t b) { return int64_t(uint64_t(a) + uint64_t(b)); }
int64_t wsub(int64_t a, int64_t b) { return int64_t(uint64_t(a) - uint64_t(b)); }
int64_t wmul(int64_t a, int64_t b) { return int64_t(uint64_t(a) * uint64_t(b)); }

// Constants of a float type hold values representable in that type (f16/bf16 compute in f32).
double round_to(double v, DType t) {
  if (t == DType::F64 || std::isnan(v)) return v;
  return double(float(v));
}

bool is_int_const(const Expr& e) { return e->op == ExprOp::Int; }
bool is_zero(const Expr& e) {
  return (e->op == ExprOp::Int && e->ival == 0) || (e->op == ExprOp::Float && e->fval == 0);
}
bool is_one(const Expr& e) {
  return (e->op == ExprOp::Int && e->ival == 1) || (e->op == ExprOp::Float && e->fval == 1);
}
bool is_boolean_valued(const Expr& e) {
  if (is_logical_op(e->op)) return true;
  return e->op == ExprOp::Int && (e->ival == 0 || e->ival == 1);
}

// ---- linear forms ---------------------------------------------------------------------------

struct Term {
  Expr atom;
  int64_t k;
};
struct Linear {
  int64_t c = 0;
  std::vector<Term> terms;  // sorted by detail::compare, k != 0
};

Linear add_lin(const Linear& a, const Linear& b, int64_t sb = 1) {
  Linear r;
  r.c = wadd(a.c, wmul(sb, b.c));
  size_t i = 0, j = 0;
  while (i < a.terms.size() || j < b.terms.size()) {
    int c = i == a.terms.size()   ? 1
            : j == b.terms.size() ? -1
                                  : detail::compare(a.terms[i].atom, b.terms[j].atom);
    if (c < 0) {
      r.terms.push_back(a.terms[i++]);
    } else if (c > 0) {
      r.terms.push_back({b.terms[j].atom, wmul(sb, b.terms[j].k)});
      ++j;
    } else {
      int64_t k = wadd(a.terms[i].k, wmul(sb, b.terms[j].k));
      if (k != 0) r.terms.push_back({a.terms[i].atom, k});
      ++i, ++j;
    }
  }
  return r;
}

Linear scale_lin(Linear a, int64_t k) {
  if (k == 0) return Linear{};
  a.c = wmul(a.c, k);
  for (auto& t : a.terms) t.k = wmul(t.k, k);
  return a;
}

Linear linearize(const Expr& e) {
  switch (e->op) {
    case ExprOp::Int:
      return Linear{e->ival, {}};
    case ExprOp::Add:
      if (is_int_dtype(e->dtype)) return add_lin(linearize(e->args[0]), linearize(e->args[1]));
      break;
    case ExprOp::Sub:
      if (is_int_dtype(e->dtype)) return add_lin(linearize(e->args[0]), linearize(e->args[1]), -1);
      break;
    case ExprOp::Mul:
      if (is_int_dtype(e->dtype)) {
        if (is_int_const(e->args[1])) return scale_lin(linearize(e->args[0]), e->args[1]->ival);
        if (is_int_const(e->args[0])) return scale_lin(linearize(e->args[1]), e->args[0]->ival);
      }
      break;
    default:
      break;
  }
  return Linear{0, {{e, 1}}};
}

// The canonical tree of a linear form (see the file comment), built without re-simplifying.
Expr build_linear(const Linear& l) {
  auto term = [](const Term& t, bool negate) {
    int64_t k = negate ? wsub(0, t.k) : t.k;
    return k == 1 ? t.atom : make_raw(ExprOp::Mul, DType::I64, {t.atom, int_imm(k)});
  };
  std::vector<const Term*> pos, neg;
  for (const auto& t : l.terms) (t.k > 0 ? pos : neg).push_back(&t);
  int64_t c = l.c;
  Expr acc;
  for (const Term* t : pos)
    acc = acc ? make_raw(ExprOp::Add, DType::I64, {acc, term(*t, false)}) : term(*t, false);
  size_t first_neg = 0;
  if (!acc) {
    if (neg.empty()) return int_imm(c);
    if (c != 0) {
      acc = int_imm(c);
      c = 0;
    } else {
      acc = term(*neg[0], false);
      first_neg = 1;
    }
  }
  for (size_t i = first_neg; i < neg.size(); ++i) {
    const Term& t = *neg[i];
    if (t.k == std::numeric_limits<int64_t>::min()) {
      acc = make_raw(ExprOp::Add, DType::I64, {acc, term(t, false)});
    } else {
      acc = make_raw(ExprOp::Sub, DType::I64, {acc, term(t, true)});
    }
  }
  if (c > 0) acc = make_raw(ExprOp::Add, DType::I64, {acc, int_imm(c)});
  if (c < 0) {
    acc = c == std::numeric_limits<int64_t>::min() ? make_raw(ExprOp::Add, DType::I64, {acc, int_imm(c)})
                                                   : make_raw(ExprOp::Sub, DType::I64, {acc, int_imm(-c)});
  }
  return acc;
}

Expr minmax(ExprOp op, const Expr& a, const Expr& b);

int64_t coef_of(const Linear& l, const Expr& atom) {
  for (const auto& t : l.terms)
    if (detail::compare(t.atom, atom) == 0) return t.k;
  return 0;
}

// A sum. The terms of the sum that cancel a term of an operand of a min/max term (coefficient
// +-1) move into it: `min(i + 64, M) - i + j` -> `min(64, M - i) + j`. Moving only cancelling
// terms keeps the result independent of the order the sum was built in.
Expr from_linear(const Linear& l) {
  for (size_t i = 0; i < l.terms.size(); ++i) {
    const Term& t = l.terms[i];
    if ((t.atom->op != ExprOp::Min && t.atom->op != ExprOp::Max) || (t.k != 1 && t.k != -1)) continue;
    if (!is_int_dtype(t.atom->dtype)) continue;
    Linear a0 = scale_lin(linearize(t.atom->args[0]), t.k);
    Linear a1 = scale_lin(linearize(t.atom->args[1]), t.k);
    Linear moved, kept;
    kept.c = l.c;
    for (size_t j = 0; j < l.terms.size(); ++j) {
      if (j == i) continue;
      const Term& r = l.terms[j];
      bool cancels = coef_of(a0, r.atom) == wsub(0, r.k) || coef_of(a1, r.atom) == wsub(0, r.k);
      (cancels ? moved : kept).terms.push_back(r);
    }
    if (moved.terms.empty()) continue;
    ExprOp op = t.k == 1 ? t.atom->op : (t.atom->op == ExprOp::Min ? ExprOp::Max : ExprOp::Min);
    Expr m = minmax(op, from_linear(add_lin(a0, moved)), from_linear(add_lin(a1, moved)));
    return from_linear(add_lin(linearize(m), kept));
  }
  return build_linear(l);
}

// Bounds of a linear form's value when its atoms have bounds that need no variable (constants,
// `x % 64`, ...).
std::optional<Interval> linear_bounds(const Linear& l) {
  __int128 lo = l.c, hi = l.c;
  for (const auto& t : l.terms) {
    auto b = bounds(t.atom, {});
    if (!b) return std::nullopt;
    __int128 x = __int128(b->lo) * t.k, y = __int128(b->hi) * t.k;
    lo += std::min(x, y);
    hi += std::max(x, y);
  }
  constexpr __int128 kMin = std::numeric_limits<int64_t>::min(), kMax = std::numeric_limits<int64_t>::max();
  if (lo < kMin || hi > kMax) return std::nullopt;
  return Interval{int64_t(lo), int64_t(hi)};
}

// Constant operands fold through the one scalar evaluator (eval, expr_analysis.cpp), so a folded
// constant is exactly what the interpreter would compute at run time (and, through pto/elem.hpp,
// what compiled code computes).
Expr fold_const(ExprOp op, DType t, std::vector<Expr> args) {
  const ScalarValue v = eval(make_raw(op, t, std::move(args)), ScalarEnv{});
  if (is_float(t)) return float_imm(v.as_double(), t);
  return detail::make_int(v.i, t == DType::I32 || t == DType::Bool ? t : DType::I64);
}

Expr fold_float(ExprOp op, DType t, const Expr& a, const Expr& b) { return fold_const(op, t, {a, b}); }

Expr minmax(ExprOp op, const Expr& a0, const Expr& b0) {
  Expr a = a0, b = b0;
  DType t = promote(a->dtype, b->dtype);
  bool is_min = op == ExprOp::Min;
  if (is_const(a) && is_const(b)) {
    if (is_int_dtype(t)) return int_imm(is_min ? std::min(a->ival, b->ival) : std::max(a->ival, b->ival));
    return fold_float(op, t, a, b);
  }
  if (expr_equal(a, b)) return a;
  if (is_int_dtype(t)) {
    Linear la = linearize(a), lb = linearize(b);
    if (auto d = linear_bounds(add_lin(la, lb, -1))) {
      if (d->hi <= 0) return is_min ? a : b;
      if (d->lo >= 0) return is_min ? b : a;
    }
    // Pull out terms (and a constant) common to both operands.
    Linear common;
    for (const auto& ta : la.terms)
      for (const auto& tb : lb.terms)
        if (ta.k == tb.k && expr_equal(ta.atom, tb.atom)) common.terms.push_back(ta);
    if (la.c == lb.c) common.c = la.c;
    if (!common.terms.empty() || common.c != 0) {
      Expr inner = minmax(op, from_linear(add_lin(la, common, -1)), from_linear(add_lin(lb, common, -1)));
      return from_linear(add_lin(linearize(inner), common));
    }
    // min(a, min(a, b)) = min(a, b)
    for (int s = 0; s < 2; ++s) {
      const Expr& x = s ? b : a;
      const Expr& y = s ? a : b;
      if (y->op == op && (expr_equal(y->args[0], x) || expr_equal(y->args[1], x))) return y;
    }
  }
  if (detail::compare(b, a) < 0) std::swap(a, b);
  return make_raw(op, t, {a, b});
}

// Operand order of a commutative float op: constants last (`%x + 1.0f`), else compare() order.
bool order_first(const Expr& x, const Expr& y) {
  if (is_const(x) != is_const(y)) return !is_const(x);
  return detail::compare(x, y) < 0;
}

Expr arith(ExprOp op, const Expr& a, const Expr& b) {
  DType t = promote(a->dtype, b->dtype);
  if (is_int_dtype(t)) {
    switch (op) {
      case ExprOp::Add:
        return from_linear(add_lin(linearize(a), linearize(b)));
      case ExprOp::Sub:
        return from_linear(add_lin(linearize(a), linearize(b), -1));
      case ExprOp::Mul: {
        if (is_int_const(b)) return from_linear(scale_lin(linearize(a), b->ival));
        if (is_int_const(a)) return from_linear(scale_lin(linearize(b), a->ival));
        Expr x = a, y = b;
        if (detail::compare(y, x) < 0) std::swap(x, y);
        return make_raw(op, t, {x, y});
      }
      default:
        break;
    }
  } else {
    if (is_const(a) && is_const(b)) return fold_float(op, t, a, b);
    Expr x = a, y = b;
    switch (op) {
      case ExprOp::Add:
        if (is_zero(y) && x->dtype == t) return x;
        if (is_zero(x) && y->dtype == t) return y;
        if (order_first(y, x)) std::swap(x, y);
        break;
      case ExprOp::Sub:
        if (is_zero(y) && x->dtype == t) return x;
        break;
      case ExprOp::Mul:
        if (is_one(y) && x->dtype == t) return x;
        if (is_one(x) && y->dtype == t) return y;
        if (order_first(y, x)) std::swap(x, y);
        break;
      default:
        break;
    }
    return make_raw(op, t, {x, y});
  }
  return make_raw(op, t, {a, b});
}

Expr div_mod(ExprOp op, const Expr& a, const Expr& b) {
  DType t = promote(a->dtype, b->dtype);
  bool is_div = op == ExprOp::Div;
  if (!is_int_dtype(t)) {
    if (is_const(a) && is_const(b) && *as_float(b) != 0) return fold_float(op, t, a, b);
    if (is_div && is_one(b) && a->dtype == t) return a;
    return make_raw(op, t, {a, b});
  }
  if (!is_int_const(b)) return make_raw(op, t, {a, b});
  if (b->ival == 0) return int_imm(0);  // x // 0 == x % 0 == 0 (pto/elem.hpp), at run time too
  int64_t k = b->ival;
  if (is_int_const(a)) return int_imm(is_div ? detail::floordiv(a->ival, k) : detail::floormod(a->ival, k));
  if (k == 1) return is_div ? a : int_imm(0);
  if (k < 0) return make_raw(op, t, {a, b});
  Linear l = linearize(a);
  if (is_div) {
    // (k*q + r) // k == q + r // k: pull out the terms whose coefficients k divides.
    Linear q, r;
    r.c = l.c;
    for (const auto& tm : l.terms)
      (tm.k % k == 0 ? q.terms.push_back({tm.atom, tm.k / k}) : r.terms.push_back(tm));
    if (r.terms.empty()) {
      q.c = detail::floordiv(r.c, k);
      return from_linear(q);
    }
    if (!q.terms.empty()) return from_linear(add_lin(q, linearize(div_mod(op, from_linear(r), b))));
    // (x // k1) // k2 == x // (k1*k2) for positive k1, k2
    if (a->op == ExprOp::Div && is_int_const(a->args[1]) && a->args[1]->ival > 0 && is_int_dtype(a->dtype)) {
      __int128 kk = __int128(a->args[1]->ival) * k;
      if (kk <= std::numeric_limits<int64_t>::max()) return div_mod(op, a->args[0], int_imm(int64_t(kk)));
    }
  } else {
    // Coefficients and the constant only matter modulo k.
    Linear r;
    r.c = detail::floormod(l.c, k);
    for (const auto& tm : l.terms)
      if (int64_t m = detail::floormod(tm.k, k)) r.terms.push_back({tm.atom, m});
    if (r.terms.empty()) return int_imm(r.c);
    Expr x = from_linear(r);
    if (auto bx = bounds(x, {}); bx && bx->lo >= 0 && bx->hi < k) return x;
    return make_raw(op, t, {x, b});
  }
  return make_raw(op, t, {a, b});
}

}  // namespace

bool is_logical_op(ExprOp op) {
  switch (op) {
    case ExprOp::Lt:
    case ExprOp::Le:
    case ExprOp::Eq:
    case ExprOp::Ne:
    case ExprOp::And:
    case ExprOp::Or:
    case ExprOp::Not:
      return true;
    default:
      return false;
  }
}

// ---- leaves ---------------------------------------------------------------------------------

Expr int_imm(int64_t v) { return detail::make_int(v, DType::I64); }
Expr float_imm(double v, DType t) {
  if (!is_float(t)) return cast(detail::make_float_raw(v, DType::F64), t);  // an integer constant
  return detail::make_float_raw(round_to(v, t), t);
}
Expr var(const std::string& name, DType t) {
  auto n = std::make_shared<ExprNode>();
  n->op = ExprOp::Var;
  n->dtype = t;
  n->name = name;
  return n;
}

std::optional<int64_t> as_int(const Expr& e) {
  if (e && e->op == ExprOp::Int) return e->ival;
  return std::nullopt;
}
std::optional<double> as_float(const Expr& e) {
  if (!e) return std::nullopt;
  if (e->op == ExprOp::Int) return double(e->ival);
  if (e->op == ExprOp::Float) return e->fval;
  return std::nullopt;
}
bool is_const(const Expr& e) { return e && (e->op == ExprOp::Int || e->op == ExprOp::Float); }

// ---- simplifying constructors -----------------------------------------------------------------

namespace {
void check(const Expr& a, const char* what) {
  if (!a) throw Error(std::string(what) + ": null expression");
}
void check(const Expr& a, const Expr& b, const char* what) {
  check(a, what);
  check(b, what);
}
}  // namespace

Expr operator+(const Expr& a, const Expr& b) { return check(a, b, "+"), arith(ExprOp::Add, a, b); }
Expr operator-(const Expr& a, const Expr& b) { return check(a, b, "-"), arith(ExprOp::Sub, a, b); }
Expr operator*(const Expr& a, const Expr& b) { return check(a, b, "*"), arith(ExprOp::Mul, a, b); }
Expr div(const Expr& a, const Expr& b) { return check(a, b, "div"), div_mod(ExprOp::Div, a, b); }
Expr mod(const Expr& a, const Expr& b) { return check(a, b, "mod"), div_mod(ExprOp::Mod, a, b); }
Expr min(const Expr& a, const Expr& b) { return check(a, b, "min"), minmax(ExprOp::Min, a, b); }
Expr max(const Expr& a, const Expr& b) { return check(a, b, "max"), minmax(ExprOp::Max, a, b); }

Expr cmp(ExprOp op, const Expr& a, const Expr& b) {
  check(a, b, "cmp");
  if (op != ExprOp::Lt && op != ExprOp::Le && op != ExprOp::Eq && op != ExprOp::Ne)
    throw Error("cmp: not a comparison operator");
  auto decide = [&](bool r) { return int_imm(r ? 1 : 0); };
  if (is_const(a) && is_const(b)) return decide(fold_const(op, DType::I64, {a, b})->ival != 0);
  if (is_int_dtype(a->dtype) && is_int_dtype(b->dtype)) {
    if (auto d = linear_bounds(add_lin(linearize(a), linearize(b), -1))) {
      switch (op) {
        case ExprOp::Lt:
          if (d->hi < 0) return decide(true);
          if (d->lo >= 0) return decide(false);
          break;
        case ExprOp::Le:
          if (d->hi <= 0) return decide(true);
          if (d->lo > 0) return decide(false);
          break;
        case ExprOp::Eq:
          if (d->lo == 0 && d->hi == 0) return decide(true);
          if (d->lo > 0 || d->hi < 0) return decide(false);
          break;
        default:
          if (d->lo == 0 && d->hi == 0) return decide(false);
          if (d->lo > 0 || d->hi < 0) return decide(true);
          break;
      }
    }
  }
  return make_raw(op, DType::I64, {a, b});
}

Expr logic(ExprOp op, const Expr& a, const Expr& b) {
  check(a, b, "logic");
  if (op != ExprOp::And && op != ExprOp::Or) throw Error("logic: not And/Or");
  bool is_and = op == ExprOp::And;
  auto truth = [](const Expr& e) -> std::optional<bool> {
    if (auto v = as_float(e)) return *v != 0;
    return std::nullopt;
  };
  auto ta = truth(a), tb = truth(b);
  if (ta && tb) return int_imm(is_and ? (*ta && *tb) : (*ta || *tb));
  for (int s = 0; s < 2; ++s) {
    auto tc = s ? tb : ta;
    const Expr& other = s ? a : b;
    if (!tc) continue;
    if (is_and && !*tc) return int_imm(0);
    if (!is_and && *tc) return int_imm(1);
    if (is_boolean_valued(other)) return other;  // true && x, false || x
  }
  if (expr_equal(a, b) && is_boolean_valued(a)) return a;
  return make_raw(op, DType::I64, {a, b});
}

Expr logic_not(const Expr& a) {
  check(a, "logic_not");
  if (auto v = as_float(a)) return int_imm(*v == 0 ? 1 : 0);
  if (a->op == ExprOp::Not && is_boolean_valued(a->args[0])) return a->args[0];
  return make_raw(ExprOp::Not, DType::I64, {a});
}

Expr select(const Expr& c, const Expr& a, const Expr& b) {
  check(c, "select");
  check(a, b, "select");
  if (auto v = as_float(c)) return *v != 0 ? a : b;
  if (expr_equal(a, b)) return a;
  return make_raw(ExprOp::Select, DType::I64, {c, a, b});
}

Expr cast(const Expr& a, DType t) {
  check(a, "cast");
  if (a->dtype == t) return a;
  if (is_const(a)) {
    // float -> int saturates (NaN -> 0), int -> i32 wraps: pto::elem::cast, as at run time.
    return fold_const(ExprOp::Cast, t, {a});
  }
  return make_raw(ExprOp::Cast, t, {a});
}

Expr unary_math(ExprOp op, const Expr& a) {
  check(a, "unary_math");
  if (op != ExprOp::Sqrt && op != ExprOp::Exp && op != ExprOp::Log)
    throw Error("unary_math: not sqrt/exp/log");
  DType t = detail::result_dtype(op, DType::F32, {a});
  if (is_const(a)) return fold_const(op, t, {a});
  return make_raw(op, t, {a});
}

Expr bitwise(ExprOp op, const Expr& a, const Expr& b) {
  check(a, b, "bitwise");
  if (op != ExprOp::BitAnd && op != ExprOp::BitOr && op != ExprOp::BitXor && op != ExprOp::Shl &&
      op != ExprOp::Shr)
    throw Error("bitwise: not &, |, ^, << or >>");
  if (!is_int_dtype(a->dtype) || !is_int_dtype(b->dtype))
    throw Error("bitwise operators need integer scalars, got " + to_string(a) + " and " + to_string(b));
  if (is_const(a) && is_const(b)) return fold_const(op, DType::I64, {a, b});
  // On 0/1 values & and | are the logical operators, which simplify further.
  if ((op == ExprOp::BitAnd || op == ExprOp::BitOr) && is_boolean_valued(a) && is_boolean_valued(b))
    return logic(op == ExprOp::BitAnd ? ExprOp::And : ExprOp::Or, a, b);
  auto is = [](const Expr& e, int64_t v) { return as_int(e) == v; };
  const bool shift = op == ExprOp::Shl || op == ExprOp::Shr;
  if (is(b, 0) && op != ExprOp::BitAnd) return a;  // x | 0, x ^ 0, x << 0, x >> 0
  if (is(a, 0) && (op == ExprOp::BitOr || op == ExprOp::BitXor)) return b;
  if ((is(a, 0) || is(b, 0)) && op == ExprOp::BitAnd) return int_imm(0);
  if (op == ExprOp::BitAnd && (is(a, -1) || is(b, -1))) return is(a, -1) ? b : a;
  Expr x = a, y = b;
  if (!shift && detail::compare(y, x) < 0) std::swap(x, y);  // commutative: one order
  return make_raw(op, DType::I64, {x, y});
}

Expr bit_not(const Expr& a) {
  check(a, "bit_not");
  if (!is_int_dtype(a->dtype)) throw Error("~ needs an integer scalar, got " + to_string(a));
  if (is_const(a)) return fold_const(ExprOp::BitNot, DType::I64, {a});
  if (a->op == ExprOp::BitNot) return a->args[0];
  return make_raw(ExprOp::BitNot, DType::I64, {a});
}

Expr make_expr(ExprOp op, DType t, std::vector<Expr> args) {
  auto need = [&](size_t n) {
    if (args.size() != n) throw Error("make_expr: wrong number of arguments");
    for (const auto& x : args)
      if (!x) throw Error("make_expr: null argument");
  };
  switch (op) {
    case ExprOp::Int:
    case ExprOp::Float:
    case ExprOp::Var:
      throw Error("make_expr: leaves are made by int_imm / float_imm / var");
    case ExprOp::Add:
      need(2);
      return args[0] + args[1];
    case ExprOp::Sub:
      need(2);
      return args[0] - args[1];
    case ExprOp::Mul:
      need(2);
      return args[0] * args[1];
    case ExprOp::Div:
      need(2);
      return div(args[0], args[1]);
    case ExprOp::Mod:
      need(2);
      return mod(args[0], args[1]);
    case ExprOp::Min:
      need(2);
      return min(args[0], args[1]);
    case ExprOp::Max:
      need(2);
      return max(args[0], args[1]);
    case ExprOp::Lt:
    case ExprOp::Le:
    case ExprOp::Eq:
    case ExprOp::Ne:
      need(2);
      return cmp(op, args[0], args[1]);
    case ExprOp::And:
    case ExprOp::Or:
      need(2);
      return logic(op, args[0], args[1]);
    case ExprOp::Not:
      need(1);
      return logic_not(args[0]);
    case ExprOp::Select:
      need(3);
      return select(args[0], args[1], args[2]);
    case ExprOp::Cast:
      need(1);
      return cast(args[0], t);
    case ExprOp::Sqrt:
    case ExprOp::Exp:
    case ExprOp::Log:
      need(1);
      return unary_math(op, args[0]);
    case ExprOp::BitAnd:
    case ExprOp::BitOr:
    case ExprOp::BitXor:
    case ExprOp::Shl:
    case ExprOp::Shr:
      need(2);
      return bitwise(op, args[0], args[1]);
    case ExprOp::BitNot:
      need(1);
      return bit_not(args[0]);
  }
  throw Error("make_expr: unknown operator");
}

bool expr_equal(const Expr& a, const Expr& b) { return structural::equal(a, b); }
size_t expr_hash(const Expr& e) { return structural::hash(e); }

}  // namespace pypto::ir
