// Reads the text form written by printer.h. Errors name the line and column.
#pragma once
#include <string_view>

#include "ir/ir.h"

namespace pypto::ir {
Program parse_program(std::string_view text);
Expr parse_expr(std::string_view text);
}  // namespace pypto::ir
