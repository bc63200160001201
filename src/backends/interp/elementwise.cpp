// Elementwise instructions: Fill (TEXPANDS TCI), Unary (TMOV TNEG ... TNOT), Binary (TADD ...
// TOR), Compare (TCMP_*), Select (TSEL) and Convert (TCVT).
#include <algorithm>
#include <cmath>
#include <limits>

#include "backends/interp/machine.h"

namespace pypto::interp {
using namespace ir;

namespace {

constexpr int64_t kNoLimit = std::numeric_limits<int64_t>::max();

// A source operand: a tile (a static R = 1 / C = 1 tile with one valid row / column broadcasts
// along that dimension and does not limit it) or a scalar expression.
struct Src {
  const Tile* t = nullptr;
  double s = 0;
  bool brow = false, bcol = false;
};

Src source(Machine& m, const Op& op, size_t i) {
  Src s;
  if (m.is_scalar(op, i)) {
    s.s = m.scalar(op, i);
    return s;
  }
  s.t = &m.tile(op, i);
  s.brow = s.t->R == 1 && s.t->vr == 1;
  s.bcol = s.t->C == 1 && s.t->vc == 1;
  return s;
}

inline double at(const Machine& m, const Op& op, const Src& s, int64_t r, int64_t c) {
  if (!s.t) return s.s;
  return m.get(op, *s.t, s.brow ? 0 : r, s.bcol ? 0 : c);
}

// "valid ∩" over the sources; a dimension nothing limits takes the destination's full extent.
void intersect(const std::vector<Src>& srcs, const Tile& dst, int64_t& vr, int64_t& vc) {
  vr = vc = kNoLimit;
  for (const Src& s : srcs) {
    if (!s.t) continue;
    if (!s.brow) vr = std::min(vr, s.t->vr);
    if (!s.bcol) vc = std::min(vc, s.t->vc);
  }
  if (vr == kNoLimit) vr = dst.R;
  if (vc == kNoLimit) vc = dst.C;
}

// A scalar operand takes the type the instruction computes in, as a native implementation whose
// scalar parameter has the tile's element type would: the first tile source's dtype, else dst's.
void round_scalars(std::vector<Src>& srcs, DType fallback) {
  DType t = fallback;
  for (const Src& s : srcs)
    if (s.t) {
      t = s.t->dtype;
      break;
    }
  for (Src& s : srcs)
    if (!s.t) s.s = round_to(t, s.s);
}

double unary(Opcode code, double x) {
  switch (code) {
    case Opcode::TMOV:
      return x;
    case Opcode::TNEG:
      return -x;
    case Opcode::TABS:
      return std::fabs(x);
    case Opcode::TEXP:
      return std::exp(x);
    case Opcode::TLOG:
      return std::log(x);
    case Opcode::TSQRT:
      return std::sqrt(x);
    case Opcode::TRSQRT:
      return 1.0 / std::sqrt(x);
    case Opcode::TRECIP:
      return 1.0 / x;
    case Opcode::TRELU:
      return x > 0 ? x : (std::isnan(x) ? x : 0.0);
    case Opcode::TTANH:
      return std::tanh(x);
    case Opcode::TSIGMOID:
      return 1.0 / (1.0 + std::exp(-x));
    case Opcode::TERF:
      return std::erf(x);
    case Opcode::TGELU:
      // erfc form: 1 + erf(z) cancels to nothing in the negative tail, erfc(-z) does not.
      return 0.5 * x * std::erfc(-x / std::sqrt(2.0));
    case Opcode::TGELU_TANH: {
      // 0.5 (1 + tanh(u)) == 1 / (1 + exp(-2u)), without the cancellation for negative u.
      const double k = std::sqrt(2.0 / M_PI);
      return x / (1.0 + std::exp(-2.0 * k * (x + 0.044715 * x * x * x)));
    }
    case Opcode::TSILU:
      return x / (1.0 + std::exp(-x));
    case Opcode::TFLOOR:
      return std::floor(x);
    case Opcode::TNOT:
      return x == 0 ? 1.0 : 0.0;
    case Opcode::TCVT:
      return x;  // the conversion itself is the rounding to dst's dtype
    default:
      return NAN;
  }
}

bool is_int(DType t) { return t == DType::I32 || t == DType::I64; }

double binary(const Machine& m, const Op& op, bool int_math, double a, double b) {
  switch (op.code) {
    case Opcode::TADD:
      return a + b;
    case Opcode::TSUB:
      return a - b;
    case Opcode::TMUL:
      return a * b;
    case Opcode::TDIV:
      if (int_math) {  // integer division truncates toward zero, as in C++
        if (b == 0) m.fail(op, "integer division by zero");
        return std::trunc(a / b);
      }
      return a / b;
    case Opcode::TMAX:
      return (a > b || std::isnan(a)) ? a : b;
    case Opcode::TMIN:
      return (a < b || std::isnan(a)) ? a : b;
    case Opcode::TPOW:
      return std::pow(a, b);
    case Opcode::TAND:
      return (a != 0 && b != 0) ? 1.0 : 0.0;
    case Opcode::TOR:
      return (a != 0 || b != 0) ? 1.0 : 0.0;
    case Opcode::TCMP_LT:
      return a < b ? 1.0 : 0.0;
    case Opcode::TCMP_LE:
      return a <= b ? 1.0 : 0.0;
    case Opcode::TCMP_GT:
      return a > b ? 1.0 : 0.0;
    case Opcode::TCMP_GE:
      return a >= b ? 1.0 : 0.0;
    case Opcode::TCMP_EQ:
      return a == b ? 1.0 : 0.0;
    case Opcode::TCMP_NE:
      return a != b ? 1.0 : 0.0;
    default:
      return NAN;
  }
}

}  // namespace

void exec_elementwise(Machine& m, const Op& op) {
  const OpCategory cat = opcode_info(op.code).category;
  Tile& dst = m.tile(op, 0);
  switch (cat) {
    case OpCategory::Fill: {
      const double s = round_to(compute_dtype(dst.dtype), m.scalar(op, 1));
      const bool iota = op.code == Opcode::TCI;
      commit(m, op, dst, dst.R, dst.C, [&](int64_t, int64_t c) { return iota ? s + double(c) : s; });
      break;
    }
    case OpCategory::Unary:
    case OpCategory::Convert: {
      const Tile& src = m.tile(op, 1);
      const int64_t vr = src.vr, vc = src.vc;
      commit(m, op, dst, vr, vc, [&](int64_t r, int64_t c) { return unary(op.code, m.get(op, src, r, c)); });
      break;
    }
    case OpCategory::Binary:
    case OpCategory::Compare: {
      std::vector<Src> s = {source(m, op, 1), source(m, op, 2)};
      if (!s[0].t && !s[1].t) m.fail(op, "needs at least one tile source");
      round_scalars(s, dst.dtype);
      bool int_math = is_int(dst.dtype);
      for (const Src& x : s)
        if (x.t && !is_int(x.t->dtype) && x.t->dtype != DType::Bool) int_math = false;
      int64_t vr, vc;
      intersect(s, dst, vr, vc);
      commit(m, op, dst, vr, vc, [&](int64_t r, int64_t c) {
        return binary(m, op, int_math, at(m, op, s[0], r, c), at(m, op, s[1], r, c));
      });
      break;
    }
    case OpCategory::Select: {
      std::vector<Src> s = {source(m, op, 1), source(m, op, 2), source(m, op, 3)};
      for (size_t i = 1; i < 3; ++i)
        if (!s[i].t) s[i].s = round_to(compute_dtype(dst.dtype), s[i].s);
      int64_t vr, vc;
      intersect(s, dst, vr, vc);
      commit(m, op, dst, vr, vc, [&](int64_t r, int64_t c) {
        return at(m, op, s[0], r, c) != 0 ? at(m, op, s[1], r, c) : at(m, op, s[2], r, c);
      });
      break;
    }
    default:
      m.fail(op, "not an elementwise instruction");
  }
}

}  // namespace pypto::interp
