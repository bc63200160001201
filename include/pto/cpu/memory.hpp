// Memory instructions: TLOAD / TSTORE between global views and tiles (with dtype conversion, e.g.
// a f16/bf16 tensor into a f32 tile), and TPREFETCH.
#pragma once
#include "pto/cpu/types.hpp"

namespace pto {
namespace detail {

// Copies one contiguous row with conversion; same types become a memcpy.
template <class D, class S>
PTO_INLINE void copy_row(D* PTO_RESTRICT d, const S* PTO_RESTRICT s, int64_t n) {
  if constexpr (std::is_same_v<D, std::remove_cv_t<S>>) {
    if (n > 0) __builtin_memcpy(d, s, size_t(n) * sizeof(D));
  } else {
    for (int64_t i = 0; i < n; ++i) d[i] = convert<D>(s[i]);
  }
}

// d[r*dr + c*dc] = s[r*sr + c*sc] for r < rows, c < cols; picks the loop order that walks the
// unit-stride side contiguously (a transposed view reads down its columns).
template <class D, class S>
inline void copy_2d(D* d, int64_t dr, int64_t dc, const S* s, int64_t sr, int64_t sc, int64_t rows,
                    int64_t cols) {
  if (rows <= 0 || cols <= 0) return;
  if (dc == 1 && sc == 1) {
    for (int64_t r = 0; r < rows; ++r) copy_row(d + r * dr, s + r * sr, cols);
  } else if (sr == 1 && sc != 1) {
    // Column-major source (a transposed view): 16 x 16 blocks. Each destination row of a block is
    // written contiguously while its 16 source lines stay in L1 for the whole block; walking the
    // destination down its columns instead hits one L1 set per power-of-two row stride.
    constexpr int64_t B = 16;
    for (int64_t r0 = 0; r0 < rows; r0 += B) {
      const int64_t r1 = imin(rows, r0 + B);
      for (int64_t c0 = 0; c0 < cols; c0 += B) {
        const int64_t c1 = imin(cols, c0 + B);
        for (int64_t r = r0; r < r1; ++r) {
          D* PTO_RESTRICT dp = d + r * dr;
          const S* sp = s + r;
          for (int64_t c = c0; c < c1; ++c) dp[c * dc] = convert<D>(sp[c * sc]);
        }
      }
    }
  } else {
    for (int64_t r = 0; r < rows; ++r) {
      D* dp = d + r * dr;
      const S* sp = s + r * sr;
      for (int64_t c = 0; c < cols; ++c) dp[c * dc] = convert<D>(sp[c * sc]);
    }
  }
}

}  // namespace detail

// dst.valid = the view's extent clamped to R x C; copies (and converts) that region.
template <class T, int R, int C, class U>
inline void TLOAD(Tile<T, R, C>& dst, GlobalView<U> src) {
  const int64_t vr = detail::clamp0(src.vr, R), vc = detail::clamp0(src.vc, C);
  detail::copy_2d(dst.data, C, 1, src.ptr, src.rs, src.cs, vr, vc);
  dst.vr = int(vr);
  dst.vc = int(vc);
}

// Writes min(view.vr, src.vr) x min(view.vc, src.vc).
template <class U, class T, int R, int C>
inline void TSTORE(GlobalView<U> dst, const Tile<T, R, C>& src) {
  const int64_t vr = detail::clamp0(dst.vr, src.vr), vc = detail::clamp0(dst.vc, src.vc);
  detail::copy_2d(dst.ptr, dst.rs, dst.cs, src.data, C, 1, vr, vc);
}

// A hint only: touches the first cache lines of the view's rows.
template <class U>
inline void TPREFETCH(GlobalView<U> v) {
  const int64_t rows = detail::imin(v.vr, 64);
  const int64_t row_bytes = v.cs == 1 ? v.vc * int64_t(sizeof(U)) : int64_t(sizeof(U));
  const int64_t lines = detail::imin((row_bytes + 63) / 64, 8);
  for (int64_t r = 0; r < rows; ++r) {
    const char* p = reinterpret_cast<const char*>(v.ptr + r * v.rs);
    for (int64_t l = 0; l < lines; ++l) __builtin_prefetch(p + l * 64);
  }
}

}  // namespace pto
