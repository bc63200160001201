// Row gather / scatter through an index tile (R x 1, int32 or int64).
//
// The interpreter reports an out-of-range index as an error; compiled kernels cannot raise, so
// here TGATHER fills such a row with zeros and TSCATTER skips it.
#pragma once
#include "pto/cpu/memory.hpp"
#include "pto/cpu/types.hpp"

namespace pto {

// dst[r,:] = src[idx[r],:] for r < idx.vr; dst.valid = idx.vr x src.vc (clamped to dst's shape).
template <class D, int RD, int CD, class T, int R, int C, class I, int RI, int CI>
inline void TGATHER(Tile<D, RD, CD>& dst, const Tile<T, R, C>& src, const Tile<I, RI, CI>& idx) {
  const int64_t vr = detail::imin(idx.vr, RD), vc = detail::imin(src.vc, CD);
  for (int64_t r = 0; r < vr; ++r) {
    const int64_t i = int64_t(idx.data[r * CI]);
    D* d = dst.data + r * CD;
    if (i >= 0 && i < src.vr) {
      detail::copy_row(d, src.data + i * C, vc);
    } else {
      for (int64_t c = 0; c < vc; ++c) d[c] = D{};
    }
  }
  dst.vr = int(vr);
  dst.vc = int(vc);
}

// dst[idx[r],:] = src[r,:] for r < src.vr (and < idx.vr); dst.valid unchanged.
template <class D, int RD, int CD, class T, int R, int C, class I, int RI, int CI>
inline void TSCATTER(Tile<D, RD, CD>& dst, const Tile<T, R, C>& src, const Tile<I, RI, CI>& idx) {
  const int64_t n = detail::imin(src.vr, idx.vr), vc = detail::imin(src.vc, CD);
  for (int64_t r = 0; r < n; ++r) {
    const int64_t i = int64_t(idx.data[r * CI]);
    if (i >= 0 && i < RD) detail::copy_row(dst.data + i * CD, src.data + r * C, vc);
  }
}

}  // namespace pto
