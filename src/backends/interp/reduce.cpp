// Row/column reductions (TROWSUM TROWMAX TROWMIN TCOLSUM TCOLMAX TCOLMIN), row arg-reductions
// (TROWARGMAX TROWARGMIN) and expansions (TROWEXPAND TCOLEXPAND).
#include <cmath>
#include <functional>
#include <limits>
#include <type_traits>

#include "backends/interp/machine.h"
#include "pto/elem.hpp"

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

// Reductions accumulate in the source's compute type, floats in double (exact enough to stand for
// any summation order), integers exactly with wrap-around (pto::elem::add), and round once.
// Empty: 0 for a sum; -inf / +inf for max / min (integers: the type's lowest / highest value).
template <class T>
Num reduce_t(Red k, int64_t n, const std::function<Num(int64_t)>& x) {
  namespace e = pto::elem;
  using L = std::numeric_limits<T>;
  T acc = k == Red::Sum ? T(0)
                        : (k == Red::Max ? (L::has_infinity ? -L::infinity() : L::lowest())
                                         : (L::has_infinity ? L::infinity() : L::max()));
  for (int64_t i = 0; i < n; ++i) {
    const Num v = x(i);
    const T t = std::is_integral_v<T> ? T(v.i) : T(v.as_double());
    acc = k == Red::Sum ? e::add(acc, t) : (k == Red::Max ? e::max(acc, t) : e::min(acc, t));
  }
  if constexpr (std::is_integral_v<T>)
    return inum(int64_t(acc));
  else
    return fnum(double(acc));
}

// The column of the row's first NaN if it has one (a NaN is the extreme, as torch), else of the
// first element equal to the row's maximum (Max) or minimum; 0 for an empty row. Values compare
// exactly: floats as doubles (every source float is one), integers as int64.
Num arg_extreme(bool max, int64_t n, const std::function<Num(int64_t)>& x) {
  int64_t best = 0;
  Num bv{};
  for (int64_t i = 0; i < n; ++i) {
    const Num v = x(i);
    if (v.is_float && std::isnan(v.f)) return inum(i);
    const bool better =
        i == 0 || (v.is_float ? (max ? v.f > bv.f : v.f < bv.f) : (max ? v.i > bv.i : v.i < bv.i));
    if (better) best = i, bv = v;
  }
  return inum(best);
}

Num reduce(DType ct, Red k, int64_t n, const std::function<Num(int64_t)>& x) {
  switch (ct) {
    case DType::I32:
      return reduce_t<int32_t>(k, n, x);
    case DType::I64:
      return reduce_t<int64_t>(k, n, x);
    default:
      return reduce_t<double>(k, n, x);
  }
}
}  // namespace

void exec_reduce_expand(Machine& m, const Op& op) {
  Tile& dst = m.tile(op, 0);
  const Tile& src = m.tile(op, 1);
  const DType ct = promote_compute({src.dtype, dst.dtype});  // a sum into i64 accumulates in i64
  switch (op.code) {
    case Opcode::TROWSUM:
    case Opcode::TROWMAX:
    case Opcode::TROWMIN: {
      const Red k = kind(op.code);
      commit(m, op, dst, src.vr, 1, [&](int64_t r, int64_t) {
        return reduce(ct, k, src.vc, [&](int64_t c) { return m.get(op, src, r, c); });
      });
      break;
    }
    case Opcode::TROWARGMAX:
    case Opcode::TROWARGMIN: {
      const bool max = op.code == Opcode::TROWARGMAX;
      commit(m, op, dst, src.vr, 1, [&](int64_t r, int64_t) {
        return arg_extreme(max, src.vc, [&](int64_t c) { return m.get(op, src, r, c); });
      });
      break;
    }
    case Opcode::TCOLSUM:
    case Opcode::TCOLMAX:
    case Opcode::TCOLMIN: {
      const Red k = kind(op.code);
      commit(m, op, dst, 1, src.vc, [&](int64_t, int64_t c) {
        return reduce(ct, k, src.vr, [&](int64_t r) { return m.get(op, src, r, c); });
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
