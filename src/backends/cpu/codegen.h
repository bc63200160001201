// CPU code generator: a tile-level program -> C++ source calling the templates of include/pto/cpu.
// The source defines `extern "C" void pypto_kernel(const pto_kernel_args*)` (include/pto/abi.h).
#pragma once
#include <string>

#include "ir/ir.h"

namespace pypto::cpu {
// profile: the profiling variant, which calls args->nest_hook around each nest (nests.h); the
// plain variant has no hooks, so per-nest timing costs nothing unless asked for.
std::string generate_cpp(const ir::Program& tile_program, bool profile = false);

// The error a kernel compiled with PTO_LAZY_WIDE_ROWS reports, before touching any data, when a
// call's dynamic row width is beyond its fused tiles: the unfused rows were left out (codegen.cpp).
constexpr const char* kWideRowsMissing = "pto: rows wider than the compiled tiles (PTO_LAZY_WIDE_ROWS)";
// The source has such rows: compiled with -DPTO_LAZY_WIDE_ROWS, they are left out.
inline bool has_lazy_wide_rows(const std::string& source) {
  return source.find("#ifndef PTO_LAZY_WIDE_ROWS") != std::string::npos;
}
}  // namespace pypto::cpu
