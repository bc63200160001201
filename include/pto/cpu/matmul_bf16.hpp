// bf16 x bf16 -> f32 tile matmul (TMATMUL / _ACC with two bf16 operand tiles and a f32 result).
//
// Semantics (docs/isa.md, "bf16 matmul"): the products of two bf16 values are exact in f32; they
// are accumulated in f32 two K steps at a time, the odd step (k+1) first, then the even one (k),
// each addition rounded to nearest even, so a dot product is a chain of f32 additions in the order
// (k1, k0, k3, k2, ...). On the native path bf16 subnormal operands count as zero and subnormal
// f32 partial sums flush to zero (the instruction's DAZ/FTZ); the portable path keeps them.
//
// Native path (AVX512-BF16, chosen when the compiler targets a CPU that reports it, i.e.
// -march=native sees avx512_bf16 in cpuid): vdpbf16ps does both steps of a K pair for 16 columns
// in one instruction. B is used in pairs along K (the "VNNI" layout: one 32-bit lane holds
// B(2p, j) in its low half and B(2p+1, j) in its high half), made by two shuffles of two B rows
// per K pair when B's rows hold whole 32-column panels, else packed once per call; A is read in
// place, since A(i, 2p) and A(i, 2p+1) are adjacent in a
// row-major tile and one 32-bit broadcast gives the pair. An MR x NR register block (14 x 32, 28
// accumulators) runs over one packed B panel of NR columns.
//
// Portable path (any CPU, or PTO_NO_NATIVE_DOT defined: the environment variable
// PYPTO_NATIVE_DOT=0 makes code generation define it): the same pair order in f32 FMAs, on B
// packed as f32 pairs and A converted to f32, so both paths give the same bits apart from the
// subnormal cases above.
#pragma once
#include <utility>
#include "pto/cpu/gemm_kernel.hpp"
#include "pto/cpu/matmul_bf16_amx.hpp"
#include "pto/cpu/matmul_lowp.hpp"
#include "pto/cpu/types.hpp"

#if defined(__AVX512BF16__) && defined(__AVX512F__) && defined(__GNUC__) && !defined(PTO_NO_NATIVE_DOT)
#define PTO_NATIVE_BF16_DOT 1
#else
#define PTO_NATIVE_BF16_DOT 0
#endif

// Tiles of A with at most this many rows read B in place, taller ones pack B (a tuning knob: on
// Zen 4 reading in place measured as fast as packing even for 128 rows, so the default is all).
#ifndef PTO_BF16_INPLACE_MAX_M
#define PTO_BF16_INPLACE_MAX_M (int64_t(1) << 40)
#endif

namespace pto {
namespace bf16mm {

#if defined(__AVX512F__)
constexpr int kW = 16;  // f32 lanes per vector
constexpr int MR = 14;
#elif defined(__AVX__)
constexpr int kW = 8;
constexpr int MR = 6;
#else
constexpr int kW = 4;
constexpr int MR = 6;
#endif
constexpr int NV = 2;
constexpr int NR = NV * kW;  // columns per B panel

typedef float vf __attribute__((vector_size(kW * 4)));
typedef float vfu __attribute__((vector_size(kW * 4), aligned(4), may_alias));

#if PTO_NATIVE_BF16_DOT
typedef int vi __attribute__((vector_size(64)));
#if defined(__clang__) || __GNUC__ >= 13
typedef __bf16 vbh __attribute__((vector_size(64)));
#else
typedef short vbh __attribute__((vector_size(64)));
#endif
PTO_INLINE vf dot_pairs(vf acc, vi a, vi b) {
#if defined(__clang__)
  return __builtin_ia32_dpbf16ps_512(acc, (vbh)a, (vbh)b);
#else
  return __builtin_ia32_dpbf16ps_v16sf(acc, (vbh)a, (vbh)b);
#endif
}

typedef short vh __attribute__((vector_size(64)));  // 32 bf16 bit patterns

// The pair layout of pack_b_pairs made on the fly from two rows of 32 columns: lanes
// (B(2p, j), B(2p+1, j)) for j = 0..15 (lo) and 16..31 (hi).
PTO_INLINE void interleave_rows(vh r0, vh r1, vi& lo, vi& hi) {
#if defined(__clang__)
  lo = (vi)__builtin_shufflevector(r0, r1, 0, 32, 1, 33, 2, 34, 3, 35, 4, 36, 5, 37, 6, 38, 7, 39, 8, 40, 9,
                                   41, 10, 42, 11, 43, 12, 44, 13, 45, 14, 46, 15, 47);
  hi = (vi)__builtin_shufflevector(r0, r1, 16, 48, 17, 49, 18, 50, 19, 51, 20, 52, 21, 53, 22, 54, 23, 55, 24,
                                   56, 25, 57, 26, 58, 27, 59, 28, 60, 29, 61, 30, 62, 31, 63);
#else
  const vh mlo = {0, 32, 1, 33, 2,  34, 3,  35, 4,  36, 5,  37, 6,  38, 7,  39,
                  8, 40, 9, 41, 10, 42, 11, 43, 12, 44, 13, 45, 14, 46, 15, 47};
  const vh mhi = mlo + short(16);
  lo = (vi)__builtin_shuffle(r0, r1, mlo);
  hi = (vi)__builtin_shuffle(r0, r1, mhi);
#endif
}

// kernel_native reading B in place (row stride BS, 32 columns from b): the pairs are interleaved
// per K pair instead of packed once, which costs 2 shuffles per 2 * M_ vdpbf16ps but no pass over
// B, so a few rows of A against a wide B (a fused row group's matmul) pay nothing for packing.
template <int M_, int AS, int BS>
PTO_INLINE void kernel_native_inplace(int64_t kp, bool odd, const bf16_t* PTO_RESTRICT a,
                                      const bf16_t* PTO_RESTRICT b, float* c, int64_t ldc, bool acc,
                                      int64_t mr, int64_t nr) {
  static_assert(NV == 2 && kW == 16, "two vectors of 16 f32 lanes: one 32-column row of bf16");
  vf r[M_][NV];
#pragma GCC unroll 16
  for (int i = 0; i < M_; ++i)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) r[i][v] = vf{};
  auto step = [&](int64_t p, vh r0, vh r1, bool tail) __attribute__((always_inline)) {
    vi bv[NV];
    interleave_rows(r0, r1, bv[0], bv[1]);
#pragma GCC unroll 16
    for (int i = 0; i < M_; ++i) {
      int ai;
      if (tail) {
        ai = int(a[i * AS + 2 * p].bits);  // the high half (past k) stays zero
      } else {
        __builtin_memcpy(&ai, a + i * AS + 2 * p, 4);
      }
      const vi av = vi{} + ai;
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) r[i][v] = dot_pairs(r[i][v], av, bv[v]);
    }
  };
  const int64_t full = odd ? kp - 1 : kp;
  for (int64_t p = 0; p < full; ++p) {
    vh r0, r1;
    __builtin_memcpy(&r0, b + (2 * p) * BS, sizeof(vh));
    __builtin_memcpy(&r1, b + (2 * p + 1) * BS, sizeof(vh));
    step(p, r0, r1, false);
  }
  if (odd) {
    vh r0;
    __builtin_memcpy(&r0, b + (2 * (kp - 1)) * BS, sizeof(vh));
    step(kp - 1, r0, vh{}, true);  // B's row past k is never read: its NaN padding would leak in
  }
  lowp::store_block<M_, NV, kW>(r, c, ldc, acc, mr, nr);
}

// Bp[panel][p][j] (32-bit lanes) = B(2p, j0+j) | B(2p+1, j0+j) << 16, zero past k and n.
template <int C2>
inline void pack_b_pairs(const bf16_t* b, int64_t k, int64_t n, uint32_t* bp) {
  const int64_t kp = (k + 1) / 2;
  for (int64_t j0 = 0; j0 < n; j0 += NR) {
    const int64_t nn = detail::imin(NR, n - j0);
    uint32_t* dst = bp + j0 * kp;
    for (int64_t p = 0; p < kp; ++p) {
      const bool has_odd = 2 * p + 1 < k;
      const uint16_t* r0 = &b[(2 * p) * C2 + j0].bits;
      const uint16_t* r1 = has_odd ? r0 + C2 : r0;
      uint32_t* d = dst + p * NR;
      if (nn == NR && has_odd) {
        vh x0, x1;
        vi lo, hi;
        __builtin_memcpy(&x0, r0, sizeof(vh));
        __builtin_memcpy(&x1, r1, sizeof(vh));
        interleave_rows(x0, x1, lo, hi);
        __builtin_memcpy(d, &lo, sizeof(vi));
        __builtin_memcpy(d + kW, &hi, sizeof(vi));
      } else {
        for (int j = 0; j < NR; ++j)
          d[j] = j < nn ? uint32_t(r0[j]) | (has_odd ? uint32_t(r1[j]) << 16 : 0u) : 0u;
      }
    }
  }
}

// C block (+)= A(M_ rows, row stride AS, bf16) * packed B panel over kp pairs; the last pair
// holds only its even step when `odd`, and A's element past k is never read.
template <int M_, int AS>
PTO_INLINE void kernel_native(int64_t kp, bool odd, const bf16_t* PTO_RESTRICT a,
                              const uint32_t* PTO_RESTRICT bp, float* c, int64_t ldc, bool acc, int64_t mr,
                              int64_t nr) {
  vf r[M_][NV];
#pragma GCC unroll 16
  for (int i = 0; i < M_; ++i)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) r[i][v] = vf{};
  const int64_t full = odd ? kp - 1 : kp;
  for (int64_t p = 0; p < full; ++p) {
    vi bv[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) __builtin_memcpy(&bv[v], bp + p * NR + v * kW, sizeof(vi));
#pragma GCC unroll 16
    for (int i = 0; i < M_; ++i) {
      int ai;
      __builtin_memcpy(&ai, a + i * AS + 2 * p, 4);
      const vi av = vi{} + ai;
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) r[i][v] = dot_pairs(r[i][v], av, bv[v]);
    }
  }
  if (odd) {
    const int64_t p = kp - 1;
    vi bv[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) __builtin_memcpy(&bv[v], bp + p * NR + v * kW, sizeof(vi));
#pragma GCC unroll 16
    for (int i = 0; i < M_; ++i) {
      const vi av = vi{} + int(a[i * AS + 2 * p].bits);  // the high half (past k) stays zero
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) r[i][v] = dot_pairs(r[i][v], av, bv[v]);
    }
  }
  lowp::store_block<M_, NV, kW>(r, c, ldc, acc, mr, nr);
}

// The kernel family of the shared driver (pto/cpu/matmul_lowp.hpp). When B's rows hold whole
// 32-column panels (read past n but within the row, results not stored) B is read in place,
// unless A has more rows than PTO_BF16_INPLACE_MAX_M (then B is packed once per call).
template <int C, int C2>
struct Kernels : lowp::Family<bf16_t, float, MR, NR> {
  int64_t kp;
  bool odd, inplace;
  const bf16_t* b;
  uint32_t* bp = nullptr;
  Kernels(const bf16_t*, const bf16_t* b_, int64_t m, int64_t n, int64_t k)
      : kp((k + 1) / 2), odd((k & 1) != 0), inplace(C2 % NR == 0 && m <= PTO_BF16_INPLACE_MAX_M), b(b_) {
    if (inplace) return;
    bp = lowp::scratch(lowp::kPackedB).get<uint32_t>((n + NR - 1) / NR * kp * NR);
    pack_b_pairs<C2>(b, k, n, bp);
  }
  template <int M_>
  PTO_INLINE void block(const bf16_t* rows, int64_t, int64_t jp, float* c, int64_t ldc, bool acc, int64_t mr,
                        int64_t nr) const {
    if constexpr (C2 % NR == 0) {
      if (inplace) {
        kernel_native_inplace<M_, C, C2>(kp, odd, rows, b + jp * NR, c, ldc, acc, mr, nr);
        return;
      }
    }
    kernel_native<M_, C>(kp, odd, rows, bp + jp * kp * NR, c, ldc, acc, mr, nr);
  }
};
#else
// Bp[panel][p][h][j] = B(2p+h, j0+j) as f32, zero past k and n.
template <int C2>
inline void pack_b_pairs_f32(const bf16_t* b, int64_t k, int64_t n, float* bp) {
  const int64_t kp = (k + 1) / 2;
  for (int64_t j0 = 0; j0 < n; j0 += NR) {
    const int64_t nn = detail::imin(NR, n - j0);
    float* dst = bp + j0 * 2 * kp;
    for (int64_t q = 0; q < 2 * kp; ++q) {
      float* d = dst + q * NR;
      if (q < k && nn == NR) {
        const bf16_t* s = b + q * C2 + j0;
        for (int j = 0; j < NR; ++j) d[j] = to_float(s[j]);
      } else {
        for (int j = 0; j < NR; ++j) d[j] = q < k && j < nn ? to_float(b[q * C2 + j0 + j]) : 0.0f;
      }
    }
  }
}

// The native kernel's order in f32 FMAs: per pair, the odd step, then the even one. A is read in
// place (bf16 rows of stride AS); in an odd last pair its element past k is never read, a zero
// stands for it (B's packed row there is zero too).
template <int M_, int AS>
PTO_INLINE void kernel_portable(int64_t kp, bool odd, const bf16_t* PTO_RESTRICT a,
                                const float* PTO_RESTRICT bp, float* c, int64_t ldc, bool acc, int64_t mr,
                                int64_t nr) {
  vf r[M_][NV];
#pragma GCC unroll 16
  for (int i = 0; i < M_; ++i)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) r[i][v] = vf{};
  auto step = [&](int64_t p, bool tail) __attribute__((always_inline)) {
    vf b0[NV], b1[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      __builtin_memcpy(&b0[v], bp + (2 * p) * NR + v * kW, sizeof(vf));
      __builtin_memcpy(&b1[v], bp + (2 * p + 1) * NR + v * kW, sizeof(vf));
    }
#pragma GCC unroll 16
    for (int i = 0; i < M_; ++i) {
      const float a0 = to_float(a[i * AS + 2 * p]), a1 = tail ? 0.0f : to_float(a[i * AS + 2 * p + 1]);
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) {
        r[i][v] += b1[v] * a1;
        r[i][v] += b0[v] * a0;
      }
    }
  };
  const int64_t full = odd ? kp - 1 : kp;
  for (int64_t p = 0; p < full; ++p) step(p, false);
  if (odd) step(kp - 1, true);
  lowp::store_block<M_, NV, kW>(r, c, ldc, acc, mr, nr);
}

// The kernel family of the shared driver (pto/cpu/matmul_lowp.hpp): B packed as f32 pairs.
template <int C, int C2>
struct Kernels : lowp::Family<bf16_t, float, MR, NR> {
  int64_t kp;
  bool odd;
  float* bp;
  Kernels(const bf16_t*, const bf16_t* b, int64_t, int64_t n, int64_t k)
      : kp((k + 1) / 2), odd((k & 1) != 0) {
    bp = lowp::scratch(lowp::kPackedB).get<float>((n + NR - 1) / NR * 2 * kp * NR);
    pack_b_pairs_f32<C2>(b, k, n, bp);
  }
  template <int M_>
  PTO_INLINE void block(const bf16_t* rows, int64_t, int64_t jp, float* c, int64_t ldc, bool acc, int64_t mr,
                        int64_t nr) const {
    kernel_portable<M_, C>(kp, odd, rows, bp + jp * 2 * kp * NR, c, ldc, acc, mr, nr);
  }
};
#endif

// ---- whole-matrix products (MMATMUL of bf16 operands; pto/cpu/matmul_lowp.hpp's gemm_share) ----
// A is packed in K pairs like B: Ap[p][i] = A(i, 2p) | A(i, 2p+1) << 16 (one 32-bit broadcast per
// row and pair), zero past k and past the panel's rows.
typedef uint32_t vu32 __attribute__((vector_size(kW * 4)));

inline void pack_a_pairs(const bf16_t* a, int64_t rs, int64_t cs, int64_t rows, int64_t k, uint32_t* ap) {
  const int64_t kp = (k + 1) / 2, full = k / 2;
  const uint16_t* s = &a->bits;
  if (cs == 1) {
    lowp::pack_a_words<MR>(reinterpret_cast<const unsigned char*>(s), 2 * rs, rows, full, ap);
  } else {
    for (int64_t p = 0; p < full; ++p)
      for (int i = 0; i < MR; ++i)
        ap[p * MR + i] =
            i < rows ? uint32_t(s[i * rs + 2 * p * cs]) | uint32_t(s[i * rs + (2 * p + 1) * cs]) << 16 : 0u;
  }
  if (full < kp)  // odd k: the last pair holds only its even step
    for (int i = 0; i < MR; ++i) ap[full * MR + i] = i < rows ? uint32_t(s[i * rs + (k - 1) * cs]) : 0u;
}

// Loads C's block into f32 registers (MMATMUL_ACC continues each chain from C's value): mr x nr of
// it, zero elsewhere.
template <int M_, class D>
PTO_INLINE void load_c(vf (&r)[M_][NV], const D* c, int64_t ldc, int64_t mr, int64_t nr) {
  alignas(64) float row[NR];
#pragma GCC unroll 16
  for (int i = 0; i < M_; ++i) {
    if (mr == M_ && nr == NR) {
#pragma GCC unroll 32
      for (int j = 0; j < NR; ++j) row[j] = to_float(c[i * ldc + j]);
    } else {
      for (int j = 0; j < NR; ++j) row[j] = i < mr && j < nr ? to_float(c[i * ldc + j]) : 0.0f;
    }
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) __builtin_memcpy(&r[i][v], row + v * kW, sizeof(vf));
  }
}

typedef uint16_t vu16 __attribute__((vector_size(kW * 2)));
// The instruction that rounds two vectors of f32 to 32 bf16 (AVX512-BF16), for store_c's bf16 C of
// the native kernels only: the portable kernels' sums may be subnormal.
#if PTO_NATIVE_BF16_DOT && defined(__clang__)
#define PTO_NATIVE_BF16_CVT 1
#define PTO_BF16_CVT2(hi, lo) __builtin_ia32_cvtne2ps2bf16_512(hi, lo)
#elif PTO_NATIVE_BF16_DOT && __GNUC__ >= 13
#define PTO_NATIVE_BF16_CVT 1
#define PTO_BF16_CVT2(hi, lo) __builtin_ia32_cvtne2ps2bf16_v32bf(hi, lo)
#elif PTO_NATIVE_BF16_DOT
#define PTO_NATIVE_BF16_CVT 1
#define PTO_BF16_CVT2(hi, lo) __builtin_ia32_cvtne2ps2bf16_v32hi(hi, lo)
#else
#define PTO_NATIVE_BF16_CVT 0
#endif
// bf16_from_float (pto/cpu/types.hpp) on a vector: round to nearest even, a NaN stays a quiet NaN.
PTO_INLINE vu16 bf16_from_floats(vf x) { return bf16_bits_from_floats<vu16>(x); }

// Stores mr x nr of the block into C, converted to D (a bf16 C rounds once, to nearest even).
template <int M_, class D>
PTO_INLINE void store_c(const vf (&r)[M_][NV], D* c, int64_t ldc, int64_t mr, int64_t nr) {
  if constexpr (std::is_same_v<D, float>) {
    lowp::store_block<M_, NV, kW>(r, c, ldc, false, mr, nr);
  } else if (mr == M_ && nr == NR) {
#if PTO_NATIVE_BF16_CVT
    // One vcvtne2ps2bf16 per row (round to nearest even, a NaN made quiet, as bf16_from_floats;
    // it also flushes subnormals, which a vdpbf16ps result never is: its output is flushed too).
#pragma GCC unroll 16
    for (int i = 0; i < M_; ++i) {
      const vh h = (vh)PTO_BF16_CVT2(r[i][1], r[i][0]);  // columns 0..15 from r[i][0]
      __builtin_memcpy(c + i * ldc, &h, sizeof(h));
    }
    return;
#endif
#pragma GCC unroll 16
    for (int i = 0; i < M_; ++i)
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) {
        const vu16 h = bf16_from_floats(r[i][v]);
        __builtin_memcpy(c + i * ldc + v * kW, &h, sizeof(h));
      }
  } else {
    alignas(64) float row[NR];
    for (int64_t i = 0; i < mr; ++i) {
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) __builtin_memcpy(row + v * kW, &r[i][v], sizeof(vf));
      for (int64_t j = 0; j < nr; ++j) c[i * ldc + j] = from_float<D>(row[j]);
    }
  }
}

#if PTO_NATIVE_BF16_DOT
// The global kernel family (pto/cpu/matmul_lowp.hpp): B packed as pack_b_pairs, one vdpbf16ps per
// row, K pair and 16 columns.
struct Global {
  using A = bf16_t;
  using PA = uint32_t;
  using PB = uint32_t;
  static constexpr int MR = bf16mm::MR, NR = bf16mm::NR;
  static int64_t depth(int64_t k) { return (k + 1) / 2; }
  static int64_t b_panel(int64_t k) { return depth(k) * NR; }
  static void pack_a(const A* a, int64_t rs, int64_t cs, int64_t rows, int64_t k, PA* ap) {
    pack_a_pairs(a, rs, cs, rows, k, ap);
  }
  // Bp[p][j] = B(2p, j) | B(2p+1, j) << 16, zero past k and cols.
  static void pack_b(const A* b, int64_t rs, int64_t cs, int64_t k, int64_t cols, PB* bp) {
    const int64_t kp = depth(k), full = k / 2;
    const uint16_t* s = &b->bits;
    if (cs == 1 && cols == NR) {
      for (int64_t p = 0; p < full; ++p) {
        vh x0, x1;
        vi lo, hi;
        __builtin_memcpy(&x0, s + 2 * p * rs, sizeof(vh));
        __builtin_memcpy(&x1, s + (2 * p + 1) * rs, sizeof(vh));
        interleave_rows(x0, x1, lo, hi);
        __builtin_memcpy(bp + p * NR, &lo, sizeof(vi));
        __builtin_memcpy(bp + p * NR + kW, &hi, sizeof(vi));
      }
    } else if (rs == 1) {
      // A transposed B (x @ W.T): a pair is two adjacent elements of one of W's rows. Each column
      // is read in order, 16 pairs at a time (their 16 x NR lanes stay in L1).
      for (int64_t p0 = 0; p0 < full; p0 += 16) {
        const int64_t p1 = detail::imin(full, p0 + 16);
        for (int j = 0; j < NR; ++j)
          for (int64_t p = p0; p < p1; ++p) {
            uint32_t x = 0;
            if (j < cols) __builtin_memcpy(&x, s + j * cs + 2 * p, 4);
            bp[p * NR + j] = x;
          }
      }
    } else {
      for (int64_t p = 0; p < full; ++p)
        for (int j = 0; j < NR; ++j)
          bp[p * NR + j] =
              j < cols ? uint32_t(s[2 * p * rs + j * cs]) | uint32_t(s[(2 * p + 1) * rs + j * cs]) << 16 : 0u;
    }
    if (full < kp)
      for (int j = 0; j < NR; ++j) bp[full * NR + j] = j < cols ? uint32_t(s[(k - 1) * rs + j * cs]) : 0u;
  }
  template <int M_, class D>
  PTO_INLINE static void kernel(int64_t k, const PA* PTO_RESTRICT ap, const PB* PTO_RESTRICT bp, D* c,
                                int64_t ldc, bool acc, int64_t mr, int64_t nr) {
    vf r[M_][NV];
    if (acc) {
      load_c<M_>(r, c, ldc, mr, nr);
    } else {
#pragma GCC unroll 16
      for (int i = 0; i < M_; ++i)
#pragma GCC unroll 4
        for (int v = 0; v < NV; ++v) r[i][v] = vf{};
    }
    const int64_t kp = depth(k);
    for (int64_t p = 0; p < kp; ++p) {
      vi bv[NV];
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) __builtin_memcpy(&bv[v], bp + p * NR + v * kW, sizeof(vi));
#pragma GCC unroll 16
      for (int i = 0; i < M_; ++i) {
        const vi av = vi{} + int(ap[p * MR + i]);
#pragma GCC unroll 4
        for (int v = 0; v < NV; ++v) r[i][v] = dot_pairs(r[i][v], av, bv[v]);
      }
    }
    store_c<M_>(r, c, ldc, mr, nr);
  }
};
#else
// The global kernel family of the portable path: B packed as f32 pairs (pack_b_pairs_f32's
// layout), A's pairs widened to f32 in the kernel; kernel_portable's order.
struct Global {
  using A = bf16_t;
  using PA = uint32_t;
  using PB = float;
  static constexpr int MR = bf16mm::MR, NR = bf16mm::NR;
  static int64_t depth(int64_t k) { return (k + 1) / 2; }
  static int64_t b_panel(int64_t k) { return 2 * depth(k) * NR; }
  static void pack_a(const A* a, int64_t rs, int64_t cs, int64_t rows, int64_t k, PA* ap) {
    pack_a_pairs(a, rs, cs, rows, k, ap);
  }
  // Bp[q][j] = B(q, j) as f32, zero past k (q < 2 * depth) and cols.
  static void pack_b(const A* b, int64_t rs, int64_t cs, int64_t k, int64_t cols, PB* bp) {
    for (int64_t q = 0; q < 2 * depth(k); ++q)
      for (int j = 0; j < NR; ++j) bp[q * NR + j] = q < k && j < cols ? to_float(b[q * rs + j * cs]) : 0.0f;
  }
  template <int M_, class D>
  PTO_INLINE static void kernel(int64_t k, const PA* PTO_RESTRICT ap, const PB* PTO_RESTRICT bp, D* c,
                                int64_t ldc, bool acc, int64_t mr, int64_t nr) {
    vf r[M_][NV];
    if (acc) {
      load_c<M_>(r, c, ldc, mr, nr);
    } else {
#pragma GCC unroll 16
      for (int i = 0; i < M_; ++i)
#pragma GCC unroll 4
        for (int v = 0; v < NV; ++v) r[i][v] = vf{};
    }
    const int64_t kp = depth(k);
    for (int64_t p = 0; p < kp; ++p) {
      vf b0[NV], b1[NV];
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) {
        __builtin_memcpy(&b0[v], bp + (2 * p) * NR + v * kW, sizeof(vf));
        __builtin_memcpy(&b1[v], bp + (2 * p + 1) * NR + v * kW, sizeof(vf));
      }
#pragma GCC unroll 16
      for (int i = 0; i < M_; ++i) {
        const uint32_t pair = ap[p * MR + i];
        const float a0 = to_float(bf16_t{uint16_t(pair)}), a1 = to_float(bf16_t{uint16_t(pair >> 16)});
#pragma GCC unroll 4
        for (int v = 0; v < NV; ++v) {
          r[i][v] += b1[v] * a1;
          r[i][v] += b0[v] * a0;
        }
      }
    }
    store_c<M_>(r, c, ldc, mr, nr);
  }
};
#endif

// The whole-matrix product with the fastest family the CPU offers: AMX tiles where the process
// may use them (pto/cpu/matmul_bf16_amx.hpp) and the product has rows enough to fill them, else
// the vector kernels above.
template <class D, class T>
inline void mmatmul(pto_parallel_for_fn pf, GlobalView<D> dst, GlobalView<T> a, GlobalView<T> b, bool acc) {
#if PTO_AMX_BF16
  if (detail::imin(dst.vr, a.vr) >= amx::kMinRows && amx::enabled())
    return lowp::mmatmul<Amx>(pf, dst, a, b, acc);
#endif
  lowp::mmatmul<Global>(pf, dst, a, b, acc);
}
}  // namespace bf16mm

// MMATMUL / MMATMUL_ACC of bf16 operands (an f32 or bf16 destination): the packed whole-matrix
// product of pto/cpu/matmul_lowp.hpp with the bf16 kernels. More specialised than matmul.hpp's
// f32 overloads, so overload resolution picks these for bf16 views.
template <class D>
inline void MMATMUL(pto_parallel_for_fn pf, GlobalView<D> dst, GlobalView<bf16_t> a, GlobalView<bf16_t> b) {
  bf16mm::mmatmul(pf, dst, a, b, false);
}
template <class D>
inline void MMATMUL_ACC(pto_parallel_for_fn pf, GlobalView<D> dst, GlobalView<bf16_t> a,
                        GlobalView<bf16_t> b) {
  bf16mm::mmatmul(pf, dst, a, b, true);
}
template <class D>
inline void MMATMUL(pto_parallel_for_fn pf, GlobalView<D> dst, GlobalView<const bf16_t> a,
                    GlobalView<const bf16_t> b) {
  bf16mm::mmatmul(pf, dst, a, b, false);
}
template <class D>
inline void MMATMUL_ACC(pto_parallel_for_fn pf, GlobalView<D> dst, GlobalView<const bf16_t> a,
                        GlobalView<const bf16_t> b) {
  bf16mm::mmatmul(pf, dst, a, b, true);
}

namespace detail {
// d (row stride CD) (+)= a (m x k, row stride C) * b (k x n, row stride C2), bf16 operands.
template <int CD, int C, int C2>
inline void matmul_tiles_bf16(float* d, const bf16_t* a, const bf16_t* b, int64_t m, int64_t n, int64_t k,
                              bool acc) {
#if PTO_AMX_BF16
  // On AMX tiles: both tiles packed into this thread's scratch, one share of the global driver
  // (measured faster from 16 x 64 x 64 up: 1.75 vs 5.9 us).
  if (m >= amx::kMinRows && amx::enabled()) {
    lowp::gemm_share<bf16mm::Amx>(m, n, k, {a, C, 1}, {b, C2, 1}, d, CD, acc);
    return;
  }
#endif
  lowp::matmul_blocks<bf16mm::Kernels<C, C2>, CD, C>(d, a, b, m, n, k, acc);
}
}  // namespace detail

}  // namespace pto
