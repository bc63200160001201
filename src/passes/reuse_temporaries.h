// Memory planning of global temporaries by lifetime: a temporary allocated at the top level of a
// tile-level program takes over the buffer of an earlier one of the same dtype and shape whose
// last use comes before its first use, or at it when that statement is a nest that reads the old
// one and writes the new one tile by tile through the same windows (an elementwise op computing
// in place). With fusion off a chain of elementwise ops then needs one full-size temporary
// instead of one per op.
#pragma once
#include "ir/ir.h"

namespace pypto::passes {

ir::Program reuse_temporaries(const ir::Program& tile_level);

}  // namespace pypto::passes
