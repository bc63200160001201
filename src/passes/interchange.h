// Loop interchange for reuse: a parallel loop whose whole body is one parallel inner loop, whose
// body loads tiles that do not depend on the outer loop's variable, becomes the inner loop's
// iteration outside, loading those tiles once per inner iteration instead of once per pair.
//
//   parallel for i { parallel for j { alloc..; TLOAD kt, K[j]; TLOAD x, Q[i, j]; ...(kt, x).. } }
//   ->  parallel for j { alloc..; TLOAD kt, K[j]; for i { TLOAD x, Q[i, j]; ...(kt, x).. } }
//
// The seed attention is this shape: its user loop over query blocks holds the batched heads, so
// each (block, head) reloaded (and transposed) the head's whole K and V. Legal because both loops
// are parallel (passes/parallelize.h: every (i, j) pair touches its own memory, so any order of
// the pairs computes the same). A load moves out when its source is a global window naming
// neither i nor anything defined inside the loops, its buffer is written nowhere in the loops, and
// its tile is written by no other statement of the body; prefetches of the inner loop's next
// window (passes/double_buffer.h) go with it. Applied only when the inner loop keeps enough
// iterations for the thread pool (a static trip count of at least 8, or of the outer loop's).
// The new inner loop is serial: backends run nested parallel loops serially anyway, and its body
// now uses tiles allocated outside it.
// A parallel loop whose body is one `if` with a condition free of its variable (the variants for
// a dynamic width that tile_ops chooses between) is first unswitched, the `if` outside and a copy
// of the loop in each branch (renamed in the else branch), where it is kept only if a branch's
// nest is then interchanged: a dynamic-length attention reloaded K and V per query block.
#pragma once
#include "ir/ir.h"

namespace pypto::passes {
ir::Program interchange_for_reuse(const ir::Program& isa_level);
}  // namespace pypto::passes
