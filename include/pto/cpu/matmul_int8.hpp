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
// and the row sums of A (computed once per call, by vpdpbusd against bytes of 1) correct the
// result. B is packed in quads along K (one 32-bit lane holds B(4q..4q+3, j)) by byte shuffles,
// 32 columns at a time; A is read in place: A(i, 4q..4q+3) are adjacent in a row-major tile, so
// one 32-bit broadcast gives the quad. Quads past k pack B as 0 (unsigned), so whatever A holds
// there adds nothing. 14 x 32 register blocks, as for bf16; the blocking is the shared driver's
// (pto/cpu/matmul_lowp.hpp).
//
// Portable path: B sign-extended to int32 panels, the same blocking in wrapping int32 vectors.
#pragma once
#include "pto/cpu/elementwise.hpp"
#include "pto/cpu/matmul_epilogue.hpp"
#include "pto/cpu/matmul_int8_amx.hpp"
#include "pto/cpu/matmul_lowp.hpp"
#include "pto/cpu/types.hpp"

#include <initializer_list>

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

#if PTO_NATIVE_INT8_DOT
typedef int vi __attribute__((vector_size(64)));
PTO_INLINE vi dot_quads(vi acc, vi u8, vi s8) {
#if defined(__clang__)
  return __builtin_ia32_vpdpbusd512(acc, u8, s8);
#else
  return __builtin_ia32_vpdpbusd_v16si(acc, u8, s8);
#endif
}

typedef unsigned char v32b __attribute__((vector_size(32)));
typedef unsigned short v16h __attribute__((vector_size(32)));

// The quads of 32 columns from four B rows s0..s3: lanes j = 0..31 of d get bytes
// (s0[j], s1[j], s2[j], s3[j]) ^ 0x80, by two rounds of interleaving.
PTO_INLINE void pack_quad_row(const int8_t* s0, const int8_t* s1, const int8_t* s2, const int8_t* s3,
                              uint32_t* d) {
  v32b r0, r1, r2, r3;
  __builtin_memcpy(&r0, s0, 32);
  __builtin_memcpy(&r1, s1, 32);
  __builtin_memcpy(&r2, s2, 32);
  __builtin_memcpy(&r3, s3, 32);
#if defined(__clang__)
#define PTO_I8_ZIP_B(x, y, o)                                                                                \
  __builtin_shufflevector(x, y, o + 0, o + 32, o + 1, o + 33, o + 2, o + 34, o + 3, o + 35, o + 4, o + 36,   \
                          o + 5, o + 37, o + 6, o + 38, o + 7, o + 39, o + 8, o + 40, o + 9, o + 41, o + 10, \
                          o + 42, o + 11, o + 43, o + 12, o + 44, o + 13, o + 45, o + 14, o + 46, o + 15,    \
                          o + 47)
#define PTO_I8_ZIP_H(x, y, o)                                                                              \
  __builtin_shufflevector(x, y, o + 0, o + 16, o + 1, o + 17, o + 2, o + 18, o + 3, o + 19, o + 4, o + 20, \
                          o + 5, o + 21, o + 6, o + 22, o + 7, o + 23)
  const v32b lo01 = PTO_I8_ZIP_B(r0, r1, 0), hi01 = PTO_I8_ZIP_B(r0, r1, 16);
  const v32b lo23 = PTO_I8_ZIP_B(r2, r3, 0), hi23 = PTO_I8_ZIP_B(r2, r3, 16);
  const v16h q[4] = {PTO_I8_ZIP_H((v16h)lo01, (v16h)lo23, 0), PTO_I8_ZIP_H((v16h)lo01, (v16h)lo23, 8),
                     PTO_I8_ZIP_H((v16h)hi01, (v16h)hi23, 0), PTO_I8_ZIP_H((v16h)hi01, (v16h)hi23, 8)};
#undef PTO_I8_ZIP_B
#undef PTO_I8_ZIP_H
#else
  const v32b zb = {0, 32, 1, 33, 2,  34, 3,  35, 4,  36, 5,  37, 6,  38, 7,  39,
                   8, 40, 9, 41, 10, 42, 11, 43, 12, 44, 13, 45, 14, 46, 15, 47};
  const v16h zh = {0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23};
  const v32b lo01 = __builtin_shuffle(r0, r1, zb), hi01 = __builtin_shuffle(r0, r1, zb + 16);
  const v32b lo23 = __builtin_shuffle(r2, r3, zb), hi23 = __builtin_shuffle(r2, r3, zb + 16);
  const v16h q[4] = {
      __builtin_shuffle((v16h)lo01, (v16h)lo23, zh), __builtin_shuffle((v16h)lo01, (v16h)lo23, zh + 8),
      __builtin_shuffle((v16h)hi01, (v16h)hi23, zh), __builtin_shuffle((v16h)hi01, (v16h)hi23, zh + 8)};
#endif
  for (int t = 0; t < 4; ++t) {
    const v32b x = (v32b)q[t] ^ 0x80;
    __builtin_memcpy(d + 8 * t, &x, 32);
  }
}

// Bp[panel][q][j] (32-bit lanes) = bytes B(4q+t, j0+j) + 128 for t = 0..3, 0 past k and n.
template <int C2>
inline void pack_b_quads(const int8_t* b, int64_t k, int64_t n, uint32_t* bp) {
  static_assert(NR == 32, "pack_quad_row packs 32 columns");
  const int64_t kq = (k + 3) / 4;
  for (int64_t j0 = 0; j0 < n; j0 += NR) {
    const int64_t nn = detail::imin(NR, n - j0);
    uint32_t* dst = bp + j0 * kq;
    for (int64_t q = 0; q < kq; ++q) {
      uint32_t* d = dst + q * NR;
      const int8_t* s = b + (4 * q) * C2 + j0;
      if (nn == NR && 4 * q + 3 < k) {
        pack_quad_row(s, s + C2, s + 2 * C2, s + 3 * C2, d);
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

// corr[i] = 128 * sum_p A(i, p) for i < m (wrapping), 0 for m <= i < rows.
template <int C>
inline void row_corrections(const int8_t* a, int64_t m, int64_t k, int64_t rows, unsigned* corr) {
  const vi ones = vi{} + 0x01010101;
  for (int64_t i = 0; i < rows; ++i) {
    if (i >= m) {
      corr[i] = 0;
      continue;
    }
    const int8_t* r = a + i * C;
    vi s = vi{};
    int64_t p = 0;
    for (; p + 64 <= k; p += 64) {
      vi x;
      __builtin_memcpy(&x, r + p, 64);
      s = dot_quads(s, ones, x);
    }
    int32_t t = 0;
    for (int l = 0; l < 16; ++l) t += s[l];
    for (; p < k; ++p) t += r[p];
    corr[i] = unsigned(t) * 128u;
  }
}

// C block (+)= A(M_ rows, row stride AS) * packed B panel over kq quads (the last one may be
// partial: A's bytes there are read only up to k, the rest count as 0), minus corr[i] per row.
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
    for (int v = 0; v < NV; ++v) ru[i][v] = (vu)r[i][v] - corr[i];
  lowp::store_block<M_, NV, kW>(ru, c, ldc, acc, mr, nr);
}

// The kernel family of the shared driver (pto/cpu/matmul_lowp.hpp): B packed in quads, A's row
// corrections.
template <int C, int C2>
struct Kernels : lowp::Family<int8_t, int32_t, MR, NR> {
  int64_t k, kq;
  uint32_t* bp;
  unsigned* corr;
  Kernels(const int8_t* a, const int8_t* b, int64_t m, int64_t n, int64_t k_) : k(k_), kq((k_ + 3) / 4) {
    const int64_t panels = (n + NR - 1) / NR, mpad = (m + MR - 1) / MR * MR;
    bp = lowp::scratch(lowp::kPackedB).get<uint32_t>(panels * kq * NR);
    pack_b_quads<C2>(b, k, n, bp);
    corr = lowp::scratch(lowp::kRowCorr).get<unsigned>(mpad);
    row_corrections<C>(a, m, k, mpad, corr);
  }
  template <int M_>
  PTO_INLINE void block(const int8_t* rows, int64_t i0, int64_t jp, int32_t* c, int64_t ldc, bool acc,
                        int64_t mr, int64_t nr) const {
    kernel_native<M_, C>(k, rows, bp + jp * kq * NR, corr + i0, c, ldc, acc, mr, nr);
  }
};
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

// r = the block's wrapping int32 sums over k steps, A(i, p) = a[i * AI + p * AP] (int8 in place,
// or the global family's int32 panels), B an int32 panel.
template <int M_, int64_t AI, int64_t AP, class TA>
PTO_INLINE void sums_portable(int64_t k, const TA* PTO_RESTRICT a, const unsigned* PTO_RESTRICT bp,
                              vu (&r)[M_][NV]) {
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
      const unsigned ai = unsigned(int32_t(a[i * AI + p * AP]));
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) r[i][v] += bv[v] * ai;
    }
  }
}

template <int M_, int AS>
PTO_INLINE void kernel_portable(int64_t k, const int8_t* PTO_RESTRICT a, const unsigned* PTO_RESTRICT bp,
                                int32_t* c, int64_t ldc, bool acc, int64_t mr, int64_t nr) {
  vu r[M_][NV];
  sums_portable<M_, AS, 1>(k, a, bp, r);
  lowp::store_block<M_, NV, kW>(r, c, ldc, acc, mr, nr);
}

template <int C, int C2>
struct Kernels : lowp::Family<int8_t, int32_t, MR, NR> {
  int64_t k;
  unsigned* bp;
  Kernels(const int8_t*, const int8_t* b, int64_t, int64_t n, int64_t k_) : k(k_) {
    bp = lowp::scratch(lowp::kPackedB).get<unsigned>((n + NR - 1) / NR * k * NR);
    pack_b_i32<C2>(b, k, n, bp);
  }
  template <int M_>
  PTO_INLINE void block(const int8_t* rows, int64_t, int64_t jp, int32_t* c, int64_t ldc, bool acc,
                        int64_t mr, int64_t nr) const {
    kernel_portable<M_, C>(k, rows, bp + jp * k * NR, c, ldc, acc, mr, nr);
  }
};
#endif

// ---- whole-matrix products (MMATMUL of int8 operands; pto/cpu/matmul_lowp.hpp's mmatmul) -------
// (The epilogue fused into their stores is pto/cpu/matmul_epilogue.hpp's.)
typedef float vf __attribute__((vector_size(kW * 4)));
typedef int vs __attribute__((vector_size(kW * 4)));

#if PTO_NATIVE_INT8_DOT
// The global kernel family: A packed by K quads (ap[q * MR + i] = A(i, 4q..4q+3)), then the panel's
// row corrections (128 * the row's sum, the offset of B's bytes); B by K quads as pack_b_quads
// (bytes + 128). Bytes past k are zero in both.
struct Global {
  using A = int8_t;
  using PA = uint32_t;
  using PB = uint32_t;
  static constexpr int MR = i8mm::MR, NR = i8mm::NR;
  static int64_t quads(int64_t k) { return (k + 3) / 4; }
  static int64_t depth(int64_t k) { return quads(k) + 1; }
  static int64_t b_panel(int64_t k) { return quads(k) * NR; }
  static void pack_a(const A* a, int64_t rs, int64_t cs, int64_t rows, int64_t k, PA* ap) {
    const int64_t kq = quads(k), full = k / 4;
    int32_t sum[MR] = {};
    int64_t q0 = 0;  // quads packed (and summed) by the register transpose
    if constexpr (MR <= 16) {
      if (cs == 1 && rows == MR) {
        // Blocks of 16 quads of the MR rows: each row's 64 bytes summed by one vpdpbusd against
        // bytes of 1, then transposed in registers (lowp::pack_a_words' transpose).
        const vi ones = vi{} + 0x01010101;
        vi acc[MR];
#pragma GCC unroll 16
        for (int i = 0; i < MR; ++i) acc[i] = vi{};
        for (; q0 + 16 <= full; q0 += 16) {
          lowp::v16u x[16];
#pragma GCC unroll 16
          for (int i = 0; i < 16; ++i) {
            x[i] = lowp::v16u{};
            if (i < MR) {
              __builtin_memcpy(&x[i], a + i * rs + 4 * q0, sizeof(x[i]));
              acc[i] = dot_quads(acc[i], ones, (vi)x[i]);
            }
          }
          gemm::transpose16(x);
#pragma GCC unroll 16
          for (int q = 0; q < 16; ++q) __builtin_memcpy(ap + (q0 + q) * MR, &x[q], MR * 4);
        }
#pragma GCC unroll 16
        for (int i = 0; i < MR; ++i) {
          unsigned t = 0;
          for (int l = 0; l < 16; ++l) t += unsigned(acc[i][l]);
          sum[i] = int32_t(t);
        }
      }
    }
    if (cs == 1) {
      lowp::pack_a_words<MR>(reinterpret_cast<const unsigned char*>(a + 4 * q0), rs, rows, full - q0,
                             ap + q0 * MR);
    } else {
      for (int64_t q = q0; q < full; ++q)
        for (int i = 0; i < MR; ++i) {
          uint32_t w = 0;
          for (int t = 0; i < rows && t < 4; ++t)
            w |= uint32_t(uint8_t(a[i * rs + (4 * q + t) * cs])) << (8 * t);
          ap[q * MR + i] = w;
        }
    }
    if (full < kq)
      for (int i = 0; i < MR; ++i) {
        uint32_t w = 0;
        for (int64_t t = 0; i < rows && 4 * full + t < k; ++t)
          w |= uint32_t(uint8_t(a[i * rs + (4 * full + t) * cs])) << (8 * t);
        ap[full * MR + i] = w;
      }
    uint32_t* corr = ap + kq * MR;
    for (int i = 0; i < MR; ++i) {
      int32_t t = sum[i];
      if (i < rows) {
        const A* r = a + i * rs;
        for (int64_t p = 4 * q0; p < k; ++p) t += r[p * cs];
      }
      corr[i] = uint32_t(t) * 128u;
    }
  }
  // Bp[q][j] = bytes B(4q + t, j) + 128 for t = 0..3, zero past k and cols.
  static void pack_b(const A* b, int64_t rs, int64_t cs, int64_t k, int64_t cols, PB* bp) {
    const int64_t full = k / 4;
    if (cs == 1 && cols == NR) {
      for (int64_t q = 0; q < full; ++q) {
        const A* s = b + 4 * q * rs;
        pack_quad_row(s, s + rs, s + 2 * rs, s + 3 * rs, bp + q * NR);
      }
    } else if (rs == 1) {
      // A transposed B (x @ W.T): a quad is four adjacent bytes of one of W's rows.
      for (int64_t q0 = 0; q0 < full; q0 += 16) {
        const int64_t q1 = detail::imin(full, q0 + 16);
        for (int j = 0; j < NR; ++j)
          for (int64_t q = q0; q < q1; ++q) {
            uint32_t x = 0;
            if (j < cols) {
              __builtin_memcpy(&x, b + j * cs + 4 * q, 4);
              x ^= 0x80808080u;
            }
            bp[q * NR + j] = x;
          }
      }
    } else {
      for (int64_t q = 0; q < full; ++q)
        for (int j = 0; j < NR; ++j) {
          uint32_t w = 0;
          for (int t = 0; j < cols && t < 4; ++t)
            w |= (uint32_t(uint8_t(b[(4 * q + t) * rs + j * cs])) ^ 0x80u) << (8 * t);
          bp[q * NR + j] = w;
        }
    }
    if (full < quads(k))
      for (int j = 0; j < NR; ++j) {
        uint32_t w = 0;
        for (int64_t t = 0; j < cols && 4 * full + t < k; ++t)
          w |= (uint32_t(uint8_t(b[(4 * full + t) * rs + j * cs])) ^ 0x80u) << (8 * t);
        bp[full * NR + j] = w;
      }
  }
  // The block's int32 sums over the whole K: minus the row corrections, plus vpdpbusd per quad.
  template <int M_>
  PTO_INLINE static void sums(int64_t k, const PA* PTO_RESTRICT ap, const PB* PTO_RESTRICT bp,
                              vs (&r)[M_][NV]) {
    const int64_t kq = quads(k);
    const PA* corr = ap + kq * MR;
#pragma GCC unroll 16
    for (int i = 0; i < M_; ++i)
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) r[i][v] = vs{} - int(corr[i]);
    for (int64_t q = 0; q < kq; ++q) {
      vi bv[NV];
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) __builtin_memcpy(&bv[v], bp + q * NR + v * kW, sizeof(vi));
#pragma GCC unroll 16
      for (int i = 0; i < M_; ++i) {
        const vi av = vi{} + int(ap[q * MR + i]);
#pragma GCC unroll 4
        for (int v = 0; v < NV; ++v) r[i][v] = dot_quads(r[i][v], bv[v], av);
      }
    }
  }
#else
// The portable global family: A and B sign-extended to int32 (PA, PB), the product in wrapping
// int32 vectors (kernel_portable's).
struct Global {
  using A = int8_t;
  using PA = int32_t;
  using PB = int32_t;
  static constexpr int MR = i8mm::MR, NR = i8mm::NR;
  static int64_t depth(int64_t k) { return k; }
  static int64_t b_panel(int64_t k) { return k * NR; }
  static void pack_a(const A* a, int64_t rs, int64_t cs, int64_t rows, int64_t k, PA* ap) {
    for (int64_t p = 0; p < k; ++p)
      for (int i = 0; i < MR; ++i) ap[p * MR + i] = i < rows ? int32_t(a[i * rs + p * cs]) : 0;
  }
  static void pack_b(const A* b, int64_t rs, int64_t cs, int64_t k, int64_t cols, PB* bp) {
    for (int64_t p = 0; p < k; ++p)
      for (int j = 0; j < NR; ++j) bp[p * NR + j] = j < cols ? int32_t(b[p * rs + j * cs]) : 0;
  }
  template <int M_>
  PTO_INLINE static void sums(int64_t k, const PA* PTO_RESTRICT ap, const PB* PTO_RESTRICT bp,
                              vs (&r)[M_][NV]) {
    vu u[M_][NV];
    sums_portable<M_, 1, MR>(k, ap, reinterpret_cast<const unsigned*>(bp), u);
#pragma GCC unroll 16
    for (int i = 0; i < M_; ++i)
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) r[i][v] = (vs)u[i][v];
  }
#endif
  template <int M_, class D>
  PTO_INLINE static void kernel(int64_t k, const PA* PTO_RESTRICT ap, const PB* PTO_RESTRICT bp, D* c,
                                int64_t ldc, bool acc, int64_t mr, int64_t nr) {
    static_assert(std::is_same_v<D, int32_t>, "int8 products are int32");
    vs r[M_][NV];
    sums<M_>(k, ap, bp, r);
    vu u[M_][NV];
#pragma GCC unroll 16
    for (int i = 0; i < M_; ++i)
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) u[i][v] = (vu)r[i][v];
    lowp::store_block<M_, NV, kW>(u, c, ldc, acc, mr, nr);
  }
  template <int M_>
  PTO_INLINE static void kernel_epi(int64_t k, const PA* PTO_RESTRICT ap, const PB* PTO_RESTRICT bp, float* c,
                                    int64_t ldc, int64_t mr, int64_t nr, const Epilogue& e, int64_t row0,
                                    int64_t col0) {
    vs r[M_][NV];
    sums<M_>(k, ap, bp, r);
    store_epilogue<M_>(r, c, ldc, mr, nr, e, row0, col0);
  }
};

// The whole-matrix product with the fastest family the CPU offers: AMX tiles where the process
// may use them (pto/cpu/matmul_int8_amx.hpp) and the product has rows enough to fill them, else
// the vector kernels above. Both give the same bits.
template <class D, class T, class E = lowp::NoEpilogue>
inline void mmatmul(pto_parallel_for_fn pf, GlobalView<D> dst, GlobalView<T> a, GlobalView<T> b, bool acc,
                    const E* epi = nullptr) {
#if PTO_AMX_INT8
  if (detail::imin(dst.vr, a.vr) >= amx::kMinRows && amx::enabled())
    return lowp::mmatmul<Amx>(pf, dst, a, b, acc, epi);
#endif
  lowp::mmatmul<Global>(pf, dst, a, b, acc, epi);
}

}  // namespace i8mm

// MMATMUL / MMATMUL_ACC of int8 operands into an int32 destination: the packed whole-matrix
// product of pto/cpu/matmul_lowp.hpp with the int8 kernels (exact, wrapping int32 sums).
// (T: int8_t or const int8_t; more specialised than matmul.hpp's f32 overloads.)
template <class D, class T, std::enable_if_t<std::is_same_v<std::remove_const_t<T>, int8_t>, int> = 0>
inline void MMATMUL(pto_parallel_for_fn pf, GlobalView<D> dst, GlobalView<T> a, GlobalView<T> b) {
  i8mm::mmatmul(pf, dst, a, b, false);
}
template <class D, class T, std::enable_if_t<std::is_same_v<std::remove_const_t<T>, int8_t>, int> = 0>
inline void MMATMUL_ACC(pto_parallel_for_fn pf, GlobalView<D> dst, GlobalView<T> a, GlobalView<T> b) {
  i8mm::mmatmul(pf, dst, a, b, true);
}

// The steps of an epilogue (code generation's arguments of mmatmul_epilogue): an operand of one
// value per row (an M x 1 view), per column (1 x N) or one value (1 x 1), multiplied or added.
template <class T>
PTO_INLINE i8mm::EpiStep epi_rows(int op, GlobalView<T> v) {
  return {i8mm::EpiStep::Op(op), i8mm::EpiStep::kRows, v.ptr, v.rs, 0.0f};
}
template <class T>
PTO_INLINE i8mm::EpiStep epi_cols(int op, GlobalView<T> v) {
  return {i8mm::EpiStep::Op(op), i8mm::EpiStep::kCols, v.ptr, v.cs, 0.0f};
}
template <class T>
PTO_INLINE i8mm::EpiStep epi_scalar(int op, GlobalView<T> v) {  // read when the product runs
  return {i8mm::EpiStep::Op(op), i8mm::EpiStep::kScalar, v.ptr, 0, 0.0f};
}
PTO_INLINE i8mm::EpiStep epi_imm(int op, float s) {
  return {i8mm::EpiStep::Op(op), i8mm::EpiStep::kScalar, nullptr, 0, s};
}

// MMATMUL t, a, b (int8 operands, an int32 scratch t) followed by out = steps(f32(t)), folded by
// code generation (backends/cpu/matmul_runs.h) into one product whose kernels finish each element
// at its store: t is never written. Column operands of a stride other than 1 are copied first.
template <class D, class T>
inline void mmatmul_epilogue(pto_parallel_for_fn pf, GlobalView<D> out, GlobalView<T> a, GlobalView<T> b,
                             std::initializer_list<i8mm::EpiStep> steps) {
  static_assert(std::is_same_v<std::remove_const_t<D>, float>, "the epilogue's result is f32");
  const int64_t N = detail::imin(out.vc, b.vc);
  int strided = 0;
  for (const i8mm::EpiStep& s : steps) strided += s.axis == i8mm::EpiStep::kCols && s.stride != 1;
  ScratchBuffer<float> unit(strided * N);
  i8mm::Epilogue e;
  float* next = unit.data();
  for (const i8mm::EpiStep& s : steps) {
    i8mm::EpiStep st = s;
    if (st.axis == i8mm::EpiStep::kScalar && st.p) st.s = st.p[0];
    if (st.axis == i8mm::EpiStep::kCols && st.stride != 1) {
      for (int64_t j = 0; j < N; ++j) next[j] = st.p[j * st.stride];
      st.p = next;
      st.stride = 1;
      next += N;
    }
    e.step[e.n++] = st;
  }
  i8mm::mmatmul(pf, out, a, b, false, &e);
}

namespace fused {
// TCVT y, a; TMUL y, y, c; TMUL y, y, r in one pass over the tile (src/backends/cpu/row_fusion.h):
// an int32 product's row and column scales (scaled_mm's epilogue), which as three instructions
// cost three passes over a tile that has left L1. Each element and each valid region as the three
// instructions give them (elementwise.hpp's drivers; the rows and columns outside a later
// instruction's region keep the earlier value). R, C > 1: c broadcasts along rows, r along columns.
template <int R, int C>
inline void cvt_scale_rows_cols(Tile<float, R, C>& y, const Tile<int32_t, R, C>& a,
                                const Tile<float, R, 1>& c, const Tile<float, 1, C>& r) {
  static_assert(R > 1 && C > 1, "one-row or one-column tiles broadcast differently");
  using CT = detail::arith_ct<float, Tile<int32_t, R, C>>;
  const int64_t vr1 = detail::clamp0(a.vr, R), vc1 = detail::clamp0(a.vc, C);
  const int64_t vr2 = detail::imax(0, detail::imin(vr1, c.vr)), vc2 = c.vc > 0 ? vc1 : 0;
  const int64_t vr3 = r.vr > 0 ? vr2 : 0, vc3 = detail::imax(0, detail::imin(vc2, r.vc));
  for (int64_t i = 0; i < vr1; ++i) {
    float* PTO_RESTRICT d = y.data + i * C;
    const int32_t* PTO_RESTRICT s = a.data + i * C;
    const int64_t n3 = i < vr3 ? vc3 : 0, n2 = i < vr2 ? vc2 : 0;
    const float ci = c.data[i];
    for (int64_t j = 0; j < n3; ++j)
      d[j] = elem::mul(elem::mul(convert<float>(convert<CT>(s[j])), ci), r.data[j]);
    for (int64_t j = n3; j < n2; ++j) d[j] = elem::mul(convert<float>(convert<CT>(s[j])), ci);
    for (int64_t j = n2; j < vc1; ++j) d[j] = convert<float>(convert<CT>(s[j]));
  }
  y.vr = int(vr3);
  y.vc = int(vc3);
}
}  // namespace fused

namespace detail {
// d (row stride CD) (+)= a (m x k, row stride C) * b (k x n, row stride C2), int8 operands,
// int32 result.
template <int CD, int C, int C2>
inline void matmul_tiles_i8(int32_t* d, const int8_t* a, const int8_t* b, int64_t m, int64_t n, int64_t k,
                            bool acc) {
#if PTO_AMX_INT8
  // On AMX tiles: both tiles packed into this thread's scratch, one share of the global driver
  // (measured faster from 16 x 64 x 64 up: 1.75 vs 5.9 us).
  if (m >= amx::kMinRows && amx::enabled()) {
    lowp::gemm_share<i8mm::Amx>(m, n, k, {a, C, 1}, {b, C2, 1}, d, CD, acc);
    return;
  }
#endif
  lowp::matmul_blocks<i8mm::Kernels<C, C2>, CD, C>(d, a, b, m, n, k, acc);
}
}  // namespace detail

}  // namespace pto
