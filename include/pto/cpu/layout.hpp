// Layout instructions: TTRANS, TRESHAPE, TEXTRACT, TINSERT, TFILLPAD.
#pragma once
#include "pto/cpu/memory.hpp"
#include "pto/cpu/types.hpp"

namespace pto {

// dst[c,r] = src[r,c]; dst.valid = src.vc x src.vr (clamped to dst's shape).
template <class D, int RD, int CD, class T, int R, int C>
inline void TTRANS(Tile<D, RD, CD>& dst, const Tile<T, R, C>& src) {
  const int64_t rows = detail::imin(src.vr, CD), cols = detail::imin(src.vc, RD);
  if (static_cast<const void*>(&dst) == static_cast<const void*>(&src)) {
    // In place (square tile): transpose a copy.
    static_assert(sizeof(D) * RD * CD >= sizeof(T) * R * C, "TTRANS: shapes");
    T tmp[R * C];
    __builtin_memcpy(tmp, src.data, sizeof tmp);
    detail::copy_2d(dst.data, 1, CD, tmp, C, 1, rows, cols);
  } else {
    // Reads src row-major, writes dst down its columns; blocked by copy_2d's transposed path.
    detail::copy_2d(dst.data, 1, CD, src.data, C, 1, rows, cols);
  }
  dst.vr = int(cols);
  dst.vc = int(rows);
}

// Same R*C, row-major reinterpretation; src must be fully valid. dst.valid = RD x CD.
template <class D, int RD, int CD, class T, int R, int C>
inline void TRESHAPE(Tile<D, RD, CD>& dst, const Tile<T, R, C>& src) {
  static_assert(RD * CD == R * C, "TRESHAPE: element counts differ");
  if (static_cast<const void*>(&dst) != static_cast<const void*>(&src))
    detail::copy_row(dst.data, src.data, int64_t(R) * C);
  dst.vr = RD;
  dst.vc = CD;
}

// dst[r,c] = src[r0+r, c0+c] over dst's shape clamped to src.valid; dst.valid = that extent.
template <class D, int RD, int CD, class T, int R, int C>
inline void TEXTRACT(Tile<D, RD, CD>& dst, const Tile<T, R, C>& src, int64_t r0, int64_t c0) {
  int64_t rows = 0, cols = 0;
  if (r0 >= 0 && c0 >= 0) {
    rows = detail::clamp0(src.vr - r0, RD);
    cols = detail::clamp0(src.vc - c0, CD);
  }
  if (rows > 0 && cols > 0) detail::copy_2d(dst.data, CD, 1, src.data + r0 * C + c0, C, 1, rows, cols);
  dst.vr = int(rows);
  dst.vc = int(cols);
}

// dst[r0+r, c0+c] = src[r,c] over src.valid clamped to dst's shape; dst.valid unchanged.
template <class D, int RD, int CD, class T, int R, int C>
inline void TINSERT(Tile<D, RD, CD>& dst, const Tile<T, R, C>& src, int64_t r0, int64_t c0) {
  if (r0 < 0 || c0 < 0) return;
  const int64_t rows = detail::clamp0(RD - r0, src.vr), cols = detail::clamp0(CD - c0, src.vc);
  if (rows > 0 && cols > 0) detail::copy_2d(dst.data + r0 * CD + c0, CD, 1, src.data, C, 1, rows, cols);
}

// dst = src on src.valid, value elsewhere; dst.valid = RD x CD. Works in place.
template <class D, int RD, int CD, class T, int R, int C, class S>
inline void TFILLPAD(Tile<D, RD, CD>& dst, const Tile<T, R, C>& src, S value) {
  const D v = convert<D>(value);
  const int64_t vr = detail::imin(src.vr, RD), vc = detail::imin(src.vc, CD);
  const bool same = static_cast<const void*>(&dst) == static_cast<const void*>(&src);
  for (int64_t r = 0; r < RD; ++r) {
    D* d = dst.data + r * CD;
    int64_t c = 0;
    if (r < vr) {
      if (!same) detail::copy_row(d, src.data + r * C, vc);
      c = vc;
    }
    for (; c < CD; ++c) d[c] = v;
  }
  dst.vr = RD;
  dst.vc = CD;
}

}  // namespace pto
