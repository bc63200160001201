// Loop interchange for reuse (see interchange.h).
#include "passes/interchange.h"

#include <map>
#include <set>

#include "ir/mutator.h"
#include "ir/trip_count.h"
#include "ir/visitor.h"
#include "passes/pass_util.h"

namespace pypto::passes {
using namespace ir;

namespace {

constexpr int64_t kMinInnerTrips = 8;

std::optional<int64_t> static_trips(const StmtNode& s) {
  auto lo = as_int(s.lo), hi = as_int(s.hi), st = as_int(s.step);
  if (!lo || !hi || !st) return std::nullopt;
  return int64_t(trip_count(*lo, *hi, *st));
}

// The buffers a block writes and the variables it defines (loops, lets), at any depth.
struct Effects {
  std::set<const Buffer*> written;
  std::set<std::string> defined;
};
Effects effects_of(const std::vector<Stmt>& body) {
  struct V : StmtVisitor {
    Effects e;
    void visit_for(const StmtNode& s) override {
      e.defined.insert(s.var);
      StmtVisitor::visit_for(s);
    }
    void visit_let(const StmtNode& s) override {
      e.defined.insert(s.var);
      StmtVisitor::visit_let(s);
    }
    void visit_view(const View& v, bool written) override {
      if (written) e.written.insert(v.buf.get());
    }
  } v;
  v.visit_block(body);
  return v.e;
}

bool names_any(const Expr& e, const std::set<std::string>& vars) {
  std::vector<std::string> names;
  collect_vars(e, names);
  for (auto& n : names)
    if (vars.count(n)) return true;
  return false;
}
// Whether a statement names any of `vars` (in bounds, conditions, values, views).
bool names_any(const Stmt& s, const std::set<std::string>& vars) {
  struct V : StmtVisitor {
    const std::set<std::string>& vars;
    bool found = false;
    explicit V(const std::set<std::string>& v) : vars(v) {}
    void visit_expr(const Expr& e) override { found |= names_any(e, vars); }
  } v(vars);
  v.visit(s);
  return v.found;
}

// How many instructions of body write buffer b (as their destination, operand 0).
int writes_of(const std::vector<Stmt>& body, const Buffer* b) {
  int n = 0;
  walk(body, [&](const Stmt& s) {
    if (s->kind != StmtKind::OpStmt || s->op.code == Opcode::TPREFETCH || s->op.args.empty()) return;
    if (auto* v = std::get_if<View>(&s->op.args[0])) n += v->buf.get() == b;
  });
  return n;
}
// Whether an instruction in s names buffer b as an operand.
bool names_buffer(const Stmt& s, const Buffer* b) {
  bool found = false;
  walk({s}, [&](const Stmt& t) {
    if (t->kind != StmtKind::OpStmt) return;
    for (auto& a : t->op.args)
      if (auto* v = std::get_if<View>(&a)) found |= v->buf.get() == b;
  });
  return found;
}

// An `if` whose branch holds prefetches only (double_buffer's guarded TPREFETCHes).
bool only_prefetches(const Stmt& s) {
  bool ok = true;
  walk(s->body, [&](const Stmt& t) {
    if (t->kind == StmtKind::OpStmt)
      ok &= t->op.code == Opcode::TPREFETCH;
    else if (t->kind != StmtKind::Seq)
      ok = false;
  });
  return ok && s->orelse.empty();
}

// Whether an allocation in body sizes a buffer by an expression naming `var`.
bool sizes_by(const std::vector<Stmt>& body, const std::string& var) {
  bool found = false;
  walk(body, [&](const Stmt& t) {
    if (t->kind == StmtKind::Alloc)
      for (const Expr& e : t->buffer->dyn) found |= e && names_any(e, {var});
  });
  return found;
}

// body with variable `from` renamed `to` (a copy of a loop keeps the names distinct: ir.h).
std::vector<Stmt> renamed(const std::vector<Stmt>& body, const std::string& from, const std::string& to) {
  struct Rename : StmtMutator {
    std::map<std::string, Expr> repl;
    Expr mutate_expr(const Expr& e) override { return substitute(e, repl); }
  } r;
  r.repl[from] = var(to);
  return r.mutate_block(body);
}

// Every name a program defines: loop and let variables, parameters, buffers (fresh names for a
// copied loop's variable are chosen outside this set).
std::set<std::string> defined_names(const Program& p) {
  std::set<std::string> names = effects_of(p.body).defined;
  for (const auto& b : p.params) names.insert(b->name);
  for (const auto& sp : p.scalars) names.insert(sp.name);
  walk(p.body, [&](const Stmt& t) {
    if (t->kind == StmtKind::Alloc) names.insert(t->buffer->name);
  });
  return names;
}

class Interchange : public StmtMutator {
 public:
  explicit Interchange(std::set<std::string> names) : names_(std::move(names)) {}

 private:
  std::set<std::string> names_;

  Stmt mutate_for(const Stmt& s) override {
    Stmt n = StmtMutator::mutate_for(s);
    if (Stmt u = unswitch(n)) return u;
    return interchange(n);
  }

  // A parallel loop whose body is one `if` with a condition free of the loop's variable (the
  // variants tile_fused chooses between by a dynamic row width) becomes the `if`
  // over a copy of the loop in each branch, where a nest under a branch can then be interchanged.
  // Only done when a branch's loop is interchanged (null otherwise).
  Stmt unswitch(const Stmt& n) {
    if (n->loop_kind != LoopKind::Parallel || n->body.size() != 1 || n->body[0]->kind != StmtKind::If)
      return nullptr;
    const Stmt& branch = n->body[0];
    if (names_any(branch->cond, {n->var}) || sizes_by(n->body, n->var)) return nullptr;
    auto loop_over = [&](const std::vector<Stmt>& body, const std::string& v) {
      return for_loop(v, n->lo, n->hi, n->step, body, LoopKind::Parallel);
    };
    const Stmt then_loop = loop_over(branch->body, n->var);
    Stmt then_done = unswitch(then_loop);
    if (!then_done) then_done = interchange(then_loop);
    std::vector<Stmt> orelse;
    bool changed = then_done != then_loop;
    if (!branch->orelse.empty()) {
      std::string fresh;
      for (int k = 1; fresh.empty() || names_.count(fresh); ++k) fresh = n->var + "_" + std::to_string(k);
      names_.insert(fresh);
      const Stmt else_loop = loop_over(renamed(branch->orelse, n->var, fresh), fresh);
      Stmt else_done = unswitch(else_loop);
      if (!else_done) else_done = interchange(else_loop);
      changed |= else_done != else_loop;
      orelse.push_back(else_done);
    }
    if (!changed) return nullptr;
    auto out = std::make_shared<StmtNode>(*branch);  // keeps its label (tile_fused's kWideRowsElse)
    out->body = {then_done};
    out->orelse = std::move(orelse);
    return out;
  }

  Stmt interchange(const Stmt& n) {
    if (n->loop_kind != LoopKind::Parallel || n->body.size() != 1) return n;
    const Stmt& in = n->body[0];
    if (in->kind != StmtKind::For || in->loop_kind != LoopKind::Parallel) return n;
    const std::set<std::string> outer{n->var};
    if (names_any(in->lo, outer) || names_any(in->hi, outer) || names_any(in->step, outer)) return n;
    auto inner_trips = static_trips(*in), outer_trips = static_trips(*n);
    if (!inner_trips || (*inner_trips < kMinInnerTrips && (!outer_trips || *inner_trips < *outer_trips)))
      return n;
    Effects fx = effects_of(in->body);
    std::set<std::string> moving = fx.defined;
    moving.insert(n->var);
    std::vector<Stmt> allocs, hoisted, rest;
    std::set<const Buffer*> local;
    for (auto& st : in->body)
      if (st->kind == StmtKind::Alloc) local.insert(st->buffer.get());
    bool loads = false;
    for (auto& st : in->body) {
      if (st->kind == StmtKind::Alloc) {
        allocs.push_back(st);
        continue;
      }
      bool hoist = false;
      if (st->kind == StmtKind::OpStmt && st->op.code == Opcode::TLOAD && st->op.args.size() == 2) {
        const View& dst = std::get<View>(st->op.args[0]);
        const auto* src = std::get_if<View>(&st->op.args[1]);
        const Buffer* tile = dst.buf.get();
        bool named_before = false;
        for (auto& r : rest) named_before |= names_buffer(r, tile);
        hoist = src && src->buf->space == Space::Global && local.count(tile) && !names_any(st, moving) &&
                !fx.written.count(src->buf.get()) && writes_of(in->body, tile) == 1 && !named_before;
        loads |= hoist;
      } else if (st->kind == StmtKind::If && only_prefetches(st) && !names_any(st, moving)) {
        hoist = true;
      }
      (hoist ? hoisted : rest).push_back(st);
    }
    if (!loads) return n;
    std::vector<Stmt> body = std::move(allocs);
    body.insert(body.end(), hoisted.begin(), hoisted.end());
    body.push_back(for_loop(n->var, n->lo, n->hi, n->step, std::move(rest), LoopKind::Serial));
    return for_loop(in->var, in->lo, in->hi, in->step, std::move(body), LoopKind::Parallel);
  }
  Stmt mutate_op(const Stmt& s) override { return s; }
};

}  // namespace

Program interchange_for_reuse(const Program& p) { return Interchange(defined_names(p)).mutate_program(p); }

}  // namespace pypto::passes
