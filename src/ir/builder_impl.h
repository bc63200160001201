// Private state of ir::Builder, shared by builder.cpp (core) and builder_nn.cpp (composites).
#pragma once
#include <map>
#include <set>
#include <string>
#include <vector>

#include "ir/builder.h"
#include "ir/names.h"

namespace pypto::ir {

struct Builder::Impl {
  struct Frame {
    enum Kind { Root, For, Then, Else } kind = Root;
    std::vector<Stmt> stmts;
    std::vector<Stmt> then_stmts;  // Else frames keep the finished then-branch here
    std::string var;               // For: the induction variable
    Expr lo, hi, step, cond;
    bool parallel = false;
    std::string where;  // source location of the loop or if header
  };

  Program prog;
  std::vector<Frame> frames;
  FreshNames names;
  VarBounds var_bounds;  // induction variables in scope
  std::string where;     // source location of the statements being built
  std::map<const StmtNode*, std::string> locations;
  std::set<const Buffer*> detached;  // results of Builder::detach
  // The outermost open group (begin_group): its label, the frame depth and the index in that
  // frame's statements where it began.
  struct Group {
    std::string name;
    size_t frames = 0, start = 0;
  };
  Group group;
  int group_depth = 0;
  // Dynamic dimensions: the front end's symbol names -> their variables, the dimension symbols in
  // binding order (appended to the program's scalars by finish), and their range.
  std::map<std::string, Expr> symbol_vars;
  std::vector<ScalarParam> dim_symbols;
  VarBounds symbol_bounds;
  ScalarEnv symbol_hints;  // each symbol's extent in the arguments being traced
  // A view's shape with dynamic dims at their traced extents (when they can be evaluated): shape
  // checks (broadcasting, matmul inner dims) see the values NumPy would.
  std::vector<int64_t> traced_shape(const View& v) const;
  // Throws the static shape error for these operands at their traced extents, and records a
  // run-time check that dynamic dims broadcast against each other have equal extents (unless
  // they are the same expression).
  void check_broadcast(const std::vector<const View*>& views);
  // Dims of `b` at the static bound kDynamicBound become dynamic with their `valid` extent.
  void set_dynamic_extents(Buffer& b, const std::vector<Expr>& valid) const;

  // Python's index rule at run time: `k` must satisfy 0 <= k < len; records a host-side check
  // unless the bounds prove it.
  void require_in_range(const Expr& k, const Expr& len, int dim);
  // lo <= extent <= hi at run time (a dynamic dimension's extent), else `message` is the error.
  void require_extent(const Expr& extent, int64_t lo, int64_t hi, int dim, const std::string& message);
  // A sort or a reversed scan along a dynamic last dim of `xp` (dim `dim` of the caller's tensor):
  // at most kMaxDynamicWholeRow elements, the widest tile it is given.
  void require_whole_row(const View& xp, int dim, const char* what) {
    if (xp.shape().back() == kDynamicBound)
      require_extent(xp.valid_shape().back(), 0, kMaxDynamicWholeRow, dim,
                     std::string(what) + " along dynamic dimension " + std::to_string(dim) + ": at most " +
                         std::to_string(kMaxDynamicWholeRow) + " elements (each row is one tile)");
  }
  // The loops and branches open here, as the scopes of a host-side check.
  std::vector<CheckScope> check_scopes() const;

  std::string fresh(const std::string& hint);
  void emit(Stmt s) {
    if (!where.empty()) locations[s.get()] = where;
    frames.back().stmts.push_back(std::move(s));
  }
  void emit_op(Opcode code, std::vector<Operand> args) { emit(op_stmt(Op{code, std::move(args)})); }
  // A new Temp in global scratch, declared in the current block, viewed whole with `valid` extents.
  View new_temp(const std::vector<int64_t>& shape, DType dtype, const std::vector<Expr>& valid,
                const std::string& hint = "t");
  // Buffers pypto.inplace marked (Builder::inplace): the next elementwise result of their shape
  // and dtype that reads one of them is written into it instead of a new temporary.
  std::set<const Buffer*> donated;
  // The destination of an elementwise result: a donated operand that matches (consumed), else a
  // new temporary.
  View result(const std::vector<const View*>& operands, const std::vector<int64_t>& shape, DType dtype,
              const std::vector<Expr>& valid);
  // `src`, or a copy of it when it reads dst's buffer through another window (see builder.cpp).
  Operand unaliased(const View& dst, const Operand& src);
  // Static upper bound of an index expression (the best one known), or fallback.
  int64_t upper_bound(const Expr& e, int64_t fallback) const;
};

// Shape helpers shared by the builder files.
std::string shape_str(const std::vector<int64_t>& s);
int normalize_dim(int dim, int rank, const char* what);
Expr min_valid(const Expr& a, const Expr& b);
// The dtype an operand contributes to a result: a view's own; a Python scalar does not widen a
// tensor of `tensor_dtype`, except a float scalar with an integer tensor (f32).
DType operand_dtype(const Operand& o, DType tensor_dtype);
// Valid extents of a broadcast result of shape `out`.
std::vector<Expr> broadcast_valid(const std::vector<int64_t>& out, const std::vector<const View*>& views);
std::vector<int> inverse_perm(const std::vector<int>& p);
// i64 iota of shape [1, .., n, .., 1] (rank r, n at dim d), for masks and index arithmetic.
View iota_along(Builder& b, int64_t n, int r, int d);

}  // namespace pypto::ir
