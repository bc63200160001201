// C++ source text for the CPU code generator (see cpp_text.h).
#include "backends/cpu/cpp_text.h"
#include "ir/number_text.h"

#include <climits>
#include <cmath>
#include <locale>

namespace pypto::cpu {

using ir::DType;
using ir::format_g;

const char* ctype(ir::DType t) {
  switch (t) {
    case DType::F32:
      return "float";
    case DType::F64:
      return "double";
    case DType::I32:
      return "int32_t";
    case DType::I64:
      return "int64_t";
    case DType::Bool:
      return "bool";
    case DType::I8:
      return "int8_t";
    case DType::U8:
      return "uint8_t";
    case DType::I16:
      return "int16_t";
    case DType::F16:
      return "pto::half_t";
    case DType::BF16:
      return "pto::bf16_t";
  }
  return "float";
}

IExpr ic(int64_t v) { return {v < 0 ? "(" + std::to_string(v) + ")" : std::to_string(v), v}; }
IExpr iadd(const IExpr& a, const IExpr& b) {
  if (a.c && b.c) return ic(*a.c + *b.c);
  if (a.c && *a.c == 0) return b;
  if (b.c && *b.c == 0) return a;
  return {"(" + a.s + " + " + b.s + ")", std::nullopt};
}
IExpr imul(const IExpr& a, const IExpr& b) {
  if (a.c && b.c) return ic(*a.c * *b.c);
  if ((a.c && *a.c == 0) || (b.c && *b.c == 0)) return ic(0);
  if (a.c && *a.c == 1) return b;
  if (b.c && *b.c == 1) return a;
  return {"(" + a.s + " * " + b.s + ")", std::nullopt};
}

std::string int_literal(int64_t v) {
  if (v == INT64_MIN) return "(-9223372036854775807LL - 1)";
  if (v >= INT32_MIN && v <= INT32_MAX) return v < 0 ? "(" + std::to_string(v) + ")" : std::to_string(v);
  return "int64_t(" + std::to_string(v) + "LL)";
}

std::ostringstream classic_stream() {
  std::ostringstream s;
  s.imbue(std::locale::classic());
  return s;
}

std::string float_literal(double v) {
  if (std::isnan(v)) return "__builtin_nan(\"\")";
  if (std::isinf(v)) return v > 0 ? "__builtin_inf()" : "(-__builtin_inf())";
  std::string s = format_g(v, 17);  // locale-independent: never "2,5"
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  return v < 0 ? "(" + s + ")" : s;
}

}  // namespace pypto::cpu
