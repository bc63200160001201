// Dead code elimination: instructions whose results nothing live reads are dropped, then the
// allocations of the buffers only they wrote and control flow left without instructions.
//
// Live are the outputs, every parameter (a write into an input is the kernel's effect on its
// caller) and, transitively, every buffer a live instruction reads. Liveness is per buffer, not
// per write: one live read of a buffer keeps every instruction writing it, so a program that
// reads a partial result (a loop's accumulator, a scatter's target) keeps all of its writes.
// Instructions without a view destination (synchronisation) are kept.
//
// Runs first in the lowering pipeline (a traced model computes what it then drops: an unused
// branch of a module, a debug value) and on every derived backward (passes/autodiff.cpp).
#pragma once
#include "ir/ir.h"

namespace pypto::passes {
ir::Program eliminate_dead_code(const ir::Program& p);
}  // namespace pypto::passes
