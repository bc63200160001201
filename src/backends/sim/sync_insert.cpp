// Sync insertion: SET_FLAG/WAIT_FLAG from the data dependences between pipes.
//
// A forward analysis over the structured program finds every dependence edge: for each buffer,
// the accesses since its last write (by pipe, with the statements that made them) and the pipes
// already ordered after them. An instruction on pipe q conflicting with an access on p != q (one
// of them writes) that q is not ordered after is an edge (producer statement, consumer
// statement, p -> q). Loops are iterated to a fixpoint, so edges between iterations are found.
//
// Each edge gets its own event: in the innermost block holding both statements, `SET_FLAG p, q, e`
// goes right after the statement that holds the producer and `WAIT_FLAG p, q, e` right before the
// one that holds the consumer, so work between them overlaps. An edge from a later to an earlier
// statement (or to itself) is carried by the nearest enclosing loop: its set and wait go into
// that loop's body, a prologue `SET_FLAG` before the loop lets the first iteration through and
// an epilogue `WAIT_FLAG` after it consumes the last iteration's set (both go around the
// outermost loop of a nest of loops that directly hold each other, so the next outer iteration's
// first wait consumes the last set, without draining the pipes in between). Every set and its
// wait run equally often, on every path. An outermost parallel loop's iterations are separate from the
// code around it (the simulator joins all cores at its start and end), so its body starts from,
// and leaves, an empty state; parallel loops inside it run on one core, like serial ones.
#include <algorithm>
#include <set>
#include <tuple>

#include "backends/sim/simulator.h"
#include "ir/mutator.h"
#include "ir/visitor.h"

namespace pypto::sim {
using namespace ir;

namespace {

// Where a statement is: (block, index) from the program's body down to it.
using Path = std::vector<std::pair<const std::vector<Stmt>*, size_t>>;

struct Record {
  bool write = false;
  std::set<int> ordered;  // pipes already ordered after this access
  std::set<Path> sites;   // the statements that made it (several after a join)
  bool operator==(const Record& o) const {
    return write == o.write && ordered == o.ordered && sites == o.sites;
  }
};

// An access of part of a global buffer, by one statement on one pipe.
struct GlobalRecord {
  bool write = false;
  std::set<int> ordered;  // pipes already ordered after it
  // Made in an earlier iteration of an enclosing loop (or in a loop already left): its view's
  // loop variables had other values, so its region cannot be compared with this iteration's.
  bool carried = false;
  bool operator==(const GlobalRecord& o) const {
    return write == o.write && ordered == o.ordered && carried == o.carried;
  }
};

struct State {
  // local tile -> pipe -> that pipe's access (its write, or its reads since the tile's last write)
  std::map<const Buffer*, std::map<int, Record>> local;
  // global buffer -> (pipe, statement) -> the access: parts of a global buffer are ordered
  // separately, so accesses of disjoint parts (rows of two iterations) need no flag.
  std::map<const Buffer*, std::map<std::pair<int, Path>, GlobalRecord>> global;
  bool operator==(const State& o) const { return local == o.local && global == o.global; }
};

void merge(Record& m, const Record& r) { m.sites.insert(r.sites.begin(), r.sites.end()); }
void merge(GlobalRecord& m, const GlobalRecord& r) { m.carried = m.carried || r.carried; }

// Joins the records of `from` into `into` (the state where two paths meet): a record either
// path has is kept; one both have was written if either wrote, and is ordered only where both
// paths ordered it.
template <class Records>
void join_into(Records& into, const Records& from) {
  for (const auto& [buf, recs] : from)
    for (const auto& [key, r] : recs) {
      auto& mine = into[buf];
      auto it = mine.find(key);
      if (it == mine.end()) {
        mine[key] = r;
        continue;
      }
      auto& m = it->second;
      m.write = m.write || r.write;
      std::set<int> both;
      for (int q : m.ordered)
        if (r.ordered.count(q)) both.insert(q);
      m.ordered = both;
      merge(m, r);
    }
}

State join(const State& a, const State& b) {
  State out = a;
  join_into(out.local, b.local);
  join_into(out.global, b.global);
  return out;
}

State carried(State s) {
  for (auto& [buf, recs] : s.global)
    for (auto& [key, r] : recs) r.carried = true;
  return s;
}

// Whether two views of one buffer provably cover no common element: along some base dimension
// their offsets differ by a constant at least the extent of the lower one.
bool disjoint(const View& a, const View& b) {
  for (size_t d = 0; d < a.offset.size() && d < b.offset.size(); ++d) {
    const auto diff = as_int(b.offset[d] - a.offset[d]);
    if (!diff) continue;
    auto span = [&](const View& v) { return d < v.size.size() ? (v.size[d] - 1) * v.step[d] + 1 : 1; };
    if (*diff >= span(a) || -*diff >= span(b)) return true;
  }
  return false;
}

// Whether the access `v` (in this iteration) is disjoint from every access of `buf` that the
// statement at `site` makes.
bool apart(const View& v, const Path& site) {
  const Stmt& s = (*site.back().first)[site.back().second];
  for (const Operand& o : s->op.args) {
    const View* w = std::get_if<View>(&o);
    if (w && w->buf == v.buf && !disjoint(*w, v)) return false;
  }
  return true;
}

Stmt sync_op(Opcode code, int src, int dst, int event) {
  return op_stmt(Op{code, {Operand(int_imm(src)), Operand(int_imm(dst)), Operand(int_imm(event))}});
}

// One dependence edge, placed: anchors are (block, index) of statements in the original program.
struct Anchor {
  const std::vector<Stmt>* block;
  size_t index;
  bool operator<(const Anchor& o) const { return std::tie(block, index) < std::tie(o.block, o.index); }
};

class Inserter : StmtVisitor {
 public:
  // Finds the edges of `body` (the program's body).
  void analyse(const std::vector<Stmt>& body) {
    State state;
    block(body, state);
  }

  // The body with the flags placed: each block rebuilt with its anchors' flags around them.
  std::vector<Stmt> emit(const std::vector<Stmt>& body) const {
    struct Placer : StmtMutator {
      const Inserter& ins;
      explicit Placer(const Inserter& i) : ins(i) {}
      std::vector<Stmt> mutate_block(const std::vector<Stmt>& b) override {
        std::vector<Stmt> out;
        for (size_t i = 0; i < b.size(); ++i) {
          const Anchor a{&b, i};
          append(ins.before_, a, out);
          out.push_back(mutate(b[i]));
          append(ins.after_, a, out);
        }
        return out;
      }
    };
    return Placer(*this).mutate_block(body);
  }

 private:
  static void append(const std::map<Anchor, std::vector<Stmt>>& m, const Anchor& a, std::vector<Stmt>& out) {
    auto it = m.find(a);
    if (it != m.end()) out.insert(out.end(), it->second.begin(), it->second.end());
  }

  // The analysis is a visitor whose statements update *state_, the state where the walk is.
  State* state_ = nullptr;

  // Walks `body` from `state`, leaving there the state at its end.
  void block(const std::vector<Stmt>& body, State& state) {
    State* outer = state_;
    state_ = &state;
    visit_block(body);
    state_ = outer;
  }

  void visit_block(const std::vector<Stmt>& body) override {
    for (size_t i = 0; i < body.size(); ++i) {
      path_.push_back({&body, i});
      visit(body[i]);
      path_.pop_back();
    }
  }

  void visit_op(const StmtNode& s) override { op(s.op, *state_); }

  void visit_seq(const StmtNode& s) override {
    blocks_[&s.body] = Holder{here(), false, false};
    visit_block(s.body);
  }

  void visit_if(const StmtNode& s) override {
    blocks_[&s.body] = blocks_[&s.orelse] = Holder{here(), false, false};
    State& state = *state_;
    State other = state;
    block(s.body, state);
    block(s.orelse, other);
    state = join(state, other);
  }

  void visit_for(const StmtNode& s) override {
    const bool parallel = s.loop_kind == LoopKind::Parallel && parallel_depth_ == 0;
    if (s.loop_kind == LoopKind::Parallel) ++parallel_depth_;
    blocks_[&s.body] = Holder{here(), true, parallel};
    State& state = *state_;
    const State entry = parallel ? State{} : state;
    State top = entry;
    for (int round = 0; round < 16; ++round) {  // the lattice is finite; a few rounds suffice
      State end = top;
      block(s.body, end);
      State next = join(entry, carried(end));
      if (next == top) break;
      top = next;
    }
    if (s.loop_kind == LoopKind::Parallel) --parallel_depth_;
    State end = top;
    block(s.body, end);
    state = parallel ? State{} : join(entry, carried(end));  // zero iterations keep the entry state
  }

  void op(const Op& o, State& state) {
    const int q = pipe_of(o.code);
    if (q < 0) return;
    for (size_t i = 0; i < o.args.size(); ++i) {
      const View* v = std::get_if<View>(&o.args[i]);
      if (!v || !v->buf) continue;
      const bool write = i == 0;
      if (v->buf->space == Space::Global) {
        for (auto& [key, r] : state.global[v->buf.get()])
          if (key.first != q && (write || r.write) && !r.ordered.count(q) &&
              (r.carried || !apart(*v, key.second))) {
            place(key.second, path_, key.first, q);
            r.ordered.insert(q);
          }
        continue;
      }
      for (auto& [p, r] : state.local[v->buf.get()])
        if (p != q && (write || r.write) && !r.ordered.count(q)) {
          for (const Path& site : r.sites) place(site, path_, p, q);
          r.ordered.insert(q);
        }
    }
    for (size_t i = 0; i < o.args.size(); ++i) {
      const View* v = std::get_if<View>(&o.args[i]);
      if (!v || !v->buf) continue;
      if (v->buf->space == Space::Global) {
        GlobalRecord& r = state.global[v->buf.get()][{q, path_}];
        r = GlobalRecord{r.write || i == 0, {}, false};
        continue;
      }
      auto& recs = state.local[v->buf.get()];
      if (i == 0) {
        recs.clear();  // every earlier access is ordered before this write now
        recs[q] = Record{true, {}, {path_}};
      } else if (!recs.count(q) || !recs[q].write) {
        recs[q] = Record{false, {}, {path_}};
      } else {
        recs[q].ordered.clear();  // a later access on q: not yet ordered to anyone
        recs[q].sites = {path_};
      }
    }
  }

  // Places the flags of the edge from `producer` (on p) to `consumer` (on q).
  void place(const Path& producer, const Path& consumer, int p, int q) {
    size_t d = 0;  // the first level where the two paths part
    while (d < producer.size() && d < consumer.size() && producer[d] == consumer[d]) ++d;
    if (d < producer.size() && d < consumer.size() && producer[d].first == consumer[d].first &&
        producer[d].second < consumer[d].second) {
      add_edge({producer[d].first, producer[d].second}, {consumer[d].first, consumer[d].second}, p, q,
               nullptr);
      return;
    }
    // Otherwise carried by the innermost loop whose body holds both (at levels < d the two
    // statements are the same one; at level d they are in one block, the producer later).
    for (size_t k = std::min({d, producer.size() - 1, consumer.size() - 1}) + 1; k-- > 0;) {
      if (producer[k].first != consumer[k].first) continue;
      auto loop = blocks_.find(producer[k].first);
      if (loop == blocks_.end() || !loop->second.loop) continue;
      // The prologue and epilogue only balance the flag's count (no edge's ordering relies on
      // them: each conflicting pair has its own set and wait), and with one set outstanding at
      // most each wait consumes the set after the producer's latest run. So they go around the
      // outermost loop holding this one (through `if`s; not out of a loop spread over cores):
      // an epilogue and the next outer iteration's prologue would stall the consumer's pipe
      // until the producer's pipe drained, where the next wait needs only the last set.
      Anchor around = loop->second.stmt;
      for (auto up = blocks_.find(around.block); up != blocks_.end() && !up->second.spread;
           up = blocks_.find(up->second.stmt.block))
        if (up->second.loop) around = up->second.stmt;
      add_edge({producer[k].first, producer[k].second}, {consumer[k].first, consumer[k].second}, p, q,
               &around);
      return;
    }
  }

  void add_edge(Anchor set_after, Anchor wait_before, int p, int q, const Anchor* loop) {
    const auto key =
        std::make_tuple(set_after.block, set_after.index, wait_before.block, wait_before.index, p, q);
    if (!edges_.insert(key).second) return;
    const int e = next_event_[{p, q}]++;
    after_[set_after].push_back(sync_op(Opcode::SET_FLAG, p, q, e));
    before_[wait_before].push_back(sync_op(Opcode::WAIT_FLAG, p, q, e));
    if (loop) {
      before_[*loop].push_back(sync_op(Opcode::SET_FLAG, p, q, e));                      // prologue
      after_[*loop].insert(after_[*loop].begin(), sync_op(Opcode::WAIT_FLAG, p, q, e));  // epilogue
    }
  }

  int parallel_depth_ = 0;
  Path path_;
  Anchor here() const { return Anchor{path_.back().first, path_.back().second}; }

  struct Holder {
    Anchor stmt;  // the statement holding the block
    bool loop;    // a loop's body (else an `if`'s branch or a group)
    bool spread;  // an outermost parallel loop's body (its iterations spread over the cores)
  };
  std::map<const std::vector<Stmt>*, Holder> blocks_;  // a nested block -> what holds it
  std::set<std::tuple<const void*, size_t, const void*, size_t, int, int>> edges_;
  std::map<std::pair<int, int>, int> next_event_;
  std::map<Anchor, std::vector<Stmt>> before_, after_;
};

bool has_sync(const std::vector<Stmt>& body) {
  bool found = false;
  for_each_stmt(body, [&](const Stmt& s) {
    found |= s->kind == StmtKind::OpStmt && opcode_info(s->op.code).category == OpCategory::Sync;
  });
  return found;
}

}  // namespace

Program insert_sync(const Program& tile_program) {
  if (has_sync(tile_program.body)) return tile_program;  // synced by hand: the simulator checks it
  Inserter ins;
  ins.analyse(tile_program.body);
  Program out = tile_program;
  out.body = ins.emit(tile_program.body);
  return out;
}

}  // namespace pypto::sim
