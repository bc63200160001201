// Fused nests (see tile_fused.h): the emission half of fusion, run by tile_ops.
#include "passes/tile_fused.h"

#include <algorithm>

#include "ir/printer.h"

namespace pypto::passes {
using namespace ir;
using namespace fusion;

namespace {

class FusedEmitter {
 public:
  FusedEmitter(NestBuilder& nb, const TileSizes& ts, const std::map<const Buffer*, int>& refs)
      : nb_(nb), ts_(ts), refs_(refs) {}

  // A static width; a dynamic one (the bound) is the fixed tile width of a guarded row group.
  int64_t cap(int64_t w) const { return w == kDynamicBound && tier_ > 0 ? tier_ : w; }

  struct Emission {
    const Group* g;
    std::set<const Buffer*> internal;
    std::map<const Buffer*, int> last_use;
    std::map<const Buffer*, View> tile_of;
    std::map<std::string, View> cache;
    std::vector<Stmt> body;
    std::vector<std::string> loop_vars;
    std::set<const Buffer*> hoisted;  // tiles that hoisted loads write
    int ft = 0;                       // first tile dim
  };

  // Whether a row group's instructions all have the first one's shape (tiled along the row).
  static bool col_tiled(const Group& g) {
    auto s0 = dst(*g.ops[0]).shape();
    for (auto* op : g.ops)
      if (kind_of(op->code) != Kind::Elementwise || dst(*op).shape() != s0) return false;
    return true;
  }

  void emit_group(const Group& g, const std::vector<Stmt>& in, std::vector<Stmt>& out,
                  std::set<const Buffer*>& dropped, const LowerUnfused& unfused) {
    Emission e;
    e.g = &g;
    tier_ = 0;
    const bool guarded = !g.epilogue && g.width && !col_tiled(g);
    std::map<const Buffer*, int> mine;
    for (size_t j = 0; j < g.ops.size(); ++j)
      for (size_t i = 0; i < g.ops[j]->args.size(); ++i)
        if (auto v = std::get_if<View>(&g.ops[j]->args[i])) {
          mine[v->buf.get()]++;
          if (i > 0) e.last_use[v->buf.get()] = int(j);
        }
    for (auto* b : g.produced)
      if (refs_.count(b) && refs_.at(b) == mine[b]) e.internal.insert(b);
    for (const Op* op : g.ops)  // (a column sum's destination is written after the nest)
      if (column_reduction(*op)) e.internal.erase(dst(*op).buf.get());
    // Internal temps need no memory: their allocations are dropped, those among `out` by the
    // caller (a guarded group's fallback declares them again); the others stay, before the nest.
    std::set<const Buffer*> declared_in_group;
    for (const Stmt& s : in)
      if (s->kind == StmtKind::Alloc) {
        declared_in_group.insert(s->buffer.get());
        if (!e.internal.count(s->buffer.get())) out.push_back(s);
      }
    std::vector<Stmt> fallback;
    for (const Op* op : g.ops)
      for (const auto& a : op->args)
        if (auto v = std::get_if<View>(&a)) {
          const Buffer* b = v->buf.get();
          if (e.internal.count(b) && !declared_in_group.count(b) && dropped.insert(b).second)
            fallback.push_back(alloc(v->buf));
        }
    if (g.epilogue) return emit_epilogue(e, out);
    unfused_ = &unfused;
    if (!guarded) return emit_rows(e, out);
    for (const Stmt& s : in)
      if (s->kind != StmtKind::Alloc || e.internal.count(s->buffer.get())) unfused(s, fallback);
    bool with_matmul = false;
    for (auto* op : g.ops) with_matmul |= kind_of(op->code) == Kind::Matmul;
    auto tiers = ts_.dyn_row_tiers(with_matmul);
    std::vector<Stmt> chain = std::move(fallback);  // built from the widest tier inwards
    for (auto t = tiers.rbegin(); t != tiers.rend(); ++t) {
      Emission et = e;
      tier_ = *t;
      std::vector<Stmt> fused;
      emit_rows(et, fused);
      const bool widest = t == tiers.rbegin();
      chain = {if_then(cmp(ExprOp::Le, g.width, int_imm(*t)), std::move(fused), std::move(chain))};
      if (widest) chain[0]->var = kWideRowsElse;  // its else: rows wider than every tile
    }
    tier_ = 0;
    out.insert(out.end(), chain.begin(), chain.end());
  }

  static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

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
    bool col_tiled = FusedEmitter::col_tiled(g), has_mm = false;
    int64_t width = 1;
    for (auto* op : g.ops) {
      has_mm |= kind_of(op->code) == Kind::Matmul;
      for (auto& a : op->args)
        if (auto v = std::get_if<View>(&a))
          if (v->rank() > 0) width = std::max(width, cap(v->shape().back()));
    }
    std::vector<int64_t> ext(r, 1);
    ext[r - 1] = col_tiled ? std::min(s0[r - 1], ts_.ew_cols) : s0[r - 1];
    if (r >= 2) {
      int64_t budget = has_mm      ? 64 * 1024
                       : col_tiled ? ts_.ew_rows * ts_.ew_cols
                                   : ts_.elem_rows * ts_.elem_cols;
      // Rows this wide (f32 and narrower) stream through fused row calls (pto/cpu/rows.hpp) from
      // memory: the tile bounds how many rows one task takes, and rows of 4 instead of 2 at 4096
      // ran the bench's layer / RMS norm 5-8% faster (in one process; softmax 1%).
      if (!has_mm && !col_tiled && width >= 2048 && dtype_bytes(d0.buf->dtype) <= 4) budget *= 2;
      int64_t w = col_tiled ? ext[r - 1] : width;
      ext[r - 2] = std::min(s0[r - 2], floor_pow2(std::max<int64_t>(1, budget / w)));
    }
    Nest n = nb_.nest(d0, ext, "f");
    n.ext[r - 1] = cap(n.ext[r - 1]);  // a guarded group's rows: one tile, valid to the width
    ColumnSums cs;
    if (g.column_sums) cs = chunk_rows(n, s0[0], d0.valid_shape()[0]);
    for (auto& l : n.loops) e.loop_vars.push_back(l.var);
    if (g.column_sums) e.loop_vars = {cs.chunk, cs.row};
    for (size_t j = 0; j < g.ops.size(); ++j) {
      const Op& op = *g.ops[j];
      Nest m = n;
      if (!col_tiled) {
        m.off[r - 1] = int_imm(0);
        m.ext[r - 1] = cap(dst(op).shape()[r - 1]);
      }
      if (auto cr = column_reduction(op)) {
        column_sum(e, cs, op, *cr, m);
        continue;
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
    if (!g.column_sums) return nb_.emit(n, std::move(e.body), out);
    // The chunk loop (parallel): zero the sums, walk the chunk's row blocks, store the sums. The
    // row blocks' tiles are the block loop's own (row_fusion matches only tiles of its body).
    std::vector<Stmt> rows =
        nb_.take_allocs([&](const Buffer& b) { return !cs.sums.count(&b) && !e.hoisted.count(&b); });
    rows.insert(rows.end(), e.body.begin(), e.body.end());
    std::vector<Stmt> body = std::move(cs.init);
    body.push_back(for_loop(cs.row, int_imm(0),
                            min(int_imm(cs.block), cs.rows_valid - var(cs.chunk) * int_imm(cs.block)),
                            int_imm(cs.step), std::move(rows)));
    body.insert(body.end(), cs.stores.begin(), cs.stores.end());
    Nest chunks;
    chunks.loops = {Loop{cs.chunk, int_imm(cs.chunks), 1}};
    out.insert(out.end(), cs.allocs.begin(), cs.allocs.end());
    nb_.emit(chunks, std::move(body), out);
    for (auto& [op, parts] : cs.parts) {  // each chunk's sums, summed down: a small column sum
      View src = View::whole(parts);
      src.dims = {1, 0};
      (*unfused_)(op_stmt(Op{Opcode::TROWSUM, {dst(*op), src}}), out);
    }
  }

  // The row loop of a group with column sums, cut into chunks: `chunks` parallel iterations of
  // `block` rows each, walked serially `step` rows at a time, each chunk summing its rows into
  // its row of a partial-sums buffer per column sum (a second, small column sum combines them).
  static constexpr int64_t kColumnChunks = 16;
  struct ColumnSums {
    std::string chunk, row;
    int64_t block = 1, step = 1, chunks = 1;
    Expr rows_valid;
    std::vector<Stmt> allocs, init, stores;
    std::set<const Buffer*> sums;  // the accumulators and their per-block parts
    std::vector<std::pair<const Op*, BufferRef>> parts;
  };

  ColumnSums chunk_rows(Nest& n, int64_t rows, const Expr& rows_valid) {
    // (fuse admits column sums only into rank-2 groups as wide as their rows: the one loop, if
    // any, walks the rows)
    if (n.loops.size() > 1 || n.off.size() != 2)
      throw Error("internal: column sums in a nest that is not of rows");
    ColumnSums cs;
    cs.chunk = nb_.fresh("fc");
    cs.row = nb_.fresh("fr");
    cs.step = n.ext[0];
    cs.rows_valid = rows_valid;
    const int64_t blocks = ceil_div(rows, cs.step);
    cs.block = ceil_div(blocks, std::min(kColumnChunks, blocks)) * cs.step;
    cs.chunks = ceil_div(rows, cs.block);
    n.loops.clear();
    n.off[0] = var(cs.chunk) * int_imm(cs.block) + var(cs.row);
    return cs;
  }

  void column_sum(Emission& e, ColumnSums& cs, const Op& op, const ColumnReduction& cr, const Nest& m) {
    DType dt = compute_dtype(dst(op).buf->dtype);
    const int64_t cols = cr.src.shape()[1];
    Nest mc = m;
    mc.off[1] = int_imm(0);
    mc.ext[1] = cols;
    View x;
    auto it = e.tile_of.find(cr.src.buf.get());
    if (e.g->produced.count(cr.src.buf.get()) && it != e.tile_of.end())
      x = it->second;
    else
      x = load(e, sub(cr.src, mc.dst_sel(0)), dt);
    if (x.buf->dtype != dt) {
      View c = nb_.tile("c", dt, x.buf->shape[0], x.buf->shape[1]);
      e.body.push_back(op_stmt(Op{Opcode::TCVT, {c, x}}));
      x = c;
    }
    View acc = nb_.tile("acc", dt, 1, cols), part = nb_.tile("part", dt, 1, cols);
    cs.sums.insert({acc.buf.get(), part.buf.get()});
    cs.init.push_back(op_stmt(Op{Opcode::TEXPANDS, {acc, float_imm(0.0)}}));
    e.body.push_back(op_stmt(Op{Opcode::TCOLSUM, {part, x}}));
    e.body.push_back(op_stmt(Op{Opcode::TADD, {acc, acc, part}}));
    auto parts = std::make_shared<Buffer>();
    parts->name = nb_.fresh("parts");
    parts->dtype = dt;
    parts->shape = {cs.chunks, cols};
    cs.allocs.push_back(alloc(parts));
    View row =
        sub(View::whole(parts), {Sel{var(cs.chunk), 1, false, false}, Sel{int_imm(0), cols, true, false}});
    cs.stores.push_back(op_stmt(Op{Opcode::TSTORE, {row, acc}}));
    cs.parts.push_back({&op, parts});
  }

  void emit_epilogue(Emission& e, std::vector<Stmt>& out) {
    const Group& g = *e.g;
    const Op& mm = *g.ops[0];
    const View& d = dst(mm);
    auto ds = d.shape();
    int r = int(ds.size());
    e.ft = r - 2;
    const View &a = std::get<View>(mm.args[1]), &b = std::get<View>(mm.args[2]);
    const MatmulTile mt = matmul_tile(ts_, a.buf->dtype, b.buf->dtype, ds[r - 2]);
    std::vector<int64_t> ext(r, 1);
    ext[r - 2] = mt.m;
    ext[r - 1] = mt.n;
    Nest n = nb_.nest(d, ext, "m");
    for (auto& l : n.loops) e.loop_vars.push_back(l.var);
    View acc = nb_.tile("acc", d.buf->dtype, n.ext[r - 2], n.ext[r - 1], Space::Acc);
    e.body.push_back(op_stmt(Op{Opcode::TEXPANDS, {acc, float_imm(0.0)}}));
    auto k = matmul_k_loop(nb_, a, b, n, ds, acc, mt.k);
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
    if (off && *off == 0) ms.ext[r - 1] = cap(against[r - 1]);
    return load(e, sub(v, ms.src_sel(v, against, e.ft)), t);
  }

  View load(Emission& e, const View& v, DType t) {
    std::string k = v.buf->name + "|" + print(v) + "|" + std::string(dtype_name(t));
    auto it = e.cache.find(k);
    if (it != e.cache.end()) return it->second;
    auto s = v.shape();
    int64_t rows = s.size() >= 2 ? s[s.size() - 2] : 1, cols = s.empty() ? 1 : s.back();
    // bf16 is asked for only by matmul operands (matmul_operand_dtype), kept bf16 in a Mat tile.
    View tl = nb_.tile("x", t, rows, cols, t == DType::BF16 ? Space::Mat : Space::Vec);
    Stmt ld = op_stmt(Op{Opcode::TLOAD, {tl, v}});
    // Hoist the load to the outermost loop level it depends on, unless the group writes it.
    int depth = 0;
    for (size_t l = 0; l < e.loop_vars.size(); ++l)
      if (mentions(v, e.loop_vars[l], /*valid=*/true)) depth = int(l) + 1;
    if (!e.g->written.count(v.buf.get()) && depth < int(e.loop_vars.size())) {
      nb_.hoist(ld, depth);
      e.hoisted.insert(tl.buf.get());
    } else {
      e.body.push_back(ld);
    }
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
    const DType ot = matmul_operand_dtype(a.buf->dtype, b.buf->dtype, t);
    int64_t K = a.shape().back();
    auto as = ds;
    as.back() = K;
    View ta = source(e, op, 1, ot, m, as);
    if (ta.buf->dtype != ot) {  // a group tile computed in f32: rounded to its tensor's bf16
      View c = nb_.tile("c", ot, ta.buf->shape[0], ta.buf->shape[1], Space::Mat);
      e.body.push_back(op_stmt(Op{Opcode::TCVT, {c, ta}}));
      ta = c;
    }
    auto bs = b.shape();
    int s = int(bs.size());
    std::vector<Sel> sel;
    for (int j = 0; j < s - 2; ++j) {
      int kd = j + r - s;
      sel.push_back((bs[j] == 1 && ds[kd] != 1) ? Sel{int_imm(0), 1, false, false}
                                                : Sel{m.off[kd], 1, false, false});
    }
    sel.push_back(Sel{int_imm(0), cap(bs[s - 2]), true, false});
    sel.push_back(Sel{int_imm(0), cap(bs[s - 1]), true, false});
    View tb = load(e, sub(b, sel), ot);
    View y = nb_.tile("y", t, ta.buf->shape[0], cap(bs[s - 1]));
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

 private:
  NestBuilder& nb_;
  const TileSizes& ts_;
  const std::map<const Buffer*, int>& refs_;
  int64_t tier_ = 0;  // the tile width of the guarded row group being emitted (0: not guarded)
  const LowerUnfused* unfused_ = nullptr;
};

}  // namespace

void emit_fused_group(NestBuilder& nb, const TileSizes& ts, const std::map<const Buffer*, int>& refs,
                      const Group& g, const std::vector<Stmt>& in, std::vector<Stmt>& out,
                      std::set<const Buffer*>& dropped, const LowerUnfused& unfused) {
  FusedEmitter(nb, ts, refs).emit_group(g, in, out, dropped, unfused);
}

void drop_allocs(std::vector<Stmt>& block, const std::set<const Buffer*>& dropped) {
  if (dropped.empty()) return;
  auto is_dropped = [&](const Stmt& s) {
    return s->kind == StmtKind::Alloc && dropped.count(s->buffer.get());
  };
  block.erase(std::remove_if(block.begin(), block.end(), is_dropped), block.end());
}

}  // namespace pypto::passes
