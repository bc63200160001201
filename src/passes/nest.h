// Building blocks for passes that turn tensor-level instructions into loop nests of tiles:
// selecting a tile-sized window of a view, and a nest of loops over a destination's dimensions.
#pragma once
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "ir/ir.h"
#include "passes/pass_util.h"

namespace pypto::passes {

// How one view dimension is selected in an iteration of a nest.
struct Sel {
  ir::Expr off;
  int64_t size;
  bool keep;    // a tile dimension (kept) or a leading one (indexed, dropped)
  bool clamp0;  // the source may be smaller than the destination: clamp the valid extent at 0
};

// The window of `v` chosen by one Sel per view dimension; valid extents shrink accordingly.
ir::View sub(const ir::View& v, const std::vector<Sel>& sel);

struct Loop {
  std::string var;
  ir::Expr hi;
  int64_t step;
};

// Loops over a destination's dimensions, each advanced by a tile extent (no loop where the
// extent covers the dimension).
struct Nest {
  std::vector<ir::Expr> off;
  std::vector<int64_t> ext;
  std::vector<Loop> loops;  // outer to inner

  // Selection of the destination itself; dims from first_tile_dim on are tile dims.
  std::vector<Sel> dst_sel(int first_tile_dim) const;
  // Selection of a source aligned right against a destination of shape dshape (broadcasting).
  std::vector<Sel> src_sel(const ir::View& s, const std::vector<int64_t>& dshape, int first_tile_dim) const;
};

// Static tile shape of a selection's kept dims as rows x cols; `tile_dims` (0..2) is the number
// of tile dimensions of the destination (missing ones broadcast as 1).
std::pair<int64_t, int64_t> tile_shape(const std::vector<Sel>& sel, int tile_dims);

// Makes nests and the tiles used inside them, and emits the finished nest.
class NestBuilder {
 public:
  explicit NestBuilder(const ir::Program& p) : names_(p) {}

  std::string fresh(const std::string& hint) { return names_.fresh(hint); }
  Nest nest(const ir::View& dst, const std::vector<int64_t>& ext, const std::string& hint);
  // A local tile, allocated with the nest being built. Its type is t's compute type (f16/bf16
  // compute in f32), except bf16 matmul operands (Space::Mat), which stay bf16.
  ir::View tile(const std::string& hint, ir::DType t, int64_t rows, int64_t cols,
                ir::Space s = ir::Space::Vec);
  // A statement hoisted out of the innermost body: it runs at the top of the body of the nest's
  // loop number depth-1 (depth >= 1; 1 = the outermost loop, right after the tile allocations).
  void hoist(ir::Stmt s, int depth) { hoisted_.push_back({depth, std::move(s)}); }
  // Removes the allocations of the tiles made so far that `pick` selects, and returns them (for a
  // loop inside the nest: tiles that hold no value from one of its iterations to the next).
  std::vector<ir::Stmt> take_allocs(const std::function<bool(const ir::Buffer&)>& pick);
  // Wraps body in the nest's loops. The tiles are allocated (and hoisted statements run) at the
  // top of the outermost loop body, so each parallel iteration owns its tiles.
  void emit(const Nest& n, std::vector<ir::Stmt> body, std::vector<ir::Stmt>& out);

 private:
  NameGen names_;
  std::vector<ir::Stmt> allocs_;
  std::vector<std::pair<int, ir::Stmt>> hoisted_;
};

// A reduction over the last dimension of a global view whose last dimension is not its innermost
// in memory: x.sum(0) reaches tiling as a row reduction of a transposed view. Tiled as a column
// reduction, it reads row-major tiles instead of transposed ones. `src` and `dst` are the
// operands with their dims put back in memory order and size-1 dims dropped; `axis` is the
// reduced dim's position in them (never the last one).
struct ColumnReduction {
  ir::View src, dst;
  int axis;
};
std::optional<ColumnReduction> column_reduction(const ir::Op& op);

// True when an instruction still has global (tensor-level) operands to be tiled.
bool is_tensor_level(const ir::Op& op);

// Tile dtypes for lowering an elementwise-family instruction: the type source operand `arg`
// is loaded in (TLOAD converts), and the type of the result tile.
ir::DType operand_tile_dtype(const ir::Op& op, size_t arg);
ir::DType result_tile_dtype(const ir::Op& op);

// The tile type of a matmul's operands, given the tensors' types and the accumulator's: bf16 when
// both operands are bf16 and the accumulator f32, i8 when both are i8 and the accumulator i32
// (the native dot products, pto/cpu/matmul_bf16.hpp and matmul_int8.hpp), else the
// accumulator's type.
ir::DType matmul_operand_dtype(ir::DType a, ir::DType b, ir::DType acc);

// Statements computing acc (+)= a @ b for one iteration of a matmul nest over the destination
// (shape dshape, nest n): the K dimension is walked in steps of tk; batch dims broadcast.
std::vector<ir::Stmt> matmul_k_loop(NestBuilder& nb, const ir::View& a, const ir::View& b, const Nest& n,
                                    const std::vector<int64_t>& dshape, const ir::View& acc, int64_t tk);

}  // namespace pypto::passes
