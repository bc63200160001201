#include "passes/double_buffer.h"

#include "ir/mutator.h"
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

// At the top of every loop body, prefetches the next iteration's windows of the loads directly in
// that body that move with the loop.
class Prefetcher : public StmtMutator {
  Stmt mutate_for(const Stmt& s) override {
    Stmt n = StmtMutator::mutate_for(s);
    Expr next = var(s->var) + s->step;
    std::vector<Stmt> prefetch;
    for (auto& st : s->body)
      if (st->kind == StmtKind::OpStmt && st->op.code == Opcode::TLOAD) {
        const View& src = std::get<View>(st->op.args[1]);
        if (src.buf->space == Space::Global && mentions(src, s->var))
          prefetch.push_back(op_stmt(Op{Opcode::TPREFETCH, {shifted(src, s->var, next)}}));
      }
    if (prefetch.empty()) return n;
    auto c = std::make_shared<StmtNode>(*n);
    c->body.insert(c->body.begin(), if_then(cmp(ExprOp::Lt, next, s->hi), std::move(prefetch)));
    return c;
  }
  Stmt mutate_op(const Stmt& s) override { return s; }
};

}  // namespace

Program double_buffer(const Program& p) { return Prefetcher().mutate_program(p); }

}  // namespace pypto::passes
