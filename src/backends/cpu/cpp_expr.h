// C++ text of the IR's scalar expressions (loop bounds, offsets, valid extents, scalar operands)
// for the CPU code generator: integers in int64_t with the IR's floor division and modulo, floats
// in double, casts with the IR's saturating rules (pto/elem.hpp).
#pragma once

#include "backends/cpu/cpp_text.h"
#include "ir/expr.h"

#include <functional>
#include <map>
#include <string>

namespace pypto::cpu {

class ExprText {
 public:
  // vars: the IR variables in scope and their C++ types (I64 or F64); name: a variable's C++
  // identifier.
  ExprText(const std::map<std::string, ir::DType>& vars, std::function<std::string(const std::string&)> name);

  std::string expr(const ir::Expr& e) const;
  std::string as_f(const ir::Expr& e) const;       // as a double
  std::string as_i(const ir::Expr& e) const;       // as an int64_t
  std::string condition(const ir::Expr& c) const;  // a C++ boolean for an `if`
  std::string cast_expr(ir::DType t, const ir::Expr& x) const;
  IExpr iexpr(const ir::Expr& e) const;  // with its value when constant

 private:
  static std::string wrap_bool(bool as_float, const std::string& cond);
  const std::map<std::string, ir::DType>& vars_;
  std::function<std::string(const std::string&)> name_;
};

}  // namespace pypto::cpu
