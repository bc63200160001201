// Read-only walks over the IR (Halide/TVM style): the base class visits every statement, operand
// view and scalar expression; a pass overrides only the cases it looks at and calls the base
// method where it wants the walk to go on below.
#pragma once
#include <vector>

#include "ir/ir.h"

namespace pypto::ir {

// Scalar expressions: visit() calls visit_var on variables and recurses through every operand.
class ExprVisitor {
 public:
  virtual ~ExprVisitor() = default;
  virtual void visit(const Expr& e);

 protected:
  virtual void visit_var(const Expr&) {}
};

// Statements, in program order (pre-order: a loop before its body).
class StmtVisitor {
 public:
  virtual ~StmtVisitor() = default;
  // Each statement of a block in order (a pass that handles runs of statements overrides it).
  virtual void visit_block(const std::vector<Stmt>& body);
  // Dispatches on the statement's kind to the methods below.
  virtual void visit(const Stmt& s);

 protected:
  virtual void visit_seq(const StmtNode& s);
  virtual void visit_for(const StmtNode& s);  // lo, hi, step, then the body
  virtual void visit_if(const StmtNode& s);   // cond, then body, then orelse
  virtual void visit_let(const StmtNode& s);  // value
  virtual void visit_alloc(const StmtNode&) {}
  virtual void visit_op(const StmtNode& s);  // every operand: views and scalar expressions
  // An operand view; `written`: the destination of its instruction (operand 0, except for
  // TPREFETCH, which reads). The default visits its offsets and valid extents.
  virtual void visit_view(const View& v, bool written);
  virtual void visit_expr(const Expr&) {}
};

// Calls f on every (non-null) statement, pre-order, descending into loops, ifs and sequences.
template <class F>
void for_each_stmt(const std::vector<Stmt>& body, F&& f) {
  struct Each : StmtVisitor {
    F& f;
    explicit Each(F& fn) : f(fn) {}
    void visit(const Stmt& s) override {
      if (!s) return;
      f(s);
      StmtVisitor::visit(s);
    }
    void visit_op(const StmtNode&) override {}  // the statement itself is all f needs
  } each(f);
  each.visit_block(body);
}

// Calls f(view, written) on every operand view of every instruction.
template <class F>
void for_each_view(const std::vector<Stmt>& body, F&& f) {
  struct Each : StmtVisitor {
    F& f;
    explicit Each(F& fn) : f(fn) {}
    void visit_for(const StmtNode& s) override { visit_block(s.body); }
    void visit_if(const StmtNode& s) override {
      visit_block(s.body);
      visit_block(s.orelse);
    }
    void visit_view(const View& v, bool written) override { f(v, written); }
  } each(f);
  each.visit_block(body);
}

}  // namespace pypto::ir
