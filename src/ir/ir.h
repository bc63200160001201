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
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "ir/expr.h"
#include "ir/opcodes.h"
#include "ir/types.h"

namespace pypto::ir {

enum class BufferKind : uint8_t { Param, Output, Temp };

struct Buffer {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  Space space = Space::Global;
  BufferKind kind = BufferKind::Temp;

  template <class F>
  void for_each_field(F&& f) const {
    f(name);
    f(dtype);
    f(shape);
    f(space);
    f(kind);
  }
  int64_t numel() const;
  int rank() const { return int(shape.size()); }
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

struct StmtNode {
  StmtKind kind;
  // Seq: body, run in order (a group, not a scope); var = an optional label saying what made the
  // group: a composite op's expansion ("softmax", passes/lower_composites) or a fusion group
  // ("fused_rows", "fused_epilogue", passes/fusion_group.h) that tile_ops emits as one nest.
  std::vector<Stmt> body;
  // For: `for var = lo to hi step step` (hi exclusive); If: cond, body = then, orelse = else
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
  template <class F>
  void for_each_field(F&& f) const {
    f(name);
    f(dtype);
  }
};

// Where an IndexCheck applies: inside a loop (`var` set: for var = lo to hi step step) or inside
// a branch (`cond` must hold).
struct CheckScope {
  std::string var;
  Expr lo, hi, step, cond;
};

// A run-time integer index the builder could not prove in range: wherever `scopes` execute,
// 0 <= index < length must hold. The runtime evaluates it on the host before the kernel runs
// (runtime/index_checks.h), over each loop nest's whole range at once, and raises naming `where`.
struct IndexCheck {
  Expr index, length;
  int dim = 0;
  std::vector<CheckScope> scopes;  // outermost first
  std::string where;               // the kernel's "file:line: source text" (Builder::set_location)
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
};

// Structural equality and hashing, derived from the field lists above. Buffers compare by their
// fields (names included), so a printed and re-parsed program is equal to the original.
bool structural_equal(const Program& a, const Program& b);
size_t structural_hash(const Program& p);

}  // namespace pypto::ir
