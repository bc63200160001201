// Reverse-mode differentiation of a tensor-level program: the driver (forward analysis, replay,
// reverse sweep, dead code elimination, parameter pruning). The per-opcode derivative rules are
// in autodiff_rules.cpp; the strategy is described in autodiff.h.
#include "passes/autodiff.h"

#include <algorithm>

#include "ir/builder_impl.h"
#include "ir/mutator.h"
#include "ir/printer.h"
#include "passes/autodiff_impl.h"
#include "passes/dead_code.h"
#include "passes/lower_composites.h"
#include "passes/pass_util.h"

namespace pypto::passes {
namespace ad {

using namespace ir;

namespace {

bool same_view(const View& a, const View& b) {
  if (a.buf != b.buf || a.size != b.size || a.step != b.step || a.dims != b.dims) return false;
  for (size_t i = 0; i < a.offset.size(); ++i)
    if (!expr_equal(a.offset[i], b.offset[i]) || !expr_equal(a.valid[i], b.valid[i])) return false;
  return true;
}

}  // namespace

bool in_place_linear(const Op& op) {
  if (op.code == Opcode::TMATMUL_ACC) return true;
  if (op.code != Opcode::TADD && op.code != Opcode::TSUB) return false;
  const View* src = view_of(op.args[1]);
  return src && same_view(std::get<View>(op.args[0]), *src);
}

// The sources an instruction reads (the accumulator of an in-place linear update excluded).
std::vector<const View*> sources(const Op& op) {
  std::vector<const View*> out;
  bool skip_first = in_place_linear(op) && op.code != Opcode::TMATMUL_ACC;
  for (size_t i = 1; i < op.args.size(); ++i) {
    if (i == 1 && skip_first) continue;
    if (auto v = view_of(op.args[i])) out.push_back(v);
  }
  return out;
}

// Records each statement's position and enclosing loops, and each buffer's writes and reads.
class Differentiator::Analysis : public StmtVisitor {
 public:
  explicit Analysis(Differentiator& d) : d_(d) {}
  void visit(const Stmt& s) override {
    auto& info = d_.stmts_[s.get()];
    info.pos = int(d_.stmts_.size());
    info.loops = loops_;
    StmtVisitor::visit(s);
  }

 private:
  Differentiator& d_;
  std::vector<const StmtNode*> loops_;

  void visit_alloc(const StmtNode& s) override { d_.bufs_[s.buffer.get()].loops_at_alloc = loops_; }
  void visit_op(const StmtNode& s) override {
    if (auto dst = s.op.args.empty() ? nullptr : view_of(s.op.args[0]))
      d_.bufs_[dst->buf.get()].writes.push_back(&s);
    for (const View* v : sources(s.op)) d_.bufs_[v->buf.get()].reads.push_back(&s);
  }
  void visit_for(const StmtNode& s) override {
    loops_.push_back(&s);
    visit_block(s.body);
    loops_.pop_back();
  }
  void visit_if(const StmtNode& s) override {
    visit_block(s.body);
    visit_block(s.orelse);
  }
};

Differentiator::Differentiator(const Program& forward, const Locate& locate, const std::vector<bool>& wanted,
                               const IsDetached& detached, bool save_products)
    : fwd_(forward),
      locate_(locate),
      wanted_(wanted),
      detached_(detached),
      save_products_(save_products),
      b_(forward.name + "_backward") {
  Analysis(*this).visit_block(forward.body);
}

// Whether buffer b, read at statement s, may hold another value by the time the backward reads
// it: written later in program order, or in a later iteration of a loop around s that does not
// also own b. `before_write`: the read happens before s's own write (a source, not the result).
bool Differentiator::stale(const Buffer* b, const StmtNode* s, bool before_write) const {
  auto it = bufs_.find(b);
  if (it == bufs_.end()) return false;
  const auto& si = stmts_.at(s);
  const auto& own = it->second.loops_at_alloc;
  for (const StmtNode* w : it->second.writes) {
    const auto& wi = stmts_.at(w);
    // A loop around both that carries b on a tape: each iteration's sweep starts from the value b
    // had when the iteration began, so only an earlier write in the same iteration is a problem.
    const StmtNode* taped = nullptr;
    for (const StmtNode* loop : wi.loops)
      if (std::find(si.loops.begin(), si.loops.end(), loop) != si.loops.end() && carried(loop).count(b))
        taped = loop;
    if (taped) {
      if (wi.pos < si.pos || (before_write && w == s)) return true;
      continue;
    }
    if (wi.pos > si.pos || (before_write && w == s)) return true;
    for (const StmtNode* loop : wi.loops) {
      bool around_s = std::find(si.loops.begin(), si.loops.end(), loop) != si.loops.end();
      bool owns_b = std::find(own.begin(), own.end(), loop) != own.end();
      if (around_s && !owns_b) return true;
    }
  }
  return false;
}

namespace {
// Whether each iteration of `loop` writes its own window of dst: some base dim's offset is the
// loop variable times k, and its window no wider than k steps (a reshape's or a tile loop's rows).
bool disjoint_windows(const View& dst, const StmtNode* loop) {
  auto step = as_int(loop->step);
  if (!step || *step <= 0) return false;
  for (size_t d = 0; d < dst.offset.size(); ++d) {
    const int64_t size = dst.size[d] * std::max<int64_t>(dst.step[d], 1);
    auto k = var_multiple(dst.offset[d], loop->var);
    if (k && *k * *step >= size) return true;
  }
  return false;
}
}  // namespace

bool Differentiator::overwritten(const Buffer* b) const {
  if (b->kind == BufferKind::Param) return true;  // an argument written: its old value dies
  auto it = bufs_.find(b);
  if (it == bufs_.end()) return false;
  if (it->second.writes.size() > 1) return true;
  // One write, in loops the buffer's allocation is not in: an earlier value dies unless every
  // such loop writes a window of its own per iteration.
  const auto& own = it->second.loops_at_alloc;
  for (const StmtNode* w : it->second.writes) {
    const View* dst = w->op.args.empty() ? nullptr : view_of(w->op.args[0]);
    for (const StmtNode* loop : stmts_.at(w).loops) {
      if (std::find(own.begin(), own.end(), loop) != own.end()) continue;
      if (!dst || !disjoint_windows(*dst, loop)) return true;
    }
  }
  return false;
}

// Buffers a loop carries from one iteration to the next: allocated outside it, written in it and
// read in it (an in-place linear accumulator's own read excluded: it needs no value).
const std::set<const Buffer*>& Differentiator::carried(const StmtNode* loop) const {
  auto found = carried_.find(loop);
  if (found != carried_.end()) return found->second;
  std::set<const Buffer*> written, read, out;
  walk(loop->body, [&](const Stmt& s) {
    if (s->kind != StmtKind::OpStmt || s->op.args.empty()) return;
    if (auto d = view_of(s->op.args[0])) written.insert(d->buf.get());
    for (const View* v : sources(s->op)) read.insert(v->buf.get());
  });
  for (const Buffer* b : written) {
    if (!read.count(b)) continue;
    const auto& own = bufs_.at(b).loops_at_alloc;
    if (std::find(own.begin(), own.end(), loop) == own.end()) out.insert(b);
  }
  return carried_[loop] = out;
}

// Iterations must be swept last to first when one reads what an earlier one wrote.
bool Differentiator::needs_reversal(const StmtNode* loop) const { return !carried(loop).empty(); }

namespace {
// Iteration number of a loop's variable: (v - lo) / step.
Expr iteration(const Expr& v, const Expr& lo, const Expr& step) { return div(v - lo, step); }
}  // namespace

// The tape of a loop-carried buffer: one slot per iteration, holding its value as the iteration
// begins; the sweep of that iteration replays the body from it. Needs a static trip count.
BufferRef Differentiator::new_tape(const StmtNode* loop, const Buffer& b, const Env& env) {
  Expr trips = div(substitute(loop->hi, env.vars) - substitute(loop->lo, env.vars) +
                       substitute(loop->step, env.vars) - int_imm(1),
                   substitute(loop->step, env.vars));
  auto n = as_int(trips);
  // A trip count of dimension symbols alone (a loop over a dynamic length) sizes the tape at run
  // time, as any dynamic temp; one of loop variables or scalars cannot size a buffer.
  std::vector<std::string> vars;
  collect_vars(trips, vars);
  bool of_symbols = !n && !vars.empty() && std::all_of(vars.begin(), vars.end(), [&](const std::string& v) {
    return std::any_of(symbols_.begin(), symbols_.end(),
                       [&](const auto& s) { return s.second->op == ExprOp::Var && s.second->name == v; });
  });
  if (!n && !of_symbols)
    refuse(loop, "the loop carries %" + b.name + " from one iteration to the next, and its trip count (" +
                     to_string(trips) +
                     ") is neither known at compile time nor a function of the dynamic "
                     "dims, so its values cannot be kept");
  BufferRef tape = buffer_like(b);
  tape->name = b_.fresh_name("tape_" + b.name);
  tape->space = Space::Global;
  tape->kind = BufferKind::Temp;
  tape->shape.insert(tape->shape.begin(), n ? std::max<int64_t>(*n, 1) : kDynamicBound);
  if (!n || tape->is_dynamic()) {
    tape->dyn.resize(size_t(b.rank()));
    tape->dyn.insert(tape->dyn.begin(), n ? Expr() : max(trips, int_imm(1)));
  }
  b_.emit(alloc(tape));
  return tape;
}

View Differentiator::tape_slot(const BufferRef& tape, const Expr& it) {
  std::vector<Index> idx(1);
  idx[0].kind = Index::Int;
  idx[0].start = it;
  return b_.slice(View::whole(tape), idx);
}

void Differentiator::refuse(const StmtNode* s, const std::string& why) const {
  std::string where = locate_ ? locate_(s) : std::string();
  std::string text = s->kind == StmtKind::OpStmt ? print(s->op) : std::string("a statement");
  throw Error("cannot differentiate kernel '" + fwd_.name + "'" + (where.empty() ? "" : " at " + where) +
              ": " + why + " (in `" + text + "`); write its backward by hand with @kernel.defvjp");
}

View Differentiator::mapped(const View& v, const Env& env) const {
  View out = v;
  auto it = env.bufs.find(v.buf.get());
  if (it != env.bufs.end()) out.buf = it->second;
  for (auto& e : out.offset) e = substitute(e, env.vars);
  for (auto& e : out.valid) e = substitute(e, env.vars);
  return out;
}

Operand Differentiator::mapped(const Operand& o, const Env& env) const {
  if (auto v = view_of(o)) return mapped(*v, env);
  return substitute(std::get<Expr>(o), env.vars);
}

bool Differentiator::has_adjoint(const Operand& o) const {
  auto v = view_of(o);
  return v && adj_.count(v->buf.get());
}

View Differentiator::adjoint(const View& v, const Env& env) const {
  View out = mapped(v, env);
  out.buf = adj_.at(v.buf.get());
  return out;
}

Operand Differentiator::value(const Operand& o, const StmtNode* s, const Env& env, bool is_result) const {
  if (auto v = view_of(o))
    if (stale(v->buf.get(), s, !is_result))
      refuse(s,
             "its derivative needs the value of %" + v->buf->name +
                 " at this point, but the kernel overwrites it later (a value carried across loop iterations "
                 "or updated in place non-linearly, or an argument read and then written)");
  return mapped(o, env);
}

Expr Differentiator::constant(double v, const View& like) const {
  return float_imm(v, like.buf->dtype == DType::F64 ? DType::F64 : DType::F32);
}

View Differentiator::summed_to(const Operand& src, View c) {
  auto as = std::get<View>(src).shape(), cs = c.shape();
  if (as == cs) return c;
  int R = int(cs.size()), r = int(as.size()), lead = R - r;
  std::vector<int> dims;
  for (int j = 0; j < R; ++j)
    if (j < lead || (as[j - lead] == 1 && cs[j] != 1)) dims.push_back(j);
  if (!dims.empty()) c = b_.reduce(Opcode::TROWSUM, c, dims, true);
  for (int j = 0; j < lead; ++j) c = b_.squeeze(c, 0);
  return c;
}

void Differentiator::accumulate(const Operand& src, View c, const Env& env, bool subtract) {
  if (!has_adjoint(src)) return;
  View a = adjoint(std::get<View>(src), env);
  c = summed_to(src, c);
  // Only the region the contribution covers changes (the forward computed no more than that).
  auto cv = c.valid_shape();
  auto ashape = a.shape();
  auto cshape = c.shape();
  for (int j = 0; j < a.rank(); ++j) {
    int bd = a.dims[j];
    if (ashape[j] == cshape[j]) a.valid[bd] = min_valid(a.valid[bd], cv[j]);
  }
  // The same permutation on both sides (a transposed weight's gradient): the add in the base order.
  if (a.rank() == c.rank() && a.dims == c.dims && !std::is_sorted(a.dims.begin(), a.dims.end())) {
    std::vector<size_t> order(a.dims.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(), [&](size_t x, size_t y) { return a.dims[x] < a.dims[y]; });
    std::vector<int> sorted;
    for (size_t i : order) sorted.push_back(a.dims[i]);
    a.dims = c.dims = sorted;
  }
  b_.update(subtract ? Opcode::TSUB : Opcode::TADD, a, c);
}

// A copy of the forward statements for the current scope: buffers allocated here get fresh
// names; writes into buffers not allocated in this replay (results, or values of an enclosing
// scope) are dropped, since the backward holds their values already.
class Differentiator::Replay : public StmtVisitor {
 public:
  Replay(Differentiator& d, Env& env, std::set<const Buffer*>& local) : d_(d), env_(env), local_(local) {}

 private:
  Differentiator& d_;
  Env& env_;
  std::set<const Buffer*>& local_;

  void visit_alloc(const StmtNode& s) override {
    if (d_.saved_products_.count(s.buffer.get())) return;  // its value comes from the forward
    auto nb = d_.buffer_like(*s.buffer);
    nb->name = d_.b_.fresh_name(s.buffer->name);
    env_.bufs[s.buffer.get()] = nb;
    local_.insert(s.buffer.get());
    d_.b_.emit(alloc(nb));
  }
  void visit_let(const StmtNode& s) override {
    Expr v = substitute(s.value, env_.vars);
    std::string n = d_.b_.fresh_name(s.var);
    d_.b_.emit(let(n, v));
    env_.vars[s.var] = var(n, v->dtype);
  }
  void visit_op(const StmtNode& s) override {
    auto d = s.op.args.empty() ? nullptr : view_of(s.op.args[0]);
    if (!d || !local_.count(d->buf.get())) return;
    Op op{s.op.code, {}};
    for (const Operand& a : s.op.args) op.args.push_back(d_.mapped(a, env_));
    Stmt ns = op_stmt(std::move(op));
    d_.replayed_[ns.get()] = &s;
    if (d_.replaying_in_order_) d_.replayed_in_order_.insert(ns.get());
    d_.b_.emit(ns);
  }
  void visit_for(const StmtNode& s) override {
    Builder& b = d_.b_;
    Env inner = env_;
    std::vector<std::pair<const Buffer*, BufferRef>> tapes;
    for (const Buffer* c : d_.carried(&s)) tapes.push_back({c, d_.tapes_[&s][c] = d_.new_tape(&s, *c, env_)});
    Expr lo = substitute(s.lo, env_.vars), step = substitute(s.step, env_.vars);
    Expr v = b.begin_for(s.var, lo, substitute(s.hi, env_.vars), step, s.loop_kind == LoopKind::Parallel);
    inner.vars[s.var] = v;
    for (auto& [c, tape] : tapes)
      b.assign(d_.tape_slot(tape, iteration(v, lo, step)), View::whole(env_.bufs.at(c)));
    Replay(d_, inner, local_).visit_block(s.body);
    b.end_for();
  }
  void visit_if(const StmtNode& s) override {
    d_.b_.begin_if(substitute(s.cond, env_.vars));
    Env then_env = env_;
    Replay(d_, then_env, local_).visit_block(s.body);
    if (!s.orelse.empty()) {
      d_.b_.begin_else();
      Env else_env = env_;
      Replay(d_, else_env, local_).visit_block(s.orelse);
    }
    d_.b_.end_if();
  }
};

// A copy of the forward statements for the current scope: buffers allocated here get fresh
// names; writes into buffers not allocated in this replay (results, or values of an enclosing
// scope) are dropped, since the backward holds their values already.
void Differentiator::replay(const std::vector<Stmt>& body, Env& env, std::set<const Buffer*>& local) {
  Replay(*this, env, local).visit_block(body);
}

BufferRef Differentiator::new_adjoint(const Buffer& like) {
  Builder& b = b_;
  auto nb = buffer_like(like);
  adjoint_buffers_.insert(nb.get());
  nb->name = b.fresh_name("d_" + like.name);
  nb->space = Space::Global;
  nb->kind = BufferKind::Temp;
  b.emit(alloc(nb));
  b.assign(View::whole(nb), float_imm(0.0, like.dtype == DType::F64 ? DType::F64 : DType::F32));
  return nb;
}

Expr Differentiator::extent_in_backward(const Expr& e) const {
  std::vector<std::string> vars;
  collect_vars(e, vars);
  for (const auto& v : vars)
    if (!symbols_.count(v))
      throw Error("autodiff: internal error: the extent `" + to_string(e) + "` names %" + v +
                  ", not a dimension symbol bound before it");
  return substitute(e, symbols_);
}

BufferRef Differentiator::buffer_like(const Buffer& like) {
  auto nb = std::make_shared<Buffer>(like);
  for (auto& e : nb->dyn)
    if (e) e = extent_in_backward(e);
  return nb;
}

View Differentiator::add_param_like(const Buffer& p, const std::string& name) {
  // A dim whose extent is a forward symbol not yet bound binds the backward's (the first param of
  // the forward binding it is an input, added first here too); other dynamic dims are expressions
  // of symbols bound before.
  std::vector<std::string> names;
  if (p.is_dynamic()) {
    names.resize(size_t(p.rank()));
    for (int d = 0; d < p.rank(); ++d) {
      const Expr& e = p.dyn[size_t(d)];
      if (e && e->op == ExprOp::Var && !symbols_.count(e->name) &&
          std::any_of(fwd_.scalars.begin(), fwd_.scalars.end(),
                      [&](const ScalarParam& s) { return s.is_dim_symbol() && s.name == e->name; }))
        names[size_t(d)] = e->name;
    }
  }
  View v = b_.add_param(name.empty() ? p.name : name, p.dtype, p.shape, names);
  if (!p.is_dynamic()) return v;
  for (int d = 0; d < p.rank(); ++d)
    if (!names.empty() && !names[size_t(d)].empty()) symbols_[names[size_t(d)]] = v.buf->dyn[size_t(d)];
  bool exprs = false;
  for (int d = 0; d < p.rank(); ++d)
    if (p.is_dynamic(d) && names[size_t(d)].empty()) {
      v.buf->dyn.resize(size_t(p.rank()));
      v.buf->dyn[size_t(d)] = extent_in_backward(p.dyn[size_t(d)]);
      v.buf->shape[size_t(d)] = kDynamicBound;
      exprs = true;
    }
  return exprs ? View::whole(v.buf) : v;
}

// The statements of a block in reverse, each through its derivative rule; the adjoints of the
// block's own allocations start at zero.
class Differentiator::Sweep : public StmtVisitor {
 public:
  Sweep(Differentiator& d, Env& env) : d_(d), env_(env) {}

  void visit_block(const std::vector<Stmt>& body) override {
    for (const Stmt& s : body)
      if (s->kind == StmtKind::Alloc && is_float(s->buffer->dtype) &&
          !(d_.detached_ && d_.detached_(s->buffer.get())))
        d_.adj_[s->buffer.get()] = d_.new_adjoint(*s->buffer);
    for (auto it = body.rbegin(); it != body.rend(); ++it) visit(*it);
  }

 private:
  Differentiator& d_;
  Env& env_;

  void visit_op(const StmtNode& s) override { d_.rule(&s, env_); }
  void visit_let(const StmtNode&) override {}  // replayed with its scope
  void visit_for(const StmtNode& s) override {
    Builder& b = d_.b_;
    Env inner = env_;
    Expr lo = substitute(s.lo, env_.vars), hi = substitute(s.hi, env_.vars),
         step = substitute(s.step, env_.vars);
    if (d_.needs_reversal(&s)) {
      Expr trips = div(hi - lo + step - int_imm(1), step);
      Expr u = b.begin_for(s.var + "_rev", int_imm(0), trips, int_imm(1));
      inner.vars[s.var] = lo + (trips - int_imm(1) - u) * step;
    } else {
      inner.vars[s.var] = b.begin_for(s.var, lo, hi, step);
    }
    // The loop-carried values as this iteration began, from their tapes.
    for (const Buffer* c : d_.carried(&s)) {
      auto nb = d_.buffer_like(*c);
      nb->name = b.fresh_name(c->name);
      nb->kind = BufferKind::Temp;
      b.emit(alloc(nb));
      b.assign(View::whole(nb), d_.tape_slot(d_.tapes_.at(&s).at(c), iteration(inner.vars[s.var], lo, step)));
      inner.bufs[c] = nb;
    }
    scope(s.body, inner);
    b.end_for();
  }
  void visit_if(const StmtNode& s) override {
    d_.b_.begin_if(substitute(s.cond, env_.vars));
    Env then_env = env_;
    scope(s.body, then_env);
    if (!s.orelse.empty()) {
      d_.b_.begin_else();
      Env else_env = env_;
      scope(s.orelse, else_env);
    }
    d_.b_.end_if();
  }
  // A loop body or branch: its forward values replayed, then swept.
  void scope(const std::vector<Stmt>& body, Env& env) {
    std::set<const Buffer*> local;
    d_.replay(body, env, local);
    Sweep(d_, env).visit_block(body);
  }
};

void Differentiator::sweep(const std::vector<Stmt>& body, Env& env) { Sweep(*this, env).visit_block(body); }

namespace {
// Whether `b`'s dim d has exactly the extent of symbol `s`: a dim the runtime can bind it from.
bool binds(const Buffer& b, int d, const ScalarParam& s) {
  const Expr& e = b.is_dynamic(d) ? b.dyn[size_t(d)] : Expr();
  return e && e->op == ExprOp::Var && e->name == s.name;
}

int binding_dim(const Buffer& b, const ScalarParam& s) {
  for (int d = 0; d < b.rank(); ++d)
    if (binds(b, d, s)) return d;
  return -1;
}

// A dimension symbol is bound from the shape of an input: the param binding it stays even where
// the backward reads none of its elements (x.sum(-1)'s backward reads only the cotangent).
void keep_symbol_binders(const Program& p, std::set<const Buffer*>& used) {
  for (const ScalarParam& s : p.scalars) {
    if (!s.is_dim_symbol()) continue;
    bool bound = std::any_of(p.params.begin(), p.params.end(), [&](const BufferRef& b) {
      return b->kind != BufferKind::Output && used.count(b.get()) && binding_dim(*b, s) >= 0;
    });
    if (!bound) used.insert(p.params[size_t(s.param)].get());
  }
}

// After pruning the params: each symbol bound by the first input with a dim of its extent.
void rebind_dim_symbols(Program& p) {
  for (ScalarParam& s : p.scalars) {
    if (!s.is_dim_symbol()) continue;
    s.param = -1;
    for (size_t i = 0; i < p.params.size() && s.param < 0; ++i)
      if (p.params[i]->kind != BufferKind::Output && (s.dim = binding_dim(*p.params[i], s)) >= 0)
        s.param = int(i);
    if (s.param < 0) throw Error("autodiff: internal error: no input binds the dimension symbol %" + s.name);
  }
}
}  // namespace

Backward Differentiator::run() {
  Backward out;
  Env env;
  // Results: outputs, then arguments the kernel writes into.
  for (size_t i = 0; i < fwd_.params.size(); ++i)
    if (fwd_.params[i]->kind == BufferKind::Output) out.results.push_back(int(i));
  for (size_t i = 0; i < fwd_.params.size(); ++i)
    if (fwd_.params[i]->kind == BufferKind::Param && !bufs_[fwd_.params[i].get()].writes.empty())
      out.results.push_back(int(i));
  std::vector<std::pair<BufferRef, Backward::Arg>> roles;
  for (size_t i = 0; i < fwd_.params.size(); ++i) {
    const Buffer& p = *fwd_.params[i];
    View v = add_param_like(p);
    env.bufs[&p] = v.buf;
    bool result = std::find(out.results.begin(), out.results.end(), int(i)) != out.results.end();
    roles.push_back({v.buf, {result ? Backward::Role::Saved : Backward::Role::Input, int(i)}});
  }
  for (const ScalarParam& s : fwd_.scalars)
    if (s.is_dim_symbol())
      env.vars[s.name] = symbols_.at(s.name);  // bound by a param above
    else
      env.vars[s.name] = b_.add_scalar_param(s.name, s.dtype);
  std::vector<const Buffer*> saves = products_to_save();
  for (size_t k = 0; k < saves.size(); ++k) {
    View v = add_param_like(*saves[k]);
    env.bufs[saves[k]] = saved_products_[saves[k]] = v.buf;
    roles.push_back({v.buf, {Backward::Role::Saved, int(fwd_.params.size() + k)}});
  }
  // Adjoints of the results start as their cotangents.
  for (int r : out.results) {
    const Buffer& p = *fwd_.params[r];
    if (!is_float(p.dtype)) continue;
    View cot = add_param_like(p, "d_" + p.name);
    roles.push_back({cot.buf, {Backward::Role::Cotangent, r}});
    bool read_only = p.kind == BufferKind::Output && !overwritten(&p) && bufs_[&p].reads.empty();
    adj_[&p] = read_only ? cot.buf : b_.copy(cot).buf;
  }
  // Gradients of the inputs (an argument the kernel writes into: of its value before the call).
  std::vector<View> grads;
  for (size_t i = 0; i < fwd_.params.size(); ++i) {
    const Buffer& p = *fwd_.params[i];
    if (p.kind != BufferKind::Param || !is_float(p.dtype)) continue;
    bool want = wanted_.empty() || (i < wanted_.size() && wanted_[i]);
    if (!want && !adj_.count(&p)) continue;  // (a written argument's adjoint carries its cotangent)
    if (!adj_.count(&p)) adj_[&p] = new_adjoint(p);
    if (!want) continue;
    grads.push_back(View::whole(adj_.at(&p)));
    out.grads.push_back(int(i));
  }
  std::set<const Buffer*> local;
  // An output the kernel also reads (a value carried through it) is recomputed in a temporary:
  // its saved value is only the last one.
  for (auto& p : fwd_.params)
    if (p->kind == BufferKind::Output && !bufs_[p.get()].reads.empty()) {
      auto nb = buffer_like(*p);
      nb->name = b_.fresh_name(p->name + "_value");
      nb->kind = BufferKind::Temp;
      b_.emit(alloc(nb));
      env.bufs[p.get()] = nb;
      local.insert(p.get());
    }
  replaying_in_order_ = true;
  replay(fwd_.body, env, local);
  replaying_in_order_ = false;
  sweep(fwd_.body, env);
  out.program = b_.finish(grads);
  out.program = eliminate_dead_code(out.program);
  {
    std::map<const Buffer*, int> reads;
    walk(out.program.body, [&](const Stmt& s) {
      if (s->kind != StmtKind::OpStmt) return;
      for (size_t i = 1; i < s->op.args.size(); ++i)
        if (auto v = view_of(s->op.args[i])) ++reads[v->buf.get()];
    });
    write_first_contributions(out.program.body, adjoint_buffers_, reads);
    accumulate_products(out.program.body, adjoint_buffers_, reads);
    forward_copies(out.program);
    out.program = eliminate_dead_code(out.program);
  }
  // A replayed value must still be what it was at its forward statement: a later write is
  // harmless only where the whole-program replay, in forward order, makes it too (a buffer it
  // holds locally, e.g. a mask built by masked_fill_ on a fresh tensor).
  walk(out.program.body, [&](const Stmt& s) {
    auto it = replayed_.find(s.get());
    if (it == replayed_.end()) return;
    const bool in_order = replayed_in_order_.count(s.get()) > 0;
    for (const View* v : sources(it->second->op)) {
      const Buffer* fb = v->buf.get();
      if (in_order && local.count(fb)) continue;
      if (stale(fb, it->second, true))
        refuse(it->second,
               "recomputing it needs the value of %" + fb->name +
                   " at this point, but the kernel overwrites it later (a value carried across loop "
                   "iterations or updated in place)");
    }
  });
  // Keep only the parameters the backward reads: the caller saves no more than that.
  std::set<const Buffer*> used;
  used_buffers(out.program.body, used);
  keep_symbol_binders(out.program, used);
  std::vector<BufferRef> params;
  for (auto& p : out.program.params) {
    if (p->kind == BufferKind::Output) {
      params.push_back(p);
      continue;
    }
    auto role = std::find_if(roles.begin(), roles.end(), [&](auto& r) { return r.first == p; });
    if (!used.count(p.get())) continue;
    params.push_back(p);
    out.args.push_back(role->second);
  }
  out.program.params = std::move(params);
  rebind_dim_symbols(out.program);
  // The saved products the backward still reads, renumbered after the forward's params.
  std::vector<const Buffer*> kept;
  for (auto& a : out.args)
    if (a.role == Backward::Role::Saved && a.param >= int(fwd_.params.size())) {
      kept.push_back(saves[size_t(a.param) - fwd_.params.size()]);
      a.param = int(fwd_.params.size() + kept.size() - 1);
    }
  if (!kept.empty()) out.forward_with_saves = forward_with_saves(kept);
  return out;
}

// Temps the backward takes from the forward's run instead of recomputing them: allocated at the
// top level (dynamic dims are outputs of the forward like any) and computed by one top-level statement (an
// op, or a loop that writes them in parts: the heads of an attention), read only after it, so their final
// value is the one every reader sees; and costly to recompute (a matmul computes them) or free to keep (a
// matmul reads them, so the forward writes them to memory anyway: a layer norm's or GELU's output
// feeding the next linear layer). An elementwise value nothing but elementwise ops read is
// recomputed: the fused forward never writes it, and saving it would add that write and a read
// where recomputing reads the inputs the backward reads anyway. Which are kept is decided by what
// the backward still reads after dead code elimination.
std::vector<const Buffer*> Differentiator::products_to_save() const {
  std::vector<const Buffer*> out;
  if (!save_products_) return out;
  auto matrix = [](const StmtNode* s) {
    return s->kind == StmtKind::OpStmt && opcode_info(s->op.code).category == OpCategory::Matrix;
  };
  auto top = [&](const StmtNode* s) {  // the top-level statement s is in (s itself at the top)
    const StmtInfo& info = stmts_.at(s);
    return info.loops.empty() ? s : info.loops.front();
  };
  std::set<const StmtNode*> with_matmul;  // top-level statements that are or hold a matmul
  for (const auto& st : stmts_)
    if (matrix(st.first)) with_matmul.insert(top(st.first));
  for (const Stmt& s : fwd_.body) {
    if (s->kind != StmtKind::Alloc) continue;
    const Buffer* b = s->buffer.get();
    auto it = bufs_.find(b);
    if (b->kind != BufferKind::Temp || !is_float(b->dtype) || it == bufs_.end() || it->second.writes.empty())
      continue;
    bool static_shape = std::all_of(b->shape.begin(), b->shape.end(), [](int64_t d) { return d > 0; });
    const StmtNode* producer = top(it->second.writes[0]);
    bool one_producer = std::all_of(it->second.writes.begin(), it->second.writes.end(),
                                    [&](const StmtNode* w) { return top(w) == producer; });
    // A lone op must write all of it (a partial write keeps the rest of an earlier value).
    bool whole = producer->kind != StmtKind::OpStmt || std::get<View>(producer->op.args[0]).is_whole();
    bool computed_by_matmul = with_matmul.count(producer) > 0;
    bool read_by_matmul = std::any_of(it->second.reads.begin(), it->second.reads.end(), matrix);
    int end = stmts_.at(producer).pos;
    bool read_after = std::all_of(it->second.reads.begin(), it->second.reads.end(), [&](const StmtNode* r) {
      return top(r) != producer && stmts_.at(r).pos > end;
    });
    if (static_shape && one_producer && whole && read_after && (computed_by_matmul || read_by_matmul))
      out.push_back(b);
  }
  return out;
}

// The forward with some temps made outputs (appended to its params, in order).
Program Differentiator::forward_with_saves(const std::vector<const Buffer*>& saves) const {
  std::map<const Buffer*, BufferRef> to;
  for (const Buffer* b : saves) {
    auto nb = std::make_shared<Buffer>(*b);
    nb->kind = BufferKind::Output;
    to[b] = nb;
  }
  Program p = replace_buffers(fwd_, to);
  for (const Buffer* b : saves) p.params.push_back(to.at(b));
  return p;
}

}  // namespace ad

Backward autodiff(const ir::Program& forward, const Locate& locate, const std::vector<bool>& wanted,
                  const IsDetached& detached, bool save_products) {
  // Composites are differentiated through their expansion (the derivative rules cover
  // instructions); the expansion keeps every buffer, so `detached` still names them.
  // Those with a dedicated formula (ad::composites_with_rules) stay whole: the expansion keeps the
  // op itself, in a group labelled with its name.
  std::map<ir::Opcode, CompositeLowering> keep;
  for (ir::Opcode c : ad::composites_with_rules())
    keep[c] = [](ir::Builder& b, const ir::Op& op) { b.emit(ir::op_stmt(op)); };
  return ad::Differentiator(lower_composites(forward, keep), locate, wanted, detached, save_products).run();
}

}  // namespace pypto::passes
