// The transcendental cores of the element functions in pto/elem.hpp (call those, not these: the
// element functions add the integer and edge-case rules of docs/isa.md).
//
// float versions are branch-free polynomial approximations (coefficients fitted for this project
// by minimax on the stated intervals) so that loops calling them auto-vectorise at the host's SIMD
// width; relative error is a few ulp (<= 1e-6) over the normal range. double versions call the C
// library through builtins (exact to libm's accuracy, scalar).
#pragma once
#include "pto/base.hpp"

namespace pto {
namespace math {

PTO_INLINE float fabs(float x) { return __builtin_fabsf(x); }
PTO_INLINE double fabs(double x) { return __builtin_fabs(x); }
PTO_INLINE float copysign_bits(float mag, float sgn) {
  return bit_cast<float>(bit_cast<uint32_t>(mag) | (bit_cast<uint32_t>(sgn) & 0x80000000u));
}

// c ? a : b as bit operations. Why not ?: — GCC turns a select whose arm is computed only for it
// into a branch around that computation; under the default -ftrapping-math the vectoriser may not
// speculate FP arithmetic past such a branch, and the whole loop stays scalar. A bit blend uses
// both arms unconditionally, so the function stays straight-line code.
PTO_INLINE float sel(bool c, float a, float b) {
  const uint32_t m = 0u - uint32_t(c);
  return bit_cast<float>((bit_cast<uint32_t>(a) & m) | (bit_cast<uint32_t>(b) & ~m));
}
// a * b + c rounded once: one instruction where the target has FMA (a library call where it
// has not; exact either way).
PTO_INLINE float fma(float a, float b, float c) {
#if defined(__CUDA_ARCH__)
  return __fmaf_rn(a, b, c);
#else
  return __builtin_fmaf(a, b, c);
#endif
}
PTO_INLINE bool is_nan(float x) { return (bit_cast<uint32_t>(x) & 0x7fffffffu) > 0x7f800000u; }

// ---- exp ---------------------------------------------------------------------------------------
// x = n*ln2 + r, |r| <= ln2/2; exp(r) = 1 + r + r^2 P(r) (P: degree 4, rel. error 3e-9);
// 2^n applied in two halves so results down to the subnormal range stay exact.
PTO_INLINE float exp(float x) {
  float xc = sel(x < 88.8f, x, 88.8f);  // NaN also lands here; fixed at the end
  // Below the cut-off the result is 0 (selected at the end): compute exp(0) there instead, since a
  // product underflowing to 0 costs a microcode assist (~25x the time of a whole exp) on x86.
  xc = sel(xc < -103.972084f, 0.0f, xc);
  float t = xc * 1.44269502f + 0x1.8p23f;  // round-to-nearest via the 1.5*2^23 shifter
  int32_t n = int32_t(bit_cast<uint32_t>(t) - 0x4b400000u);
  float fn = t - 0x1.8p23f;
  float r = xc - fn * 0.693115234375f;  // ln2 split in 12 + 24 bits: n*hi is exact
  r = r - fn * 3.19461833e-05f;
  float p = 1.38146020e-03f;
  p = p * r + 8.36871520e-03f;
  p = p * r + 4.16683879e-02f;
  p = p * r + 1.66665207e-01f;
  p = p * r + 4.99999934e-01f;
  p = 1.0f + (r + r * r * p);
  int32_t n1 = n >> 1, n2 = n - n1;
  float s1 = bit_cast<float>(uint32_t(n1 + 127) << 23);
  float s2 = bit_cast<float>(uint32_t(n2 + 127) << 23);
  float res = p * s1 * s2;  // overflows to +inf by itself above 88.72
  res = sel(x < -103.972084f, 0.0f, res);
  return sel(is_nan(x), x + x, res);
}
PTO_INLINE double exp(double x) { return __builtin_exp(x); }

// ---- log ---------------------------------------------------------------------------------------
// x = 2^k * m, m in [sqrt(1/2), sqrt(2)); f = m - 1, s = f/(2+f):
// log(1+f) = f - (f^2/2 - s (f^2/2 + R(s^2))), R(z) = z P(z) (P: degree 2, rel. error 1e-9).
PTO_INLINE float log(float x) {
  const uint32_t ix0 = bit_cast<uint32_t>(x);
  const bool sub = ix0 < 0x00800000u;  // +0 and positive subnormals: scale by 2^23 first
  float xs = sel(sub, x * 8388608.0f, x);
  uint32_t ix = bit_cast<uint32_t>(xs);
  int32_t k = int32_t(ix - 0x3f3504f3u) >> 23;
  float m = bit_cast<float>(ix - (uint32_t(k) << 23));
  float fk = float(k - (sub ? 23 : 0));
  float f = m - 1.0f;
  float s = f / (2.0f + f);
  float z = s * s;
  float R = z * (6.66667761e-01f + z * (3.99775702e-01f + z * 2.98710488e-01f));
  float hfsq = 0.5f * f * f;
  float r = fk * 0.693115234375f + (f - (hfsq - (s * (hfsq + R) + fk * 3.19461833e-05f)));
  r = sel(ix0 == 0x7f800000u, x, r);                       // +inf
  r = sel(ix0 > 0x7f800000u, __builtin_nanf(""), r);       // NaN, negative numbers
  return sel((ix0 << 1) == 0, -__builtin_huge_valf(), r);  // +-0
}
PTO_INLINE double log(double x) { return __builtin_log(x); }

// ---- polynomials -------------------------------------------------------------------------------
// c[0] z^(N-1) + ... + c[N-1] by Horner's rule, each step p * z + c (contracted to one FMA), for a
// float or a vector of floats: the span forms of cpu/vactivation.hpp evaluate the same tables the
// same way, so their results are these functions' bit for bit.
template <class V, int N>
PTO_INLINE V horner(V z, const float (&c)[N]) {
  V p = V{} + c[0];
  for (int k = 1; k < N; ++k) p = p * z + c[k];
  return p;
}
constexpr float kTanhSmall[] = {-5.70498717e-03f, 2.06390874e-02f, -5.37397151e-02f, 1.33314422e-01f,
                                -3.33332819e-01f};
constexpr float kErfSmall[] = {7.85387893e-05f, -8.01019939e-04f, 5.18832841e-03f, -2.68538124e-02f,
                               1.12835852e-01f, -3.76126258e-01f, 1.12837917e+00f};
constexpr float kErfcQ[] = {-1.87519999e+01f, 4.20687874e+01f, -2.96314680e+01f, 5.30283913e+00f,
                            -3.66804230e-01f, 1.59361676e+00f, 1.99540224e+00f,  -5.72270631e-01f};

// ---- tanh / sigmoid ----------------------------------------------------------------------------
// |x| < 0.625: x + x^3 P(x^2) (degree 4, rel. error 4e-9); beyond: 1 - 2/(exp(2|x|)+1).
PTO_INLINE float tanh(float x) {
  const float z = x * x, p = horner(z, kTanhSmall);
  // One FMA, written out: whether GCC contracts x + (x z) p by itself depends on the context it
  // is inlined into, and the span form (cpu/vactivation.hpp) must give the same bits.
  float small = fma(x * z, p, x);
  float a = fabs(x);
  float big = 1.0f - 2.0f / (exp(2.0f * a) + 1.0f);
  return copysign_bits(sel(a < 0.625f, small, big), x);  // small's sign is x's, but at -0 (-0 + +0)
}
PTO_INLINE double tanh(double x) { return __builtin_tanh(x); }

PTO_INLINE float sigmoid(float x) { return 1.0f / (1.0f + exp(-x)); }
PTO_INLINE double sigmoid(double x) { return 1.0 / (1.0 + __builtin_exp(-x)); }

// ---- erf / erfc --------------------------------------------------------------------------------
// erf(x) for |x| < 1: x P(x^2) (degree 6, rel. error 1.2e-9).
PTO_INLINE float erf_small(float x) { return x * horner(x * x, kErfSmall); }

// erfc(a) for 1 <= a (meaningful up to ~10.1, where it underflows), given a^2 exactly as the
// float sum a2h + a2l (a2l from an FMA): erfc(a) = exp(Q(t) - a^2) t with t = 1/(a+2), Q degree 7
// (abs. error 3e-8 in the exponent). The exponent is kept as hi + lo (hi = Q - a2h rounded, lo its
// rounding error, by TwoSum, minus a2l): exp(hi) (1 + lo). A rounded a^2 would lose the tail's
// relative accuracy (exp(-a^2) amplifies an error in a^2 by a^2, ~100). All in float, so the
// vectorised loops run 16 lanes per instruction (the double form ran 8, plus conversions).
PTO_INLINE float erfc_core(float a, float a2h, float a2l) {
  a = sel(a < 10.5f, a, 10.5f);  // beyond the fit range erfc is 0 in float anyway (also NaN/inf)
  const float t = 1.0f / (a + 2.0f), q = horner(t, kErfcQ);
  const bool inside = a2h < 110.25f;  // exp(-110.25) is far below float's range: cap there
  a2l = sel(inside, a2l, 0.0f);
  a2h = sel(inside, a2h, 110.25f);
  const float hi = q - a2h;
  const float back = hi - q;
  const float lo = ((q - (hi - back)) + (-a2h - back)) - a2l;
  return exp(hi) * (1.0f + lo) * t;
}
// a * b as hi + lo exactly (lo = the product's rounding error, from one FMA).
PTO_INLINE float product_error(float a, float b, float hi) { return fma(a, b, -hi); }
PTO_INLINE float erfc_big(float a) {
  const float a2 = a * a;
  return erfc_core(a, a2, product_error(a, a, a2));
}

PTO_INLINE float erf(float x) {
  float a = fabs(x);
  float big = copysign_bits(1.0f - erfc_big(a), x);
  float r = sel(a < 1.0f, erf_small(x), big);
  return sel(is_nan(x), x + x, r);
}
PTO_INLINE double erf(double x) { return __builtin_erf(x); }

// ---- activations -------------------------------------------------------------------------------
// The GELUs' negative tails are exp(-(square or cubic of x)): that exponent is kept as float
// hi + lo (gelu: x^2 / 2 exactly from an FMA, see erfc_core; gelu_tanh: the cubic formed in
// double), so the tail keeps a float's relative accuracy instead of amplifying the exponent's
// rounding by its size (up to ~100).
//
// GELU(x) = x/2 (1 + erf(x/sqrt2)); 1 + erf(y) = erfc(-y) for negative y without cancellation.
PTO_INLINE float gelu(float x) {
  float xc = sel(x < 16.0f, x, 16.0f);  // beyond +-16 the erf factor is exactly 0 or 2 in float
  xc = sel(xc > -16.0f, xc, -16.0f);
  const float y = xc * 0.707106781f, a = fabs(y);
  const float hx = 0.5f * xc, y2 = hx * xc;  // y^2 = x^2 / 2 = y2 + its rounding error
  const float c = erfc_core(a, y2, product_error(hx, xc, y2));
  const float big = sel(y < 0.0f, c, 2.0f - c);
  const float r = 0.5f * x * sel(a < 1.0f, 1.0f + erf_small(y), big);
  return sel(x < -15.0f, -0.0f, r);  // limit at -inf (also avoids -inf * 0)
}
// Below -40 erfc(-x/sqrt2) underflows to 0: the limit -0.0 (also for -inf, where x * 0 is NaN).
PTO_INLINE double gelu(double x) {
  return x < -40.0 ? -0.0 : 0.5 * x * __builtin_erfc(-x * 0.70710678118654752440);
}

// GELU, tanh form: x/2 (1 + tanh(u)) == x * sigmoid(2u), u = sqrt(2/pi) (x + 0.044715 x^3).
PTO_INLINE float gelu_tanh(float x) {
  float xc = sel(x < 20.0f, x, 20.0f);  // beyond +-20 the sigmoid is exactly 0 or 1 in float
  xc = sel(xc > -20.0f, xc, -20.0f);
  const double xd = xc;
  const double u2 = xd * (1.5957691216057308 + 0.071354816272821120 * xd * xd);
  const float hi = float(u2), lo = float(u2 - double(hi));
  // exp(-(hi + lo)) = exp(-hi) (1 - lo) to within lo^2 (|lo| < 1e-5).
  const float r = x / (1.0f + exp(-hi) * (1.0f - lo));
  return sel(x < -20.0f, -0.0f, r);
}
PTO_INLINE double gelu_tanh(double x) {
  double u2 = 1.59576912160573071176 * (x + 0.044715 * x * x * x);
  return x < -40.0 ? -0.0 : x / (1.0 + __builtin_exp(-u2));  // limit at -inf, as for float
}

PTO_INLINE float silu(float x) {
  float r = x / (1.0f + exp(-x));
  return sel(x < -200.0f, -0.0f, r);  // limit at -inf
}
PTO_INLINE double silu(double x) { return x < -800.0 ? -0.0 : x / (1.0 + __builtin_exp(-x)); }

// ---- rounding / roots --------------------------------------------------------------------------
// floor through an int32 round trip (vectorises without -fno-trapping-math, unlike floorf).
PTO_INLINE float floor(float x) {
  const bool small = (bit_cast<uint32_t>(x) & 0x7fffffffu) < 0x4b000000u;  // |x| < 2^23
  const float xc = sel(small, x, 0.0f);                                    // keeps the conversion in range
  int32_t i = int32_t(xc);
  i -= int32_t(float(i) > xc);  // truncation went up for negative non-integers
  // Larger |x| (and inf/NaN) is integral already; copysign keeps floor(-0.0) == -0.0.
  return sel(small, copysign_bits(float(i), x), x);
}
PTO_INLINE double floor(double x) { return __builtin_floor(x); }

PTO_INLINE float sqrt(float x) { return __builtin_sqrtf(x); }
PTO_INLINE double sqrt(double x) { return __builtin_sqrt(x); }

PTO_INLINE float pow(float a, float b) { return __builtin_powf(a, b); }
PTO_INLINE double pow(double a, double b) { return __builtin_pow(a, b); }

// ---- sin, cos (float) ---------------------------------------------------------------------------
// For |x| < kTrigReducedLimit (2^20): x = j pi/2 + r, |r| <= pi/4, reduced in double with pi/2 split
// into a 33-bit head (j * head is exact for j < 2^20) and a 53-bit tail (what is left, 3.5e-27, is
// below 1e-20 absolute: relative 1e-11 even at the float closest to a multiple of pi/2). sin r and
// cos r are their Taylor series to r^11 / r^12 (truncation < 1e-10 relative on |r| <= pi/4), in
// double, rounded to float once: within 1 ulp of the correctly rounded value. The quadrant j mod 4
// picks and signs one of the two series by bit operations: no branch, so span loops vectorise
// (pto/cpu/trig.hpp). Beyond the limit, and for inf and NaN, sin / cos are libm's (below).
constexpr float kTrigReducedLimit = 1048576.0f;
PTO_INLINE double sel(bool c, double a, double b) {
  const uint64_t m = uint64_t(0) - uint64_t(c);
  return bit_cast<double>((bit_cast<uint64_t>(a) & m) | (bit_cast<uint64_t>(b) & ~m));
}
// quarter_turns: 0 for sin, 1 for cos (cos x = sin(x + pi/2)). Valid for |x| < kTrigReducedLimit.
PTO_INLINE float sin_cos_reduced(float x, uint32_t quarter_turns) {
  const double xd = x;
  const double t = xd * 0.6366197723675814 + 0x1.8p52;  // round(x * 2/pi) in the low bits of t
  const double j = t - 0x1.8p52;
  const uint32_t q = uint32_t(bit_cast<uint64_t>(t)) + quarter_turns;
  const double r = (xd - j * 0x1.921fb544p+0) - j * 6.077100506506192e-11;
  const double z = r * r;
  double ps = 2.505210838544172e-08;  // 1/11!
  ps = ps * z - 2.755731922398589e-06;
  ps = ps * z + 1.984126984126984e-04;
  ps = ps * z - 8.333333333333333e-03;
  ps = ps * z + 1.666666666666667e-01;
  const double s = r * (1.0 - z * ps);  // not r - r z ps: sin(-0) must stay -0
  double pc = 2.087675698786810e-09;    // 1/12!
  pc = pc * z - 2.755731922398589e-07;
  pc = pc * z + 2.480158730158730e-05;
  pc = pc * z - 1.388888888888889e-03;
  pc = pc * z + 4.166666666666667e-02;
  const double c = 1.0 - z * (0.5 - z * pc);
  const double v = sel((q & 1u) != 0, c, s);
  return float(sel((q & 2u) != 0, -v, v));
}
PTO_INLINE bool trig_reduces(float x) { return fabs(x) < kTrigReducedLimit; }  // false for NaN
PTO_INLINE float sin(float x) { return trig_reduces(x) ? sin_cos_reduced(x, 0) : __builtin_sinf(x); }
PTO_INLINE float cos(float x) { return trig_reduces(x) ? sin_cos_reduced(x, 1) : __builtin_cosf(x); }
PTO_INLINE double sin(double x) { return __builtin_sin(x); }
PTO_INLINE double cos(double x) { return __builtin_cos(x); }

// The C library's correctly rounded (or nearly) cores, called element by element: tan, ...
// (the compiler does not vectorise them without -ffast-math; exact results matter more here).
#define PTO_LIBM_1(name)                                            \
  PTO_INLINE float name(float x) { return __builtin_##name##f(x); } \
  PTO_INLINE double name(double x) { return __builtin_##name(x); }
#define PTO_LIBM_2(name)                                                        \
  PTO_INLINE float name(float a, float b) { return __builtin_##name##f(a, b); } \
  PTO_INLINE double name(double a, double b) { return __builtin_##name(a, b); }
PTO_LIBM_1(tan)
PTO_LIBM_1(exp2)
PTO_LIBM_1(expm1)
PTO_LIBM_1(log2)
PTO_LIBM_1(log10)
PTO_LIBM_1(log1p)
PTO_LIBM_1(cbrt)
PTO_LIBM_1(ceil)
PTO_LIBM_1(rint)  // round half to even (the default rounding mode)
PTO_LIBM_1(trunc)
PTO_LIBM_2(atan2)
PTO_LIBM_2(hypot)
PTO_LIBM_2(copysign)
#undef PTO_LIBM_1
#undef PTO_LIBM_2

}  // namespace math
}  // namespace pto
