// Helpers shared by the tests of the CPU PTO headers (tests/cpp/test_cpu_isa*.cpp).
// Every check compares against a plain double-precision reference computed here.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "pto/pto.hpp"

namespace pto_test {
using namespace pto;

inline std::mt19937_64& rng() {
  static std::mt19937_64 g(0x5eed);
  return g;
}
inline double urand(double lo, double hi) { return std::uniform_real_distribution<double>(lo, hi)(rng()); }
inline int64_t irand(int64_t lo, int64_t hi) {  // inclusive
  return std::uniform_int_distribution<int64_t>(lo, hi)(rng());
}

// A random nonzero value: magnitude in [lo, hi], random sign unless positive.
inline double rand_nz(double lo = 0.25, double hi = 2.0, bool positive = false) {
  double v = urand(lo, hi);
  return (!positive && (rng()() & 1)) ? -v : v;
}

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Poison for outputs and for source padding: NaN for floats, a sentinel for integers.
template <class T>
T poison_value() {
  if constexpr (std::is_floating_point_v<T>)
    return std::numeric_limits<T>::quiet_NaN();
  else if constexpr (std::is_same_v<T, bool>)
    return true;  // (poison() writes an invalid byte instead)
  else
    return T(-123456789);
}

template <class T, int R, int C>
void poison(Tile<T, R, C>& t) {
  if constexpr (std::is_same_v<T, bool>)
    std::memset(t.data, 0xAB, sizeof(t.data));  // neither 0 nor 1: a read of it shows
  else
    for (int i = 0; i < R * C; ++i) t.data[i] = poison_value<T>();
  t.vr = R;
  t.vc = C;
}

// Fills the valid region vr x vc with random nonzero values (integers for integer tiles, 0/1 for
// bool tiles) and the padding with poison, so an instruction reading padding shows up.
template <class T, int R, int C>
void fill_random(Tile<T, R, C>& t, int vr = R, int vc = C, double lo = 0.25, double hi = 2.0,
                 bool positive = false) {
  poison(t);
  for (int r = 0; r < vr; ++r)
    for (int c = 0; c < vc; ++c) {
      if constexpr (std::is_same_v<T, bool>)
        t.data[r * C + c] = bool(rng()() & 1);
      else if constexpr (std::is_integral_v<T>)
        t.data[r * C + c] = T(irand(int64_t(lo) + 1, int64_t(hi) + 9) * (positive || (rng()() & 1) ? 1 : -1));
      else
        t.data[r * C + c] = T(rand_nz(lo, hi, positive));
    }
  t.vr = vr;
  t.vc = vc;
}

template <class T, int R, int C>
double at(const Tile<T, R, C>& t, int r, int c) {
  return double(t.data[r * C + c]);
}

inline bool close(double got, double ref, double rtol, double atol) {
  if (std::isnan(ref)) return std::isnan(got);
  if (std::isinf(ref)) return got == ref;
  return std::fabs(got - ref) <= atol + rtol * std::fabs(ref);
}

// Checks t.valid == er x ec, every element of it against ref(r, c) (per element, NaN must match
// NaN) and the relative norm error of the region.
template <class T, int R, int C, class F>
void expect_tile(const Tile<T, R, C>& t, int er, int ec, F ref, double rtol, double atol = 0,
                 const std::string& what = "") {
  SCOPED_TRACE(what);
  ASSERT_EQ(t.vr, er) << "valid rows";
  ASSERT_EQ(t.vc, ec) << "valid cols";
  double num = 0, den = 0;
  int bad = 0, n = 0;
  for (int r = 0; r < er; ++r)
    for (int c = 0; c < ec; ++c) {
      double g = at(t, r, c), e = ref(r, c);
      if (!close(g, e, rtol, atol)) {
        if (++bad <= 5) ADD_FAILURE() << "at (" << r << "," << c << "): got " << g << " want " << e;
      }
      if (std::isfinite(e)) {
        num += (g - e) * (g - e);
        den += e * e;
        ++n;
      }
    }
  EXPECT_EQ(bad, 0) << bad << " mismatching elements";
  EXPECT_LE(std::sqrt(num), rtol * std::sqrt(den) + atol * std::sqrt(double(n)) + 1e-300)
      << "relative norm error " << (den > 0 ? std::sqrt(num / den) : 0.0);
}

}  // namespace pto_test
