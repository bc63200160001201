// Tiling: lowers every tensor-level instruction into a loop nest of tile instructions.
//
// An instruction over views of any rank and size becomes loops over the destination's leading
// dimensions and over 2-D tiles of its last two, each iteration doing TLOAD of every source
// tile, the tile instruction, and TSTORE of the result (elementwise and copies); a row
// reduction chunks the reduced (last) dimension and combines partial results; a matrix multiply
// accumulates TMATMUL_ACC over K tiles in an accumulator tile (a large unfused f32 product of two
// global matrices is one MMATMUL instead, where the target has it). Loops run to the destination's
// valid extents, and every tile view carries its valid extent, so ragged edges are covered by
// partial tiles and never read or written out of bounds. Tile-level instructions pass through.
#pragma once
#include <cstdint>
#include <vector>

#include "ir/ir.h"

namespace pypto::passes {

struct TileSizes {
  int64_t elem_rows = 16, elem_cols = 512;  // reduction / row tiles, and a rank-1 vector's elements
  // Tiles of a purely elementwise chain (unfused, or a fused group whose instructions all have one
  // shape): small enough that all of its tiles stay in L1 with the data they are copied from. At
  // 16 x 512 (32 KiB a tile) an add's three tiles spill to L2 and every TLOAD / TSTORE copy runs
  // at L2 speed: 1024^2 a + b on 2 cores of a Xeon 0.47 ms, 4 x 256 0.31 (torch 0.27); a fused
  // tanh-GELU 2048^2 6.4 -> 4.2 ms; softmax and the norms (row tiles) unchanged.
  int64_t ew_rows = 4, ew_cols = 256;
  int64_t mm_m = 64, mm_n = 256, mm_k = 256;  // matmul tiles
  // A plain f32 (or bf16) matrix product between global matrices becomes one MMATMUL (the CPU's
  // packed GEMM) instead of a tiled nest; off for targets that multiply tiles only (the NPU simulator).
  bool memory_matmul = true;
  // Matmuls of 1- and 2-byte operands (int8, bf16) take taller tiles (and int8 deeper ones): their
  // packed B tile is a quarter / half the bytes, and repacking it for each row block, not the dot
  // products, is what a 128-row tile pays for (matmul_tile below). Off when tile sizes are given.
  bool narrow_operand_tiles = true;
  int cores = 1;  // the host's, so that the taller tiles still leave rows for every thread
  // A fused row over a dynamic width is one tile of a fixed width, chosen at run time among
  // these (tile_fused.h): narrow rows get many rows per tile, wide ones one row; rows wider than
  // the widest run unfused. A group with a matmul stops at dyn_row_cols() (its operand tiles are
  // as wide as the row).
  int64_t dyn_row_cols() const { return 8 * elem_cols; }
  std::vector<int64_t> dyn_row_tiers(bool with_matmul) const {
    const int64_t narrow = elem_cols > 1 ? elem_cols / 2 : 1;
    if (with_matmul) return {narrow, dyn_row_cols()};
    return {narrow, dyn_row_cols(), 2048 * elem_cols};
  }
};

// The m x n x k tiles of a matmul of a x b elements, over a result of `rows` rows (its static
// bound): mm_m x mm_n x mm_k, or for 1-byte operands up to 4 mm_m rows and
// 2 mm_k deep, for 2-byte ones up to 2 mm_m rows, while the rows still split into 2 tiles a core.
struct MatmulTile {
  int64_t m, n, k;
};
MatmulTile matmul_tile(const TileSizes& sizes, ir::DType a, ir::DType b, int64_t rows);

ir::Program tile_ops(const ir::Program& tensor_level, const TileSizes& sizes);

// Whether tiling makes this tensor-level TMATMUL / TMATMUL_ACC one MMATMUL / MMATMUL_ACC: an f32
// product (or one of bf16 operands into an f32 or bf16 result) of rank-2 global matrices, big
// enough to pay for packing, not writing an operand.
bool memory_matmul(const ir::Op& op, const TileSizes& sizes);

}  // namespace pypto::passes
