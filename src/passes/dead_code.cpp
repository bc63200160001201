// Dead code elimination (dead_code.h).
#include "passes/dead_code.h"

#include <set>

#include "ir/mutator.h"
#include "passes/pass_util.h"

namespace pypto::passes {
using namespace ir;

namespace {
// Drops instructions writing dead buffers, allocations of dead buffers, and control flow left
// without instructions.
class DropDead : public StmtMutator {
 public:
  explicit DropDead(const std::set<const Buffer*>& live) : live_(live) {}

 private:
  const std::set<const Buffer*>& live_;
  void mutate_into(const Stmt& s, std::vector<Stmt>& out) override {
    if (s->kind == StmtKind::OpStmt) {
      auto d = s->op.args.empty() ? nullptr : std::get_if<View>(&s->op.args[0]);
      if (d && !live_.count(d->buf.get())) return;
    }
    if (s->kind == StmtKind::Alloc && !live_.count(s->buffer.get())) return;
    Stmt n = mutate(s);
    if (n->kind == StmtKind::For || n->kind == StmtKind::If || n->kind == StmtKind::Seq) {
      bool has_op = false;
      for (const auto* block : {&n->body, &n->orelse})
        for_each_stmt(*block, [&](const Stmt& t) { has_op |= t->kind == StmtKind::OpStmt; });
      if (!has_op) return;
    }
    out.push_back(n);
  }
};
}  // namespace

Program eliminate_dead_code(const Program& p) {
  std::set<const Buffer*> live;
  for (auto& b : p.params) live.insert(b.get());
  for (bool changed = true; changed;) {
    changed = false;
    walk(p.body, [&](const Stmt& s) {
      if (s->kind != StmtKind::OpStmt || s->op.args.empty()) return;
      auto d = std::get_if<View>(&s->op.args[0]);
      if (d && !live.count(d->buf.get())) return;
      for (size_t i = 1; i < s->op.args.size(); ++i)
        if (auto v = std::get_if<View>(&s->op.args[i])) changed |= live.insert(v->buf.get()).second;
    });
  }
  Program out = p;
  out.body = DropDead(live).mutate_block(p.body);
  return out;
}

}  // namespace pypto::passes
