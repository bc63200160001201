// Fused row sequences: what code generation emits for the instruction runs of a row softmax and
// of a layer / RMS norm (src/backends/cpu/row_fusion.cpp matches them). Each function computes,
// row by row, what its instruction sequence computes, in two or three passes over the row
// (pto/cpu/row_passes.hpp) instead of one pass per instruction: the row (16 KiB at 4096 floats)
// stays in L1 between them.
//
// Same element functions, the same roundings and the same summation order as TROWSUM
// (reduce_span's 32 lanes combined pairwise), so the results are the sequence's bit for bit. The tiles the
// matcher proved dead after the sequence (the squares a norm sums) are not written; every other tile of the
// sequence is, with the valid region the sequence would give it. Operands: full tiles R x C, per-row scalars
// R x 1.
#pragma once
#include <type_traits>
#include "pto/cpu/elementwise.hpp"
#include "pto/cpu/memory.hpp"
#include "pto/cpu/reduce.hpp"
#include "pto/cpu/row_passes.hpp"
#include "pto/cpu/types.hpp"
#include "pto/cpu/vexp.hpp"

namespace pto {
namespace fused {
namespace detail {
using namespace pto::detail;

// Where a sequence reads and writes its rows: row r of the result at out + r * ors, of the
// source at in + r * irs, n elements each; tmp: two scratch rows for an intermediate row (none:
// the result row holds it); ahead: the row the passes of row r prefetch is r + ahead (0: none).
struct RowsAt {
  float* out;
  int64_t ors;
  const float* in;
  int64_t irs;
  int64_t n;
  float* tmp[2];
  int64_t ahead;
  PTO_INLINE float* out_row(int64_t r) const { return out + r * ors; }
  PTO_INLINE const float* in_row(int64_t r) const { return in + r * irs; }
  PTO_INLINE float* tmp_row(int64_t r) const { return tmp[0] ? tmp[r & 1] : out_row(r); }
  // Past the source's rows too (a prefetch never faults): integer arithmetic, no pointer made.
  PTO_INLINE const float* next(int64_t r) const {
    if (ahead == 0) return nullptr;
    return reinterpret_cast<const float*>(reinterpret_cast<uintptr_t>(in) +
                                          uintptr_t((r + ahead) * irs * int64_t(sizeof(float))));
  }
};

// A row sequence (Seq below): first(r), the pass that reads row r of the source first, from
// memory; middle(r), a pass over it in L1 (where kMiddle); last(r), the pass that writes row r
// of the result. after_*(r, pass) take the per-row scalars from a finished pass.
//
// rows_serial runs each row's passes in turn. rows_piped overlaps rows: the last pass of row
// r - 1, the middle pass of row r and the first pass of row r + 1 share one loop, so the
// streaming stores of one row go out while the next rows are read and computed: without it the
// memory system idles during the passes that neither read nor write it. Each sequence says which
// it takes (kPiped), as measured on the bench's 4096 x 4096 kernels (2 threads, Zen 4): the layer
// norm piped, the softmax and RMS norm serial. Each pass computes the
// same bits either way; in place (out == in) row r - 1 is written once rows r, r + 1 only are
// still read. Its intermediate rows alternate between the two tmp rows.
template <class Seq>
PTO_INLINE void rows_serial(Seq& q, int64_t rows) {
  for (int64_t r = 0; r < rows; ++r) {
    auto f = q.first(r);
    run_passes(q.at.n, f);
    q.after_first(r, f);
    if constexpr (Seq::kMiddle) {
      auto m = q.middle(r);
      run_passes(q.at.n, m);
      q.after_middle(r, m);
    }
    auto l = q.last(r);
    run_passes(q.at.n, l);
  }
}
template <class Seq>
PTO_INLINE void rows_piped(Seq& q, int64_t rows) {
  const int64_t n = q.at.n;
  if (rows <= 0) return;
  auto f0 = q.first(0);
  run_passes(n, f0);
  q.after_first(0, f0);
  for (int64_t r = 0; r < rows; ++r) {
    auto with_next = [&](auto&... p) __attribute__((always_inline)) {  // + the first pass of r + 1
      if (r + 1 < rows) {
        auto f = q.first(r + 1);
        run_passes(n, p..., f);
        q.after_first(r + 1, f);
      } else {
        run_passes(n, p...);
      }
    };
    if constexpr (Seq::kMiddle) {
      auto m = q.middle(r);
      if (r == 0) {
        with_next(m);
      } else {
        auto l = q.last(r - 1);
        with_next(m, l);
      }
      q.after_middle(r, m);
    } else {
      auto l = q.last(r);
      with_next(l);
    }
  }
  if constexpr (Seq::kMiddle) {
    auto l = q.last(rows - 1);
    run_passes(n, l);
  }
}

// TROWMAX m, x; TSUB e, x, m; TEXP e, e; TROWSUM s, e; TRECIP s, s; TMUL e, e, s (x first scaled,
// when Scale is not NoScale: ScaleMul / ScaleDiv). e: the result; its rows pass through tmp.
template <bool NT, class Scale>
struct SoftmaxSeq {
  static constexpr bool kMiddle = true;
  // Rows in turn, not overlapped: 2-row tiles of the 4096 x 4096 softmax, both in one process,
  // 3.8 ms serial vs 4.9 ms piped (Zen 4, 2 threads); the exp pass keeps the core busy already.
  static constexpr bool kPiped = false;
  RowsAt at;
  Scale sc;
  float* m;
  float* s;
  PTO_INLINE MaxPass<Scale> first(int64_t r) const { return MaxPass<Scale>{at.in_row(r), at.n, sc}; }
  PTO_INLINE void after_first(int64_t r, const MaxPass<Scale>& p) { m[r] = p.result; }
  PTO_INLINE SumPass<ExpTerm<Scale>> middle(int64_t r) const {
    return SumPass<ExpTerm<Scale>>{{at.tmp_row(r), at.in_row(r), m[r], at.next(r), sc}, at.n};
  }
  PTO_INLINE void after_middle(int64_t r, const SumPass<ExpTerm<Scale>>& p) { s[r] = elem::recip(p.result); }
  PTO_INLINE NormalizePass<false, false, false, NT> last(int64_t r) const {  // e * inv (e - 0 == e)
    return NormalizePass<false, false, false, NT>{at.out_row(r), at.tmp_row(r), at.n,    0.0f,
                                                  0.0f,          s[r],          nullptr, nullptr};
  }
};

// TROWMAX m, x; TSUB y, x, m; TEXP (dead), y; TROWSUM s, (dead); TLOG s, s; TSUB y, y, s: the last
// pass stores ((x - m) - s) * 1 (exact: the two subtractions' bits).
template <bool NT>
struct LogSoftmaxSeq {
  static constexpr bool kMiddle = true;
  static constexpr bool kPiped = false;  // as SoftmaxSeq: the exp pass keeps the core busy
  RowsAt at;
  float* m;
  float* s;
  PTO_INLINE MaxPass<NoScale> first(int64_t r) const { return MaxPass<NoScale>{at.in_row(r), at.n, {}}; }
  PTO_INLINE void after_first(int64_t r, const MaxPass<NoScale>& p) { m[r] = p.result; }
  PTO_INLINE SumPass<ExpSumTerm> middle(int64_t r) const {
    return SumPass<ExpSumTerm>{{at.in_row(r), m[r], at.next(r)}, at.n};
  }
  PTO_INLINE void after_middle(int64_t r, const SumPass<ExpSumTerm>& p) { s[r] = elem::log(p.result); }
  PTO_INLINE NormalizePass<true, false, false, NT> last(int64_t r) const {
    return NormalizePass<true, false, false, NT>{at.out_row(r), at.in_row(r), at.n,    m[r],
                                                 s[r],          1.0f,         nullptr, nullptr};
  }
};

// TMUL (dead), x, x; TROWSUM r, (dead); TDIV r, r, cnt; TADD r, r, eps; TRSQRT r, r; TMUL z, x, r;
// then the affine tail (W: * w, B: + b). Its prefetch goes in the last pass: the first already
// reads the row from memory (idle machine, 2 threads, 4096 x 4096, ABBA A/B of wall-time medians:
// 0.84-0.90 against the first pass; softmax and layer norm were 1.5x / 1.0-1.07x slower with
// theirs in the last pass).
template <bool NT, bool W, bool B>
struct RmsNormSeq {
  static constexpr bool kMiddle = false;
  // Without a middle pass the loop of one row's stores and the next row's reads was 2-5% slower
  // than the two passes in turn (same A/B as rows_piped's).
  static constexpr bool kPiped = false;
  RowsAt at;
  float cnt, eps;
  const float* w;
  const float* b;
  float* rs;
  PTO_INLINE SumPass<SquareTerm<false>> first(int64_t r) const {
    return SumPass<SquareTerm<false>>{{at.in_row(r), 0.0f, 0.0f, nullptr}, at.n};
  }
  PTO_INLINE void after_first(int64_t r, const SumPass<SquareTerm<false>>& p) {
    rs[r] = elem::rsqrt(elem::add(elem::div(p.result, cnt), eps));
  }
  PTO_INLINE NormalizePass<false, W, B, NT> last(int64_t r) const {
    return NormalizePass<false, W, B, NT>{at.out_row(r), at.in_row(r), at.n, 0.0f, 0.0f, rs[r], w, b,
                                          at.next(r)};
  }
};

// TSUB z, x, c; TROWSUM mu, z; TDIV mu, mu, cnt; TSUB z, z, mu; TMUL (dead), z, z; TROWSUM r, (dead);
// TDIV r, r, cnt2; TADD r, r, eps; TRSQRT r, r; TMUL z, z, r; then the affine tail. The shift c
// (the row's first element, lower_composites.cpp `centred`): the mean is that of x - c, and the
// row is centred as (x - c) - mean.
template <bool NT, bool W, bool B>
struct LayerNormSeq {
  static constexpr bool kMiddle = true;
  static constexpr bool kPiped = true;  // (overlapped: 3.8 ms vs 4.8 ms serial, as SoftmaxSeq's A/B)
  RowsAt at;
  const float* c;
  float cnt, cnt2, eps;
  const float* w;
  const float* b;
  float* mu;
  float* rs;
  PTO_INLINE SumPass<DiffTerm> first(int64_t r) const {
    return SumPass<DiffTerm>{{at.in_row(r), c[r]}, at.n};
  }
  PTO_INLINE void after_first(int64_t r, const SumPass<DiffTerm>& p) { mu[r] = elem::div(p.result, cnt); }
  PTO_INLINE SumPass<SquareTerm<true>> middle(int64_t r) const {
    return SumPass<SquareTerm<true>>{{at.in_row(r), c[r], mu[r], at.next(r)}, at.n};
  }
  PTO_INLINE void after_middle(int64_t r, const SumPass<SquareTerm<true>>& p) {
    rs[r] = elem::rsqrt(elem::add(elem::div(p.result, cnt2), eps));
  }
  PTO_INLINE NormalizePass<true, W, B, NT> last(int64_t r) const {
    return NormalizePass<true, W, B, NT>{at.out_row(r), at.in_row(r), at.n, c[r], mu[r], rs[r], w, b};
  }
};

// k(W, B) with W, B as std::bool_constant: whether the weight / bias rows are given.
template <class K>
PTO_INLINE void with_affine(const float* w, const float* b, K k) {
  if (w && b)
    k(std::true_type{}, std::true_type{});
  else if (w)
    k(std::true_type{}, std::false_type{});
  else if (b)
    k(std::false_type{}, std::true_type{});
  else
    k(std::false_type{}, std::false_type{});
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

// Runs the sequence make(at, nt, k) gives k over x's valid rows (each row's passes in turn: the
// tile is in cache already); sets the valid regions the sequence gives its result z and its
// per-row scalars.
template <int R, int C, class Make, class... S>
PTO_INLINE void tile_rows(Tile<float, R, C>& z, const Tile<float, R, C>& x, Make make, S&... per_row) {
  const int64_t vr = clamp0(x.vr, R), vc = clamp0(x.vc, C);
  make(RowsAt{z.data, C, x.data, C, vc, {nullptr, nullptr}, 0}, std::false_type{},
       [&](auto& q) __attribute__((always_inline)) { rows_serial(q, vr); });
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
// straight to `out` where both views have unit column stride and the store writes every row the
// sequence computes: no copy of the whole tile in or out, each row's passes in L1, rows
// overlapped (rows_piped), and the result written once (Stream: by streaming stores). x and z are
// then two rows of scratch (the matcher proved them dead after the store). Otherwise the three
// steps as written.
template <bool Stream, int R, int C, class Make, class... S>
PTO_INLINE void global_rows(GlobalView<float> out, GlobalView<float> in, Tile<float, R, C>& x,
                            Tile<float, R, C>& z, Make make, S&... per_row) {
  const int64_t vr = clamp0(in.vr, R), vc = clamp0(in.vc, C);
  const int64_t wr = imin(clamp0(out.vr, R), vr), wc = imin(clamp0(out.vc, C), vc);
  // In place, rows that overlap one another would see the rows written before them.
  const bool rows_apart = out.ptr != in.ptr || in.rs >= vc || -in.rs >= vc;
  if (in.cs != 1 || out.cs != 1 || !rowwise_safe(out, in, R, C) || !rows_apart || wr != vr || wc != vc) {
    TLOAD(x, in);
    tile_rows(z, x, make, per_row...);
    if constexpr (Stream)
      TSTORE(out, z, kStream);
    else
      TSTORE(out, z);
    return;
  }
  // Prefetched two rows ahead, also past this block (the parallel loop's next one): nearer rows
  // are already on their way, farther ones were slower (A/B, 1 thread).
  make(RowsAt{out.ptr, out.rs, in.ptr, in.rs, vc, {z.data, x.data}, 2}, std::bool_constant<Stream>{},
       [&](auto& q) __attribute__((always_inline)) {
         if constexpr (std::decay_t<decltype(q)>::kPiped)
           rows_piped(q, vr);
         else
           rows_serial(q, vr);
       });
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
      [&](const detail::RowsAt& at, auto nt, auto k) {
        detail::SoftmaxSeq<decltype(nt)::value, detail::NoScale> q{at, {}, m.data, s.data};
        k(q);
      },
      m, s);
}
// TLOAD x, in; the softmax sequence; TSTORE out, e.
template <bool Stream, int R, int C>
inline void softmax_rows(GlobalView<float> out, GlobalView<float> in, Tile<float, R, C>& x,
                         Tile<float, R, C>& e, Tile<float, R, 1>& m, Tile<float, R, 1>& s) {
  detail::global_rows<Stream>(
      out, in, x, e,
      [&](const detail::RowsAt& at, auto nt, auto k) {
        detail::SoftmaxSeq<decltype(nt)::value, detail::NoScale> q{at, {}, m.data, s.data};
        k(q);
      },
      m, s);
}

// TROWMAX m, x; TSUB y, x, m; TEXP (dead), y; TROWSUM s, (dead); TLOG s, s; TSUB y, y, s.
template <int R, int C>
inline void log_softmax_rows(Tile<float, R, C>& y, const Tile<float, R, C>& x, Tile<float, R, 1>& m,
                             Tile<float, R, 1>& s) {
  detail::tile_rows(
      y, x,
      [&](const detail::RowsAt& at, auto nt, auto k) {
        detail::LogSoftmaxSeq<decltype(nt)::value> q{at, m.data, s.data};
        k(q);
      },
      m, s);
}
// TLOAD x, in; the log-softmax sequence; TSTORE out, y.
template <bool Stream, int R, int C>
inline void log_softmax_rows(GlobalView<float> out, GlobalView<float> in, Tile<float, R, C>& x,
                             Tile<float, R, C>& y, Tile<float, R, 1>& m, Tile<float, R, 1>& s) {
  detail::global_rows<Stream>(
      out, in, x, y,
      [&](const detail::RowsAt& at, auto nt, auto k) {
        detail::LogSoftmaxSeq<decltype(nt)::value> q{at, m.data, s.data};
        k(q);
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
      [&](const detail::RowsAt& at, auto nt, auto k) {
        detail::SoftmaxSeq<decltype(nt)::value, detail::ScaleMul> q{at, {f}, m.data, s.data};
        k(q);
      },
      m, s);
}
template <bool Stream, int R, int C>
inline void mul_softmax_rows(GlobalView<float> out, GlobalView<float> in, Tile<float, R, C>& x,
                             Tile<float, R, C>& e, Tile<float, R, 1>& m, Tile<float, R, 1>& s, float f) {
  detail::global_rows<Stream>(
      out, in, x, e,
      [&](const detail::RowsAt& at, auto nt, auto k) {
        detail::SoftmaxSeq<decltype(nt)::value, detail::ScaleMul> q{at, {f}, m.data, s.data};
        k(q);
      },
      m, s);
}
template <int R, int C>
inline void div_softmax_rows(Tile<float, R, C>& e, const Tile<float, R, C>& x, Tile<float, R, 1>& m,
                             Tile<float, R, 1>& s, float dv) {
  detail::by_divisor(dv, [&](auto sc) {
    detail::tile_rows(
        e, x,
        [&](const detail::RowsAt& at, auto nt, auto k) {
          detail::SoftmaxSeq<decltype(nt)::value, decltype(sc)> q{at, sc, m.data, s.data};
          k(q);
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
        [&](const detail::RowsAt& at, auto nt, auto k) {
          detail::SoftmaxSeq<decltype(nt)::value, decltype(sc)> q{at, sc, m.data, s.data};
          k(q);
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
      [&](const detail::RowsAt& at, auto nt, auto k) {
        detail::with_affine(w, b, [&](auto W, auto B) {
          detail::RmsNormSeq<decltype(nt)::value, W, B> q{at, cnt, eps, w, b, r.data};
          k(q);
        });
      },
      r);
}
template <bool Stream, int R, int C>
inline void rms_norm_rows(GlobalView<float> out, GlobalView<float> in, Tile<float, R, C>& x,
                          Tile<float, R, C>& z, Tile<float, R, 1>& r, float cnt, float eps, const float* w,
                          const float* b) {
  detail::global_rows<Stream>(
      out, in, x, z,
      [&](const detail::RowsAt& at, auto nt, auto k) {
        detail::with_affine(w, b, [&](auto W, auto B) {
          detail::RmsNormSeq<decltype(nt)::value, W, B> q{at, cnt, eps, w, b, r.data};
          k(q);
        });
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
      [&](const detail::RowsAt& at, auto nt, auto k) {
        detail::with_affine(w, b, [&](auto W, auto B) {
          detail::LayerNormSeq<decltype(nt)::value, W, B> q{at, c.data, cnt,     cnt2,  eps,
                                                            w,  b,      mu.data, r.data};
          k(q);
        });
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
      [&](const detail::RowsAt& at, auto nt, auto k) {
        detail::with_affine(w, b, [&](auto W, auto B) {
          detail::LayerNormSeq<decltype(nt)::value, W, B> q{at, c.data, cnt,     cnt2,  eps,
                                                            w,  b,      mu.data, r.data};
          k(q);
        });
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

namespace detail {
template <bool Max, class D, int RD, int CD, int R, int C, int RE, int CE>
inline void arg_extreme_rows(Tile<D, RD, CD>& dst, GlobalView<float> in, Tile<float, R, C>& x,
                             Tile<float, RE, CE>* ext) {
  if (in.cs != 1) {
    TLOAD(x, in);
    pto::detail::row_arg_extreme<Max>(dst, x);
    if (ext && Max) TROWMAX(*ext, x);
    if (ext && !Max) TROWMIN(*ext, x);
    return;
  }
  const int64_t vr = pto::detail::clamp0(in.vr, R), vc = pto::detail::clamp0(in.vc, C);
  const int64_t wr = pto::detail::imin(vr, RD);
  for (int64_t r = 0; r < wr; ++r) {
    float m;
    dst.data[r * CD] = D(pto::detail::arg_extreme_span<Max>(in.ptr + r * in.rs, vc, &m));
    if (ext && r < RE) ext->data[r * CE] = m;
  }
  dst.vr = int(wr);
  dst.vc = 1;
  if (ext) {
    ext->vr = int(pto::detail::imin(vr, RE));
    ext->vc = 1;
  }
  x.vr = int(vr);
  x.vc = int(vc);
}
}  // namespace detail

// TLOAD x, in; TROWSUM / TROWMAX / TROWMIN dst, x (Red: detail::SumR, MaxR, MinR), x dead after:
// each row reduced where it lies in memory instead of copied into x first (x.sum(-1), amax: the
// copy cost as much as the reduction). Same lanes and order as the instruction: the same bits. x
// is not written; it gets the valid region the TLOAD would give it.
template <template <class> class Red, class D, int RD, int CD, int R, int C>
inline void reduce_rows(Tile<D, RD, CD>& dst, GlobalView<float> in, Tile<float, R, C>& x) {
  if (in.cs != 1) {
    TLOAD(x, in);
    return pto::detail::row_reduce<Red>(dst, x);
  }
  using CT = promote_t<float, D>;
  const int64_t vr = pto::detail::clamp0(in.vr, R), vc = pto::detail::clamp0(in.vc, C);
  const int64_t wr = pto::detail::imin(vr, RD);
  for (int64_t r = 0; r < wr; ++r)
    dst.data[r * CD] = convert<D>(pto::detail::reduce_span<CT>(in.ptr + r * in.rs, vc, Red<CT>{}));
  dst.vr = int(wr);
  dst.vc = 1;
  x.vr = int(vr);
  x.vc = int(vc);
}

// TLOAD x, in; TROWARGMAX (Max) / TROWARGMIN dst, x, x dead after: as reduce_rows (x.argmax(-1)).
template <bool Max, class D, int RD, int CD, int R, int C>
inline void arg_extreme_rows(Tile<D, RD, CD>& dst, GlobalView<float> in, Tile<float, R, C>& x) {
  Tile<float, RD, 1>* no_extreme = nullptr;
  detail::arg_extreme_rows<Max>(dst, in, x, no_extreme);
}
// The same and TROWMAX (Max) / TROWMIN ext, x: a block of a row too wide for one tile (a dynamic
// width), whose extreme is combined with the other blocks'.
template <bool Max, class D, int RD, int CD, int R, int C, int RE, int CE>
inline void arg_extreme_rows(Tile<D, RD, CD>& dst, GlobalView<float> in, Tile<float, R, C>& x,
                             Tile<float, RE, CE>& ext) {
  detail::arg_extreme_rows<Max>(dst, in, x, &ext);
}

}  // namespace fused
}  // namespace pto
