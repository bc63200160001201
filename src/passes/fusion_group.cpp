// Fusion groups: the analysis shared by fuse and tile_ops (see fusion_group.h).
#include "passes/fusion_group.h"

#include "ir/printer.h"
#include "ir/visitor.h"
#include "passes/nest.h"
#include "passes/pass_util.h"

namespace pypto::passes::fusion {
using namespace ir;

bool is_group(const Stmt& s) {
  return s->kind == StmtKind::Seq && (s->var == kFusedRows || s->var == kFusedEpilogue);
}

Kind kind_of(Opcode c) {
  switch (opcode_info(c).category) {
    case OpCategory::Unary:
    case OpCategory::Binary:
    case OpCategory::Compare:
    case OpCategory::Select:
    case OpCategory::Convert:
      return Kind::Elementwise;
    case OpCategory::Fill:
      return c == Opcode::TEXPANDS ? Kind::Elementwise : Kind::Other;
    case OpCategory::Reduce:
      return (c == Opcode::TROWSUM || c == Opcode::TROWMAX || c == Opcode::TROWMIN) ? Kind::Reduce
                                                                                    : Kind::Other;
    case OpCategory::Matrix:
      return c == Opcode::TMATMUL ? Kind::Matmul : Kind::Other;
    default:
      return Kind::Other;
  }
}

std::optional<RowSpace> row_space(const View& d) {
  int r = d.rank();
  if (r == 0) return std::nullopt;
  RowSpace rs;
  rs.rank = r;
  rs.rows_valid = int_imm(1);
  if (r == 1) return rs;
  auto s = d.shape();
  auto v = d.valid_shape();
  rs.lead.assign(s.begin(), s.end() - 2);
  rs.lead_valid.assign(v.begin(), v.end() - 2);
  rs.rows = s[size_t(r - 2)];
  rs.rows_valid = v[size_t(r - 2)];
  return rs;
}

bool same(const RowSpace& a, const RowSpace& b) {
  if (a.rank != b.rank || a.lead != b.lead || a.rows != b.rows || !expr_equal(a.rows_valid, b.rows_valid))
    return false;
  for (size_t i = 0; i < a.lead_valid.size(); ++i)
    if (!expr_equal(a.lead_valid[i], b.lead_valid[i])) return false;
  return true;
}

std::string key(const View& v) { return print(v); }

bool row_widths(const Op& op, Expr& w, bool& static_wide) {
  for (auto& a : op.args) {
    auto v = std::get_if<View>(&a);
    if (!v || v->rank() == 0) continue;
    int64_t n = v->shape().back();
    if (n == kDynamicBound) {
      Expr e = v->valid_shape().back();
      if (w && !expr_equal(w, e)) return false;
      if (!w) w = e;
    } else if (n != 1) {
      static_wide = true;
    }
  }
  return true;
}

void add(Group& g, const Op& op, const DeclaredTemps& declared) {
  g.ops.push_back(&op);
  if (column_reduction(op)) g.column_sums = true;
  bool static_wide = false;
  if (!g.epilogue) row_widths(op, g.width, static_wide);
  const View& d = dst(op);
  // A temporary is the group's own only when this write covers it: a partial write (the last
  // piece of a buffer written piecewise) leaves the rest to earlier writes outside the group.
  if (d.buf->kind == BufferKind::Temp && declared.count(d.buf.get()) && covers_buffer(d))
    g.produced.insert(d.buf.get());
  else
    g.written[d.buf.get()] = key(d);
  for (size_t i = 1; i < op.args.size(); ++i)
    if (auto v = std::get_if<View>(&op.args[i]))
      if (!g.produced.count(v->buf.get())) g.read[v->buf.get()].insert(key(*v));
}

Group group_of(const StmtNode& seq, const std::set<const Buffer*>& allocs) {
  Group g;
  DeclaredTemps declared{allocs, {}};
  g.epilogue = seq.var == kFusedEpilogue;
  for (const Stmt& s : seq.body) {
    if (s->kind == StmtKind::Alloc) {
      declared.inside.insert(s->buffer.get());
    } else if (s->kind == StmtKind::OpStmt) {
      if (g.ops.empty()) g.rs = *row_space(dst(s->op));
      add(g, s->op, declared);
    } else {
      throw Error("internal: a fusion group holds only instructions and allocations");
    }
  }
  return g;
}

std::map<const Buffer*, int> count_refs(const std::vector<Stmt>& body) {
  std::map<const Buffer*, int> refs;
  for_each_view(body, [&](const View& v, bool) { refs[v.buf.get()]++; });
  return refs;
}

}  // namespace pypto::passes::fusion
