// Fusion: decides which chains of tensor-level instructions run as one loop nest, so that
// intermediate results live in tiles and never reach memory. It only marks them: each group
// becomes a Seq labelled as a fusion group (passes/fusion_group.h), and tile_ops emits its nest.
//
// Two group shapes are formed from consecutive instructions of one block:
//  * Row groups: instructions sharing a row space (the same leading dims and rows): elementwise
//    ops, row reductions and matmuls with a small right operand. One nest walks the leading dims
//    and row tiles; every instruction runs on full-width tiles, so a softmax or a norm (reduce,
//    broadcast, divide) and an attention block (scores, scale, mask, softmax, weighted sum) run
//    tile by tile without writing their intermediates.
//  * Matmul epilogues: a large matmul followed by elementwise ops on its result (bias,
//    activation), applied to the accumulator tile before it is stored.
// The boundary rules (the seed's, docs/architecture.md): no instruction of another kind in
// between, matching row space (shapes), similar compute density (a matmul joins a row group only
// when its right operand is small). Which instructions may share a group follows the kernel's
// `fusion` option (FusionOptions). The expansion of one composite op (lower_composites labels it
// with the op's name) counts as one op of that name; its own instructions always fuse together.
#pragma once
#include <set>
#include <string>
#include <vector>

#include "ir/ir.h"
#include "passes/tile_ops.h"

namespace pypto::passes {

struct FusionOptions {
  enum Mode {
    Off,      // nothing fuses, not even inside a composite op (for A/B checks)
    Default,  // fusion=False: only the instructions of one composite op fuse together
    Listed,   // fusion=[...]: besides, consecutive ops whose names are all listed
    Full      // fusion=True: everything the rules allow
  } mode = Default;
  std::set<std::string> kinds;  // Listed: names from fusion_names()
};

// The names a fusion list may hold, sorted: one per kind of op ("add", "matmul", "relu", "sum",
// ...) and one per composite op ("softmax", "layer_norm", ...). An unknown name is an Error.
const std::vector<std::string>& fusion_names();

ir::Program fuse(const ir::Program& tensor_level, const FusionOptions& options, const TileSizes& sizes);

}  // namespace pypto::passes
