// Reference interpreter: element-type rounding and the conversions to and from caller memory.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>

#include "backends/interp/machine.h"

namespace {
using pypto::interp::fnum;
using pypto::interp::inum;
using pypto::ir::DType;

// The interpreter's conversions on doubles (its values are exact: ints as int64, floats as double).
double round_to(DType t, double v) { return pypto::interp::round_to(t, fnum(v)).as_double(); }
double load_scalar(DType t, const void* p) { return pypto::interp::load_scalar(t, p).as_double(); }
void store_scalar(DType t, void* p, double v) { pypto::interp::store_scalar(t, p, fnum(v)); }

// Every f16 / bf16 bit pattern decodes to a value that rounds to itself and encodes back to the
// same bits (NaNs: to some NaN).
TEST(InterpNumerics, HalfTypesRoundTripEveryBitPattern) {
  for (DType t : {DType::F16, DType::BF16}) {
    for (uint32_t bits = 0; bits < 0x10000; ++bits) {
      const uint16_t h = uint16_t(bits);
      const double v = load_scalar(t, &h);
      if (std::isnan(v)) {
        uint16_t back = 0;
        store_scalar(t, &back, v);
        ASSERT_TRUE(std::isnan(load_scalar(t, &back)));
        continue;
      }
      ASSERT_EQ(round_to(t, v), v) << bits;
      uint16_t back = 0;
      store_scalar(t, &back, round_to(t, v));
      ASSERT_EQ(back, h) << std::hex << bits;
    }
  }
}

// round_to(f16 / bf16) agrees with rounding through the neighbouring representable values:
// the nearest wins and ties go to the even bit pattern.
TEST(InterpNumerics, HalfRoundingIsNearestEven) {
  EXPECT_EQ(round_to(DType::F16, 1.0 + 0x1p-11), 1.0);
  EXPECT_EQ(round_to(DType::F16, 1.0 + 0x1p-11 + 0x1p-30), 1.0 + 0x1p-10);
  EXPECT_EQ(round_to(DType::F16, 65504.0), 65504.0);
  EXPECT_EQ(round_to(DType::F16, 65519.0), 65504.0);
  EXPECT_TRUE(std::isinf(round_to(DType::F16, 65520.0)));
  EXPECT_EQ(round_to(DType::F16, 0x1p-25), 0.0);  // tie between 0 and 2^-24 -> 0
  EXPECT_EQ(round_to(DType::F16, 0x1p-25 + 0x1p-40), 0x1p-24);
  EXPECT_EQ(round_to(DType::BF16, 1.0 + 0x1p-8), 1.0);
  EXPECT_EQ(round_to(DType::BF16, 1.0 + 3 * 0x1p-8), 1.0 + 0x1p-6);
  EXPECT_TRUE(std::isinf(round_to(DType::BF16, 3.4e38)));
  // bf16 of a float equals the float's top 16 bits after round-to-nearest-even of the rest.
  const float f = 1.2345678f;
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint32_t r = (u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000u;
  float g;
  std::memcpy(&g, &r, 4);
  EXPECT_EQ(round_to(DType::BF16, f), double(g));
}

TEST(InterpNumerics, IntegerAndBoolConversions) {
  EXPECT_EQ(round_to(DType::I32, -2.9), -2.0);
  EXPECT_EQ(round_to(DType::I32, 2.9), 2.0);
  EXPECT_EQ(round_to(DType::I32, 2147483648.0), 2147483647.0);  // float -> int saturates
  EXPECT_EQ(round_to(DType::I32, -1e300), -2147483648.0);
  EXPECT_EQ(round_to(DType::I32, NAN), 0.0);
  EXPECT_EQ(round_to(DType::I64, -INFINITY), double(INT64_MIN));
  EXPECT_EQ(round_to(DType::I64, NAN), 0.0);
  EXPECT_EQ(round_to(DType::I64, 1e30), 9223372036854775807.0);  // saturates
  EXPECT_EQ(round_to(DType::Bool, -0.5), 1.0);
  EXPECT_EQ(round_to(DType::Bool, 0.0), 0.0);
  EXPECT_EQ(round_to(DType::F32, 0.1), double(0.1f));
  int64_t big = 0;
  store_scalar(DType::I64, &big, 1e30);
  EXPECT_EQ(big, INT64_MAX);
  uint8_t b = 7;
  store_scalar(DType::Bool, &b, 1.0);
  EXPECT_EQ(b, 1);
}

// Integers are exact (int64 above 2^53 included) and narrow by wrapping.
TEST(InterpNumerics, IntegersAreExact) {
  using pypto::interp::round_to;
  const int64_t big = (int64_t(1) << 62) + 1;  // not a double
  EXPECT_EQ(round_to(DType::I64, inum(big)).i, big);
  EXPECT_EQ(round_to(DType::I32, inum((int64_t(1) << 32) + 5)).i, 5);
  EXPECT_EQ(round_to(DType::I32, inum(int64_t(1) << 31)).i, INT32_MIN);
  int64_t out = 0;
  pypto::interp::store_scalar(DType::I64, &out, inum(big));
  EXPECT_EQ(out, big);
  EXPECT_EQ(pypto::interp::load_scalar(DType::I64, &out).i, big);
  // int64 -> f32 rounds once, directly (not through double).
  const int64_t v = (int64_t(1) << 60) + (int64_t(1) << 36) + 1;
  EXPECT_EQ(round_to(DType::F32, inum(v)).f, double(float(v)));
}

}  // namespace
