// Fused row sequences: what code generation emits for the instruction runs of a row softmax and
// of a layer / RMS norm (src/backends/cpu/row_fusion.cpp matches them). Each function computes,
// row by row, what its instruction sequence computes, in two or three passes over the row instead
// of one pass per instruction: the row (16 KiB at 4096 floats) stays in L1 between them.
//
// Same element functions, the same roundings and the same summation order as TROWSUM
// (reduce_span's 32 lanes combined pairwise), so the results are the sequence's bit for bit. The tiles the
// matcher proved dead after the sequence (the squares a norm sums) are not written; every other tile of the
// sequence is, with the valid region the sequence would give it. Operands: full tiles R x C, per-row scalars
// R x 1.
#pragma once
#include "pto/cpu/elementwise.hpp"
#include "pto/cpu/memory.hpp"
#include "pto/cpu/reduce.hpp"
#include "pto/cpu/types.hpp"
#include "pto/cpu/vexp.hpp"

namespace pto {
namespace fused {
namespace detail {
using namespace pto::detail;

// Combines 32 lane sums and a tail exactly as reduce_span<float, SumR> does.
PTO_INLINE float combine32(float* acc, float tail) {
  for (int w = 16; w >= 1; w /= 2)
    for (int j = 0; j < w; ++j) acc[j] = elem::add(acc[j], acc[j + w]);
  return elem::add(acc[0], tail);
}

// Asks for the cache line of next[i] (next: the row the call reads after this one, or nullptr), so
// that memory streams it in while this row is computed in L1: without it the memory system idles
// during the compute passes and the hardware prefetcher restarts at each row.
PTO_INLINE void prefetch_next(const float* next, int64_t i) {
  if (next) __builtin_prefetch(next + i, 0, 2);  // into L2: the row in hand fills L1
}

// The scores' scale a softmax may start with (TMUL x, x, f or TDIV x, x, d): y = x * f or x / d,
// rounded before anything else uses it (the empty asm: no FMA with the next subtraction).
struct NoScale {
  PTO_INLINE float operator()(float x) const { return x; }
#ifdef PTO_VF16
  PTO_INLINE vf16 operator()(vf16 x) const { return x; }
#endif
};
struct ScaleMul {
  float f;
  PTO_INLINE float plain(float x) const { return elem::mul(x, f); }  // where no sum follows (a max)
  PTO_INLINE float operator()(float x) const { return rounded(elem::mul(x, f)); }
#ifdef PTO_VF16
  PTO_INLINE vf16 operator()(vf16 x) const { return vf16_rounded(x * f); }
#endif
};
struct ScaleDiv {
  float d;
  PTO_INLINE float plain(float x) const { return elem::div(x, d); }
  PTO_INLINE float operator()(float x) const { return elem::div(x, d); }
#ifdef PTO_VF16
  PTO_INLINE vf16 operator()(vf16 x) const { return x / d; }
#endif
};

// d[i] = exp(y[i] - m), y = scale(s); returns the sum of d in TROWSUM's order.
template <class Scale = NoScale>
PTO_INLINE float exp_sub_sum(float* d, const float* s, int64_t n, float m, const float* next, Scale sc = {}) {
  float acc[32];
  for (float& a : acc) a = 0.0f;
  int64_t i = 0;
#ifdef PTO_VF16
  vf16 a0 = {}, a1 = {};
  const vf16 mv = vf16_splat(m);
  for (; i + 32 <= n; i += 32) {
    prefetch_next(next, i);
    prefetch_next(next, i + 16);
    const vf16 e0 = vexp16(sc(vf16_load(s + i)) - mv), e1 = vexp16(sc(vf16_load(s + i + 16)) - mv);
    vf16_store(d + i, e0);
    vf16_store(d + i + 16, e1);
    a0 += e0;
    a1 += e1;
  }
  vf16_store(acc, a0);
  vf16_store(acc + 16, a1);
#else
  for (; i + 32 <= n; i += 32)
    for (int j = 0; j < 32; ++j) {
      d[i + j] = elem::exp(elem::sub(sc(s[i + j]), m));
      acc[j] = elem::add(acc[j], d[i + j]);
    }
#endif
  float tail = 0.0f;
  for (; i < n; ++i) {
    d[i] = elem::exp(elem::sub(sc(s[i]), m));
    tail = elem::add(tail, d[i]);
  }
  return combine32(acc, tail);
}

// The row maximum of scale(s) in TROWMAX's order (reduce_span's lanes and combining steps).
template <class Scale>
PTO_INLINE float max_scaled(const float* s, int64_t n, Scale sc) {
  constexpr int L = 32;
  float acc[L];
  for (float& a : acc) a = MaxR<float>::init();
  const int64_t nb = n / L * L;
#if defined(PTO_VF16) && defined(__AVX512F__)
  // 32 lanes in two registers: OpMax's rule, the accumulator kept where it is greater or NaN (with
  // AVX2 GCC would take these 16-lane selects apart; the loop below vectorises there).
  vf16 a0 = vf16_load(acc), a1 = vf16_load(acc + 16);
  for (int64_t i = 0; i < nb; i += L) {
    const vf16 v0 = sc(vf16_load(s + i)), v1 = sc(vf16_load(s + i + 16));
    a0 = (a0 > v0 || a0 != a0) ? a0 : v0;
    a1 = (a1 > v1 || a1 != a1) ? a1 : v1;
  }
  vf16_store(acc, a0);
  vf16_store(acc + 16, a1);
#else
  for (int64_t i = 0; i < nb; i += L)
    for (int j = 0; j < L; ++j) acc[j] = MaxR<float>{}(acc[j], sc.plain(s[i + j]));
#endif
  float tail = MaxR<float>::init();
  for (int64_t i = nb; i < n; ++i) tail = MaxR<float>{}(tail, sc.plain(s[i]));
  for (int w = L / 2; w >= 1; w /= 2)
    for (int j = 0; j < w; ++j) acc[j] = MaxR<float>{}(acc[j], acc[j + w]);
  return MaxR<float>{}(acc[0], tail);
}

// The element a norm centres: s[i] - c0, then - c1 when Two (a layer norm's shift, then the mean
// of the shifted row); s[i] itself when c0 is 0 and not Two (x - 0 == x, NaN and -0 included).
template <bool Two>
PTO_INLINE float centred(float s, float c0, float c1) {
  const float v = elem::sub(s, c0);
  return Two ? elem::sub(v, c1) : v;
}
#ifdef PTO_VF16
template <bool Two>
PTO_INLINE vf16 centred16(const float* s, vf16 c0, vf16 c1) {
  const vf16 v = vf16_load(s) - c0;
  return Two ? v - c1 : v;
}
#endif

// Sum of s[i] - c in TROWSUM's order.
PTO_INLINE float sum_diff(const float* s, int64_t n, float c) {
  float acc[32];
  for (float& a : acc) a = 0.0f;
  int64_t i = 0;
#ifdef PTO_VF16
  vf16 a0 = {}, a1 = {};
  const vf16 cv = vf16_splat(c);
  for (; i + 32 <= n; i += 32) {
    a0 += vf16_load(s + i) - cv;
    a1 += vf16_load(s + i + 16) - cv;
  }
  vf16_store(acc, a0);
  vf16_store(acc + 16, a1);
#else
  for (; i + 32 <= n; i += 32)
    for (int j = 0; j < 32; ++j) acc[j] = elem::add(acc[j], elem::sub(s[i + j], c));
#endif
  float tail = 0.0f;
  for (; i < n; ++i) tail = elem::add(tail, elem::sub(s[i], c));
  return combine32(acc, tail);
}

// Sum of centred(s[i])^2 in TROWSUM's order.
template <bool Two>
PTO_INLINE float sum_sq_diff(const float* s, int64_t n, float c0, float c1, const float* next) {
  float acc[32];
  for (float& a : acc) a = 0.0f;
  int64_t i = 0;
#ifdef PTO_VF16
  vf16 a0 = {}, a1 = {};
  const vf16 cv0 = vf16_splat(c0), cv1 = vf16_splat(c1);
  for (; i + 32 <= n; i += 32) {
    prefetch_next(next, i);
    prefetch_next(next, i + 16);
    const vf16 v0 = centred16<Two>(s + i, cv0, cv1), v1 = centred16<Two>(s + i + 16, cv0, cv1);
    a0 += vf16_rounded(v0 * v0);
    a1 += vf16_rounded(v1 * v1);
  }
  vf16_store(acc, a0);
  vf16_store(acc + 16, a1);
#else
  for (; i + 32 <= n; i += 32)
    for (int j = 0; j < 32; ++j) {
      const float v = centred<Two>(s[i + j], c0, c1);
      acc[j] = elem::add(acc[j], rounded(elem::mul(v, v)));
    }
#endif
  float tail = 0.0f;
  for (; i < n; ++i) {
    const float v = centred<Two>(s[i], c0, c1);
    tail = elem::add(tail, rounded(elem::mul(v, v)));
  }
  return combine32(acc, tail);
}

// Stores 16 lanes at d; NT: a streaming store (d 64-byte aligned), for an output much bigger than
// the last-level cache (the caller fences once after its rows).
#ifdef PTO_VF16
template <bool NT>
PTO_INLINE void store16(float* d, vf16 v) {
  if constexpr (NT) {
#if defined(__AVX512F__)
    __builtin_ia32_movntps512(d, v);
#else
    __builtin_ia32_movntps256(d, vf16_lo(v));
    __builtin_ia32_movntps256(d + 8, vf16_hi(v));
#endif
  } else
    vf16_store(d, v);
}
#endif

// d[i] = (centred(s[i]) * r) [* w[i]] [+ b[i]]; NT: by streaming stores (d may be s).
template <bool Two, bool W, bool B, bool NT>
PTO_INLINE void normalize_span_wb(float* d, const float* s, int64_t n, float c0, float c1, float r,
                                  const float* w, const float* b, const float* next = nullptr) {
  auto one = [&](int64_t i) {
    float v = elem::mul(centred<Two>(s[i], c0, c1), r);
    if (W) v = elem::mul(v, w[i]);
    if (B) v = elem::add(rounded(v), b[i]);
    d[i] = v;
  };
  int64_t i = 0;
#ifdef PTO_VF16
  if constexpr (NT)  // up to d's first 64-byte boundary one by one: same values as the lanes
    for (; i < n && (reinterpret_cast<uintptr_t>(d + i) & 63) != 0; ++i) one(i);
  const vf16 cv0 = vf16_splat(c0), cv1 = vf16_splat(c1), rv = vf16_splat(r);
  for (; i + 16 <= n; i += 16) {
    prefetch_next(next, i);
    vf16 v = centred16<Two>(s + i, cv0, cv1) * rv;
    if (W) v = v * vf16_load(w + i);
    if (B) v = vf16_rounded(v) + vf16_load(b + i);
    store16<NT>(d + i, v);
  }
#endif
  for (; i < n; ++i) one(i);
}
template <bool Two, bool NT>
PTO_INLINE void normalize_span(float* d, const float* s, int64_t n, float c0, float c1, float r,
                               const float* w, const float* b, const float* next = nullptr) {
  if (w && b)
    normalize_span_wb<Two, true, true, NT>(d, s, n, c0, c1, r, w, b, next);
  else if (w)
    normalize_span_wb<Two, true, false, NT>(d, s, n, c0, c1, r, w, b, next);
  else if (b)
    normalize_span_wb<Two, false, true, NT>(d, s, n, c0, c1, r, w, b, next);
  else
    normalize_span_wb<Two, false, false, NT>(d, s, n, c0, c1, r, w, b, next);
}

// How a row function writes its result row: NT, by streaming stores only (its final values,
// once); next, the row read after this one (prefetch_next), or nullptr.
template <bool NT>
struct Streaming {
  static constexpr bool value = NT;
  const float* next = nullptr;
};

// One row of each sequence: d (the result row) from x, through tmp (a scratch row, or d itself)
// where the sequence needs its intermediate. Per-row scalars through the pointers.
template <bool NT, class Scale = NoScale>
PTO_INLINE void softmax_row(Streaming<NT> how, float* d, float* tmp, const float* x, int64_t n, float* m,
                            float* s, Scale sc = {}) {
  float mr;
  if constexpr (std::is_same_v<Scale, NoScale>)
    mr = reduce_span<float>(x, n, MaxR<float>{});
  else
    mr = max_scaled(x, n, sc);
  const float inv = elem::recip(exp_sub_sum(tmp, x, n, mr, how.next, sc));
  normalize_span_wb<false, false, false, NT>(d, tmp, n, 0.0f, 0.0f, inv, nullptr,
                                             nullptr);  // e * inv (e - 0 == e)
  *m = mr;
  *s = inv;
}
// Its prefetch goes in the second pass: the first already reads the row from memory (idle
// machine, 2 threads, 4096 x 4096, ABBA A/B of wall-time medians: 0.84-0.90 against the first
// pass; softmax and layer norm were 1.5x / 1.0-1.07x slower with theirs in the last pass).
template <bool NT>
PTO_INLINE void rms_norm_row(Streaming<NT> how, float* z, float*, const float* x, int64_t n, float cnt,
                             float eps, const float* w, const float* b, float* r) {
  const float inv =
      elem::rsqrt(elem::add(elem::div(sum_sq_diff<false>(x, n, 0.0f, 0.0f, nullptr), cnt), eps));
  normalize_span<false, NT>(z, x, n, 0.0f, 0.0f, inv, w, b, how.next);
  *r = inv;
}
// The layer norm's shift c (the row's first element, lower_composites.cpp `centred`): its mean is
// that of x - c, and the row is centred as (x - c) - mean.
template <bool NT>
PTO_INLINE void layer_norm_row(Streaming<NT> how, float* z, float*, const float* x, int64_t n, float c,
                               float cnt, float cnt2, float eps, const float* w, const float* b, float* mu,
                               float* r) {
  const float mean = elem::div(sum_diff(x, n, c), cnt);
  const float inv = elem::rsqrt(elem::add(elem::div(sum_sq_diff<true>(x, n, c, mean, how.next), cnt2), eps));
  normalize_span<true, NT>(z, x, n, c, mean, inv, w, b);
  *mu = mean;
  *r = inv;
}

#ifdef PTO_VF16
// Streams d[i, n) out (d + i 64-byte aligned) in blocks of up to 256 that fill(v, at, m) computes
// into L1 first, by a plain loop that vectorises (16 lanes through a temporary each left relu's
// and max's NaN rules scalar: 4096^2 relu 6.4 -> 3.5 ms on 2 Zen 4 cores); returns where the
// tail (fewer than 16) starts.
template <class Fill>
PTO_INLINE int64_t stream_blocks(float* d, int64_t i, int64_t n, Fill fill) {
  constexpr int64_t kB = 256;
  alignas(64) float v[kB];
  while (i + 16 <= n) {
    const int64_t m = n - i < kB ? (n - i) / 16 * 16 : kB;
    fill(v, i, m);
    for (int64_t j = 0; j < m; j += 16) store16<true>(d + i + j, vf16_load(v + j));
    i += m;
  }
  return i;
}
#endif

// d[i] = op(a[i], b[i]); NT: by streaming stores (d may be a or b).
template <bool NT, class Op>
PTO_INLINE void binary_span(float* d, const float* a, const float* b, int64_t n, Op op) {
  int64_t i = 0;
#ifdef PTO_VF16
  if constexpr (NT) {
    for (; i < n && (reinterpret_cast<uintptr_t>(d + i) & 63) != 0; ++i) d[i] = op(a[i], b[i]);
    // 16 lanes in a register, streamed out: the four arithmetic operators on vectors are their
    // elem:: functions on each lane (IEEE); the others (max / min's NaN rule) lane by lane.
    using pto::detail::OpAdd, pto::detail::OpSub, pto::detail::OpMul, pto::detail::OpDiv;
    constexpr bool kVec = std::is_same_v<Op, OpAdd> || std::is_same_v<Op, OpSub> ||
                          std::is_same_v<Op, OpMul> || std::is_same_v<Op, OpDiv>;
    if constexpr (kVec) {
      for (; i + 16 <= n; i += 16) store16<true>(d + i, op(vf16_load(a + i), vf16_load(b + i)));
    } else {
      i = stream_blocks(d, i, n, [&](float* v, int64_t at, int64_t m) {
        for (int64_t j = 0; j < m; ++j) v[j] = op(a[at + j], b[at + j]);
      });
    }
  }
#endif
  for (; i < n; ++i) d[i] = op(a[i], b[i]);
}

// TSTORE out, y as the run wrote it (Stream: by streaming stores).
template <bool Stream, int R, int C>
PTO_INLINE void store_result(GlobalView<float> out, const Tile<float, R, C>& y) {
  if constexpr (Stream)
    TSTORE(out, y, kStream);
  else
    TSTORE(out, y);
}

// d[i] = f(a[i]); NT: by streaming stores (d may be a). f: one element, the instruction's own
// functor (elementwise.hpp), so the results are the instruction's.
template <bool NT, class F>
PTO_INLINE void map_span(float* d, const float* a, int64_t n, F f) {
  int64_t i = 0;
#ifdef PTO_VF16
  if constexpr (NT) {
    for (; i < n && (reinterpret_cast<uintptr_t>(d + i) & 63) != 0; ++i) d[i] = f(a[i]);
    i = stream_blocks(d, i, n, [&](float* v, int64_t at, int64_t m) {
      if constexpr (has_span_form<F>)
        span_form<F>(v, a + at, m);  // the instruction's own vector form (TEXP, TGELU)
      else
        for (int64_t j = 0; j < m; ++j) v[j] = f(a[at + j]);
    });
  } else if constexpr (has_span_form<F>) {
    span_form<F>(d, a, n);
    return;
  }
#endif
  for (; i < n; ++i) d[i] = f(a[i]);
}

// Runs row(Streaming<false>{}, dst_row, dst_row, src_row, n, r) over x's valid rows; sets the
// valid regions the sequence gives its result z and its per-row scalars.
template <int R, int C, class Row, class... S>
PTO_INLINE void tile_rows(Tile<float, R, C>& z, const Tile<float, R, C>& x, Row row, S&... per_row) {
  const int64_t vr = clamp0(x.vr, R), vc = clamp0(x.vc, C);
  for (int64_t r = 0; r < vr; ++r)
    row(Streaming<false>{}, z.data + r * C, z.data + r * C, x.data + r * C, vc, r);
  ((per_row.vr = int(vr), per_row.vc = 1), ...);
  z.vr = int(vr);
  z.vc = int(vc);
}

// Whether the memory spans of out (up to R x C) and of in (up to Ri x Ci) do not meet (unit column
// strides, or one column).
PTO_INLINE bool disjoint(GlobalView<float> out, int64_t R, int64_t C, GlobalView<float> in, int64_t Ri,
                         int64_t Ci) {
  auto span = [](const GlobalView<float>& v, int64_t Rv, int64_t Cv, const float*& lo, const float*& hi) {
    const int64_t rows = clamp0(v.vr, Rv), cols = clamp0(v.vc, Cv);
    lo = v.ptr;
    hi = v.ptr + (rows > 0 && cols > 0 ? (rows - 1) * v.rs + cols : 0);
    if (v.rs < 0) lo = v.ptr + (rows - 1) * v.rs, hi = v.ptr + cols;
  };
  const float *olo, *ohi, *ilo, *ihi;
  span(out, R, C, olo, ohi);
  span(in, Ri, Ci, ilo, ihi);
  return ohi <= ilo || ihi <= olo;
}
// Whether writing row r of `out` before reading row r + 1 of `in` reads what the TLOAD would
// have: the views are the same rows, or their spans of memory do not meet.
PTO_INLINE bool rowwise_safe(GlobalView<float> out, GlobalView<float> in, int64_t R, int64_t C) {
  return (out.ptr == in.ptr && out.rs == in.rs) || disjoint(out, R, C, in, R, C);
}

// TLOAD x, in; <the sequence: z from x>; TSTORE out, z — with the rows read from `in` and written
// straight to `out` where both views have unit column stride: no copy of the whole tile in or
// out, each row's passes stay in L1, and the result is written once (Stream: by streaming
// stores). The tiles are then one row of scratch (the matcher proved x and z dead after the
// store). Otherwise the three steps as written.
template <bool Stream, int R, int C, class Row, class... S>
PTO_INLINE void global_rows(GlobalView<float> out, GlobalView<float> in, Tile<float, R, C>& x,
                            Tile<float, R, C>& z, Row row, S&... per_row) {
  if (in.cs != 1 || out.cs != 1 || !rowwise_safe(out, in, R, C)) {
    TLOAD(x, in);
    tile_rows(z, x, row, per_row...);
    if constexpr (Stream)
      TSTORE(out, z, kStream);
    else
      TSTORE(out, z);
    return;
  }
  const int64_t vr = clamp0(in.vr, R), vc = clamp0(in.vc, C);
  const int64_t wr = imin(clamp0(out.vr, R), vr), wc = imin(clamp0(out.vc, C), vc);
  float* const tmp = z.data;  // one row, reused: stays in L1
  for (int64_t r = 0; r < vr; ++r) {
    const float* xr = in.ptr + r * in.rs;
    if (r < wr && wc == vc) {
      // Two rows ahead, also past this block (the parallel loop's next one; a prefetch never
      // faults): nearer rows are already on their way, farther ones were slower (A/B, 1 thread).
      const auto next =
          reinterpret_cast<const float*>(reinterpret_cast<uintptr_t>(xr) + uintptr_t(2 * in.rs * 4));
      row(Streaming<Stream>{next}, out.ptr + r * out.rs, tmp, xr, vc, r);
      continue;
    }
    row(Streaming<false>{}, tmp, tmp, xr, vc, r);  // a row (or the part of it) the store leaves out
    if (r < wr && wc > 0) __builtin_memcpy(out.ptr + r * out.rs, tmp, size_t(wc) * sizeof(float));
  }
  if constexpr (Stream) stream_fence();
  ((per_row.vr = int(vr), per_row.vc = 1), ...);
  x.vr = z.vr = int(vr);
  x.vc = z.vc = int(vc);
}

}  // namespace detail

// TLOAD t, v for a row operand (a weight) that only a fused call reads: the row in place where v
// is one unit-stride f32 row of at least C elements (t is then not written: code generation
// proved it dead after the call), else loaded into t. Returns where the call reads the row.
template <class U, int C>
inline const float* row_data(GlobalView<U> v, Tile<float, 1, C>& t) {
  if constexpr (std::is_same_v<U, float>)
    if (v.cs == 1 && v.vr >= 1 && v.vc >= C) return v.ptr;
  TLOAD(t, v);
  return t.data;
}

// TROWMAX m, x; TSUB e, x, m; TEXP e, e; TROWSUM s, e; TRECIP s, s; TMUL e, e, s.
template <int R, int C>
inline void softmax_rows(Tile<float, R, C>& e, const Tile<float, R, C>& x, Tile<float, R, 1>& m,
                         Tile<float, R, 1>& s) {
  detail::tile_rows(
      e, x,
      [&](auto nt, float* d, float* tmp, const float* xr, int64_t n, int64_t r) {
        detail::softmax_row(nt, d, tmp, xr, n, &m.data[r], &s.data[r]);
      },
      m, s);
}
// TLOAD x, in; the softmax sequence; TSTORE out, e.
template <bool Stream, int R, int C>
inline void softmax_rows(GlobalView<float> out, GlobalView<float> in, Tile<float, R, C>& x,
                         Tile<float, R, C>& e, Tile<float, R, 1>& m, Tile<float, R, 1>& s) {
  detail::global_rows<Stream>(
      out, in, x, e,
      [&](auto nt, float* d, float* tmp, const float* xr, int64_t n, int64_t r) {
        detail::softmax_row(nt, d, tmp, xr, n, &m.data[r], &s.data[r]);
      },
      m, s);
}

// The softmax sequence after the scores' scale, TMUL e, x, f (mul_softmax_rows) or TDIV e, x, d
// (div_softmax_rows): the scale applied as each pass reads the row (the row maximum of the scaled
// values, then exp(scaled - max)), not a pass of its own. A division by a power of two is the
// multiplication by its reciprocal (the same real value, rounded once: the same bits).
namespace detail {
PTO_INLINE bool exact_reciprocal(float d) {
  const uint32_t b = bit_cast<uint32_t>(d), e = (b >> 23) & 0xff;
  return (b & 0x7fffff) == 0 && e >= 2 && e <= 252;  // 2^k with 2^-k normal too
}
template <class Rows>
PTO_INLINE void by_divisor(float d, Rows rows) {
  if (exact_reciprocal(d))
    rows(ScaleMul{1.0f / d});
  else
    rows(ScaleDiv{d});
}
}  // namespace detail
template <int R, int C>
inline void mul_softmax_rows(Tile<float, R, C>& e, const Tile<float, R, C>& x, Tile<float, R, 1>& m,
                             Tile<float, R, 1>& s, float f) {
  detail::tile_rows(
      e, x,
      [&](auto nt, float* d, float* tmp, const float* xr, int64_t n, int64_t r) {
        detail::softmax_row(nt, d, tmp, xr, n, &m.data[r], &s.data[r], detail::ScaleMul{f});
      },
      m, s);
}
template <bool Stream, int R, int C>
inline void mul_softmax_rows(GlobalView<float> out, GlobalView<float> in, Tile<float, R, C>& x,
                             Tile<float, R, C>& e, Tile<float, R, 1>& m, Tile<float, R, 1>& s, float f) {
  detail::global_rows<Stream>(
      out, in, x, e,
      [&](auto nt, float* d, float* tmp, const float* xr, int64_t n, int64_t r) {
        detail::softmax_row(nt, d, tmp, xr, n, &m.data[r], &s.data[r], detail::ScaleMul{f});
      },
      m, s);
}
template <int R, int C>
inline void div_softmax_rows(Tile<float, R, C>& e, const Tile<float, R, C>& x, Tile<float, R, 1>& m,
                             Tile<float, R, 1>& s, float dv) {
  detail::by_divisor(dv, [&](auto sc) {
    detail::tile_rows(
        e, x,
        [&](auto nt, float* d, float* tmp, const float* xr, int64_t n, int64_t r) {
          detail::softmax_row(nt, d, tmp, xr, n, &m.data[r], &s.data[r], sc);
        },
        m, s);
  });
}
template <bool Stream, int R, int C>
inline void div_softmax_rows(GlobalView<float> out, GlobalView<float> in, Tile<float, R, C>& x,
                             Tile<float, R, C>& e, Tile<float, R, 1>& m, Tile<float, R, 1>& s, float dv) {
  detail::by_divisor(dv, [&](auto sc) {
    detail::global_rows<Stream>(
        out, in, x, e,
        [&](auto nt, float* d, float* tmp, const float* xr, int64_t n, int64_t r) {
          detail::softmax_row(nt, d, tmp, xr, n, &m.data[r], &s.data[r], sc);
        },
        m, s);
  });
}

// TMUL (dead), x, x; TROWSUM r, (dead); TDIV r, r, cnt; TADD r, r, eps; TRSQRT r, r; TMUL z, x, r;
// then z = z * w and / or z = z + b where w / b (rows of 1 x C tiles) are given (nullptr: absent).
template <int R, int C>
inline void rms_norm_rows(Tile<float, R, C>& z, const Tile<float, R, C>& x, Tile<float, R, 1>& r, float cnt,
                          float eps, const float* w, const float* b) {
  detail::tile_rows(
      z, x,
      [&](auto nt, float* d, float* tmp, const float* xr, int64_t n, int64_t i) {
        detail::rms_norm_row(nt, d, tmp, xr, n, cnt, eps, w, b, &r.data[i]);
      },
      r);
}
template <bool Stream, int R, int C>
inline void rms_norm_rows(GlobalView<float> out, GlobalView<float> in, Tile<float, R, C>& x,
                          Tile<float, R, C>& z, Tile<float, R, 1>& r, float cnt, float eps, const float* w,
                          const float* b) {
  detail::global_rows<Stream>(
      out, in, x, z,
      [&](auto nt, float* d, float* tmp, const float* xr, int64_t n, int64_t i) {
        detail::rms_norm_row(nt, d, tmp, xr, n, cnt, eps, w, b, &r.data[i]);
      },
      r);
}

// TSUB z, x, c; TROWSUM mu, z; TDIV mu, mu, cnt; TSUB z, z, mu; TMUL (dead), z, z; TROWSUM r, (dead);
// TDIV r, r, cnt2; TADD r, r, eps; TRSQRT r, r; TMUL z, z, r; then the affine tail as above.
template <int R, int C>
inline void layer_norm_rows(Tile<float, R, C>& z, const Tile<float, R, C>& x, const Tile<float, R, 1>& c,
                            Tile<float, R, 1>& mu, Tile<float, R, 1>& r, float cnt, float cnt2, float eps,
                            const float* w, const float* b) {
  detail::tile_rows(
      z, x,
      [&](auto nt, float* d, float* tmp, const float* xr, int64_t n, int64_t i) {
        detail::layer_norm_row(nt, d, tmp, xr, n, c.data[i], cnt, cnt2, eps, w, b, &mu.data[i], &r.data[i]);
      },
      mu, r);
}
template <bool Stream, int R, int C>
inline void layer_norm_rows(GlobalView<float> out, GlobalView<float> in, Tile<float, R, C>& x,
                            Tile<float, R, C>& z, const Tile<float, R, 1>& c, Tile<float, R, 1>& mu,
                            Tile<float, R, 1>& r, float cnt, float cnt2, float eps, const float* w,
                            const float* b) {
  detail::global_rows<Stream>(
      out, in, x, z,
      [&](auto nt, float* d, float* tmp, const float* xr, int64_t n, int64_t i) {
        detail::layer_norm_row(nt, d, tmp, xr, n, c.data[i], cnt, cnt2, eps, w, b, &mu.data[i], &r.data[i]);
      },
      mu, r);
}

// TLOAD a, ga; TLOAD b, gb; <op> y, a, b; TSTORE out, y (R x C tiles, C > 1: no broadcast),
// row by row from and to global memory where the views allow it (as global_rows).
template <bool Stream, int R, int C, class Op>
inline void binary_rows(GlobalView<float> out, GlobalView<float> ga, GlobalView<float> gb,
                        Tile<float, R, C>& a, Tile<float, R, C>& b, Tile<float, R, C>& y, Op op) {
  static_assert(C > 1, "binary_rows: a 1-column tile would broadcast");
  if (ga.cs != 1 || gb.cs != 1 || out.cs != 1 || !detail::rowwise_safe(out, ga, R, C) ||
      !detail::rowwise_safe(out, gb, R, C)) {
    TLOAD(a, ga);
    TLOAD(b, gb);
    pto::detail::binary(y, a, b, op);
    return detail::store_result<Stream>(out, y);
  }
  using pto::detail::clamp0;
  const int64_t ar = clamp0(ga.vr, R), br = clamp0(gb.vr, R), ac = clamp0(ga.vc, C), bc = clamp0(gb.vc, C);
  const int64_t vr = R == 1 ? (ar > 0 && br > 0 ? 1 : 0) : pto::detail::imin(ar, br);
  const int64_t vc = pto::detail::imin(ac, bc);
  const int64_t wr = pto::detail::imin(clamp0(out.vr, R), vr), wc = pto::detail::imin(clamp0(out.vc, C), vc);
  for (int64_t r = 0; r < wr; ++r)
    detail::binary_span<Stream>(out.ptr + r * out.rs, ga.ptr + r * ga.rs, gb.ptr + r * gb.rs, wc, op);
  if constexpr (Stream) pto::detail::stream_fence();
  a.vr = int(ar), a.vc = int(ac), b.vr = int(br), b.vc = int(bc);  // as the TLOADs would say
  y.vr = int(vr), y.vc = int(vc);  // y is not written: dead after the store (matcher)
}

// An instruction's functor with its scalar operand bound: op(x, s), or op(s, x) when Left.
template <class Op, bool Left>
struct WithScalar {
  float s;
  PTO_INLINE float operator()(float x) const { return Left ? Op{}(s, x) : Op{}(x, s); }
};

// TLOAD a, ga; <op> y, a; TSTORE out, y (R x C tiles, C > 1): a unary instruction, or a binary
// one with a scalar operand (scalar_rows: 1 - x, x * 2), row by row from and to global memory
// where the views allow it (as binary_rows), each element through f; otherwise the TLOAD, the
// instruction as `as_written` computes it, and the TSTORE.
namespace detail {
template <bool Stream, int R, int C, class F, class W>
inline void map_rows(GlobalView<float> out, GlobalView<float> ga, Tile<float, R, C>& a, Tile<float, R, C>& y,
                     F f, W as_written) {
  static_assert(C > 1, "unary_rows: a 1-column tile would broadcast");
  if (ga.cs != 1 || out.cs != 1 || !rowwise_safe(out, ga, R, C)) {
    TLOAD(a, ga);
    as_written();
    return store_result<Stream>(out, y);
  }
  const int64_t vr = clamp0(ga.vr, R), vc = clamp0(ga.vc, C);
  const int64_t wr = imin(clamp0(out.vr, R), vr), wc = imin(clamp0(out.vc, C), vc);
  for (int64_t r = 0; r < wr; ++r) map_span<Stream>(out.ptr + r * out.rs, ga.ptr + r * ga.rs, wc, f);
  if constexpr (Stream) stream_fence();
  a.vr = int(vr), a.vc = int(vc);  // as the TLOAD would say
  y.vr = int(vr), y.vc = int(vc);  // y is not written: dead after the store (matcher)
}
}  // namespace detail
template <bool Stream, int R, int C, class Op>
inline void unary_rows(GlobalView<float> out, GlobalView<float> ga, Tile<float, R, C>& a,
                       Tile<float, R, C>& y, Op op) {
  detail::map_rows<Stream>(out, ga, a, y, op, [&] { pto::detail::unary(y, a, op); });
}
struct ScalarFirst {};   // scalar_rows: op(s, x)
struct ScalarSecond {};  // op(x, s)
template <bool Stream, int R, int C, class Op, class Side>
inline void scalar_rows(GlobalView<float> out, GlobalView<float> ga, Tile<float, R, C>& a,
                        Tile<float, R, C>& y, Op op, float s, Side) {
  constexpr bool kLeft = std::is_same_v<Side, ScalarFirst>;
  detail::map_rows<Stream>(out, ga, a, y, WithScalar<Op, kLeft>{s}, [&] {
    if constexpr (kLeft)
      pto::detail::binary(y, s, a, op);
    else
      pto::detail::binary(y, a, s, op);
  });
}

}  // namespace fused
}  // namespace pto
