// Ping-pong buffers for the simulator: a loop that loads into tiles it allocates runs two
// iterations per trip, the second on renamed copies of those tiles, so the flags that sync
// insertion places let the load of one copy overlap the compute and store of the other.
#include <functional>
#include <set>

#include "backends/sim/simulator.h"
#include "ir/mutator.h"

namespace pypto::sim {
using namespace ir;

namespace {

// The loop body for iteration var + step: loop variable shifted, local allocs renamed.
class PongCopy : public StmtMutator {
 public:
  PongCopy(const std::string& var, Expr shifted) : var_(var), shifted_(std::move(shifted)) {}

 protected:
  Stmt mutate_alloc(const Stmt& s) override {
    if (!s->buffer || s->buffer->space == Space::Global) return s;
    auto b = std::make_shared<Buffer>(*s->buffer);
    b->name += "_pong";
    renamed_[s->buffer.get()] = b;
    return alloc(b);
  }
  View mutate_view(const View& v) override {
    View out = StmtMutator::mutate_view(v);
    auto it = renamed_.find(v.buf.get());
    if (it != renamed_.end()) out.buf = it->second;
    return out;
  }
  Expr mutate_expr(const Expr& e) override { return e ? substitute(e, {{var_, shifted_}}) : e; }

 private:
  std::string var_;
  Expr shifted_;
  std::map<const Buffer*, BufferRef> renamed_;
};

// Whether the body (not counting nested loops) loads into a tile it allocates.
bool loads_own_tile(const std::vector<Stmt>& body) {
  std::set<const Buffer*> own;
  for (const Stmt& s : body)
    if (s->kind == StmtKind::Alloc && s->buffer && s->buffer->space != Space::Global)
      own.insert(s->buffer.get());
  std::function<bool(const std::vector<Stmt>&)> walk = [&](const std::vector<Stmt>& b) {
    for (const Stmt& s : b) {
      if (s->kind == StmtKind::OpStmt && s->op.code == Opcode::TLOAD) {
        const View* v = std::get_if<View>(&s->op.args[0]);
        if (v && own.count(v->buf.get())) return true;
      }
      if ((s->kind == StmtKind::If || s->kind == StmtKind::Seq) && (walk(s->body) || walk(s->orelse)))
        return true;
    }
    return false;
  };
  return walk(body);
}

class PingPong : public StmtMutator {
 protected:
  Stmt mutate_for(const Stmt& s) override {
    Stmt inner = StmtMutator::mutate_for(s);  // innermost loops first
    // Parallel loops keep their iterations: they spread over the cores (halving them would
    // leave cores idle).
    if (s->loop_kind == LoopKind::Parallel || !loads_own_tile(inner->body) || !s->step) return inner;
    const Expr step = s->step;
    const Expr next = var(s->var) + step;
    std::vector<Stmt> body = inner->body;
    body.push_back(if_then(cmp(ExprOp::Lt, next, s->hi), PongCopy(s->var, next).mutate_block(inner->body)));
    auto n = std::make_shared<StmtNode>(*inner);
    n->step = step * int_imm(2);
    n->body = std::move(body);
    return n;
  }
};

}  // namespace

Program ping_pong(const Program& tile_program) { return PingPong().mutate_program(tile_program); }

}  // namespace pypto::sim
