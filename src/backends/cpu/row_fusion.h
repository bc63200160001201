// Row fusion in CPU code generation: the instruction runs that a row softmax, an RMS norm and a
// layer norm lower to (passes/lower_composites, then tile_ops) become one call into
// include/pto/cpu/rows.hpp, which computes what the run computes in two or three passes over
// each row instead of one pass over the whole tile per instruction. With the TLOAD of the source
// before the run and the TSTORE of its result after it, the rows are read from and written to
// global memory in place (no tile-sized copies). Only runs whose every operand is a whole local
// f32 tile of the expected shape match; anything else is emitted instruction by instruction.
// TLOADs of other tiles between the steps (a weight loaded where it is first used) move before
// the call. Likewise TLOAD a, TLOAD b, a binary f32 instruction, TSTORE of its result (vector
// add and its kin): one call that reads both sources and writes the result row by row in place.
// And MGATHER of a rank-2 table into a tile, then its TSTORE (an embedding lookup): each indexed
// row copied from the table straight into the output (gather.hpp).
// And scaled_mm's epilogue, TCVT of an int32 product tile then TMUL by its row and its column
// scales: one pass (pto::fused::cvt_scale_rows_cols, include/pto/cpu/matmul_int8.hpp).
#pragma once
#include <cstddef>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "ir/ir.h"

namespace pypto::cpu {

struct RowFusion {
  // One argument of the call: operand `arg` of the statement `stmt` (an offset from the match's
  // start) as a tile, a scalar, a 1 x C tile's data pointer, a global view or a tile's address;
  // or nullptr.
  enum class Kind { Tile, Scalar, RowData, Global, Null, Text, TileAddr };
  struct Arg {
    Kind kind;
    size_t stmt = 0, arg = 0;
    std::string text = {};  // Text: printed as is
  };
  std::string fn;       // the function of namespace pto::fused
  size_t count = 0;     // statements the call replaces
  bool global = false;  // TLOAD and TSTORE folded in: fn<stream>(out, in, ...)
  // Whether <stream> also counts the bytes of its other global views, which the call reads once
  // each (codegen.cpp, streams_to).
  bool stream_by_traffic = false;
  // Whether the call reads as many bytes as it writes from a view bigger than that (a row gather
  // from a table): <stream> counts them alongside the output instead of the whole view.
  bool reads_output_size = false;
  std::vector<Arg> args;
  std::vector<size_t> hoisted;  // offsets of TLOADs inside the run, emitted before the call
  // Those of them whose tile only the call reads, as a row operand (%w, %b), and nothing after:
  // the call may read the row in place (rows.hpp, fused::row_data).
  std::vector<size_t> in_place;
};

// The fused call for the run starting at body[i], if one matches.
std::optional<RowFusion> match_row_fusion(const std::vector<ir::Stmt>& body, size_t i);

// The tiles allocated in `block` that its loop block[loop] uses as if they were allocated in the
// loop's body: no statement of the block after the loop names them, and each iteration writes
// them (as an instruction's destination only) before anything else in the body names them (what
// statements before the loop left there is never read). tile_ops allocates a nest's tiles outside
// its inner loop (a 2-D elementwise nest's column loop; a row reduction's first column block
// before the loop over the others); the fused calls, which leave tiles dead after their run
// unwritten, may take these as the body's. `last_in`: a block's tiles by the last statement naming
// them (BlockTiles).
class BlockTiles;
std::set<const ir::Buffer*> loop_local_tiles(const std::vector<ir::Stmt>& block, size_t loop,
                                             const BlockTiles& last_in);

// The tiles allocated in a block that its statements name, by the last statement naming them
// (nested statements count as the one holding them); built once per block. (Searching the block
// for each loop and tile instead was cubic in a deep network's backward: thousands of nests.)
class BlockTiles {
 public:
  explicit BlockTiles(const std::vector<ir::Stmt>& block);
  const std::vector<const ir::Buffer*>& last_named_by(size_t stmt) const;

 private:
  std::vector<std::vector<const ir::Buffer*>> last_;
};

// While alive, the matchers treat `tiles` as allocated in `body` (the loop body codegen visits).
class LoopLocalScope {
 public:
  LoopLocalScope(const std::vector<ir::Stmt>* body, std::set<const ir::Buffer*> tiles);
  ~LoopLocalScope();
  LoopLocalScope(const LoopLocalScope&) = delete;
  LoopLocalScope& operator=(const LoopLocalScope&) = delete;
  static bool holds(const std::vector<ir::Stmt>& body, const ir::Buffer* b);

 private:
  const std::vector<ir::Stmt>* body_;
  std::set<const ir::Buffer*> tiles_;
  LoopLocalScope* outer_;
};

// Whether body[i] is a TLOAD of a 1 x C f32 tile from an f32 view that only the fused call
// starting shortly after reads, as a row operand (a norm's weight or bias), and nothing after it:
// the call may then read the row in place (rows.hpp, fused::row_data) instead of a copy made
// on every iteration.
bool row_operand_in_place(const std::vector<ir::Stmt>& body, size_t i);

}  // namespace pypto::cpu
