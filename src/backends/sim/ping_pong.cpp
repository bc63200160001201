// Ping-pong buffers for the simulator: a loop that moves tiles it allocates by DMA runs two
// iterations per trip, the second on renamed copies of those tiles, so the flags that sync
// insertion places let the load of one copy overlap the compute and store of the other. A loop
// spread over the cores becomes one iteration per core running its share of the iterations as
// a serial loop, which is double-buffered like any other.
#include <algorithm>
#include <set>

#include "backends/sim/simulator.h"
#include "ir/mutator.h"
#include "ir/visitor.h"

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

// Whether the loop's body allocates a tile (at its own level) that a DMA moves anywhere in the
// body: loaded into (its loads can overlap the other copy's compute) or stored from (an
// accumulator: the next iteration's compute can start before this one's store has drained).
bool moves_own_tile(const std::vector<Stmt>& body) {
  std::set<const Buffer*> own;
  for (const Stmt& s : body)
    if (s->kind == StmtKind::Alloc && s->buffer && s->buffer->space != Space::Global)
      own.insert(s->buffer.get());
  bool moved = false;
  for_each_stmt(body, [&](const Stmt& s) {
    if (s->kind == StmtKind::OpStmt && (s->op.code == Opcode::TLOAD || s->op.code == Opcode::TSTORE)) {
      const View* v = std::get_if<View>(&s->op.args[s->op.code == Opcode::TLOAD ? 0 : 1]);
      if (v && own.count(v->buf.get())) moved = true;
    }
  });
  return moved;
}

class PingPong : public StmtMutator {
 public:
  explicit PingPong(int cores) : cores_(std::max(cores, 1)) {}

 protected:
  Stmt mutate_for(const Stmt& s) override {
    const bool spread = s->loop_kind == LoopKind::Parallel && parallel_depth_ == 0;
    if (s->loop_kind == LoopKind::Parallel) ++parallel_depth_;
    Stmt inner = StmtMutator::mutate_for(s);  // innermost loops first
    if (s->loop_kind == LoopKind::Parallel) --parallel_depth_;
    if (spread) return per_core_shares(s, inner);
    // A parallel loop inside the one spread over the cores runs on one core: in order, like a
    // serial one.
    return ping_pong_loop(inner);
  }

 private:
  static Stmt ping_pong_loop(const Stmt& loop) {
    if (!moves_own_tile(loop->body) || !loop->step) return loop;
    const Expr step = loop->step;
    const Expr next = var(loop->var) + step;
    std::vector<Stmt> body = loop->body;
    body.push_back(
        if_then(cmp(ExprOp::Lt, next, loop->hi), PongCopy(loop->var, next).mutate_block(loop->body)));
    auto n = std::make_shared<StmtNode>(*loop);
    n->step = step * int_imm(2);
    n->body = std::move(body);
    return n;
  }

  // The loop spread over the cores, as one iteration per core, each running its share (the
  // simulator's contiguous block of iterations) as a serial loop that is double-buffered. Only
  // where a core has more than one iteration and the trip count is known.
  Stmt per_core_shares(const Stmt& original, const Stmt& loop) const {
    const auto lo = as_int(loop->lo), hi = as_int(loop->hi), step = as_int(loop->step);
    if (!lo || !hi || !step || *step <= 0) return loop;
    const int64_t n = (*hi - *lo + *step - 1) / *step;
    if (n <= cores_) return loop;
    const std::string core = original->var + "_core";
    const Expr c = var(core);
    auto first = [&](const Expr& k) {
      return int_imm(*lo) + int_imm(*step) * div(k * int_imm(n), int_imm(cores_));
    };
    auto mine = std::make_shared<StmtNode>(*loop);
    mine->loop_kind = LoopKind::Serial;
    mine->lo = first(c);
    mine->hi = first(c + int_imm(1));
    const Stmt share = ping_pong_loop(mine);
    if (share == mine) return loop;  // nothing to double-buffer
    return for_loop(core, int_imm(0), int_imm(cores_), int_imm(1), {share}, LoopKind::Parallel);
  }

  int cores_;
  int parallel_depth_ = 0;
};

}  // namespace

Program ping_pong(const Program& tile_program, int cores) {
  return PingPong(cores).mutate_program(tile_program);
}

}  // namespace pypto::sim
