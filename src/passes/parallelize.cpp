// Parallelisation pass (see parallelize.h): a dependence test on affine offsets.
#include "passes/parallelize.h"

#include <algorithm>
#include <climits>
#include <map>
#include <set>

#include "ir/mutator.h"
#include "ir/visitor.h"

namespace pypto::passes {
using namespace ir;

namespace {

struct Access {
  View view;
  bool write;
};

struct BodyInfo {
  std::set<const Buffer*> local;  // allocated inside the body
  std::vector<Access> accesses;
  std::set<std::string> inner_vars;  // loop variables and lets defined inside the body
};

// Interval of a loop variable: lo .. the last value the loop reaches.
std::optional<Interval> loop_var_bounds(const StmtNode& s, const VarBounds& vb) {
  auto lo = bounds(s.lo, vb);
  auto hi = bounds(s.hi, vb);
  auto st = as_int(s.step);
  if (!lo || !hi || !st) return std::nullopt;
  int64_t last = hi->hi - 1;
  if (lo->lo == lo->hi) last = lo->lo + std::max<int64_t>(0, (hi->hi - 1 - lo->lo) / *st) * *st;
  return Interval{lo->lo, std::max(lo->lo, last)};
}

// The allocations, accesses and inner variables of a loop body; vb gains the bounds of the
// variables defined inside it.
class Collector : public StmtVisitor {
 public:
  Collector(BodyInfo& info, VarBounds& vb) : info_(info), vb_(vb) {}

 private:
  BodyInfo& info_;
  VarBounds& vb_;

  void visit_alloc(const StmtNode& s) override { info_.local.insert(s.buffer.get()); }
  void visit_for(const StmtNode& s) override {
    info_.inner_vars.insert(s.var);
    if (auto b = loop_var_bounds(s, vb_)) vb_[s.var] = *b;
    visit_block(s.body);
  }
  void visit_let(const StmtNode& s) override {
    info_.inner_vars.insert(s.var);
    if (auto b = bounds(s.value, vb_)) vb_[s.var] = *b;
  }
  void visit_op(const StmtNode& s) override {
    if (opcode_info(s.op.code).category == OpCategory::Sync || s.op.code == Opcode::TPREFETCH)
      return;  // hints touch nothing
    StmtVisitor::visit_op(s);
  }
  void visit_view(const View& v, bool written) override { info_.accesses.push_back(Access{v, written}); }
};

bool mentions(const Expr& e, const std::string& v) {
  std::vector<std::string> vars;
  collect_vars(e, vars);
  return std::find(vars.begin(), vars.end(), v) != vars.end();
}

// Footprint of one access in base dim d, relative to a*v: [lo, hi] or nullopt if not affine.
struct Footprint {
  int64_t a, lo, hi;
};

std::optional<Footprint> footprint(const View& view, int d, const std::string& v, const BodyInfo& info,
                                   const VarBounds& vb) {
  Expr off = view.offset[d];
  Expr c = substitute(off, {{v, int_imm(0)}});
  auto a = as_int(substitute(off, {{v, int_imm(1)}}) - c);
  if (!a) return std::nullopt;
  if (!as_int(off - (int_imm(*a) * var(v) + c)).has_value()) return std::nullopt;  // not affine in v
  if (mentions(c, v)) return std::nullopt;
  // Variables defined outside the loop are fixed while it runs; they must enter additively.
  std::vector<std::string> vars;
  collect_vars(c, vars);
  std::map<std::string, Expr> outer_zero;
  for (auto& x : vars)
    if (!info.inner_vars.count(x)) outer_zero[x] = int_imm(0);
  Expr c0 = substitute(c, outer_zero);
  std::vector<std::string> dv;
  collect_vars(c - c0, dv);
  for (auto& x : dv)
    if (info.inner_vars.count(x)) return std::nullopt;
  auto b = bounds(c0, vb);
  if (!b) return std::nullopt;
  bool kept = std::find(view.dims.begin(), view.dims.end(), d) != view.dims.end();
  int64_t span = kept ? (view.size[d] - 1) * view.step[d] : 0;
  return Footprint{*a, b->lo, b->hi + span};
}

// Whether accesses (footprint relative to a * v, written?) of one dim touch nothing across two
// iterations of a loop with this step, its variable within `v` (null: unknown). Accesses whose
// whole ranges over the loop overlap form a group, which must fit one iteration's window: the
// writes' union no wider than the step, every access of the group inside it. Groups whose ranges
// over the loop are apart (a head's q, k and v columns at c, D + c, 2D + c) cannot meet.
bool disjoint_across_iterations(std::vector<std::pair<Footprint, bool>> fps, int64_t step,
                                const Interval* v) {
  const int64_t a = fps[0].first.a;
  for (auto& [fp, w] : fps)
    if (fp.a != a) return false;
  // Each access's range over the whole loop; sorted by start, overlapping ranges chain into groups.
  auto whole = [&](const Footprint& f) {
    return v ? std::pair<int64_t, int64_t>{f.lo + a * v->lo, f.hi + a * v->hi}
             : std::pair<int64_t, int64_t>{LLONG_MIN, LLONG_MAX};
  };
  std::sort(fps.begin(), fps.end(),
            [&](auto& x, auto& y) { return whole(x.first).first < whole(y.first).first; });
  for (size_t g = 0; g < fps.size();) {
    size_t e = g + 1;
    int64_t reach = whole(fps[g].first).second;
    while (e < fps.size() && whole(fps[e].first).first <= reach)
      reach = std::max(reach, whole(fps[e++].first).second);
    int64_t lo = LLONG_MAX, hi = LLONG_MIN;
    for (size_t i = g; i < e; ++i)
      if (fps[i].second) lo = std::min(lo, fps[i].first.lo), hi = std::max(hi, fps[i].first.hi);
    if (lo <= hi) {  // the group writes
      if (hi - lo + 1 > a * step) return false;
      for (size_t i = g; i < e; ++i)
        if (fps[i].first.lo < lo || fps[i].first.hi > hi) return false;
    }
    g = e;
  }
  return true;
}

bool independent(const StmtNode& loop, const VarBounds& outer) {
  auto step = as_int(loop.step);
  if (!step) return false;
  BodyInfo info;
  VarBounds vb = outer;
  if (auto b = loop_var_bounds(loop, vb)) vb[loop.var] = *b;
  Collector(info, vb).visit_block(loop.body);
  std::map<const Buffer*, std::vector<const Access*>> by_buffer;
  for (auto& acc : info.accesses) {
    if (info.local.count(acc.view.buf.get())) continue;
    if (acc.view.buf->space != Space::Global) {
      if (acc.write) return false;  // a tile shared across iterations
      continue;
    }
    by_buffer[acc.view.buf.get()].push_back(&acc);
  }
  for (auto& [buf, accs] : by_buffer) {
    bool written = std::any_of(accs.begin(), accs.end(), [](const Access* a) { return a->write; });
    if (!written) continue;
    bool ok = false;
    for (int d = 0; d < buf->rank() && !ok; ++d) {
      std::vector<std::pair<Footprint, bool>> fps;
      bool affine = true;
      for (auto* acc : accs) {
        auto fp = footprint(acc->view, d, loop.var, info, vb);
        if (!fp || fp->a <= 0) {
          affine = false;
          break;
        }
        fps.push_back({*fp, acc->write});
      }
      if (!affine) continue;
      ok = disjoint_across_iterations(fps, *step, vb.count(loop.var) ? &vb.at(loop.var) : nullptr);
    }
    if (!ok) return false;
  }
  return true;
}

// Marks every loop whose iterations are independent parallel, knowing the bounds of the
// variables of the loops around it.
class Marker : public StmtMutator {
 public:
  explicit Marker(VarBounds vb) : vb_(std::move(vb)) {}

 private:
  VarBounds vb_;

  Stmt mutate_for(const Stmt& s) override {
    bool parallel = s->loop_kind != LoopKind::Parallel && independent(*s, vb_);
    auto saved = vb_;
    if (auto b = loop_var_bounds(*s, vb_)) vb_[s->var] = *b;
    Stmt n = StmtMutator::mutate_for(s);
    vb_ = saved;
    if (!parallel) return n;
    auto c = std::make_shared<StmtNode>(*n);
    c->loop_kind = LoopKind::Parallel;
    return c;
  }
  Stmt mutate_op(const Stmt& s) override { return s; }
};

}  // namespace

Program parallelize(const Program& p) { return Marker(dim_symbol_bounds(p)).mutate_program(p); }

}  // namespace pypto::passes
