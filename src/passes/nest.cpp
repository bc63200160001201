#include "passes/nest.h"

#include <algorithm>

namespace pypto::passes {
using namespace ir;

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

std::vector<Sel> Nest::dst_sel(int first_tile_dim) const {
  std::vector<Sel> sel;
  for (size_t k = 0; k < off.size(); ++k) sel.push_back(Sel{off[k], ext[k], int(k) >= first_tile_dim, false});
  return sel;
}

std::vector<Sel> Nest::src_sel(const View& s, const std::vector<int64_t>& dshape, int first_tile_dim) const {
  auto ss = s.shape();
  int r = int(dshape.size());
  std::vector<Sel> sel;
  for (int j = 0; j < int(ss.size()); ++j) {
    int k = j + r - int(ss.size());
    bool keep = k >= first_tile_dim;
    if (ss[j] == 1 && dshape[k] != 1)
      sel.push_back(Sel{int_imm(0), 1, keep, false});
    else
      sel.push_back(Sel{off[k], std::min(ext[k], ss[j]), keep, ss[j] < dshape[k]});
  }
  return sel;
}

std::pair<int64_t, int64_t> tile_shape(const std::vector<Sel>& sel, int tile_dims) {
  std::vector<int64_t> kept;
  for (auto& s : sel)
    if (s.keep) kept.push_back(s.size);
  while (int(kept.size()) < tile_dims) kept.insert(kept.begin(), 1);
  if (kept.empty()) return {1, 1};
  if (kept.size() == 1) return {1, kept[0]};
  return {kept[0], kept[1]};
}

Nest NestBuilder::nest(const View& d, const std::vector<int64_t>& ext, const std::string& hint) {
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

View NestBuilder::tile(const std::string& hint, DType t, int64_t r, int64_t c, Space s) {
  auto b = std::make_shared<Buffer>();
  b->name = names_.fresh(hint);
  b->dtype = s == Space::Mat && t == DType::BF16 ? t : compute_dtype(t);
  b->shape = {r, c};
  b->space = s;
  b->kind = BufferKind::Temp;
  allocs_.push_back(alloc(b));
  return View::whole(b);
}

std::vector<Stmt> NestBuilder::take_allocs(const std::function<bool(const Buffer&)>& pick) {
  std::vector<Stmt> taken, kept;
  for (Stmt& s : allocs_) (pick(*s->buffer) ? taken : kept).push_back(std::move(s));
  allocs_ = std::move(kept);
  return taken;
}

void NestBuilder::emit(const Nest& n, std::vector<Stmt> body, std::vector<Stmt>& out) {
  std::vector<Stmt> allocs = std::move(allocs_);
  auto hoisted = std::move(hoisted_);
  allocs_.clear();
  hoisted_.clear();
  int L = int(n.loops.size());
  if (L == 0) {
    out.insert(out.end(), allocs.begin(), allocs.end());
    for (auto& h : hoisted) out.push_back(h.second);
    out.insert(out.end(), body.begin(), body.end());
    return;
  }
  std::vector<std::vector<Stmt>> heads(L + 1);  // heads[d] opens the body of loop d-1
  for (auto& [d, st] : hoisted) heads[std::clamp(d, 1, L)].push_back(st);
  std::vector<Stmt> inner = std::move(body);
  for (int i = L - 1; i >= 0; --i) {
    std::vector<Stmt> b;
    if (i == 0) b = allocs;
    b.insert(b.end(), heads[i + 1].begin(), heads[i + 1].end());
    b.insert(b.end(), inner.begin(), inner.end());
    const Loop& l = n.loops[i];
    inner = {for_loop(l.var, int_imm(0), l.hi, int_imm(l.step), std::move(b))};
  }
  out.insert(out.end(), inner.begin(), inner.end());
}

std::optional<ColumnReduction> column_reduction(const Op& op) {
  if (op.code != Opcode::TROWSUM && op.code != Opcode::TROWMAX && op.code != Opcode::TROWMIN) return {};
  const View* d = std::get_if<View>(&op.args[0]);
  const View* x = std::get_if<View>(&op.args[1]);
  if (!d || !x || x->buf->space != Space::Global || x->rank() < 2 || d->rank() != x->rank()) return {};
  const int r = x->rank();
  auto xs = x->shape(), ds = d->shape();
  auto xv = x->valid_shape(), dv = d->valid_shape();
  if (xs[size_t(r - 1)] == 1) return {};
  std::vector<int> keep;  // view dims of x; a size-1 dim other than the reduced one is dropped
  for (int j = 0; j < r; ++j) {
    if (j < r - 1 && ds[size_t(j)] != xs[size_t(j)]) return {};
    bool unit = j < r - 1 && xs[size_t(j)] == 1;
    if (!unit) {
      keep.push_back(j);
      continue;
    }
    auto a = as_int(xv[size_t(j)]), b = as_int(dv[size_t(j)]);  // dropped: must be one element
    if (!a || !b || *a != 1 || *b != 1) return {};
  }
  std::stable_sort(keep.begin(), keep.end(),
                   [&](int a, int b) { return x->dims[size_t(a)] < x->dims[size_t(b)]; });
  if (keep.back() == r - 1) return {};  // innermost already: a row reduction
  ColumnReduction c{*x, *d, 0};
  c.src.dims.clear();
  c.dst.dims.clear();
  for (size_t i = 0; i < keep.size(); ++i) {
    c.src.dims.push_back(x->dims[size_t(keep[i])]);
    c.dst.dims.push_back(d->dims[size_t(keep[i])]);
    if (keep[i] == r - 1) c.axis = int(i);
  }
  return c;
}

bool is_tensor_level(const Op& op) {
  auto cat = opcode_info(op.code).category;
  if (cat == OpCategory::Memory || cat == OpCategory::Sync) return false;
  for (auto& a : op.args)
    if (auto v = std::get_if<View>(&a))
      if (v->buf->space == Space::Global) return true;
  return false;
}

namespace {
bool bool_result(Opcode c) {
  return opcode_info(c).category == OpCategory::Compare || c == Opcode::TNOT || c == Opcode::TAND ||
         c == Opcode::TOR;
}
}  // namespace

DType operand_tile_dtype(const Op& op, size_t arg) {
  const View& d = std::get<View>(op.args[0]);
  const View* v = std::get_if<View>(&op.args[arg]);
  DType dt = compute_dtype(d.buf->dtype);
  if (!v) return dt;
  if (op.code == Opcode::TAND || op.code == Opcode::TOR || (op.code == Opcode::TSEL && arg == 1))
    return DType::Bool;
  if (op.code == Opcode::TCVT || op.code == Opcode::TNOT) return compute_dtype(v->buf->dtype);
  if (opcode_info(op.code).category == OpCategory::Compare) {
    DType t = DType::I64;  // compare in the widest type of the operands
    for (size_t i = 1; i < op.args.size(); ++i)
      if (auto w = std::get_if<View>(&op.args[i]))
        if (is_float(w->buf->dtype))
          t = (w->buf->dtype == DType::F64 || t == DType::F64) ? DType::F64 : DType::F32;
    return t;
  }
  return dt;
}

DType result_tile_dtype(const Op& op) {
  if (bool_result(op.code)) return DType::Bool;
  return compute_dtype(std::get<View>(op.args[0]).buf->dtype);
}

DType matmul_operand_dtype(DType a, DType b, DType acc) {
  if (a == DType::BF16 && b == DType::BF16 && acc == DType::F32) return DType::BF16;
  if (a == DType::I8 && b == DType::I8 && acc == DType::I32) return DType::I8;
  return acc;
}

std::vector<Stmt> matmul_k_loop(NestBuilder& nb, const View& a, const View& b, const Nest& n,
                                const std::vector<int64_t>& ds, const View& acc, int64_t tk) {
  int r = int(ds.size());
  int64_t K = a.shape().back();
  tk = std::min(K, tk);
  int64_t tm = n.ext[r - 2], tn = n.ext[r - 1];
  // bf16 operands stay bf16 in their tiles (the bf16 matmul converts them itself, exactly: see
  // docs/isa.md); anything else is converted to the accumulator's type by the loads.
  DType dt = matmul_operand_dtype(a.buf->dtype, b.buf->dtype, acc.buf->dtype);
  View ta = a.buf->space != Space::Global ? View::whole(a.buf) : nb.tile("a", dt, tm, tk, Space::Mat);
  View tb = b.buf->space != Space::Global ? View::whole(b.buf) : nb.tile("b", dt, tk, tn, Space::Mat);
  auto operand = [&](const View& v, bool is_a, Expr k0) {
    auto vs = v.shape();
    int s = int(vs.size());
    std::vector<Sel> sel;
    for (int j = 0; j < s - 2; ++j) {
      int kd = j + r - s;
      if (vs[j] == 1 && ds[kd] != 1)
        sel.push_back(Sel{int_imm(0), 1, false, false});
      else
        sel.push_back(Sel{n.off[kd], 1, false, false});
    }
    // Windows never exceed the operand (a static accumulator may be larger than the product).
    int64_t rows = vs[s - 2], cols = vs[s - 1];
    if (is_a) {
      sel.push_back(Sel{n.off[r - 2], std::min(tm, rows), true, false});
      sel.push_back(Sel{k0, std::min(tk, cols), true, false});
    } else {
      sel.push_back(Sel{k0, std::min(tk, rows), true, false});
      sel.push_back(Sel{n.off[r - 1], std::min(tn, cols), true, false});
    }
    return sub(v, sel);
  };
  // A local (promoted) operand is the whole tile already; it needs a single K step.
  bool a_local = a.buf->space != Space::Global, b_local = b.buf->space != Space::Global;
  if ((a_local || b_local) && K > tk) throw Error("internal: local matmul operand wider than a K tile");
  auto step = [&](Expr k0) {
    std::vector<Stmt> s;
    if (!a_local) s.push_back(op_stmt(Op{Opcode::TLOAD, {ta, operand(a, true, k0)}}));
    if (!b_local) s.push_back(op_stmt(Op{Opcode::TLOAD, {tb, operand(b, false, k0)}}));
    s.push_back(op_stmt(Op{Opcode::TMATMUL_ACC, {acc, ta, tb}}));
    return s;
  };
  if (K <= tk) return step(int_imm(0));
  std::string k = nb.fresh("k");
  return {for_loop(k, int_imm(0), a.valid_shape().back(), int_imm(tk), step(var(k)))};
}

}  // namespace pypto::passes
