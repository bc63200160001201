// The terms and epilogue of the f32 sum GEMM (pto/cpu/matmul.hpp), and its wrapped destination: a
// product computed over padded image rows whose output keeps only the image's columns.
//
// A stride-1 convolution is a sum of products over a zero-padded copy of its input whose rows are
// `wrap` = W + gap columns apart (passes/lower_composites.cpp): the product's column j is output
// row j / wrap, column j % wrap, and the gap's columns (j % wrap >= keep) are padding. Storing
// through the wrap writes the convolution's output directly, instead of a wide result that a
// second pass copies row by row (64 x 56 x 56: a 0.8 MB read and write, ~10% of the convolution).
#pragma once
#include "pto/cpu/gemm_kernel.hpp"
#include "pto/cpu/types.hpp"
#if defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace pto {
namespace gemm {
// One product of a sum C = sum_t A_t * B_t: A_t is M x k with element (i,p) at a[i*a_rs + p*a_cs],
// B_t is k x N with (p,j) at b[p*b_rs + j*b_cs]. The sum is one GEMM over the concatenated K
// (A = [A_0 A_1 ..], B = [B_0; B_1; ..]), so each C tile stays in registers across all the terms
// instead of being read and written once per product (a convolution is one term per filter tap).
struct Term {
  const float* a;
  int64_t a_rs, a_cs;
  const float* b;
  int64_t b_rs, b_cs;
  int64_t k;
};

// What finishes each element of C at its final store (micro_kernel): C = relu(C + bias[j]).
// bias: one float per column of C, unit stride, or null; the default finishes nothing.
// With wrap > 0, the destination is wrapped: column j of the product (counted from col0, the
// first column of this share of a split product) is element C[i*ldc + (j / wrap)*ldy + j % wrap]
// where j % wrap < keep; the other columns are dropped. Wrapped products take no bias or relu.
struct Epilogue {
  const float* bias = nullptr;
  bool relu = false;
  int64_t wrap = 0, keep = 0, ldy = 0, col0 = 0;
  bool any() const { return bias || relu; }
  // The epilogue for the k block ending at `k_end` of K, at column j: nothing before the last.
  const float* bias_at(int64_t k_end, int64_t K, int64_t j) const {
    return k_end >= K && bias ? bias + j : nullptr;
  }
  bool relu_at(int64_t k_end, int64_t K) const { return k_end >= K && relu; }
};

// fn(term, first row of the term, offset in [pc, pc + kc), rows) for each piece of the
// concatenated K range [pc, pc + kc).
template <class F>
inline void for_each_k_piece(const Term* t, int nt, int64_t pc, int64_t kc, F&& fn) {
  int64_t base = 0, off = 0;
  for (int i = 0; i < nt && off < kc; base += t[i].k, ++i) {
    const int64_t p0 = pc + off - base;
    if (p0 >= t[i].k) continue;
    const int64_t len = detail::imin(t[i].k - p0, kc - off);
    fn(t[i], p0, off, len);
    off += len;
  }
}

// Columns [j0, j0 + n) of a computed block (m rows, row stride lds) stored (or added, with
// accumulate) through the wrapped destination C (epi.wrap > 0). With 16-lane vectors, each 16
// columns' pieces of image rows are found once and every row of the block is stored with one load
// and a masked store per piece (the strip is in L1; scalar copies cost ~5% of a convolution).
inline void store_wrapped(const float* src, int64_t lds, int64_t m, int64_t j0, int64_t n, float* C,
                          int64_t ldc, bool accumulate, const Epilogue& epi) {
#if defined(__AVX512F__)
  for (int64_t j = 0; j < n; j += 16) {
    const int64_t lanes = detail::imin(16, n - j);
    int64_t off[16];  // piece s: lanes [first[s], first[s] + count) to C + i*ldc + off[s] + lane
    __mmask16 mask[16];
    int pieces = 0;
    for (int64_t q = 0; q < lanes;) {
      const int64_t g = epi.col0 + j0 + j + q, y = g / epi.wrap, x = g - y * epi.wrap;
      const int64_t len = detail::imin(lanes - q, epi.wrap - x);
      if (x < epi.keep) {
        const int64_t kept = detail::imin(len, epi.keep - x);
        off[pieces] = y * epi.ldy + x - q;
        mask[pieces++] = __mmask16(((1u << kept) - 1u) << q);
      }
      q += len;
    }
    for (int64_t i = 0; i < m; ++i) {
      const __m512 v = _mm512_maskz_loadu_ps(__mmask16((1u << lanes) - 1u), src + i * lds + j);
      for (int s = 0; s < pieces; ++s) {
        float* d = C + i * ldc + off[s];  // lane 0's address; the masked-off lanes are not touched
        _mm512_mask_storeu_ps(d, mask[s],
                              accumulate ? _mm512_add_ps(_mm512_maskz_loadu_ps(mask[s], d), v) : v);
      }
    }
  }
#else
  for (int64_t j = 0; j < n;) {
    const int64_t g = epi.col0 + j0 + j, y = g / epi.wrap, x = g - y * epi.wrap;
    const int64_t len = detail::imin(n - j, epi.wrap - x);
    if (x < epi.keep) {
      const int64_t kept = detail::imin(len, epi.keep - x);
      for (int64_t i = 0; i < m; ++i) {
        const float* s = src + i * lds + j;
        float* d = C + i * ldc + y * epi.ldy + x;
        for (int64_t q = 0; q < kept; ++q) d[q] = accumulate ? d[q] + s[q] : s[q];
      }
    }
    j += len;
  }
#endif
}

// The sum with B read in place (every term's b_cs == 1; M at most kMaxRows) into a wrapped
// destination. Each TNR-column panel is computed whole into an L1 strip (M x TNR, every slice of K
// accumulated there), then stored through the wrap: the panel's columns cross image rows anywhere,
// so the micro-kernel cannot store them in place. A is packed once for all of K; each kr-deep slice
// of the panel's B rows stays in L1 across the row panels. The ragged last panel, whose rows would
// read past B's columns, is packed.
constexpr int64_t kWrappedMaxStrip = 64 * 48;  // floats: the in-place products' rows x widest tile
template <int TM, int TNV>
inline void gemm_sum_rows_wrapped_f32(int64_t M, int64_t N, const Term* t, int nt, int64_t K, float* C,
                                      int64_t ldc, bool accumulate, float* Ap, float* Bp, int64_t KB,
                                      const Epilogue& epi) {
  constexpr int TNR = TNV * kW;
  static_assert((TNV == 3 ? 64 : 4 * TM) * TNR <= kWrappedMaxStrip, "the in-place rows (gemm_sum_f32)");
  const int64_t Mp = (M + TM - 1) / TM * TM;
  alignas(64) float strip[kWrappedMaxStrip];
  ScratchBuffer<const float*> rows(K), panel(K);
  for_each_k_piece(t, nt, 0, K, [&](const Term& s, int64_t p0, int64_t off, int64_t len) {
    pack_a<TM>(M, len, s.a + p0 * s.a_cs, s.a_rs, s.a_cs, Ap + off * TM, K);
    for (int64_t p = 0; p < len; ++p) rows[off + p] = s.b + (p0 + p) * s.b_rs;
  });
  for (int64_t jr = 0; jr < N; jr += TNR) {
    const int64_t nr = detail::imin(TNR, N - jr);
    // The panel's row addresses: the micro-kernel then loads at immediate offsets from each (with
    // a column offset beside them, GCC short of registers kept it in a vector register, moved back
    // on an FMA port at every step: ~20% slower in the shared GEMM library).
    if (nr == TNR)
      for (int64_t p = 0; p < K; ++p) panel[p] = rows[p] + jr;
    for (int64_t pc = 0; pc < K; pc += KB) {
      const int64_t kc = detail::imin(KB, K - pc);
      if (nr == TNR) {
        for (int64_t ir = 0; ir < Mp; ir += TM)
          micro_kernel<TM, TNV, 1, TM, TNR, true>(kc, Ap + ir * K + pc * TM, nullptr, strip + ir * TNR, TNR,
                                                  pc > 0, TM, TNR, panel.data() + pc, 0);
      } else {
        for_each_k_piece(t, nt, pc, kc, [&](const Term& s, int64_t p0, int64_t off, int64_t len) {
          pack_b<TNR>(len, nr, s.b + p0 * s.b_rs + jr, s.b_rs, 1, Bp + off * TNR, kc);
        });
        for (int64_t ir = 0; ir < Mp; ir += TM)
          micro_kernel<TM, TNV, 1, TM, TNR>(kc, Ap + ir * K + pc * TM, Bp, strip + ir * TNR, TNR, pc > 0, TM,
                                            TNR);
      }
    }
    store_wrapped(strip, TNR, M, jr, nr, C, ldc, accumulate, epi);
  }
}
}  // namespace gemm
}  // namespace pto
