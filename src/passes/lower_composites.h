// Composite lowering: expands each composite op of a tensor-level program (SOFTMAX, LOG_SOFTMAX,
// LAYER_NORM, RMS_NORM, CONV2D, CONCAT, CLAMP; ir/opcodes.h) into PTO instructions written with
// the builder, at the op's place and writing its destination, and turns TPOW with a constant
// exponent of 1, 2 or -1 (-1: of a float result) into the one instruction it equals (TMOV, TMUL,
// TRECIP). It runs first in the pipeline and before autodiff, so no later pass sees a
// composite. A target substitutes its own expansion of an op (a GPU or NPU softmax differs from a
// CPU one) by passing a lowering for that opcode; the others keep the default.
#pragma once
#include <functional>
#include <map>

#include "ir/builder.h"

namespace pypto::passes {

// Emits into `b` the statements that compute `op`, ending with a write of its destination (operand 0).
using CompositeLowering = std::function<void(ir::Builder& b, const ir::Op& op)>;

// CONV2D as one matmul per filter tap, batched over the output rows, for every stride and dtype.
// The default lowers stride-1 f32 convolutions as an implicit GEMM over a zero-padded copy of the
// input instead, which pays off with the CPU's packed GEMM; a target whose products are tile
// products (the simulated NPU) passes this one.
void lower_conv2d_per_tap(ir::Builder& b, const ir::Op& op);

// x minus its mean over `dims` (kept), with a shift that makes a row of equal values exactly 0; the
// forward lowering of LAYER_NORM and its derivative rule (autodiff_composites.cpp) both use it.
ir::View centred(ir::Builder& b, const ir::View& x, const std::vector<int>& dims);

ir::Program lower_composites(const ir::Program& tensor_level,
                             const std::map<ir::Opcode, CompositeLowering>& target_lowerings = {});

}  // namespace pypto::passes
