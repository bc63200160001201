// Sync insertion: SET_FLAG/WAIT_FLAG pairs from the data dependencies between pipes.
//
// A forward analysis over the structured program: for each buffer, the accesses since its last
// write (the write and the reads, by pipe) and, for each, the pipes already ordered after it by
// an inserted or existing flag. An instruction on pipe q conflicting with an access on p != q
// (one of them writes) that q is not ordered after gets `SET_FLAG p, q, 0; WAIT_FLAG p, q, 0`
// right before it; the pair orders everything p did before, so every access of p gains q. Loops
// are iterated to a fixpoint (the state at the top of the body joins the entry state and the
// state at the end of the body), so dependences between iterations are ordered too. A parallel
// loop's iterations are separate from the code around them (the simulator joins all cores at
// the start and end of an outermost one), so its body starts from, and leaves, an empty state;
// parallel loops inside it run on one core, like serial ones.
#include <set>

#include "backends/sim/simulator.h"

namespace pypto::sim {
using namespace ir;

namespace {

struct Record {
  bool write = false;
  std::set<int> ordered;  // pipes that are ordered after this access
  bool operator==(const Record& o) const { return write == o.write && ordered == o.ordered; }
};
// buffer -> pipe -> the access of that pipe (a write, or reads, since the buffer's last write)
using State = std::map<const Buffer*, std::map<int, Record>>;

State join(const State& a, const State& b) {
  State out = a;
  for (const auto& [buf, recs] : b)
    for (const auto& [pipe, r] : recs) {
      auto& mine = out[buf];
      auto it = mine.find(pipe);
      if (it == mine.end()) {
        mine[pipe] = r;
        continue;
      }
      Record& m = it->second;
      m.write = m.write || r.write;  // a write on either path
      std::set<int> both;
      for (int q : m.ordered)
        if (r.ordered.count(q)) both.insert(q);
      m.ordered = both;  // ordered only where both paths ordered it
    }
  return out;
}

Stmt sync_op(Opcode code, int src, int dst) {
  return op_stmt(Op{code, {Operand(int_imm(src)), Operand(int_imm(dst)), Operand(int_imm(0))}});
}

class Inserter {
 public:
  // Walks `body` from `state`; with `emit`, returns the body with the pairs inserted.
  std::vector<Stmt> block(const std::vector<Stmt>& body, State& state, bool emit) {
    std::vector<Stmt> out;
    for (const Stmt& s : body) stmt(s, state, emit, out);
    return out;
  }

 private:
  int parallel_depth_ = 0;

  void order(State& state, int p, int q) {
    for (auto& [buf, recs] : state) {
      auto it = recs.find(p);
      if (it != recs.end()) it->second.ordered.insert(q);
    }
  }

  void stmt(const Stmt& s, State& state, bool emit, std::vector<Stmt>& out) {
    switch (s->kind) {
      case StmtKind::OpStmt:
        return op(s, state, emit, out);
      case StmtKind::Seq: {
        auto body = block(s->body, state, emit);
        if (emit) out.push_back(seq(std::move(body)));
        return;
      }
      case StmtKind::If: {
        State other = state;
        auto then_body = block(s->body, state, emit);
        auto else_body = block(s->orelse, other, emit);
        state = join(state, other);
        if (emit) {
          auto n = std::make_shared<StmtNode>(*s);
          n->body = std::move(then_body);
          n->orelse = std::move(else_body);
          out.push_back(n);
        }
        return;
      }
      case StmtKind::For: {
        // Only an outermost parallel loop spreads over cores (inner ones run on their core).
        const bool parallel = s->loop_kind == LoopKind::Parallel && parallel_depth_ == 0;
        if (s->loop_kind == LoopKind::Parallel) ++parallel_depth_;
        State entry = parallel ? State{} : state;
        State top = entry;
        for (int round = 0; round < 16; ++round) {  // the lattice is finite; a few rounds suffice
          State end = top;
          block(s->body, end, false);
          State next = join(entry, end);
          if (next == top) break;
          top = next;
        }
        State end = top;
        auto body = block(s->body, end, emit);
        if (s->loop_kind == LoopKind::Parallel) --parallel_depth_;
        state = parallel ? State{} : join(entry, end);  // zero iterations keep the entry state
        if (emit) {
          auto n = std::make_shared<StmtNode>(*s);
          n->body = std::move(body);
          out.push_back(n);
        }
        return;
      }
      default:
        if (emit) out.push_back(s);
        return;
    }
  }

  void op(const Stmt& s, State& state, bool emit, std::vector<Stmt>& out) {
    const Op& o = s->op;
    const int q = pipe_of(o.code);
    if (q < 0) {
      if (emit) out.push_back(s);
      return;
    }
    std::set<int> need;
    for (size_t i = 0; i < o.args.size(); ++i) {
      const View* v = std::get_if<View>(&o.args[i]);
      if (!v || !v->buf) continue;
      const bool write = i == 0;
      for (const auto& [p, r] : state[v->buf.get()])
        if (p != q && (write || r.write) && !r.ordered.count(q)) need.insert(p);
    }
    for (int p : need) {
      if (emit) {
        out.push_back(sync_op(Opcode::SET_FLAG, p, q));
        out.push_back(sync_op(Opcode::WAIT_FLAG, p, q));
      }
      order(state, p, q);
    }
    if (emit) out.push_back(s);
    for (size_t i = 0; i < o.args.size(); ++i) {
      const View* v = std::get_if<View>(&o.args[i]);
      if (!v || !v->buf) continue;
      auto& recs = state[v->buf.get()];
      if (i == 0) {
        recs.clear();  // every earlier access is ordered before this write now
        recs[q] = Record{true, {}};
      } else if (!recs.count(q) || !recs[q].write) {
        recs[q] = Record{false, {}};
      } else {
        recs[q].ordered.clear();  // a later access on q: not yet ordered to anyone
      }
    }
  }
};

}  // namespace

namespace {
bool has_sync(const std::vector<Stmt>& body) {
  for (const Stmt& s : body)
    if ((s->kind == StmtKind::OpStmt && opcode_info(s->op.code).category == OpCategory::Sync) ||
        has_sync(s->body) || has_sync(s->orelse))
      return true;
  return false;
}
}  // namespace

Program insert_sync(const Program& tile_program) {
  if (has_sync(tile_program.body)) return tile_program;  // synced by hand: the simulator checks it
  Program out = tile_program;
  State state;
  out.body = Inserter().block(tile_program.body, state, true);
  return out;
}

}  // namespace pypto::sim
