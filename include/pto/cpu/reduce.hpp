// Reductions (TROWSUM/MAX/MIN, TCOLSUM/MAX/MIN), arg-reductions (TROWARGMAX/MIN) and expansions
// (TROWEXPAND, TCOLEXPAND).
//
// Row reductions keep a block of independent lane accumulators (which the compiler maps onto
// SIMD registers) and combine them pairwise at the end: vectorised without -ffast-math, and more
// accurate than one running sum. Column reductions keep a block of columns' accumulators in
// registers and stream the rows past them. Empty reductions give 0 (sum), -inf (max), +inf (min); integer
// max/min start from the type's limits. A sum accumulates in the promotion of src and dst types. Max/min
// propagate NaN like TMAX/TMIN.
#pragma once
#include "pto/cpu/elementwise.hpp"
#include "pto/cpu/types.hpp"
#include "pto/cpu/vexp.hpp"  // the 16-lane vectors (vf16)

namespace pto {
namespace detail {

template <class CT>
struct SumR {
  static constexpr CT init() { return CT(0); }
  PTO_INLINE CT operator()(CT a, CT b) const { return elem::add(a, b); }  // integers wrap
};
template <class CT>
struct MaxR {
  static constexpr CT init() {
    if constexpr (std::is_floating_point_v<CT>)
      return -std::numeric_limits<CT>::infinity();
    else
      return std::numeric_limits<CT>::lowest();
  }
  PTO_INLINE CT operator()(CT a, CT b) const { return OpMax{}(a, b); }
};
template <class CT>
struct MinR {
  static constexpr CT init() {
    if constexpr (std::is_floating_point_v<CT>)
      return std::numeric_limits<CT>::infinity();
    else
      return std::numeric_limits<CT>::max();
  }
  PTO_INLINE CT operator()(CT a, CT b) const { return OpMin{}(a, b); }
};

#if defined(PTO_VF16) && defined(__AVX512F__)
// vmaxps / vminps (a, v): (a > v) ? a : v / (a < v) ? a : v, and v where either is NaN. That is
// OpMax's / OpMin's rule (the accumulator a kept where it wins or is NaN) wherever a is not NaN,
// ties (+0 against -0 too) included: one instruction for the rule's compare / compare / or / blend.
template <bool Max>
PTO_INLINE vf16 vextreme(vf16 a, vf16 v) {
  if constexpr (Max)
    return __builtin_ia32_maxps512_mask(a, v, a, 0xffff, 4);
  else
    return __builtin_ia32_minps512_mask(a, v, a, 0xffff, 4);
}
// 32 lanes (lo: 0-15, hi: 16-31) combined as reduce_span combines them: lane j with lane j + w for
// w = 16, 8, 4, 2, 1; lane 0's value. The lanes hold no NaN.
template <bool Max>
PTO_INLINE float combine32_lanes(vf16 lo, vf16 hi) {
  vf16 a = vextreme<Max>(lo, hi);
  a = vextreme<Max>(a, __builtin_shufflevector(a, a, 8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7));
  a = vextreme<Max>(a, __builtin_shufflevector(a, a, 4, 5, 6, 7, 0, 1, 2, 3, 12, 13, 14, 15, 8, 9, 10, 11));
  a = vextreme<Max>(a, __builtin_shufflevector(a, a, 2, 3, 0, 1, 6, 7, 4, 5, 10, 11, 8, 9, 14, 15, 12, 13));
  a = vextreme<Max>(a, __builtin_shufflevector(a, a, 1, 0, 3, 2, 5, 4, 7, 6, 9, 8, 11, 10, 13, 12, 15, 14));
  return a[0];
}
// The lanes of a float maximum (Max) or minimum as reduce_span keeps them (32: lo 0-15, hi 16-31),
// by vextreme, and whether a NaN went in: without one the accumulators never are NaN, so they are
// the instruction's lanes. add() takes the next 32 elements; result() combines the lanes and the
// tail (taken by the rule) as reduce_span does, or says false where a NaN went in (the caller then
// follows the rule). 5 -> 2.5 cycles per 16 lanes in L1 (Zen 4; the loads alone 1.8).
template <bool Max>
struct ExtremeLanes {
  static constexpr float kInit = Max ? -__builtin_inff() : __builtin_inff();
  vf16 lo = vf16_splat(kInit), hi = lo;
  unsigned short nan_lanes = 0;
  PTO_INLINE void add(vf16 v0, vf16 v1) {
    constexpr int kUnordered = 3;  // _CMP_UNORD_Q
    nan_lanes |= __builtin_ia32_cmpps512_mask(v0, v1, kUnordered, 0xffff, 4);
    lo = vextreme<Max>(lo, v0);
    hi = vextreme<Max>(hi, v1);
  }
  PTO_INLINE bool result(float tail, float* out) const {
    if (nan_lanes != 0 || tail != tail) return false;
    const float m = combine32_lanes<Max>(lo, hi);
    *out = Max ? OpMax{}(m, tail) : OpMin{}(m, tail);
    return true;
  }
};
// A float span's maximum or minimum as reduce_span computes it, into *out, where it holds no NaN.
template <bool Max>
PTO_INLINE bool extreme_span_no_nan(const float* p, int64_t n, float* out) {
  ExtremeLanes<Max> lanes;
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) lanes.add(vf16_load(p + i), vf16_load(p + i + 16));
  float tail = ExtremeLanes<Max>::kInit;
  for (; i < n; ++i) tail = Max ? OpMax{}(tail, p[i]) : OpMin{}(tail, p[i]);
  return lanes.result(tail, out);
}
#endif

template <class CT, class Op, class T>
PTO_INLINE CT reduce_span(const T* p, int64_t n, Op op) {
#if defined(PTO_VF16) && defined(__AVX512F__)
  if constexpr (std::is_same_v<CT, float> && std::is_same_v<T, float> &&
                (std::is_same_v<Op, MaxR<float>> || std::is_same_v<Op, MinR<float>>)) {
    float r;
    if (extreme_span_no_nan<std::is_same_v<Op, MaxR<float>>>(p, n, &r)) return r;
  }
#endif
  constexpr int L = int(128 / sizeof(CT));  // two 512-bit registers' worth of lanes
  CT acc[L];
  for (int j = 0; j < L; ++j) acc[j] = Op::init();
  const int64_t nb = n / L * L;
  for (int64_t i = 0; i < nb; i += L)
    for (int j = 0; j < L; ++j) acc[j] = op(acc[j], convert<CT>(p[i + j]));
  CT tail = Op::init();
  for (int64_t i = nb; i < n; ++i) tail = op(tail, convert<CT>(p[i]));
  for (int w = L / 2; w >= 1; w /= 2)
    for (int j = 0; j < w; ++j) acc[j] = op(acc[j], acc[j + w]);
  return op(acc[0], tail);
}

template <template <class> class Red, class D, int RD, int CD, class T, int R, int C>
inline void row_reduce(Tile<D, RD, CD>& dst, const Tile<T, R, C>& src) {
  using CT = promote_t<T, D>;  // a sum into a wider dst accumulates in dst's type
  const int64_t vr = imin(src.vr, RD), vc = src.vc;
  for (int64_t r = 0; r < vr; ++r)
    dst.data[r * CD] = convert<D>(reduce_span<CT>(src.data + r * C, vc, Red<CT>{}));
  dst.vr = int(vr);
  dst.vc = 1;
}

// Columns c0 .. c0+W-1 (W <= lanes) reduced down rows 0 .. vr-1: the W accumulators stay in
// registers while the rows stream past.
template <int L, class CT, class Op, class D, class T>
PTO_INLINE void col_block(D* d, const T* s, int64_t stride, int64_t vr, int W, Op op) {
  CT acc[L];
  for (int j = 0; j < L; ++j) acc[j] = Op::init();
  if (W == L) {
    for (int64_t r = 0; r < vr; ++r)
      for (int j = 0; j < L; ++j) acc[j] = op(acc[j], convert<CT>(s[r * stride + j]));
  } else {
    for (int64_t r = 0; r < vr; ++r)
      for (int j = 0; j < W; ++j) acc[j] = op(acc[j], convert<CT>(s[r * stride + j]));
  }
  for (int j = 0; j < W; ++j) d[j] = convert<D>(acc[j]);
}

// Reads every row of a block of columns before writing the block, so dst may share src's storage.
template <template <class> class Red, class D, int RD, int CD, class T, int R, int C>
inline void col_reduce(Tile<D, RD, CD>& dst, const Tile<T, R, C>& src) {
  using CT = promote_t<T, D>;               // a sum into a wider dst accumulates in dst's type
  constexpr int L = int(256 / sizeof(CT));  // four 512-bit registers of accumulators
  const int64_t vr = src.vr, vc = imin(src.vc, CD);
  int64_t c0 = 0;
  for (; c0 + L <= vc; c0 += L) col_block<L, CT>(dst.data + c0, src.data + c0, C, vr, L, Red<CT>{});
  if (c0 < vc) col_block<L, CT>(dst.data + c0, src.data + c0, C, vr, int(vc - c0), Red<CT>{});
  dst.vr = 1;
  dst.vc = int(vc);
}

// The index of a span's first NaN if it has one, else of its first element equal to its maximum
// (Max) or minimum; 0 for an empty span. The extreme comes from reduce_span, which carries a NaN
// through, then a search for the first match: two vectorised reads of a row that sits in L1 / L2,
// where one pass keeping an index per lane would need a blend per compare. *extreme (if given)
// gets the extreme: TROWMAX's / TROWMIN's result, bit for bit.
template <bool Max, class T>
PTO_INLINE int64_t arg_extreme_span(const T* p, int64_t n, arith_t<T>* extreme = nullptr) {
  using CT = arith_t<T>;
  const CT m = Max ? reduce_span<CT>(p, n, MaxR<CT>{}) : reduce_span<CT>(p, n, MinR<CT>{});
  if (extreme) *extreme = m;
  if (n <= 0) return 0;
  const bool nan = m != m;  // then only a NaN matches
  int64_t i = 0;
#if defined(PTO_VF16) && defined(__AVX512F__)
  if constexpr (std::is_same_v<T, float>) {
    constexpr int kEqual = 0, kUnordered = 3;  // _CMP_EQ_OQ, _CMP_UNORD_Q
    const vf16 mv = vf16_splat(m);
    for (; i + 16 <= n; i += 16) {
      const vf16 v = vf16_load(p + i);
      const unsigned hits = nan ? __builtin_ia32_cmpps512_mask(v, v, kUnordered, 0xffff, 4)
                                : __builtin_ia32_cmpps512_mask(v, mv, kEqual, 0xffff, 4);
      if (hits) return i + __builtin_ctz(hits);
    }
  }
#endif
  for (; i < n; ++i) {
    const CT v = convert<CT>(p[i]);
    if (nan ? v != v : v == m) return i;
  }
  return 0;  // (not reached: the extreme is one of the elements)
}

template <bool Max, class D, int RD, int CD, class T, int R, int C>
inline void row_arg_extreme(Tile<D, RD, CD>& dst, const Tile<T, R, C>& src) {
  const int64_t vr = imin(src.vr, RD), vc = clamp0(src.vc, C);
  for (int64_t r = 0; r < vr; ++r) dst.data[r * CD] = D(arg_extreme_span<Max>(src.data + r * C, vc));
  dst.vr = int(vr);
  dst.vc = 1;
}

}  // namespace detail

template <class D, int RD, int CD, class T, int R, int C>
inline void TROWSUM(Tile<D, RD, CD>& dst, const Tile<T, R, C>& src) {
  detail::row_reduce<detail::SumR>(dst, src);
}
template <class D, int RD, int CD, class T, int R, int C>
inline void TROWMAX(Tile<D, RD, CD>& dst, const Tile<T, R, C>& src) {
  detail::row_reduce<detail::MaxR>(dst, src);
}
template <class D, int RD, int CD, class T, int R, int C>
inline void TROWMIN(Tile<D, RD, CD>& dst, const Tile<T, R, C>& src) {
  detail::row_reduce<detail::MinR>(dst, src);
}
// dst[r, 0] = the column of row r's first NaN, else of its first maximum / minimum (0: empty row).
template <class D, int RD, int CD, class T, int R, int C>
inline void TROWARGMAX(Tile<D, RD, CD>& dst, const Tile<T, R, C>& src) {
  detail::row_arg_extreme<true>(dst, src);
}
template <class D, int RD, int CD, class T, int R, int C>
inline void TROWARGMIN(Tile<D, RD, CD>& dst, const Tile<T, R, C>& src) {
  detail::row_arg_extreme<false>(dst, src);
}
template <class D, int RD, int CD, class T, int R, int C>
inline void TCOLSUM(Tile<D, RD, CD>& dst, const Tile<T, R, C>& src) {
  detail::col_reduce<detail::SumR>(dst, src);
}
template <class D, int RD, int CD, class T, int R, int C>
inline void TCOLMAX(Tile<D, RD, CD>& dst, const Tile<T, R, C>& src) {
  detail::col_reduce<detail::MaxR>(dst, src);
}
template <class D, int RD, int CD, class T, int R, int C>
inline void TCOLMIN(Tile<D, RD, CD>& dst, const Tile<T, R, C>& src) {
  detail::col_reduce<detail::MinR>(dst, src);
}

namespace detail {
// Running sums, products, maxima or minima (Red: SumR, ProdR, MaxR, MinR; the accumulator is the
// first operand) of rows r0..r0+G-1 at once: G independent chains, which the CPU overlaps where one
// row's chain would wait on each step's latency. Reads element c of a row before writing it, so dst
// may be src.
template <class CT>
struct ProdR {
  static constexpr CT init() { return CT(1); }
  PTO_INLINE CT operator()(CT a, CT b) const { return elem::mul(a, b); }  // integers wrap
};
template <int G, template <class> class Red, bool Rev, class CT, class D, class T>
PTO_INLINE void scan_rows(D* d, int64_t dc, const T* s, int64_t sc, int64_t vc) {
  CT acc[G];
  for (int g = 0; g < G; ++g) acc[g] = Red<CT>::init();
  for (int64_t i = 0; i < vc; ++i) {
    const int64_t c = Rev ? vc - 1 - i : i;
    for (int g = 0; g < G; ++g) {
      acc[g] = Red<CT>{}(acc[g], convert<CT>(s[g * sc + c]));
      d[g * dc + c] = convert<D>(acc[g]);
    }
  }
}
template <template <class> class Red, bool Rev, class D, int RD, int CD, class T, int R, int C>
inline void scan_tile(Tile<D, RD, CD>& dst, const Tile<T, R, C>& src, int64_t vr, int64_t vc) {
  using CT = arith_t<promote_t<D, T>>;
  constexpr int G = 8;
  int64_t r = 0;
  for (; r + G <= vr; r += G) scan_rows<G, Red, Rev, CT>(dst.data + r * CD, CD, src.data + r * C, C, vc);
  for (; r + G / 2 <= vr; r += G / 2)
    scan_rows<G / 2, Red, Rev, CT>(dst.data + r * CD, CD, src.data + r * C, C, vc);
  for (; r < vr; ++r) scan_rows<1, Red, Rev, CT>(dst.data + r * CD, CD, src.data + r * C, C, vc);
}
template <bool Rev, class D, int RD, int CD, class T, int R, int C>
inline void scan_kind(Tile<D, RD, CD>& dst, const Tile<T, R, C>& src, int64_t vr, int64_t vc, int64_t kind) {
  switch (kind & 5) {
    case 0:
      return scan_tile<SumR, Rev>(dst, src, vr, vc);
    case 1:
      return scan_tile<ProdR, Rev>(dst, src, vr, vc);
    case 4:
      return scan_tile<MaxR, Rev>(dst, src, vr, vc);
    default:
      return scan_tile<MinR, Rev>(dst, src, vr, vc);
  }
}
}  // namespace detail

// dst[r, c] = src[r, 0] + ... + src[r, c] (kind bit 0: product; bit 1: from the end,
// src[r, c] + ... + src[r, vc-1]; bit 2: maximum, with bit 0 minimum, by TMAX's / TMIN's rule),
// accumulated in order in the compute type. dst may be src. dst.valid = src.valid (clamped).
template <class D, int RD, int CD, class T, int R, int C>
inline void TSCAN(Tile<D, RD, CD>& dst, const Tile<T, R, C>& src, int64_t kind) {
  const int64_t vr = detail::imin(src.vr, RD), vc = detail::imin(src.vc, CD);
  if (kind & 2)
    detail::scan_kind<true>(dst, src, vr, vc, kind);
  else
    detail::scan_kind<false>(dst, src, vr, vc, kind);
  dst.vr = int(vr);
  dst.vc = int(vc);
}

// dst[r,c] = src[r,0] for r < src.vr, every c < C; dst.valid = src.vr x C.
template <class D, int RD, int CD, class T, int R, int C>
inline void TROWEXPAND(Tile<D, RD, CD>& dst, const Tile<T, R, C>& src) {
  const int64_t vr = detail::imin(src.vr, RD);
  for (int64_t r = 0; r < vr; ++r) {
    const D v = convert<D>(src.data[r * C]);
    D* d = dst.data + r * CD;
    for (int64_t c = 0; c < CD; ++c) d[c] = v;
  }
  dst.vr = int(vr);
  dst.vc = CD;
}

// dst[r,c] = src[0,c] for every r < R, c < src.vc; dst.valid = R x src.vc.
template <class D, int RD, int CD, class T, int R, int C>
inline void TCOLEXPAND(Tile<D, RD, CD>& dst, const Tile<T, R, C>& src) {
  const int64_t vc = detail::imin(src.vc, CD);
  D row[CD];  // a copy, in case dst and src share storage
  for (int64_t c = 0; c < vc; ++c) row[c] = convert<D>(src.data[c]);
  for (int64_t r = 0; r < RD; ++r) {
    D* d = dst.data + r * CD;
    for (int64_t c = 0; c < vc; ++c) d[c] = row[c];
  }
  dst.vr = RD;
  dst.vc = int(vc);
}

}  // namespace pto
