// CPU code generator: a tile-level program -> C++ source calling the templates of include/pto/cpu.
// The source defines `extern "C" void pypto_kernel(const pto_kernel_args*)` (include/pto/abi.h).
#pragma once
#include <string>

#include "ir/ir.h"

namespace pypto::cpu {
// profile: the profiling variant, which calls args->nest_hook around each nest (nests.h); the
// plain variant has no hooks, so per-nest timing costs nothing unless asked for.
std::string generate_cpp(const ir::Program& tile_program, bool profile = false);
}  // namespace pypto::cpu
