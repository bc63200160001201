// Reuse of global temporaries by lifetime (see reuse_temporaries.h).
#include "passes/reuse_temporaries.h"

#include <algorithm>
#include <map>
#include <optional>

#include "ir/mutator.h"
#include "ir/visitor.h"

namespace pypto::passes {
using namespace ir;

namespace {

// Dynamic dims share the bound as their shape: of two buffers of one shape, the same memory fits
// both only when their run-time extents are the same too ([%m, %n] is not [%n, %m]).
bool same_dynamic_extents(const Buffer& a, const Buffer& b) {
  for (int d = 0; d < a.rank(); ++d)
    if (a.is_dynamic(d) && !(b.is_dynamic(d) && expr_equal(a.dyn[size_t(d)], b.dyn[size_t(d)]))) return false;
  return true;
}

bool same_window(const View& a, const View& b) {
  if (a.size != b.size || a.step != b.step || a.dims != b.dims || a.offset.size() != b.offset.size())
    return false;
  for (size_t d = 0; d < a.offset.size(); ++d)
    if (!expr_equal(a.offset[d], b.offset[d]) || !expr_equal(a.valid[d], b.valid[d])) return false;
  return true;
}

// Whether statement s reads `old` and writes `young` only tile by tile through one window that
// each iteration of its loops moves to a disjoint place (every loop advances some dim's offset,
// exactly its variable, by at least the window's size), every read of an iteration before its
// write: then `young` may live in `old`'s buffer.
class InPlace : public StmtVisitor {
 public:
  InPlace(const Buffer* old, const Buffer* young) : old_(old), young_(young) {}
  bool ok(const Stmt& s) {
    visit(s);
    return ok_ && window_;
  }

 private:
  const Buffer *old_, *young_;
  std::vector<const StmtNode*> loops_;
  std::optional<View> window_;
  bool ok_ = true, written_ = false;

  void visit_for(const StmtNode& s) override {
    loops_.push_back(&s);
    visit_block(s.body);
    loops_.pop_back();
  }
  void visit_if(const StmtNode&) override { ok_ = false; }
  void visit_op(const StmtNode& s) override {
    // A whole-matrix product reads whole rows and columns of its operands for every element it
    // writes: never in place.
    if (s.op.code == Opcode::MMATMUL || s.op.code == Opcode::MMATMUL_ACC)
      for (const Operand& a : s.op.args)
        if (auto v = std::get_if<View>(&a); v && (v->buf.get() == old_ || v->buf.get() == young_))
          ok_ = false;
    // Within one instruction the destination (operand 0) is written after the sources are read.
    for (size_t i = 1; i < s.op.args.size(); ++i)
      if (auto v = std::get_if<View>(&s.op.args[i])) access(*v, false);
    if (!s.op.args.empty())
      if (auto v = std::get_if<View>(&s.op.args[0])) access(*v, s.op.code != Opcode::TPREFETCH);
  }
  void access(const View& v, bool write) {
    if (v.buf.get() != old_ && v.buf.get() != young_) return;
    if (write != (v.buf.get() == young_) || (!write && written_)) {
      ok_ = false;  // the old buffer written, the new one read, or a read after a write
      return;
    }
    written_ |= write;
    if (!moves_with_loops(v) || (window_ && !same_window(*window_, v))) ok_ = false;
    window_ = v;
  }
  bool moves_with_loops(const View& v) const {
    for (const StmtNode* l : loops_) {
      auto step = as_int(l->step);
      bool moves = false;
      for (size_t d = 0; d < v.offset.size() && step; ++d)
        moves |=
            v.offset[d]->op == ExprOp::Var && v.offset[d]->name == l->var && *step >= v.size[d] * v.step[d];
      if (!moves) return false;
    }
    return true;
  }
};

struct Life {
  BufferRef buf;
  size_t alloc = 0, first = SIZE_MAX, last = 0;
  const Buffer* tenant = nullptr;  // as a home: the temporary it holds now (its name in the input)
};

// The program's statements with labelled groups (public op calls, passes/fuse.cpp) opened: a
// label is for the reader, so lifetimes count statements as if it were not there.
std::vector<Stmt> top_level(const std::vector<Stmt>& body) {
  struct Open : StmtVisitor {
    std::vector<Stmt> stmts;
    void visit(const Stmt& s) override {
      if (s->kind == StmtKind::Seq)
        StmtVisitor::visit(s);
      else
        stmts.push_back(s);
    }
  } open;
  open.visit_block(body);
  return std::move(open.stmts);
}

}  // namespace

Program reuse_temporaries(const Program& p) {
  std::map<const Buffer*, Life> lives;
  std::vector<const Buffer*> order;
  const std::vector<Stmt> top = top_level(p.body);
  for (size_t i = 0; i < top.size(); ++i) {
    const Stmt& s = top[i];
    if (s->kind == StmtKind::Alloc && s->buffer->space == Space::Global &&
        s->buffer->kind == BufferKind::Temp) {
      lives[s->buffer.get()] = Life{s->buffer, i};
      order.push_back(s->buffer.get());
      continue;
    }
    for_each_view({s}, [&](const View& v, bool) {
      auto it = lives.find(v.buf.get());
      if (it == lives.end()) return;
      it->second.first = std::min(it->second.first, i);
      it->second.last = std::max(it->second.last, i);
    });
  }
  std::stable_sort(order.begin(), order.end(),
                   [&](const Buffer* a, const Buffer* b) { return lives[a].first < lives[b].first; });
  std::map<const Buffer*, BufferRef> to;  // a temporary -> the buffer it lives in
  std::vector<Life*> homes;               // buffers kept, with the last use of what they hold
  for (const Buffer* b : order) {
    Life& l = lives[b];
    if (l.first == SIZE_MAX) continue;
    Life* home = nullptr;
    for (Life* h : homes) {
      if (h->buf->dtype != b->dtype || h->buf->shape != b->shape || !same_dynamic_extents(*h->buf, *b))
        continue;
      // In place: the statement must read the home's current tenant, which the input program still
      // names by its own buffer (the home's first one only until another moved in).
      if (h->last < l.first || (h->last == l.first && InPlace(h->tenant, b).ok(top[l.first]))) {
        home = h;
        break;
      }
    }
    if (!home) {
      l.tenant = b;
      homes.push_back(&l);
      continue;
    }
    to[b] = home->buf;
    home->last = l.last;
    home->tenant = b;
  }
  if (to.empty()) return p;
  return replace_buffers(p, to);  // each temporary moved into its home
}

}  // namespace pypto::passes
