#include "passes/double_buffer.h"

#include "passes/pass_util.h"

namespace pypto::passes {
using namespace ir;

namespace {

View shifted(const View& v, const std::string& var, const Expr& next) {
  View out = v;
  std::map<std::string, Expr> repl{{var, next}};
  for (auto& e : out.offset) e = substitute(e, repl);
  for (auto& e : out.valid) e = max(substitute(e, repl), int_imm(0));
  return out;
}

std::vector<Stmt> rewrite(const std::vector<Stmt>& body) {
  std::vector<Stmt> out;
  for (auto& s : body) {
    if (s->kind != StmtKind::For && s->kind != StmtKind::If) {
      out.push_back(s);
      continue;
    }
    auto n = std::make_shared<StmtNode>(*s);
    n->body = rewrite(s->body);
    n->orelse = rewrite(s->orelse);
    if (s->kind == StmtKind::For) {
      Expr next = var(s->var) + s->step;
      std::vector<Stmt> prefetch;
      for (auto& st : s->body)  // loads directly in this body that move with the loop
        if (st->kind == StmtKind::OpStmt && st->op.code == Opcode::TLOAD) {
          const View& src = std::get<View>(st->op.args[1]);
          if (src.buf->space == Space::Global && mentions(src, s->var))
            prefetch.push_back(op_stmt(Op{Opcode::TPREFETCH, {shifted(src, s->var, next)}}));
        }
      if (!prefetch.empty())
        n->body.insert(n->body.begin(), if_then(cmp(ExprOp::Lt, next, s->hi), std::move(prefetch)));
    }
    out.push_back(n);
  }
  return out;
}

}  // namespace

Program double_buffer(const Program& p) {
  Program out = p;
  out.body = rewrite(p.body);
  return out;
}

}  // namespace pypto::passes
