// Elementwise chains over rows: TLOADs of N sources, one or more elementwise f32 instructions on
// whole R x C tiles (unary, tile-tile binary, binary with a scalar), and the TSTORE of the last
// one's result (src/backends/cpu/row_fusion_chain.cpp matches them). `x * y + 1`, `relu(x) + b`,
// `x * sigmoid(x)` as written run one instruction per pass over the tile, after a copy of each
// source into its tile: on a 4096^2 `x * y + 1` about twice the time of one pass over memory.
// Here each row is computed in blocks of up to 256 elements that stay in L1: the sources read in
// place, each instruction a loop over the block (its own functor, or its span form where it has
// one: TEXP, TGELU), the result streamed out (Stream) or copied to the destination row.
//
// The instructions run in their order, each element of each step rounded as the instruction
// rounds it (one loop per step, a compiler barrier between steps: no product is contracted with
// the next step's sum), so the results are the instructions' bit for bit. The tiles are not
// written (the matcher proved them dead after the store); each gets the valid region the
// instructions would give it.
#pragma once
#include <array>
#include <tuple>
#include <utility>

#include "pto/cpu/rows.hpp"

namespace pto {
namespace fused {

// The steps of a chain, on slots: 0 .. N-1 the sources, N .. the intermediate results (one per
// destination tile of the chain). Each step writes slot D.
template <class Op, int D, int A>
struct Unary {};  // slot D = op(slot A)
template <class Op, int D, int A, int B>
struct Binary {};  // slot D = op(slot A, slot B)
template <class Op, int D, int A, int S, bool Left>
struct Scalar {};  // slot D = op(slot A, scalar S), or op(scalar S, slot A) when Left

// A source tile filled before the run (chain_rows' (kFilled, tile) pairs).
struct Filled {};
constexpr Filled kFilled{};

// N sources, T intermediate slots, S scalars; the result is slot Out.
template <int N, int T, int S, int Out, class... Steps>
struct Chain {
  static constexpr int kSources = N, kTemps = T, kScalars = S, kOut = Out;
};

namespace detail {
using namespace pto::detail;
constexpr int64_t kChainBlock = 256;

template <class Op, int D, int A>
PTO_INLINE void chain_step(Unary<Op, D, A>, const float* const* in, float* const* tmp, const float*,
                           int64_t m, int n) {
  float* d = tmp[D - n];
  const float* a = A < n ? in[A] : tmp[A - n];
  if constexpr (has_span_form<Op>)
    span_form<Op>(d, a, m);
  else
    for (int64_t j = 0; j < m; ++j) d[j] = Op{}(a[j]);
}
template <class Op, int D, int A, int B>
PTO_INLINE void chain_step(Binary<Op, D, A, B>, const float* const* in, float* const* tmp, const float*,
                           int64_t m, int n) {
  float* d = tmp[D - n];
  const float* a = A < n ? in[A] : tmp[A - n];
  const float* b = B < n ? in[B] : tmp[B - n];
  for (int64_t j = 0; j < m; ++j) d[j] = Op{}(a[j], b[j]);
}
template <class Op, int D, int A, int S, bool Left>
PTO_INLINE void chain_step(Scalar<Op, D, A, S, Left>, const float* const* in, float* const* tmp,
                           const float* scalars, int64_t m, int n) {
  float* d = tmp[D - n];
  const float* a = A < n ? in[A] : tmp[A - n];
  const float s = scalars[S];
  if constexpr (Left)
    for (int64_t j = 0; j < m; ++j) d[j] = Op{}(s, a[j]);
  else
    for (int64_t j = 0; j < m; ++j) d[j] = Op{}(a[j], s);
}

PTO_INLINE void step_barrier() { __asm__ volatile("" ::: "memory"); }

// The chain on m <= kChainBlock elements: in[k] the sources' elements; returns the result's.
template <int N, int T, int S, int Out, class... Steps>
PTO_INLINE const float* chain_block(Chain<N, T, S, Out, Steps...>, const float* const* in,
                                    float (*tmp)[kChainBlock], const float* scalars, int64_t m) {
  float* t[T];
  for (int k = 0; k < T; ++k) t[k] = tmp[k];
  // The empty asm with a memory clobber between steps: without it, where the block is short enough
  // for GCC to unroll both loops, a step's stored result is forwarded into the next one and a
  // product contracted with the following sum into one FMA (one rounding instead of two).
  ((chain_step(Steps{}, in, t, scalars, m, N), step_barrier()), ...);
  return t[Out - N];
}

// How the chain reads a source: row r's elements at base + r * rs (rs 0: one row broadcast down
// the tile), or, splat, the one value base[r * rs] for the whole row (a column broadcast across);
// lim_r / lim_c: what its valid region leaves of the result's, as an elementwise instruction's
// operand (elementwise.hpp, Src).
struct ChainSource {
  const float* base = nullptr;
  int64_t rs = 0;
  bool splat = false;
  int64_t lim_r = 0, lim_c = 0;
};

// A source of Rs x Cs elements, valid vr x vc, at p with row stride rs, for an R x C result.
template <int R, int C, int Rs, int Cs>
PTO_INLINE ChainSource chain_source(const float* p, int64_t rs, int64_t vr, int64_t vc) {
  static_assert((Rs == R || Rs == 1) && (Cs == C || Cs == 1), "chain_rows: a source broadcasts or fits");
  constexpr bool bc_r = Rs == 1, bc_c = Cs == 1;  // (R == 1: the broadcast rule is the plain one)
  vr = clamp0(vr, Rs), vc = clamp0(vc, Cs);
  return {p, bc_r ? 0 : rs, bc_c, bc_r ? (vr > 0 ? R : 0) : vr, bc_c ? (vc > 0 ? C : 0) : vc};
}

// One row r: d[0, n) from the sources; Stream: by streaming stores.
template <bool Stream, class Ch>
PTO_INLINE void chain_row(Ch ch, float* d, const ChainSource* src, int64_t r, const float* scalars,
                          int64_t n) {
  constexpr int N = Ch::kSources;
  alignas(64) float tmp[Ch::kTemps][kChainBlock];
  alignas(64) float splat[N][kChainBlock];
  const float* row[N];
  for (int k = 0; k < N; ++k) {
    row[k] = src[k].base + r * src[k].rs;
    if (src[k].splat)  // this row's value, as many times as a block reads it
      for (int64_t j = 0, w = imin(n, kChainBlock); j < w; ++j) splat[k][j] = row[k][0];
  }
  const float* in[N];
  auto block = [&](int64_t at, int64_t m) {
    for (int k = 0; k < N; ++k) in[k] = src[k].splat ? splat[k] : row[k] + at;
    return chain_block(ch, in, tmp, scalars, m);
  };
  int64_t i = 0;
#ifdef PTO_VF16
  if constexpr (Stream) {
    const int64_t head = imin(n, int64_t((64 - (reinterpret_cast<uintptr_t>(d) & 63)) & 63) / 4);
    if (head > 0) __builtin_memcpy(d, block(0, head), size_t(head) * sizeof(float));
    for (i = head; i + 16 <= n;) {
      const int64_t m = imin(kChainBlock, (n - i) / 16 * 16);
      const float* v = block(i, m);
      for (int64_t j = 0; j < m; j += 16) store16<true>(d + i + j, vf16_load(v + j));
      i += m;
    }
  }
#endif
  for (; i < n; i += kChainBlock) {
    const int64_t m = imin(kChainBlock, n - i);
    __builtin_memcpy(d + i, block(i, m), size_t(m) * sizeof(float));
  }
}

// chain_rows' sources: (view, tile) for a source the run loads, (kFilled, tile) for a tile filled
// before it. Read in place: a row broadcast down the tile is read for every row, so its memory
// must not meet the output's at all (the rows written first would change what the later ones
// read); any other source as binary_rows' (the same rows, each read before it is written, or apart).
template <int R, int C, int Rs, int Cs>
PTO_INLINE bool readable_in_place(GlobalView<float> out, GlobalView<float> g, const Tile<float, Rs, Cs>&) {
  if (g.cs != 1 && Cs != 1) return false;
  if constexpr (Rs == 1 && R > 1)
    return disjoint(out, R, C, g, Rs, Cs);
  else
    return rowwise_safe(out, g, R, C);  // (a column: each row's value read as the row starts)
}
template <int R, int C, int Rs, int Cs>
PTO_INLINE bool readable_in_place(GlobalView<float>, Filled, const Tile<float, Rs, Cs>&) {
  return true;
}
// In place: the view's rows (the tile then says what the TLOAD would have); else the tile, loaded.
template <int R, int C, int Rs, int Cs>
PTO_INLINE ChainSource take_source(bool in_place, GlobalView<float> g, Tile<float, Rs, Cs>& t) {
  if (!in_place) {
    TLOAD(t, g);
    return chain_source<R, C, Rs, Cs>(t.data, Cs, t.vr, t.vc);
  }
  t.vr = int(clamp0(g.vr, Rs)), t.vc = int(clamp0(g.vc, Cs));  // y and t dead after (matcher)
  return chain_source<R, C, Rs, Cs>(g.ptr, g.rs, g.vr, g.vc);
}
template <int R, int C, int Rs, int Cs>
PTO_INLINE ChainSource take_source(bool, Filled, Tile<float, Rs, Cs>& t) {
  return chain_source<R, C, Rs, Cs>(t.data, Cs, t.vr, t.vc);
}
template <int R, int C, class Tuple, size_t... K>
PTO_INLINE bool sources_in_place(GlobalView<float> out, Tuple& all, std::index_sequence<K...>) {
  return (readable_in_place<R, C>(out, std::get<2 * K>(all), std::get<2 * K + 1>(all)) && ...);
}
template <int R, int C, class Tuple, size_t... K>
PTO_INLINE void take_sources(bool in_place, Tuple& all, ChainSource* s, std::index_sequence<K...>) {
  ((s[K] = take_source<R, C>(in_place, std::get<2 * K>(all), std::get<2 * K + 1>(all))), ...);
}
template <int N, class Tuple, size_t... K>
PTO_INLINE void take_scalars(Tuple& all, float* s, std::index_sequence<K...>) {
  ((s[K] = float(std::get<2 * N + K>(all))), ...);
}
}  // namespace detail

// TLOAD t_k, g_k for the sources the run loads; the chain's instructions; TSTORE out, y. `rest` is
// one pair per source, (g_k, t_k) or (kFilled, t_k) for a tile filled before the run (a bias row
// loaded outside the loop), then the chain's S scalars. A source tile is R x C, 1 x C (a row
// broadcast down) or R x 1 (a column broadcast across). Row by row from and to global memory where
// the views allow it (unit column strides; out and each loaded source the same rows or disjoint,
// as binary_rows); otherwise the TLOADs, the chain over the tiles' rows into y, the TSTORE.
template <bool Stream, int R, int C, class Ch, class... Rest>
inline void chain_rows(GlobalView<float> out, Tile<float, R, C>& y, Ch ch, Rest&&... rest) {
  static_assert(C > 1, "chain_rows: a 1-column tile would broadcast");
  constexpr int N = Ch::kSources, S = Ch::kScalars;
  static_assert(sizeof...(Rest) == size_t(2 * N + S),
                "chain_rows: N sources (two arguments each), S scalars");
  auto all = std::forward_as_tuple(rest...);
  float scalars[S > 0 ? S : 1];
  detail::take_scalars<N>(all, scalars, std::make_index_sequence<S>{});
  const bool in_place =
      out.cs == 1 && detail::sources_in_place<R, C>(out, all, std::make_index_sequence<N>{});
  detail::ChainSource src[N];
  detail::take_sources<R, C>(in_place, all, src, std::make_index_sequence<N>{});
  using pto::detail::clamp0;
  using pto::detail::imin;
  int64_t vr = R, vc = C;
  for (int k = 0; k < N; ++k) vr = imin(vr, src[k].lim_r), vc = imin(vc, src[k].lim_c);
  if (!in_place) {
    for (int64_t r = 0; r < vr; ++r) detail::chain_row<false>(ch, y.data + r * C, src, r, scalars, vc);
    y.vr = int(vr), y.vc = int(vc);
    return detail::store_result<Stream>(out, y);
  }
  const int64_t wr = imin(clamp0(out.vr, R), vr), wc = imin(clamp0(out.vc, C), vc);
  for (int64_t r = 0; r < wr; ++r) detail::chain_row<Stream>(ch, out.ptr + r * out.rs, src, r, scalars, wc);
  if constexpr (Stream) pto::detail::stream_fence();
  y.vr = int(vr), y.vc = int(vc);  // y is not written: dead after the store (matcher)
}

}  // namespace fused
}  // namespace pto
