// The IR's text form. print(parse(text)) == text for any text print produced.
#pragma once
#include <string>

#include "ir/ir.h"

namespace pypto::ir {
std::string print(const Program& p);
std::string print(const Stmt& s, int indent = 0);
std::string print(const View& v);
std::string print(const Op& op);
}  // namespace pypto::ir
