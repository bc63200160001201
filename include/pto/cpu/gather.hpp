// Row gather / scatter through an index tile (int32 or int64): between local tiles (TGATHER,
// TSCATTER, TSCATTER_ADD; R x 1 index tiles) and between global memory and a tile (MGATHER,
// MSCATTER, MSCATTER_ADD; 1 x N or N x 1 index vectors).
//
// The interpreter stops at an out-of-range index. The local-tile forms here fill such a row with
// zeros / skip it; the global forms do the same and report the index through the kernel's
// argument block, so that the caller raises it as an error once the kernel returns.
#pragma once
#include "pto/abi.h"
#include "pto/cpu/memory.hpp"
#include "pto/cpu/types.hpp"

namespace pto {
namespace detail {

// "MGATHER: index 12 is out of range for a dimension of size 10", without any library call.
inline void report_index(const pto_kernel_args* args, const char* op, int64_t i, int64_t rows) {
  if (!args || !args->report_error) return;
  char msg[160];
  int n = 0;
  auto put = [&](const char* s) {
    while (*s && n < 150) msg[n++] = *s++;
  };
  auto put_int = [&](int64_t v) {
    char d[24];
    int k = 0;
    const bool neg = v < 0;
    uint64_t u = neg ? uint64_t(0) - uint64_t(v) : uint64_t(v);
    do {
      d[k++] = char('0' + u % 10);
      u /= 10;
    } while (u);
    if (neg && n < 150) msg[n++] = '-';
    while (k && n < 150) msg[n++] = d[--k];
  };
  put(op);
  put(": index ");
  put_int(i);
  put(" is out of range for a dimension of size ");
  put_int(rows);
  msg[n] = 0;
  args->report_error(args->error_ctx, msg);
}

// A rank-1 table seen as a column: each element is a row (a 1 x n view becomes n x 1).
template <class U>
PTO_INLINE GlobalView<U> as_column(GlobalView<U> v) {
  return GlobalView<U>{v.ptr, v.cs, 0, v.vc, 1};
}

// An index vector tile: 1 x N holds its indices along the row, N x 1 down the column.
template <class I, int RI, int CI>
PTO_INLINE int64_t index_count(const Tile<I, RI, CI>& idx) {
  return RI == 1 ? idx.vc : idx.vr;
}
template <class I, int RI, int CI>
PTO_INLINE int64_t index_at(const Tile<I, RI, CI>& idx, int64_t r) {
  return int64_t(RI == 1 ? idx.data[r] : idx.data[r * CI]);
}

}  // namespace detail

using detail::as_column;

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

// dst[idx[r],:] = src[r,:] (or += with Add) for r < src.vr (and < idx.vr), in order; dst.valid unchanged.
template <bool Add = false, class D, int RD, int CD, class T, int R, int C, class I, int RI, int CI>
inline void TSCATTER(Tile<D, RD, CD>& dst, const Tile<T, R, C>& src, const Tile<I, RI, CI>& idx) {
  const int64_t n = detail::imin(src.vr, idx.vr), vc = detail::imin(src.vc, CD);
  for (int64_t r = 0; r < n; ++r) {
    const int64_t i = int64_t(idx.data[r * CI]);
    if (i < 0 || i >= RD) continue;
    D* d = dst.data + i * CD;
    const T* s = src.data + r * C;
    if constexpr (Add) {
      for (int64_t c = 0; c < vc; ++c) d[c] = convert<D>(convert<T>(d[c]) + s[c]);
    } else {
      detail::copy_row(d, s, vc);
    }
  }
}

template <class D, int RD, int CD, class T, int R, int C, class I, int RI, int CI>
inline void TSCATTER_ADD(Tile<D, RD, CD>& dst, const Tile<T, R, C>& src, const Tile<I, RI, CI>& idx) {
  TSCATTER<true>(dst, src, idx);
}

namespace detail {
// a sorts before b: ascending with NaN the greatest (last), or descending (NaN first).
template <class T>
PTO_INLINE bool sorts_before(T a, T b, bool desc) {
  if (desc) {
    T t = a;
    a = b;
    b = t;
  }
  if constexpr (std::is_floating_point_v<T>) {
    if (b != b) return a == a;
  }
  return a < b;
}
}  // namespace detail

// dst[r, :] = the stable permutation that sorts src[r, :src.vc] (ascending, or descending when
// desc != 0); a bottom-up merge sort over an index scratch row. dst.valid = src.vr x src.vc.
template <class D, int RD, int CD, class T, int R, int C>
inline void TARGSORT(Tile<D, RD, CD>& dst, const Tile<T, R, C>& src, int64_t desc) {
  const int64_t vr = detail::imin(src.vr, RD), n = detail::imin(src.vc, CD);
  ScratchBuffer<int64_t> buf(2 * n);
  for (int64_t r = 0; r < vr; ++r) {
    const T* x = src.data + r * C;
    int64_t* a = buf.data();
    int64_t* b = buf.data() + n;
    for (int64_t i = 0; i < n; ++i) a[i] = i;
    for (int64_t w = 1; w < n; w *= 2) {
      for (int64_t lo = 0; lo < n; lo += 2 * w) {
        const int64_t mid = detail::imin(lo + w, n), hi = detail::imin(lo + 2 * w, n);
        int64_t i = lo, j = mid, k = lo;
        while (i < mid && j < hi)
          b[k++] = detail::sorts_before(x[a[j]], x[a[i]], desc != 0) ? a[j++] : a[i++];
        while (i < mid) b[k++] = a[i++];
        while (j < hi) b[k++] = a[j++];
      }
      int64_t* t = a;
      a = b;
      b = t;
    }
    D* d = dst.data + r * CD;
    for (int64_t i = 0; i < n; ++i) d[i] = D(a[i]);
  }
  dst.vr = int(vr);
  dst.vc = int(n);
}

// dst[r,:] = src[idx_r,:] for the n indices of idx; dst.valid = n x src.vc (clamped to dst).
template <class D, int RD, int CD, class U, class I, int RI, int CI>
inline void MGATHER(Tile<D, RD, CD>& dst, GlobalView<U> src, const Tile<I, RI, CI>& idx,
                    const pto_kernel_args* args) {
  const int64_t n = detail::imin(detail::index_count(idx), RD), vc = detail::clamp0(src.vc, CD);
  for (int64_t r = 0; r < n; ++r) {
    const int64_t i = detail::index_at(idx, r);
    D* d = dst.data + r * CD;
    if (i >= 0 && i < src.vr) {
      detail::copy_2d(d, CD, 1, src.ptr + i * src.rs, src.rs, src.cs, 1, vc);
    } else {
      for (int64_t c = 0; c < vc; ++c) d[c] = D{};
      detail::report_index(args, "MGATHER", i, src.vr);
    }
  }
  dst.vr = int(n);
  dst.vc = int(vc);
}

// dst[idx_r,:] = src[r,:] (Add: +=) for r < min(src.vr, n), in order; rows out of range are
// reported and skipped.
template <bool Add = false, class U, class T, int R, int C, class I, int RI, int CI>
inline void MSCATTER(GlobalView<U> dst, const Tile<T, R, C>& src, const Tile<I, RI, CI>& idx,
                     const pto_kernel_args* args) {
  const int64_t n = detail::imin(src.vr, detail::index_count(idx)), vc = detail::clamp0(dst.vc, src.vc);
  for (int64_t r = 0; r < n; ++r) {
    const int64_t i = detail::index_at(idx, r);
    if (i < 0 || i >= dst.vr) {
      detail::report_index(args, Add ? "MSCATTER_ADD" : "MSCATTER", i, dst.vr);
      continue;
    }
    U* d = dst.ptr + i * dst.rs;
    const T* s = src.data + r * C;
    if constexpr (Add) {
      // Tiles hold the compute type (f32, f64, i32, i64): add in it, round once to the tensor's type.
      for (int64_t c = 0; c < vc; ++c) d[c * dst.cs] = convert<U>(T(convert<T>(d[c * dst.cs]) + s[c]));
    } else {
      for (int64_t c = 0; c < vc; ++c) d[c * dst.cs] = convert<U>(s[c]);
    }
  }
}

template <class U, class T, int R, int C, class I, int RI, int CI>
inline void MSCATTER_ADD(GlobalView<U> dst, const Tile<T, R, C>& src, const Tile<I, RI, CI>& idx,
                         const pto_kernel_args* args) {
  MSCATTER<true>(dst, src, idx, args);
}

}  // namespace pto
