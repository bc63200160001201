// The PTO IR: a structured program of PTO instructions over buffers and views.
//
// Semantics in brief (docs/isa.md and docs/architecture.md have the full story):
//  * A Program has parameters (global tensors with a static shape and runtime strides, and scalar
//    arguments) and a body of statements: `for` loops with a symbolic induction variable, `if`,
//    scalar `let`s, buffer allocations, and instructions (Op).
//  * A Buffer is a named n-d array with a static shape in one memory space. Params and outputs
//    live in Global memory and are owned by the caller; Temps are scratch the program allocates
//    where they are declared (a Temp declared inside a loop body is private to each iteration).
//  * A View selects a rectangular, possibly strided and permuted, window of a buffer: per base
//    dimension an offset (expression), a static size, a static step and a valid extent
//    (expression, <= size); `dims` lists which base dimensions form the view, in order; base
//    dimensions not listed are indexed (size 1, dropped). Reading or writing touches only the valid
//    region; the rest of the window is padding that no instruction may observe.
//  * Tensor level: instruction operands are views of any rank and size; the instruction applies
//    over the destination's valid region (broadcasting size-1 dimensions of sources).
//    Tile level (the ISA proper): compute operands are whole local tiles (rank 2, space
//    Vec/Mat/Acc) whose valid region is runtime state set by TLOAD and by each instruction;
//    only TLOAD/TSTORE/TPREFETCH take global views.
//
// Dynamic dimensions (one compiled kernel for every sequence length):
//  * A dimension of a Param may be dynamic: its extent is a *dimension symbol*, an i64 scalar
//    (ScalarParam with `param`/`dim` set) that the runtime binds from that argument's shape at
//    each call; the caller does not pass it. Symbols come after the caller's scalars.
//  * Any buffer (Param, Output, global Temp) keeps per dim in `dyn` the extent expression of a
//    dynamic dim (over symbols, e.g. `%S` or `(%S - 1)`); its `shape` entry is then the static
//    bound kDynamicBound. Everything static (tile sizes, fusion, shape inference) sees the bound;
//    everything about the data sees the extent: View::whole's valid extent is the expression, so
//    tiling emits full tiles plus ragged edges over the symbolic remainder exactly as for a
//    static ragged size, and bounds analysis gives a symbol the range [0, kDynamicBound].
//  * Global Temps with dynamic dims are allocated at run time (the interpreter and the CPU code
//    evaluate `dyn`); outputs are allocated by the caller from the evaluated extents
//    (runtime::Kernel::output_shapes). The argument check binds symbols, checks that two
//    arguments sharing a symbol agree and that an extent does not exceed kDynamicBound.
//  * Text form: a param dim written `%S` (a name not yet declared) declares symbol S bound to that
//    dim; other dims of buffers may be any expression of symbols: `%x: f32[%S, 64]`.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "ir/expr.h"
#include "ir/opcodes.h"
#include "ir/types.h"

namespace pypto::ir {

enum class BufferKind : uint8_t { Param, Output, Temp };

// The static bound of a dynamic dimension: its `shape` entry, and the largest extent a call may
// give it (2^31 - 1, so that products of two dynamic dims stay far from overflow).
constexpr int64_t kDynamicBound = (int64_t(1) << 31) - 1;
// The widest row a sort (TARGSORT) or a reversed scan (TSCAN from the end) takes along a dynamic
// dimension: its tile is chosen at run time among widths up to this one (passes/tile_ops.cpp
// whole_rows), and a wider row is an error naming the kernel line before the kernel runs. (A
// forward scan takes blocks of columns: any width.)
constexpr int64_t kMaxDynamicWholeRow = int64_t(1) << 24;

struct Buffer {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  Space space = Space::Global;
  BufferKind kind = BufferKind::Temp;
  // Per dim, the extent of a dynamic dimension (shape[d] is then kDynamicBound), null for a
  // static one; empty when every dimension is static.
  std::vector<Expr> dyn;

  template <class F>
  void for_each_field(F&& f) const {
    f(name);
    f(dtype);
    f(shape);
    f(space);
    f(kind);
    f(dyn);
  }
  int64_t numel() const;  // static buffers only
  int rank() const { return int(shape.size()); }
  bool is_dynamic() const { return !dyn.empty(); }
  bool is_dynamic(int d) const { return !dyn.empty() && dyn[size_t(d)]; }
  // The extent of dimension d: the symbolic expression of a dynamic dim, else the constant.
  Expr extent(int d) const;
};
using BufferRef = std::shared_ptr<Buffer>;

struct View {
  BufferRef buf;
  std::vector<Expr> offset;   // per base dim
  std::vector<int64_t> size;  // per base dim, static window extent
  std::vector<int64_t> step;  // per base dim, static stride multiplier (>= 1)
  std::vector<Expr> valid;    // per base dim, valid extent (<= size)
  std::vector<int> dims;      // base dims forming the view, in view order

  template <class F>
  void for_each_field(F&& f) const {
    f(buf);
    f(offset);
    f(size);
    f(step);
    f(valid);
    f(dims);
  }

  static View whole(const BufferRef& b);  // the full buffer, identity dims
  int rank() const { return int(dims.size()); }
  std::vector<int64_t> shape() const;     // static view shape
  std::vector<Expr> valid_shape() const;  // valid extents in view order
  bool is_whole() const;                  // the identity view of its buffer
  // Whether base dimension d is the window [var, var + size) of a loop `for var = 0 to extent step
  // size`, valid extent clipped to the extent: what a tile loop over a dimension of that extent reads.
  bool tiles_dim(int d, const std::string& var, int64_t extent) const;
};

// An operand is a view or a scalar expression (the tile-scalar forms, e.g. TADD dst, a, 2.0).
using Operand = std::variant<View, Expr>;

struct Op {
  Opcode code;
  std::vector<Operand> args;  // args[0] is the destination
  template <class F>
  void for_each_field(F&& f) const {
    f(code);
    f(args);
  }
};

struct StmtNode;
using Stmt = std::shared_ptr<StmtNode>;

enum class StmtKind : uint8_t { Seq, For, If, Let, Alloc, OpStmt };

// Loop attributes. Parallel: iterations write disjoint regions and may run on different cores
// (set by passes/parallelize or by pypto.prange). Unroll is a hint to backends.
enum class LoopKind : uint8_t { Serial, Parallel };

constexpr const char* kWideRowsElse = "wide_rows_else";

struct StmtNode {
  StmtKind kind;
  // Seq: body, run in order (a group, not a scope); var = an optional label saying what made the
  // group: a composite op's expansion ("softmax", passes/lower_composites) or a fusion group
  // ("fused_rows", "fused_epilogue", passes/fusion_group.h) that tile_ops emits as one nest.
  std::vector<Stmt> body;
  // For: `for var = lo to hi step step` (hi exclusive); If: cond, body = then, orelse = else,
  // var = an optional label: kWideRowsElse marks the test of a dynamic row width against its
  // widest fused tile, whose else branch (the unfused rows) the CPU backend compiles lazily.
  std::string var;
  Expr lo, hi, step, cond;
  LoopKind loop_kind = LoopKind::Serial;
  std::vector<Stmt> orelse;
  // Let: var = value (scalar)
  Expr value;
  // Alloc
  BufferRef buffer;
  // OpStmt
  Op op;

  template <class F>
  void for_each_field(F&& f) const {
    f(kind);
    f(body);
    f(var);
    f(lo);
    f(hi);
    f(step);
    f(cond);
    f(loop_kind);
    f(orelse);
    f(value);
    f(buffer);
    f(op);
  }
};

Stmt seq(std::vector<Stmt> body);
Stmt for_loop(const std::string& var, Expr lo, Expr hi, Expr step, std::vector<Stmt> body,
              LoopKind kind = LoopKind::Serial);
Stmt if_then(Expr cond, std::vector<Stmt> then_body, std::vector<Stmt> else_body = {});
Stmt let(const std::string& var, Expr value);
Stmt alloc(BufferRef buffer);
Stmt op_stmt(Op op);

struct ScalarParam {
  std::string name;
  DType dtype;  // I64 or F32/F64
  // A dimension symbol (param >= 0): the extent of params[param]'s dimension `dim`, bound by the
  // runtime from the argument's shape; not passed by the caller.
  int param = -1;
  int dim = -1;
  template <class F>
  void for_each_field(F&& f) const {
    f(name);
    f(dtype);
    f(param);
    f(dim);
  }
  bool is_dim_symbol() const { return param >= 0; }
};

// Where an IndexCheck applies: inside a loop (`var` set: for var = lo to hi step step) or inside
// a branch (`cond` must hold).
struct CheckScope {
  std::string var;
  Expr lo, hi, step, cond;
};

// A run-time integer index the builder could not prove in range: wherever `scopes` execute,
// 0 <= index < length must hold; with `same_extent`, `index` and `length` are two extents of a
// broadcast that must be equal (two different dynamic dims). `message`, where set, is the error
// instead of the index's (argmax over a dynamic dim: index 0, length the extent: not empty). The runtime
// evaluates it on the host before the kernel runs (runtime/index_checks.h), over each loop nest's whole range
// at once, and raises naming `where`.
struct IndexCheck {
  Expr index, length;
  int dim = 0;
  bool same_extent = false;
  std::vector<CheckScope> scopes;  // outermost first
  std::string where;               // the kernel's "file:line: source text" (Builder::set_location)
  std::string message;
};

struct Program {
  std::string name;
  std::vector<BufferRef> params;     // Param and Output buffers, in calling order
  std::vector<ScalarParam> scalars;  // runtime scalar arguments
  std::vector<Stmt> body;
  // Host-side preconditions of a tensor-level program, derived from its body and the kernel's
  // source lines: not part of the program's identity (equality, hashing, text form).
  std::vector<IndexCheck> index_checks;
  template <class F>
  void for_each_field(F&& f) const {
    f(name);
    f(params);
    f(scalars);
    f(body);
  }
  // Scalars the caller passes (the dimension symbols follow them in `scalars`).
  size_t caller_scalars() const;
  bool has_dynamic_dims() const { return caller_scalars() != scalars.size(); }
};

// Values of every scalar of `p` for a call: the caller's, then each dimension symbol read from the
// argument shapes (shapes[i] of params[i]). Does not check consistency (runtime/arg_check does).
std::vector<int64_t> dim_symbol_values(const Program& p, const std::vector<std::vector<int64_t>>& shapes);
// Shapes of the Output params of `p` for inputs (the other params, in order) of these shapes:
// dynamic extents evaluated from the dimension symbols the inputs bind.
std::vector<std::vector<int64_t>> output_shapes(const Program& p,
                                                const std::vector<std::vector<int64_t>>& input_shapes);
// Shapes of every param of `p` (in order) where the shapes of only some inputs are known (the
// others nullopt; those binding a dimension symbol must be known): a backward's cotangent that is
// zeros, its gradients.
std::vector<std::vector<int64_t>> param_shapes(
    const Program& p, const std::vector<std::optional<std::vector<int64_t>>>& input_shapes);
// The dimension symbols of `p` bound from the shapes of its inputs (params that are not outputs).
ScalarEnv dim_symbol_env(const Program& p, const std::vector<std::vector<int64_t>>& input_shapes);
// Each dimension symbol of `p` with its range [0, kDynamicBound], for bounds analysis.
VarBounds dim_symbol_bounds(const Program& p);
// A buffer's shape at run time given the program's scalar environment (dynamic extents evaluated).
std::vector<int64_t> runtime_shape(const Buffer& b, const ScalarEnv& env);

// Structural equality and hashing, derived from the field lists above. Buffers compare by their
// fields (names included), so a printed and re-parsed program is equal to the original.
bool structural_equal(const Program& a, const Program& b);
size_t structural_hash(const Program& p);

}  // namespace pypto::ir
