// Parallelisation: marks a loop Parallel when its iterations provably touch disjoint memory.
//
// A loop qualifies when every tile it writes is allocated inside its body, and every global
// buffer written in its body (not allocated there) is written, in some dimension d, at offsets
// `a*v + c` with a constant a > 0 and c bounded independently of v, such that one iteration's
// footprint in d fits in a*step; reads of such a buffer must stay inside the iteration's own
// footprint. Loops the user declared parallel (pypto.prange) stay parallel. Backends run the
// outermost parallel loop of a nest on the thread pool and nested ones serially.
#pragma once
#include "ir/ir.h"

namespace pypto::passes {
ir::Program parallelize(const ir::Program& tile_level);
}  // namespace pypto::passes
