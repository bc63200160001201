// CPU code generator: a tile-level program -> C++ source calling the templates of include/pto/cpu.
// The source defines `extern "C" void pypto_kernel(const pto_kernel_args*)` (include/pto/abi.h).
#pragma once
#include <string>

#include "ir/ir.h"

namespace pypto::cpu {
std::string generate_cpp(const ir::Program& tile_program);
}  // namespace pypto::cpu
