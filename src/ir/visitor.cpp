// The base walks of ir/visitor.h and ir/mutator.h.
#include "ir/visitor.h"

#include "ir/mutator.h"

namespace pypto::ir {

// ---- visitors ---------------------------------------------------------------------------------

void ExprVisitor::visit(const Expr& e) {
  if (!e) return;
  if (e->op == ExprOp::Var) return visit_var(e);
  for (const Expr& a : e->args) visit(a);
}

void StmtVisitor::visit_block(const std::vector<Stmt>& body) {
  for (const Stmt& s : body) visit(s);
}

void StmtVisitor::visit(const Stmt& s) {
  switch (s->kind) {
    case StmtKind::Seq:
      return visit_seq(*s);
    case StmtKind::For:
      return visit_for(*s);
    case StmtKind::If:
      return visit_if(*s);
    case StmtKind::Let:
      return visit_let(*s);
    case StmtKind::Alloc:
      return visit_alloc(*s);
    case StmtKind::OpStmt:
      return visit_op(*s);
  }
}

void StmtVisitor::visit_seq(const StmtNode& s) { visit_block(s.body); }

void StmtVisitor::visit_for(const StmtNode& s) {
  visit_expr(s.lo);
  visit_expr(s.hi);
  visit_expr(s.step);
  visit_block(s.body);
}

void StmtVisitor::visit_if(const StmtNode& s) {
  visit_expr(s.cond);
  visit_block(s.body);
  visit_block(s.orelse);
}

void StmtVisitor::visit_let(const StmtNode& s) { visit_expr(s.value); }

void StmtVisitor::visit_op(const StmtNode& s) {
  for (size_t i = 0; i < s.op.args.size(); ++i) {
    if (auto v = std::get_if<View>(&s.op.args[i]))
      visit_view(*v, i == 0 && s.op.code != Opcode::TPREFETCH);
    else
      visit_expr(std::get<Expr>(s.op.args[i]));
  }
}

void StmtVisitor::visit_view(const View& v, bool) {
  for (const Expr& e : v.offset) visit_expr(e);
  for (const Expr& e : v.valid) visit_expr(e);
}

// ---- mutators ---------------------------------------------------------------------------------

Expr ExprMutator::mutate(const Expr& e) {
  if (!e) return e;
  if (e->op == ExprOp::Var) return mutate_var(e);
  if (e->args.empty()) return e;
  std::vector<Expr> args;
  args.reserve(e->args.size());
  bool changed = false;
  for (const Expr& a : e->args) {
    args.push_back(mutate(a));
    changed |= args.back() != a;
  }
  if (!changed) return e;
  return make_expr(e->op, e->dtype, std::move(args));
}

bool same_stmts(const std::vector<Stmt>& a, const std::vector<Stmt>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i] != b[i]) return false;
  return true;
}

Program StmtMutator::mutate_program(const Program& p) {
  Program out = p;
  out.body = mutate_block(p.body);
  return out;
}

std::vector<Stmt> StmtMutator::mutate_block(const std::vector<Stmt>& body) {
  std::vector<Stmt> out;
  out.reserve(body.size());
  for (const Stmt& s : body) mutate_into(s, out);
  return out;
}

void StmtMutator::mutate_into(const Stmt& s, std::vector<Stmt>& out) { out.push_back(mutate(s)); }

Stmt StmtMutator::mutate(const Stmt& s) {
  switch (s->kind) {
    case StmtKind::Seq:
      return mutate_seq(s);
    case StmtKind::For:
      return mutate_for(s);
    case StmtKind::If:
      return mutate_if(s);
    case StmtKind::Let:
      return mutate_let(s);
    case StmtKind::Alloc:
      return mutate_alloc(s);
    case StmtKind::OpStmt:
      return mutate_op(s);
  }
  return s;
}

Stmt StmtMutator::with_bodies(const Stmt& s, std::vector<Stmt> body, std::vector<Stmt> orelse) {
  if (same_stmts(body, s->body) && same_stmts(orelse, s->orelse)) return s;
  auto n = std::make_shared<StmtNode>(*s);
  n->body = std::move(body);
  n->orelse = std::move(orelse);
  return n;
}

Stmt StmtMutator::mutate_seq(const Stmt& s) { return with_bodies(s, mutate_block(s->body), s->orelse); }

Stmt StmtMutator::mutate_for(const Stmt& s) {
  Expr lo = mutate_expr(s->lo), hi = mutate_expr(s->hi), step = mutate_expr(s->step);
  Stmt n = with_bodies(s, mutate_block(s->body), s->orelse);
  if (lo == s->lo && hi == s->hi && step == s->step) return n;
  auto c = std::make_shared<StmtNode>(*n);
  c->lo = lo;
  c->hi = hi;
  c->step = step;
  return c;
}

Stmt StmtMutator::mutate_if(const Stmt& s) {
  Expr cond = mutate_expr(s->cond);
  Stmt n = with_bodies(s, mutate_block(s->body), mutate_block(s->orelse));
  if (cond == s->cond) return n;
  auto c = std::make_shared<StmtNode>(*n);
  c->cond = cond;
  return c;
}

Stmt StmtMutator::mutate_let(const Stmt& s) {
  Expr v = mutate_expr(s->value);
  if (v == s->value) return s;
  auto c = std::make_shared<StmtNode>(*s);
  c->value = v;
  return c;
}

namespace {
bool same_view(const View& a, const View& b) {
  if (a.buf != b.buf || a.size != b.size || a.step != b.step || a.dims != b.dims) return false;
  for (size_t i = 0; i < a.offset.size(); ++i)
    if (a.offset[i] != b.offset[i]) return false;
  for (size_t i = 0; i < a.valid.size(); ++i)
    if (a.valid[i] != b.valid[i]) return false;
  return a.offset.size() == b.offset.size() && a.valid.size() == b.valid.size();
}
}  // namespace

Stmt StmtMutator::mutate_op(const Stmt& s) {
  std::vector<Operand> args;
  args.reserve(s->op.args.size());
  bool changed = false;
  for (const Operand& a : s->op.args) {
    if (auto v = std::get_if<View>(&a)) {
      View m = mutate_view(*v);
      changed |= !same_view(m, *v);
      args.push_back(std::move(m));
    } else {
      Expr e = mutate_expr(std::get<Expr>(a));
      changed |= e != std::get<Expr>(a);
      args.push_back(std::move(e));
    }
  }
  if (!changed) return s;
  auto c = std::make_shared<StmtNode>(*s);
  c->op.args = std::move(args);
  return c;
}

View StmtMutator::mutate_view(const View& v) {
  View out = v;
  for (Expr& e : out.offset) e = mutate_expr(e);
  for (Expr& e : out.valid) e = mutate_expr(e);
  return out;
}

Program replace_buffers(const Program& p, const std::map<const Buffer*, BufferRef>& to) {
  struct Replace : StmtMutator {
    const std::map<const Buffer*, BufferRef>& to;
    explicit Replace(const std::map<const Buffer*, BufferRef>& m) : to(m) {}
    void mutate_into(const Stmt& s, std::vector<Stmt>& out) override {
      if (s->kind == StmtKind::Alloc && to.count(s->buffer.get())) return;
      StmtMutator::mutate_into(s, out);
    }
    View mutate_view(const View& v) override {
      View out = StmtMutator::mutate_view(v);
      auto it = to.find(v.buf.get());
      if (it != to.end()) out.buf = it->second;
      return out;
    }
  };
  return Replace(to).mutate_program(p);
}

}  // namespace pypto::ir
