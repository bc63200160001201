// The arithmetic a kernel does and the global memory it touches, counted once from its
// tensor-level program (pypto.get_last_profile reports them next to the measured time).
#pragma once
#include <cstdint>

#include "ir/ir.h"

namespace pypto::runtime {

struct KernelCost {
  // matmul: 2*M*N*K (+M*N for a bias); elementwise, compare, select: one per element written;
  // reductions: one per element read; copies, fills, layout and memory instructions: none.
  double flops = 0;
  // The global params' sizes: every input read once and every output written once.
  double bytes = 0;
  // False when a loop trip count or an extent was not a constant (then the count uses one trip
  // of such a loop and the static window sizes: an estimate).
  bool exact = true;
};

// Loops are walked (up to a budget) where an extent depends on their variable (a ragged last
// tile), so the count is exact. `env`, when given: the values of the program's scalars for one call (a
// dynamic kernel's dimension symbols, runtime/kernel.h's dim_symbol_env): extents, trip counts and the
// params' sizes are those of the call: a dynamic kernel's count is the call's, not the bound's.
KernelCost count_cost(const ir::Program& tensor_program, const ir::ScalarEnv* env = nullptr);

// The cost of some statements of a tile-level program (one loop nest, cpu/nests.h): flops as
// above, bytes = the global memory its loads and stores move (a tile re-read counts again);
// `env` as for count_cost (a dynamic kernel's extents for one call, not the bound's windows).
KernelCost count_tile_cost(const std::vector<ir::Stmt>& statements, const ir::ScalarEnv* env = nullptr);

}  // namespace pypto::runtime
