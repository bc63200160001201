// The element semantics of pto/elem.hpp (docs/isa.md §2): the documented edge cases hold for
// every compute type, and the CPU kernels' vectorised float paths give exactly the same values
// there as the element functions.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "pto/pto.hpp"

namespace {
namespace e = pto::elem;
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

TEST(ElemSemantics, IntegerArithmeticWraps) {
  EXPECT_EQ(e::add<int32_t>(INT32_MAX, 1), INT32_MIN);
  EXPECT_EQ(e::sub<int64_t>(INT64_MIN, 1), INT64_MAX);
  EXPECT_EQ(e::mul<int64_t>(INT64_MAX, 2), -2);
  EXPECT_EQ(e::neg<int32_t>(INT32_MIN), INT32_MIN);
  EXPECT_EQ(e::abs<int64_t>(INT64_MIN), INT64_MIN);
  EXPECT_EQ(e::pow<int32_t>(3, 40), int32_t(uint32_t(12157665459056928801ull)));
  EXPECT_EQ(e::pow<int64_t>(2, 62), int64_t(1) << 62);
  EXPECT_EQ(e::pow<int64_t>(2, -1), 0);
  EXPECT_EQ(e::pow<int64_t>(-1, -3), -1);
  EXPECT_EQ(e::pow<int64_t>(0, 0), 1);
  // 16-bit operands wrap too (computed in unsigned int: promoted to int, 0xFFFF * 0xFFFF would
  // overflow, undefined behaviour that GCC happens to hide by narrowing the multiply).
  volatile int16_t minus_one = -1;
  EXPECT_EQ(e::wrap_mul<int16_t>(minus_one, minus_one), 1);
  EXPECT_EQ(e::wrap_mul<int16_t>(INT16_MIN, minus_one), INT16_MIN);
  EXPECT_EQ(e::wrap_add<int16_t>(INT16_MAX, 1), INT16_MIN);
}

TEST(ElemSemantics, IntegerDivisionNeverTraps) {
  EXPECT_EQ(e::div<int32_t>(7, 0), 0);
  EXPECT_EQ(e::div<int32_t>(-7, 2), -3);  // truncates
  EXPECT_EQ(e::div<int32_t>(INT32_MIN, -1), INT32_MIN);
  EXPECT_EQ(e::div<int64_t>(INT64_MIN, -1), INT64_MIN);
  EXPECT_EQ(e::rem<int64_t>(INT64_MIN, -1), 0);
  EXPECT_EQ(e::floordiv<int64_t>(-7, 2), -4);
  EXPECT_EQ(e::floormod<int64_t>(-7, 2), 1);
  EXPECT_EQ(e::floormod<int64_t>(7, -2), -1);
  EXPECT_EQ(e::floordiv<int64_t>(5, 0), 0);
  EXPECT_EQ(e::floormod<int64_t>(5, 0), 0);
  EXPECT_EQ(e::floordiv<int64_t>(INT64_MIN, -1), INT64_MIN);
  EXPECT_EQ(e::floormod<double>(-7.5, 2.0), 0.5);
}

// gcd of the magnitudes (|INT_MIN| taken as unsigned, the result wrapped); float gcd of a NaN or
// an infinity is NaN (Euclid's fmod steps on them never reached 0: the kernel hung).
TEST(ElemSemantics, GcdOfExtremes) {
  EXPECT_EQ(e::gcd<int32_t>(INT32_MIN, 6), 2);
  EXPECT_EQ(e::gcd<int64_t>(INT64_MIN, INT64_MIN + 1), 1);
  EXPECT_EQ(e::gcd<int32_t>(INT32_MIN, 0), INT32_MIN);
  EXPECT_EQ(e::gcd<int32_t>(-12, 18), 6);
  EXPECT_EQ(e::gcd<int64_t>(0, 0), 0);
  EXPECT_EQ(e::gcd(12.0f, -1.5f), 1.5f);
  EXPECT_TRUE(std::isnan(e::gcd(7.0, kNaN)));
  EXPECT_TRUE(std::isnan(e::gcd(-kInf, 3.0)));
  EXPECT_TRUE(std::isnan(e::gcd(0.0f, float(kInf))));
}

// f16/bf16 round once from any source: a double or an integer is not rounded to float first.
TEST(ElemSemantics, StorageFloatsRoundOnce) {
  const double p = std::ldexp(1.0, -40);
  EXPECT_EQ(e::f16_from(1 + std::ldexp(1.0, -11) + p), 0x3c01);                 // via float: the tie, 1.0
  EXPECT_EQ(e::f16_from(1 + std::ldexp(1.0, -11)), 0x3c00);                     // a tie: to even
  EXPECT_EQ(e::f16_from(std::ldexp(1.0, -25) + std::ldexp(1.0, -60)), 0x0001);  // subnormal
  EXPECT_EQ(e::f16_from(65519.99), 0x7bff);
  EXPECT_EQ(e::f16_from(65520.0), 0x7c00);
  EXPECT_EQ(e::f16_from(-1e300), 0xfc00);
  EXPECT_EQ(e::f16_from(-1e-300), 0x8000);
  EXPECT_EQ(e::bf16_from(1 + std::ldexp(1.0, -8) + p), 0x3f81);
  EXPECT_EQ(e::bf16_from(std::ldexp(1.0, 128) - std::ldexp(1.0, 119) - std::ldexp(1.0, 90)), 0x7f7f);
  EXPECT_EQ(e::bf16_from(std::ldexp(1.0, 128) - std::ldexp(1.0, 119)), 0x7f80);  // the tie: inf
  EXPECT_EQ(e::bf16_from(int64_t(1) << 30 | int64_t(1) << 22 | 1), 0x4e81);      // via float: 0x4e80
  EXPECT_EQ(e::bf16_from(int32_t(1) << 30 | int32_t(1) << 22), 0x4e80);          // a tie: to even
  EXPECT_EQ(e::bf16_from(INT64_MIN), 0xdf00);
  EXPECT_EQ(e::f16_from(int64_t(65519)), 0x7bff);
  EXPECT_TRUE(std::isnan(e::bf16_to_float(e::bf16_from(kNaN))));
  EXPECT_TRUE(std::isnan(e::f16_to_float(e::f16_from(-kNaN))));
  EXPECT_EQ(e::bf16_from(pto::bit_cast<float>(0x7fffffffu)), 0x7fff);  // a NaN, not -0 (the carry)
}

TEST(ElemSemantics, FloatToIntSaturatesNanIsZero) {
  EXPECT_EQ(e::cast<int32_t>(kNaN), 0);
  EXPECT_EQ(e::cast<int32_t>(kInf), INT32_MAX);
  EXPECT_EQ(e::cast<int32_t>(-kInf), INT32_MIN);
  EXPECT_EQ(e::cast<int32_t>(3e9), INT32_MAX);
  EXPECT_EQ(e::cast<int32_t>(-2.7), -2);
  EXPECT_EQ(e::cast<int32_t>(2147483647.9), INT32_MAX);
  EXPECT_EQ(e::cast<int32_t>(-2147483648.9), INT32_MIN);
  EXPECT_EQ(e::cast<int64_t>(9.3e18), INT64_MAX);
  EXPECT_EQ(e::cast<int64_t>(-9.3e18), INT64_MIN);
  EXPECT_EQ(e::cast<int64_t>(std::nanf("")), 0);
  EXPECT_EQ(e::cast<int32_t>(2147483648.0f), INT32_MAX);
  EXPECT_EQ(e::cast<int32_t>(int64_t(1) << 32 | 5), 5);  // int -> int wraps
  EXPECT_EQ(e::cast<bool>(kNaN), 1);                     // NaN is true
  EXPECT_EQ(e::cast<bool>(-0.0), 0);
  // The small integers: saturating from floats (NaN -> 0), wrapping from integers.
  EXPECT_EQ(e::cast<int8_t>(kNaN), 0);
  EXPECT_EQ(e::cast<int8_t>(127.99), 127);
  EXPECT_EQ(e::cast<int8_t>(128.0), 127);
  EXPECT_EQ(e::cast<int8_t>(-128.99), -128);
  EXPECT_EQ(e::cast<int8_t>(-kInf), -128);
  EXPECT_EQ(e::cast<uint8_t>(255.5f), 255);
  EXPECT_EQ(e::cast<uint8_t>(256.0f), 255);
  EXPECT_EQ(e::cast<uint8_t>(-0.5), 0);
  EXPECT_EQ(e::cast<uint8_t>(-kInf), 0);
  EXPECT_EQ(e::cast<uint8_t>(kNaN), 0);
  EXPECT_EQ(e::cast<int16_t>(32767.5), 32767);
  EXPECT_EQ(e::cast<int16_t>(-1e30f), -32768);
  EXPECT_EQ(e::cast<int8_t>(int32_t(200)), -56);
  EXPECT_EQ(e::cast<uint8_t>(int64_t(-1)), 255);
  EXPECT_EQ(e::cast<int16_t>(int64_t(65536 + 5)), 5);
}

// gelu, gelu_tanh, silu, sigmoid, tanh, exp, log at +-inf and NaN, for float and double alike.
template <class T>
void check_special_values() {
  const T inf = std::numeric_limits<T>::infinity(), nan = std::numeric_limits<T>::quiet_NaN();
  EXPECT_EQ(e::exp(-inf), T(0));
  EXPECT_EQ(e::exp(inf), inf);
  EXPECT_EQ(e::log(T(0)), -inf);
  EXPECT_TRUE(std::isnan(e::log(T(-1))));
  EXPECT_EQ(e::log(inf), inf);
  EXPECT_EQ(e::tanh(inf), T(1));
  EXPECT_EQ(e::tanh(-inf), T(-1));
  EXPECT_EQ(e::erf(-inf), T(-1));
  EXPECT_EQ(e::sigmoid(-inf), T(0));
  EXPECT_EQ(e::sigmoid(inf), T(1));
  for (T (*f)(T) : {&e::gelu<T>, &e::gelu_tanh<T>, &e::silu<T>}) {
    EXPECT_EQ(f(-inf), T(0));
    EXPECT_TRUE(std::signbit(f(-inf)));
    EXPECT_EQ(f(inf), inf);
    EXPECT_TRUE(std::isnan(f(nan)));
  }
  for (T (*f)(T) :
       {&e::exp<T>, &e::log<T>, &e::tanh<T>, &e::sigmoid<T>, &e::erf<T>, &e::sqrt<T>, &e::relu<T>})
    EXPECT_TRUE(std::isnan(f(nan)));
  EXPECT_TRUE(std::isnan(e::max(nan, T(1))));
  EXPECT_TRUE(std::isnan(e::max(T(1), nan)));
  // sign as torch.sign: NaN -> 0 (NumPy gives NaN), -0.0 -> +0, +-inf -> +-1.
  EXPECT_EQ(e::sign(nan), T(0));
  EXPECT_FALSE(std::signbit(e::sign(T(-0.0))));
  EXPECT_EQ(e::sign(-inf), T(-1));
  EXPECT_EQ(e::sign(inf), T(1));
  EXPECT_TRUE(std::isnan(e::min(nan, T(1))));
  EXPECT_TRUE(std::isnan(e::min(T(1), nan)));
  EXPECT_EQ(e::rsqrt(T(0)), inf);
  EXPECT_EQ(e::lnot(nan), T(0));
}
TEST(ElemSemantics, SpecialValuesFloat) { check_special_values<float>(); }
TEST(ElemSemantics, SpecialValuesDouble) { check_special_values<double>(); }

// GELU has one formula: ½ x erfc(-x/√2) (equal to ½ x (1 + erf(x/√2)), without its cancellation).
TEST(ElemSemantics, GeluOneFormula) {
  for (double x : {-30.0, -8.0, -3.0, -0.5, 0.7, 4.0, 50.0})
    EXPECT_NEAR(e::gelu(x) / (0.5 * x * std::erfc(-x / std::sqrt(2.0))), 1.0, 1e-11)
        << x;  // erfc amplifies by x^2
  EXPECT_EQ(e::gelu(0.0), 0.0);
  // The negative tail keeps its relative accuracy, where 1 + erf(x/√2) would be 0.
  EXPECT_GT(e::gelu(-30.0), -1e-190);
  EXPECT_LT(e::gelu(-30.0), 0.0);
}

// erfc, erfinv, lgamma, digamma, trigamma at their edges, as torch defines them (docs/isa.md).
template <class T>
void check_special_function_edges() {
  const T inf = std::numeric_limits<T>::infinity(), nan = std::numeric_limits<T>::quiet_NaN();
  EXPECT_EQ(e::erfc(-inf), T(2));
  EXPECT_EQ(e::erfc(inf), T(0));
  EXPECT_EQ(e::erfc(T(0)), T(1));
  EXPECT_TRUE(std::isnan(e::erfc(nan)));
  EXPECT_GT(e::erfc(T(9)), T(0));  // the tail keeps its relative accuracy: 1 - erf(9) is 0
  EXPECT_NEAR(e::erfc(T(9)) / T(4.1370317465138102e-37), 1.0, 1e-6);
  EXPECT_EQ(e::erfinv(T(1)), inf);
  EXPECT_EQ(e::erfinv(T(-1)), -inf);
  EXPECT_TRUE(std::isnan(e::erfinv(T(1.5))));
  EXPECT_TRUE(std::isnan(e::erfinv(nan)));
  EXPECT_TRUE(std::signbit(e::erfinv(T(-0.0))));
  EXPECT_NEAR(e::erf(e::erfinv(T(0.75))), 0.75, 1e-6);
  for (T x : {T(0), T(-0.0), T(-1), T(-7), inf, -inf}) EXPECT_EQ(e::lgamma(x), inf) << x;
  EXPECT_EQ(e::lgamma(T(1)), T(0));
  EXPECT_EQ(e::lgamma(T(2)), T(0));
  EXPECT_EQ(e::digamma(T(0)), -inf);
  EXPECT_EQ(e::digamma(T(-0.0)), inf);
  EXPECT_TRUE(std::isnan(e::digamma(T(-3))));
  EXPECT_TRUE(std::isnan(e::digamma(-inf)));
  EXPECT_EQ(e::digamma(inf), inf);
  EXPECT_NEAR(e::digamma(T(1)), -0.57721566490153286, 1e-7);  // -Euler's gamma
  EXPECT_EQ(e::trigamma(T(0)), inf);
  EXPECT_EQ(e::trigamma(T(-2)), inf);
  EXPECT_EQ(e::trigamma(inf), T(0));
  EXPECT_TRUE(std::isnan(e::trigamma(-inf)));
  EXPECT_NEAR(e::trigamma(T(1)), 1.6449340668482264, 1e-7);  // pi^2 / 6
  // The reflection for negative arguments: psi(1 - x) - psi(x) = pi cot(pi x).
  EXPECT_NEAR(e::digamma(T(-2.25)), e::digamma(T(3.25)) - M_PI / std::tan(M_PI * -2.25), 1e-5);
}
TEST(ElemSemantics, SpecialFunctionEdgesFloat) { check_special_function_edges<float>(); }
TEST(ElemSemantics, SpecialFunctionEdgesDouble) { check_special_function_edges<double>(); }

// The CPU kernels' float paths (vectorised polynomials, bit-blend selects, the sqrt builtins) give
// exactly the element functions' values at the special inputs, whole rows and scalar tails alike.
TEST(ElemSemantics, CpuFloatKernelsAgreeOnSpecialValues) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::nanf("");
  const std::vector<float> xs = {-inf,   inf,     nan,   0.0f,    -0.0f,   -1.0f,    1.0f,  -200.5f, 200.5f,
                                 1e-40f, -1e-40f, 88.8f, -104.0f, 3.4e38f, -3.4e38f, 20.5f, -20.5f};
  constexpr int C = 20;  // not a multiple of the SIMD width: the tail runs too
  pto::Tile<float, 1, C> src, dst;
  for (int c = 0; c < C; ++c) src.data[c] = xs[size_t(c) % xs.size()];
  src.vr = 1;
  src.vc = C;
  auto check = [&](const char* name, float (*f)(float)) {
    for (int c = 0; c < C; ++c) {
      const float want = f(src.data[c]), got = dst.data[c];
      if (std::isnan(want)) {
        EXPECT_TRUE(std::isnan(got)) << name << "(" << src.data[c] << ")";
      } else if (!std::isfinite(want) || want == 0 || std::isinf(src.data[c]) || std::isnan(src.data[c])) {
        EXPECT_EQ(got, want) << name << "(" << src.data[c] << ")";
      }
    }
  };
#define PTO_CHECK(OP, fn) \
  pto::OP(dst, src);      \
  check(#OP, &e::fn<float>);
  PTO_CHECK(TEXP, exp)
  PTO_CHECK(TLOG, log)
  PTO_CHECK(TSQRT, sqrt)
  PTO_CHECK(TRSQRT, rsqrt)
  PTO_CHECK(TTANH, tanh)
  PTO_CHECK(TSIGMOID, sigmoid)
  PTO_CHECK(TERF, erf)
  PTO_CHECK(TGELU, gelu)
  PTO_CHECK(TGELU_TANH, gelu_tanh)
  PTO_CHECK(TSILU, silu)
  PTO_CHECK(TRELU, relu)
  PTO_CHECK(TFLOOR, floor)
  PTO_CHECK(TERFC, erfc)
  PTO_CHECK(TERFINV, erfinv)
  PTO_CHECK(TLGAMMA, lgamma)
  PTO_CHECK(TDIGAMMA, digamma)
  PTO_CHECK(TTRIGAMMA, trigamma)
#undef PTO_CHECK
  // Float -> int conversion of a whole tile (the vectorised path) saturates, NaN -> 0.
  pto::Tile<int32_t, 1, C> i32;
  pto::TCVT(i32, src);
  for (int c = 0; c < C; ++c) EXPECT_EQ(i32.data[c], e::cast<int32_t>(src.data[c])) << src.data[c];
  pto::Tile<int64_t, 1, C> i64;
  pto::TCVT(i64, src);
  for (int c = 0; c < C; ++c) EXPECT_EQ(i64.data[c], e::cast<int64_t>(src.data[c])) << src.data[c];
}

// Integer tiles: wrap, x / 0 and INT_MIN / -1 on the CPU kernels, no trap.
TEST(ElemSemantics, CpuIntegerKernelsWrapAndNeverTrap) {
  pto::Tile<int32_t, 1, 4> a, b, d;
  const int32_t av[4] = {INT32_MIN, INT32_MAX, 7, -7}, bv[4] = {-1, 1, 0, 2};
  for (int c = 0; c < 4; ++c) a.data[c] = av[c], b.data[c] = bv[c];
  pto::TDIV(d, a, b);
  for (int c = 0; c < 4; ++c) EXPECT_EQ(d.data[c], e::div(av[c], bv[c]));
  pto::TADD(d, a, b);
  for (int c = 0; c < 4; ++c) EXPECT_EQ(d.data[c], e::add(av[c], bv[c]));
  pto::TABS(d, a);
  EXPECT_EQ(d.data[0], INT32_MIN);
  pto::TMUL(d, a, 2.9);  // a float scalar is converted to the tile's type first: * 2
  for (int c = 0; c < 4; ++c) EXPECT_EQ(d.data[c], e::mul(av[c], 2));
  pto::Tile<int32_t, 4, 1> s;
  pto::Tile<int32_t, 4, 1> col;
  for (int r = 0; r < 4; ++r) col.data[r] = INT32_MAX;
  pto::Tile<int32_t, 1, 1> sum;
  pto::TCOLSUM(sum, col);
  EXPECT_EQ(sum.data[0], int32_t(uint32_t(4) * uint32_t(INT32_MAX)));
  (void)s;
}

}  // namespace
