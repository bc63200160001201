// Whether a kernel's stores into an output stream past the caches (pto/cpu/stream_rule.hpp holds
// the rule): decided here where the sizes are static, left to the kernel where one is dynamic.
#pragma once

#include "backends/cpu/cpp_expr.h"
#include "ir/ir.h"

#include <string>
#include <vector>

namespace pypto::cpu {

// "true", "false", or, where a size is dynamic, the C++ condition the kernel evaluates (a dynamic
// dim's static bound would make every such output stream, a small one included). `alongside`:
// the other views the call reads once each; `ex` prints the dynamic extents.
std::string stream_choice(const ir::View& out, const std::vector<const ir::View*>& alongside,
                          const ExprText& ex);

}  // namespace pypto::cpu
