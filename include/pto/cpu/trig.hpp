// TSIN and TCOS. Float tiles take a whole-row pass of math::sin_cos_reduced (branch-free, so it
// vectorises) and then libm for the elements beyond its range (|x| >= 2^20, inf, NaN), which the
// same pass finds; other element types compute through pto/elem.hpp as every unary instruction.
// Accuracy: within 1 ulp of the correctly rounded value (docs/isa.md, TSIN).
#pragma once
#include "pto/cpu/elementwise.hpp"
#include "pto/math.hpp"

namespace pto {
namespace detail {

// d may be s (in place): the first pass leaves an element it cannot reduce as x itself, which the
// second pass then reads.
PTO_INLINE void sin_cos_span(float* d, const float* s, int64_t n, uint32_t quarter_turns) {
  int any_wide = 0;  // an int: a bool reduction keeps GCC from vectorising the loop
  for (int64_t i = 0; i < n; ++i) {
    const float x = s[i];
    const bool ok = math::trig_reduces(x);
    d[i] = math::sel(ok, math::sin_cos_reduced(x, quarter_turns), x);
    any_wide |= int(!ok);
  }
  if (!any_wide) return;
  for (int64_t i = 0; i < n; ++i)
    if (!math::trig_reduces(d[i])) d[i] = quarter_turns ? __builtin_cosf(d[i]) : __builtin_sinf(d[i]);
}

template <int R, int C, int R2, int C2>
inline void sin_cos_tile(Tile<float, R, C>& dst, const Tile<float, R2, C2>& src, uint32_t quarter_turns) {
  float_span_tile(dst, src, [quarter_turns](float* d, const float* s, int64_t n) {
    sin_cos_span(d, s, n, quarter_turns);
  });
}

}  // namespace detail

template <class D, int R, int C, class S, int R2, int C2>
inline void TSIN(Tile<D, R, C>& dst, const Tile<S, R2, C2>& src) {
  if constexpr (std::is_same_v<D, float> && std::is_same_v<S, float>)
    detail::sin_cos_tile(dst, src, 0);
  else
    detail::unary(dst, src, detail::OpSin{});
}
template <class D, int R, int C, class S, int R2, int C2>
inline void TCOS(Tile<D, R, C>& dst, const Tile<S, R2, C2>& src) {
  if constexpr (std::is_same_v<D, float> && std::is_same_v<S, float>)
    detail::sin_cos_tile(dst, src, 1);
  else
    detail::unary(dst, src, detail::OpCos{});
}

}  // namespace pto
