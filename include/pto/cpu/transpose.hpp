// In-register transposes of square blocks of 32-bit lanes (GCC vector extensions), shared by the
// GEMM's packing (pto/cpu/gemm_kernel.hpp) and the transposed copies of TLOAD / TSTORE / TTRANS
// (pto/cpu/memory.hpp): N vectors of N lanes, x[i][p] -> x[p][i], by swapping the off-diagonal
// blocks of N/2, N/4, ..., 1 lanes (two two-vector shuffles per pair of rows and stage).
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <utility>
#include "pto/base.hpp"

namespace pto {
namespace detail {

template <int B, int N, class V, size_t... T>
PTO_INLINE void swap_blocks(V& x, V& y, std::index_sequence<T...>) {
  typedef uint32_t vi32 __attribute__((vector_size(sizeof(V))));
#if defined(__clang__)
  const V lo = __builtin_shufflevector(x, y, ((T & B) ? T - B + N : T)...);
  const V hi = __builtin_shufflevector(x, y, ((T & B) ? T + N : T + B)...);
#else
  const V lo = __builtin_shuffle(x, y, vi32{((T & B) ? T - B + N : T)...});
  const V hi = __builtin_shuffle(x, y, vi32{((T & B) ? T + N : T + B)...});
#endif
  x = lo;
  y = hi;
}
template <int B, int N, class V>
PTO_INLINE void transpose_stage(V (&x)[N]) {
#pragma GCC unroll 16
  for (int r = 0; r < N; ++r)
    if ((r & B) == 0) swap_blocks<B, N>(x[r], x[r + B], std::make_index_sequence<N>{});
}
// V: any vector type of N 32-bit lanes (N a power of two, 2..16).
template <int N, class V>
PTO_INLINE void transpose_square(V (&x)[N]) {
  static_assert(sizeof(V) == N * 4 && N >= 2 && N <= 16 && (N & (N - 1)) == 0, "N lanes of 32 bits");
  if constexpr (N >= 16) transpose_stage<8, N>(x);
  if constexpr (N >= 8) transpose_stage<4, N>(x);
  if constexpr (N >= 4) transpose_stage<2, N>(x);
  transpose_stage<1, N>(x);
}
template <class V>
PTO_INLINE void transpose16(V (&x)[16]) {
  transpose_square<16>(x);
}

// The widest square block the target transposes in registers: 16 lanes with AVX-512, 8 with AVX,
// 0 (none: element by element) otherwise.
#if defined(__AVX512F__) && (defined(__GNUC__) || defined(__clang__))
constexpr int kTransposeLanes = 16;
#elif defined(__AVX__) && (defined(__GNUC__) || defined(__clang__))
constexpr int kTransposeLanes = 8;
#else
constexpr int kTransposeLanes = 0;
#endif

// d[j * ld + i] = s[i * ls + j] for i, j < N: N contiguous runs of N 4-byte elements read at
// stride ls, written transposed as N contiguous runs at stride ld (strides in elements).
template <int N, class T>
PTO_INLINE void transpose_block(T* PTO_RESTRICT d, int64_t ld, const T* PTO_RESTRICT s, int64_t ls) {
  static_assert(sizeof(T) == 4, "32-bit elements");
  typedef uint32_t V __attribute__((vector_size(N * 4)));
  V x[N];
#pragma GCC unroll 16
  for (int i = 0; i < N; ++i) std::memcpy(&x[i], s + i * ls, sizeof(V));
  transpose_square<N>(x);
#pragma GCC unroll 16
  for (int j = 0; j < N; ++j) std::memcpy(d + j * ld, &x[j], sizeof(V));
}

}  // namespace detail
}  // namespace pto
