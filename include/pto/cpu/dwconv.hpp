// TDWCONV: one plane's 2-D correlation, the channel of a depthwise convolution (docs/isa.md):
// dst[i][j] = sum over a < w.vr, b < w.vc of w[a][b] * xp[i*sh + a*dh][j*sw + b*dw], where xp is
// src padded with zeros (pt rows above, pb below, pl columns left, pr right) and taps that fall in
// the padding add nothing. A block of output columns is held in registers while every tap adds
// into it (the tap loop elementwise kept each tap's window in memory: a 7 x 7 depthwise layer was
// 49 loads, multiplies and adds of a whole tile, after a padded copy of the input).
#pragma once
#include <cstdint>
#include <type_traits>

#include "pto/cpu/types.hpp"

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace pto {
namespace detail {

struct DwGeometry {
  int64_t kh, kw, sh, sw, dh, dw, pt, pl;  // filter, strides, dilations, top / left padding
  int64_t hs, ws;                          // src's valid region
  int64_t ho, wo;                          // the result's
};

// Accumulation type: float tiles in float (as torch's CPU kernels), integers in 64 bits
// (wrapping to the destination's width as the interpreter's exact sum does).
template <class T>
using dw_acc_t = std::conditional_t<std::is_floating_point_v<T>, T, int64_t>;

// Any type and stride: per output element, the taps inside src.
template <class D, int RD, int CD, class S, int RS, int CS, class W, int RW, int CW>
void dw_portable(Tile<D, RD, CD>& dst, const Tile<S, RS, CS>& src, const Tile<W, RW, CW>& w,
                 const DwGeometry& g) {
  using A = dw_acc_t<D>;
  for (int64_t i = 0; i < g.ho; ++i) {
    D* out = dst.row(i);
    for (int64_t j = 0; j < g.wo; ++j) {
      A acc = A(0);
      for (int64_t a = 0; a < g.kh; ++a) {
        const int64_t r = i * g.sh + a * g.dh - g.pt;
        if (r < 0 || r >= g.hs) continue;
        const S* row = src.row(r);
        for (int64_t b = 0; b < g.kw; ++b) {
          const int64_t c = j * g.sw + b * g.dw - g.pl;
          if (c >= 0 && c < g.ws) acc += A(w.at(a, b)) * A(row[c]);
        }
      }
      out[j] = D(acc);
    }
  }
}

#if defined(__AVX512F__)
// Lanes [lo, hi) of 16 as a mask (empty when hi <= lo).
inline __mmask16 lane_range(int64_t lo, int64_t hi) {
  lo = lo < 0 ? 0 : lo;
  hi = hi > 16 ? 16 : hi;
  if (hi <= lo) return 0;
  return __mmask16(((1u << hi) - 1u) & ~((1u << lo) - 1u));
}

// The column taps of one block of 16 outputs: tap b reads source columns from byte offset offs[b]
// of a row, lo[b] / hi[b] the lanes of the first / second 16 of them that lie in the source's
// valid columns (and that an output of the block needs); the others load as zero.
struct DwColumnTaps {
  static constexpr int kMax = 64;  // wider filters: the portable loop
  intptr_t offs[kMax];
  __mmask16 lo[kMax], hi[kMax];
};

// Tap b's 16 source values for the block's outputs in one row: columns c0 + t (column stride 1)
// or c0 + 2t (stride 2: 32 columns loaded, the even ones kept).
template <int SW>
PTO_INLINE __m512 dw_load(const DwColumnTaps& t, int64_t b, intptr_t row) {
  const void* p = reinterpret_cast<const void*>(row + t.offs[b]);
  if constexpr (SW == 1) {
    return _mm512_maskz_loadu_ps(t.lo[b], p);
  } else {
    const __m512i even = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
    const __m512 a = _mm512_maskz_loadu_ps(t.lo[b], p);
    const __m512 c = _mm512_maskz_loadu_ps(t.hi[b], reinterpret_cast<const void*>(row + t.offs[b] + 64));
    return _mm512_permutex2var_ps(a, even, c);
  }
}

// kRows output rows' accumulators += every tap of filter row `wr` (rows[q], or row0 + q * step
// bytes when they are evenly spaced).
template <int kRows, int SW, bool kEven>
PTO_INLINE void dw_tap_row(__m512* acc, const intptr_t* rows, intptr_t row0, intptr_t step, const float* wr,
                           int64_t kw, const DwColumnTaps& taps) {
  for (int64_t b = 0; b < kw; ++b) {
    const __m512 wv = _mm512_set1_ps(wr[b]);
#pragma GCC unroll 16
    for (int q = 0; q < kRows; ++q)
      acc[q] = _mm512_fmadd_ps(dw_load<SW>(taps, b, kEven ? row0 + q * step : rows[q]), wv, acc[q]);
  }
}

// The same for row stride and dilation 1 and a filter of KH rows: each input row's vector for a
// column tap is loaded once and added, times each filter row's weight, into every output row it
// reaches (kRows + KH - 1 loads for kRows * KH FMAs instead of one load per FMA).
template <int KH, int kRows, int SW>
PTO_INLINE void dw_tap_rows_shared(__m512* acc, const intptr_t* rows, const float* w, int64_t ldw, int64_t kw,
                                   const DwColumnTaps& taps) {
  for (int64_t b = 0; b < kw; ++b) {
    __m512 wv[KH];
#pragma GCC unroll 8
    for (int a = 0; a < KH; ++a) wv[a] = _mm512_set1_ps(w[a * ldw + b]);
#pragma GCC unroll 32
    for (int r = 0; r < kRows + KH - 1; ++r) {
      const __m512 x = dw_load<SW>(taps, b, rows[r]);
#pragma GCC unroll 8
      for (int a = 0; a < KH; ++a) {
        const int q = r - a;
        if (q >= 0 && q < kRows) acc[q] = _mm512_fmadd_ps(x, wv[a], acc[q]);
      }
    }
  }
}

// Every filter row's taps into kRows output rows from i (any row stride and dilation): a tap row
// above or below src reads a row of zeros.
template <int kRows, int SW, int RS, int CS, int RW, int CW>
PTO_INLINE void dw_taps_by_row(__m512* acc, const Tile<float, RS, CS>& src, const Tile<float, RW, CW>& w,
                               const DwGeometry& g, int64_t i, intptr_t zero_row, const DwColumnTaps& taps) {
  constexpr intptr_t kRowBytes = intptr_t(CS) * intptr_t(sizeof(float));
  for (int64_t a = 0; a < g.kh; ++a) {
    const int64_t r0 = i * g.sh + a * g.dh - g.pt, rn = r0 + (kRows - 1) * g.sh;
    const float* wr = w.row(a);
    if (r0 >= 0 && rn < g.hs) {
      dw_tap_row<kRows, SW, true>(acc, nullptr, reinterpret_cast<intptr_t>(src.row(r0)),
                                  intptr_t(g.sh) * kRowBytes, wr, g.kw, taps);
    } else {
      intptr_t rows[kRows];
      for (int q = 0; q < kRows; ++q) {
        const int64_t r = r0 + q * g.sh;
        rows[q] = r >= 0 && r < g.hs ? reinterpret_cast<intptr_t>(src.row(r)) : zero_row;
      }
      dw_tap_row<kRows, SW, false>(acc, rows, 0, 0, wr, g.kw, taps);
    }
  }
}

// Float planes with column stride SW (1 or 2) and finite weights: 16 output columns per vector,
// kRows output rows at a time (independent chains of FMAs: one chain of a 7 x 7 filter's 49
// dependent FMAs leaves the units idle for their latency; dw_f32 picks 7, 8 or 14 rows to waste
// the fewest on a plane's last group). KH > 0: a filter of KH rows with row stride and dilation 1,
// whose taps share each loaded input row (dw_tap_rows_shared). A tap row above or below src reads
// a row of zeros and a lane outside its valid columns loads zero, adding w * 0 = 0 (so the weights
// must be finite: a NaN or infinite one takes the portable loop, which skips the padding). For
// each block of columns the masks of every column tap are made once; no load reaches outside the
// valid region.
template <int kRows, int KH, int SW, int RD, int CD, int RS, int CS, int RW, int CW>
void dw_f32_rows(Tile<float, RD, CD>& dst, const Tile<float, RS, CS>& src, const Tile<float, RW, CW>& w,
                 const DwGeometry& g) {
  DwColumnTaps taps;
  alignas(64) float zeros[CS + 32] = {};  // (a stride-2 load reads 32 columns, masked to the valid ones)
  // (addresses formed as integers: a masked lane is never read)
  const intptr_t zero_row = reinterpret_cast<intptr_t>(zeros);
  for (int64_t j = 0; j < g.wo; j += 16) {
    const int64_t n = g.wo - j < 16 ? g.wo - j : 16;
    const int64_t used = SW * (n - 1) + 1;  // source lanes the block's outputs read
    for (int64_t b = 0; b < g.kw; ++b) {
      const int64_t c0 = j * SW + b * g.dw - g.pl;  // the source column of lane 0
      taps.offs[b] = intptr_t(c0) * intptr_t(sizeof(float));
      taps.lo[b] = lane_range(-c0, g.ws - c0) & lane_range(0, used);
      taps.hi[b] = lane_range(-c0 - 16, g.ws - c0 - 16) & lane_range(-16, used - 16);
    }
    for (int64_t i = 0; i < g.ho; i += kRows) {
      __m512 acc[kRows];
      for (int q = 0; q < kRows; ++q) acc[q] = _mm512_setzero_ps();
      if constexpr (KH > 0) {
        intptr_t rows[kRows + KH - 1];
        for (int r = 0; r < kRows + KH - 1; ++r) {
          const int64_t x = i - g.pt + r;
          rows[r] = x >= 0 && x < g.hs ? reinterpret_cast<intptr_t>(src.row(x)) : zero_row;
        }
        dw_tap_rows_shared<KH, kRows, SW>(acc, rows, w.row(0), CW, g.kw, taps);
      } else {
        dw_taps_by_row<kRows, SW>(acc, src, w, g, i, zero_row, taps);
      }
      const __mmask16 out_mask = lane_range(0, n);
      for (int q = 0; q < kRows && i + q < g.ho; ++q)
        _mm512_mask_storeu_ps(dst.row(i + q) + j, out_mask, acc[q]);
    }
  }
}

// The row-group size for a plane: the fewest rows computed past its end, then the most per group.
template <int KH, int SW, int RD, int CD, int RS, int CS, int RW, int CW>
void dw_f32(Tile<float, RD, CD>& dst, const Tile<float, RS, CS>& src, const Tile<float, RW, CW>& w,
            const DwGeometry& g) {
  const int64_t waste7 = (7 - g.ho % 7) % 7, waste8 = (8 - g.ho % 8) % 8, waste14 = (14 - g.ho % 14) % 14;
  if (waste14 <= waste7 && waste14 <= waste8)
    dw_f32_rows<14, KH, SW>(dst, src, w, g);
  else if (waste8 <= waste7)
    dw_f32_rows<8, KH, SW>(dst, src, w, g);
  else
    dw_f32_rows<7, KH, SW>(dst, src, w, g);
}
#endif

// The vector kernels where they apply (float tiles with AVX-512, column stride 1 or 2, at most
// DwColumnTaps::kMax columns of finite weights), with the filter height a template argument where
// the rows share their loads; false where the portable loop must run.
template <class D, int RD, int CD, class S, int RS, int CS, class W, int RW, int CW>
bool dw_vector(Tile<D, RD, CD>& dst, const Tile<S, RS, CS>& src, const Tile<W, RW, CW>& w,
               const DwGeometry& g) {
#if defined(__AVX512F__)
  if constexpr (std::is_same_v<D, float> && std::is_same_v<S, float> && std::is_same_v<W, float>) {
    if ((g.sw != 1 && g.sw != 2) || g.kw > DwColumnTaps::kMax) return false;
    for (int64_t a = 0; a < g.kh; ++a)
      for (int64_t b = 0; b < g.kw; ++b)
        if (!(w.at(a, b) - w.at(a, b) == 0.0f)) return false;  // NaN or infinite
    const bool shared = g.sw == 1 && g.sh == 1 && g.dh == 1;
    if (g.sw == 2)  // (MobileNet's downsampling layers)
      dw_f32<0, 2>(dst, src, w, g);
    else if (shared && g.kh == 3)
      dw_f32<3, 1>(dst, src, w, g);
    else if (shared && g.kh == 5)
      dw_f32<5, 1>(dst, src, w, g);
    else if (shared && g.kh == 7)
      dw_f32<7, 1>(dst, src, w, g);
    else
      dw_f32<0, 1>(dst, src, w, g);
    return true;
  }
#endif
  (void)dst, (void)src, (void)w, (void)g;
  return false;
}

}  // namespace detail

template <class D, int RD, int CD, class S, int RS, int CS, class W, int RW, int CW>
inline void TDWCONV(Tile<D, RD, CD>& dst, const Tile<S, RS, CS>& src, const Tile<W, RW, CW>& w, int64_t sh,
                    int64_t sw, int64_t dh, int64_t dw, int64_t pt, int64_t pb, int64_t pl, int64_t pr) {
  static_assert(std::is_arithmetic_v<D> && std::is_arithmetic_v<S> && std::is_arithmetic_v<W>,
                "TDWCONV: float, double or integer tiles (lowering converts the others)");
  if (sh < 1 || sw < 1 || dh < 1 || dw < 1 || pt < 0 || pb < 0 || pl < 0 || pr < 0) {  // (verifier: an error)
    dst.vr = dst.vc = 0;
    return;
  }
  detail::DwGeometry g{w.vr, w.vc, sh, sw, dh, dw, pt, pl, src.vr, src.vc, 0, 0};
  g.ho = (src.vr + pt + pb - (g.kh - 1) * dh - 1) / sh + 1;
  g.wo = (src.vc + pl + pr - (g.kw - 1) * dw - 1) / sw + 1;
  if (g.kh < 1 || g.kw < 1 || g.ho < 1 || g.wo < 1 || src.vr + pt + pb < (g.kh - 1) * dh + 1 ||
      src.vc + pl + pr < (g.kw - 1) * dw + 1) {
    dst.vr = dst.vc = 0;
    return;
  }
  // A result larger than dst's tile (a hand-written program; the interpreter rejects it) is cut to
  // the tile: never a write past it.
  g.ho = g.ho < RD ? g.ho : RD;
  g.wo = g.wo < CD ? g.wo : CD;
  if (!detail::dw_vector(dst, src, w, g)) detail::dw_portable(dst, src, w, g);
  dst.vr = int(g.ho);
  dst.vc = int(g.wo);
}

}  // namespace pto
