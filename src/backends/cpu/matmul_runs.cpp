// Sums of whole-matrix products (see matmul_runs.h).
#include "backends/cpu/matmul_runs.h"

#include <algorithm>
#include <map>

#include "ir/visitor.h"

namespace pypto::cpu {
using namespace ir;

namespace {
bool same_exprs(const std::vector<Expr>& x, const std::vector<Expr>& y) {
  if (x.size() != y.size()) return false;
  for (size_t i = 0; i < x.size(); ++i)
    if (!expr_equal(x[i], y[i])) return false;
  return true;
}

bool same_window(const View& a, const View& b) {
  return a.buf == b.buf && a.size == b.size && a.step == b.step && a.dims == b.dims &&
         same_exprs(a.offset, b.offset) && same_exprs(a.valid, b.valid);
}

const Op* memory_matmul_op(const Stmt& s) {
  if (!s || s->kind != StmtKind::OpStmt) return nullptr;
  const Op& op = s->op;
  if ((op.code != Opcode::MMATMUL && op.code != Opcode::MMATMUL_ACC) || op.args.size() != 3) return nullptr;
  for (const Operand& a : op.args)  // f32 views only (bf16 operands take MMATMUL's own overload)
    if (!std::holds_alternative<View>(a) || std::get<View>(a).buf->dtype != DType::F32) return nullptr;
  return &op;
}
}  // namespace

size_t memory_matmul_run(const std::vector<Stmt>& body, size_t i) {
  const Op* first = memory_matmul_op(body[i]);
  if (!first) return 1;
  const View& dst = std::get<View>(first->args[0]);
  size_t n = 1;
  while (i + n < body.size()) {
    const Op* next = memory_matmul_op(body[i + n]);
    if (!next || next->code != Opcode::MMATMUL_ACC || !same_window(std::get<View>(next->args[0]), dst)) break;
    ++n;
  }
  return n;
}

std::vector<std::string> memory_matmul_sum_calls(const std::vector<Stmt>& body, size_t i, size_t n,
                                                 const std::string& pool,
                                                 const std::function<std::string(const Op&, size_t)>& gview) {
  std::vector<std::string> calls;
  for (size_t c = 0; c < n; c += kMaxMatmulTerms) {  // later calls accumulate onto the earlier
    const Op& first = body[i + c]->op;
    std::string call = "pto::mmatmul_sum(" + pool +
                       (first.code == Opcode::MMATMUL_ACC ? ", true, " : ", false, ") + gview(first, 0);
    for (size_t t = c; t < std::min(n, c + kMaxMatmulTerms); ++t)
      call += ", " + gview(body[i + t]->op, 1) + ", " + gview(body[i + t]->op, 2);
    calls.push_back(call + ")");
  }
  return calls;
}

namespace {
// The nest's loops (var -> extent, step), its instructions other than prefetches, in order; false
// where it holds anything else (a let, a global scratch, a loop not counted from 0, a branch that
// does more than prefetch).
// dynamic_hi, where given, takes loops whose extent is not a constant (a dynamic row count):
// var -> its extent there, kDynamicBound in `loops`.
bool flatten_nest(const Stmt& s, std::map<std::string, std::pair<int64_t, int64_t>>& loops,
                  std::vector<const Op*>& ops, std::map<std::string, Expr>* dynamic_hi = nullptr) {
  switch (s->kind) {
    case StmtKind::For: {
      auto lo = as_int(s->lo), hi = as_int(s->hi), step = as_int(s->step);
      if (!lo || (!hi && !dynamic_hi) || !step || *lo != 0 || *step <= 0 || loops.count(s->var)) return false;
      loops[s->var] = {hi ? *hi : kDynamicBound, *step};
      if (!hi) (*dynamic_hi)[s->var] = s->hi;
      [[fallthrough]];
    }
    case StmtKind::Seq:
      for (const Stmt& c : s->body)
        if (!flatten_nest(c, loops, ops, dynamic_hi)) return false;
      return true;
    case StmtKind::If:
      for (const Stmt& c : s->body)
        if (c->kind != StmtKind::OpStmt || c->op.code != Opcode::TPREFETCH) return false;
      return s->orelse.empty();
    case StmtKind::Alloc:
      return s->buffer->space != Space::Global;
    case StmtKind::OpStmt:
      if (s->op.code != Opcode::TPREFETCH) ops.push_back(&s->op);
      return true;
    default:
      return false;
  }
}

const View* view_at(const Op* op, size_t k) {
  return op && k < op->args.size() ? std::get_if<View>(&op->args[k]) : nullptr;
}
bool f32_tile(const View* v) { return v && v->buf->space != Space::Global && v->buf->dtype == DType::F32; }

bool static_f32_global(const Buffer& b) {
  return b.space == Space::Global && b.dtype == DType::F32 && !b.is_dynamic();
}

// A global f32 matrix whose row count may be dynamic (its columns static).
bool f32_global_matrix(const Buffer& b) {
  return b.space == Space::Global && b.dtype == DType::F32 && b.rank() == 2 && !b.is_dynamic(1);
}

bool same_extents(const Buffer& a, const Buffer& b) {
  if (a.shape != b.shape) return false;
  for (int d = 0; d < a.rank(); ++d)
    if (!expr_equal(a.extent(d), b.extent(d))) return false;
  return true;
}

// T's windows (tw) walk all of T, one loop per dimension (or one window spanning it); a dynamic
// dim of T by a loop over its extent (dynamic_hi: flatten_nest's), windows clipped to it.
bool walks_whole(const View& tw, const Buffer& T, std::map<std::string, std::pair<int64_t, int64_t>>& loops,
                 const std::map<std::string, Expr>& dynamic_hi = {}) {
  if (tw.dims != std::vector<int>{0, 1}) return false;
  for (int k = 0; k < 2; ++k) {
    const size_t d = size_t(k);
    const Expr& off = tw.offset[d];
    const int64_t extent = T.shape[d];
    auto c = as_int(off);
    if (c) {  // one tile spans the dimension
      auto v = as_int(tw.valid[d]);
      if (*c != 0 || tw.size[d] != extent || !v || *v != extent || tw.step[d] != 1) return false;
      continue;
    }
    if (off->op != ExprOp::Var || !loops.count(off->name)) return false;
    const auto [hi, step] = loops[off->name];
    if (hi != extent || step != tw.size[d]) return false;
    if (T.is_dynamic(k)) {
      auto dh = dynamic_hi.find(off->name);
      if (dh == dynamic_hi.end() || !expr_equal(dh->second, T.extent(k)) || tw.step[d] != 1 ||
          !expr_equal(tw.valid[d], min(int_imm(tw.size[d]), T.extent(k) - off)))
        return false;
    } else if (!tw.tiles_dim(k, off->name, extent)) {
      return false;
    }
  }
  return expr_equal(tw.offset[0], int_imm(0)) || !expr_equal(tw.offset[0], tw.offset[1]);
}

// Whether a statement after body[i + 1] reads T.
bool read_later(const std::vector<Stmt>& body, size_t i, const BufferRef& T) {
  bool read = false;
  for_each_stmt(std::vector<Stmt>(body.begin() + long(i) + 2, body.end()), [&](const Stmt& s) {
    if (s->kind != StmtKind::OpStmt) return;
    for (const Operand& o : s->op.args)
      if (auto v = std::get_if<View>(&o); v && v->buf == T) read = true;
  });
  return read;
}
}  // namespace

std::optional<WrappedStore> memory_matmul_wrapped_store(const std::vector<Stmt>& body, size_t i, size_t n) {
  const Op* mm = memory_matmul_op(body[i]);
  if (!mm || mm->code != Opcode::MMATMUL || n > kMaxMatmulTerms || i + n >= body.size() ||
      body[i + n]->kind != StmtKind::For)
    return std::nullopt;
  const View& d = std::get<View>(mm->args[0]);
  const BufferRef& T = d.buf;
  const int tr = T->rank();
  if (T->kind != BufferKind::Temp || !static_f32_global(*T) || tr < 2 ||
      d.dims != std::vector<int>{tr - 2, tr - 1})
    return std::nullopt;
  const int64_t rows = T->shape[size_t(tr - 2)], N = T->shape[size_t(tr - 1)];
  for (int k = tr - 2; k < tr; ++k) {  // the products fill T's last two dims
    auto off = as_int(d.offset[size_t(k)]), v = as_int(d.valid[size_t(k)]);
    if (!off || *off != 0 || d.size[size_t(k)] != T->shape[size_t(k)] || !v || *v != T->shape[size_t(k)] ||
        d.step[size_t(k)] != 1)
      return std::nullopt;
  }
  // The nest: TLOAD x, T[lead, e:s, y*wrap : keep]; TSTORE out[lead', e:s, y, 0:keep], x.
  std::map<std::string, std::pair<int64_t, int64_t>> loops;
  std::vector<const Op*> ops;
  if (!flatten_nest(body[i + n], loops, ops) || ops.size() != 2 || ops[0]->code != Opcode::TLOAD ||
      ops[1]->code != Opcode::TSTORE || ops[0]->args.size() != 2 || ops[1]->args.size() != 2)
    return std::nullopt;
  const View *x = view_at(ops[0], 0), *tw = view_at(ops[0], 1), *ow = view_at(ops[1], 0),
             *src = view_at(ops[1], 1);
  if (!f32_tile(x) || !tw || !ow || !src || src->buf != x->buf || tw->buf != T || tw->dims != d.dims)
    return std::nullopt;
  for (int k = 0; k + 2 < tr; ++k)
    if (!expr_equal(tw->offset[size_t(k)], d.offset[size_t(k)])) return std::nullopt;
  // Rows: one window spanning them, or a loop's windows walking them.
  const size_t r = size_t(tr - 2), c = size_t(tr - 1);
  const Expr& roff = tw->offset[r];
  if (auto c0 = as_int(roff)) {
    auto v = as_int(tw->valid[r]);
    if (*c0 != 0 || tw->size[r] != rows || !v || *v != rows || tw->step[r] != 1) return std::nullopt;
  } else if (roff->op != ExprOp::Var || !loops.count(roff->name) ||
             loops[roff->name] != std::make_pair(rows, tw->size[r]) ||
             !tw->tiles_dim(int(r), roff->name, rows)) {
    return std::nullopt;
  }
  // Columns: image row y's keep columns at y * wrap, for y over a loop counted by 1.
  const int64_t keep = tw->size[c];
  std::string y;
  for (const auto& [name, ext] : loops)
    if (ext.second == 1 && name != roff->name && tw->offset[c] && !as_int(tw->offset[c])) {
      std::vector<std::string> vars;
      collect_vars(tw->offset[c], vars);
      if (vars.size() == 1 && vars[0] == name) y = name;
    }
  if (y.empty() || tw->step[c] != 1) return std::nullopt;
  const int64_t H = loops[y].first;
  auto wrap = as_int(substitute(tw->offset[c], {{y, int_imm(1)}}));
  if (!wrap || *wrap < keep || keep < 1 || !expr_equal(tw->offset[c], var(y) * int_imm(*wrap)) ||
      (H - 1) * *wrap + keep > N)
    return std::nullopt;
  auto vb = bounds(tw->valid[c], {{y, Interval{0, H - 1}}});
  if (!vb || vb->lo != keep || vb->hi != keep) return std::nullopt;
  // out: [lead', channels, image rows, columns], rows indexed by y, written through T's row windows.
  const BufferRef& out = ow->buf;
  const int orank = out->rank();
  if (!static_f32_global(*out) || out == T || orank < 3 || ow->dims != std::vector<int>{orank - 3, orank - 1})
    return std::nullopt;
  const size_t oc = size_t(orank - 3), oy = size_t(orank - 2), ox = size_t(orank - 1);
  if (!expr_equal(ow->offset[oc], roff) || ow->size[oc] != tw->size[r] ||
      !expr_equal(ow->valid[oc], tw->valid[r]) || ow->step[oc] != 1 || ow->step[oy] != 1 ||
      !expr_equal(ow->offset[oy], var(y)) || !expr_equal(ow->offset[ox], int_imm(0)) ||
      ow->size[ox] != keep || ow->step[ox] != 1 || !expr_equal(ow->valid[ox], int_imm(keep)) ||
      out->shape[oc] < rows || out->shape[oy] < H)
    return std::nullopt;
  auto ov = as_int(ow->valid[oy]);
  if (!ov || *ov != 1) return std::nullopt;
  for (size_t k = 0; k < oc; ++k) {  // the image: fixed in the nest (an enclosing loop's index)
    std::vector<std::string> vars;
    collect_vars(ow->offset[k], vars);
    for (const std::string& v : vars)
      if (loops.count(v)) return std::nullopt;
  }
  for (size_t u = 0; u < n; ++u)  // no product reads T or out
    for (size_t k = 1; k < 3; ++k)
      if (const BufferRef& o = std::get<View>(body[i + u]->op.args[k]).buf; o == T || o == out)
        return std::nullopt;
  if (read_later(body, i + n - 1, T)) return std::nullopt;
  WrappedStore w;
  w.out = *ow;  // channels from 0, image row 0: the rows x keep matrix at the image's start
  w.out.offset[oc] = int_imm(0);
  w.out.size[oc] = rows;
  w.out.valid[oc] = int_imm(rows);
  w.out.offset[oy] = int_imm(0);
  w.image_row_dim = int(oy);
  w.wrap = *wrap;
  w.columns = N;
  return w;
}

std::optional<MatmulEpilogue> memory_matmul_epilogue(const std::vector<Stmt>& body, size_t i) {
  const Op* mm = memory_matmul_op(body[i]);
  if (!mm || mm->code != Opcode::MMATMUL || i + 1 >= body.size() || body[i + 1]->kind != StmtKind::For)
    return std::nullopt;
  const View &d = std::get<View>(mm->args[0]), &a = std::get<View>(mm->args[1]),
             &b = std::get<View>(mm->args[2]);
  const BufferRef& T = d.buf;  // (its row count may be dynamic: a sequence length)
  if (T->kind != BufferKind::Temp || !f32_global_matrix(*T) || !d.is_whole()) return std::nullopt;
  std::map<std::string, std::pair<int64_t, int64_t>> loops;
  std::map<std::string, Expr> dynamic_hi;
  std::vector<const Op*> ops;
  if (!flatten_nest(body[i + 1], loops, ops, &dynamic_hi) || ops.size() < 4 || ops.size() > 5)
    return std::nullopt;
  // TLOAD x, T[..]; TLOAD bt, bias[..] (either order); TADD y, x, bt (either order); [TRELU z, y];
  // TSTORE out[..], y or z
  const bool t_first = view_at(ops[0], 1) && view_at(ops[0], 1)->buf == T;
  const Op *load_t = ops[t_first ? 0 : 1], *load_b = ops[t_first ? 1 : 0], *add = ops[2];
  const bool relu = ops.size() == 5;
  const Op *act = relu ? ops[3] : nullptr, *store = ops.back();
  if (load_t->code != Opcode::TLOAD || load_b->code != Opcode::TLOAD || add->code != Opcode::TADD ||
      (relu && act->code != Opcode::TRELU) || store->code != Opcode::TSTORE)
    return std::nullopt;
  const View *x = view_at(load_t, 0), *tw = view_at(load_t, 1), *bt = view_at(load_b, 0),
             *bw = view_at(load_b, 1);
  const View *y = view_at(add, 0), *y1 = view_at(add, 1), *y2 = view_at(add, 2), *ow = view_at(store, 0),
             *result = view_at(store, 1);
  if (!f32_tile(x) || !tw || !f32_tile(bt) || !bw || !f32_tile(y) || !y1 || !y2 || !ow || !result ||
      tw->buf != T || add->args.size() != 3)
    return std::nullopt;
  if (!((y1->buf == x->buf && y2->buf == bt->buf) || (y1->buf == bt->buf && y2->buf == x->buf)))
    return std::nullopt;
  const View* last = y;
  if (relu) {
    const View *z = view_at(act, 0), *zs = view_at(act, 1);
    if (!f32_tile(z) || !zs || zs->buf != y->buf) return std::nullopt;
    last = z;
  }
  if (result->buf != last->buf) return std::nullopt;
  if (!walks_whole(*tw, *T, loops, dynamic_hi)) return std::nullopt;
  // out: another matrix of T's shape, written through the same windows.
  const BufferRef& out = ow->buf;
  if (!f32_global_matrix(*out) || !same_extents(*out, *T) || out == T || out == a.buf || out == b.buf ||
      out == bw->buf || ow->dims != tw->dims || ow->size != tw->size || ow->step != tw->step ||
      !same_exprs(ow->offset, tw->offset) || !same_exprs(ow->valid, tw->valid))
    return std::nullopt;
  // bias: a row of T's width read at T's column windows (a rank-1 buffer, or a row of a rank-2
  // one); strided only where one window spans the row (a loop's windows would step in elements).
  const Buffer& bb = *bw->buf;
  const int bc = bb.rank() - 1;
  const size_t c = size_t(bc);
  if (!static_f32_global(bb) || bc < 0 || bc > 1 || bw->dims.empty() || bw->dims.back() != bc ||
      bw->size[c] != tw->size[1] || !expr_equal(bw->offset[c], tw->offset[1]) ||
      !expr_equal(bw->valid[c], tw->valid[1]) || (!as_int(tw->offset[1]) && bw->step[c] != 1))
    return std::nullopt;
  if (bc == 1 &&
      (bw->size[0] != 1 || !as_int(bw->offset[0]) || !as_int(bw->valid[0]) || *as_int(bw->valid[0]) != 1))
    return std::nullopt;
  View bias = *bw;  // the whole row: T's columns from 0
  bias.offset[c] = int_imm(0);
  bias.size[c] = T->shape[1];
  bias.valid[c] = int_imm(T->shape[1]);
  if (read_later(body, i, T)) return std::nullopt;
  return MatmulEpilogue{View::whole(out), bias, relu};
}

}  // namespace pypto::cpu

namespace pypto::cpu {
namespace {
// How an epilogue operand's window (v, into a tile of R x C; T's window tw) lines up with T's
// elements along the tile dimension k (0 rows, 1 columns): 1 where it follows T's window (its
// element r is T's row / column r), 0 where it is one element broadcast, -1 otherwise.
int follows(const View& v, int vd, const View& tw, int k, int64_t extent) {
  if (vd < 0) return 0;  // a rank-1 operand has no rows
  const size_t d = size_t(v.dims[size_t(vd)]);
  const size_t t = size_t(k);
  if (expr_equal(v.offset[d], tw.offset[t]) && v.size[d] == tw.size[t] &&
      expr_equal(v.valid[d], tw.valid[t]) && (as_int(v.offset[d]) || v.step[d] == 1) &&
      v.buf->shape[d] >= extent)
    return 1;
  auto c = as_int(v.offset[d]), n = as_int(v.valid[d]);
  return v.size[d] == 1 && c && n && *n == 1 ? 0 : -1;
}
}  // namespace

std::optional<ScaleEpilogue> memory_matmul_scale_epilogue(const std::vector<Stmt>& body, size_t i) {
  const Stmt& s = body[i];
  if (!s || s->kind != StmtKind::OpStmt || s->op.code != Opcode::MMATMUL || s->op.args.size() != 3 ||
      i + 1 >= body.size() || body[i + 1]->kind != StmtKind::For)
    return std::nullopt;
  const View *d = view_at(&s->op, 0), *a = view_at(&s->op, 1), *b = view_at(&s->op, 2);
  if (!d || !a || !b || a->buf->dtype != DType::I8 || b->buf->dtype != DType::I8) return std::nullopt;
  const BufferRef& T = d->buf;
  if (T->kind != BufferKind::Temp || T->space != Space::Global || T->dtype != DType::I32 || T->is_dynamic() ||
      T->rank() != 2 || !d->is_whole())
    return std::nullopt;
  std::map<std::string, std::pair<int64_t, int64_t>> loops;
  std::vector<const Op*> ops;
  if (!flatten_nest(body[i + 1], loops, ops) || ops.size() < 3) return std::nullopt;
  // TLOAD x, T[..]; TCVT y, x; then TMUL / TADD y', y, operand (either order) with the operand's
  // TLOAD anywhere before; TSTORE out[..], the last result.
  const View* tw = nullptr;
  const Buffer* cur = nullptr;  // the tile holding the value so far
  bool converted = false;
  int64_t R = 0, C = 0;
  std::map<const Buffer*, const View*> operands;  // tile -> the window it was loaded from
  ScaleEpilogue e;
  const View* ow = nullptr;
  for (size_t k = 0; k < ops.size(); ++k) {
    const Op& op = *ops[k];
    const View* v0 = view_at(&op, 0);
    if (!v0 || v0->buf->space == Space::Global) {
      if (op.code != Opcode::TSTORE || k + 1 != ops.size() || !converted) return std::nullopt;
      const View* src = view_at(&op, 1);
      if (!v0 || !src || src->buf.get() != cur) return std::nullopt;
      ow = v0;
      continue;
    }
    if (op.code == Opcode::TLOAD) {
      const View* src = view_at(&op, 1);
      if (!src || op.args.size() != 2) return std::nullopt;
      if (src->buf == T) {
        if (tw || v0->buf->dtype != DType::I32) return std::nullopt;
        tw = src;
        cur = v0->buf.get();
        R = v0->buf->shape[0];
        C = v0->buf->shape[1];
      } else {
        if (!static_f32_global(*src->buf) || v0->buf->dtype != DType::F32 || operands.count(v0->buf.get()))
          return std::nullopt;
        operands[v0->buf.get()] = src;
      }
      continue;
    }
    if (!tw || v0->buf->dtype != DType::F32 || v0->buf->rank() != 2 || v0->buf->shape[0] != R ||
        v0->buf->shape[1] != C)
      return std::nullopt;
    if (op.code == Opcode::TCVT) {
      const View* src = view_at(&op, 1);
      if (converted || op.args.size() != 2 || !src || src->buf.get() != cur) return std::nullopt;
      converted = true;
      cur = v0->buf.get();
      continue;
    }
    if ((op.code != Opcode::TMUL && op.code != Opcode::TADD) || !converted || op.args.size() != 3 ||
        e.steps.size() >= kMaxScaleSteps)
      return std::nullopt;
    const View *x1 = view_at(&op, 1), *x2 = view_at(&op, 2);
    ScaleStep st;
    st.add = op.code == Opcode::TADD;
    const View* other = nullptr;
    if (x1 && x1->buf.get() == cur && x2) {
      other = x2;
    } else if (x2 && x2->buf.get() == cur && x1) {
      other = x1;
    } else if (x1 && x1->buf.get() == cur && !x2) {
      st.imm = as_float(std::get<Expr>(op.args[2]));
      if (!st.imm) return std::nullopt;
      st.axis = 2;
    } else {
      return std::nullopt;
    }
    if (other) {
      auto it = operands.find(other->buf.get());
      if (it == operands.end() || other->buf.get() == v0->buf.get() || !other->is_whole())
        return std::nullopt;
      const View& w = *it->second;
      const std::vector<int64_t> ts = other->buf->shape;
      const int rank = w.rank();
      if (rank < 1 || rank > 2 || ts.size() != 2) return std::nullopt;
      for (size_t bd = 0; bd < w.offset.size(); ++bd)  // dimensions outside the view: fixed
        if (std::find(w.dims.begin(), w.dims.end(), int(bd)) == w.dims.end() && !as_int(w.offset[bd]))
          return std::nullopt;
      const int fr = follows(w, rank == 2 ? 0 : -1, *tw, 0, T->shape[0]);
      const int fc = follows(w, rank - 1, *tw, 1, T->shape[1]);
      if (fr < 0 || fc < 0 || (fr == 1 && fc == 1)) return std::nullopt;
      if (ts[0] != (fr ? R : 1) || ts[1] != (fc ? C : 1)) return std::nullopt;
      st.axis = fr ? 0 : fc ? 1 : 2;
      st.operand = w;
      if (st.axis != 2) {  // the whole row / column: T's extent from 0
        const size_t bd = size_t(w.dims[size_t(st.axis == 0 ? 0 : rank - 1)]);
        const int64_t extent = T->shape[size_t(st.axis)];
        st.operand.offset[bd] = int_imm(0);
        st.operand.size[bd] = extent;
        st.operand.valid[bd] = int_imm(extent);
      }
    }
    e.steps.push_back(st);
    cur = v0->buf.get();
  }
  if (!tw || !ow || R <= 1 || C <= 1 || !walks_whole(*tw, *T, loops)) return std::nullopt;
  // out: another f32 matrix of T's shape, written through the same windows.
  const BufferRef& out = ow->buf;
  if (!static_f32_global(*out) || out->shape != T->shape || out == T || out == a->buf || out == b->buf ||
      ow->dims != tw->dims || ow->size != tw->size || ow->step != tw->step ||
      !same_exprs(ow->offset, tw->offset) || !same_exprs(ow->valid, tw->valid))
    return std::nullopt;
  for (const auto& [tile, w] : operands)
    if (w->buf == out) return std::nullopt;
  if (read_later(body, i, T)) return std::nullopt;
  e.out = View::whole(out);
  return e;
}

}  // namespace pypto::cpu
