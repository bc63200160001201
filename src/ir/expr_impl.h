// Helpers shared by the expression library, the printer and the parser (private to src/ir).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "ir/expr.h"

namespace pypto::ir::detail {

inline bool is_int_dtype(DType t) { return !is_float(t); }

// Result type of a binary arithmetic op: f64 if either side is f64, else f32 if either is a float,
// else i32 only when both are i32, else i64.
DType promote(DType a, DType b);

// The dtype a node of `op` gets from its arguments (`t` is used only by Cast / leaves).
DType result_dtype(ExprOp op, DType t, const std::vector<Expr>& args);

// A node exactly as given (no simplification); its dtype is result_dtype(op, t, args). The
// parser uses it so that text re-reads to exactly the tree that was printed.
Expr make_raw(ExprOp op, DType t, std::vector<Expr> args);
Expr make_int(int64_t v, DType t);       // Int leaf of any dtype
Expr make_float_raw(double v, DType t);  // Float leaf, value kept as given (NaN canonicalised)

// Python semantics: floor division and a remainder with the sign of the divisor. b != 0.
int64_t floordiv(int64_t a, int64_t b);
int64_t floormod(int64_t a, int64_t b);

// A total order on expressions (structural; independent of addresses), used to canonicalise
// commutative operands and the terms of linear sums.
int compare(const Expr& a, const Expr& b);

// Text pieces shared by to_string and the printer.
std::string var_token(const std::string& name);  // %name, or %"..." when it needs quoting
std::string float_literal(double v, DType t);    // 1.5f (f32), 1.5 (f64), cast<f16>(1.5)
std::string int_literal(int64_t v, DType t);     // 5 (i64), cast<i32>(5) otherwise

}  // namespace pypto::ir::detail
