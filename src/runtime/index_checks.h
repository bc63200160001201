// Host-side range checks of run-time indices (ir::IndexCheck), made before a kernel runs so an
// out-of-range index raises instead of reading or writing outside the caller's arrays.
#pragma once
#include "exec/tensor_arg.h"
#include "ir/ir.h"

namespace pypto::runtime {

// Throws ir::Error naming the kernel line of the first check that fails for these scalar
// arguments. Each check costs one interval evaluation over its loop nest's whole range; only
// when that cannot prove it does the check walk the nest's iterations (index arithmetic only).
void check_indices(const ir::Program& tensor_program, const RunArgs& args);

}  // namespace pypto::runtime
