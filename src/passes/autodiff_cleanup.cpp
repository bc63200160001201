// The clean-up of a derived backward program, run by passes/autodiff.cpp after the sweep (with
// passes/dead_code.h): zero fills a first contribution can replace, copies that can be read through.
#include <algorithm>
#include <map>
#include <set>

#include "ir/builder_impl.h"
#include "ir/mutator.h"
#include "ir/structural.h"
#include "passes/autodiff_impl.h"
#include "passes/pass_util.h"

namespace pypto::passes::ad {

using namespace ir;

static bool mentions_buffer(const Stmt& s, const Buffer* b) {
  bool found = false;
  walk({s}, [&](const Stmt& t) {
    if (t->kind == StmtKind::Alloc && t->buffer.get() == b) found = true;
    if (t->kind != StmtKind::OpStmt) return;
    for (auto& a : t->op.args)
      if (auto v = view_of(a)) found |= v->buf.get() == b;
  });
  return found;
}

// The buffers each statement of a block allocates or names in an operand (with what it holds),
// sorted, kept beside the block while it changes: the search for the next statement naming a
// buffer reads these instead of walking the statements again for every zero fill (which made the
// clean-up quadratic in a deep network's backward).
struct BlockBuffers {
  std::vector<Stmt>& body;
  std::vector<std::vector<const Buffer*>> in;
  static std::vector<const Buffer*> of(const Stmt& s) {
    std::vector<const Buffer*> out;
    walk({s}, [&](const Stmt& t) {
      if (t->kind == StmtKind::Alloc) out.push_back(t->buffer.get());
      if (t->kind != StmtKind::OpStmt) return;
      for (auto& a : t->op.args)
        if (auto v = view_of(a)) out.push_back(v->buf.get());
    });
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());
    return out;
  }
  explicit BlockBuffers(std::vector<Stmt>& b) : body(b) {
    for (const Stmt& s : b) in.push_back(of(s));
  }
  bool names(size_t i, const Buffer* b) const { return std::binary_search(in[i].begin(), in[i].end(), b); }
  void changed(size_t i) { in[i] = of(body[i]); }
  void erase(size_t i) {
    body.erase(body.begin() + long(i));
    in.erase(in.begin() + long(i));
  }
};

// The whole buffer, every element valid (a dynamic dim: valid to its extent).
static bool whole_and_valid(const View& v) { return v.is_whole(); }

// Two views whose valid regions have the same extents (a dynamic dim's by its expression).
static bool same_valid_extents(const View& a, const View& b) {
  if (a.shape() != b.shape()) return false;
  auto av = a.valid_shape(), bv = b.valid_shape();
  for (size_t k = 0; k < av.size(); ++k)
    if (!expr_equal(av[k], bv[k])) return false;
  return true;
}

// A zero fill followed by a group (a composite's backward) whose first use of the adjoint is its
// accumulation: tries the fill inside the group, where the accumulation can become the write.
// True when the fill went away; the group is unchanged otherwise.
static bool into_group(std::vector<Stmt>& group, const Stmt& fill, const std::set<const Buffer*>& adjoints,
                       std::map<const Buffer*, int>& reads) {
  const Buffer* a = std::get<View>(fill->op.args[0]).buf.get();
  size_t at = 0;
  while (at < group.size() && !mentions_buffer(group[at], a)) ++at;
  if (at == group.size() || group[at]->kind != StmtKind::OpStmt) return false;
  std::vector<Stmt> trial = group;
  trial.insert(trial.begin(), fill);  // (at the start: the accumulated value's producer may follow)
  write_first_contributions(trial, adjoints, reads);
  if (std::find(trial.begin(), trial.end(), fill) != trial.end()) return false;
  group = std::move(trial);
  return true;
}

// `for v = 0 to n { a[window(v)] += c }` right after a's zero fill, where the n windows tile all
// of a (a reshape's rows added back), also as a nest of such loops whose variables index one dim
// each or combine in one (a reshape's split into three: offset v1 * 12 + v2 * 4, size 4): the
// nest with `a[window] = c`, or null.
std::optional<int64_t> var_multiple(const Expr& e, const std::string& v) {
  auto is_v = [&](const Expr& x) { return x && x->op == ExprOp::Var && x->name == v; };
  if (is_v(e)) return 1;
  if (!e || e->op != ExprOp::Mul || e->args.size() != 2) return std::nullopt;
  for (int i = 0; i < 2; ++i)
    if (is_v(e->args[i]))
      if (auto k = as_int(e->args[1 - i])) return *k;
  return std::nullopt;
}

// e as a sum of loop variables times constants (no constant term): var -> coefficient.
static bool linear_in_vars(const Expr& e, std::map<std::string, int64_t>& coef) {
  if (e && e->op == ExprOp::Add && e->args.size() == 2)
    return linear_in_vars(e->args[0], coef) && linear_in_vars(e->args[1], coef);
  if (auto c = as_int(e)) return *c == 0;
  for (const Expr& x : {e, e && e->op == ExprOp::Mul && e->args.size() == 2 ? e->args[0] : Expr{},
                        e && e->op == ExprOp::Mul && e->args.size() == 2 ? e->args[1] : Expr{}})
    if (x && x->op == ExprOp::Var) {
      auto m = var_multiple(e, x->name);
      if (!m || coef.count(x->name)) return false;
      coef[x->name] = *m;
      return true;
    }
  return false;
}

static Stmt first_write_by_windows(const Stmt& loop, const View& a) {
  std::vector<const StmtNode*> nest;  // the perfectly nested loops, outermost first
  std::map<std::string, int64_t> trips;
  int64_t points = 1;
  const StmtNode* cur = loop.get();
  while (cur->kind == StmtKind::For) {
    auto lo = as_int(cur->lo), hi = as_int(cur->hi), step = as_int(cur->step);
    if (!lo || !hi || !step || *lo != 0 || *step != 1 || *hi <= 0 || cur->body.size() != 1) return nullptr;
    points *= *hi;
    if (points > 4096) return nullptr;
    nest.push_back(cur);
    trips[cur->var] = *hi;
    cur = cur->body[0].get();
  }
  if (cur->kind != StmtKind::OpStmt || cur->op.code != Opcode::TADD || cur->op.args.size() != 3)
    return nullptr;
  const View* d = view_of(cur->op.args[0]);
  const View* s1 = view_of(cur->op.args[1]);
  const View* c = view_of(cur->op.args[2]);
  if (!d || !s1 || !c || d->buf != a.buf || !structural::equal(*d, *s1) || c->buf == a.buf) return nullptr;
  const auto& shape = a.buf->shape;
  size_t used = 0;
  for (size_t k = 0; k < shape.size(); ++k) {
    std::map<std::string, int64_t> coef;
    if (d->step[k] != 1 || !linear_in_vars(d->offset[k], coef)) return nullptr;
    // The dim's windows tile it exactly: coefficients size, size * trips of the first, ...
    std::vector<std::pair<int64_t, std::string>> by_coef;
    for (auto& [v, m] : coef) {
      if (!trips.count(v)) return nullptr;
      by_coef.push_back({m, v});
    }
    std::sort(by_coef.begin(), by_coef.end());
    int64_t span = d->size[k];
    for (auto& [m, v] : by_coef) {
      if (m != span) return nullptr;
      span *= trips[v];
    }
    if (span != shape[k]) return nullptr;
    used += coef.size();
  }
  if (used != nest.size()) return nullptr;   // every loop walks the windows
  for (int64_t it = 0; it < points; ++it) {  // every window fully valid
    std::map<std::string, Expr> at;
    int64_t rest = it;
    for (const StmtNode* l : nest) {
      at[l->var] = int_imm(rest % trips[l->var]);
      rest /= trips[l->var];
    }
    for (size_t k = 0; k < shape.size(); ++k) {
      auto e = as_int(substitute(d->valid[k], at));
      if (!e || *e != d->size[k]) return nullptr;
    }
  }
  Stmt inner = op_stmt(Op{Opcode::TMOV, {*d, *c}});
  for (size_t i = nest.size(); i-- > 0;) {
    auto l = std::make_shared<StmtNode>(*nest[i]);
    l->body = {inner};
    inner = l;
  }
  return inner;
}

// An adjoint is zero-filled and then accumulated into. When its first contribution covers all of
// it, `fill 0; a += c` becomes `a = c`, and when c is a temporary computed just for this, its
// instruction writes into a directly. Applied to every block, inner blocks first.
static void write_first_contributions_here(std::vector<Stmt>& body, const std::set<const Buffer*>& adjoints,
                                           std::map<const Buffer*, int>& reads) {
  BlockBuffers bb(body);
  for (size_t i = 0; i < body.size(); ++i) {
    const Stmt& fill = body[i];
    if (fill->kind != StmtKind::OpStmt || fill->op.code != Opcode::TEXPANDS) continue;
    const View& a = std::get<View>(fill->op.args[0]);
    if (!adjoints.count(a.buf.get()) || !whole_and_valid(a)) continue;
    size_t j = i + 1;
    while (j < body.size() && !bb.names(j, a.buf.get())) ++j;
    if (j == body.size()) continue;
    if (body[j]->kind == StmtKind::Seq && into_group(body[j]->body, fill, adjoints, reads)) {
      bb.changed(j);
      bb.erase(i--);
      continue;
    }
    if (body[j]->kind == StmtKind::For) {
      if (Stmt loop = first_write_by_windows(body[j], a)) {
        body[j] = loop;
        bb.changed(j);
        bb.erase(i--);
      }
      continue;
    }
    const Stmt& acc = body[j];
    if (acc->kind != StmtKind::OpStmt || acc->op.code != Opcode::TADD) continue;
    const View* d = view_of(acc->op.args[0]);
    const View* s1 = view_of(acc->op.args[1]);
    const View* c = view_of(acc->op.args[2]);
    if (!d || !s1 || !c || d->buf != a.buf || s1->buf != a.buf || !whole_and_valid(*d) ||
        !whole_and_valid(*s1) || c->buf == a.buf || c->buf->dtype != a.buf->dtype ||
        !same_valid_extents(*c, a))
      continue;
    // The producer of c, when c is a temporary only this accumulation reads.
    size_t k = j;
    if (c->is_whole() && c->buf->kind == BufferKind::Temp && reads[c->buf.get()] == 1) {
      for (size_t m = j; m-- > i + 1;) {
        if (!bb.names(m, c->buf.get())) continue;
        const Stmt& p = body[m];
        const View* pd =
            p->kind == StmtKind::OpStmt && !p->op.args.empty() ? view_of(p->op.args[0]) : nullptr;
        bool sole_writer = pd && pd->buf == c->buf && whole_and_valid(*pd);
        for (size_t q = 1; sole_writer && q < p->op.args.size(); ++q)
          if (auto v = view_of(p->op.args[q])) sole_writer = v->buf != c->buf && v->buf != a.buf;
        if (sole_writer) k = m;
        break;
      }
    }
    if (k != j) {
      body[k]->op.args[0] = View::whole(a.buf);
      bb.changed(k);
      bb.erase(j);
    } else {
      body[j] = op_stmt(Op{Opcode::TMOV, {View::whole(a.buf), *c}});
      bb.changed(j);
    }
    bb.erase(i);
    --i;
  }
}

void write_first_contributions(std::vector<Stmt>& body, const std::set<const Buffer*>& adjoints,
                               std::map<const Buffer*, int>& reads) {
  body =
      rewrite_blocks(body, [&](std::vector<Stmt>& b) { write_first_contributions_here(b, adjoints, reads); });
}

// e <= bound for every value of the variables: e is bound, or a min with such an argument.
static bool at_most(const Expr& e, const Expr& bound) {
  if (expr_equal(e, bound)) return true;
  return e && e->op == ExprOp::Min &&
         std::any_of(e->args.begin(), e->args.end(), [&](const Expr& x) { return at_most(x, bound); });
}

// `t = a @ b; g += t` with g an adjoint and t a temporary nothing else reads or writes: `g += a @
// b` (TMATMUL_ACC), so the product is summed into g by the GEMM itself, which reads a transposed
// operand while packing it, instead of a tile product into t and an add (the attention heads'
// gradients added into their slices of qkv's adjoint ran as tile loops with transposed loads).
void accumulate_products(std::vector<Stmt>& body, const std::set<const Buffer*>& adjoints,
                         std::map<const Buffer*, int>& reads) {
  std::map<const Buffer*, int> writes;
  walk(body, [&](const Stmt& s) {
    if (s->kind == StmtKind::OpStmt && !s->op.args.empty())
      if (auto d = view_of(s->op.args[0])) ++writes[d->buf.get()];
  });
  // The add writes g's valid region; t holds the product over at least that much of it.
  auto within = [](const View& g, const View& t) {
    if (g.shape() != t.shape()) return false;
    auto gv = g.valid_shape(), tv = t.valid_shape();
    for (size_t k = 0; k < gv.size(); ++k)
      if (!at_most(gv[k], tv[k])) return false;
    return true;
  };
  body = rewrite_blocks(body, [&](std::vector<Stmt>& b) {
    for (size_t i = 0; i + 1 < b.size(); ++i) {
      const Stmt &mm = b[i], &add = b[i + 1];
      if (mm->kind != StmtKind::OpStmt || mm->op.code != Opcode::TMATMUL || mm->op.args.size() != 3 ||
          add->kind != StmtKind::OpStmt || add->op.code != Opcode::TADD || add->op.args.size() != 3)
        continue;
      const View *t = view_of(mm->op.args[0]), *a = view_of(mm->op.args[1]), *bv = view_of(mm->op.args[2]);
      const View *g = view_of(add->op.args[0]), *g1 = view_of(add->op.args[1]), *c = view_of(add->op.args[2]);
      if (!t || !a || !bv || !g || !g1 || !c || !adjoints.count(g->buf.get()) ||
          !structural::equal(*g, *g1) || c->buf != t->buf || !structural::equal(*c, *t) ||
          t->buf->kind != BufferKind::Temp || reads[t->buf.get()] != 1 || writes[t->buf.get()] != 1 ||
          g->rank() != 2 || t->rank() != 2 || g->buf->dtype != t->buf->dtype || g->buf == a->buf ||
          g->buf == bv->buf || !within(*g, *t))
        continue;
      b[i] = op_stmt(Op{Opcode::TMATMUL_ACC, {*g, *a, *bv}});
      b.erase(b.begin() + long(i + 1));
      --reads[t->buf.get()];
      ++reads[g->buf.get()];
    }
  });
}

// `a = c` of two whole temporaries, each written once, c earlier in the same block: every use of
// a reads c instead (the sweep passes an adjoint through additions this way).
void forward_copies(Program& p) {
  std::map<const Buffer*, int> writes;
  walk(p.body, [&](const Stmt& s) {
    if (s->kind == StmtKind::OpStmt && !s->op.args.empty())
      if (auto d = view_of(s->op.args[0])) ++writes[d->buf.get()];
  });
  std::map<const Buffer*, BufferRef> repl;
  // s as `d = c` of a whole temp written only there from a whole view, and src what c stands
  // for: a copy already forwarded stands for what it copies (a chain of adjoints passed through
  // additions is read through to its first link).
  auto forwardable = [&](const Stmt& s, BufferRef& src) -> const View* {
    if (s->kind != StmtKind::OpStmt || s->op.code != Opcode::TMOV || s->op.args.size() != 2) return nullptr;
    const View *d = view_of(s->op.args[0]), *c = view_of(s->op.args[1]);
    if (!d || !c) return nullptr;
    src = c->buf;
    for (auto it = repl.find(src.get()); it != repl.end(); it = repl.find(src.get())) src = it->second;
    bool ok = whole_and_valid(*d) && whole_and_valid(*c) && d->buf->kind == BufferKind::Temp &&
              d->buf->dtype == src->dtype && same_valid_extents(View::whole(d->buf), View::whole(src)) &&
              writes[d->buf.get()] == 1;
    return ok ? d : nullptr;
  };
  p.body = rewrite_blocks(p.body, [&](std::vector<Stmt>& body) {
    std::set<const Buffer*> written_here;
    for (size_t j = 0; j < body.size(); ++j) {
      const Stmt& s = body[j];
      if (s->kind != StmtKind::OpStmt || s->op.args.empty()) continue;
      // The source: a temp written once, earlier in this block, or an input the program never
      // writes (a cotangent copied into the adjoint it starts).
      BufferRef src;
      if (const View* d = forwardable(s, src)) {
        if ((src->kind == BufferKind::Temp && writes[src.get()] == 1 && written_here.count(src.get())) ||
            (src->kind == BufferKind::Param && writes[src.get()] == 0)) {
          repl[d->buf.get()] = src;
          body.erase(body.begin() + long(j--));
          continue;
        }
      }
      if (const View* d = view_of(s->op.args[0])) written_here.insert(d->buf.get());
    }
  });
  // At the top level a source written more than once is settled too once every statement that
  // writes it has run (the qkv adjoint, accumulated by the heads' loop, then copied into the
  // adjoint of the product it came from): a copy there is never rerun by an enclosing loop.
  std::map<const Buffer*, int> seen;
  for (size_t j = 0; j < p.body.size(); ++j) {
    BufferRef src;
    const View* d = forwardable(p.body[j], src);
    if (d && src->kind == BufferKind::Temp && seen[src.get()] == writes[src.get()]) {
      repl[d->buf.get()] = src;
      p.body.erase(p.body.begin() + long(j--));
      continue;
    }
    walk({p.body[j]}, [&](const Stmt& t) {
      if (t->kind == StmtKind::OpStmt && !t->op.args.empty())
        if (auto w = view_of(t->op.args[0])) ++seen[w->buf.get()];
    });
  }
  if (repl.empty()) return;
  // To the end of each chain: the top-level pass may forward a copy whose source the first pass
  // already made another copy read (d = c forwarded first, then c = e: d reads e).
  walk(p.body, [&](const Stmt& s) {
    if (s->kind != StmtKind::OpStmt) return;
    for (auto& a : s->op.args)
      if (auto v = std::get_if<View>(&a))
        for (auto it = repl.find(v->buf.get()); it != repl.end(); it = repl.find(v->buf.get()))
          v->buf = it->second;
  });
}

void used_buffers(const std::vector<Stmt>& body, std::set<const Buffer*>& used) {
  for_each_view(body, [&](const View& v, bool) { used.insert(v.buf.get()); });
}

}  // namespace pypto::passes::ad
