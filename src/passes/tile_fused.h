// The nests of fusion groups (part of the tile_ops pass; passes/fuse forms the groups).
#pragma once
#include <functional>
#include <map>
#include <set>
#include <vector>

#include "ir/ir.h"
#include "passes/fusion_group.h"
#include "passes/nest.h"
#include "passes/tile_ops.h"

namespace pypto::passes {

// Appends to `out` (which holds the statements of the group's block before it) the one loop nest
// of group g, whose statements, allocations included, are `in`. A row group walks the leading
// dims and row tiles of its first destination, a matmul epilogue the tiles of its accumulator;
// every instruction runs on tiles; a temporary produced and consumed only inside the group stays
// in its tile (its allocation is dropped: from `in` here; one among `out` is added to `dropped`,
// for the caller to remove from the block in one sweep at its end, as a scan of `out` per group
// was quadratic in a deep network's backward), and values needed outside are stored. `refs`: how
// often each buffer is referenced in the whole program.
//
// A row group over a dynamic row width (g.width) keeps each row in one tile of a fixed width: its
// nest is emitted once per width of ts.dyn_row_tiers(), behind `if width <= tier` tests (narrowest
// first, so short rows get the most rows per tile), and the last else branch holds the group's
// instructions lowered one by one by `unfused` (with the allocations of its internal temporaries).
using LowerUnfused = std::function<void(const ir::Stmt&, std::vector<ir::Stmt>&)>;
void emit_fused_group(NestBuilder& nb, const TileSizes& ts, const std::map<const ir::Buffer*, int>& refs,
                      const fusion::Group& g, const std::vector<ir::Stmt>& in, std::vector<ir::Stmt>& out,
                      std::set<const ir::Buffer*>& dropped, const LowerUnfused& unfused);

// Removes from a block the allocations of the buffers in `dropped`.
void drop_allocs(std::vector<ir::Stmt>& block, const std::set<const ir::Buffer*>& dropped);

}  // namespace pypto::passes
