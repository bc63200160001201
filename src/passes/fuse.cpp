// Fusion pass (see fuse.h).
#include "passes/fuse.h"

#include <algorithm>
#include <cctype>
#include <map>

#include "ir/mutator.h"
#include "ir/printer.h"
#include "passes/nest.h"
#include "passes/pass_util.h"

namespace pypto::passes {
using namespace ir;

namespace {

enum class Kind { Elementwise, Reduce, Matmul, Other };

// A matmul whose right operand has more elements than this forms its own nest (with an
// epilogue) instead of joining a row group, where the operand would be reloaded per row tile.
constexpr int64_t kSmallRightOperand = 256 * 1024;

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

// Tiles compute in f32, so a conversion to a 16-bit float would not round inside a group: it
// stays unfused, and its store rounds the value as the program says.
bool narrowing(const Op& op) {
  if (op.code != Opcode::TCVT) return false;
  DType t = std::get<View>(op.args[0]).buf->dtype;
  return t == DType::F16 || t == DType::BF16;
}

bool allowed(const FusionOptions& o, Opcode c) {
  Kind k = kind_of(c);
  if (k == Kind::Other || o.mode == FusionOptions::Off) return false;
  if (o.mode == FusionOptions::Full || k == Kind::Elementwise || k == Kind::Reduce) return true;
  return o.mode == FusionOptions::Listed && o.kinds.count("matmul") > 0;
}

// Leading dims and rows shared by the instructions of a row group.
struct RowSpace {
  std::vector<int64_t> lead;
  std::vector<Expr> lead_valid;
  int64_t rows = 1;
  Expr rows_valid;
  int rank = 0;
};

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
  rs.rows = s[r - 2];
  rs.rows_valid = v[r - 2];
  return rs;
}

bool same(const RowSpace& a, const RowSpace& b) {
  if (a.rank != b.rank || a.lead != b.lead || a.rows != b.rows || !expr_equal(a.rows_valid, b.rows_valid))
    return false;
  for (size_t i = 0; i < a.lead_valid.size(); ++i)
    if (!expr_equal(a.lead_valid[i], b.lead_valid[i])) return false;
  return true;
}

bool broadcasts_to(const std::vector<int64_t>& s, const std::vector<int64_t>& d) {
  if (s.size() > d.size()) return false;
  for (size_t i = 0; i < s.size(); ++i) {
    int64_t a = s[s.size() - 1 - i], b = d[d.size() - 1 - i];
    if (a != b && a != 1) return false;
  }
  return true;
}

const View& dst(const Op& op) { return std::get<View>(op.args[0]); }

struct Group {
  bool epilogue = false;
  std::vector<const Op*> ops;
  size_t begin = 0, end = 0;  // statement span [begin, end)
  RowSpace rs;
  std::set<const Buffer*> produced;                     // temps written by the group
  std::map<const Buffer*, std::string> written;         // external buffer -> the view written
  std::map<const Buffer*, std::set<std::string>> read;  // external buffer -> views read
};

void count_refs(const std::vector<Stmt>& body, std::map<const Buffer*, int>& refs) {
  for_each_view(body, [&](const View& v, bool) { refs[v.buf.get()]++; });
}

class Fuser : public StmtMutator {
 public:
  Fuser(const Program& p, const FusionOptions& o, const TileSizes& ts) : nb_(p), o_(o), ts_(ts) {
    count_refs(p.body, refs_);
  }

  // Groups runs of consecutive tensor-level instructions of one block; loops and branches are
  // rebuilt around their own blocks.
  std::vector<Stmt> mutate_block(const std::vector<Stmt>& in) override {
    std::vector<Stmt> out;
    std::set<const Buffer*> allocs;
    for (size_t i = 0; i < in.size(); ++i) {
      const Stmt& s = in[i];
      if (s->kind == StmtKind::Alloc) {
        allocs.insert(s->buffer.get());
      } else if (s->kind == StmtKind::OpStmt && is_tensor_level(s->op)) {
        Group g;
        if (grow(in, i, allocs, g) && g.ops.size() >= 2) {
          emit(g, in, out);
          i = g.end - 1;
          continue;
        }
      }
      out.push_back(mutate(s));
    }
    return out;
  }

 private:
  NestBuilder nb_;
  FusionOptions o_;

  Stmt mutate_op(const Stmt& s) override { return s; }
  TileSizes ts_;
  std::map<const Buffer*, int> refs_;

  static std::string key(const View& v) { return print(v); }

  void add(Group& g, const Op& op, const std::set<const Buffer*>& allocs) {
    g.ops.push_back(&op);
    const View& d = dst(op);
    // A temporary is the group's own only when this write covers it: a partial write (the last
    // piece of a buffer written piecewise) leaves the rest to earlier writes outside the group.
    if (d.buf->kind == BufferKind::Temp && allocs.count(d.buf.get()) && covers_buffer(d))
      g.produced.insert(d.buf.get());
    else
      g.written[d.buf.get()] = key(d);
    for (size_t i = 1; i < op.args.size(); ++i)
      if (auto v = std::get_if<View>(&op.args[i]))
        if (!g.produced.count(v->buf.get())) g.read[v->buf.get()].insert(key(*v));
  }

  // A row group holds whole rows in one tile: a dynamic row width (ir.h) has no static tile
  // shape, so only elementwise instructions of one shape (tiled along the row) group with one.
  static bool dynamic_row(const Op& op) {
    for (auto& a : op.args)
      if (auto v = std::get_if<View>(&a))
        if (v->rank() > 0 && v->shape().back() == kDynamicBound) return true;
    return false;
  }

  bool grow(const std::vector<Stmt>& in, size_t i, std::set<const Buffer*> allocs, Group& g) {
    const Op& first = in[i]->op;
    if (!allowed(o_, first.code) || narrowing(first)) return false;
    if (kind_of(first.code) != Kind::Elementwise && dynamic_row(first)) return false;
    auto rs = row_space(dst(first));
    if (!rs) return false;
    if (kind_of(first.code) == Kind::Matmul) {
      auto bs = std::get<View>(first.args[2]).shape();
      if (rs->rank < 2) return false;
      g.epilogue = bs[bs.size() - 1] * bs[bs.size() - 2] > kSmallRightOperand;
    }
    g.rs = *rs;
    g.begin = i;
    g.end = i + 1;
    add(g, first, allocs);
    for (size_t j = i + 1; j < in.size(); ++j) {
      const Stmt& s = in[j];
      if (s->kind == StmtKind::Alloc && s->buffer->space == Space::Global) {
        allocs.insert(s->buffer.get());
        continue;
      }
      if (s->kind != StmtKind::OpStmt || !is_tensor_level(s->op) || !fits(g, s->op)) break;
      add(g, s->op, allocs);
      g.end = j + 1;
    }
    return true;
  }

  bool fits(const Group& g, const Op& op) const {
    if (!allowed(o_, op.code) || narrowing(op)) return false;
    Kind k = kind_of(op.code);
    if ((dynamic_row(op) || dynamic_row(*g.ops[0])) &&
        (k != Kind::Elementwise || dst(op).shape() != dst(*g.ops[0]).shape()))
      return false;  // rows stay tiled only while every instruction covers the same shape
    const View& d = dst(op);
    auto ds = d.shape();
    if (g.epilogue) {
      const View& d0 = dst(*g.ops[0]);
      if (k != Kind::Elementwise || ds != d0.shape()) return false;
      auto a = d.valid_shape(), b = d0.valid_shape();
      for (size_t i = 0; i < a.size(); ++i)
        if (!expr_equal(a[i], b[i])) return false;
    } else {
      auto rs = row_space(d);
      if (!rs || !same(*rs, g.rs)) return false;
    }
    auto external_ok = [&](const View& v, bool writing) {
      auto w = g.written.find(v.buf.get());
      if (w != g.written.end() && w->second != key(v)) return false;
      if (writing) {
        auto r = g.read.find(v.buf.get());
        if (r != g.read.end() && (r->second.size() > 1 || !r->second.count(key(v)))) return false;
      }
      return true;
    };
    if (g.produced.count(d.buf.get()) ? !covers_buffer(d) : !external_ok(d, true)) return false;
    for (size_t i = 1; i < op.args.size(); ++i) {
      auto v = std::get_if<View>(&op.args[i]);
      if (!v) continue;
      bool mine = g.produced.count(v->buf.get()) > 0;
      if (mine && !covers_buffer(*v)) return false;
      if (!mine && !external_ok(*v, false)) return false;
      auto vs = v->shape();
      if (k == Kind::Elementwise && !broadcasts_to(vs, ds)) return false;
      if (k == Kind::Reduce &&
          std::vector<int64_t>(vs.begin(), vs.end() - 1) != std::vector<int64_t>(ds.begin(), ds.end() - 1))
        return false;
      if (k == Kind::Matmul) {
        if (vs.size() < 2) return false;
        if (i == 1 && vs[vs.size() - 2] != ds[ds.size() - 2]) return false;
        if (i == 2 && (mine || vs[vs.size() - 1] * vs[vs.size() - 2] > kSmallRightOperand)) return false;
      }
    }
    return true;
  }

  // --- emission ------------------------------------------------------------------------------

  struct Emission {
    const Group* g;
    std::set<const Buffer*> internal;
    std::map<const Buffer*, int> last_use;
    std::map<const Buffer*, View> tile_of;
    std::map<std::string, View> cache;
    std::vector<Stmt> body;
    std::vector<std::string> loop_vars;
    int ft = 0;  // first tile dim
  };

  void emit(const Group& g, const std::vector<Stmt>& in, std::vector<Stmt>& out) {
    Emission e;
    e.g = &g;
    std::map<const Buffer*, int> mine;
    for (size_t j = 0; j < g.ops.size(); ++j)
      for (size_t i = 0; i < g.ops[j]->args.size(); ++i)
        if (auto v = std::get_if<View>(&g.ops[j]->args[i])) {
          mine[v->buf.get()]++;
          if (i > 0) e.last_use[v->buf.get()] = int(j);
        }
    for (auto* b : g.produced)
      if (refs_[b] == mine[b]) e.internal.insert(b);
    // Internal temps need no memory: drop their allocations; keep the others, before the nest.
    out.erase(std::remove_if(out.begin(), out.end(),
                             [&](const Stmt& s) {
                               return s->kind == StmtKind::Alloc && e.internal.count(s->buffer.get());
                             }),
              out.end());
    for (size_t j = g.begin; j < g.end; ++j)
      if (in[j]->kind == StmtKind::Alloc && !e.internal.count(in[j]->buffer.get())) out.push_back(in[j]);
    if (g.epilogue)
      emit_epilogue(e, out);
    else
      emit_rows(e, out);
  }

  static int64_t floor_pow2(int64_t x) {
    int64_t p = 1;
    while (p * 2 <= x) p *= 2;
    return p;
  }

  void emit_rows(Emission& e, std::vector<Stmt>& out) {
    const Group& g = *e.g;
    const View& d0 = dst(*g.ops[0]);
    auto s0 = d0.shape();
    int r = int(s0.size());
    e.ft = std::max(r - 2, 0);
    bool col_tiled = true, has_mm = false;
    int64_t width = 1;
    for (auto* op : g.ops) {
      col_tiled &= kind_of(op->code) == Kind::Elementwise && dst(*op).shape() == s0;
      has_mm |= kind_of(op->code) == Kind::Matmul;
      for (auto& a : op->args)
        if (auto v = std::get_if<View>(&a))
          if (v->rank() > 0) width = std::max(width, v->shape().back());
    }
    std::vector<int64_t> ext(r, 1);
    ext[r - 1] = col_tiled ? std::min(s0[r - 1], ts_.elem_cols) : s0[r - 1];
    if (r >= 2) {
      int64_t budget = has_mm ? 64 * 1024 : ts_.elem_rows * ts_.elem_cols;
      int64_t w = col_tiled ? ext[r - 1] : width;
      ext[r - 2] = std::min(s0[r - 2], floor_pow2(std::max<int64_t>(1, budget / w)));
    }
    Nest n = nb_.nest(d0, ext, "f");
    for (auto& l : n.loops) e.loop_vars.push_back(l.var);
    for (size_t j = 0; j < g.ops.size(); ++j) {
      const Op& op = *g.ops[j];
      Nest m = n;
      if (!col_tiled) {
        m.off[r - 1] = int_imm(0);
        m.ext[r - 1] = dst(op).shape()[r - 1];
      }
      View y;
      switch (kind_of(op.code)) {
        case Kind::Reduce: {
          View x = source(e, op, 1, operand_tile_dtype(op, 1), m, std::get<View>(op.args[1]).shape());
          y = nb_.tile("r", result_tile_dtype(op), x.buf->shape[0], 1);
          e.body.push_back(op_stmt(Op{op.code, {y, x}}));
          break;
        }
        case Kind::Matmul:
          y = matmul_in_rows(e, op, m);
          break;
        default:
          y = elementwise(e, op, int(j), m);
      }
      finish_op(e, op, y, m);
    }
    nb_.emit(n, std::move(e.body), out);
  }

  void emit_epilogue(Emission& e, std::vector<Stmt>& out) {
    const Group& g = *e.g;
    const Op& mm = *g.ops[0];
    const View& d = dst(mm);
    auto ds = d.shape();
    int r = int(ds.size());
    e.ft = r - 2;
    std::vector<int64_t> ext(r, 1);
    ext[r - 2] = ts_.mm_m;
    ext[r - 1] = ts_.mm_n;
    Nest n = nb_.nest(d, ext, "m");
    for (auto& l : n.loops) e.loop_vars.push_back(l.var);
    View acc = nb_.tile("acc", d.buf->dtype, n.ext[r - 2], n.ext[r - 1], Space::Acc);
    e.body.push_back(op_stmt(Op{Opcode::TEXPANDS, {acc, float_imm(0.0)}}));
    auto k = matmul_k_loop(nb_, std::get<View>(mm.args[1]), std::get<View>(mm.args[2]), n, ds, acc, ts_.mm_k);
    e.body.insert(e.body.end(), k.begin(), k.end());
    finish_op(e, mm, acc, n);
    for (size_t j = 1; j < g.ops.size(); ++j)
      finish_op(e, *g.ops[j], elementwise(e, *g.ops[j], int(j), n), n);
    nb_.emit(n, std::move(e.body), out);
  }

  // Records an op's result tile; stores it when the value is needed outside the group.
  void finish_op(Emission& e, const Op& op, const View& y, const Nest& m) {
    const View& d = dst(op);
    if (e.g->produced.count(d.buf.get())) {
      e.tile_of[d.buf.get()] = y;
      if (e.internal.count(d.buf.get())) return;
    } else {
      std::string prefix = d.buf->name + "|";
      for (auto it = e.cache.begin(); it != e.cache.end();)  // loads of d's buffer are stale now
        it = it->first.rfind(prefix, 0) == 0 ? e.cache.erase(it) : std::next(it);
    }
    e.body.push_back(op_stmt(Op{Opcode::TSTORE, {sub(d, m.dst_sel(e.ft)), y}}));
  }

  // The tile holding operand i of op: a group tile, or a load of the external window.
  View source(Emission& e, const Op& op, size_t i, DType t, const Nest& m,
              const std::vector<int64_t>& against) {
    const View& v = std::get<View>(op.args[i]);
    auto it = e.tile_of.find(v.buf.get());
    if (e.g->produced.count(v.buf.get()) && it != e.tile_of.end()) {
      if (it->second.buf->dtype == compute_dtype(t)) return it->second;
      View c = nb_.tile("c", t, it->second.buf->shape[0], it->second.buf->shape[1]);
      e.body.push_back(op_stmt(Op{Opcode::TCVT, {c, it->second}}));
      return c;
    }
    // A full-width nest (offset 0 in the last dim) reads the operand's whole last dim, which for a
    // reduction or a matmul's left operand is wider than the op's result.
    Nest ms = m;
    int r = int(against.size());
    auto off = as_int(ms.off[r - 1]);
    if (off && *off == 0) ms.ext[r - 1] = against[r - 1];
    return load(e, sub(v, ms.src_sel(v, against, e.ft)), t);
  }

  View load(Emission& e, const View& v, DType t) {
    std::string k = v.buf->name + "|" + print(v) + "|" + std::string(dtype_name(t));
    auto it = e.cache.find(k);
    if (it != e.cache.end()) return it->second;
    auto s = v.shape();
    int64_t rows = s.size() >= 2 ? s[s.size() - 2] : 1, cols = s.empty() ? 1 : s.back();
    View tl = nb_.tile("x", t, rows, cols);
    Stmt ld = op_stmt(Op{Opcode::TLOAD, {tl, v}});
    // Hoist the load to the outermost loop level it depends on, unless the group writes it.
    int depth = 0;
    for (size_t l = 0; l < e.loop_vars.size(); ++l)
      if (mentions(v, e.loop_vars[l], /*valid=*/true)) depth = int(l) + 1;
    if (!e.g->written.count(v.buf.get()) && depth < int(e.loop_vars.size()))
      nb_.hoist(ld, depth);
    else
      e.body.push_back(ld);
    e.cache[k] = tl;
    return tl;
  }

  View matmul_in_rows(Emission& e, const Op& op, const Nest& m) {
    const View& d = dst(op);
    auto ds = d.shape();
    int r = int(ds.size());
    const View& a = std::get<View>(op.args[1]);
    const View& b = std::get<View>(op.args[2]);
    DType t = compute_dtype(d.buf->dtype);
    int64_t K = a.shape().back();
    auto as = ds;
    as.back() = K;
    View ta = source(e, op, 1, t, m, as);
    auto bs = b.shape();
    int s = int(bs.size());
    std::vector<Sel> sel;
    for (int j = 0; j < s - 2; ++j) {
      int kd = j + r - s;
      sel.push_back((bs[j] == 1 && ds[kd] != 1) ? Sel{int_imm(0), 1, false, false}
                                                : Sel{m.off[kd], 1, false, false});
    }
    sel.push_back(Sel{int_imm(0), bs[s - 2], true, false});
    sel.push_back(Sel{int_imm(0), bs[s - 1], true, false});
    View tb = load(e, sub(b, sel), t);
    View y = nb_.tile("y", t, ta.buf->shape[0], bs[s - 1]);
    e.body.push_back(op_stmt(Op{Opcode::TMATMUL, {y, ta, tb}}));
    return y;
  }

  View elementwise(Emission& e, const Op& op, int j, const Nest& m) {
    const View& d = dst(op);
    auto ds = d.shape();
    int r = int(ds.size());
    int64_t rows = r >= 2 ? m.ext[r - 2] : 1, cols = m.ext[r - 1];
    std::vector<Operand> args;
    for (size_t i = 1; i < op.args.size(); ++i) {
      if (auto x = std::get_if<Expr>(&op.args[i]))
        args.push_back(*x);
      else
        args.push_back(source(e, op, i, operand_tile_dtype(op, i), m, ds));
    }
    DType rt = result_tile_dtype(op);
    auto same_shape = [&](const View& t) { return t.buf->shape == std::vector<int64_t>{rows, cols}; };
    if (op.code == Opcode::TMOV && same_shape(std::get<View>(args[0])) &&
        std::get<View>(args[0]).buf->dtype == rt)
      return std::get<View>(args[0]);
    // Write in place into a source tile whose value dies here (and that no other value shares).
    View y;
    for (size_t i = 1; i < op.args.size() && !y.buf; ++i) {
      auto v = std::get_if<View>(&op.args[i]);
      if (!v || !e.internal.count(v->buf.get())) continue;
      bool dies = e.last_use[v->buf.get()] == j || v->buf == d.buf;  // last read, or updated in place
      if (!dies) continue;
      auto it = e.tile_of.find(v->buf.get());
      if (it == e.tile_of.end() || !same_shape(it->second) || it->second.buf->dtype != rt) continue;
      bool shared = false;
      for (auto& [b, t] : e.tile_of)
        if (b != v->buf.get() && t.buf == it->second.buf && e.last_use[b] > j) shared = true;
      // A copy (TMOV) may alias a loaded window's tile: later ops, and later iterations when the
      // load is hoisted, reread that tile, so it is never overwritten.
      for (auto& [k, t] : e.cache)
        if (t.buf == it->second.buf) shared = true;
      if (!shared) y = it->second;
    }
    if (!y.buf) y = nb_.tile("y", rt, rows, cols);
    if (op.code == Opcode::TMOV) {
      e.body.push_back(op_stmt(Op{Opcode::TMUL, {y, args[0], int_imm(1)}}));  // broadcasting copy
    } else {
      args.insert(args.begin(), y);
      e.body.push_back(op_stmt(Op{op.code, args}));
    }
    return y;
  }
};

}  // namespace

Program fuse(const Program& p, const FusionOptions& options, const TileSizes& sizes) {
  if (options.mode == FusionOptions::Off) return p;
  return Fuser(p, options, sizes).mutate_program(p);
}

}  // namespace pypto::passes
