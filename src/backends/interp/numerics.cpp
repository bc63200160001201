// Element-type rounding and the conversions between doubles and caller memory.
#include <cfenv>
#include <cmath>
#include <cstring>
#include <limits>

#include "backends/interp/machine.h"
#include "pto/elem.hpp"

namespace pypto::interp {
namespace {

// f16/bf16 values are pto/elem.hpp's conversions (one rounding from a double or an int64).
double round_f16(const Num& v) {
  return pto::elem::f16_to_float(v.is_float ? pto::elem::f16_from(v.f) : pto::elem::f16_from(v.i));
}
double round_bf16(const Num& v) {
  return pto::elem::bf16_to_float(v.is_float ? pto::elem::bf16_from(v.f) : pto::elem::bf16_from(v.i));
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
      return fnum(round_f16(v));
    case ir::DType::BF16:
      return fnum(round_bf16(v));
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
    case ir::DType::F16:
    case ir::DType::BF16: {
      uint16_t h;
      std::memcpy(&h, p, 2);
      return fnum(t == ir::DType::F16 ? pto::elem::f16_to_float(h) : pto::elem::bf16_to_float(h));
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
      float f = float(round_to(t, n).f);
      std::memcpy(p, &f, 4);
      return;
    }
    case ir::DType::F64:
      std::memcpy(p, &v, 8);
      return;
    case ir::DType::F16:
    case ir::DType::BF16: {
      const uint16_t h = t == ir::DType::F16
                             ? (n.is_float ? pto::elem::f16_from(n.f) : pto::elem::f16_from(n.i))
                             : (n.is_float ? pto::elem::bf16_from(n.f) : pto::elem::bf16_from(n.i));
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
