// Fusion: merges chains of tensor-level instructions into single loop nests, so intermediate
// results live in tiles and never reach memory.
//
// Two group shapes are formed from consecutive instructions of one block:
//  * Row groups: instructions sharing a row space (the same leading dims and rows): elementwise
//    ops, row reductions and matmuls with a small right operand. One nest walks the leading dims
//    and row tiles; every instruction runs on full-width tiles, so a softmax or a norm (reduce,
//    broadcast, divide) and an attention block (scores, scale, mask, softmax, weighted sum) run
//    tile by tile without writing their intermediates.
//  * Matmul epilogues: a large matmul followed by elementwise ops on its result (bias,
//    activation), applied to the accumulator tile before it is stored.
// A temporary produced and consumed only inside a group is dropped; anything read later is
// stored. Which ops may fuse follows the kernel's `fusion` option (FusionMode). The boundary
// rules (docs/architecture.md): no op of another kind in between, matching row space, similar
// compute density (a matmul joins a row group only when its right operand is small).
#pragma once
#include <set>
#include <string>

#include "ir/ir.h"
#include "passes/tile_ops.h"

namespace pypto::passes {

struct FusionOptions {
  enum Mode {
    Off,      // nothing fuses
    Default,  // elementwise chains and row reductions: what one softmax / norm decomposes into
    Listed,   // the default plus the listed kinds ("matmul", "add", "relu", ...)
    Full      // everything that can
  } mode = Default;
  std::set<std::string> kinds;
};

ir::Program fuse(const ir::Program& tensor_level, const FusionOptions& options, const TileSizes& sizes);

}  // namespace pypto::passes
