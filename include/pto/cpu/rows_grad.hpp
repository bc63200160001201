// The layer norm's backward, row by row: what code generation emits for the instruction run that
// autodiff derives for the input gradient of layer_norm(x, w, b) after the forward's statistics
// (src/backends/cpu/row_fusion_grad.cpp matches it):
//
//   TLOAD D, gdy            the cotangent rows            TROWSUM q, G;  TDIV q, q, n2
//   TMUL A, D, Z            dy * xhat (for dw)            TSUB G, G, q
//   TMUL G, D, W            dy * w                        TSUB G, G, Z
//   TMUL B, G, Z            TROWSUM p, B; TDIV p, p, n    TMUL G, G, r   (r: the forward's rstd)
//   TMUL Z, Z, p                                          [TLOAD E, gadd; TADD G, E, G]
//                                                         TSTORE gdx, G
//   then, each optional: TCOLSUM P1, A; TADD C1, C1, P1 and TCOLSUM P2, D; TADD C2, C2, P2
//   (the weight's and the bias's gradients, accumulated over the row nest's blocks). The
//   bracketed pair, also optional, adds dx to a gradient summed so far (a residual's: gadd is
//   then gdx itself).
//
// Instead of one pass over the block per instruction (each tile 2 x 4096 floats, in L2), each
// row of dy is read in place twice (the row sums, then dx), dx is written once, and the column
// sums are added in the first pass. Same element functions, roundings and summation orders as
// the instructions (TROWSUM's 32 lanes combined pairwise, TCOLSUM's running sum from 0 down the
// rows, then the TADD), so the results are the run's bit for bit. The matcher proved D, A, G, B
// and Z dead after the run: they are not written, only given the valid regions the run gives them.
//
// layer_norm_x_grad_rows also takes the forward's statistics before the run (TLOAD x, its shift
// column, the layer norm's sequence into Z): each row of x is read in place, twice for the mean
// and the rstd, and xhat is recomputed from it in the run's two passes instead of x copied into
// a tile and xhat written to Z and read back.
#pragma once
#include "pto/cpu/memory.hpp"
#include "pto/cpu/reduce.hpp"
#include "pto/cpu/rows.hpp"
#include "pto/cpu/types.hpp"
#include "pto/cpu/vexp.hpp"

namespace pto {
namespace fused {
namespace detail {

// T*, not deduced from the argument (a literal nullptr where the run has no such tile).
template <class T>
struct PtrOf {
  using type = T*;
};
template <class T>
using Ptr = typename PtrOf<T>::type;

// The row of xhat the passes read: a row of the tile Z, or computed from the row of x as the
// forward's instructions compute it, ((x - c) - mean) * rstd (rows.hpp, normalize_span).
struct ZRow {
  const float* z;
  PTO_INLINE float at(int64_t j) const { return z[j]; }
#ifdef PTO_VF16
  PTO_INLINE vf16 at16(int64_t j) const { return vf16_load(z + j); }
#endif
};
struct XhatRow {
  const float* x;
  float c, mean, rstd;
  PTO_INLINE float at(int64_t j) const { return elem::mul(centred<true>(x[j], c, mean), rstd); }
#ifdef PTO_VF16
  PTO_INLINE vf16 at16(int64_t j) const {
    return centred16<true>(x + j, vf16_splat(c), vf16_splat(mean)) * vf16_splat(rstd);
  }
#endif
};

// Pass one of a row: the row sums of g * z and of g (g = dy * w, in TROWSUM's order) into *sgz,
// *sg, and the column sums' running parts: p1 = p1 + dy * z, p2 = p2 + dy (first row: from 0);
// on the block's last row also c1 = c1 + p1, c2 = c2 + p2. p1 / p2 (and c1 / c2) may be null.
// next: a row to prefetch meanwhile (rows.hpp, prefetch_next), or nullptr.
template <class Z>
PTO_INLINE void ln_grad_sums(const float* dy, Z z, const float* w, int64_t n, bool first, bool last,
                             float* p1, float* c1, float* p2, float* c2, float* sgz, float* sg,
                             const float* next = nullptr) {
  auto cols = [=](int64_t j, float a, float d) {
    if (p1) {
      p1[j] = elem::add(first ? 0.0f : p1[j], a);
      if (last) c1[j] = elem::add(c1[j], p1[j]);
    }
    if (p2) {
      p2[j] = elem::add(first ? 0.0f : p2[j], d);
      if (last) c2[j] = elem::add(c2[j], p2[j]);
    }
  };
  float acc_gz[32], acc_g[32];
  for (int l = 0; l < 32; ++l) acc_gz[l] = acc_g[l] = 0.0f;
  int64_t j = 0;
#ifdef PTO_VF16
  vf16 gz0 = {}, gz1 = {}, g0 = {}, g1 = {};
  const vf16 zero = {};
  for (; j + 32 <= n; j += 32)
    for (int h = 0; h < 2; ++h) {
      const int64_t k = j + 16 * h;
      prefetch_next(next, k);
      const vf16 d = vf16_load(dy + k), zz = z.at16(k);
      const vf16 g = vf16_rounded(d * vf16_load(w + k));
      (h ? gz1 : gz0) += vf16_rounded(g * zz);
      (h ? g1 : g0) += g;
      if (p1) {
        const vf16 s = (first ? zero : vf16_load(p1 + k)) + vf16_rounded(d * zz);
        vf16_store(p1 + k, s);
        if (last) vf16_store(c1 + k, vf16_load(c1 + k) + s);
      }
      if (p2) {
        const vf16 s = (first ? zero : vf16_load(p2 + k)) + d;
        vf16_store(p2 + k, s);
        if (last) vf16_store(c2 + k, vf16_load(c2 + k) + s);
      }
    }
  vf16_store(acc_gz, gz0);
  vf16_store(acc_gz + 16, gz1);
  vf16_store(acc_g, g0);
  vf16_store(acc_g + 16, g1);
#else
  for (; j + 32 <= n; j += 32)
    for (int l = 0; l < 32; ++l) {
      const float d = dy[j + l], g = rounded(elem::mul(d, w[j + l]));
      const float zz = z.at(j + l);
      acc_gz[l] = elem::add(acc_gz[l], rounded(elem::mul(g, zz)));
      acc_g[l] = elem::add(acc_g[l], g);
      cols(j + l, rounded(elem::mul(d, zz)), d);
    }
#endif
  float tail_gz = 0.0f, tail_g = 0.0f;
  for (; j < n; ++j) {
    const float d = dy[j], g = rounded(elem::mul(d, w[j])), zz = z.at(j);
    tail_gz = elem::add(tail_gz, rounded(elem::mul(g, zz)));
    tail_g = elem::add(tail_g, g);
    cols(j, rounded(elem::mul(d, zz)), d);
  }
  *sgz = combine32(acc_gz, tail_gz);
  *sg = combine32(acc_g, tail_g);
}

// Pass two: dx = ((dy * w - q) - z * p) * r, added to e[j] where E (e + dx); NT: by streaming
// stores.
template <bool NT, bool E, class Z>
PTO_INLINE void ln_grad_dx(float* dx, const float* dy, Z z, const float* w, int64_t n, float p, float q,
                           float r, const float* e) {
  auto one = [=](int64_t j) {
    const float g = rounded(elem::mul(dy[j], w[j]));
    const float v = elem::mul(elem::sub(elem::sub(g, q), rounded(elem::mul(z.at(j), p))), r);
    dx[j] = E ? elem::add(e[j], rounded(v)) : v;
  };
  int64_t j = 0;
#ifdef PTO_VF16
  if constexpr (NT)
    for (; j < n && (reinterpret_cast<uintptr_t>(dx + j) & 63) != 0; ++j) one(j);
  const vf16 pv = vf16_splat(p), qv = vf16_splat(q), rv = vf16_splat(r);
  for (; j + 16 <= n; j += 16) {
    const vf16 g = vf16_rounded(vf16_load(dy + j) * vf16_load(w + j));
    const vf16 v = ((g - qv) - vf16_rounded(z.at16(j) * pv)) * rv;
    if constexpr (E)
      store16<NT>(dx + j, vf16_load(e + j) + vf16_rounded(v));
    else
      store16<NT>(dx + j, v);
  }
#endif
  for (; j < n; ++j) one(j);
}

// Whether the row by row passes compute what the run computes: unit column strides, dx's rows
// (written after each row is read) not meeting dy's or gadd's other than row for row, and the
// valid regions of a plain block (each the block's vr x vc).
template <int R, int C>
PTO_INLINE bool ln_grad_fast(GlobalView<float> gdx, GlobalView<float> gdy, const Tile<float, 1, C>& W,
                             const Tile<float, 1, C>* C1, const Tile<float, 1, C>* C2, GlobalView<float> gadd,
                             bool adds) {
  using pto::detail::clamp0;
  const int64_t vr = clamp0(gdy.vr, R), vc = clamp0(gdy.vc, C);
  const int64_t wr = pto::detail::imin(clamp0(gdx.vr, R), vr), wc = pto::detail::imin(clamp0(gdx.vc, C), vc);
  auto acc_ok = [&](const Tile<float, 1, C>* c) { return !c || (c->vr >= 1 && c->vc >= vc); };
  return gdy.cs == 1 && gdx.cs == 1 && vr > 0 && vc > 0 && (wc == vc || wr == 0) &&
         rowwise_safe(gdx, gdy, R, C) && W.vr >= 1 && W.vc >= vc && acc_ok(C1) && acc_ok(C2) &&
         (!adds || (gadd.cs == 1 && clamp0(gadd.vr, R) == vr && clamp0(gadd.vc, C) == vc &&
                    rowwise_safe(gdx, gadd, R, C)));
}

// The two passes over each row of the block (ln_grad_fast holds); zrow(i): row i of xhat
// (ZRow or XhatRow), r(i) its rstd; dy's row two ahead prefetched meanwhile. Then the valid
// regions the instructions would give (the tiles themselves are dead).
template <bool Stream, int R, int C, class ZOf, class ROf>
PTO_INLINE void ln_grad_block(GlobalView<float> gdx, GlobalView<float> gdy, Tile<float, R, C>& D,
                              Tile<float, R, C>& Z, Tile<float, R, C>& A, Tile<float, R, C>& G,
                              Tile<float, R, C>& B, const Tile<float, 1, C>& W, Tile<float, R, 1>& p,
                              Tile<float, R, 1>& q, float n, float n2, Tile<float, 1, C>* P1,
                              Tile<float, 1, C>* C1, Tile<float, 1, C>* P2, Tile<float, 1, C>* C2,
                              GlobalView<float> gadd, Tile<float, R, C>* E, ZOf zrow, ROf r) {
  using pto::detail::clamp0;
  const int64_t vr = clamp0(gdy.vr, R), vc = clamp0(gdy.vc, C);
  const int64_t wr = pto::detail::imin(clamp0(gdx.vr, R), vr);
  float* const p1 = P1 ? P1->data : nullptr;
  float* const p2 = P2 ? P2->data : nullptr;
  for (int64_t i = 0; i < vr; ++i) {
    const float* dy = gdy.ptr + i * gdy.rs;
    const auto z = zrow(i);
    // two rows ahead, also past the block (a prefetch never faults; rows.hpp, global_rows)
    const auto next =
        reinterpret_cast<const float*>(reinterpret_cast<uintptr_t>(dy) + uintptr_t(2 * gdy.rs * 4));
    float sgz, sg;
    ln_grad_sums(dy, z, W.data, vc, i == 0, i == vr - 1, p1, C1 ? C1->data : nullptr, p2,
                 C2 ? C2->data : nullptr, &sgz, &sg, next);
    p.data[i] = elem::div(sgz, n);
    q.data[i] = elem::div(sg, n2);
    if (i >= wr) continue;
    float* const dx = gdx.ptr + i * gdx.rs;
    if (E)
      ln_grad_dx<Stream, true>(dx, dy, z, W.data, vc, p.data[i], q.data[i], r(i), gadd.ptr + i * gadd.rs);
    else
      ln_grad_dx<Stream, false>(dx, dy, z, W.data, vc, p.data[i], q.data[i], r(i), nullptr);
  }
  if constexpr (Stream) pto::detail::stream_fence();
  D.vr = Z.vr = A.vr = G.vr = B.vr = p.vr = q.vr = int(vr);
  D.vc = Z.vc = A.vc = G.vc = B.vc = int(vc);
  p.vc = q.vc = 1;
  if (E) E->vr = int(vr), E->vc = int(vc);
  Tile<float, 1, C>* const sums[] = {P1, C1, P2, C2};
  for (Tile<float, 1, C>* t : sums)
    if (t) t->vr = 1, t->vc = int(vc);
}

}  // namespace detail

// The run above (P1 / C1, P2 / C2, E: null where the run has no such column sum, no sum so far).
// Falls back to the instructions as written where a view is strided, dx's rows overlap dy's (or
// gadd's other than row for row), or the valid regions are not those of a plain block (each the
// block's vr x vc).
template <bool Stream, int R, int C>
inline void layer_norm_grad_rows(GlobalView<float> gdx, GlobalView<float> gdy, Tile<float, R, C>& D,
                                 Tile<float, R, C>& Z, Tile<float, R, C>& A, Tile<float, R, C>& G,
                                 Tile<float, R, C>& B, const Tile<float, 1, C>& W, Tile<float, R, 1>& p,
                                 Tile<float, R, 1>& q, const Tile<float, R, 1>& r, float n, float n2,
                                 detail::Ptr<Tile<float, 1, C>> P1, detail::Ptr<Tile<float, 1, C>> C1,
                                 detail::Ptr<Tile<float, 1, C>> P2, detail::Ptr<Tile<float, 1, C>> C2,
                                 GlobalView<float> gadd, detail::Ptr<Tile<float, R, C>> E) {
  using pto::detail::clamp0;
  const int64_t vr = clamp0(gdy.vr, R), vc = clamp0(gdy.vc, C);
  if (detail::ln_grad_fast<R, C>(gdx, gdy, W, C1, C2, gadd, E) && Z.vr == vr && Z.vc == vc && r.vr >= vr) {
    detail::ln_grad_block<Stream>(
        gdx, gdy, D, Z, A, G, B, W, p, q, n, n2, P1, C1, P2, C2, gadd, E,
        [&](int64_t i) { return detail::ZRow{Z.data + i * C}; }, [&](int64_t i) { return r.data[i]; });
    return;
  }
  TLOAD(D, gdy);
  TMUL(A, D, Z);
  TMUL(G, D, W);
  TMUL(B, G, Z);
  TROWSUM(p, B);
  TDIV(p, p, n);
  TMUL(Z, Z, p);
  TROWSUM(q, G);
  TDIV(q, q, n2);
  TSUB(G, G, q);
  TSUB(G, G, Z);
  TMUL(G, G, r);
  if (E) TLOAD(*E, gadd), TADD(G, *E, G);
  if constexpr (Stream)
    TSTORE(gdx, G, kStream);
  else
    TSTORE(gdx, G);
  if (P1) TCOLSUM(*P1, A), TADD(*C1, *C1, *P1);
  if (P2) TCOLSUM(*P2, D), TADD(*C2, *C2, *P2);
}

// The run above with the forward's statistics before it, from x itself: TLOAD X, gx; TLOAD c, gc
// (the shift, x's first column); the layer norm's sequence into Z (rows.hpp, layer_norm_rows: u
// the mean, r the rstd); then the run, its Z and r those. Each row of x is read in place: two
// passes for the mean and the rstd, and xhat recomputed from it in the run's two passes (no copy
// of x, no Z written and read back), bit for bit what the instructions compute. X and Z are dead
// after the run (the matcher proved it). Falls back to the calls as written where x's view is
// strided or not the block of dy, dx's rows meet x's other than row for row, or the shifts' view
// is not one per row.
template <bool Stream, int R, int C>
inline void layer_norm_x_grad_rows(GlobalView<float> gdx, GlobalView<float> gdy, Tile<float, R, C>& D,
                                   Tile<float, R, C>& Z, Tile<float, R, C>& A, Tile<float, R, C>& G,
                                   Tile<float, R, C>& B, const Tile<float, 1, C>& W, Tile<float, R, 1>& p,
                                   Tile<float, R, 1>& q, Tile<float, R, 1>& r, float n, float n2,
                                   detail::Ptr<Tile<float, 1, C>> P1, detail::Ptr<Tile<float, 1, C>> C1,
                                   detail::Ptr<Tile<float, 1, C>> P2, detail::Ptr<Tile<float, 1, C>> C2,
                                   GlobalView<float> gadd, detail::Ptr<Tile<float, R, C>> E,
                                   GlobalView<float> gx, GlobalView<float> gc, Tile<float, R, C>& X,
                                   Tile<float, R, 1>& c, Tile<float, R, 1>& u, float cnt, float cnt2,
                                   float eps) {
  using pto::detail::clamp0;
  const int64_t vr = clamp0(gdy.vr, R), vc = clamp0(gdy.vc, C);
  TLOAD(c, gc);  // R values, before anything is written
  if (detail::ln_grad_fast<R, C>(gdx, gdy, W, C1, C2, gadd, E) && gx.cs == 1 && clamp0(gx.vr, R) == vr &&
      clamp0(gx.vc, C) == vc && c.vr >= vr && c.vc >= 1 && detail::rowwise_safe(gdx, gx, R, C)) {
    detail::ln_grad_block<Stream>(
        gdx, gdy, D, Z, A, G, B, W, p, q, n, n2, P1, C1, P2, C2, gadd, E,
        [&](int64_t i) {
          const float* x = gx.ptr + i * gx.rs;
          const auto next =
              reinterpret_cast<const float*>(reinterpret_cast<uintptr_t>(x) + uintptr_t(2 * gx.rs * 4));
          const float c0 = c.data[i];
          const float mean = elem::div(detail::sum_diff(x, vc, c0), cnt);
          const float rstd =
              elem::rsqrt(elem::add(elem::div(detail::sum_sq_diff<true>(x, vc, c0, mean, next), cnt2), eps));
          u.data[i] = mean;
          r.data[i] = rstd;
          return detail::XhatRow{x, c0, mean, rstd};
        },
        [&](int64_t i) { return r.data[i]; });
    X.vr = int(vr), X.vc = int(vc);
    u.vr = r.vr = int(vr), u.vc = r.vc = 1;
    return;
  }
  TLOAD(X, gx);
  layer_norm_rows(Z, X, c, u, r, cnt, cnt2, eps, nullptr, nullptr);
  layer_norm_grad_rows<Stream>(gdx, gdy, D, Z, A, G, B, W, p, q, r, n, n2, P1, C1, P2, C2, gadd, E);
}

}  // namespace fused
}  // namespace pto
