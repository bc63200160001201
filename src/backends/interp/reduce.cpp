// Row/column reductions (TROWSUM TROWMAX TROWMIN TCOLSUM TCOLMAX TCOLMIN) and expansions
// (TROWEXPAND TCOLEXPAND).
#include <cmath>
#include <functional>

#include "backends/interp/machine.h"

namespace pypto::interp {
using namespace ir;

namespace {
enum class Red { Sum, Max, Min };

Red kind(Opcode c) {
  switch (c) {
    case Opcode::TROWMAX:
    case Opcode::TCOLMAX:
      return Red::Max;
    case Opcode::TROWMIN:
    case Opcode::TCOLMIN:
      return Red::Min;
    default:
      return Red::Sum;
  }
}

// Reductions accumulate in double (exact enough to stand for any summation order) and round once.
double reduce(Red k, int64_t n, const std::function<double(int64_t)>& x) {
  double acc = k == Red::Sum ? 0.0 : (k == Red::Max ? -INFINITY : INFINITY);
  for (int64_t i = 0; i < n; ++i) {
    const double v = x(i);
    if (k == Red::Sum)
      acc += v;
    else if (std::isnan(v) || std::isnan(acc))
      acc = NAN;
    else
      acc = k == Red::Max ? std::max(acc, v) : std::min(acc, v);
  }
  return acc;
}
}  // namespace

void exec_reduce_expand(Machine& m, const Op& op) {
  Tile& dst = m.tile(op, 0);
  const Tile& src = m.tile(op, 1);
  switch (op.code) {
    case Opcode::TROWSUM:
    case Opcode::TROWMAX:
    case Opcode::TROWMIN: {
      const Red k = kind(op.code);
      commit(m, op, dst, src.vr, 1, [&](int64_t r, int64_t) {
        return reduce(k, src.vc, [&](int64_t c) { return m.get(op, src, r, c); });
      });
      break;
    }
    case Opcode::TCOLSUM:
    case Opcode::TCOLMAX:
    case Opcode::TCOLMIN: {
      const Red k = kind(op.code);
      commit(m, op, dst, 1, src.vc, [&](int64_t, int64_t c) {
        return reduce(k, src.vr, [&](int64_t r) { return m.get(op, src, r, c); });
      });
      break;
    }
    case Opcode::TROWEXPAND:
      commit(m, op, dst, src.vr, dst.C, [&](int64_t r, int64_t) { return m.get(op, src, r, 0); });
      break;
    case Opcode::TCOLEXPAND:
      commit(m, op, dst, dst.R, src.vc, [&](int64_t, int64_t c) { return m.get(op, src, 0, c); });
      break;
    default:
      m.fail(op, "not a reduce/expand instruction");
  }
}

}  // namespace pypto::interp
