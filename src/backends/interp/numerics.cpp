// Element-type rounding and the conversions between doubles and caller memory.
#include <cfenv>
#include <cmath>
#include <cstring>
#include <limits>

#include "backends/interp/machine.h"
#include "pto/elem.hpp"

namespace pypto::interp {
namespace {

// Round |a| to a binary float with `bits` significant bits whose smallest subnormal step is
// 2^min_exp, ties to even; overflow (a result >= 2^max_exp) becomes infinity.
double round_binary(double x, int bits, int min_exp, int max_exp) {
  if (!std::isfinite(x) || x == 0) return x;
  int e;
  std::frexp(std::fabs(x), &e);  // |x| = m * 2^e, m in [0.5, 1)
  const double q = std::ldexp(1.0, std::max(e - bits, min_exp));
  const double r = std::nearbyint(std::fabs(x) / q) * q;  // default FE_TONEAREST: ties to even
  if (r >= std::ldexp(1.0, max_exp)) return std::copysign(INFINITY, x);
  return std::copysign(r, x);
}

double round_f16(double x) { return round_binary(x, 11, -24, 16); }
double round_bf16(double x) { return round_binary(x, 8, -133, 128); }

uint16_t f16_bits(double r) {  // r is already representable in f16
  const uint16_t sign = std::signbit(r) ? 0x8000 : 0;
  if (std::isnan(r)) return sign | 0x7E00;
  if (std::isinf(r)) return sign | 0x7C00;
  const double a = std::fabs(r);
  if (a == 0) return sign;
  int e;
  std::frexp(a, &e);
  if (e - 1 >= -14) {
    const auto frac = uint16_t(std::ldexp(a, -(e - 1)) * 1024.0 - 1024.0);
    return uint16_t(sign | uint16_t((e - 1 + 15) << 10) | frac);
  }
  return uint16_t(sign | uint16_t(std::ldexp(a, 24)));
}

double f16_value(uint16_t h) {
  const int exp = (h >> 10) & 0x1F, frac = h & 0x3FF;
  double v;
  if (exp == 0x1F)
    v = frac ? NAN : INFINITY;
  else if (exp == 0)
    v = std::ldexp(double(frac), -24);
  else
    v = std::ldexp(double(frac + 1024), exp - 25);
  return (h & 0x8000) ? -v : v;
}

}  // namespace

Num round_to(ir::DType t, const Num& v) {
  using pto::elem::cast;
  const double d = v.as_double();
  switch (t) {
    case ir::DType::F32:  // directly from int64 (one rounding), like the CPU backend
      return fnum(v.is_float ? double(float(v.f)) : double(float(v.i)));
    case ir::DType::F64:
      return fnum(d);
    case ir::DType::F16:
      return fnum(round_f16(d));
    case ir::DType::BF16:
      return fnum(round_bf16(d));
    case ir::DType::I64:
      return inum(v.is_float ? cast<int64_t>(v.f) : v.i);
    case ir::DType::I32:
      return inum(v.is_float ? cast<int32_t>(v.f) : cast<int32_t>(v.i));
    case ir::DType::Bool:
      return inum(v.is_float ? cast<bool>(v.f) : cast<bool>(v.i));  // NaN counts as true
    case ir::DType::I8:
      return inum(v.is_float ? cast<int8_t>(v.f) : cast<int8_t>(v.i));
    case ir::DType::U8:
      return inum(v.is_float ? cast<uint8_t>(v.f) : cast<uint8_t>(v.i));
    case ir::DType::I16:
      return inum(v.is_float ? cast<int16_t>(v.f) : cast<int16_t>(v.i));
  }
  return v;
}

ir::DType promote_compute(std::initializer_list<ir::DType> ts) {
  auto rank = [](ir::DType t) {
    switch (ir::compute_dtype(t)) {
      case ir::DType::F64:
        return 4;
      case ir::DType::F32:
        return 3;
      case ir::DType::I64:
        return 2;
      default:
        return 1;
    }
  };
  ir::DType best = ir::DType::I32;
  for (ir::DType t : ts)
    if (rank(t) > rank(best)) best = ir::compute_dtype(t);
  return best;
}

Num load_scalar(ir::DType t, const void* p) {
  switch (t) {
    case ir::DType::F32: {
      float f;
      std::memcpy(&f, p, 4);
      return fnum(f);
    }
    case ir::DType::F64: {
      double d;
      std::memcpy(&d, p, 8);
      return fnum(d);
    }
    case ir::DType::F16: {
      uint16_t h;
      std::memcpy(&h, p, 2);
      return fnum(f16_value(h));
    }
    case ir::DType::BF16: {
      uint16_t h;
      std::memcpy(&h, p, 2);
      const uint32_t u = uint32_t(h) << 16;
      float f;
      std::memcpy(&f, &u, 4);
      return fnum(f);
    }
    case ir::DType::I32: {
      int32_t i;
      std::memcpy(&i, p, 4);
      return inum(i);
    }
    case ir::DType::I64: {
      int64_t i;
      std::memcpy(&i, p, 8);
      return inum(i);
    }
    case ir::DType::Bool:
      return inum(*static_cast<const uint8_t*>(p) ? 1 : 0);
    case ir::DType::I8:
      return inum(*static_cast<const int8_t*>(p));
    case ir::DType::U8:
      return inum(*static_cast<const uint8_t*>(p));
    case ir::DType::I16: {
      int16_t i;
      std::memcpy(&i, p, 2);
      return inum(i);
    }
  }
  return inum(0);
}

void store_scalar(ir::DType t, void* p, const Num& n) {
  const double v = n.as_double();
  switch (t) {
    case ir::DType::F32: {
      float f = float(v);
      std::memcpy(p, &f, 4);
      return;
    }
    case ir::DType::F64:
      std::memcpy(p, &v, 8);
      return;
    case ir::DType::F16: {
      uint16_t h = f16_bits(v);
      std::memcpy(p, &h, 2);
      return;
    }
    case ir::DType::BF16: {
      const float f = float(v);
      uint32_t u;
      std::memcpy(&u, &f, 4);
      uint16_t h = std::isnan(f) ? uint16_t((u >> 16) | 0x0040) : uint16_t(u >> 16);
      std::memcpy(p, &h, 2);
      return;
    }
    case ir::DType::I32: {
      int32_t i = int32_t(round_to(t, n).i);
      std::memcpy(p, &i, 4);
      return;
    }
    case ir::DType::I64: {
      int64_t i = round_to(t, n).i;
      std::memcpy(p, &i, 8);
      return;
    }
    case ir::DType::Bool:
    case ir::DType::U8:
      *static_cast<uint8_t*>(p) = uint8_t(round_to(t, n).i);
      return;
    case ir::DType::I8:
      *static_cast<int8_t*>(p) = int8_t(round_to(t, n).i);
      return;
    case ir::DType::I16: {
      int16_t i = int16_t(round_to(t, n).i);
      std::memcpy(p, &i, 2);
      return;
    }
  }
}

}  // namespace pypto::interp
