// Rewriting walks over the IR (Halide/TVM style): the base class rebuilds every statement from
// its mutated parts, and a pass overrides only the cases it changes. Nodes are copied on change
// only: a statement (or expression) whose parts all come back identical is returned as is, so
// untouched subtrees stay shared with the input program.
#pragma once
#include <map>
#include <vector>

#include "ir/ir.h"

namespace pypto::ir {

// Scalar expressions, rebuilt bottom-up through the simplifying constructor (make_expr).
class ExprMutator {
 public:
  virtual ~ExprMutator() = default;
  virtual Expr mutate(const Expr& e);

 protected:
  virtual Expr mutate_var(const Expr& e) { return e; }
};

class StmtMutator {
 public:
  virtual ~StmtMutator() = default;
  // The program with its body mutated (params, scalars and checks kept).
  Program mutate_program(const Program& p);
  // A block: each statement through mutate_into, in order. A pass that rewrites runs of
  // consecutive statements (fusion) overrides this.
  virtual std::vector<Stmt> mutate_block(const std::vector<Stmt>& body);

 protected:
  // Appends what statement s becomes to out (none, one or many statements); the default appends
  // mutate(s). A pass that expands one statement into several overrides this.
  virtual void mutate_into(const Stmt& s, std::vector<Stmt>& out);
  // Dispatches on the statement's kind to the methods below.
  Stmt mutate(const Stmt& s);
  virtual Stmt mutate_seq(const Stmt& s);
  virtual Stmt mutate_for(const Stmt& s);  // lo, hi, step and the body
  virtual Stmt mutate_if(const Stmt& s);   // cond, then and else bodies
  virtual Stmt mutate_let(const Stmt& s);  // value
  virtual Stmt mutate_alloc(const Stmt& s) { return s; }
  virtual Stmt mutate_op(const Stmt& s);  // each operand through mutate_view / mutate_expr
  // An operand view; the default mutates its offsets and valid extents.
  virtual View mutate_view(const View& v);
  virtual Expr mutate_expr(const Expr& e) { return e; }

  // s with new bodies (a copy only when one differs from s's own).
  static Stmt with_bodies(const Stmt& s, std::vector<Stmt> body, std::vector<Stmt> orelse);
};

// The program with each buffer of `to` replaced by its image in every view and its allocation
// dropped (the image is allocated elsewhere, or is a parameter).
Program replace_buffers(const Program& p, const std::map<const Buffer*, BufferRef>& to);

// Whether two statement lists hold the same statements (by identity).
bool same_stmts(const std::vector<Stmt>& a, const std::vector<Stmt>& b);

// The body with f(block) applied to every block in it, each after the blocks nested in it (f
// edits a block in place: erases, inserts or replaces its statements).
template <class F>
std::vector<Stmt> rewrite_blocks(const std::vector<Stmt>& body, F&& f) {
  struct Each : StmtMutator {
    F& f;
    explicit Each(F& fn) : f(fn) {}
    std::vector<Stmt> mutate_block(const std::vector<Stmt>& b) override {
      std::vector<Stmt> out = StmtMutator::mutate_block(b);
      f(out);
      return out;
    }
  } each(f);
  return each.mutate_block(body);
}

}  // namespace pypto::ir
