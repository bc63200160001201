// Fusion groups, shared by the pass that forms them (fuse.cpp: which consecutive instructions
// run as one nest) and the pass that emits their nest (tile_fused.cpp, part of tile_ops).
//
// In the IR a group is a Seq statement labelled kFusedRows or kFusedEpilogue that holds the
// group's instructions in order and the allocations of the global temporaries declared among
// them. Its meaning is that of its statements; tile_ops turns the whole Seq into one nest.
#pragma once
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "ir/ir.h"

namespace pypto::passes::fusion {

constexpr const char* kFusedRows = "fused_rows";          // a row group (see fuse.h)
constexpr const char* kFusedEpilogue = "fused_epilogue";  // a matmul and its epilogue
bool is_group(const ir::Stmt& s);

enum class Kind { Elementwise, Reduce, Matmul, Other };
Kind kind_of(ir::Opcode c);

// Leading dims and rows shared by the instructions of a row group.
struct RowSpace {
  std::vector<int64_t> lead;
  std::vector<ir::Expr> lead_valid;
  int64_t rows = 1;
  ir::Expr rows_valid;
  int rank = 0;
};
std::optional<RowSpace> row_space(const ir::View& d);
bool same(const RowSpace& a, const RowSpace& b);

inline const ir::View& dst(const ir::Op& op) { return std::get<ir::View>(op.args[0]); }

struct Group {
  bool epilogue = false;
  ir::Expr width;  // a row group over a dynamic row width: that width's valid extent; else null
  std::vector<const ir::Op*> ops;
  // A row group may end with column sums (x.sum(0)) of its rows: tile_fused.cpp accumulates them
  // in the row nest, which then walks row blocks serially within parallel chunks of rows.
  bool column_sums = false;
  RowSpace rs;
  std::set<const ir::Buffer*> produced;                     // temps written by the group
  std::map<const ir::Buffer*, std::string> written;         // external buffer -> the view written
  std::map<const ir::Buffer*, std::set<std::string>> read;  // external buffer -> views read
};

// The row widths of op's views: each last dim is 1, a static width (static_wide = true), or a
// dynamic width, whose valid extent must equal `w` when w is set (it is set from the first one).
// False when two dynamic widths differ.
bool row_widths(const ir::Op& op, ir::Expr& w, bool& static_wide);

// The temporaries declared in a group's block up to a point: those before the group, shared with
// the block's walk (not copied: a deep network's backward declares thousands, and a copy per
// instruction made fusion quadratic in them), and those declared inside the group so far.
struct DeclaredTemps {
  const std::set<const ir::Buffer*>& before;
  std::set<const ir::Buffer*> inside;
  bool count(const ir::Buffer* b) const { return before.count(b) || inside.count(b); }
};

// Adds op to g; `declared`: the temporaries declared in the group's block so far.
void add(Group& g, const ir::Op& op, const DeclaredTemps& declared);
// The text identifying a view's window (two views with equal keys touch the same elements).
std::string key(const ir::View& v);

// The group a labelled Seq holds; `allocs`: the temporaries declared in its block before it.
Group group_of(const ir::StmtNode& seq, const std::set<const ir::Buffer*>& allocs);

// How often each buffer is referenced by an operand anywhere in `body`.
std::map<const ir::Buffer*, int> count_refs(const std::vector<ir::Stmt>& body);

}  // namespace pypto::passes::fusion
