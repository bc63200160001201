// Idiom recognition: a user's tile loop that computes a whole matrix product becomes that product.
//
// The seed's matrix_multiply (and any loop written the same way) is
//   for i = 0 to M step TM { for j = 0 to N step TN {
//     alloc t: f32[TM, TN]; TEXPANDS t, 0
//     for k = 0 to K step TK { TMATMUL_ACC t, A[i:TM, k:TK], B[k:TK, j:TN] }
//     TMOV C[i:TM, j:TN], t } }
// over the whole of A (M x K), B (K x N) and C (M x N), each window clipped to its buffer. That is
// C = A @ B; when the tiling pass would run that product as one packed whole-matrix GEMM
// (tile_ops.h: memory_matmul), the nest is replaced by the single TMATMUL, so the compiler, not
// the user's 64 x 64 tiles, chooses the packing and the blocking. Sums are taken in another order
// (fp32 rounding differs, as between any two blockings); everything else is unchanged.
#pragma once
#include "ir/ir.h"
#include "passes/tile_ops.h"

namespace pypto::passes {
ir::Program raise_tile_matmul(const ir::Program& p, const TileSizes& sizes);
}  // namespace pypto::passes
