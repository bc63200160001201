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

namespace detail {
template <class T>
struct KeyIndex {
  T key;
  int64_t idx;
};

// The sort's total order on (key, index): the key first, then the earlier index (stability).
template <class T>
PTO_INLINE bool better(const KeyIndex<T>& a, const KeyIndex<T>& b, bool desc) {
  if (sorts_before(a.key, b.key, desc)) return true;
  if (sorts_before(b.key, a.key, desc)) return false;
  return a.idx < b.idx;
}

// A key that orders like the sort but has no NaN (NaN, the best descending and the worst
// ascending, becomes +inf), so that block bests are plain max/min loops that vectorise. Ties
// between NaN and +inf are harmless: the key only filters candidates (inclusive of the bound).
template <class T>
PTO_INLINE T filter_key(T v) {
  if constexpr (std::is_floating_point_v<T>)
    return v != v ? T(__builtin_huge_val()) : v;
  else
    return v;
}
template <class T>
PTO_INLINE T key_max(T a, T b) {
  return a > b ? a : b;
}
template <class T>
PTO_INLINE T key_min(T a, T b) {
  return a < b ? a : b;
}
template <class T>
PTO_INLINE bool reaches(T key, T bound, bool desc) {
  return desc ? key >= bound : key <= bound;
}

// Reorders c[0:m] so that c[0:k] are its k best entries (in no particular order): quickselect.
template <class T>
inline void keep_best(KeyIndex<T>* c, int64_t m, int64_t k, bool desc) {
  int64_t lo = 0, hi = m;
  while (hi - lo > 1) {
    const int64_t p = lo + (hi - lo) / 2;
    KeyIndex<T> t = c[p];
    c[p] = c[hi - 1];
    c[hi - 1] = t;
    const KeyIndex<T> pivot = c[hi - 1];
    int64_t store = lo;
    for (int64_t i = lo; i < hi - 1; ++i)
      if (better(c[i], pivot, desc)) {
        t = c[i];
        c[i] = c[store];
        c[store++] = t;
      }
    c[hi - 1] = c[store];
    c[store] = pivot;  // c[lo:store] beat the pivot, which sits at store
    if (k <= store)
      hi = store;
    else if (k > store + 1)
      lo = store + 1;
    else
      break;
  }
}

// The first k entries of the stable sorting permutation of x[0:n], in order (k < n). Pass 1 takes
// the best key of each of the M groups {j, j + M, j + 2M, ...} (an elementwise max/min of the
// row's M-wide pieces, which vectorises); the k-th best of those bounds the k-th best key of the
// row, so pass 2 collects only the keys that reach it, from the groups whose best does (about k of
// them for an unordered row), into a buffer of `cap` > k entries, cut back to its best k by
// quickselect whenever it fills. Then the k are sorted. `bk` holds 2M keys.
template <class T>
PTO_INLINE int64_t select_groups(int64_t n, int64_t k) {
  return imin(n, imax(4 * k, n / 32));
}
template <class D, class T>
inline void select_first_k(D* out, const T* x, int64_t n, int64_t k, bool desc, KeyIndex<T>* c, int64_t cap,
                           T* bk) {
  const int64_t nb = select_groups<T>(n, k);
  T* sel = bk + nb;
  for (int64_t j = 0; j < nb; ++j) bk[j] = filter_key(x[j]);
  for (int64_t r = nb; r < n; r += nb) {
    const T* p = x + r;
    const int64_t e = imin(nb, n - r);
    if (desc)
      for (int64_t j = 0; j < e; ++j) bk[j] = key_max(bk[j], filter_key(p[j]));
    else
      for (int64_t j = 0; j < e; ++j) bk[j] = key_min(bk[j], filter_key(p[j]));
  }
  for (int64_t j = 0; j < nb; ++j) sel[j] = bk[j];
  const bool bounded = nb >= k;
  T bound{};
  if (bounded) {  // the k-th best block best: quickselect on plain keys (no NaN among them)
    int64_t lo = 0, hi = nb, want = k - 1;
    while (hi - lo > 1) {
      const T pv = sel[lo + (hi - lo) / 2];
      int64_t i = lo, j = hi - 1;
      while (i <= j) {
        while (desc ? sel[i] > pv : sel[i] < pv) ++i;
        while (desc ? pv > sel[j] : pv < sel[j]) --j;
        if (i <= j) {
          const T t = sel[i];
          sel[i++] = sel[j];
          sel[j--] = t;
        }
      }
      if (want <= j)
        hi = j + 1;
      else if (want >= i)
        lo = i;
      else
        break;
    }
    bound = sel[want];
  }
  int64_t m = 0;
  for (int64_t g = 0; g < nb; ++g) {
    if (bounded && !reaches(bk[g], bound, desc)) continue;
    for (int64_t j = g; j < n; j += nb) {
      if (bounded && !reaches(filter_key(x[j]), bound, desc)) continue;
      c[m++] = KeyIndex<T>{x[j], j};
      if (m == cap) {
        keep_best(c, m, k, desc);
        m = k;
      }
    }
  }
  if (m > k) keep_best(c, m, k, desc);
  for (int64_t a = 1; a < k; ++a) {  // insertion sort of the k best
    const KeyIndex<T> v = c[a];
    int64_t b = a;
    for (; b > 0 && better(v, c[b - 1], desc); --b) c[b] = c[b - 1];
    c[b] = v;
  }
  for (int64_t j = 0; j < k; ++j) out[j] = D(c[j].idx);
}

// A row's stable sort as (key, index) pairs: insertion-sorted runs of 16, then bottom-up merges
// that take the right element only when it sorts strictly before (stability), each compare on
// keys beside their indices rather than loaded through an index. 32-bit keys (float, int32) of
// rows of 64 or more take radix_sort_row instead.
template <class T>
struct SortPair {
  T key;
  int32_t idx;  // (a tile row has fewer than 2^31 elements)
};

// The sort's order as unsigned 32-bit keys: a float's bits with the sign bit flipped (negatives:
// every bit), -0.0 as +0.0 (they compare equal, so stability keeps them in place) and every NaN
// as the greatest; an int32 with its sign bit flipped; descending: the complement.
template <bool Desc, class T>
PTO_INLINE uint32_t radix_key(T v) {
  uint32_t u;
  if constexpr (std::is_floating_point_v<T>) {
    if (v != v) {
      u = 0xffffffffu;
    } else {
      const float f = v == 0 ? 0.0f : float(v);
      __builtin_memcpy(&u, &f, 4);
      u = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
    }
  } else {
    u = uint32_t(int32_t(v)) ^ 0x80000000u;
  }
  return Desc ? ~u : u;
}

// A stable least-significant-digit radix sort of a row of 32-bit keys: four byte passes (one
// skipped where every key shares that byte), the histograms counted in one read. 1024 x 1024
// argsort on 2 Zen 4 cores: 30 -> 5 ms, torch 26 (the merge sort's unpredictable compares cost
// ~45 ns an element).
template <bool Desc, class D, class T>
inline void radix_sort_row(D* out, const T* x, int64_t n, int64_t k, uint64_t* a, uint64_t* b) {
  uint32_t count[4][256] = {};
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t key = radix_key<Desc>(x[i]);
    a[i] = uint64_t(key) << 32 | uint64_t(uint32_t(i));
    for (int p = 0; p < 4; ++p) ++count[p][(key >> (8 * p)) & 255];
  }
  for (int p = 0; p < 4; ++p) {
    uint32_t* c = count[p];
    if (c[(a[0] >> (32 + 8 * p)) & 255] == uint32_t(n)) continue;  // one value of this byte
    uint32_t sum = 0;
    for (int v = 0; v < 256; ++v) {
      const uint32_t t = c[v];
      c[v] = sum;
      sum += t;
    }
    for (int64_t i = 0; i < n; ++i) b[c[(a[i] >> (32 + 8 * p)) & 255]++] = a[i];
    uint64_t* t = a;
    a = b;
    b = t;
  }
  for (int64_t i = 0; i < k; ++i) out[i] = D(uint32_t(a[i]));
}
template <bool Desc, class D, class T>
inline void sort_row(D* out, const T* x, int64_t n, int64_t k, SortPair<T>* a, SortPair<T>* b) {
  constexpr int64_t kRun = 16;
  for (int64_t i = 0; i < n; ++i) a[i] = SortPair<T>{x[i], int32_t(i)};
  for (int64_t lo = 0; lo < n; lo += kRun) {
    const int64_t hi = imin(lo + kRun, n);
    for (int64_t i = lo + 1; i < hi; ++i) {
      const SortPair<T> v = a[i];
      int64_t j = i;
      for (; j > lo && sorts_before(v.key, a[j - 1].key, Desc); --j) a[j] = a[j - 1];
      a[j] = v;
    }
  }
  for (int64_t w = kRun; w < n; w *= 2) {
    for (int64_t lo = 0; lo < n; lo += 2 * w) {
      const int64_t mid = imin(lo + w, n), hi = imin(lo + 2 * w, n);
      int64_t i = lo, j = mid, o = lo;
      while (i < mid && j < hi) b[o++] = sorts_before(a[j].key, a[i].key, Desc) ? a[j++] : a[i++];
      while (i < mid) b[o++] = a[i++];
      while (j < hi) b[o++] = a[j++];
    }
    SortPair<T>* t = a;
    a = b;
    b = t;
  }
  for (int64_t i = 0; i < k; ++i) out[i] = D(a[i].idx);
}
}  // namespace detail

// dst[r, 0:k] = the first k = min(dst.C, src.vc) entries of the stable permutation that sorts
// src[r, :src.vc] (ascending, or descending when desc != 0). A destination as wide as the source
// gets the whole permutation (detail::sort_row); a narrow one (topk) gets the first k by
// selection, without sorting the rest. dst.valid = src.vr x k.
template <class D, int RD, int CD, class T, int R, int C>
inline void TARGSORT(Tile<D, RD, CD>& dst, const Tile<T, R, C>& src, int64_t desc) {
  const int64_t vr = detail::imin(src.vr, RD), n = detail::clamp0(src.vc, C), k = detail::imin(n, CD);
  const bool select = k > 0 && k * 8 <= n && k <= 4096;
  const int64_t cap = 4 * k;
  constexpr bool kRadixKeys = std::is_same_v<T, float> || std::is_same_v<T, int32_t>;
  const bool radix = !select && kRadixKeys && n >= 64;
  ScratchBuffer<detail::SortPair<T>> buf(select || radix ? 0 : 2 * n);
  ScratchBuffer<uint64_t> keys(radix ? 2 * n : 0);
  ScratchBuffer<detail::KeyIndex<T>> cand(select ? cap : 0);
  ScratchBuffer<T> block_best(select ? 2 * detail::select_groups<T>(n, k) : 0);
  for (int64_t r = 0; r < vr; ++r) {
    const T* x = src.data + r * C;
    D* d = dst.data + r * CD;
    if (select) {
      detail::select_first_k(d, x, n, k, desc != 0, cand.data(), cap, block_best.data());
      continue;
    }
    if (radix) {
      if (desc != 0)
        detail::radix_sort_row<true>(d, x, n, k, keys.data(), keys.data() + n);
      else
        detail::radix_sort_row<false>(d, x, n, k, keys.data(), keys.data() + n);
      continue;
    }
    if (desc != 0)
      detail::sort_row<true>(d, x, n, k, buf.data(), buf.data() + n);
    else
      detail::sort_row<false>(d, x, n, k, buf.data(), buf.data() + n);
  }
  dst.vr = int(vr);
  dst.vc = int(k);
}

// dst[r,:] = src[idx_r,:] for the n indices of idx; dst.valid = n x src.vc (clamped to dst).
template <class D, int RD, int CD, class U, class I, int RI, int CI>
inline void MGATHER(Tile<D, RD, CD>& dst, GlobalView<U> src, const Tile<I, RI, CI>& idx,
                    const pto_kernel_args* args) {
  const int64_t n = detail::imin(detail::index_count(idx), RD), vc = detail::clamp0(src.vc, CD);
  if (vc == 1) {  // elements (torch.gather, a row at a time): no copy loop per index
    for (int64_t r = 0; r < n; ++r) {
      const int64_t i = detail::index_at(idx, r);
      const bool in = i >= 0 && i < src.vr;
      dst.data[r * CD] = in ? convert<D>(src.ptr[i * src.rs]) : D{};
      if (!in) detail::report_index(args, "MGATHER", i, src.vr);
    }
    dst.vr = int(n);
    dst.vc = 1;
    return;
  }
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

namespace fused {

// MGATHER rows, table, idx; TSTORE out, rows — with each indexed row copied from the table
// straight into its output row (rows dead after the store, as code generation proves): one copy
// of each row instead of two. Where the types differ (the tile converts), a view has a column
// stride or the output meets the table, the two instructions as written.
template <bool Stream, class V, class D, int RD, int CD, class U, class I, int RI, int CI>
inline void gather_rows(GlobalView<V> out, GlobalView<U> table, const Tile<I, RI, CI>& idx,
                        Tile<D, RD, CD>& rows, const pto_kernel_args* args) {
  if constexpr (std::is_same_v<V, D> && std::is_same_v<U, D>) {
    const int64_t n = detail::imin(detail::index_count(idx), RD), vc = detail::clamp0(table.vc, CD);
    const int64_t wr = detail::imin(detail::clamp0(out.vr, n), n),
                  wc = detail::imin(detail::clamp0(out.vc, vc), vc);
    auto span = [](const D* p, int64_t rs, int64_t r, int64_t c, const D*& lo, const D*& hi) {
      lo = rs < 0 && r > 0 ? p + (r - 1) * rs : p;
      hi = r > 0 && c > 0 ? (rs < 0 ? p + c : p + (r - 1) * rs + c) : lo;
    };
    const D *olo, *ohi, *tlo, *thi;
    span(out.ptr, out.rs, wr, wc, olo, ohi);
    span(table.ptr, table.rs, detail::clamp0(table.vr, INT64_MAX), vc, tlo, thi);
    if (out.cs == 1 && table.cs == 1 && (ohi <= tlo || thi <= olo)) {
      for (int64_t r = 0; r < n; ++r) {
        const int64_t i = detail::index_at(idx, r);
        const bool ok = i >= 0 && i < table.vr;
        if (!ok) detail::report_index(args, "MGATHER", i, table.vr);
        if (r >= wr || wc == 0) continue;
        D* d = out.ptr + r * out.rs;
        if (!ok) {
          for (int64_t c = 0; c < wc; ++c) d[c] = D{};
        } else if constexpr (Stream) {
          detail::stream_bytes(reinterpret_cast<char*>(d),
                               reinterpret_cast<const char*>(table.ptr + i * table.rs),
                               wc * int64_t(sizeof(D)));
        } else {
          __builtin_memcpy(d, table.ptr + i * table.rs, size_t(wc) * sizeof(D));
        }
      }
      if constexpr (Stream) detail::stream_fence();
      rows.vr = int(n);
      rows.vc = int(vc);
      return;
    }
  }
  MGATHER(rows, table, idx, args);
  if constexpr (Stream)
    TSTORE(out, rows, kStream);
  else
    TSTORE(out, rows);
}

}  // namespace fused

}  // namespace pto
