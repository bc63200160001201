// Double buffering: while a loop iteration computes on its tiles, the next iteration's global
// windows are already on their way. On the CPU target the "second buffer" is the cache: the
// pass inserts, at the top of each loop body that loads windows depending on the loop variable,
// a guarded TPREFETCH of the window the next iteration will load. TPREFETCH never changes results,
// so turning the pass off (PipelineOptions::double_buffer) only changes speed.
#pragma once
#include "ir/ir.h"

namespace pypto::passes {
ir::Program double_buffer(const ir::Program& tile_level);
}  // namespace pypto::passes
