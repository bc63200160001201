// Scalar expressions: loop indices, shape arithmetic, runtime scalar arguments.
//
// Expressions are immutable and hash-consed by value. The constructors below simplify as they
// build (constant folding; linear terms are canonicalised to sum(coef*var) + const, and
// min/max distribute over an added constant), so `min(i + 64, M) - i` becomes `min(64, M - i)`
// and its bounds can be found by interval arithmetic. Integer division is floor division.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ir/types.h"

namespace pypto::ir {

enum class ExprOp : uint8_t {
  Int,
  Float,
  Var,  // leaves
  Add,
  Sub,
  Mul,
  Div,
  Mod,
  Min,
  Max,  // arithmetic (Div: floor for ints, true for floats)
  Lt,
  Le,
  Eq,
  Ne,
  And,
  Or,
  Not,     // logic; results are i64 0/1
  Select,  // args: cond, then, else
  Cast,    // args: value; dtype is the target
  Sqrt,
  Exp,
  Log,  // float scalar math (folded when constant)
  BitAnd,
  BitOr,
  BitXor,
  Shl,
  Shr,
  BitNot,  // bitwise, on integers (i64), with pto/elem.hpp's shift edges
};

struct ExprNode;
using Expr = std::shared_ptr<const ExprNode>;

struct ExprNode {
  ExprOp op;
  DType dtype;       // I64 for index math, F32/F64 for float scalars, Bool unused (I64 0/1)
  int64_t ival = 0;  // Int
  double fval = 0;   // Float
  std::string name;  // Var
  std::vector<Expr> args;

  // The field list, declared once: structural equality and hashing are derived from it.
  template <class F>
  void for_each_field(F&& f) const {
    f(op);
    f(dtype);
    f(ival);
    f(fval);
    f(name);
    f(args);
  }
};

// Leaves
Expr int_imm(int64_t v);
Expr float_imm(double v, DType t = DType::F32);
Expr var(const std::string& name, DType t = DType::I64);

// Simplifying constructors
Expr operator+(const Expr& a, const Expr& b);
Expr operator-(const Expr& a, const Expr& b);
Expr operator*(const Expr& a, const Expr& b);
Expr div(const Expr& a, const Expr& b);
Expr mod(const Expr& a, const Expr& b);
Expr min(const Expr& a, const Expr& b);
Expr max(const Expr& a, const Expr& b);
Expr cmp(ExprOp op, const Expr& a, const Expr& b);    // Lt, Le, Eq, Ne
Expr logic(ExprOp op, const Expr& a, const Expr& b);  // And, Or
Expr logic_not(const Expr& a);
Expr select(const Expr& c, const Expr& a, const Expr& b);
Expr cast(const Expr& a, DType t);
Expr unary_math(ExprOp op, const Expr& a);              // Sqrt, Exp, Log
Expr bitwise(ExprOp op, const Expr& a, const Expr& b);  // BitAnd, BitOr, BitXor, Shl, Shr
Expr bit_not(const Expr& a);
Expr make_expr(ExprOp op, DType t, std::vector<Expr> args);  // generic, simplifies

std::optional<int64_t> as_int(const Expr& e);
std::optional<double> as_float(const Expr& e);  // Int or Float constant
bool is_const(const Expr& e);

bool expr_equal(const Expr& a, const Expr& b);
// Comparisons and logic (Lt Le Eq Ne And Or Not): their value is 0 or 1.
bool is_logical_op(ExprOp op);
size_t expr_hash(const Expr& e);

// Inclusive integer bounds of an index expression given bounds of its variables.
struct Interval {
  int64_t lo, hi;
};
using VarBounds = std::map<std::string, Interval>;
std::optional<Interval> bounds(const Expr& e, const VarBounds& vars);

// Evaluation with variable values (ints and floats both carried as double where float).
struct ScalarValue {
  bool is_float = false;
  int64_t i = 0;
  double f = 0;
  double as_double() const { return is_float ? f : double(i); }
};
using ScalarEnv = std::map<std::string, ScalarValue>;
ScalarValue eval(const Expr& e, const ScalarEnv& env);

// Text form: `%i`, `64`, `1.5f`, `(%i + 64)`, `min(%M, (%i + 64))`, ... parsed by ir/parser.
std::string to_string(const Expr& e);
void collect_vars(const Expr& e, std::vector<std::string>& out);
Expr substitute(const Expr& e, const std::map<std::string, Expr>& repl);

}  // namespace pypto::ir
