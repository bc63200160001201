// TSIN / TCOS on float tiles (pto/cpu/trig.hpp): the vectorised reduction is within 1 ulp of the
// correctly rounded sin / cos (float64 libm rounded once) over the whole float range, equals the
// element function bit for bit (rows, ragged tails and in place alike) and keeps the edge cases of
// docs/isa.md: sin(-0) = -0, sin(+-inf) = cos(+-inf) = NaN, NaN propagates.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "pto/pto.hpp"

namespace {

// |got - want| in units of the float ulp at want (want in double).
double ulps(float got, double want) {
  const float w = float(want);
  const double ulp = w == 0 ? double(std::numeric_limits<float>::denorm_min())
                            : double(std::nextafter(std::fabs(w), INFINITY)) - std::fabs(w);
  return std::fabs(double(got) - want) / ulp;
}

std::vector<float> wide_inputs() {
  std::mt19937 g(5);
  std::uniform_real_distribution<double> mant(-1, 1);
  std::vector<float> xs;
  for (int i = 0; i < 200000; ++i)
    xs.push_back(float(std::ldexp(mant(g), std::uniform_int_distribution<int>(-30, 21)(g))));
  for (int i = 0; i < 20000; ++i)
    xs.push_back(float(std::ldexp(mant(g), std::uniform_int_distribution<int>(-149, 128)(g))));
  // The floats nearest to multiples of pi/2, where the reduction cancels most.
  for (int k = -660000; k <= 660000; k += 97) {
    float v = float(k * (M_PI / 2));
    xs.push_back(v);
    xs.push_back(std::nextafter(v, INFINITY));
    xs.push_back(std::nextafter(v, -INFINITY));
  }
  const float inf = std::numeric_limits<float>::infinity();
  for (float v : {0.0f, -0.0f, 1e-45f, -1e-45f, 1e-30f, 1048575.9f, 1048576.0f, -1048576.0f, 3.4e38f,
                  -3.4e38f, inf, -inf, std::nanf("")})
    xs.push_back(v);
  return xs;
}

template <int C>
void run_rows(bool cos, const std::vector<float>& xs, std::vector<float>& out, bool in_place) {
  out.resize(xs.size());
  pto::Tile<float, 4, C> src, dst;
  for (size_t base = 0; base < xs.size(); base += 4 * C) {
    const int n = int(std::min<size_t>(4 * C, xs.size() - base));
    src.vr = (n + C - 1) / C;
    src.vc = n < C ? n : C;
    for (int i = 0; i < 4 * C; ++i) src.data[i] = i < n ? xs[base + size_t(i)] : 0.0f;
    auto& d = in_place ? src : dst;
    if (cos)
      pto::TCOS(d, src);
    else
      pto::TSIN(d, src);
    for (int i = 0; i < n; ++i) out[base + size_t(i)] = d.data[i];
  }
}

TEST(CpuTrig, WithinOneUlpOverTheFloatRange) {
  const auto xs = wide_inputs();
  for (bool cos : {false, true}) {
    std::vector<float> got;
    run_rows<37>(cos, xs, got, false);
    double worst = 0;
    for (size_t i = 0; i < xs.size(); ++i) {
      const double want = cos ? std::cos(double(xs[i])) : std::sin(double(xs[i]));
      if (std::isnan(want)) {
        EXPECT_TRUE(std::isnan(got[i])) << xs[i];
        continue;
      }
      const double e = ulps(got[i], want);
      worst = std::max(worst, e);
      ASSERT_LE(e, 1.0) << (cos ? "cos(" : "sin(") << xs[i] << ") = " << got[i] << ", want " << want;
    }
    std::printf("%s: worst %.3f ulp over %zu inputs\n", cos ? "cos" : "sin", worst, xs.size());
  }
}

TEST(CpuTrig, TileEqualsTheElementFunctionInPlaceAndRagged) {
  const auto xs = wide_inputs();
  for (bool cos : {false, true}) {
    std::vector<float> rows, flat, inplace;
    run_rows<37>(cos, xs, rows, false);
    run_rows<64>(cos, xs, flat, false);
    run_rows<64>(cos, xs, inplace, true);
    for (size_t i = 0; i < xs.size(); ++i) {
      const float want = cos ? pto::elem::cos(xs[i]) : pto::elem::sin(xs[i]);
      for (float g : {rows[i], flat[i], inplace[i]}) {
        if (std::isnan(want))
          ASSERT_TRUE(std::isnan(g)) << xs[i];
        else
          ASSERT_EQ(std::memcmp(&g, &want, sizeof g), 0) << (cos ? "cos(" : "sin(") << xs[i] << ")";
      }
    }
  }
}

TEST(CpuTrig, EdgeCases) {
  const float inf = std::numeric_limits<float>::infinity();
  pto::Tile<float, 1, 8> src, s, c;
  const float in[8] = {-0.0f, 0.0f, inf, -inf, std::nanf(""), 1e-40f, -1e-40f, 2e6f};
  std::memcpy(src.data, in, sizeof in);
  src.vr = 1;
  src.vc = 8;
  pto::TSIN(s, src);
  pto::TCOS(c, src);
  EXPECT_TRUE(std::signbit(s.data[0]) && s.data[0] == 0.0f);
  EXPECT_TRUE(!std::signbit(s.data[1]) && s.data[1] == 0.0f);
  EXPECT_EQ(c.data[0], 1.0f);
  for (int i = 2; i < 5; ++i) EXPECT_TRUE(std::isnan(s.data[i]) && std::isnan(c.data[i])) << in[i];
  EXPECT_EQ(s.data[5], 1e-40f);  // sin x = x for tiny x, subnormals included
  EXPECT_EQ(s.data[6], -1e-40f);
  EXPECT_EQ(s.data[7], std::sin(2e6f));
}

}  // namespace
