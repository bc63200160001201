// Parallelisation pass (see parallelize.h): a dependence test on affine offsets.
#include "passes/parallelize.h"

#include <algorithm>
#include <climits>
#include <map>
#include <set>

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

void collect(const std::vector<Stmt>& body, BodyInfo& info, VarBounds& vb) {
  for (auto& s : body) {
    switch (s->kind) {
      case StmtKind::Alloc:
        info.local.insert(s->buffer.get());
        break;
      case StmtKind::For: {
        info.inner_vars.insert(s->var);
        if (auto b = loop_var_bounds(*s, vb)) vb[s->var] = *b;
        collect(s->body, info, vb);
        break;
      }
      case StmtKind::If:
        collect(s->body, info, vb);
        collect(s->orelse, info, vb);
        break;
      case StmtKind::Let:
        info.inner_vars.insert(s->var);
        if (auto b = bounds(s->value, vb)) vb[s->var] = *b;
        break;
      case StmtKind::OpStmt: {
        auto cat = opcode_info(s->op.code).category;
        if (cat == OpCategory::Sync || s->op.code == Opcode::TPREFETCH) break;  // hints touch nothing
        for (size_t i = 0; i < s->op.args.size(); ++i)
          if (auto v = std::get_if<View>(&s->op.args[i]))
            info.accesses.push_back(Access{*v, i == 0 && s->op.code != Opcode::TPREFETCH});
        break;
      }
      default:
        break;
    }
  }
}

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

bool independent(const StmtNode& loop, const VarBounds& outer) {
  auto step = as_int(loop.step);
  if (!step) return false;
  BodyInfo info;
  VarBounds vb = outer;
  if (auto b = loop_var_bounds(loop, vb)) vb[loop.var] = *b;
  collect(loop.body, info, vb);
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
      int64_t a = fps[0].first.a, lo = LLONG_MAX, hi = LLONG_MIN;
      bool same_a = true;
      for (auto& [fp, w] : fps) {
        same_a &= fp.a == a;
        if (w) lo = std::min(lo, fp.lo), hi = std::max(hi, fp.hi);
      }
      if (!same_a || hi - lo + 1 > a * *step) continue;
      ok = std::all_of(fps.begin(), fps.end(), [&](auto& p) { return p.first.lo >= lo && p.first.hi <= hi; });
    }
    if (!ok) return false;
  }
  return true;
}

std::vector<Stmt> mark(const std::vector<Stmt>& body, VarBounds& vb) {
  std::vector<Stmt> out;
  for (auto& s : body) {
    if (s->kind != StmtKind::For && s->kind != StmtKind::If) {
      out.push_back(s);
      continue;
    }
    auto n = std::make_shared<StmtNode>(*s);
    if (s->kind == StmtKind::For) {
      if (n->loop_kind != LoopKind::Parallel && independent(*s, vb)) n->loop_kind = LoopKind::Parallel;
      auto saved = vb;
      if (auto b = loop_var_bounds(*s, vb)) vb[s->var] = *b;
      n->body = mark(s->body, vb);
      vb = saved;
    } else {
      n->body = mark(s->body, vb);
      n->orelse = mark(s->orelse, vb);
    }
    out.push_back(n);
  }
  return out;
}

}  // namespace

Program parallelize(const Program& p) {
  Program out = p;
  VarBounds vb;
  out.body = mark(p.body, vb);
  return out;
}

}  // namespace pypto::passes
