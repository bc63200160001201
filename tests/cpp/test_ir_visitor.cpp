// ir/visitor.h and ir/mutator.h: the base walks reach every statement, view and expression, a
// mutator that changes nothing returns the very same nodes, and one that overrides a single case
// rebuilds only the path to what it changed.
#include <gtest/gtest.h>

#include "ir/mutator.h"
#include "ir/parser.h"
#include "ir/printer.h"
#include "ir/visitor.h"

using namespace pypto::ir;

namespace {

const char* kProgram = R"(
func @walk(%A: f32[8, 8], %B: f32[8, 8] out, %n: i64) {
  alloc %t: f32[8, 8] gm
  for %i = 0 to %n step 4 {
    let %j = (%i + 1)
    if (%j < 8) {
      TADD %t[%i:4, 0:8], %A[%i:4, 0:8], 1.0f
    } else {
      TMUL %t[%i:4, 0:8], %A[%i:4, 0:8], 2.0f
    }
  }
  TMOV %B, %t
})";

struct Counter : StmtVisitor {
  int fors = 0, ifs = 0, lets = 0, allocs = 0, ops = 0, writes = 0, reads = 0;
  std::vector<std::string> vars;
  void visit_for(const StmtNode& s) override {
    ++fors;
    StmtVisitor::visit_for(s);
  }
  void visit_if(const StmtNode& s) override {
    ++ifs;
    StmtVisitor::visit_if(s);
  }
  void visit_let(const StmtNode& s) override {
    ++lets;
    StmtVisitor::visit_let(s);
  }
  void visit_alloc(const StmtNode&) override { ++allocs; }
  void visit_op(const StmtNode& s) override {
    ++ops;
    StmtVisitor::visit_op(s);
  }
  void visit_view(const View& v, bool written) override {
    ++(written ? writes : reads);
    StmtVisitor::visit_view(v, written);
  }
  void visit_expr(const Expr& e) override { collect_vars(e, vars); }
};

}  // namespace

TEST(IrVisitor, ReachesEveryStatementViewAndExpression) {
  Program p = parse_program(kProgram);
  Counter c;
  c.visit_block(p.body);
  EXPECT_EQ(c.fors, 1);
  EXPECT_EQ(c.ifs, 1);
  EXPECT_EQ(c.lets, 1);
  EXPECT_EQ(c.allocs, 1);
  EXPECT_EQ(c.ops, 3);
  EXPECT_EQ(c.writes, 3);
  EXPECT_EQ(c.reads, 3);
  std::sort(c.vars.begin(), c.vars.end());
  EXPECT_EQ(c.vars, (std::vector<std::string>{"i", "j", "n"}));  // bound, condition, offsets

  int stmts = 0, views = 0;
  for_each_stmt(p.body, [&](const Stmt&) { ++stmts; });
  for_each_view(p.body, [&](const View&, bool) { ++views; });
  EXPECT_EQ(stmts, 7);
  EXPECT_EQ(views, 6);
}

TEST(IrMutator, IdentityKeepsEveryNode) {
  Program p = parse_program(kProgram);
  StmtMutator identity;
  Program q = identity.mutate_program(p);
  ASSERT_EQ(q.body.size(), p.body.size());
  for (size_t i = 0; i < p.body.size(); ++i) EXPECT_EQ(q.body[i], p.body[i]);
}

namespace {
// Replaces the scalar 2.0 by 3.0 in instructions: only the else branch's op changes.
struct Scale : StmtMutator {
  Expr mutate_expr(const Expr& e) override {
    auto f = as_float(e);
    return f && *f == 2.0 ? float_imm(3.0) : e;
  }
};
// Renames the loop variable %i to %k wherever it is read, through an ExprMutator.
struct Rename : ExprMutator {
  Expr mutate_var(const Expr& e) override { return e->name == "i" ? var("k") : e; }
};
struct RenameInStmts : StmtMutator {
  Rename r;
  Expr mutate_expr(const Expr& e) override { return r.mutate(e); }
};
// Drops every TMOV and doubles every TADD (one statement into none or two).
struct Expand : StmtMutator {
  void mutate_into(const Stmt& s, std::vector<Stmt>& out) override {
    if (s->kind == StmtKind::OpStmt && s->op.code == Opcode::TMOV) return;
    StmtMutator::mutate_into(s, out);
    if (s->kind == StmtKind::OpStmt && s->op.code == Opcode::TADD) out.push_back(s);
  }
};
}  // namespace

TEST(IrMutator, RebuildsOnlyWhatChanged) {
  Program p = parse_program(kProgram);
  Program q = Scale().mutate_program(p);
  EXPECT_EQ(q.body[0], p.body[0]);  // the allocation
  EXPECT_NE(q.body[1], p.body[1]);  // the loop holding the change
  EXPECT_EQ(q.body[2], p.body[2]);  // the copy
  const Stmt& if_p = p.body[1]->body[1];
  const Stmt& if_q = q.body[1]->body[1];
  EXPECT_EQ(if_q->body[0], if_p->body[0]);  // the then branch's op is shared
  EXPECT_NE(if_q->orelse[0], if_p->orelse[0]);
  EXPECT_EQ(print(q).find("2.0f"), std::string::npos);
  EXPECT_NE(print(q).find("3.0f"), std::string::npos);
}

TEST(IrMutator, ExpressionsAndExpansion) {
  Program p = parse_program(kProgram);
  std::string renamed = print(RenameInStmts().mutate_program(p));
  EXPECT_NE(renamed.find("(%k + 1)"), std::string::npos) << renamed;
  EXPECT_NE(renamed.find("%A[%k:4"), std::string::npos) << renamed;
  EXPECT_NE(renamed.find("for %i"), std::string::npos) << renamed;  // the binding itself stays

  Program q = Expand().mutate_program(p);
  ASSERT_EQ(q.body.size(), 2u);  // the TMOV is gone
  EXPECT_EQ(q.body[1]->body[1]->body.size(), 2u);
  EXPECT_EQ(q.body[1]->body[1]->orelse.size(), 1u);
}
