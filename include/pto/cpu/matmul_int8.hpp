// int8 x int8 -> int32 tile matmul (TMATMUL / _ACC with two i8 operand tiles and an i32 result):
// what scaled_mm of int8 tensors lowers to.
//
// Semantics (docs/isa.md §7.8): exact int32 dot products, wrapping modulo 2^32 as every integer
// matmul; addition modulo 2^32 is associative, so every path gives the same bits.
//
// Native path (AVX512-VNNI, when -march=native sees avx512_vnni and PTO_NO_NATIVE_DOT is not
// defined): vpdpbusd adds four products of an unsigned byte and a signed byte to each 32-bit lane.
// Both operands here are signed, so B is packed with 128 added (b ^ 0x80 as an unsigned byte):
//   sum_p a[p] * (b[p] + 128) = sum_p a[p] * b[p] + 128 * sum_p a[p],
// and the row sums of A (computed once per call) correct the result. B is packed in quads along
// K (one 32-bit lane holds B(4q..4q+3, j)), A is read in place: A(i, 4q..4q+3) are adjacent in a
// row-major tile, so one 32-bit broadcast gives the quad. Quads past k pack B as 0 (unsigned),
// so whatever A holds there adds nothing. 14 x 32 register blocks, as for bf16.
//
// Portable path: B sign-extended to int32 panels, the same blocking in wrapping int32 vectors.
#pragma once
#include "pto/cpu/types.hpp"

#if defined(__AVX512VNNI__) && defined(__AVX512F__) && defined(__GNUC__) && !defined(PTO_NO_NATIVE_DOT)
#define PTO_NATIVE_INT8_DOT 1
#else
#define PTO_NATIVE_INT8_DOT 0
#endif

namespace pto {
namespace i8mm {

#if defined(__AVX512F__)
constexpr int kW = 16;  // int32 lanes per vector
constexpr int MR = 14;
#elif defined(__AVX__)
constexpr int kW = 8;
constexpr int MR = 6;
#else
constexpr int kW = 4;
constexpr int MR = 6;
#endif
constexpr int NV = 2;
constexpr int NR = NV * kW;

typedef unsigned vu __attribute__((vector_size(kW * 4)));  // unsigned: wrapping arithmetic
typedef unsigned vuu __attribute__((vector_size(kW * 4), aligned(4), may_alias));

inline namespace abi_v1 {
struct Scratch {
  void* p = nullptr;
  int64_t cap = 0;
  ~Scratch() {
    if (p) ::operator delete(p, std::align_val_t(64));
  }
  template <class T>
  T* get(int64_t n) {
    const int64_t bytes = n * int64_t(sizeof(T));
    if (bytes > cap) {
      if (p) ::operator delete(p, std::align_val_t(64));
      p = ::operator new(size_t(bytes), std::align_val_t(64));
      cap = bytes;
    }
    return static_cast<T*>(p);
  }
};
#if defined(__GNUC__) || defined(__clang__)
__attribute__((visibility("default")))
#endif
inline Scratch& scratch(int which) {
  static thread_local Scratch s[3];
  return s[which];
}
}  // namespace abi_v1

// Stores an M_ x NR block minus corr[i] per row into C (row stride ldc), only mr x nr of it,
// adding to C's values when acc.
template <int M_>
PTO_INLINE void store_block(const vu (&r)[M_][NV], const unsigned* corr, int32_t* c, int64_t ldc, bool acc,
                            int64_t mr, int64_t nr) {
  if (mr == M_ && nr == NR) {
#pragma GCC unroll 16
    for (int i = 0; i < M_; ++i)
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) {
        vuu* cp = reinterpret_cast<vuu*>(c + i * ldc + v * kW);
        const vu x = r[i][v] - corr[i];
        *cp = acc ? *cp + x : x;
      }
    return;
  }
  alignas(64) unsigned tmp[M_ * NR];
#pragma GCC unroll 16
  for (int i = 0; i < M_; ++i)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      const vu x = r[i][v] - corr[i];
      __builtin_memcpy(tmp + i * NR + v * kW, &x, sizeof(vu));
    }
  for (int64_t i = 0; i < mr; ++i)
    for (int64_t j = 0; j < nr; ++j) {
      const unsigned old = acc ? unsigned(c[i * ldc + j]) : 0u;
      c[i * ldc + j] = int32_t(old + tmp[i * NR + j]);
    }
}

#if PTO_NATIVE_INT8_DOT
typedef int vi __attribute__((vector_size(64)));
PTO_INLINE vi dot_quads(vi acc, vi u8, vi s8) {
#if defined(__clang__)
  return __builtin_ia32_vpdpbusd512(acc, u8, s8);
#else
  return __builtin_ia32_vpdpbusd_v16si(acc, u8, s8);
#endif
}

// Bp[panel][q][j] (32-bit lanes) = bytes B(4q+t, j0+j) + 128 for t = 0..3, 0 past k and n.
template <int C2>
inline void pack_b_quads(const int8_t* b, int64_t k, int64_t n, uint32_t* bp) {
  const int64_t kq = (k + 3) / 4;
  for (int64_t j0 = 0; j0 < n; j0 += NR) {
    const int64_t nn = detail::imin(NR, n - j0);
    uint32_t* dst = bp + j0 * kq;
    for (int64_t q = 0; q < kq; ++q) {
      uint32_t* d = dst + q * NR;
      const int8_t* s = b + (4 * q) * C2 + j0;
      if (nn == NR && 4 * q + 3 < k) {
#pragma GCC unroll 32
        for (int j = 0; j < NR; ++j)
          d[j] = (uint32_t(uint8_t(s[j])) | uint32_t(uint8_t(s[C2 + j])) << 8 |
                  uint32_t(uint8_t(s[2 * C2 + j])) << 16 | uint32_t(uint8_t(s[3 * C2 + j])) << 24) ^
                 0x80808080u;
      } else {
        for (int j = 0; j < NR; ++j) {
          uint32_t w = 0;
          for (int t = 0; t < 4; ++t)
            if (j < nn && 4 * q + t < k) w |= uint32_t(uint8_t(s[t * C2 + j]) ^ 0x80u) << (8 * t);
          d[j] = w;
        }
      }
    }
  }
}

// C block (+)= A(M_ rows, row stride AS) * packed B panel over kq quads (the last one may be
// partial: A's bytes there are read only up to k, the rest count as 0).
template <int M_, int AS>
PTO_INLINE void kernel_native(int64_t k, const int8_t* PTO_RESTRICT a, const uint32_t* PTO_RESTRICT bp,
                              const unsigned* corr, int32_t* c, int64_t ldc, bool acc, int64_t mr,
                              int64_t nr) {
  vi r[M_][NV];
#pragma GCC unroll 16
  for (int i = 0; i < M_; ++i)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) r[i][v] = vi{};
  const int64_t full = k / 4;
  for (int64_t q = 0; q < full; ++q) {
    vi bv[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) __builtin_memcpy(&bv[v], bp + q * NR + v * kW, sizeof(vi));
#pragma GCC unroll 16
    for (int i = 0; i < M_; ++i) {
      int ai;
      __builtin_memcpy(&ai, a + i * AS + 4 * q, 4);
      const vi av = vi{} + ai;
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) r[i][v] = dot_quads(r[i][v], bv[v], av);
    }
  }
  if (full * 4 < k) {
    const int64_t q = full, rem = k - 4 * q;
    vi bv[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) __builtin_memcpy(&bv[v], bp + q * NR + v * kW, sizeof(vi));
#pragma GCC unroll 16
    for (int i = 0; i < M_; ++i) {
      unsigned w = 0;
      for (int64_t t = 0; t < rem; ++t) w |= unsigned(uint8_t(a[i * AS + 4 * q + t])) << (8 * t);
      const vi av = vi{} + int(w);
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) r[i][v] = dot_quads(r[i][v], bv[v], av);
    }
  }
  vu ru[M_][NV];
#pragma GCC unroll 16
  for (int i = 0; i < M_; ++i)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) ru[i][v] = (vu)r[i][v];
  store_block<M_>(ru, corr, c, ldc, acc, mr, nr);
}
#else
// Bp[panel][p][j] = B(p, j0+j) as int32, 0 past n.
template <int C2>
inline void pack_b_i32(const int8_t* b, int64_t k, int64_t n, unsigned* bp) {
  for (int64_t j0 = 0; j0 < n; j0 += NR) {
    const int64_t nn = detail::imin(NR, n - j0);
    unsigned* dst = bp + j0 * k;
    for (int64_t p = 0; p < k; ++p)
      for (int j = 0; j < NR; ++j) dst[p * NR + j] = j < nn ? unsigned(int32_t(b[p * C2 + j0 + j])) : 0u;
  }
}

template <int M_, int AS>
PTO_INLINE void kernel_portable(int64_t k, const int8_t* PTO_RESTRICT a, const unsigned* PTO_RESTRICT bp,
                                const unsigned* corr, int32_t* c, int64_t ldc, bool acc, int64_t mr,
                                int64_t nr) {
  vu r[M_][NV];
#pragma GCC unroll 16
  for (int i = 0; i < M_; ++i)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) r[i][v] = vu{};
  for (int64_t p = 0; p < k; ++p) {
    vu bv[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) __builtin_memcpy(&bv[v], bp + p * NR + v * kW, sizeof(vu));
#pragma GCC unroll 16
    for (int i = 0; i < M_; ++i) {
      const unsigned ai = unsigned(int32_t(a[i * AS + p]));
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) r[i][v] += bv[v] * ai;
    }
  }
  store_block<M_>(r, corr, c, ldc, acc, mr, nr);
}
#endif

}  // namespace i8mm

namespace detail {
// d (row stride CD) (+)= a (m x k, row stride C) * b (k x n, row stride C2), int8 operands,
// int32 result.
template <int CD, int C, int C2>
inline void matmul_tiles_i8(int32_t* d, const int8_t* a, const int8_t* b, int64_t m, int64_t n, int64_t k,
                            bool acc) {
  using namespace i8mm;
  if (m <= 0 || n <= 0) return;
  if (k <= 0) {
    if (!acc)
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) d[i * CD + j] = 0;
    return;
  }
  const int64_t panels = (n + NR - 1) / NR;
  const int64_t m_full = m / MR * MR;
  const int64_t mpad = (m + MR - 1) / MR * MR;
  unsigned* corr = scratch(2).get<unsigned>(mpad);
#if PTO_NATIVE_INT8_DOT
  const int64_t kq = (k + 3) / 4;
  uint32_t* bp = scratch(0).get<uint32_t>(panels * kq * NR);
  pack_b_quads<C2>(b, k, n, bp);
  for (int64_t i = 0; i < mpad; ++i) {  // 128 * the row sums of A (the +128 on B)
    int32_t s = 0;
    if (i < m)
      for (int64_t p = 0; p < k; ++p) s += a[i * C + p];
    corr[i] = unsigned(s) * 128u;
  }
#else
  unsigned* bp = scratch(0).get<unsigned>(panels * k * NR);
  pack_b_i32<C2>(b, k, n, bp);
  for (int64_t i = 0; i < mpad; ++i) corr[i] = 0;
#endif
  // Rows of a ragged last block are copied into a zeroed MR-row block (same row stride), so the
  // kernel never reads past the tile.
  int8_t* tail = nullptr;
  if (m_full < m) {
    tail = scratch(1).get<int8_t>(int64_t(MR) * C);
    __builtin_memset(tail, 0, size_t(MR) * C);
    for (int64_t i = m_full; i < m; ++i) __builtin_memcpy(tail + (i - m_full) * C, a + i * C, size_t(k));
  }
  for (int64_t jp = 0; jp < panels; ++jp) {
    const int64_t j0 = jp * NR, nr = detail::imin(NR, n - j0);
#if PTO_NATIVE_INT8_DOT
    const uint32_t* panel = bp + jp * kq * NR;
#define PTO_I8_KERNEL kernel_native
#else
    const unsigned* panel = bp + jp * k * NR;
#define PTO_I8_KERNEL kernel_portable
#endif
    for (int64_t i0 = 0; i0 < m_full; i0 += MR)
      PTO_I8_KERNEL<MR, C>(k, a + i0 * C, panel, corr + i0, d + i0 * CD + j0, CD, acc, MR, nr);
    if (tail)
      PTO_I8_KERNEL<MR, C>(k, tail, panel, corr + m_full, d + m_full * CD + j0, CD, acc, m - m_full, nr);
#undef PTO_I8_KERNEL
  }
}
}  // namespace detail

}  // namespace pto
