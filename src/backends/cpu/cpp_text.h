// C++ source text for the CPU code generator: element types, integer expressions folded at
// generation time, and number literals written the same under every locale (a decimal-comma
// locale once turned 2.5 into "2,5.0", the comma operator).
#pragma once

#include "ir/types.h"

#include <cstdint>
#include <optional>
#include <sstream>
#include <string>

namespace pypto::cpu {

// The C++ element type of a dtype ("float", "pto::bf16_t", ...).
const char* ctype(ir::DType t);

// A C++ integer expression with its value when known at generation time (for folding).
struct IExpr {
  std::string s;
  std::optional<int64_t> c;
};
IExpr ic(int64_t v);
IExpr iadd(const IExpr& a, const IExpr& b);
IExpr imul(const IExpr& a, const IExpr& b);

// Integer and floating literals as C++ text (INT64_MIN, NaN and inf included).
std::string int_literal(int64_t v);
std::string float_literal(double v);

// A string stream that writes numbers the same under every global C++ locale.
std::ostringstream classic_stream();

}  // namespace pypto::cpu
