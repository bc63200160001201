// Builder core: parameters, control flow, creation, elementwise/reduce/matmul ops, stores, finish
// (views: builder_views.cpp).
#include "ir/builder.h"

#include <algorithm>
#include <climits>
#include <locale>
#include <sstream>
#include <utility>

#include "ir/builder_impl.h"
#include "ir/structural.h"
#include "ir/visitor.h"

namespace pypto::ir {

std::string shape_str(const std::vector<int64_t>& s) {
  std::ostringstream os;
  os.imbue(std::locale::classic());
  os << "(";
  // A dynamic dim (its bound, kDynamicBound) prints as '?': its extent is known at run time.
  for (size_t i = 0; i < s.size(); ++i) {
    os << (i ? ", " : "");
    if (s[i] == kDynamicBound)
      os << "?";
    else
      os << s[i];
  }
  if (s.size() == 1) os << ",";
  os << ")";
  return os.str();
}

int normalize_dim(int dim, int rank, const char* what) {
  int d = dim < 0 ? dim + rank : dim;
  if (d < 0 || d >= rank) {
    throw Error(std::string(what) + ": dimension " + std::to_string(dim) +
                " is out of range for a tensor of rank " + std::to_string(rank));
  }
  return d;
}

Expr min_valid(const Expr& a, const Expr& b) {
  if (!a) return b;
  if (!b) return a;
  return min(a, b);
}

DType operand_dtype(const Operand& o, DType tensor_dtype) {
  if (auto v = std::get_if<View>(&o)) return v->buf->dtype;
  // A Python scalar does not widen a tensor, except a float scalar with an integer tensor.
  const Expr& e = std::get<Expr>(o);
  if (is_float(e->dtype) && !is_float(tensor_dtype)) return DType::F32;
  return tensor_dtype;
}

// Valid extents of a broadcast result: each output dim takes the tightest extent of the operands
// that are not broadcast along it.
std::vector<Expr> broadcast_valid(const std::vector<int64_t>& out, const std::vector<const View*>& views) {
  std::vector<Expr> valid(out.size());
  for (const View* v : views) {
    auto shape = v->shape();
    auto vs = v->valid_shape();
    size_t off = out.size() - shape.size();
    for (size_t j = 0; j < shape.size(); ++j) {
      if (shape[j] == out[off + j]) valid[off + j] = min_valid(valid[off + j], vs[j]);
    }
  }
  for (size_t i = 0; i < out.size(); ++i)
    if (!valid[i]) valid[i] = int_imm(out[i]);
  return valid;
}

namespace {

DType promote(DType a, DType b) { return promote_types(a, b); }

const View* as_view(const Operand& o) { return std::get_if<View>(&o); }

bool is_unary_float_op(Opcode op) {
  switch (op) {
    case Opcode::TMOV:
    case Opcode::TNEG:
    case Opcode::TABS:
    case Opcode::TRELU:
    case Opcode::TNOT:
    case Opcode::TCEIL:
    case Opcode::TROUND:
    case Opcode::TTRUNC:
    case Opcode::TSIGN:
    case Opcode::TBNOT:
      return false;
    default:
      return true;
  }
}

}  // namespace

std::string Builder::Impl::fresh(const std::string& hint) {
  std::string base;
  for (char c : hint) base += (std::isalnum(static_cast<unsigned char>(c)) || c == '_') ? c : '_';
  if (base.empty() || std::isdigit(static_cast<unsigned char>(base[0]))) base = "t" + base;
  return names.fresh(base);
}

View Builder::Impl::new_temp(const std::vector<int64_t>& shape, DType dtype, const std::vector<Expr>& valid,
                             const std::string& hint) {
  auto b = std::make_shared<Buffer>();
  b->name = fresh(hint);
  b->dtype = dtype;
  b->shape = shape;
  b->space = Space::Global;
  b->kind = BufferKind::Temp;
  set_dynamic_extents(*b, valid);
  emit(alloc(b));
  View v = View::whole(b);
  if (!valid.empty()) {
    for (size_t i = 0; i < valid.size(); ++i) {
      auto c = as_int(valid[i]);
      v.valid[i] = (c && *c >= shape[i]) ? int_imm(shape[i]) : valid[i];
    }
  }
  return v;
}

std::vector<int64_t> Builder::Impl::traced_shape(const View& v) const {
  auto shape = v.shape();
  if (symbol_hints.empty()) return shape;
  auto valid = v.valid_shape();
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] != kDynamicBound) continue;
    std::vector<std::string> vars;
    collect_vars(valid[d], vars);
    if (std::all_of(vars.begin(), vars.end(),
                    [&](const std::string& n) { return symbol_hints.count(n) > 0; }))
      shape[d] = eval(valid[d], symbol_hints).i;
  }
  return shape;
}

void Builder::Impl::check_broadcast(const std::vector<const View*>& views) {
  if (views.size() < 2) return;
  if (!symbol_hints.empty()) {
    std::vector<int64_t> shape = traced_shape(*views[0]);
    for (size_t i = 1; i < views.size(); ++i) shape = broadcast_shapes(shape, traced_shape(*views[i]));
  }
  // Dims at the dynamic bound in two operands are not broadcast (a dynamic extent is never 1 at
  // trace time); their extents may still differ in a later call: check them then.
  size_t rank = 0;
  for (const View* v : views) rank = std::max(rank, size_t(v->rank()));
  for (size_t d = 0; d < rank; ++d) {
    Expr first;
    for (const View* v : views) {
      size_t off = rank - size_t(v->rank());
      if (d < off || v->shape()[d - off] != kDynamicBound) continue;
      Expr e = v->valid_shape()[d - off];
      if (!first) {
        first = e;
        continue;
      }
      auto diff = as_int(e - first);
      if (expr_equal(e, first) || (diff && *diff == 0)) continue;
      IndexCheck c;
      c.index = e;
      c.length = first;
      c.dim = int(d);
      c.same_extent = true;
      c.scopes = check_scopes();
      c.where = where;
      prog.index_checks.push_back(std::move(c));
    }
  }
}

void Builder::Impl::set_dynamic_extents(Buffer& b, const std::vector<Expr>& valid) const {
  for (int d = 0; d < b.rank(); ++d) {
    if (b.shape[size_t(d)] != kDynamicBound) continue;
    if (size_t(d) >= valid.size() || as_int(valid[size_t(d)]))
      throw Error("this operation does not take a dynamic dimension here (dimension " + std::to_string(d) +
                  " of its result would have no run-time extent): keep that dimension static");
    std::vector<std::string> vars;
    collect_vars(valid[size_t(d)], vars);
    for (auto& v : vars)
      if (!symbol_bounds.count(v))
        throw Error("the extent `" + to_string(valid[size_t(d)]) +
                    "` of a dynamic dimension of a temporary depends on %" + v +
                    ", not only on the arguments' dynamic dimensions");
    b.dyn.resize(b.shape.size());
    b.dyn[size_t(d)] = valid[size_t(d)];
  }
}

namespace {
std::optional<int64_t> upper(const Expr& e, const VarBounds& vb) {
  if (auto c = as_int(e)) return *c;
  if (e->op == ExprOp::Min) {
    std::optional<int64_t> best;
    for (auto& a : e->args)
      if (auto u = upper(a, vb)) best = best ? std::min(*best, *u) : *u;
    return best;
  }
  if (e->op == ExprOp::Max) {
    int64_t best = LLONG_MIN;
    for (auto& a : e->args) {
      auto u = upper(a, vb);
      if (!u) return std::nullopt;
      best = std::max(best, *u);
    }
    return best;
  }
  if (auto b = bounds(e, vb)) return b->hi;
  return std::nullopt;
}
}  // namespace

int64_t Builder::Impl::upper_bound(const Expr& e, int64_t fallback) const {
  auto u = upper(e, var_bounds);
  return u ? *u : fallback;
}

Builder::Builder(std::string name) : impl_(std::make_shared<Impl>()) {
  impl_->prog.name = std::move(name);
  impl_->frames.emplace_back();
}

std::vector<int64_t> Builder::broadcast_shapes(const std::vector<int64_t>& a, const std::vector<int64_t>& b) {
  size_t n = std::max(a.size(), b.size());
  std::vector<int64_t> out(n);
  for (size_t i = 0; i < n; ++i) {
    int64_t x = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int64_t y = i < n - b.size() ? 1 : b[i - (n - b.size())];
    if (x != y && x != 1 && y != 1)
      throw Error("shapes " + shape_str(a) + " and " + shape_str(b) + " cannot be broadcast together");
    out[i] = x == 1 ? y : x;
  }
  return out;
}

Builder Builder::extending(const Program& p) {
  Builder b(p.name);
  b.impl_->names = FreshNames(p);
  for (auto& buf : p.params) {
    // The dimension symbols of dynamic dims: the extents of new temporaries may use them.
    std::vector<std::string> symbols;
    for (const Expr& e : buf->dyn)
      if (e) collect_vars(e, symbols);
    for (auto& v : symbols) b.impl_->symbol_bounds[v] = Interval{0, kDynamicBound};
  }
  return b;
}

std::vector<Stmt> Builder::take_body() {
  if (impl_->frames.size() != 1) throw Error("internal: take_body inside an open loop or branch");
  std::vector<Stmt> out;
  out.swap(impl_->frames.back().stmts);
  return out;
}

std::string Builder::fresh_name(const std::string& hint) { return impl_->fresh(hint); }
void Builder::emit(Stmt s) { impl_->emit(std::move(s)); }
void Builder::set_location(std::string where) { impl_->where = std::move(where); }
std::string Builder::location(const StmtNode* s) const {
  auto it = impl_->locations.find(s);
  return it == impl_->locations.end() ? std::string() : it->second;
}
bool Builder::is_detached(const Buffer* b) const { return impl_->detached.count(b) > 0; }

View Builder::detach(const View& x) {
  View out = copy(x);
  impl_->detached.insert(out.buf.get());
  return out;
}

// --- signature -----------------------------------------------------------------------------

View Builder::add_param(const std::string& name, DType dtype, std::vector<int64_t> shape,
                        const std::vector<std::string>& symbols) {
  if (!symbols.empty() && symbols.size() != shape.size())
    throw Error("argument '" + name + "': one dimension symbol (or none) per dimension expected");
  // An empty dimension only as a symbol (its extent bound at run time; shapes are >= 1).
  for (size_t d = 0; d < shape.size(); ++d)
    if (shape[d] <= 0 && (symbols.empty() || symbols[d].empty()))
      throw Error("argument '" + name + "' has an empty dimension: shape " + shape_str(shape));
  auto b = std::make_shared<Buffer>();
  b->name = impl_->fresh(name);
  b->dtype = dtype;
  b->shape = std::move(shape);
  b->space = Space::Global;
  b->kind = BufferKind::Param;
  for (size_t d = 0; d < symbols.size(); ++d) {
    if (symbols[d].empty()) continue;
    b->dyn.resize(b->shape.size());
    auto [it, fresh] = impl_->symbol_vars.try_emplace(symbols[d]);
    if (fresh) {  // the first dim carrying a symbol binds it
      std::string n = impl_->fresh(symbols[d]);
      it->second = var(n);
      impl_->dim_symbols.push_back(ScalarParam{n, DType::I64, int(impl_->prog.params.size()), int(d)});
      impl_->symbol_bounds[n] = Interval{0, kDynamicBound};
    }
    impl_->symbol_hints.emplace(it->second->name, ScalarValue{false, b->shape[d], 0});
    b->shape[d] = kDynamicBound;
    b->dyn[d] = it->second;
  }
  impl_->prog.params.push_back(b);
  return View::whole(b);
}

Expr Builder::add_scalar_param(const std::string& name, DType dtype) {
  std::string n = impl_->fresh(name);
  impl_->prog.scalars.push_back(ScalarParam{n, dtype});
  return var(n, dtype);
}

// --- control flow ----------------------------------------------------------------------------

Expr Builder::begin_for(const std::string& hint, Expr lo, Expr hi, Expr step, bool parallel) {
  auto s = as_int(step);
  if (!s || *s <= 0)
    throw Error("a loop step must be a positive compile-time integer, got " + to_string(step));
  Impl::Frame f;
  f.kind = Impl::Frame::For;
  f.var = impl_->fresh(hint.empty() ? "i" : hint);
  f.lo = lo;
  f.hi = hi;
  f.step = step;
  f.parallel = parallel;
  f.where = impl_->where;
  auto lb = bounds(lo, impl_->var_bounds);
  auto ub = impl_->upper_bound(hi, LLONG_MIN);
  if (ub == LLONG_MIN && !impl_->symbol_bounds.empty()) {  // a loop up to a dynamic extent
    VarBounds all = impl_->symbol_bounds;
    all.insert(impl_->var_bounds.begin(), impl_->var_bounds.end());
    if (auto u = upper(hi, all)) ub = *u;
  }
  if (lb && ub != LLONG_MIN) impl_->var_bounds[f.var] = Interval{lb->lo, std::max(lb->lo, ub - 1)};
  Expr v = var(f.var);
  impl_->frames.push_back(std::move(f));
  return v;
}

void Builder::end_for() {
  if (impl_->frames.back().kind != Impl::Frame::For) throw Error("end_for without a matching begin_for");
  Impl::Frame f = std::move(impl_->frames.back());
  impl_->frames.pop_back();
  impl_->var_bounds.erase(f.var);
  std::string body_where = std::exchange(impl_->where, f.where);  // the loop is its header's line
  impl_->emit(for_loop(f.var, f.lo, f.hi, f.step, std::move(f.stmts),
                       f.parallel ? LoopKind::Parallel : LoopKind::Serial));
  impl_->where = std::move(body_where);
}

void Builder::begin_if(Expr cond) {
  Impl::Frame f;
  f.kind = Impl::Frame::Then;
  f.cond = cond;
  impl_->frames.push_back(std::move(f));
}

void Builder::begin_else() {
  auto& f = impl_->frames.back();
  if (f.kind != Impl::Frame::Then) throw Error("begin_else without a matching begin_if");
  f.then_stmts = std::move(f.stmts);
  f.stmts.clear();
  f.kind = Impl::Frame::Else;
}

void Builder::end_if() {
  auto kind = impl_->frames.back().kind;
  if (kind != Impl::Frame::Then && kind != Impl::Frame::Else)
    throw Error("end_if without a matching begin_if");
  Impl::Frame f = std::move(impl_->frames.back());
  impl_->frames.pop_back();
  if (kind == Impl::Frame::Then)
    impl_->emit(if_then(f.cond, std::move(f.stmts)));
  else
    impl_->emit(if_then(f.cond, std::move(f.then_stmts), std::move(f.stmts)));
}

void Builder::begin_group(const std::string& label) {
  if (impl_->group_depth++ == 0)
    impl_->group = Impl::Group{label, impl_->frames.size(), impl_->frames.back().stmts.size()};
}

void Builder::end_group() {
  if (impl_->group_depth == 0) throw Error("end_group without a matching begin_group");
  if (--impl_->group_depth > 0) return;
  const Impl::Group& g = impl_->group;
  if (impl_->frames.size() != g.frames) return;  // (a call that failed halfway: the trace is abandoned)
  std::vector<Stmt>& stmts = impl_->frames.back().stmts;
  // Allocations and lets go in front of the group: a pass that gives a block's allocations a
  // meaning (autodiff's adjoints) then sees them where it would without the label.
  std::vector<Stmt> decls, group;
  for (size_t i = g.start; i < stmts.size(); ++i) {
    const bool decl = stmts[i]->kind == StmtKind::Alloc || stmts[i]->kind == StmtKind::Let;
    (decl ? decls : group).push_back(stmts[i]);
  }
  if (group.size() < 2) return;
  stmts.resize(g.start);
  stmts.insert(stmts.end(), decls.begin(), decls.end());
  Stmt s = seq(std::move(group));
  s->var = g.name;
  impl_->emit(std::move(s));
}

// Index arithmetic stays inline (no Let) so bounds analysis sees through names like `end_i`.
Expr Builder::let(const std::string&, Expr value) { return value; }

// --- creation --------------------------------------------------------------------------------

View Builder::empty(std::vector<int64_t> shape, DType dtype, const std::vector<Expr>& extents) {
  for (auto s : shape)
    if (s <= 0)
      throw Error("cannot create a tensor of shape " + shape_str(shape) + ": every dimension must be >= 1");
  if (extents.empty()) return impl_->new_temp(shape, dtype, {});
  if (extents.size() != shape.size()) throw Error("empty: one extent (or none) per dimension expected");
  std::vector<Expr> valid;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (extents[d]) shape[d] = kDynamicBound;  // a dynamic dim: its extent is an expression of symbols
    valid.push_back(extents[d] ? extents[d] : int_imm(shape[d]));
  }
  return impl_->new_temp(shape, dtype, valid);
}

View Builder::full(std::vector<int64_t> shape, DType dtype, Expr value, const std::vector<Expr>& extents) {
  View t = empty(std::move(shape), dtype, extents);
  impl_->emit_op(Opcode::TEXPANDS, {t, value});
  return t;
}

View Builder::arange(Expr start, int64_t n, Expr step, DType dtype, const Expr& extent) {
  if (!extent && n <= 0) throw Error("arange: empty range");
  const std::vector<Expr> extents = extent ? std::vector<Expr>{extent} : std::vector<Expr>{};
  const int64_t size = extent ? 1 : n;  // (empty() puts the bound in a dynamic dim)
  // Each step writes a new buffer: autodiff cannot recompute a value that is later updated in place
  // (a reversed arange is flip's gather index).
  View t = empty({size}, dtype, extents);
  impl_->emit_op(Opcode::TCI, {t, int_imm(0)});
  auto step_to = [&](Opcode op, const Expr& s) {
    View next = empty({size}, dtype, extents);
    impl_->emit_op(op, {next, t, s});
    t = next;
  };
  if (!(as_int(step) && *as_int(step) == 1)) step_to(Opcode::TMUL, step);
  if (!(as_int(start) && *as_int(start) == 0)) step_to(Opcode::TADD, start);
  return t;
}

// --- compute ---------------------------------------------------------------------------------

View Builder::Impl::result(const std::vector<const View*>& operands, const std::vector<int64_t>& shape,
                           DType dtype, const std::vector<Expr>& valid) {
  for (const View* v : operands) {
    if (!v || !donated.count(v->buf.get())) continue;
    if (!v->is_whole() || v->buf->dtype != dtype || v->shape() != shape) continue;
    bool same_valid = true;
    auto vs = v->valid_shape();
    for (size_t i = 0; i < vs.size() && i < valid.size(); ++i) same_valid &= expr_equal(vs[i], valid[i]);
    if (!same_valid) continue;
    donated.erase(v->buf.get());
    return *v;
  }
  return new_temp(shape, dtype, valid);
}

View Builder::inplace(const View& x) {
  if (!x.is_whole())
    throw Error("inplace: needs a whole tensor (an argument or a result), not a view into one");
  impl_->donated.insert(x.buf.get());
  return x;
}

View Builder::unary(Opcode op, const View& x) {
  if (opcode_info(op).category != OpCategory::Unary)
    throw Error(std::string(opcode_name(op)) + " is not a unary op");
  DType t = x.buf->dtype;
  if (op == Opcode::TBNOT && (is_float(t) || t == DType::Bool))
    throw Error("bitwise_not: needs an integer tensor, got " + std::string(dtype_name(t)));
  if (op == Opcode::TNOT)
    t = DType::Bool;
  else if (is_unary_float_op(op) && !is_float(t))
    t = DType::F32;
  View out = impl_->result({&x}, x.shape(), t, x.valid_shape());
  impl_->emit_op(op, {out, x});
  return out;
}

View Builder::binary(Opcode op, const Operand& a, const Operand& b) {
  auto cat = opcode_info(op).category;
  if (cat != OpCategory::Binary && cat != OpCategory::Compare)
    throw Error(std::string(opcode_name(op)) + " is not a binary op");
  const View* va = as_view(a);
  const View* vb = as_view(b);
  if (!va && !vb) throw Error(std::string(opcode_name(op)) + " needs at least one tensor operand");
  std::vector<int64_t> shape;
  std::vector<const View*> views;
  for (const View* v : {va, vb})
    if (v) {
      shape = views.empty() ? v->shape() : broadcast_shapes(shape, v->shape());
      views.push_back(v);
    }
  impl_->check_broadcast(views);
  DType base = va ? va->buf->dtype : vb->buf->dtype;
  DType t = promote(operand_dtype(a, base), operand_dtype(b, base));
  if (cat == OpCategory::Compare || op == Opcode::TAND || op == Opcode::TOR)
    t = DType::Bool;
  else if ((op == Opcode::TDIV || op == Opcode::TATAN2 || op == Opcode::THYPOT || op == Opcode::TCOPYSIGN) &&
           !is_float(t))
    t = DType::F32;
  else if (op == Opcode::TPOW && !is_float(t)) {
    // An integer tensor to a non-negative integer constant power stays an exact integer; other
    // integer powers are computed in f32, as they may be fractions.
    const Expr* e = std::get_if<Expr>(&b);
    auto k = e && !is_float((*e)->dtype) ? as_int(*e) : std::nullopt;
    if (!va || !k || *k < 0) t = DType::F32;
  }
  const bool int_only = op == Opcode::TGCD || op == Opcode::TBAND || op == Opcode::TBOR ||
                        op == Opcode::TBXOR || op == Opcode::TSHL || op == Opcode::TSHR;
  if (int_only && is_float(t))
    throw Error(std::string(opcode_name(op)) + ": needs integer or bool tensors, got " +
                std::string(dtype_name(t)));
  View out = impl_->result(views, shape, t, broadcast_valid(shape, views));
  impl_->emit_op(op, {out, a, b});
  return out;
}

View Builder::select(const Operand& cond, const Operand& a, const Operand& b) {
  const View* vc = as_view(cond);
  if (!vc) throw Error("where: the condition must be a tensor");
  std::vector<const View*> views{vc};
  std::vector<int64_t> shape = vc->shape();
  for (const Operand* o : {&a, &b})
    if (auto v = as_view(*o)) {
      shape = broadcast_shapes(shape, v->shape());
      views.push_back(v);
    }
  impl_->check_broadcast(views);
  DType base = DType::F32;
  if (auto v = as_view(a))
    base = v->buf->dtype;
  else if (auto w = as_view(b))
    base = w->buf->dtype;
  DType t = promote(operand_dtype(a, base), operand_dtype(b, base));
  View out = impl_->new_temp(shape, t, broadcast_valid(shape, views));
  impl_->emit_op(Opcode::TSEL, {out, cond, a, b});
  return out;
}

View Builder::cast(const View& x, DType t) {
  View out = impl_->new_temp(x.shape(), t, x.valid_shape());
  impl_->emit_op(Opcode::TCVT, {out, x});
  return out;
}

View Builder::copy(const View& x) {
  View out = impl_->new_temp(x.shape(), x.buf->dtype, x.valid_shape());
  impl_->emit_op(Opcode::TMOV, {out, x});
  return out;
}

View Builder::reduce(Opcode row_op, const View& x, std::vector<int> dims, bool keepdim) {
  if (row_op != Opcode::TROWSUM && row_op != Opcode::TROWMAX && row_op != Opcode::TROWMIN)
    throw Error("reduce: expected TROWSUM, TROWMAX or TROWMIN");
  int r = x.rank();
  if (r == 0) throw Error("cannot reduce a 0-d tensor");
  if (dims.empty())
    for (int i = 0; i < r; ++i) dims.push_back(i);
  for (auto& d : dims) d = normalize_dim(d, r, "reduce");
  std::sort(dims.begin(), dims.end());
  dims.erase(std::unique(dims.begin(), dims.end()), dims.end());
  View cur = x;
  for (auto it = dims.rbegin(); it != dims.rend(); ++it) {
    int d = *it;
    std::vector<int> perm;
    for (int i = 0; i < r; ++i)
      if (i != d) perm.push_back(i);
    perm.push_back(d);
    View xp = permute(cur, perm);
    auto shape = xp.shape();
    auto valid = xp.valid_shape();
    shape.back() = 1;
    valid.back() = int_imm(1);
    DType t = cur.buf->dtype;
    if (row_op == Opcode::TROWSUM && !is_float(t)) t = DType::I64;
    View acc = impl_->new_temp(shape, t, valid);
    impl_->emit_op(row_op, {acc, xp});
    // Back to the original dimension order: result dim d is acc's last dim.
    View back = acc;
    for (int p = 0; p < r; ++p) back.dims[p] = p < d ? p : (p == d ? r - 1 : p - 1);
    cur = back;
  }
  if (!keepdim)
    for (auto it = dims.rbegin(); it != dims.rend(); ++it) cur = squeeze(cur, *it);
  return cur;
}

View Builder::mean(const View& x, std::vector<int> dims, bool keepdim) {
  int r = x.rank();
  if (dims.empty())
    for (int i = 0; i < r; ++i) dims.push_back(i);
  Expr count = int_imm(1);
  auto vs = x.valid_shape();
  std::vector<bool> seen(r, false);
  for (int d : dims) {
    int n = normalize_dim(d, r, "mean");
    if (!seen[n]) count = count * vs[n];
    seen[n] = true;
  }
  View src = is_float(x.buf->dtype) ? x : cast(x, DType::F32);
  View s = reduce(Opcode::TROWSUM, src, dims, keepdim);
  // Divide by the count in the sum's own type (as torch does): a reciprocal rounded to f32 would
  // lose precision in f64 means.
  DType t = compute_dtype(s.buf->dtype);
  Expr n = as_int(count) ? float_imm(double(*as_int(count)), t) : ir::cast(count, t);
  return binary(Opcode::TDIV, s, n);
}

// --- stores ----------------------------------------------------------------------------------

namespace {
// dst[...] = src (and dst op= src) broadcasts src to dst's shape as NumPy does: each dimension
// of src equals dst's or is 1. The valid-region rule adds one case in the last two dimensions: a
// larger static tile may cover a smaller (edge) destination, storing its valid part. A smaller
// source is refused, as NumPy refuses it: it would leave part of the destination unwritten.
void check_store(const std::vector<int64_t>& dst, const std::vector<int64_t>& src, const char* what) {
  bool ok = src.size() <= dst.size();
  for (size_t i = 0; ok && i < src.size(); ++i) {
    int64_t s = src[src.size() - 1 - i], d = dst[dst.size() - 1 - i];
    ok = s == d || s == 1 || (i < 2 && s > d);
  }
  if (!ok)
    throw Error(std::string(what) + ": cannot store a tensor of shape " + shape_str(src) +
                " into a slice of shape " + shape_str(dst));
}
}  // namespace

// A source that reads the destination's buffer through another window (x[1:] = x[:-1],
// x[...] = x.T) is copied first, so the store computes as if the right side were read whole
// before any element is written (NumPy's rule). The same window is read and written in
// lockstep by every instruction, so it needs no copy.
Operand Builder::Impl::unaliased(const View& dst, const Operand& src) {
  const View* v = std::get_if<View>(&src);
  if (!v || v->buf != dst.buf || structural::equal(*v, dst)) return src;
  View t = new_temp(v->shape(), v->buf->dtype, v->valid_shape(), "copy");
  emit_op(Opcode::TMOV, {t, *v});
  return t;
}

void Builder::assign(const View& dst, const Operand& src) {
  if (auto v = as_view(src)) {
    check_store(dst.shape(), v->shape(), "assignment");
    impl_->emit_op(Opcode::TMOV, {dst, impl_->unaliased(dst, src)});
  } else {
    impl_->emit_op(Opcode::TEXPANDS, {dst, src});
  }
}

void Builder::update(Opcode op, const View& dst, const Operand& src) {
  auto cat = opcode_info(op).category;
  if (cat != OpCategory::Binary) throw Error("in-place update needs a binary op");
  if (auto v = as_view(src)) check_store(dst.shape(), v->shape(), "in-place update");
  impl_->emit_op(op, {dst, dst, impl_->unaliased(dst, src)});
}

Program Builder::finish(const std::vector<View>& outputs) {
  if (impl_->frames.size() != 1) throw Error("finish: a loop or if is still open");
  auto& root = impl_->frames[0].stmts;
  for (const View& v : outputs) {
    auto it = std::find_if(root.begin(), root.end(),
                           [&](const Stmt& s) { return s->kind == StmtKind::Alloc && s->buffer == v.buf; });
    if (v.is_whole() && v.buf->kind == BufferKind::Temp && it != root.end()) {
      root.erase(it);
      v.buf->kind = BufferKind::Output;
      impl_->prog.params.push_back(v.buf);
      continue;
    }
    auto b = std::make_shared<Buffer>();
    b->name = impl_->fresh("out");
    b->dtype = v.buf->dtype;
    b->shape = v.shape();
    b->kind = BufferKind::Output;
    impl_->set_dynamic_extents(*b, v.valid_shape());
    impl_->prog.params.push_back(b);
    impl_->emit_op(Opcode::TMOV, {View::whole(b), v});
  }
  impl_->prog.body = root;
  Program p = impl_->prog;
  p.scalars.insert(p.scalars.end(), impl_->dim_symbols.begin(), impl_->dim_symbols.end());
  return p;
}

}  // namespace pypto::ir
