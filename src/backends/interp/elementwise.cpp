// Elementwise instructions: Fill (TEXPANDS TCI), Unary (TMOV TNEG ... TNOT), Binary (TADD ...
// TOR), Compare (TCMP_*), Select (TSEL) and Convert (TCVT).
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include "backends/interp/machine.h"
#include "pto/elem.hpp"

namespace pypto::interp {
using namespace ir;

namespace {

constexpr int64_t kNoLimit = std::numeric_limits<int64_t>::max();

// A source operand: a tile (a static R = 1 / C = 1 tile with one valid row / column broadcasts
// along that dimension and does not limit it) or a scalar expression.
struct Src {
  const Tile* t = nullptr;
  Num s;
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

inline Num at(const Machine& m, const Op& op, const Src& s, int64_t r, int64_t c) {
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

// The compute type's C++ type: i32 and i64 exactly, floats in double (the reference precision).
template <class T>
T as(const Num& v) {
  if constexpr (std::is_integral_v<T>)
    return T(v.i);
  else
    return v.as_double();
}

// Calls f with the C++ compute type of dtype ct (int32_t, int64_t or double).
template <class F>
Num with_type(DType ct, F&& f) {
  switch (ct) {
    case DType::I32:
      return f(int32_t());
    case DType::I64:
      return f(int64_t());
    default:
      return f(double());
  }
}

// Element semantics: the functions of pto/elem.hpp, the one definition the CPU kernels share.
template <class T>
Num unary(Opcode code, T x) {
  namespace e = pto::elem;
  switch (code) {
    case Opcode::TMOV:
    case Opcode::TCVT:  // the conversion itself is the rounding to dst's dtype
      return num(x);
    case Opcode::TNEG:
      return num(e::neg(x));
    case Opcode::TABS:
      return num(e::abs(x));
    case Opcode::TEXP:
      return num(e::exp(x));
    case Opcode::TLOG:
      return num(e::log(x));
    case Opcode::TSQRT:
      return num(e::sqrt(x));
    case Opcode::TRSQRT:
      return num(e::rsqrt(x));
    case Opcode::TRECIP:
      return num(e::recip(x));
    case Opcode::TRELU:
      return num(e::relu(x));
    case Opcode::TTANH:
      return num(e::tanh(x));
    case Opcode::TSIGMOID:
      return num(e::sigmoid(x));
    case Opcode::TERF:
      return num(e::erf(x));
    case Opcode::TGELU:
      return num(e::gelu(x));
    case Opcode::TGELU_TANH:
      return num(e::gelu_tanh(x));
    case Opcode::TSILU:
      return num(e::silu(x));
    case Opcode::TFLOOR:
      return num(e::floor(x));
    case Opcode::TNOT:
      return num(e::lnot(x));
    case Opcode::TSIN:
      return num(e::sin(x));
    case Opcode::TCOS:
      return num(e::cos(x));
    case Opcode::TTAN:
      return num(e::tan(x));
    case Opcode::TEXP2:
      return num(e::exp2(x));
    case Opcode::TEXPM1:
      return num(e::expm1(x));
    case Opcode::TLOG2:
      return num(e::log2(x));
    case Opcode::TLOG10:
      return num(e::log10(x));
    case Opcode::TLOG1P:
      return num(e::log1p(x));
    case Opcode::TCBRT:
      return num(e::cbrt(x));
    case Opcode::TCEIL:
      return num(e::ceil(x));
    case Opcode::TROUND:
      return num(e::round(x));
    case Opcode::TTRUNC:
      return num(e::trunc(x));
    case Opcode::TSIGN:
      return num(e::sign(x));
    case Opcode::TBNOT:
      return num(e::bnot(x));
    case Opcode::TERFC:
      return num(e::erfc(x));
    case Opcode::TERFINV:
      return num(e::erfinv(x));
    case Opcode::TLGAMMA:
      return num(e::lgamma(x));
    case Opcode::TDIGAMMA:
      return num(e::digamma(x));
    case Opcode::TTRIGAMMA:
      return num(e::trigamma(x));
    default:
      return fnum(NAN);
  }
}

template <class T>
Num binary(Opcode code, T a, T b) {
  namespace e = pto::elem;
  switch (code) {
    case Opcode::TADD:
      return num(e::add(a, b));
    case Opcode::TSUB:
      return num(e::sub(a, b));
    case Opcode::TMUL:
      return num(e::mul(a, b));
    case Opcode::TDIV:
      return num(e::div(a, b));
    case Opcode::TMAX:
      return num(e::max(a, b));
    case Opcode::TMIN:
      return num(e::min(a, b));
    case Opcode::TPOW:
      return num(e::pow(a, b));
    case Opcode::TAND:
      return num(e::land(a, b));
    case Opcode::TOR:
      return num(e::lor(a, b));
    case Opcode::TATAN2:
      return num(e::atan2(a, b));
    case Opcode::THYPOT:
      return num(e::hypot(a, b));
    case Opcode::TCOPYSIGN:
      return num(e::copysign(a, b));
    case Opcode::TFMOD:
      return num(e::fmod(a, b));
    case Opcode::TREM:
      return num(e::floormod(a, b));
    case Opcode::TFLOORDIV:
      return num(e::floordiv(a, b));
    case Opcode::TGCD:
      return num(e::gcd(a, b));
    case Opcode::TBAND:
      return num(e::band(a, b));
    case Opcode::TBOR:
      return num(e::bor(a, b));
    case Opcode::TBXOR:
      return num(e::bxor(a, b));
    case Opcode::TSHL:
      return num(e::shl(a, b));
    case Opcode::TSHR:
      return num(e::shr(a, b));
    case Opcode::TCMP_LT:
      return inum(e::lt(a, b));
    case Opcode::TCMP_LE:
      return inum(e::le(a, b));
    case Opcode::TCMP_GT:
      return inum(e::gt(a, b));
    case Opcode::TCMP_GE:
      return inum(e::ge(a, b));
    case Opcode::TCMP_EQ:
      return inum(e::eq(a, b));
    case Opcode::TCMP_NE:
      return inum(e::ne(a, b));
    default:
      return fnum(NAN);
  }
}

bool truthy(const Num& v) { return v.is_float ? v.f != 0 : v.i != 0; }  // NaN counts as true

}  // namespace

void exec_elementwise(Machine& m, const Op& op) {
  const OpCategory cat = opcode_info(op.code).category;
  Tile& dst = m.tile(op, 0);
  switch (cat) {
    case OpCategory::Fill: {
      // The scalar is rounded to fill_dtype; TCI adds the column in that type.
      const DType ct = fill_dtype(dst.dtype);
      const Num s = round_to(ct, m.scalar(op, 1));
      const bool iota = op.code == Opcode::TCI;
      commit(m, op, dst, dst.R, dst.C, [&](int64_t, int64_t c) {
        if (!iota) return s;
        return with_type(ct, [&](auto t) {
          using T = decltype(t);
          return num(pto::elem::add(as<T>(s), T(c)));
        });
      });
      break;
    }
    case OpCategory::Unary:
    case OpCategory::Convert: {
      const Tile& src = m.tile(op, 1);
      const int64_t vr = src.vr, vc = src.vc;
      if (op.code == Opcode::TCVT) {  // converted by put(), straight from src's value
        commit(m, op, dst, vr, vc, [&](int64_t r, int64_t c) { return m.get(op, src, r, c); });
        break;
      }
      const DType ct = promote_compute({dst.dtype, src.dtype});
      commit(m, op, dst, vr, vc, [&](int64_t r, int64_t c) {
        const Num x = round_to(ct, m.get(op, src, r, c));
        return with_type(ct, [&](auto t) { return unary(op.code, as<decltype(t)>(x)); });
      });
      break;
    }
    case OpCategory::Binary:
    case OpCategory::Compare: {
      std::vector<Src> s = {source(m, op, 1), source(m, op, 2)};
      if (!s[0].t && !s[1].t) m.fail(op, "needs at least one tile source");
      // Arithmetic computes in the promotion of dst and the tile sources, compares in that of the
      // tile sources (as the CPU kernels do); scalars are rounded to it (docs/isa.md §2).
      DType ct = cat == OpCategory::Compare ? DType::I32 : compute_dtype(dst.dtype);
      for (const Src& x : s)
        if (x.t) ct = promote_compute({ct, x.t->dtype});
      int64_t vr, vc;
      intersect(s, dst, vr, vc);
      commit(m, op, dst, vr, vc, [&](int64_t r, int64_t c) {
        const Num a = round_to(ct, at(m, op, s[0], r, c)), b = round_to(ct, at(m, op, s[1], r, c));
        return with_type(ct, [&](auto t) {
          using T = decltype(t);
          return binary(op.code, as<T>(a), as<T>(b));
        });
      });
      break;
    }
    case OpCategory::Select: {
      std::vector<Src> s = {source(m, op, 1), source(m, op, 2), source(m, op, 3)};
      DType ct = compute_dtype(dst.dtype);
      for (size_t i = 1; i < 3; ++i)
        if (s[i].t) ct = promote_compute({ct, s[i].t->dtype});
      int64_t vr, vc;
      intersect(s, dst, vr, vc);
      commit(m, op, dst, vr, vc, [&](int64_t r, int64_t c) {
        // The mask is tested in its own type (pto::elem::sel); the values meet in ct.
        return round_to(ct, at(m, op, s[truthy(at(m, op, s[0], r, c)) ? 1 : 2], r, c));
      });
      break;
    }
    default:
      m.fail(op, "not an elementwise instruction");
  }
}

}  // namespace pypto::interp
