// Memory instructions: TLOAD / TSTORE between global views and tiles (with dtype conversion, e.g.
// a f16/bf16 tensor into a f32 tile), and TPREFETCH.
#pragma once
#include "pto/cpu/stream_rule.hpp"
#include "pto/cpu/transpose.hpp"
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

// A copy that transposes between the unit strides: ColSrc, the source walks r contiguously
// (sr == 1, a transposed view read into a tile); else the source walks c (sc == 1) and the
// destination r (dr == 1: a tile stored to a transposed view, TTRANS). 16 x 16 blocks: the
// block's 16 source lines stay in L1 while it is copied (walking a power-of-two stride across
// the whole tile hits one L1 set per line). Full blocks of one 4-byte type are transposed in
// registers when the other side is contiguous too (16 loads, 64 shuffles, 16 stores: the
// element-by-element block took ~13% of the seed attention's time for its K^T loads).
template <bool ColSrc, class D, class S>
inline void copy_transposed(D* d, int64_t dr, int64_t dc, const S* s, int64_t sr, int64_t sc, int64_t rows,
                            int64_t cols) {
  constexpr int64_t B = 16;
  constexpr int N = std::is_same_v<D, std::remove_cv_t<S>> && sizeof(D) == 4 ? kTransposeLanes : 0;
  const bool fast = N > 0 && (ColSrc ? dc == 1 : dr == 1);
  for (int64_t r0 = 0; r0 < rows; r0 += B) {
    const int64_t r1 = imin(rows, r0 + B);
    for (int64_t c0 = 0; c0 < cols; c0 += B) {
      const int64_t c1 = imin(cols, c0 + B);
      if constexpr (N > 0) {
        if (fast && r1 - r0 == B && c1 - c0 == B) {
          for (int64_t i = 0; i < B; i += N)
            for (int64_t j = 0; j < B; j += N) {
              const int64_t r = r0 + i, c = c0 + j;
              if constexpr (ColSrc)
                transpose_block<N>(d + r * dr + c, dr, s + r + c * sc, sc);
              else
                transpose_block<N>(d + r + c * dc, dc, s + r * sr + c, sr);
            }
          continue;
        }
      }
      if constexpr (ColSrc) {
        for (int64_t r = r0; r < r1; ++r)
          for (int64_t c = c0; c < c1; ++c) d[r * dr + c * dc] = convert<D>(s[r + c * sc]);
      } else {
        for (int64_t c = c0; c < c1; ++c)
          for (int64_t r = r0; r < r1; ++r) d[r * dr + c * dc] = convert<D>(s[r * sr + c]);
      }
    }
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
    copy_transposed<true>(d, dr, dc, s, sr, sc, rows, cols);
  } else if (sc == 1 && dr == 1 && dc != 1) {
    copy_transposed<false>(d, dr, dc, s, sr, sc, rows, cols);
  } else {
    for (int64_t r = 0; r < rows; ++r) {
      D* dp = d + r * dr;
      const S* sp = s + r * sr;
      for (int64_t c = 0; c < cols; ++c) dp[c * dc] = convert<D>(sp[c * sc]);
    }
  }
}

// Copies n bytes with non-temporal (streaming) stores where the target has them: the destination
// lines go to memory without being read first and without evicting the caches' working set.
// For outputs far bigger than the caches, which nobody reads before they would be evicted anyway.
PTO_INLINE void stream_bytes(char* PTO_RESTRICT d, const char* PTO_RESTRICT s, int64_t n) {
#if (defined(__AVX512F__) || defined(__AVX2__)) && (defined(__GNUC__) || defined(__clang__))
  typedef long long V __attribute__((vector_size(64)));
#if !defined(__AVX512F__)
  typedef long long V2 __attribute__((vector_size(32)));  // AVX2: two 32-byte streaming stores
#endif
  int64_t head = int64_t((64 - (reinterpret_cast<uintptr_t>(d) & 63)) & 63);
  if (head > n) head = n;
  if (head > 0) __builtin_memcpy(d, s, size_t(head));
  int64_t i = head;
  for (; i + 64 <= n; i += 64) {
    V v;
    __builtin_memcpy(&v, s + i, 64);
#if defined(__clang__)
    __builtin_nontemporal_store(v, reinterpret_cast<V*>(d + i));
#elif defined(__AVX512F__)
    __builtin_ia32_movntdq512(reinterpret_cast<V*>(d + i), v);
#else
    __builtin_ia32_movntdq256(reinterpret_cast<V2*>(d + i), reinterpret_cast<const V2*>(&v)[0]);
    __builtin_ia32_movntdq256(reinterpret_cast<V2*>(d + i + 32), reinterpret_cast<const V2*>(&v)[1]);
#endif
  }
  if (i < n) __builtin_memcpy(d + i, s + i, size_t(n - i));
#else
  if (n > 0) __builtin_memcpy(d, s, size_t(n));
#endif
}

// Orders the streaming stores before whatever follows (another thread reads the output after
// the parallel loop joins).
PTO_INLINE void stream_fence() {
#if (defined(__AVX512F__) || defined(__AVX2__)) && (defined(__GNUC__) || defined(__clang__))
  __builtin_ia32_sfence();
#endif
}

}  // namespace detail

// The third operand of TSTORE that code generation adds for a destination much bigger than the
// last-level cache (stream_rule.hpp): the same store, by streaming stores where it is a plain row
// copy. `on` is decided at run time where the destination's size is dynamic.
struct StreamHint {
  bool on = true;
};
inline constexpr StreamHint kStream{};

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

template <class U, class T, int R, int C>
inline void TSTORE(GlobalView<U> dst, const Tile<T, R, C>& src, StreamHint hint) {
  if constexpr (std::is_same_v<std::remove_cv_t<U>, T>) {
    const int64_t vr = detail::clamp0(dst.vr, src.vr), vc = detail::clamp0(dst.vc, src.vc);
    if (hint.on && dst.cs == 1 && vc * int64_t(sizeof(T)) >= 1024) {
      for (int64_t r = 0; r < vr; ++r)
        detail::stream_bytes(reinterpret_cast<char*>(dst.ptr + r * dst.rs),
                             reinterpret_cast<const char*>(src.data + r * C), vc * int64_t(sizeof(T)));
      detail::stream_fence();
      return;
    }
  }
  TSTORE(dst, src);
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
