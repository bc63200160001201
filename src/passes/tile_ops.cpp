// Tiling pass: tensor-level instructions -> loop nests of tile instructions (see tile_ops.h).
#include "passes/tile_ops.h"

#include <algorithm>
#include <functional>

#include "ir/mutator.h"
#include "passes/nest.h"
#include "passes/tile_fused.h"

namespace pypto::passes {
using namespace ir;

namespace {

class Lowerer : public StmtMutator {
 public:
  Lowerer(const Program& p, const TileSizes& ts) : nb_(p), ts_(ts), refs_(fusion::count_refs(p.body)) {}

  // Fusion groups become one nest each (tile_fused.cpp); they need the temporaries declared in
  // their block before them, and drop the allocations of those they keep in registers. A call
  // label (passes/fuse.cpp) is lowered as part of its block, then put back around what it became.
  std::vector<Stmt> mutate_block(const std::vector<Stmt>& in) override {
    std::vector<Stmt> out;
    std::set<const Buffer*> allocs;
    std::set<const Buffer*> dropped;        // the allocations of temporaries fused groups keep in tiles
    std::map<const StmtNode*, Stmt> opens;  // a label's opening marker in out -> the label
    const Stmt close = seq({});             // the closing marker
    std::function<void(const Stmt&)> lower_stmt = [&](const Stmt& s) {
      if (s->kind == StmtKind::Alloc) allocs.insert(s->buffer.get());
      if (fusion::is_group(s)) {
        emit_fused_group(nb_, ts_, refs_, fusion::group_of(*s, allocs), s->body, out, dropped,
                         [this](const Stmt& t, std::vector<Stmt>& o) { mutate_into(t, o); });
      } else if (s->kind == StmtKind::Seq && !s->var.empty()) {
        out.push_back(seq({}));
        opens[out.back().get()] = s;
        for (const Stmt& t : s->body) lower_stmt(t);
        out.push_back(close);
      } else {
        mutate_into(s, out);
      }
    };
    for (const Stmt& s : in) lower_stmt(s);
    drop_allocs(out, dropped);
    if (opens.empty()) return out;
    std::vector<Stmt> labelled;
    std::vector<std::pair<Stmt, size_t>> open;  // the labels open at this point, where they began
    for (Stmt& s : out) {
      auto it = opens.find(s.get());
      if (it != opens.end()) {
        open.push_back({it->second, labelled.size()});
      } else if (s == close) {
        auto [label, from] = open.back();
        open.pop_back();
        Stmt group = seq(std::vector<Stmt>(labelled.begin() + long(from), labelled.end()));
        group->var = label->var;
        labelled.resize(from);
        labelled.push_back(std::move(group));
      } else {
        labelled.push_back(std::move(s));
      }
    }
    return labelled;
  }

 protected:
  // A tensor-level instruction becomes its loop nest; everything else is rebuilt around it.
  void mutate_into(const Stmt& s, std::vector<Stmt>& out) override {
    if (s->kind == StmtKind::OpStmt && is_tensor_level(s->op)) return lower(s->op, out);
    StmtMutator::mutate_into(s, out);
  }
  Stmt mutate_op(const Stmt& s) override { return s; }  // tile level already

 private:
  NestBuilder nb_;
  TileSizes ts_;
  std::map<const Buffer*, int> refs_;

  View tile(const std::string& hint, DType t, int64_t r, int64_t c, Space sp = Space::Vec) {
    return nb_.tile(hint, t, r, c, sp);
  }
  Nest nest(const View& d, const std::vector<int64_t>& ext, const char* hint) {
    return nb_.nest(d, ext, hint);
  }
  void emit(const Nest& n, std::vector<Stmt> body, std::vector<Stmt>& out) {
    nb_.emit(n, std::move(body), out);
  }

  static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
  static bool is_local(const View& v) { return v.buf->space != Space::Global; }

  // Row and column offsets of a selection's tile dims within a local tile.
  static std::pair<Expr, Expr> tile_offsets(const std::vector<Sel>& sel) {
    std::vector<Expr> kept;
    for (auto& s : sel)
      if (s.keep) kept.push_back(s.off);
    while (kept.size() < 2) kept.insert(kept.begin(), int_imm(0));
    return {kept[kept.size() - 2], kept.back()};
  }

  // A local tile operand is used as is, so the nest must be a single tile of its exact shape.
  static void require_one_tile(const Nest& n, const View& v, int64_t rows, int64_t cols) {
    if (!n.loops.empty() || v.buf->shape != std::vector<int64_t>{rows, cols})
      throw Error("internal: local tile %" + v.buf->name + " used in a nest that does not match its shape");
  }

  std::vector<int64_t> elem_ext(const std::vector<int64_t>& shape) const {
    std::vector<int64_t> ext(shape.size(), 1);
    int r = int(shape.size());
    if (r == 0) return ext;
    int64_t tc = std::min(shape[r - 1], ts_.ew_cols);
    ext[r - 1] = tc;
    if (r >= 2) ext[r - 2] = std::max<int64_t>(1, std::min(shape[r - 2], ts_.ew_rows * ts_.ew_cols / tc));
    return ext;
  }

  void lower(const Op& op, std::vector<Stmt>& out) {
    switch (opcode_info(op.code).category) {
      case OpCategory::Fill:
      case OpCategory::Unary:
      case OpCategory::Binary:
      case OpCategory::Compare:
      case OpCategory::Select:
      case OpCategory::Convert:
        return elementwise(op, out);
      case OpCategory::Reduce:
        if (op.code == Opcode::TROWSUM || op.code == Opcode::TROWMAX || op.code == Opcode::TROWMIN)
          return reduce(op, out);
        if (is_arg_reduction(op.code)) return whole_rows(op, out);
        break;
      case OpCategory::Matrix:
        if (op.code == Opcode::TMATMUL || op.code == Opcode::TMATMUL_ACC) return matmul(op, out);
        if (op.code == Opcode::TDWCONV) return dwconv(op, out);
        break;
      case OpCategory::Gather:
        if (op.code == Opcode::TARGSORT || op.code == Opcode::TSCAN) return whole_rows(op, out);
        return indexed_rows(op, out);
      default:
        break;
    }
    throw Error(std::string(opcode_name(op.code)) +
                " is a tile-level instruction: its operands must be local tiles, not global tensors");
  }

  void elementwise(const Op& op, std::vector<Stmt>& out) {
    const View& d = std::get<View>(op.args[0]);
    auto shape = d.shape();
    int r = int(shape.size());
    int ft = std::max(r - 2, 0);
    std::vector<int64_t> ext = elem_ext(shape);
    // A global vector: a tile of as many elements as a 2-D one (elem_rows x elem_cols), not one
    // row of elem_cols: a long vector's loop then takes elem_rows times fewer iterations, each of
    // which pays the call, the prefetch and (streaming) a store fence.
    if (r == 1 && !is_local(d)) ext[0] = std::min(shape[0], ts_.elem_rows * ts_.elem_cols);
    Nest n = nest(d, ext, "e");
    auto dsel = n.dst_sel(ft);
    auto [dr, dc] = tile_shape(dsel, r - ft);
    std::vector<Stmt> body;
    std::vector<Operand> args;
    bool broadcast = false;
    bool local_dst = is_local(d);
    bool insert_dst = local_dst && !(n.loops.empty() && d.buf->shape == std::vector<int64_t>{dr, dc});
    if (op.code == Opcode::TMOV && local_dst && !insert_dst && !is_local(std::get<View>(op.args[1]))) {
      const View& s = std::get<View>(op.args[1]);
      auto sel = n.src_sel(s, shape, ft);
      if (tile_shape(sel, r - ft) == std::make_pair(dr, dc)) {  // load straight into the tile
        emit(n, {op_stmt(Op{Opcode::TLOAD, {View::whole(d.buf), sub(s, sel)}})}, out);
        return;
      }
    }
    for (size_t i = 1; i < op.args.size(); ++i) {
      auto v = std::get_if<View>(&op.args[i]);
      if (v && is_local(*v)) {  // a promoted temporary: compute on it in place
        auto sel = n.src_sel(*v, shape, ft);
        auto [tr, tc] = tile_shape(sel, r - ft);
        broadcast |= (tr != dr || tc != dc);
        bool whole = n.loops.empty() && v->buf->shape == std::vector<int64_t>{tr, tc};
        if (whole || (n.loops.empty() && op.code == Opcode::TMOV && !local_dst)) {
          args.push_back(
              View::whole(v->buf));  // (a larger tile stores its valid region, clamped by the window)
          broadcast = false;
          continue;
        }
        View part = tile("x", v->buf->dtype, tr, tc);  // the window's part of the tile
        auto [r0, c0] = tile_offsets(sel);
        body.push_back(op_stmt(Op{Opcode::TEXTRACT, {part, View::whole(v->buf), r0, c0}}));
        args.push_back(part);
        continue;
      }
      if (!v) {
        Expr e = std::get<Expr>(op.args[i]);
        if (op.code == Opcode::TCI && r >= 1) e = e + n.off[r - 1];  // iota continues across tiles
        args.push_back(e);
        continue;
      }
      auto sel = n.src_sel(*v, shape, ft);
      auto [tr, tc] = tile_shape(sel, r - ft);
      broadcast |= (tr != dr || tc != dc);
      View t_src = tile("x", operand_tile_dtype(op, i), tr, tc);
      body.push_back(op_stmt(Op{Opcode::TLOAD, {t_src, sub(*v, sel)}}));
      args.push_back(t_src);
    }
    View result;
    if (op.code == Opcode::TMOV && !broadcast && !local_dst) {
      result = std::get<View>(args[0]);  // a copy is a load and a store
    } else {
      result = local_dst && !insert_dst ? View::whole(d.buf) : tile("y", result_tile_dtype(op), dr, dc);
      if (op.code == Opcode::TMOV && broadcast) {
        body.push_back(op_stmt(Op{Opcode::TMUL, {result, args[0], int_imm(1)}}));  // broadcasting copy
      } else {
        args.insert(args.begin(), result);
        body.push_back(op_stmt(Op{op.code == Opcode::TMOV ? Opcode::TMOV : op.code, args}));
      }
    }
    if (insert_dst) {
      auto [r0, c0] = tile_offsets(dsel);
      body.push_back(op_stmt(Op{Opcode::TINSERT, {View::whole(d.buf), result, r0, c0}}));
    } else if (!local_dst) {
      body.push_back(op_stmt(Op{Opcode::TSTORE, {sub(d, dsel), result}}));
    }
    emit(n, std::move(body), out);
  }

  static Opcode combine_of(Opcode reduce) {
    return reduce == Opcode::TROWSUM ? Opcode::TADD : reduce == Opcode::TROWMAX ? Opcode::TMAX : Opcode::TMIN;
  }

  // Row reduction over the last dimension of the source; the destination's last dim is 1.
  void reduce(const Op& op, std::vector<Stmt>& out) {
    const View& d = std::get<View>(op.args[0]);
    if (!is_local(d))
      if (auto cr = column_reduction(op)) return reduce_columns(op.code, *cr, out);
    const View& x = std::get<View>(op.args[1]);
    auto xs = x.shape();
    int r = int(xs.size());
    int64_t C = xs[r - 1];
    // Rows up to half the tile budget wide in one block (4096 floats by default): a fused
    // reduction reads them in place (rows.hpp reduce_rows), and blocks of columns made it jump
    // between rows every 4 KiB (4096^2 sum: 2.8 ms in 1024-column blocks, 1.8 in whole rows).
    int64_t tc = std::min(C, std::max(ts_.elem_cols * 2, ts_.elem_rows * ts_.elem_cols / 2));
    std::vector<int64_t> ext(r, 1);
    if (r >= 2) ext[r - 2] = std::max<int64_t>(1, std::min(xs[r - 2], ts_.elem_rows * ts_.elem_cols / tc));
    Nest n = nest(d, ext, "e");  // the destination's last dim is 1: never looped
    int ft = std::max(r - 2, 0);
    DType dt = compute_dtype(d.buf->dtype);
    auto [rows, one] = tile_shape(n.dst_sel(ft), r - ft);
    (void)one;
    View xt = tile("x", dt, rows, tc);
    auto chunk = [&](Expr c0) {  // columns c0 .. c0 + tc of the rows of this iteration
      auto sel = n.dst_sel(ft);
      sel[r - 1] = Sel{c0, tc, true, false};
      if (!is_local(x)) return op_stmt(Op{Opcode::TLOAD, {xt, sub(x, sel)}});
      auto [r0, col] = tile_offsets(sel);
      return op_stmt(Op{Opcode::TEXTRACT, {xt, View::whole(x.buf), r0, col}});
    };
    // A local destination that is exactly this one tile is reduced into directly, so its valid
    // region (run-time state) becomes the rows this iteration reduces; an insert would keep the
    // tile's whole region valid, rows past a ragged edge included.
    bool into_dst = is_local(d) && n.loops.empty() && d.buf->shape == std::vector<int64_t>{rows, 1} &&
                    compute_dtype(d.buf->dtype) == d.buf->dtype;
    View acc = into_dst ? View::whole(d.buf) : tile("acc", dt, rows, 1);
    std::vector<Stmt> body{chunk(int_imm(0)), op_stmt(Op{op.code, {acc, xt}})};
    if (C > tc) {
      View part = tile("part", dt, rows, 1);
      std::string c = nb_.fresh("c");
      std::vector<Stmt> inner{chunk(var(c)), op_stmt(Op{op.code, {part, xt}}),
                              op_stmt(Op{combine_of(op.code), {acc, acc, part}})};
      body.push_back(for_loop(c, int_imm(tc), x.valid_shape()[r - 1], int_imm(tc), std::move(inner)));
    }
    if (into_dst) {
      // (the reduction wrote it)
    } else if (is_local(d)) {
      auto [r0, c0] = tile_offsets(n.dst_sel(ft));
      body.push_back(op_stmt(Op{Opcode::TINSERT, {View::whole(d.buf), acc, r0, c0}}));
    } else {
      body.push_back(op_stmt(Op{Opcode::TSTORE, {sub(d, n.dst_sel(ft)), acc}}));
    }
    emit(n, std::move(body), out);
  }

  // A reduction down a dimension that is not the innermost in memory (column_reduction). Tiles are
  // row-major: tr rows of the reduced dim by tc innermost columns, as wide as whole rows up to
  // 16 KiB (reading narrower row segments, down the rows, is 2-3x slower from DRAM), up to 64 KiB
  // a tile. Each is reduced down its columns (TCOLSUM/MAX/MIN) and combined into a 1 x tc
  // accumulator, stored once. The nest walks the destination's column blocks and its other kept
  // dims one index at a time; when those give fewer than kColumnUnits parallel iterations, the
  // reduced dim is cut into blocks too, each reducing into its row of a partial-results buffer
  // that a second, small column reduction combines.
  static constexpr int64_t kColumnUnits = 16;
  void reduce_columns(Opcode code, const ColumnReduction& cr, std::vector<Stmt>& out) {
    const View &x = cr.src, &d = cr.dst;
    auto xs = x.shape();
    const int q = int(xs.size()), k = cr.axis;
    DType dt = compute_dtype(d.buf->dtype);
    const int64_t bytes = dtype_bytes(dt), M = xs[size_t(k)];
    const int64_t tc = std::min(xs[size_t(q - 1)], std::max<int64_t>(1, (16 << 10) / bytes));
    const int64_t tr = std::max<int64_t>(1, std::min(M, (64 << 10) / (tc * bytes)));
    int64_t units = ceil_div(xs[size_t(q - 1)], tc);
    for (int j = 0; j < q - 1; ++j) units *= j == k ? 1 : xs[size_t(j)];
    auto m_valid = as_int(x.valid_shape()[size_t(k)]);
    int64_t block = M;  // rows of the reduced dim per block
    if (units < kColumnUnits && m_valid && *m_valid == M)
      block =
          ceil_div(
              ceil_div(M, std::min(ceil_div(kColumnUnits, units), ceil_div(M, std::max<int64_t>(tr, 64)))),
              tr) *
          tr;
    const int64_t blocks = ceil_div(M, block);
    // Blocks write rows of `parts` ([blocks, the destination's dims but the reduced one]) or,
    // unblocked, the destination itself; `target` views it with the block dim first.
    View target = d;
    BufferRef parts;
    if (blocks > 1) {
      parts = std::make_shared<Buffer>();
      parts->name = nb_.fresh("parts");
      parts->dtype = dt;
      parts->shape = {blocks};
      for (int j = 0; j < q; ++j)
        if (j != k) parts->shape.push_back(xs[size_t(j)]);
      out.push_back(alloc(parts));
      target = View::whole(parts);
      auto dv = d.valid_shape();
      for (int j = 0, p = 1; j < q; ++j)
        if (j != k) target.valid[size_t(p++)] = dv[size_t(j)];
    } else {
      std::vector<int> dims{d.dims[size_t(k)]};  // the reduced (size-1) dim first
      for (int j = 0; j < q; ++j)
        if (j != k) dims.push_back(d.dims[size_t(j)]);
      target.dims = dims;
    }
    std::vector<int64_t> ext(size_t(q), 1);
    ext[size_t(q - 1)] = tc;
    Nest n = nest(target, ext, "e");
    std::vector<Sel> tsel;  // the 1 x tc row of the target
    for (int j = 0; j < q; ++j) tsel.push_back(Sel{n.off[size_t(j)], n.ext[size_t(j)], j == q - 1, false});
    std::vector<Sel> xsel;  // the source's window but for the reduced dim
    for (int j = 0, p = 1; j < q; ++j) xsel.push_back(j == k ? Sel{} : tsel[size_t(p++)]);
    xsel[size_t(q - 1)].keep = true;
    Expr r_lo = blocks > 1 ? n.off[0] * int_imm(block) : int_imm(0);
    Expr r_hi = x.valid_shape()[size_t(k)];
    if (blocks > 1) r_hi = min(r_hi, r_lo + int_imm(block));
    View xt = tile("x", dt, tr, tc);
    View acc = tile("acc", dt, 1, tc);
    const Opcode col = code == Opcode::TROWSUM   ? Opcode::TCOLSUM
                       : code == Opcode::TROWMAX ? Opcode::TCOLMAX
                                                 : Opcode::TCOLMIN;
    auto rows = [&](Expr r0) {  // rows r0 .. r0 + tr of the reduced dim
      auto sel = xsel;
      sel[size_t(k)] = Sel{r0, tr, true, false};
      return op_stmt(Op{Opcode::TLOAD, {xt, sub(x, sel)}});
    };
    std::vector<Stmt> body{rows(r_lo), op_stmt(Op{col, {acc, xt}})};
    if (std::min(M, block) > tr) {
      View part = tile("part", dt, 1, tc);
      std::string r = nb_.fresh("r");
      std::vector<Stmt> inner{rows(var(r)), op_stmt(Op{col, {part, xt}}),
                              op_stmt(Op{combine_of(code), {acc, acc, part}})};
      body.push_back(for_loop(r, r_lo + int_imm(tr), r_hi, int_imm(tr), std::move(inner)));
    }
    body.push_back(op_stmt(Op{Opcode::TSTORE, {sub(target, tsel), acc}}));
    emit(n, std::move(body), out);
    if (blocks > 1) {  // combine the blocks' partial results: a column reduction of `parts`
      View dst = d;
      std::vector<int> dims{d.dims[size_t(k)]};
      for (int j = 0; j < q; ++j)
        if (j != k) dims.push_back(d.dims[size_t(j)]);
      dst.dims = dims;
      reduce_columns(code, ColumnReduction{target, dst, 0}, out);
    }
  }

  // Tensor-level TGATHER d, src, idx (d[.., r, c] = src[.., idx[r], c]) and TSCATTER(_ADD) d, src,
  // idx (d[.., idx[r], c] (+)= src[.., r, c]): a nest over the gathered (scattered) rows and column
  // tiles; each iteration loads a 1 x R block of indices and moves whole rows with MGATHER /
  // MSCATTER(_ADD) between a tile and the window of every indexable row of the other side.
  void indexed_rows(const Op& op, std::vector<Stmt>& out) {
    const bool gather = op.code == Opcode::TGATHER;
    const View& d = std::get<View>(op.args[0]);
    const View* s = std::get_if<View>(&op.args[1]);
    const View* idx = std::get_if<View>(&op.args[2]);
    if (!s || !idx || is_local(d) || is_local(*s) || is_local(*idx) || idx->rank() != 1 ||
        d.rank() != s->rank())
      throw Error(std::string(opcode_name(op.code)) +
                  " at the tensor level takes global tensors of one rank and a rank-1 index tensor");
    const View& rows_side = gather ? d : *s;  // the side indexed by r (its rows follow idx)
    const View& table = gather ? *s : d;      // the side indexed by idx[r]
    auto shape = rows_side.shape();
    int r = int(shape.size());
    const bool vec = r == 1;  // rank 1: every element is a row (the table window reads as a column)
    const int rd = vec ? 0 : r - 2;
    // Whole rows up to 16 KiB, a tile up to 32 KiB: each indexed row moves as one contiguous copy
    // and a block of rows is stored as one.
    std::vector<int64_t> ext = elem_ext(shape);
    if (!vec) {
      const int64_t bytes = dtype_bytes(compute_dtype(rows_side.buf->dtype));
      ext[size_t(r - 1)] = std::min(shape[size_t(r - 1)], std::max<int64_t>(1, (16 << 10) / bytes));
      ext[size_t(r - 2)] =
          std::max<int64_t>(1, std::min(shape[size_t(r - 2)], (32 << 10) / (ext[size_t(r - 1)] * bytes)));
    }
    Nest n = nest(rows_side, ext, "g");
    auto sel = n.dst_sel(rd);
    auto [tr, tc] = tile_shape(sel, 2);
    const int64_t count = vec ? tc : tr;  // indices per iteration
    DType t_dt = compute_dtype(rows_side.buf->dtype);
    std::vector<Stmt> body;
    View it = tile("idx", idx->buf->dtype, 1, count);
    body.push_back(op_stmt(Op{Opcode::TLOAD, {it, sub(*idx, {Sel{n.off[size_t(rd)], count, true, false}})}}));
    std::vector<Sel> tsel;  // every row of the table, the nest's column tile, leading dims fixed
    for (int k = 0; k < r; ++k)
      tsel.push_back(k < rd    ? Sel{n.off[size_t(k)], 1, false, false}
                     : k == rd ? Sel{int_imm(0), table.shape()[size_t(k)], true, false}
                               : Sel{n.off[size_t(k)], tc, true, false});
    View window = sub(table, tsel);
    View t = tile("rows", t_dt, vec ? count : tr, vec ? 1 : tc);
    View flat = vec ? tile("row", t_dt, 1, count) : t;  // a rank-1 side moves as one 1 x count row
    if (gather) {
      body.push_back(op_stmt(Op{Opcode::MGATHER, {t, window, it}}));
      if (vec) body.push_back(op_stmt(Op{Opcode::TTRANS, {flat, t}}));
      body.push_back(op_stmt(Op{Opcode::TSTORE, {sub(d, sel), flat}}));
    } else {
      body.push_back(op_stmt(Op{Opcode::TLOAD, {flat, sub(*s, sel)}}));
      if (vec) body.push_back(op_stmt(Op{Opcode::TTRANS, {t, flat}}));
      body.push_back(op_stmt(
          Op{op.code == Opcode::TSCATTER ? Opcode::MSCATTER : Opcode::MSCATTER_ADD, {window, t, it}}));
    }
    emit(n, std::move(body), out);
  }

  // TDWCONV on global planes (Builder::depthwise_conv2d's loops give it one plane, or a band of
  // its rows, at a time, sized for a stack tile): each operand loaded whole, the result stored.
  void dwconv(const Op& op, std::vector<Stmt>& out) {
    const View& d = std::get<View>(op.args[0]);
    const View* x = std::get_if<View>(&op.args[1]);
    const View* w = std::get_if<View>(&op.args[2]);
    if (!x || !w || d.rank() != 2 || x->rank() != 2 || w->rank() != 2 || is_local(d) || is_local(*x) ||
        is_local(*w))
      throw Error("TDWCONV at the tensor level takes 2-d global planes");
    const auto ds = d.shape(), xs = x->shape(), ws = w->shape();
    for (int64_t e : {ds[0], ds[1], xs[0], xs[1], ws[0], ws[1]})
      if (e == kDynamicBound) throw Error("TDWCONV at the tensor level needs planes of static shape");
    const DType ct = compute_dtype(d.buf->dtype);
    Nest n = nest(d, ds, "dw");
    View dt = tile("dw_out", ct, ds[0], ds[1]), xt = tile("dw_in", ct, xs[0], xs[1]),
         wt = tile("dw_w", ct, ws[0], ws[1]);
    std::vector<Operand> args{dt, xt, wt};
    args.insert(args.end(), op.args.begin() + 3, op.args.end());
    std::vector<Stmt> body{op_stmt(Op{Opcode::TLOAD, {xt, *x}}), op_stmt(Op{Opcode::TLOAD, {wt, *w}}),
                           op_stmt(Op{Opcode::TDWCONV, std::move(args)}),
                           op_stmt(Op{Opcode::TSTORE, {sub(d, n.dst_sel(0)), dt}})};
    emit(n, std::move(body), out);
  }

  // TARGSORT, TSCAN, TROWARGMAX and TROWARGMIN over the last dimension: blocks of whole rows, each
  // in one tile (an arg-reduction's partial results would need their values to combine). A TARGSORT
  // destination narrower than the source (topk) keeps the first columns of each row's permutation.
  // A scan runs in place on blocks of up to 8 rows (independent chains for the CPU to overlap) that
  // still fit a 64 KiB tile (the CPU backend's largest stack tile).
  void whole_rows(const Op& op, std::vector<Stmt>& out) {
    const View& d = std::get<View>(op.args[0]);
    const View* x = std::get_if<View>(&op.args[1]);
    if (!x || is_local(d) || is_local(*x) || x->rank() != d.rank() || d.rank() == 0)
      throw Error(std::string(opcode_name(op.code)) +
                  " at the tensor level takes global tensors of one rank");
    auto shape = d.shape(), xs = x->shape();
    int r = int(shape.size());
    if (!std::equal(shape.begin(), shape.end() - 1, xs.begin()) || shape.back() > xs.back())
      throw Error(
          std::string(opcode_name(op.code)) +
          " at the tensor level: the destination must have the source's shape but for a narrower last "
          "dimension");
    const bool forward_scan =
        op.code == Opcode::TSCAN && (as_int(std::get<Expr>(op.args[2])).value_or(2) & 2) == 0;
    if (forward_scan && xs.back() > kBlockedScanFrom) return scan_blocks(op, out);  // (a dynamic width too)
    if (xs.back() != kDynamicBound) return whole_row_nest(op, xs.back(), out);
    if (is_arg_reduction(op.code)) return arg_blocks(op, out);
    // A dynamic width: a nest per tile width, behind run-time tests of the width (the narrowest
    // first, so short rows get many rows per tile); the widest branch scans in blocks or, for a
    // sort or a reversed scan, takes rows of up to kMaxDynamicWholeRow (the builder checks that).
    std::vector<int64_t> tiers;
    for (int64_t t : {std::max<int64_t>(1, ts_.elem_cols / 2), ts_.dyn_row_cols(), kBlockedScanFrom})
      if (t < kMaxDynamicWholeRow && (tiers.empty() || t > tiers.back()) &&
          !(forward_scan && t == kBlockedScanFrom))
        tiers.push_back(t);
    std::vector<Stmt> chain;
    if (forward_scan)
      scan_blocks(op, chain);
    else
      whole_row_nest(op, kMaxDynamicWholeRow, chain);
    for (auto t = tiers.rbegin(); t != tiers.rend(); ++t) {
      std::vector<Stmt> narrow;
      whole_row_nest(op, *t, narrow);
      chain = {if_then(cmp(ExprOp::Le, x->valid_shape().back(), int_imm(*t)), std::move(narrow),
                       std::move(chain))};
    }
    out.insert(out.end(), chain.begin(), chain.end());
  }

  // A forward TSCAN in blocks of columns: the first block scanned as it is, each later one's first
  // column given the running value of the blocks before it (added, multiplied, or its maximum /
  // minimum taken, the running value first) before the block is scanned, so every element is
  // accumulated in the order of one scan over the whole row: the same bits. (No start value: a
  // narrow integer tile could not hold -inf's saturation.)
  static constexpr int64_t kBlockedScanFrom = 1 << 16;  // wider static rows too: no huge tiles
  void scan_blocks(const Op& op, std::vector<Stmt>& out) {
    const View& d = std::get<View>(op.args[0]);
    const View& x = std::get<View>(op.args[1]);
    auto shape = d.shape();
    const int r = int(shape.size()), ft = std::max(r - 2, 0);
    const int64_t kind = *as_int(std::get<Expr>(op.args[2]));
    const bool extreme = (kind & 4) != 0, second = (kind & 1) != 0;  // max / min; product / min
    const Opcode combine =
        extreme ? (second ? Opcode::TMIN : Opcode::TMAX) : (second ? Opcode::TMUL : Opcode::TADD);
    const DType ct = compute_dtype(x.buf->dtype);
    const int64_t tc = ts_.dyn_row_cols();
    std::vector<int64_t> ext(size_t(r), 1);
    ext[size_t(r - 1)] = shape.back();  // the nest walks the rows; the column blocks are a loop inside
    if (r >= 2)
      ext[size_t(r - 2)] = std::max<int64_t>(
          1, std::min(shape[size_t(r - 2)], std::min<int64_t>(8, (64 << 10) / (tc * dtype_bytes(ct)))));
    Nest n = nest(d, ext, "s");
    auto [rows, one] = tile_shape(n.dst_sel(ft), r - ft);
    (void)one;
    View xt = tile("x", ct, rows, tc), carry = tile("carry", ct, rows, 1), first = tile("first", ct, rows, 1);
    const std::string c = nb_.fresh("c");
    auto window = [&](const View& v, const Expr& c0) {
      auto sel = n.dst_sel(ft);
      sel[size_t(r - 1)] = Sel{c0, tc, true, false};
      return sub(v, sel);
    };
    const Expr width = x.valid_shape().back();
    auto ins = [](Opcode code, std::vector<Operand> args) { return op_stmt(Op{code, std::move(args)}); };
    auto last_column = [&](const Expr& c0) {  // of the block at c0 (0 for an empty row)
      return ins(Opcode::TEXTRACT,
                 {carry, xt, int_imm(0), max(min(int_imm(tc), width - c0) - int_imm(1), int_imm(0))});
    };
    std::vector<Stmt> block{
        ins(Opcode::TLOAD, {xt, window(x, var(c))}),
        ins(Opcode::TEXTRACT, {first, xt, int_imm(0), int_imm(0)}),
        ins(combine, {first, carry, first}),  // (the running value first: TMAX's rule at a NaN)
        ins(Opcode::TINSERT, {xt, first, int_imm(0), int_imm(0)}),
        ins(Opcode::TSCAN, {xt, xt, int_imm(kind)}),
        ins(Opcode::TSTORE, {window(d, var(c)), xt}),
        last_column(var(c))};
    std::vector<Stmt> body{ins(Opcode::TLOAD, {xt, window(x, int_imm(0))}),
                           ins(Opcode::TSCAN, {xt, xt, int_imm(kind)}),
                           ins(Opcode::TSTORE, {window(d, int_imm(0)), xt}), last_column(int_imm(0)),
                           for_loop(c, int_imm(tc), width, int_imm(tc), std::move(block))};
    emit(n, std::move(body), out);
  }

  // whole_rows with rows `width` wide (static, or the tile width for a dynamic one).
  void whole_row_nest(const Op& op, int64_t width, std::vector<Stmt>& out) {
    const View& d = std::get<View>(op.args[0]);
    const View* x = std::get_if<View>(&op.args[1]);
    auto shape = d.shape();
    const int r = int(shape.size());
    if (shape.back() == kDynamicBound) shape.back() = width;
    const bool scan = op.code == Opcode::TSCAN;
    const int64_t scan_rows = std::min<int64_t>(
        8, (64 << 10) / std::max<int64_t>(1, width * dtype_bytes(compute_dtype(x->buf->dtype))));
    std::vector<int64_t> ext(size_t(r), 1);
    ext[size_t(r - 1)] = shape.back();
    if (r >= 2)
      ext[size_t(r - 2)] = std::max<int64_t>(
          1, std::min(shape[size_t(r - 2)],
                      std::max<int64_t>(scan ? scan_rows : 1, ts_.elem_rows * ts_.elem_cols / width)));
    Nest n = nest(d, ext, "s");
    auto sel = n.dst_sel(std::max(r - 2, 0));
    auto xsel = sel;
    xsel.back() = Sel{int_imm(0), width, sel.back().keep, false};
    auto [tr, tc] = tile_shape(sel, 2);
    View xt = tile("x", compute_dtype(x->buf->dtype), tr, tile_shape(xsel, 2).second);
    View it = scan ? xt : tile("order", d.buf->dtype, tr, tc);
    std::vector<Operand> args{it, xt};
    args.insert(args.end(), op.args.begin() + 2, op.args.end());  // TARGSORT's order, TSCAN's kind
    emit(n,
         {op_stmt(Op{Opcode::TLOAD, {xt, sub(*x, xsel)}}), op_stmt(Op{op.code, std::move(args)}),
          op_stmt(Op{Opcode::TSTORE, {sub(d, sel), it}})},
         out);
  }

  // TROWARGMAX / TROWARGMIN along a dynamic last dimension, in blocks of columns: each block's
  // first extreme (the instruction) and extreme (TROWMAX / TROWMIN) replace the running ones where
  // the block wins: its extreme strictly beyond the running one, or NaN, while the running one is
  // not NaN. That is the instruction's rule over the whole row (the first extreme; the first NaN).
  void arg_blocks(const Op& op, std::vector<Stmt>& out) {
    const View& d = std::get<View>(op.args[0]);
    const View& x = std::get<View>(op.args[1]);
    auto xs = x.shape();
    const int r = int(xs.size()), ft = std::max(r - 2, 0);
    const int64_t tc = std::max(ts_.elem_cols * 2, ts_.elem_rows * ts_.elem_cols / 2);
    std::vector<int64_t> ext(size_t(r), 1);
    if (r >= 2)
      ext[size_t(r - 2)] =
          std::max<int64_t>(1, std::min(xs[size_t(r - 2)], ts_.elem_rows * ts_.elem_cols / tc));
    Nest n = nest(d, ext, "e");
    auto [rows, one] = tile_shape(n.dst_sel(ft), r - ft);
    (void)one;
    const DType vt = compute_dtype(x.buf->dtype), it = d.buf->dtype;
    const bool max = op.code == Opcode::TROWARGMAX;
    const Opcode extreme = max ? Opcode::TROWMAX : Opcode::TROWMIN;
    View xt = tile("x", vt, rows, tc), at = tile("at", it, rows, 1), val = tile("val", vt, rows, 1);
    View part_at = tile("part_at", it, rows, 1), part = tile("part", vt, rows, 1);
    View win = tile("win", DType::Bool, rows, 1), flag = tile("flag", DType::Bool, rows, 1);
    auto load = [&](Expr c0) {  // columns c0 .. c0 + tc of the rows of this iteration
      auto sel = n.dst_sel(ft);
      sel[size_t(r - 1)] = Sel{c0, tc, true, false};
      return op_stmt(Op{Opcode::TLOAD, {xt, sub(x, sel)}});
    };
    auto ins = [](Opcode c, std::vector<Operand> args) { return op_stmt(Op{c, std::move(args)}); };
    std::vector<Stmt> body{load(int_imm(0)), ins(op.code, {at, xt}), ins(extreme, {val, xt})};
    const std::string c = nb_.fresh("c");
    std::vector<Stmt> block{load(var(c)),
                            ins(op.code, {part_at, xt}),
                            ins(extreme, {part, xt}),
                            ins(Opcode::TADD, {part_at, part_at, var(c)}),
                            ins(max ? Opcode::TCMP_GT : Opcode::TCMP_LT, {win, part, val}),
                            ins(Opcode::TCMP_NE, {flag, part, part}),  // the block holds a NaN
                            ins(Opcode::TOR, {win, win, flag}),
                            ins(Opcode::TCMP_EQ, {flag, val, val}),  // the running extreme is no NaN
                            ins(Opcode::TAND, {win, win, flag}),
                            ins(Opcode::TSEL, {at, win, part_at, at}),
                            ins(Opcode::TSEL, {val, win, part, val})};
    body.push_back(for_loop(c, int_imm(tc), x.valid_shape()[size_t(r - 1)], int_imm(tc), std::move(block)));
    body.push_back(op_stmt(Op{Opcode::TSTORE, {sub(d, n.dst_sel(ft)), at}}));
    emit(n, std::move(body), out);
  }

  void matmul(const Op& op, std::vector<Stmt>& out) {
    if (memory_matmul(op, ts_)) {
      Opcode c = op.code == Opcode::TMATMUL ? Opcode::MMATMUL : Opcode::MMATMUL_ACC;
      out.push_back(op_stmt(Op{c, {op.args[0], op.args[1], op.args[2]}}));
      return;
    }
    const View& d = std::get<View>(op.args[0]);
    auto ds = d.shape();
    int r = int(ds.size());
    const View &a = std::get<View>(op.args[1]), &b = std::get<View>(op.args[2]);
    const MatmulTile mt = matmul_tile(ts_, a.buf->dtype, b.buf->dtype, ds[r - 2]);
    std::vector<int64_t> ext(r, 1);
    ext[r - 2] = mt.m;
    ext[r - 1] = mt.n;
    Nest n = nest(d, ext, "m");
    bool local_dst = is_local(d);
    if (local_dst) require_one_tile(n, d, n.ext[r - 2], n.ext[r - 1]);
    View acc =
        local_dst ? View::whole(d.buf) : tile("acc", d.buf->dtype, n.ext[r - 2], n.ext[r - 1], Space::Acc);
    auto dsel = n.dst_sel(r - 2);
    std::vector<Stmt> body;
    if (op.code == Opcode::TMATMUL)
      body.push_back(op_stmt(Op{Opcode::TEXPANDS, {acc, float_imm(0.0)}}));
    else if (!local_dst)
      body.push_back(op_stmt(Op{Opcode::TLOAD, {acc, sub(d, dsel)}}));
    auto k = matmul_k_loop(nb_, a, b, n, ds, acc, mt.k);
    // A product in one K step writes its tile: no zero fill, and no read of the accumulator
    // (K = 64 in q @ k^T: the fill and the read cost as much as the multiply-adds).
    if (op.code == Opcode::TMATMUL && !k.empty() && k.back()->kind == StmtKind::OpStmt &&
        k.back()->op.code == Opcode::TMATMUL_ACC) {
      body.clear();
      Op single = k.back()->op;
      single.code = Opcode::TMATMUL;
      k.back() = op_stmt(single);
    }
    // One K step and loops over both row and column blocks: columns outer, so that the right
    // operand's tile is loaded once per column block, not once per row block (a transposed
    // operand, such as K in q @ k^T, costs a strided load each time).
    int L = int(n.loops.size());
    if (L >= 2 && r >= 2 && !as_int(n.off[r - 2]) && !as_int(n.off[r - 1]) && a.buf != b.buf &&
        b.buf->space == Space::Global && k.size() == 3) {
      std::swap(n.loops[L - 2], n.loops[L - 1]);
      nb_.hoist(k[1], L - 1);
      k.erase(k.begin() + 1);
    }
    body.insert(body.end(), k.begin(), k.end());
    if (!local_dst) body.push_back(op_stmt(Op{Opcode::TSTORE, {sub(d, dsel), acc}}));
    emit(n, std::move(body), out);
  }
};

}  // namespace

bool memory_matmul(const Op& op, const TileSizes& sizes) {
  if (!sizes.memory_matmul || (op.code != Opcode::TMATMUL && op.code != Opcode::TMATMUL_ACC)) return false;
  const View *d = std::get_if<View>(&op.args[0]), *a = std::get_if<View>(&op.args[1]),
             *b = std::get_if<View>(&op.args[2]);
  if (!d || !a || !b) return false;
  for (const View* v : {d, a, b})
    if (v->buf->space != Space::Global || v->rank() != 2) return false;
  const DType dt = d->buf->dtype, at = a->buf->dtype, bt = b->buf->dtype;
  const bool f32 = dt == DType::F32 && at == DType::F32 && bt == DType::F32;
  // bf16 operands into an f32 or bf16 result: the packed bf16 product (pto/cpu/matmul_bf16.hpp).
  const bool bf16 = at == DType::BF16 && bt == DType::BF16 && (dt == DType::F32 || dt == DType::BF16);
  // int8 operands into an int32 result: the packed int8 product (pto/cpu/matmul_int8.hpp).
  const bool i8 = at == DType::I8 && bt == DType::I8 && dt == DType::I32;
  if (!f32 && !bf16 && !i8) return false;
  if (d->buf == a->buf || d->buf == b->buf) return false;
  auto ds = d->shape();
  const int64_t K = a->shape().back();
  // In double: a dynamic dimension's static bound is 2^31 - 1, whose cube overflows int64.
  // Any K for f32: B read in place or packed, C in registers across a sum's terms (a convolution's
  // taps over 3 input channels: K = 3 each, 27 in all; tile loops ran them 6x slower than torch).
  // A few rows against a transposed B (x @ W.T; one decoding step of a language model): dot
  // products of contiguous rows (pto/cpu/gemm_dot.hpp), where tiles transposed all of W per call.
  const int rb = b->buf->rank();
  const bool b_transposed = b->dims[0] == rb - 1 && b->step[size_t(rb - 1)] == 1;
  if (f32 && ds[0] >= 1 && ds[0] <= 4 && b_transposed && ds[1] >= 32 && K >= 32 &&
      double(ds[1]) * double(K) >= double(1 << 14))
    return true;
  return ds[0] >= 32 && ds[1] >= 32 && K >= (f32 ? 1 : 32) &&
         double(ds[0]) * double(ds[1]) * double(K) >= double(1 << 21);
}

MatmulTile matmul_tile(const TileSizes& sizes, DType a, DType b, int64_t rows) {
  MatmulTile t{sizes.mm_m, sizes.mm_n, sizes.mm_k};
  const int bytes = std::max(dtype_bytes(a), dtype_bytes(b));
  if (!sizes.narrow_operand_tiles || bytes > 2) return t;
  // A dynamic row count (bounded by 2^31 - 1 only) may be small at run time: its tiles keep mm_m
  // rows, so that they still split between the threads.
  const int64_t most = rows >= (int64_t(1) << 31) - 1 ? t.m : (bytes == 1 ? 4 : 2) * sizes.mm_m;
  while (t.m * 2 <= most && double(rows) >= double(t.m * 2) * 2.0 * std::max(sizes.cores, 1)) t.m *= 2;
  if (bytes == 1) t.k *= 2;
  return t;
}

Program tile_ops(const Program& p, const TileSizes& sizes) { return Lowerer(p, sizes).mutate_program(p); }

}  // namespace pypto::passes
