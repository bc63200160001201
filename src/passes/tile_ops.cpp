// Tiling pass: tensor-level instructions -> loop nests of tile instructions (see tile_ops.h).
#include "passes/tile_ops.h"

#include <algorithm>

#include "passes/pass_util.h"

namespace pypto::passes {
using namespace ir;

namespace {

bool is_tensor_level(const Op& op) {
  auto cat = opcode_info(op.code).category;
  if (cat == OpCategory::Memory || cat == OpCategory::Sync) return false;
  for (auto& a : op.args)
    if (auto v = std::get_if<View>(&a))
      if (v->buf->space == Space::Global) return true;
  return false;
}

// How one view dimension is selected in an iteration of a nest.
struct Sel {
  Expr off;
  int64_t size;
  bool keep;      // a tile dimension (kept) or a leading one (indexed, dropped)
  bool clamp0;    // the source may be smaller than the destination: clamp the valid extent at 0
};

View sub(const View& v, const std::vector<Sel>& sel) {
  View out = v;
  std::vector<int> dims;
  for (size_t p = 0; p < sel.size(); ++p) {
    int bd = v.dims[p];
    const Sel& s = sel[p];
    out.offset[bd] = v.offset[bd] + s.off * int_imm(v.step[bd]);
    out.size[bd] = s.size;
    if (s.keep) {
      Expr ext = min(int_imm(s.size), v.valid[bd] - s.off);
      out.valid[bd] = s.clamp0 ? max(ext, int_imm(0)) : ext;
      dims.push_back(bd);
    } else {
      out.valid[bd] = int_imm(1);
    }
  }
  out.dims = dims;
  return out;
}

struct Loop {
  std::string var;
  Expr hi;
  int64_t step;
};

// Loops over a destination's dimensions, each dimension advanced by a tile extent.
struct Nest {
  std::vector<Expr> off;
  std::vector<int64_t> ext;
  std::vector<Loop> loops;  // outer to inner
};

class Lowerer {
 public:
  Lowerer(const Program& p, const TileSizes& ts) : names_(p), ts_(ts) {}

  std::vector<Stmt> block(const std::vector<Stmt>& in) {
    std::vector<Stmt> out;
    for (auto& s : in) {
      if (s->kind == StmtKind::OpStmt && is_tensor_level(s->op)) {
        lower(s->op, out);
        continue;
      }
      if (s->kind == StmtKind::For || s->kind == StmtKind::If) {
        auto n = std::make_shared<StmtNode>(*s);
        n->body = block(s->body);
        n->orelse = block(s->orelse);
        out.push_back(n);
        continue;
      }
      out.push_back(s);
    }
    return out;
  }

 private:
  NameGen names_;
  TileSizes ts_;
  std::vector<Stmt> allocs_;  // tiles of the nest being built

  View tile(const std::string& hint, DType t, int64_t r, int64_t c, Space s = Space::Vec) {
    auto b = std::make_shared<Buffer>();
    b->name = names_.fresh(hint);
    b->dtype = compute_dtype(t);
    b->shape = {r, c};
    b->space = s;
    b->kind = BufferKind::Temp;
    allocs_.push_back(alloc(b));
    return View::whole(b);
  }

  Nest nest(const View& d, const std::vector<int64_t>& ext, const char* hint) {
    Nest n;
    auto shape = d.shape();
    auto valid = d.valid_shape();
    for (size_t k = 0; k < shape.size(); ++k) {
      if (shape[k] <= ext[k]) {
        n.off.push_back(int_imm(0));
        n.ext.push_back(shape[k]);
      } else {
        std::string v = names_.fresh(hint + std::to_string(k));
        n.loops.push_back(Loop{v, valid[k], ext[k]});
        n.off.push_back(var(v));
        n.ext.push_back(ext[k]);
      }
    }
    return n;
  }

  // Wraps body in the nest's loops; the nest's tiles are allocated at the top of the outermost
  // loop body, so each parallel iteration owns its tiles.
  void emit(const Nest& n, std::vector<Stmt> body, std::vector<Stmt>& out) {
    std::vector<Stmt> allocs = std::move(allocs_);
    allocs_.clear();
    if (n.loops.empty()) {
      out.insert(out.end(), allocs.begin(), allocs.end());
      out.insert(out.end(), body.begin(), body.end());
      return;
    }
    for (size_t i = n.loops.size(); i-- > 0;) {
      if (i == 0) body.insert(body.begin(), allocs.begin(), allocs.end());
      const Loop& l = n.loops[i];
      body = {for_loop(l.var, int_imm(0), l.hi, int_imm(l.step), std::move(body))};
    }
    out.insert(out.end(), body.begin(), body.end());
  }

  // Selection of a source view aligned right against a destination of rank r.
  static std::vector<Sel> src_sel(const View& s, const Nest& n, const std::vector<int64_t>& dshape,
                                  int first_tile_dim) {
    auto ss = s.shape();
    int r = int(dshape.size());
    std::vector<Sel> sel;
    for (int j = 0; j < int(ss.size()); ++j) {
      int k = j + r - int(ss.size());
      bool keep = k >= first_tile_dim;
      if (ss[j] == 1 && dshape[k] != 1) sel.push_back(Sel{int_imm(0), 1, keep, false});
      else sel.push_back(Sel{n.off[k], std::min(n.ext[k], ss[j]), keep, ss[j] < dshape[k]});
    }
    return sel;
  }

  static std::vector<Sel> dst_sel(const Nest& n, int first_tile_dim) {
    std::vector<Sel> sel;
    for (size_t k = 0; k < n.off.size(); ++k) sel.push_back(Sel{n.off[k], n.ext[k], int(k) >= first_tile_dim, false});
    return sel;
  }

  // Static tile shape of a selection: its kept dims, as rows x cols (rank < 2 pads rows with 1).
  static std::pair<int64_t, int64_t> tile_shape(const std::vector<Sel>& sel, int r, int first_tile_dim) {
    std::vector<int64_t> kept;
    for (auto& s : sel)
      if (s.keep) kept.push_back(s.size);
    int want = r - first_tile_dim;  // number of tile dims of the destination (0, 1 or 2)
    while (int(kept.size()) < want) kept.insert(kept.begin(), 1);
    if (kept.empty()) return {1, 1};
    if (kept.size() == 1) return {1, kept[0]};
    return {kept[0], kept[1]};
  }

  std::vector<int64_t> elem_ext(const std::vector<int64_t>& shape) const {
    std::vector<int64_t> ext(shape.size(), 1);
    int r = int(shape.size());
    if (r == 0) return ext;
    int64_t tc = std::min(shape[r - 1], ts_.elem_cols);
    ext[r - 1] = tc;
    if (r >= 2) ext[r - 2] = std::max<int64_t>(1, std::min(shape[r - 2], ts_.elem_rows * ts_.elem_cols / tc));
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
        break;
      case OpCategory::Matrix:
        if (op.code == Opcode::TMATMUL || op.code == Opcode::TMATMUL_ACC) return matmul(op, out);
        break;
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
    Nest n = nest(d, elem_ext(shape), "e");
    auto cat = opcode_info(op.code).category;
    DType dt = compute_dtype(d.buf->dtype);
    // The type sources are loaded in (TLOAD converts): the instruction's operand type.
    DType src_t = dt;
    if (cat == OpCategory::Compare) {
      src_t = DType::I64;
      for (size_t i = 1; i < op.args.size(); ++i)
        if (auto v = std::get_if<View>(&op.args[i]))
          if (is_float(v->buf->dtype)) src_t = v->buf->dtype == DType::F64 || src_t == DType::F64 ? DType::F64 : DType::F32;
    }
    if (op.code == Opcode::TAND || op.code == Opcode::TOR) src_t = DType::Bool;
    std::vector<Stmt> body;
    std::vector<Operand> args;
    bool broadcast = false;
    for (size_t i = 1; i < op.args.size(); ++i) {
      const Operand& a = op.args[i];
      auto v = std::get_if<View>(&a);
      if (!v) {
        Expr e = std::get<Expr>(a);
        if (op.code == Opcode::TCI && r >= 1) e = e + n.off[r - 1];
        args.push_back(e);
        continue;
      }
      DType t = src_t;
      if (op.code == Opcode::TSEL && i == 1) t = DType::Bool;
      if (op.code == Opcode::TCVT || op.code == Opcode::TNOT) t = compute_dtype(v->buf->dtype);
      auto sel = src_sel(*v, n, shape, ft);
      auto [tr, tc] = tile_shape(sel, r, ft);
      auto [dr, dc] = tile_shape(dst_sel(n, ft), r, ft);
      broadcast |= (tr != dr || tc != dc);
      View t_src = tile("x", t, tr, tc);
      body.push_back(op_stmt(Op{Opcode::TLOAD, {t_src, sub(*v, sel)}}));
      args.push_back(t_src);
    }
    auto dsel = dst_sel(n, ft);
    auto [dr, dc] = tile_shape(dsel, r, ft);
    View result;
    if (op.code == Opcode::TMOV && !broadcast) {
      result = std::get<View>(args[0]);  // a copy is a load and a store
    } else if (op.code == Opcode::TMOV) {
      result = tile("y", dt, dr, dc);
      body.push_back(op_stmt(Op{Opcode::TMUL, {result, args[0], int_imm(1)}}));  // broadcasting copy
    } else {
      DType rt = (cat == OpCategory::Compare || op.code == Opcode::TNOT || op.code == Opcode::TAND ||
                  op.code == Opcode::TOR) ? DType::Bool : dt;
      result = tile("y", rt, dr, dc);
      args.insert(args.begin(), result);
      body.push_back(op_stmt(Op{op.code, args}));
    }
    body.push_back(op_stmt(Op{Opcode::TSTORE, {sub(d, dsel), result}}));
    emit(n, std::move(body), out);
  }

  // Row reduction over the last dimension of the source; the destination's last dim is 1.
  void reduce(const Op& op, std::vector<Stmt>& out) {
    const View& d = std::get<View>(op.args[0]);
    const View& x = std::get<View>(op.args[1]);
    auto xs = x.shape();
    int r = int(xs.size());
    int64_t C = xs[r - 1];
    int64_t tc = std::min(C, ts_.elem_cols * 2);
    std::vector<int64_t> ext(r, 1);
    if (r >= 2) ext[r - 2] = std::max<int64_t>(1, std::min(xs[r - 2], ts_.elem_rows * ts_.elem_cols / tc));
    Nest n = nest(d, ext, "e");  // the destination's last dim is 1: never looped
    int ft = std::max(r - 2, 0);
    DType dt = compute_dtype(d.buf->dtype);
    auto chunk = [&](Expr c0) {
      auto sel = dst_sel(n, ft);
      sel[r - 1] = Sel{c0, tc, true, false};
      return sub(x, sel);
    };
    auto [rows, one] = tile_shape(dst_sel(n, ft), r, ft);
    (void)one;
    View xt = tile("x", dt, rows, tc);
    View acc = tile("acc", dt, rows, 1);
    std::vector<Stmt> body{op_stmt(Op{Opcode::TLOAD, {xt, chunk(int_imm(0))}}), op_stmt(Op{op.code, {acc, xt}})};
    if (C > tc) {
      View part = tile("part", dt, rows, 1);
      std::string c = names_.fresh("c");
      Opcode combine = op.code == Opcode::TROWSUM ? Opcode::TADD : op.code == Opcode::TROWMAX ? Opcode::TMAX : Opcode::TMIN;
      std::vector<Stmt> inner{op_stmt(Op{Opcode::TLOAD, {xt, chunk(var(c))}}), op_stmt(Op{op.code, {part, xt}}),
                              op_stmt(Op{combine, {acc, acc, part}})};
      body.push_back(for_loop(c, int_imm(tc), x.valid_shape()[r - 1], int_imm(tc), std::move(inner)));
    }
    body.push_back(op_stmt(Op{Opcode::TSTORE, {sub(d, dst_sel(n, ft)), acc}}));
    emit(n, std::move(body), out);
  }

  void matmul(const Op& op, std::vector<Stmt>& out) {
    const View& d = std::get<View>(op.args[0]);
    const View& a = std::get<View>(op.args[1]);
    const View& b = std::get<View>(op.args[2]);
    auto ds = d.shape();
    int r = int(ds.size());
    std::vector<int64_t> ext(r, 1);
    ext[r - 2] = ts_.mm_m;
    ext[r - 1] = ts_.mm_n;
    Nest n = nest(d, ext, "m");
    int64_t K = a.shape().back();
    int64_t tk = std::min(K, ts_.mm_k);
    Expr vk = a.valid_shape().back();
    int64_t tm = n.ext[r - 2], tn = n.ext[r - 1];
    DType dt = compute_dtype(d.buf->dtype);
    View ta = tile("a", dt, tm, tk, Space::Mat);
    View tb = tile("b", dt, tk, tn, Space::Mat);
    View acc = tile("acc", dt, tm, tn, Space::Acc);
    auto dsel = dst_sel(n, r - 2);
    std::vector<Stmt> body;
    if (op.code == Opcode::TMATMUL_ACC) body.push_back(op_stmt(Op{Opcode::TLOAD, {acc, sub(d, dsel)}}));
    else body.push_back(op_stmt(Op{Opcode::TEXPANDS, {acc, float_imm(0.0)}}));
    // Operand views: batch dims broadcast against the destination's; the K dim is tiled.
    auto operand = [&](const View& v, bool is_a, Expr k0) {
      auto vs = v.shape();
      int s = int(vs.size());
      std::vector<Sel> sel;
      for (int j = 0; j < s - 2; ++j) {
        int kd = j + r - s;
        if (vs[j] == 1 && ds[kd] != 1) sel.push_back(Sel{int_imm(0), 1, false, false});
        else sel.push_back(Sel{n.off[kd], 1, false, false});
      }
      if (is_a) {
        sel.push_back(Sel{n.off[r - 2], tm, true, false});
        sel.push_back(Sel{k0, tk, true, false});
      } else {
        sel.push_back(Sel{k0, tk, true, false});
        sel.push_back(Sel{n.off[r - 1], tn, true, false});
      }
      return sub(v, sel);
    };
    auto step = [&](Expr k0) {
      return std::vector<Stmt>{op_stmt(Op{Opcode::TLOAD, {ta, operand(a, true, k0)}}),
                               op_stmt(Op{Opcode::TLOAD, {tb, operand(b, false, k0)}}),
                               op_stmt(Op{Opcode::TMATMUL_ACC, {acc, ta, tb}})};
    };
    if (K <= tk) {
      auto s = step(int_imm(0));
      body.insert(body.end(), s.begin(), s.end());
    } else {
      std::string k = names_.fresh("k");
      body.push_back(for_loop(k, int_imm(0), vk, int_imm(tk), step(var(k))));
    }
    body.push_back(op_stmt(Op{Opcode::TSTORE, {sub(d, dsel), acc}}));
    emit(n, std::move(body), out);
  }
};

}  // namespace

Program tile_ops(const Program& p, const TileSizes& sizes) {
  Lowerer l(p, sizes);
  Program out = p;
  out.body = l.block(p.body);
  return out;
}

}  // namespace pypto::passes
