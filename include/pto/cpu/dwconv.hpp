// TDWCONV: one plane's 2-D correlation, the channel of a depthwise convolution (docs/isa.md):
// dst[i][j] = sum over a < w.vr, b < w.vc of w[a][b] * src[i*sh + a*dh][j*sw + b*dw], dst's
// valid region the windows that fit src's. A block of output columns is held in registers while
// every tap adds into it (the tap loop elementwise kept each tap's window in memory: a 7 x 7
// depthwise layer was 49 loads, multiplies and adds of a whole tile).
#pragma once
#include <cstdint>
#include <type_traits>

#include "pto/cpu/types.hpp"

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace pto {
namespace detail {

// Accumulation type: float tiles in float (as torch's CPU kernels), integers in 64 bits
// (wrapping to the destination's width as the interpreter's exact sum does).
template <class T>
using dw_acc_t = std::conditional_t<std::is_floating_point_v<T>, T, int64_t>;

// N output columns from j0 of output row i, every tap accumulated before one store. N is a
// constant so the block lives in vector registers.
template <int N, class D, class S, class W, int RS, int CS, int RW, int CW>
PTO_INLINE void dw_block(D* out, const Tile<S, RS, CS>& src, const Tile<W, RW, CW>& w, int64_t i, int64_t j0,
                         int64_t kh, int64_t kw, int64_t sh, int64_t sw, int64_t dh, int64_t dw) {
  using A = dw_acc_t<D>;
  A acc[N] = {};
  for (int64_t a = 0; a < kh; ++a) {
    const S* row = src.row(i * sh + a * dh) + j0 * sw;
    for (int64_t b = 0; b < kw; ++b) {
      const A wv = A(w.at(a, b));
      const S* p = row + b * dw;
      if (sw == 1) {
        for (int t = 0; t < N; ++t) acc[t] += wv * A(p[t]);
      } else {
        for (int t = 0; t < N; ++t) acc[t] += wv * A(p[t * sw]);
      }
    }
  }
  for (int t = 0; t < N; ++t) out[t] = D(acc[t]);
}

// The same for n < 16 columns (a narrow plane: 7 or 14 wide).
template <class D, class S, class W, int RS, int CS, int RW, int CW>
PTO_INLINE void dw_tail(D* out, int64_t n, const Tile<S, RS, CS>& src, const Tile<W, RW, CW>& w, int64_t i,
                        int64_t j0, int64_t kh, int64_t kw, int64_t sh, int64_t sw, int64_t dh, int64_t dw) {
  using A = dw_acc_t<D>;
  A acc[16] = {};
  for (int64_t a = 0; a < kh; ++a) {
    const S* row = src.row(i * sh + a * dh) + j0 * sw;
    for (int64_t b = 0; b < kw; ++b) {
      const A wv = A(w.at(a, b));
      const S* p = row + b * dw;
      for (int64_t t = 0; t < n; ++t) acc[t] += wv * A(p[t * sw]);
    }
  }
  for (int64_t t = 0; t < n; ++t) out[t] = D(acc[t]);
}

#if defined(__AVX512F__)
// Float planes read with column stride 1: 16 output columns per vector, every tap's weight
// broadcast and multiplied into it; a row's last block masked (a 7- or 14-wide plane is one
// vector, its loads never past the row's valid columns).
template <int RD, int CD, int RS, int CS, int RW, int CW>
inline void dw_f32_unit_stride(Tile<float, RD, CD>& dst, const Tile<float, RS, CS>& src,
                               const Tile<float, RW, CW>& w, int64_t ho, int64_t wo, int64_t sh, int64_t dh,
                               int64_t dw) {
  const int64_t kh = w.vr, kw = w.vc;
  for (int64_t j = 0; j < wo; j += 16) {
    const int64_t n = wo - j < 16 ? wo - j : 16;
    const __mmask16 m = __mmask16((1u << n) - 1u);
    for (int64_t i = 0; i < ho; ++i) {
      __m512 acc = _mm512_setzero_ps();
      for (int64_t a = 0; a < kh; ++a) {
        const float* row = src.row(i * sh + a * dh) + j;
        const float* wr = w.row(a);
        for (int64_t b = 0; b < kw; ++b)
          acc = _mm512_fmadd_ps(_mm512_set1_ps(wr[b]), _mm512_maskz_loadu_ps(m, row + b * dw), acc);
      }
      _mm512_mask_storeu_ps(dst.row(i) + j, m, acc);
    }
  }
}
#endif

}  // namespace detail

template <class D, int RD, int CD, class S, int RS, int CS, class W, int RW, int CW>
inline void TDWCONV(Tile<D, RD, CD>& dst, const Tile<S, RS, CS>& src, const Tile<W, RW, CW>& w, int64_t sh,
                    int64_t sw, int64_t dh, int64_t dw) {
  static_assert(std::is_arithmetic_v<D> && std::is_arithmetic_v<S> && std::is_arithmetic_v<W>,
                "TDWCONV: float, double or integer tiles (lowering converts the others)");
  const int64_t kh = w.vr, kw = w.vc;
  const int64_t ho = (src.vr - (kh - 1) * dh - 1) / sh + 1, wo = (src.vc - (kw - 1) * dw - 1) / sw + 1;
  if (kh < 1 || kw < 1 || ho < 1 || wo < 1) {
    dst.vr = dst.vc = 0;
    return;
  }
#if defined(__AVX512F__)
  if constexpr (std::is_same_v<D, float> && std::is_same_v<S, float> && std::is_same_v<W, float>) {
    if (sw == 1) {
      detail::dw_f32_unit_stride(dst, src, w, ho, wo, sh, dh, dw);
      dst.vr = int(ho);
      dst.vc = int(wo);
      return;
    }
  }
#endif
  constexpr int kBlock = 32;
  for (int64_t i = 0; i < ho; ++i) {
    D* out = dst.row(i);
    int64_t j = 0;
    for (; j + kBlock <= wo; j += kBlock)
      detail::dw_block<kBlock>(out + j, src, w, i, j, kh, kw, sh, sw, dh, dw);
    if (j + 16 <= wo) {
      detail::dw_block<16>(out + j, src, w, i, j, kh, kw, sh, sw, dh, dw);
      j += 16;
    }
    if (j < wo) {
      if (wo >= 16)  // the last 16 columns again (the same sums): no narrow loop
        detail::dw_block<16>(out + wo - 16, src, w, i, wo - 16, kh, kw, sh, sw, dh, dw);
      else
        detail::dw_tail(out + j, wo - j, src, w, i, j, kh, kw, sh, sw, dh, dw);
    }
  }
  dst.vr = int(ho);
  dst.vc = int(wo);
}

}  // namespace pto
