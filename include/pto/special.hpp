// Special functions behind TERFC, TERFINV, TLGAMMA, TDIGAMMA and TTRIGAMMA (call the element
// functions of pto/elem.hpp, not these).
//
// erfc in float is branch-free (math.hpp's erf pieces) so span loops vectorise; the others are
// rarely on a hot path and are computed in double, element by element, for both dtypes (a float
// result is the double one rounded once). Edge values follow torch:
//   erfc(-inf) = 2, erfc(+inf) = 0;
//   erfinv(+-1) = +-inf, erfinv(|x| > 1) = NaN, erfinv(-0) = -0;
//   lgamma(0) = lgamma(-n) = lgamma(+-inf) = +inf (log |Gamma|);
//   digamma(+0) = -inf, digamma(-0) = +inf, digamma(-n) = NaN, digamma(+inf) = +inf, (-inf) = NaN;
//   trigamma(0) = trigamma(-n) = +inf, trigamma(+inf) = 0, trigamma(-inf) = NaN.
#pragma once
#include <math.h>  // lgamma_r: the C library's lgamma without the global signgam (thread-safe)

#include "pto/math.hpp"

namespace pto {
namespace math {

// ---- erfc ----------------------------------------------------------------------------------------
// |x| < 1: 1 - erf(x) (erfc is in [0.157, 1.843] there: no cancellation worth a digit); beyond,
// erfc_core's tail for |x|, reflected through erfc(-a) = 2 - erfc(a).
PTO_INLINE float erfc(float x) {
  const float a = fabs(x);
  const float tail = erfc_big(a);
  const float r = sel(a < 1.0f, 1.0f - erf_small(x), sel(x < 0.0f, 2.0f - tail, tail));
  return sel(is_nan(x), x + x, r);
}
PTO_INLINE double erfc(double x) { return __builtin_erfc(x); }

// ---- erfinv --------------------------------------------------------------------------------------
// A first guess from polynomials in w = -log(1 - x^2) (single-precision accuracy; extrapolated
// where 1 - |x| < 1e-7), then Newton steps on erf (|x| < 0.5) or on log erfc (beyond, where 1 - |x|
// is exact and erfc keeps the tail's relative accuracy): each step squares the error.
PTO_INLINE double erfinv(double x) {
  const double a = fabs(x);
  if (!(a < 1.0)) return a == 1.0 ? copysign(__builtin_inf(), x) : __builtin_nan("");  // NaN too
  if (a == 0.0) return x;                                                              // keeps -0
  const double w = -__builtin_log((1.0 - a) * (1.0 + a));
  double p;
  if (w < 5.0) {  // the central range: polynomial in w - 2.5
    const double t = w - 2.5;
    p = 2.81022636e-08;
    p = p * t + 3.43273939e-07;
    p = p * t - 3.5233877e-06;
    p = p * t - 4.39150654e-06;
    p = p * t + 2.1858087e-04;
    p = p * t - 1.25372503e-03;
    p = p * t - 4.17768164e-03;
    p = p * t + 2.46640727e-01;
    p = p * t + 1.50140941;
  } else {  // the tails: polynomial in sqrt(w) - 3
    const double t = __builtin_sqrt(w) - 3.0;
    p = -2.00214257e-04;
    p = p * t + 1.00950558e-04;
    p = p * t + 1.34934322e-03;
    p = p * t - 3.67342844e-03;
    p = p * t + 5.73950773e-03;
    p = p * t - 7.6224613e-03;
    p = p * t + 9.43887047e-03;
    p = p * t + 1.00167406;
    p = p * t + 2.83297682;
  }
  double y = p * a;
  const double two_over_sqrt_pi = 1.1283791670955126;
  for (int step = 0; step < 8; ++step) {
    // |x| < 0.5: f(y) = erf(y) - a. Beyond, where 1 - a is exact: f(y) = log(erfc(y) / (1 - a)),
    // nearly linear in y^2 in the tail, so Newton does not creep there from a low first guess
    // (erfc(y) / (1 - a) is not, by orders of magnitude).
    const double d = two_over_sqrt_pi * __builtin_exp(-y * y);  // erf'(y)
    double dy;
    if (a < 0.5) {
      dy = (__builtin_erf(y) - a) / d;
    } else {
      const double c = __builtin_erfc(y);
      dy = -__builtin_log(c / (1.0 - a)) * c / d;
    }
    y -= dy;
    if (!(fabs(dy) > 1e-16 * y)) break;
  }
  return copysign(y, x);
}
PTO_INLINE float erfinv(float x) { return float(erfinv(double(x))); }

// ---- lgamma --------------------------------------------------------------------------------------
// log |Gamma(x)|, the C library's (lgamma_r: the sign goes to a local, not the global signgam that
// lgamma writes from every thread).
PTO_INLINE double lgamma(double x) {
  int sign = 0;
  return ::lgamma_r(x, &sign);
}
PTO_INLINE float lgamma(float x) { return float(lgamma(double(x))); }

// ---- digamma, trigamma ---------------------------------------------------------------------------
// x >= 10 (digamma) or 12 (trigamma) after the recurrences psi(x) = psi(x + 1) - 1/x and
// psi1(x) = psi1(x + 1) + 1/x^2; then the asymptotic series in 1/x^2 (Bernoulli numbers; the first
// omitted term is below 5e-17 relative there). Negative x by reflection, with tan / sin of pi times x's
// fractional part (pi x itself loses the fraction's digits for large |x|). For x > 0 (finite).
PTO_INLINE double digamma_positive(double x) {
  double shift = 0.0;
  for (; x < 10.0; x += 1.0) shift -= 1.0 / x;
  const double z = 1.0 / (x * x);
  const double series =
      z *
      (1.0 / 12 -
       z * (1.0 / 120 - z * (1.0 / 252 - z * (1.0 / 240 - z * (1.0 / 132 - z * (691.0 / 32760 - z / 12))))));
  return shift + __builtin_log(x) - 0.5 / x - series;
}
PTO_INLINE double trigamma_positive(double x) {
  double shift = 0.0;
  for (; x < 12.0; x += 1.0) shift += 1.0 / (x * x);
  const double z = 1.0 / (x * x);
  // (1/x + 1/(2x^2) + sum B_2k / x^(2k+1)) x
  const double series =
      1.0 + 0.5 / x +
      z * (1.0 / 6 -
           z * (1.0 / 30 -
                z * (1.0 / 42 - z * (1.0 / 30 - z * (5.0 / 66 - z * (691.0 / 2730 - z * 7.0 / 6))))));
  return shift + series / x;
}

PTO_INLINE double digamma(double x) {
  if (x == 0.0) return copysign(__builtin_inf(), -x);
  if (x < 0.0) {
    const double n = __builtin_trunc(x);
    if (x == n) return __builtin_nan("");  // the poles, and -inf
    // psi(1 - x) - psi(x) = pi / tan(pi x)
    return digamma_positive(1.0 - x) - M_PI / __builtin_tan(M_PI * (x - n));
  }
  if (!(x < __builtin_inf())) return x;  // +inf, NaN
  return digamma_positive(x);
}
PTO_INLINE float digamma(float x) { return float(digamma(double(x))); }

PTO_INLINE double trigamma(double x) {
  if (x != x) return x;
  if (x <= 0.0) {
    const double n = __builtin_trunc(x);
    if (x == n) return x == -__builtin_inf() ? __builtin_nan("") : __builtin_inf();  // the poles
    // psi1(x) + psi1(1 - x) = pi^2 / sin^2(pi x)
    const double s = __builtin_sin(M_PI * (x - n));
    return M_PI * M_PI / (s * s) - trigamma_positive(1.0 - x);
  }
  if (x == __builtin_inf()) return 0.0;
  return trigamma_positive(x);
}
PTO_INLINE float trigamma(float x) { return float(trigamma(double(x))); }

}  // namespace math
}  // namespace pto
