// The lowering pipeline: tensor-level program -> tile-level PTO ISA program.
// One straight-line function (pipeline.cpp) runs the passes in order, verifies after each in
// debug builds or when PYPTO_VERIFY=1, and with PYPTO_LOG_LEVEL=DEBUG (or the seed's spelling
// PYTO_LOG_LEVEL) logs each pass's time and dumps the IR after it.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "ir/ir.h"
#include "passes/lower_composites.h"

namespace pypto::passes {

struct PipelineOptions {
  // Fusion (passes/fuse.h): true = everything the rules allow; false = only the instructions of
  // one composite op; fusion_ops non-empty = besides, chains of exactly those kinds ("matmul",
  // "add", "relu", ... : fusion_names()).
  bool fusion = false;
  std::vector<std::string> fusion_ops;
  bool fusion_off = false;  // nothing fuses, not even inside a composite op (for A/B checks)
  // Tile sizes (0 = chosen from the target description).
  int64_t tile_rows = 0, tile_cols = 0;  // elementwise / reduction tiles
  int64_t mm_tile_m = 0, mm_tile_n = 0, mm_tile_k = 0;
  bool promote = true;        // small whole-accessed temporaries live in local tiles
  bool parallel = true;       // mark provably independent loops parallel
  bool double_buffer = true;  // prefetch the next tile's operands
  bool memory_matmul = true;  // large plain f32 matmuls as one MMATMUL (passes/tile_ops.h)
  // A target's own expansions of composite ops (passes/lower_composites.h), by opcode.
  std::map<ir::Opcode, CompositeLowering> composite_lowerings;
};

struct Lowered {
  ir::Program tensor;    // after verification and simplification: composite ops still whole
  ir::Program expanded;  // after lower_composites: PTO instructions only
  ir::Program tile;      // after tiling and fusion: loops of tile instructions
  ir::Program isa;       // final: memory planned, parallel loops marked, sync inserted
  std::string log;       // per-pass timings (and IR dumps at DEBUG)
};

Lowered lower(const ir::Program& tensor_level, const PipelineOptions& options);

}  // namespace pypto::passes
