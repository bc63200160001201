// The loop nests a profile times: the top-level statements of a tile-level program cut into
// groups, each ending at a statement that writes global memory (a tiled loop nest, or the
// loads-compute-store run of an untiled fused group). Allocations and lets before a store belong
// to its group. The profiling variant of a CPU kernel brackets each group with timer hooks.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

#include "ir/ir.h"

namespace pypto::cpu {

struct Nest {
  size_t begin = 0, end = 0;        // statements [begin, end) of the program's body
  std::vector<std::string> writes;  // names of the global buffers it writes
};

std::vector<Nest> top_level_nests(const ir::Program& tile_program);

// Names of the global buffers `s` writes (operand 0 of its instructions, prefetch and sync aside).
void global_writes(const ir::Stmt& s, std::vector<std::string>& out);

}  // namespace pypto::cpu
