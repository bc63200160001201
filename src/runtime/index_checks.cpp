// Host-side range checks of run-time indices: see index_checks.h.
#include "runtime/index_checks.h"

#include <string>

#include "ir/trip_count.h"

namespace pypto::runtime {
namespace {

using ir::Error;

// Iterations the exact walk may take per check before it gives up (a loop of 2^60 iterations
// whose index interval arithmetic cannot bound is refused, not walked).
constexpr int64_t kWalkBudget = int64_t(1) << 22;

std::string at(const ir::IndexCheck& c) { return c.where.empty() ? std::string() : " (at " + c.where + ")"; }

[[noreturn]] void fail(const ir::IndexCheck& c, int64_t k, int64_t len) {
  if (!c.message.empty()) throw Error(c.message + at(c));
  if (c.same_extent)
    throw Error("dynamic dimensions of extents " + std::to_string(len) + " and " + std::to_string(k) +
                " cannot be broadcast together (dimension " + std::to_string(c.dim) + " of the result)" +
                at(c));
  throw Error("index " + std::to_string(k) + " is out of range for dimension " + std::to_string(c.dim) +
              " of size " + std::to_string(len) + at(c));
}

int64_t as_int(const ir::ScalarValue& v) { return v.is_float ? int64_t(v.f) : v.i; }

// Fast path: bound every loop variable by its loop's range (ignoring branch conditions) and the
// index by interval arithmetic. True when that proves the check for every iteration.
bool proven_by_intervals(const ir::IndexCheck& c, ir::VarBounds vb) {
  for (const auto& s : c.scopes) {
    if (s.var.empty()) continue;
    auto lo = ir::bounds(s.lo, vb), hi = ir::bounds(s.hi, vb);
    if (!lo || !hi) return false;
    if (hi->hi <= lo->lo) return true;  // the loop never runs
    vb[s.var] = ir::Interval{lo->lo, hi->hi - 1};
  }
  auto k = ir::bounds(c.index, vb), n = ir::bounds(c.length, vb);
  if (c.same_extent) return k && n && k->lo == k->hi && n->lo == n->hi && k->lo == n->lo;
  return k && n && k->lo >= 0 && k->hi < n->lo;
}

// Exact path: walk the nest's iterations, evaluating only index arithmetic.
void walk(const ir::IndexCheck& c, size_t depth, ir::ScalarEnv& env, int64_t& budget) {
  if (depth == c.scopes.size()) {
    int64_t k = as_int(ir::eval(c.index, env)), n = as_int(ir::eval(c.length, env));
    if (c.same_extent ? k != n : (k < 0 || k >= n)) fail(c, k, n);
    return;
  }
  const ir::CheckScope& s = c.scopes[depth];
  if (s.var.empty()) {
    if (ir::eval(s.cond, env).as_double() != 0) walk(c, depth + 1, env, budget);
    return;
  }
  int64_t lo = as_int(ir::eval(s.lo, env)), hi = as_int(ir::eval(s.hi, env));
  int64_t step = as_int(ir::eval(s.step, env));
  if (hi <= lo || step <= 0) return;
  const __int128 trips = ir::trip_count(lo, hi, step);
  for (__int128 t = 0; t < trips; ++t) {
    if (--budget < 0)
      throw Error(
          (c.where.empty() ? std::string() : c.where + ": ") + "cannot check a run-time index in a loop of " +
          std::to_string(int64_t(trips)) +
          " iterations before running it (write the index so its range follows from the loop bounds)");
    env[s.var] = ir::ScalarValue{false, int64_t(lo + t * step), 0};
    walk(c, depth + 1, env, budget);
  }
  env.erase(s.var);
}

}  // namespace

void check_indices(const ir::Program& p, const RunArgs& args) {
  if (p.index_checks.empty()) return;
  ir::ScalarEnv env;
  ir::VarBounds vb;
  for (size_t j = 0; j < p.scalars.size() && j < args.scalars.size(); ++j) {
    env[p.scalars[j].name] = args.scalars[j];
    if (!args.scalars[j].is_float) vb[p.scalars[j].name] = ir::Interval{args.scalars[j].i, args.scalars[j].i};
  }
  for (const ir::IndexCheck& c : p.index_checks) {
    if (proven_by_intervals(c, vb)) continue;
    int64_t budget = kWalkBudget;
    walk(c, 0, env, budget);
  }
}

}  // namespace pypto::runtime
