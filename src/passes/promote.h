// Memory planning, part one: small temporaries become local tiles.
//
// A global scratch temporary of rank 2 that fits one tile of the tiling pass, and that every
// instruction references whole (like the seed's `C_tile = pypto.zeros((64, 64))` accumulated
// with `+=` and stored once), is moved to the vector buffer. The tiling pass then computes on it
// in place: no load or store per use, so a tile loop's accumulator stays in fast memory for the
// whole reduction loop.
#pragma once
#include "ir/ir.h"
#include "passes/tile_ops.h"

namespace pypto::passes {
ir::Program promote_small_temps(const ir::Program& p, const TileSizes& sizes);
}  // namespace pypto::passes
