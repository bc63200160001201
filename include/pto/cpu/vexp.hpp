// float exp over a span, with AVX-512 or AVX2 + FMA where the target has it: the algorithm and constants of
// math::exp (pto/math.hpp, the element semantics), in fewer instructions per 16 lanes.
//
// Same range reduction and polynomial, so the results are math::exp's bit for bit (checked over
// every float by the tests): the clamps use vmaxps/vminps with the operand order that passes a
// NaN through (no separate NaN fix-up), and vscalefps applies 2^n in one correctly rounded step,
// which is what math::exp's two half-scalings give, subnormal results included; below the cut-off
// the scaling is masked off to 0. About 14 instructions per 16 lanes instead of ~37. With AVX2 (no
// vscalefps, no masked min/max) the clamps are selects that keep a NaN and 2^n is math::exp's two
// half-scalings and cut-off, on two 8-lane halves.
#pragma once
#include "pto/cpu/types.hpp"
#include "pto/elem.hpp"
#include "pto/math.hpp"

namespace pto {
namespace detail {

// A float as rounded on its own: an empty asm the compiler cannot see through, so `a * b + c` is
// not contracted into one FMA where the instruction sequence this code stands for rounds the
// product first (TMUL, then TADD or TROWSUM).
PTO_INLINE float rounded(float v) {
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
  __asm__("" : "+x"(v));
#elif defined(__GNUC__) && defined(__aarch64__)
  __asm__("" : "+w"(v));
#endif
  return v;
}

// 16 lanes as one GCC vector: one zmm register with AVX-512, two ymm halves with AVX2 + FMA (the
// vector operators lower to pairs of 256-bit instructions; Zen 3 and other AVX2-only targets).
#if defined(__GNUC__) && !defined(__clang__) && \
    (defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__)))
#define PTO_VF16 1
#if !defined(__AVX512F__)
// vf16 values pass between inline functions only: GCC's note that a 64-byte vector argument has
// no AVX2 calling convention of its own does not apply.
#pragma GCC diagnostic ignored "-Wpsabi"
#endif
typedef float vf16 __attribute__((vector_size(64)));
typedef int32_t vi16 __attribute__((vector_size(64)));

PTO_INLINE vf16 vf16_load(const float* p) {
  vf16 v;
  __builtin_memcpy(&v, p, sizeof v);
  return v;
}
PTO_INLINE void vf16_store(float* p, vf16 v) { __builtin_memcpy(p, &v, sizeof v); }
PTO_INLINE vf16 vf16_splat(float x) { return vf16{} + x; }
#if !defined(__AVX512F__)
typedef float vf8 __attribute__((vector_size(32)));
typedef int32_t vi8 __attribute__((vector_size(32)));
// A vf16's two ymm halves, by value (taking the vector's address would keep it in memory).
PTO_INLINE vf8 vf16_lo(vf16 v) { return __builtin_shufflevector(v, v, 0, 1, 2, 3, 4, 5, 6, 7); }
PTO_INLINE vf8 vf16_hi(vf16 v) { return __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15); }
PTO_INLINE vf16 vf16_join(vf8 lo, vf8 hi) {
  return __builtin_shufflevector(lo, hi, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
}
#endif

// rounded() for 16 lanes.
PTO_INLINE vf16 vf16_rounded(vf16 v) {
#if defined(__AVX512F__)
  __asm__("" : "+v"(v));
  return v;
#else
  vf8 lo = vf16_lo(v), hi = vf16_hi(v);
  __asm__("" : "+x"(lo), "+x"(hi));
  return vf16_join(lo, hi);
#endif
}

#if !defined(__AVX512F__)
// math::exp on 8 lanes (a 64-byte vector's selects would be scalarised by GCC without AVX-512).
PTO_INLINE vf8 vexp8(vf8 x) {
  // Lanes below the cut-off compute exp(0) and are zeroed at the end: an underflowing product
  // would cost a microcode assist. Comparisons are false for NaN: x stays NaN.
  vf8 xc = x < -103.972084f ? vf8{} : x;
  xc = xc > 88.8f ? vf8{} + 88.8f : xc;
  const vf8 t = xc * 1.44269502f + 0x1.8p23f;  // contracted to one FMA, as in math::exp
  const vf8 fn = t - 0x1.8p23f;
  vf8 r = xc - fn * 0.693115234375f;
  r = r - fn * 3.19461833e-05f;
  vf8 p = vf8{} + 1.38146020e-03f;
  p = p * r + 8.36871520e-03f;
  p = p * r + 4.16683879e-02f;
  p = p * r + 1.66665207e-01f;
  p = p * r + 4.99999934e-01f;
  p = 1.0f + (r + r * r * p);
  // 2^n in two halves, then 0 below the cut-off, as math::exp (a NaN p stays NaN).
  const vi8 n = reinterpret_cast<const vi8&>(t) - 0x4b400000;
  const vi8 n1 = n >> 1, n2 = n - n1;
  const vi8 b1 = (n1 + 127) << 23, b2 = (n2 + 127) << 23;
  const vf8 res = p * reinterpret_cast<const vf8&>(b1) * reinterpret_cast<const vf8&>(b2);
  const vi8 out = reinterpret_cast<const vi8&>(res) & ~(x < -103.972084f);
  return reinterpret_cast<const vf8&>(out);
}
#endif

// math::exp on 16 lanes. NonPositive: every lane is <= 0 or NaN (a softmax's x - max), which
// needs no clamps (same bits; two of the ~20 instructions, 5-10% of the softmax's exp pass).
template <bool NonPositive = false>
PTO_INLINE vf16 vexp16(vf16 x) {
#if defined(__AVX512F__)
  constexpr unsigned short kAll = 0xffff;
  constexpr int kCurrent = 4;  // _MM_FROUND_CUR_DIRECTION
  // vmaxps/vminps return their second source when either is NaN: x stays NaN through both. Lanes
  // below the cut-off are masked off at the end whatever they compute, so the lower clamp only
  // keeps their arithmetic finite; the upper one makes exp(+inf) inf instead of inf - inf.
  vf16 xc = x;
  if constexpr (!NonPositive) {
    xc = __builtin_ia32_maxps512_mask(vf16_splat(-104.0f), x, x, kAll, kCurrent);
    xc = __builtin_ia32_minps512_mask(vf16_splat(88.8f), xc, xc, kAll, kCurrent);
  }
  // Lanes below the cut-off (a NaN compares false) are zeroed by the mask of the last step
  // instead of underflowing in it: an underflow costs a microcode assist, ~25x a whole exp.
  constexpr int kLessOrdered = 1;  // _CMP_LT_OS
  const unsigned short keep =
      kAll & ~__builtin_ia32_cmpps512_mask(x, vf16_splat(-103.972084f), kLessOrdered, kAll, kCurrent);
  const vf16 t = xc * 1.44269502f + 0x1.8p23f;  // contracted to one FMA, as in math::exp
  const vf16 fn = t - 0x1.8p23f;
  vf16 r = xc - fn * 0.693115234375f;
  r = r - fn * 3.19461833e-05f;
  vf16 p = vf16_splat(1.38146020e-03f);
  p = p * r + 8.36871520e-03f;
  p = p * r + 4.16683879e-02f;
  p = p * r + 1.66665207e-01f;
  p = p * r + 4.99999934e-01f;
  p = 1.0f + (r + r * r * p);
  return __builtin_ia32_scalefps512_mask(p, fn, vf16{}, keep, kCurrent);
#else
  return vf16_join(vexp8(vf16_lo(x)), vexp8(vf16_hi(x)));
#endif
}
#endif

// d[i] = exp(s[i]) for i < n (d may be s).
PTO_INLINE void exp_span(float* d, const float* s, int64_t n) {
  int64_t i = 0;
#ifdef PTO_VF16
  for (; i + 16 <= n; i += 16) vf16_store(d + i, vexp16(vf16_load(s + i)));
#endif
  for (; i < n; ++i) d[i] = elem::exp(s[i]);
}

}  // namespace detail
}  // namespace pto
