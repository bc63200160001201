// Matrix multiply: gemm_f32 / gemm_sum_f32 on strided memory, MMATMUL / mmatmul_sum on global
// views, and the tile instructions TMATMUL / _ACC / _BIAS.
//
// gemm_sum_f32 (a sum of products, one GEMM over the concatenated K) uses Goto-style blocking
// over the micro-kernel and packing loops of pto/cpu/gemm_kernel.hpp: B is packed into kc x NR
// column panels (a block of up to nb columns and all of K, packed once and shared by the
// threads) and A into MR x kc row panels (per thread; zero-padded, so edges need no special
// loop); one A micro-panel runs against each L2-sized piece (nc columns) of the block.
// kc, mc and nc follow the cache sizes the CPU reports (blocking()). Products of few rows
// read B in place instead of packing it. Tile matmuls run the same micro-kernel on the tiles in
// place (no packing), with compile-time strides. A narrow MR_NARROW x kW tile serves products
// whose rows MR-row panels would pad (64 rows).
#pragma once
#include "pto/abi.h"
#include "pto/cpu/gemm_dot.hpp"
#include "pto/cpu/gemm_kernel.hpp"
#include "pto/cpu/gemm_wrapped.hpp"
#include "pto/cpu/matmul_bf16.hpp"
#include "pto/cpu/matmul_int8.hpp"
#include "pto/cpu/types.hpp"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>  // a compiler header: CPUID for the cache sizes
#endif

namespace pto {
namespace detail {
// f(args[0], args[1]), f(args[2], args[3]), ...
template <class F>
PTO_INLINE void for_pairs(F&) {}
template <class F, class A, class B, class... R>
PTO_INLINE void for_pairs(F& f, A a, B b, R... rest) {
  f(a, b);
  for_pairs(f, rest...);
}
}  // namespace detail

namespace gemm {
// Cache blocking: kc rows of K per packed panel, mc rows of A per packed block, nb columns of B
// per packed block (shared by the threads), walked in L2-sized pieces of nc columns; kr rows of K
// per slice of the products that read B in place (gemm_sum_rows_f32, at most 512); pb: how many k
// steps ahead the micro-kernel prefetches a packed B panel into L1 (0: none; micro_kernel).
struct Blocking {
  int64_t kc = KC, mc = MC, nc = NC, nb = NB, kr = KC < 512 ? KC : 512, pb = 0;
};

// Whether the CPU is an AMD one (CPUID vendor "AuthenticAMD"); false off x86.
inline bool cpu_is_amd() {
#if defined(__x86_64__) || defined(__i386__)
  unsigned a, b, c, d;
  return __get_cpuid(0, &a, &b, &c, &d) && b == 0x68747541;
#else
  return false;
#endif
}
// The per-core L1 data and L2 cache sizes the CPU reports (CPUID leaf 4 on Intel, 0x8000001D on
// AMD: ways x partitions x line x sets); 0 where it reports none (or off x86).
struct CacheSizes {
  int64_t l1d = 0, l2 = 0;
};
inline CacheSizes query_cache_sizes() {
  CacheSizes cs;
#if defined(__x86_64__) || defined(__i386__)
  unsigned a, b, c, d;
  if (!__get_cpuid(0, &a, &b, &c, &d)) return cs;
  const bool amd = cpu_is_amd();
  unsigned leaf = 4;
  if (amd) {
    if (!__get_cpuid(0x80000000, &a, &b, &c, &d) || a < 0x8000001D) return cs;
    leaf = 0x8000001D;
  } else if (a < 4) {
    return cs;
  }
  for (unsigned i = 0; i < 16; ++i) {
    __cpuid_count(leaf, i, a, b, c, d);
    const unsigned type = a & 0x1F, level = (a >> 5) & 7;
    if (type == 0) break;
    if (type != 1 && type != 3) continue;  // data or unified
    const int64_t bytes =
        int64_t((b >> 22) + 1) * (((b >> 12) & 0x3FF) + 1) * ((b & 0xFFF) + 1) * (int64_t(c) + 1);
    if (level == 1) cs.l1d = bytes;
    if (level == 2) cs.l2 = bytes;
  }
#endif
  return cs;
}

// Blocking from the cache sizes, tuned on a Zen 5 core (48 KiB L1d, 1 MiB L2: kc 1024, nc 128,
// mc 168). The micro-kernel's operands stream from L2 at full speed (an A micro-panel of 14 x kc
// floats need not stay in L1: kc 1024 runs as fast as 384 in the kernel alone), so the slices are
// deep: C is read and written once per slice, the cost that dominates once C is far away (kc 384
// -> 1024: 1024^3 4%, 2048^3 7% faster on one core). The kc x nc piece of the packed B block in L2
// takes half of it, the packed A block (mc x kc) most of the rest (mc 112-168 measured alike, 84
// and 224 slower); the packed B block (kc x nb, up to 32 MiB) lives in L3. Products that read B in
// place keep L1-sized slices (kr: their B rows stay in L1 across the row panels). Without a
// reported size, or with PTO_GEMM_* overrides, the constants in gemm_kernel.hpp.
// On Intel cores the micro-kernel's loads of the packed B panel stalled it (perf: 16% of its
// samples on them, on an Emerald Rapids class Xeon); prefetching the panel 24 k steps (3 KiB)
// ahead: 2048^3 on one core 131-140 -> 147-152 GFLOP/s median (interleaved; 16 steps 147, 32
// steps 152, 48 148). AMD cores, which the blocking was tuned on, keep the kernel as it was.
inline Blocking blocking() {
  static const Blocking bk = [] {
    Blocking r;
#if defined(__AVX512F__)
    if (!cpu_is_amd()) r.pb = 24;
#endif
#ifndef PTO_GEMM_FIXED_BLOCKING
    const CacheSizes cs = query_cache_sizes();
    if (cs.l1d >= 8192 && cs.l2 >= 131072) {
      r.kr = detail::imin(512, detail::imax(128, cs.l1d / 128 / 16 * 16));
      r.kc = detail::imin(2048, detail::imax(256, cs.l2 / 1024 / 16 * 16));
      r.nc = detail::imin(4096, detail::imax(2 * NR, cs.l2 / (r.kc * 4 * 2) / NR * NR));
      r.mc = detail::imin(512, detail::imax(2 * MR, cs.l2 * 2 / 3 / (r.kc * 4) / MR * MR));
    }
#endif
    return r;
  }();
  return bk;
}

// gemm_sum_f32 for M <= one A block with B read in place (every term's b_cs == 1): A is packed
// once per kc block, B micro-panels come straight from B's rows (no copy) and stay in L1 across
// the A micro-panels; only a ragged last panel, which would read past B's columns, is packed.
template <int TM, int TNV>
inline void gemm_sum_rows_f32(int64_t M, int64_t N, const Term* t, int nt, int64_t K, float* C, int64_t ldc,
                              bool accumulate, float* Ap, float* Bp, int64_t KB, int64_t NB,
                              const Epilogue& epi) {
  constexpr int TNR = TNV * kW;
  const float* rows[512];
  const float* panel[512];  // the rows at a panel's first column (gemm_sum_rows_wrapped_f32)
  for (int64_t pc = 0; pc < K; pc += KB) {
    const int64_t kc = K - pc < KB ? K - pc : KB;
    const bool acc = accumulate || pc > 0;
    for_each_k_piece(t, nt, pc, kc, [&](const Term& s, int64_t p0, int64_t off, int64_t len) {
      pack_a<TM>(M, len, s.a + p0 * s.a_cs, s.a_rs, s.a_cs, Ap + off * TM, kc);
      for (int64_t p = 0; p < len; ++p) rows[off + p] = s.b + (p0 + p) * s.b_rs;
    });
    const int64_t n_full = N / TNR * TNR;
    for (int64_t jc = 0; jc < n_full; jc += NB) {
      const int64_t nc = detail::imin(NB, n_full - jc);
      for (int64_t jr = jc; jr < jc + nc; jr += TNR) {
        for (int64_t p = 0; p < kc; ++p) panel[p] = rows[p] + jr;
        for (int64_t ir = 0; ir < M; ir += TM)
          micro_kernel<TM, TNV, 1, TM, TNR, true>(kc, Ap + ir * kc, nullptr, C + ir * ldc + jr, ldc, acc,
                                                  detail::imin(TM, M - ir), TNR, panel, 0,
                                                  epi.bias_at(pc + kc, K, jr), epi.relu_at(pc + kc, K));
      }
    }
    if (n_full < N) {
      for_each_k_piece(t, nt, pc, kc, [&](const Term& s, int64_t p0, int64_t off, int64_t len) {
        pack_b<TNR>(len, N - n_full, s.b + p0 * s.b_rs + n_full, s.b_rs, 1, Bp + off * TNR, kc);
      });
      for (int64_t ir = 0; ir < M; ir += TM)
        micro_kernel<TM, TNV, 1, TM, TNR>(kc, Ap + ir * kc, Bp, C + ir * ldc + n_full, ldc, acc,
                                          detail::imin(TM, M - ir), N - n_full, nullptr, 0,
                                          epi.bias_at(pc + kc, K, n_full), epi.relu_at(pc + kc, K));
    }
  }
}

// gemm_sum_f32 on one thread (a thread's share of a wide product) for A in one block: per kc
// slice A is packed once, and each NR-column panel of B is packed just before the row panels read
// it, so the panel is written to and read from L2. Packing all of B first (gemm_sum_f32's block)
// sends it through L3 and back: on one Intel Xeon core (Emerald Rapids class), x @ W.T at M = 128,
// N 3072, K 768 spent 21% of its time in pack_b, and runs 182 -> 203 GFLOP/s this way (M = 64-256,
// N 768-4096, K 768-3072, either layout of B: 5-20% faster; M 336-448 at K 768 alike). Not for
// more: repacking B per A block cost more than the trip through L3 (M = 336 as two blocks of 168
// rows, N 3072, K 768: 216 -> 206 GFLOP/s).
template <int TM, int TNV>
inline void gemm_sum_panels_f32(int64_t M, int64_t N, const Term* t, int nt, int64_t K, float* C, int64_t ldc,
                                bool accumulate, float* Ap, float* Bp, int64_t KB, int64_t pb,
                                const Epilogue& epi) {
  constexpr int TNR = TNV * kW;
  for (int64_t pc = 0; pc < K; pc += KB) {
    const int64_t kc = K - pc < KB ? K - pc : KB;
    const bool acc = accumulate || pc > 0;
    for_each_k_piece(t, nt, pc, kc, [&](const Term& s, int64_t p0, int64_t off, int64_t len) {
      pack_a<TM>(M, len, s.a + p0 * s.a_cs, s.a_rs, s.a_cs, Ap + off * TM, kc);
    });
    for (int64_t jr = 0; jr < N; jr += TNR) {
      const int64_t nr = detail::imin(TNR, N - jr);
      for_each_k_piece(t, nt, pc, kc, [&](const Term& s, int64_t p0, int64_t off, int64_t len) {
        pack_b<TNR>(len, nr, s.b + p0 * s.b_rs + jr * s.b_cs, s.b_rs, s.b_cs, Bp + off * TNR, kc);
      });
      for (int64_t ir = 0; ir < M; ir += TM)
        micro_kernel<TM, TNV, 1, TM, TNR>(kc, Ap + ir * kc, Bp, C + ir * ldc + jr, ldc, acc,
                                          detail::imin(TM, M - ir), nr, nullptr, 0,
                                          epi.bias_at(pc + kc, K, jr), epi.relu_at(pc + kc, K), pb);
    }
  }
}

// Work shared by claims: items [0, n) are each done once, by whichever participant of a parallel
// loop claims them (its flag exchanged to 1). A participant takes runs of up to `run` items from
// the front of its own range [begin, end), then runs still unclaimed from the back of [0, n): a
// participant slowed down (its core shared with another process, a peer library's spinning
// threads) hands its tail to the others instead of holding up the loop's join. At equal speeds
// every participant finds its own range whole and nothing to take: the static split as before.
template <class F>
inline void claim_runs(uint8_t* claimed, int64_t n, int64_t begin, int64_t end, int64_t run, F&& fn) {
  auto claim = [claimed](int64_t i) {
    return __atomic_load_n(claimed + i, __ATOMIC_RELAXED) == 0 &&
           __atomic_exchange_n(claimed + i, uint8_t(1), __ATOMIC_RELAXED) == 0;
  };
  for (int64_t i = begin; i < end && claim(i);) {
    const int64_t a = i++;
    while (i < end && i - a < run && claim(i)) ++i;
    fn(a, i);
  }
  for (int64_t j = n; j > 0;) {
    if (!claim(j - 1)) {
      --j;
      continue;
    }
    const int64_t b = j--;
    while (j > 0 && b - j < run && claim(j - 1)) --j;
    fn(j, b);
  }
}

// One nb-column block of gemm_sum_f32 (columns jc of the concatenated B, all of K): B packed by
// all threads together (pack_b_panels), then read by all of them, each for its own rows of C
// (multiply_rows). One packed copy serves every thread: packing B per thread cost each thread all
// of B's packing and kept a copy per thread in the shared L3.
template <int TM, int TNV>
struct ColumnBlock {
  int64_t M, K;
  const Term* t;
  int nt;
  float* C;
  int64_t ldc;
  bool accumulate;
  Epilogue epi;
  int64_t kb, mb, nb;  // rows of K per slice, rows of A per packed block, columns per L2 piece
  int64_t pb;          // Blocking::pb
  float* Bp;           // the packed block: per kb-deep slice of K, panels of TNV*kW columns
  uint8_t* claimed;    // claim_runs flags: the block's column panels, then its row tiles
  int64_t jc = 0, nc = 0;
  int64_t slice_stride() const { return (nc + TNV * kW - 1) / (TNV * kW) * (TNV * kW); }
  int64_t panels() const { return (nc + TNV * kW - 1) / (TNV * kW); }
};

// Column panels [begin, end) of the block's B (claimed: claim_runs), every slice of K, into the
// shared packed block.
template <int TM, int TNV>
inline void pack_b_panels(void* ctx, int64_t begin, int64_t end) {
  constexpr int TNR = TNV * kW;
  const ColumnBlock<TM, TNV>& s = *static_cast<const ColumnBlock<TM, TNV>*>(ctx);
  claim_runs(s.claimed, s.panels(), begin, end, 4, [&](int64_t p0, int64_t p1) {
    const int64_t j0 = p0 * TNR, j1 = detail::imin(p1 * TNR, s.nc);
    for (int64_t pc = 0; pc < s.K; pc += s.kb) {
      const int64_t kc = detail::imin(s.kb, s.K - pc);
      float* slice = s.Bp + pc * s.slice_stride() + j0 * kc;
      for_each_k_piece(s.t, s.nt, pc, kc, [&](const Term& u, int64_t q0, int64_t off, int64_t len) {
        pack_b<TNR>(len, j1 - j0, u.b + q0 * u.b_rs + (s.jc + j0) * u.b_cs, u.b_rs, u.b_cs, slice + off * TNR,
                    kc);
      });
    }
  });
}

// Rows [ic, ic + mc) of C (at most mb) against the block's packed B: for each slice of K, A packed
// into Ap; one A micro-panel (L1, or streamed from L2) against each nc-column piece of B (L2).
template <int TM, int TNV>
inline void multiply_block(const ColumnBlock<TM, TNV>& s, float* Ap, int64_t ic, int64_t mc) {
  constexpr int TNR = TNV * kW;
  const Epilogue& epi = s.epi;
  for (int64_t pc = 0; pc < s.K; pc += s.kb) {
    const int64_t kc = detail::imin(s.kb, s.K - pc);
    const bool acc = s.accumulate || pc > 0;
    const float* slice = s.Bp + pc * s.slice_stride();
    for_each_k_piece(s.t, s.nt, pc, kc, [&](const Term& u, int64_t p0, int64_t off, int64_t len) {
      pack_a<TM>(mc, len, u.a + ic * u.a_rs + p0 * u.a_cs, u.a_rs, u.a_cs, Ap + off * TM, kc);
    });
    for (int64_t jb = 0; jb < s.nc; jb += s.nb) {
      const int64_t je = detail::imin(s.nc, jb + s.nb);
      for (int64_t ir = 0; ir < mc; ir += TM) {
        const int64_t mr = detail::imin(TM, mc - ir);
        for (int64_t jr = jb; jr < je; jr += TNR) {
          const int64_t j = s.jc + jr;
          micro_kernel<TM, TNV, 1, TM, TNR>(kc, Ap + ir * kc, slice + jr * kc, s.C + (ic + ir) * s.ldc + j,
                                            s.ldc, acc, mr, detail::imin(TNR, s.nc - jr), nullptr, 0,
                                            epi.bias_at(pc + kc, s.K, j), epi.relu_at(pc + kc, s.K), s.pb);
        }
      }
    }
  }
}

// Row tiles [begin, end) (TM rows each) of C, claimed (claim_runs) in blocks of up to mb rows.
template <int TM, int TNV>
inline void multiply_rows(void* ctx, int64_t begin, int64_t end) {
  const ColumnBlock<TM, TNV>& s = *static_cast<const ColumnBlock<TM, TNV>*>(ctx);
  const int64_t tiles = (s.M + TM - 1) / TM;
  PackBuffers& buf = pack_buffers();
  float* Ap = PackBuffers::grow(buf.a, buf.a_cap, detail::imin(s.kb, s.K) * detail::imin(s.mb, tiles * TM));
  claim_runs(s.claimed + s.panels(), tiles, begin, end, s.mb / TM, [&](int64_t t0, int64_t t1) {
    multiply_block(s, Ap, t0 * TM, detail::imin(t1 * TM, s.M) - t0 * TM);
  });
}

// C(M x N, row stride ldc, unit column stride) = (or +=) sum of the nt terms' products, with a
// TM x TNV*kW register tile, on the pool `pf` (nullptr: this thread only). Goto-style loops: for
// each nb-column block of B, all of its kc-deep slices are packed once (by all threads), then
// every thread multiplies its rows of C against them: two parallel loops per block, whose joins
// are the barriers between packing the block and reading it, and between reading it and packing
// the next (few joins: a barrier per slice cost 2x under an oversubscribed CPU). Panels and row
// tiles are claimed (claim_runs), so a thread whose core is shared hands its tail to the others
// (1024^3 on 2 Zen 5 cores beside a pause-spinning thread: 9.1 -> 7.4 ms; 5.1 ms either way alone).
template <int TM = MR, int TNV = NV>
inline void gemm_sum_f32(int64_t M, int64_t N, const Term* t, int nt, float* C, int64_t ldc, bool accumulate,
                         const Blocking& bk = Blocking{}, const Epilogue& epi = Epilogue{},
                         pto_parallel_for_fn pf = nullptr) {
  constexpr int TNR = TNV * kW;
  if (M <= 0 || N <= 0) return;
  int64_t K = 0;
  for (int i = 0; i < nt; ++i) K += detail::imax(0, t[i].k);
  // Few rows (at most 4 register tiles, or 64 for the wide one) and B rows contiguous: B is read in place
  // through a table of row addresses instead of packed, since each packed element would be used only M times
  // (a convolution's taps: 64 output channels, 3136 pixels; 11% faster). Where a row stride is a multiple of
  // 1 KiB, the rows of a micro-panel share a few cache sets (an L1 set and 8 of L2's at 16 KiB): slices of
  // 64 rows, whose panel the row panels then reread from L2 (kr 384 there: 1.6x slower). Packing B instead
  // cost more than the product at M <= 32 (on an Intel Xeon core, K 1024, N 4096: M = 16 62 -> 119
  // GFLOP/s, 32 98 -> 135, 64 138 -> 144; kr 32 119/127/129, 96 92/139/149).
  bool in_place = M <= (TNV == 3 ? 64 : 4 * TM),
       aliased_rows = false;  // the wide tile (choose_tile): 64 rows
  for (int i = 0; i < nt; ++i) {
    in_place = in_place && t[i].b_cs == 1;
    aliased_rows = aliased_rows || t[i].b_rs % 256 == 0;
  }
  if (epi.wrap > 0 && !(in_place && K > 0)) {
    // A wrapped destination the in-place path does not serve: the plain product, then stored.
    ScratchBuffer<float> wide(M * N);
    Epilogue plain;
    gemm_sum_f32<TM, TNV>(M, N, t, nt, wide.data(), N, false, bk, plain, pf);
    return store_wrapped(wide.data(), N, M, 0, N, C, ldc, accumulate, epi);
  }
  if (K <= 0) {
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        float x = accumulate ? C[i * ldc + j] : 0.0f;
        if (epi.bias) x = elem::add(x, epi.bias[j]);
        if (epi.relu) x = elem::relu(x);
        C[i * ldc + j] = x;
      }
    return;
  }
  const int64_t KB = bk.kc, MB = detail::imax(TM, bk.mc / TM * TM), NB = detail::imax(TNR, bk.nc / TNR * TNR);
  int64_t NBB = detail::imax(NB, bk.nb / TNR * TNR);
  PackBuffers& buf = pack_buffers();
  const int64_t KR = detail::imax(1, detail::imin(in_place && aliased_rows ? 64 : 512, bk.kr)),
                kr_max = K < KR ? K : KR;
  if (in_place && epi.wrap > 0) {
    float* Bp = PackBuffers::grow(buf.b, buf.b_cap, kr_max * TNR);
    float* Ap = PackBuffers::grow(buf.a, buf.a_cap, K * ((M + TM - 1) / TM * TM));
    return gemm_sum_rows_wrapped_f32<TM, TNV>(M, N, t, nt, K, C, ldc, accumulate, Ap, Bp, KR, epi);
  }
  if (in_place) {
    const int64_t nc_max = ((N < NB ? N : NB) + TNR - 1) / TNR * TNR;
    float* Bp = PackBuffers::grow(buf.b, buf.b_cap, kr_max * nc_max);
    float* Ap = PackBuffers::grow(buf.a, buf.a_cap, kr_max * ((M + TM - 1) / TM * TM));
    return gemm_sum_rows_f32<TM, TNV>(M, N, t, nt, K, C, ldc, accumulate, Ap, Bp, KR, NB, epi);
  }
  // One A block: at most the floats of an mc x kc one (a shallow K leaves room for more rows).
  if (pf == nullptr && M * (K < KB ? K : KB) <= MB * KB) {
    const int64_t kc_max = K < KB ? K : KB;
    float* Bp = PackBuffers::grow(buf.b, buf.b_cap, kc_max * TNR);
    float* Ap = PackBuffers::grow(buf.a, buf.a_cap, kc_max * ((M + TM - 1) / TM * TM));
    return gemm_sum_panels_f32<TM, TNV>(M, N, t, nt, K, C, ldc, accumulate, Ap, Bp, KB, bk.pb, epi);
  }
  // The packed block holds all of K: at most 8 Mi floats (32 MiB), fewer columns for a deep K.
  NBB = detail::imax(NB, detail::imin(NBB, (int64_t(8) << 20) / K / TNR * TNR));
  const int64_t nbb_max = ((N < NBB ? N : NBB) + TNR - 1) / TNR * TNR;
  float* Bp = PackBuffers::grow(buf.b, buf.b_cap, K * nbb_max);
  const int64_t row_tiles = (M + TM - 1) / TM;
  ScratchBuffer<uint8_t> claimed(nbb_max / TNR + row_tiles);
  ColumnBlock<TM, TNV> s{M, K, t, nt, C, ldc, accumulate, epi, KB, MB, NB, bk.pb, Bp, claimed.data()};
  for (int64_t jc = 0; jc < N; jc += NBB) {
    s.jc = jc;
    s.nc = N - jc < NBB ? N - jc : NBB;
    const int64_t panels = s.panels();
    std::memset(claimed.data(), 0, size_t(claimed.size()));
    if (pf) {
      pf(panels, &pack_b_panels<TM, TNV>, &s);
      pf(row_tiles, &multiply_rows<TM, TNV>, &s);
    } else {
      pack_b_panels<TM, TNV>(&s, 0, panels);
      multiply_rows<TM, TNV>(&s, 0, row_tiles);
    }
  }
}
}  // namespace gemm

// C(M x N, row stride ldc) = (or +=) A(M x K) * B(K x N); element (i,p) of A is
// A[i*lda_r + p*lda_c], (p,j) of B is B[p*ldb_r + j*ldb_c]: any strides, transposed included.
// Single-threaded; callers parallelise over blocks of C.
inline void gemm_f32(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda_r, int64_t lda_c,
                     const float* B, int64_t ldb_r, int64_t ldb_c, float* C, int64_t ldc, bool accumulate) {
  const gemm::Term t{A, lda_r, lda_c, B, ldb_r, ldb_c, K};
  gemm::gemm_sum_f32(M, N, &t, 1, C, ldc, accumulate);
}

namespace gemm {
constexpr int kMaxTerms = 64;  // products per MMATMUL_SUM (code generation splits longer sums)

// The narrow register tile (MR_NARROW x kW) for products with few rows, where MR-row panels would
// compute many padding rows (64 rows: 70 with MR = 14, 64 with 16).
#if defined(__AVX512F__)
constexpr int MR_NARROW = 16;
#else
constexpr int MR_NARROW = 8;
#endif
constexpr int64_t padded_rows(int64_t m, int tm) { return (m + tm - 1) / tm * tm; }
// The narrow tile where the rows it saves outweigh its slower kernel: its time per padded row,
// relative to the main tile's, in 32nds. On AVX-512 the 16 x 16 kernel loads 17 vectors per 16
// FMAs; on an Intel Xeon (Emerald Rapids class, one core) that costs ~18%: M = 256 (N 768-3072,
// K 768-3072) main 134-147 GFLOP/s, narrow 118-128 though it pads 256 rows instead of 266; M = 128
// 113-117 vs 107-109; M = 32 71 vs 79, M = 16 41 vs 52 (narrow ahead). Zen cores keep the ratio
// they were tuned with (~3%).
inline int narrow_row_cost() {
#if defined(__AVX512F__)
  static const int cost = cpu_is_amd() ? 33 : 38;
  return cost;
#else
  return 33;
#endif
}
// The register tiles of gemm_share_f32: MR x NR, the narrow one, and a wide MR_WIDE x 3 kW one:
// 8 x 48 reads 11 vectors per 24 FMAs where 16 x 16 reads 17 per 16, and pads rows to a
// multiple of 8, not 14 or 16. A convolution's taps (64 x 3192 x 9*64, one Zen 5 core, B read in
// place): 16 x 16 190 GFLOP/s, 14 x 32 155-168, 8 x 48 215-228 (the FMA loop's 230). Packed, on
// an Intel Xeon core: M = 128 (N 768-3072, K 768-3072) 14 x 32 116-130, 8 x 48 127-137 (14-row
// panels pad 128 rows to 140); 1024^3 161 and 158-160 (48 columns pad 1024 to 1056).
enum TileKind : int { kTileMain = 0, kTileNarrow = 1, kTileWide = 2 };
constexpr int MR_WIDE = 8, NV_WIDE = 3;
constexpr int tile_cols(int tile) { return tile == kTileWide ? NV_WIDE * kW : tile == kTileNarrow ? kW : NR; }
constexpr int tile_rows(int tile) {
  return tile == kTileWide ? MR_WIDE : tile == kTileNarrow ? MR_NARROW : MR;
}
// A tile's cost for an M x N product: the padded rows x padded columns it computes, weighted by
// its kernel's time per element (narrow_row_cost; the others alike).
inline int64_t tile_cost(int tile, int64_t M, int64_t N) {
  const int64_t w = tile == kTileNarrow ? narrow_row_cost() : 32;
  return padded_rows(M, tile_rows(tile)) * padded_rows(N, tile_cols(tile)) * w;
}
// The narrow tile against the main one by rows (as tuned); the wide one against either by area.
inline bool use_narrow_tile(int64_t M) {
  return padded_rows(M, MR_NARROW) * narrow_row_cost() < padded_rows(M, MR) * 32;
}
inline int choose_tile(int64_t M, int64_t N, const Term* t, int nt) {
  int best = use_narrow_tile(M) ? kTileNarrow : kTileMain;
#if defined(__AVX512F__)
  // Few rows with B read in place (gemm_sum_rows_f32), at least 16 panels (768 columns):
  // narrower, its ragged last panel costs more than it gains.
  bool in_place = M <= 64 && N >= 16 * NV_WIDE * kW;
  for (int i = 0; i < nt; ++i) in_place = in_place && t[i].b_cs == 1;
  if (in_place || tile_cost(kTileWide, M, N) < tile_cost(best, M, N)) best = kTileWide;
#else
  (void)t, (void)nt;
#endif
  return best;
}

// A sum on the pool `pf` (nullptr: this thread only): gemm_sum_f32 with the register tile chosen
// for its rows (choose_tile) and the blocking from the cache sizes.
inline void gemm_share_f32(pto_parallel_for_fn pf, int64_t M, int64_t N, const Term* t, int nt, float* C,
                           int64_t ldc, bool acc, int tile, const Epilogue* epi) {
#if defined(__AVX512F__)
  if (tile == kTileWide)
    return gemm_sum_f32<MR_WIDE, NV_WIDE>(M, N, t, nt, C, ldc, acc, blocking(), *epi, pf);
#endif
  if (tile == kTileNarrow)
    gemm_sum_f32<MR_NARROW, 1>(M, N, t, nt, C, ldc, acc, blocking(), *epi, pf);
  else
    gemm_sum_f32<MR, NV>(M, N, t, nt, C, ldc, acc, blocking(), *epi, pf);
}
}  // namespace gemm
}  // namespace pto

// The packed GEMM is most of a kernel's compile time (about 0.5 s of g++ per kernel with a
// MMATMUL). The CPU backend compiles it once per machine and header version into a library of
// its own (PTO_SHARED_GEMM_DEFINE), loaded before kernels built with PTO_SHARED_GEMM, which call
// it instead of instantiating it. Exports and other builds keep it inline.
#if defined(PTO_SHARED_GEMM) || defined(PTO_SHARED_GEMM_DEFINE)
extern "C"
    __attribute__((visibility("default"))) void pto_shared_gemm_f32(pto_parallel_for_fn pf, int64_t M,
                                                                    int64_t N, const pto::gemm::Term* t,
                                                                    int nt, float* C, int64_t ldc, bool acc,
                                                                    int tile, const pto::gemm::Epilogue* epi);
#endif
#if defined(PTO_SHARED_GEMM_DEFINE)
extern "C" void pto_shared_gemm_f32(pto_parallel_for_fn pf, int64_t M, int64_t N, const pto::gemm::Term* t,
                                    int nt, float* C, int64_t ldc, bool acc, int tile,
                                    const pto::gemm::Epilogue* epi) {
  pto::gemm::gemm_share_f32(pf, M, N, t, nt, C, ldc, acc, tile, epi);
}
#endif

namespace pto {
namespace gemm {
#if defined(PTO_SHARED_GEMM)
#define PTO_GEMM_SHARE_F32 ::pto_shared_gemm_f32
#else
#define PTO_GEMM_SHARE_F32 ::pto::gemm::gemm_share_f32
#endif

// Rows [r0, r1) (or columns, when split_n) of C = (or +=) sum_t A_t * B_t: one thread's share.
struct Shared {
  int64_t M, N;
  const Term* t;
  int nt;
  float* C;
  int64_t ldc;
  bool acc, split_n;
  int tile;       // choose_tile's
  int64_t grain;  // rows (or columns) per parallel item
  Epilogue epi;
};
inline void run_share(void* ctx, int64_t begin, int64_t end) {
  const Shared& s = *static_cast<const Shared*>(ctx);
  const int64_t r0 = begin * s.grain, r1 = detail::imin(end * s.grain, s.split_n ? s.N : s.M);
  if (r0 >= r1) return;
  Term t[kMaxTerms];
  for (int i = 0; i < s.nt; ++i) {
    t[i] = s.t[i];
    if (s.split_n)
      t[i].b += r0 * t[i].b_cs;
    else
      t[i].a += r0 * t[i].a_rs;
  }
  const int64_t m = s.split_n ? s.M : r1 - r0, n = s.split_n ? r1 - r0 : s.N;
  float* c = s.split_n ? s.C + r0 : s.C + r0 * s.ldc;
  Epilogue epi = s.epi;
  if (s.split_n && epi.bias) epi.bias += r0;
  if (s.split_n && epi.wrap > 0) {  // a wrapped destination's columns: counted from col0
    c = s.C;
    epi.col0 += r0;
  }
  PTO_GEMM_SHARE_F32(nullptr, m, n, t, s.nt, c, s.ldc, s.acc, s.tile, &epi);
}

// dst = (or +=) the sum of the nt products on global memory (M x N = dst's region) on the pool `pf`
// (nullptr: one thread). Products with more rows than columns share each packed B block between
// the threads, each computing its rows of C (gemm_sum_f32); wide and short ones (and those of a
// few row tiles) are split into one contiguous share of columns (rows) per thread, each packing
// its own; a few rows against a transposed B are dot products (gemm_dot.hpp). A strided
// destination (rare: a transposed output view) takes plain loops.
inline void mmatmul_sum_f32(pto_parallel_for_fn pf, float* C, int64_t ldc, int64_t ldc_c, int64_t M,
                            int64_t N, const Term* t, int nt, bool acc, const Epilogue& epi = Epilogue{}) {
  if (M <= 0 || N <= 0) return;
  if (ldc_c != 1) {
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        float& c = C[i * ldc + j * ldc_c];
        float s = acc ? c : 0.0f;
        for (int u = 0; u < nt; ++u) {
          float d = 0.0f;
          for (int64_t p = 0; p < t[u].k; ++p)
            d += t[u].a[i * t[u].a_rs + p * t[u].a_cs] * t[u].b[p * t[u].b_rs + j * t[u].b_cs];
          s = u == 0 && !acc ? d : s + d;
        }
        if (epi.bias) s = elem::add(s, epi.bias[j]);
        if (epi.relu) s = elem::relu(s);
        c = s;
      }
    return;
  }
  if (dot_rows_applies(M, t, nt, epi)) return dot_rows_f32(pf, M, N, t, nt, C, ldc, acc, epi);
  Shared s{M, N, t, nt, C, ldc, acc, N > M, choose_tile(M, N, t, nt), 0, epi};
  // Split the longer side; items of one register tile so the per-thread shares stay even.
  s.grain = s.split_n ? tile_cols(s.tile) : tile_rows(s.tile);
  const int64_t items = ((s.split_n ? N : M) + s.grain - 1) / s.grain;
  double flops = 0;
  for (int i = 0; i < nt; ++i) flops += 2.0 * double(M) * double(N) * double(t[i].k);
  // Small products: one thread (waking the pool costs more than it saves).
  if (pf == nullptr || items < 2 || flops < 4e6) return run_share(&s, 0, items);
  if (!s.split_n && items > 4) return PTO_GEMM_SHARE_F32(pf, M, N, t, nt, C, ldc, acc, s.tile, &epi);
  pf(items, &run_share, &s);
}

template <class T, class U>
PTO_INLINE Term term(GlobalView<T> a, GlobalView<U> b) {
  static_assert(
      std::is_same_v<std::remove_const_t<T>, float> && std::is_same_v<std::remove_const_t<U>, float>,
      "MMATMUL takes f32 views");
  return Term{a.ptr, a.rs, a.cs, b.ptr, b.rs, b.cs, detail::imax(0, detail::imin(a.vc, b.vr))};
}
}  // namespace gemm

// MMATMUL / MMATMUL_ACC: dst = (or +=) a * b on global memory, the whole product in one
// instruction: rows i < min(dst.vr, a.vr), columns j < min(dst.vc, b.vc), k < min(a.vc, b.vr).
template <class D, class T, class U>
inline void mmatmul_f32(pto_parallel_for_fn pf, GlobalView<D> dst, GlobalView<T> a, GlobalView<U> b,
                        bool acc) {
  static_assert(std::is_same_v<std::remove_const_t<D>, float>, "MMATMUL takes f32 views");
  const gemm::Term t = gemm::term(a, b);
  gemm::mmatmul_sum_f32(pf, dst.ptr, dst.rs, dst.cs, detail::imin(dst.vr, a.vr), detail::imin(dst.vc, b.vc),
                        &t, 1, acc);
}

template <class D, class T, class U>
inline void MMATMUL(pto_parallel_for_fn pf, GlobalView<D> dst, GlobalView<T> a, GlobalView<U> b) {
  mmatmul_f32(pf, dst, a, b, false);
}
template <class D, class T, class U>
inline void MMATMUL_ACC(pto_parallel_for_fn pf, GlobalView<D> dst, GlobalView<T> a, GlobalView<U> b) {
  mmatmul_f32(pf, dst, a, b, true);
}

// MMATMUL dst, a, b followed by dst = relu(dst + bias) (relu optional; bias a row of dst's columns,
// broadcast over its rows), folded by code generation (backends/cpu/matmul_runs.h) into the
// product: each element is finished at its final store instead of in a second pass over dst.
template <class D, class T, class U, class V>
inline void mmatmul_bias(pto_parallel_for_fn pf, GlobalView<D> dst, GlobalView<T> a, GlobalView<U> b,
                         GlobalView<V> bias, bool relu) {
  static_assert(
      std::is_same_v<std::remove_const_t<D>, float> && std::is_same_v<std::remove_const_t<V>, float>,
      "MMATMUL takes f32 views");
  const gemm::Term t = gemm::term(a, b);
  const int64_t N = detail::imin(dst.vc, b.vc);
  ScratchBuffer<float> unit(bias.cs == 1 ? 0 : N);  // the micro-kernel reads the bias with unit stride
  for (int64_t j = 0; j < unit.size(); ++j) unit[j] = bias.ptr[j * bias.cs];
  const gemm::Epilogue epi{bias.cs == 1 ? bias.ptr : unit.data(), relu};
  gemm::mmatmul_sum_f32(pf, dst.ptr, dst.rs, dst.cs, detail::imin(dst.vr, a.vr), N, &t, 1, false, epi);
}

// A run of MMATMUL / MMATMUL_ACC instructions into one destination (the first one's `acc`, the
// rest accumulating), fused by code generation into one sum of products: views come in (a, b)
// pairs. Products whose row or column counts differ run one by one, as the instructions would.
template <class D, class... V>
inline void mmatmul_sum(pto_parallel_for_fn pf, bool acc, GlobalView<D> dst, V... views) {
  static_assert(sizeof...(V) % 2 == 0 && sizeof...(V) / 2 <= gemm::kMaxTerms, "(a, b) pairs");
  constexpr int nt = int(sizeof...(V) / 2);
  gemm::Term t[nt];
  int64_t M[nt], N[nt];
  bool same = true;
  int i = 0;
  // (a, b) pairs: views[2i] is the A operand, views[2i+1] the B operand.
  auto take = [&](auto&& a, auto&& b) {
    t[i] = gemm::term(a, b);
    M[i] = detail::imin(dst.vr, a.vr);
    N[i] = detail::imin(dst.vc, b.vc);
    same = same && M[i] == M[0] && N[i] == N[0];
    ++i;
  };
  detail::for_pairs(take, views...);
  if (same) return gemm::mmatmul_sum_f32(pf, dst.ptr, dst.rs, dst.cs, M[0], N[0], t, nt, acc);
  for (int u = 0; u < nt; ++u)
    gemm::mmatmul_sum_f32(pf, dst.ptr, dst.rs, dst.cs, M[u], N[u], &t[u], 1, acc || u > 0);
}

// A run of MMATMULs into a scratch matrix T (rows x `columns`) followed by a copy of each image
// row y of T, columns [y*wrap, y*wrap + keep), into dst's row block y*ldy (dst: rows x keep, unit
// column stride, keep = dst.vc): one sum of products stored through the wrap (gemm_wrapped.hpp).
// Fused by code generation (backends/cpu/matmul_runs.h); views come in (a, b) pairs.
template <class D, class... V>
inline void mmatmul_sum_wrapped(pto_parallel_for_fn pf, GlobalView<D> dst, int64_t ldy, int64_t wrap,
                                int64_t columns, V... views) {
  static_assert(sizeof...(V) % 2 == 0 && sizeof...(V) / 2 <= gemm::kMaxTerms, "(a, b) pairs");
  constexpr int nt = int(sizeof...(V) / 2);
  gemm::Term t[nt];
  int64_t M[nt], N[nt];
  int i = 0;
  auto take = [&](auto&& a, auto&& b) {
    t[i] = gemm::term(a, b);
    M[i] = detail::imin(dst.vr, a.vr);
    N[i] = detail::imin(columns, b.vc);
    ++i;
  };
  detail::for_pairs(take, views...);
  bool same = true;
  for (int u = 1; u < nt; ++u) same = same && M[u] == M[0] && N[u] == N[0];
  // A strided destination (rare): the plain product into a scratch matrix, then copied.
  const bool strided = dst.cs != 1;
  ScratchBuffer<float> wide(strided ? dst.vr * columns : 0);
  float* c = strided ? wide.data() : dst.ptr;
  const int64_t ldc = strided ? columns : dst.rs;
  gemm::Epilogue e;
  if (!strided) {
    e.wrap = wrap;
    e.keep = dst.vc;
    e.ldy = ldy;
  }
  if (same)
    gemm::mmatmul_sum_f32(pf, c, ldc, 1, M[0], N[0], t, nt, false, e);
  else
    for (int u = 0; u < nt; ++u) gemm::mmatmul_sum_f32(pf, c, ldc, 1, M[u], N[u], &t[u], 1, u > 0, e);
  for (int64_t r = 0; strided && r < dst.vr; ++r)
    for (int64_t j = 0; j < columns; ++j)
      if (j % wrap < dst.vc)
        dst.ptr[r * dst.rs + (j / wrap) * ldy + (j % wrap) * dst.cs] = wide[r * columns + j];
}

namespace detail {
// d[i,j] (+)= sum_p a[i,p] b[p,j] over rows [i0, i1) and columns [j0, j1): a plain i-p-j nest whose
// j loop vectorises. Serves non-f32 tiles and the ragged strips of f32 tiles (cheap to compile,
// unlike a second packed-gemm instantiation).
template <class CT, int CD, int C, int C2, class D, class T, class U>
inline void matmul_loops(D* d, const T* a, const U* b, int64_t i0, int64_t i1, int64_t j0, int64_t j1,
                         int64_t k, bool acc) {
  CT row[CD];
  for (int64_t i = i0; i < i1; ++i) {
    D* di = d + i * CD;
    for (int64_t j = j0; j < j1; ++j) row[j] = acc ? convert<CT>(di[j]) : CT(0);
    for (int64_t p = 0; p < k; ++p) {
      const CT aip = convert<CT>(a[i * C + p]);
      const U* bp = b + p * C2;
      if constexpr (std::is_integral_v<CT>)  // integers wrap (pto/elem.hpp)
        for (int64_t j = j0; j < j1; ++j) row[j] = elem::add(row[j], elem::mul(aip, convert<CT>(bp[j])));
      else
        for (int64_t j = j0; j < j1; ++j) row[j] += aip * convert<CT>(bp[j]);
    }
    for (int64_t j = j0; j < j1; ++j) di[j] = convert<D>(row[j]);
  }
}

// f32 tiles: full MR' x NR' blocks run the micro-kernel on the tiles in place (both are small and
// cache-resident, so packing would only cost); the ragged right and bottom strips use the loops.
template <int R, int CD, int C, int C2>
inline void matmul_tiles_f32(float* d, const float* a, const float* b, int64_t m, int64_t n, int64_t k,
                             bool acc) {
  using namespace gemm;
  constexpr int TMR = tile_mr(R);
  constexpr int TNV = C2 >= NR ? NV : C2 / kW;
  constexpr int TNR = (TNV > 0 ? TNV : 1) * kW;
  const int64_t m_full = TNV > 0 ? m / TMR * TMR : 0;
  const int64_t n_full = TNV > 0 ? n / TNR * TNR : 0;
  if constexpr (TNV > 0) {
    for (int64_t i = 0; i < m_full; i += TMR)
      for (int64_t j = 0; j < n_full; j += TNR)
        micro_kernel<TMR, TNV, C, 1, C2>(k, a + i * C, b + j, d + i * CD + j, CD, acc, TMR, TNR);
  }
  if (n_full < n) matmul_loops<float, CD, C, C2>(d, a, b, 0, m_full, n_full, n, k, acc);
  if (m_full < m) matmul_loops<float, CD, C, C2>(d, a, b, m_full, m, 0, n, k, acc);
}

template <class D, int RD, int CD, class T, int R, int C, class U, int R2, int C2>
inline void matmul_tiles(Tile<D, RD, CD>& dst, const Tile<T, R, C>& a, const Tile<U, R2, C2>& b, int64_t m,
                         int64_t n, bool acc) {
  const int64_t k = imax(0, imin(a.vc, b.vr));
  if (m <= 0 || n <= 0) return;
  if constexpr (std::is_same_v<D, float> && std::is_same_v<T, float> && std::is_same_v<U, float>)
    matmul_tiles_f32<R, CD, C, C2>(dst.data, a.data, b.data, m, n, k, acc);
  else if constexpr (std::is_same_v<D, float> && std::is_same_v<T, bf16_t> && std::is_same_v<U, bf16_t>)
    matmul_tiles_bf16<CD, C, C2>(dst.data, a.data, b.data, m, n, k, acc);  // pto/cpu/matmul_bf16.hpp
  else if constexpr (std::is_same_v<D, int32_t> && std::is_same_v<T, int8_t> && std::is_same_v<U, int8_t>)
    matmul_tiles_i8<CD, C, C2>(dst.data, a.data, b.data, m, n, k, acc);  // pto/cpu/matmul_int8.hpp
  else
    matmul_loops<promote_t<D, T, U>, CD, C, C2>(dst.data, a.data, b.data, 0, m, 0, n, k, acc);
}
}  // namespace detail

// dst = a * b over k = min(a.vc, b.vr); dst.valid = a.vr x b.vc.
template <class D, int RD, int CD, class T, int R, int C, class U, int R2, int C2>
inline void TMATMUL(Tile<D, RD, CD>& dst, const Tile<T, R, C>& a, const Tile<U, R2, C2>& b) {
  const int64_t m = detail::imin(a.vr, RD), n = detail::imin(b.vc, CD);
  detail::matmul_tiles(dst, a, b, m, n, false);
  dst.vr = int(m);
  dst.vc = int(n);
}

// dst += a * b for i < min(dst.vr, a.vr), j < min(dst.vc, b.vc); dst.valid unchanged.
template <class D, int RD, int CD, class T, int R, int C, class U, int R2, int C2>
inline void TMATMUL_ACC(Tile<D, RD, CD>& dst, const Tile<T, R, C>& a, const Tile<U, R2, C2>& b) {
  const int64_t m = detail::imin(dst.vr, a.vr), n = detail::imin(dst.vc, b.vc);
  detail::matmul_tiles(dst, a, b, m, n, true);
}

// TMATMUL, then dst[i,j] += bias[0,j] (for j < bias.vc).
template <class D, int RD, int CD, class T, int R, int C, class U, int R2, int C2, class V, int RB, int CB>
inline void TMATMUL_BIAS(Tile<D, RD, CD>& dst, const Tile<T, R, C>& a, const Tile<U, R2, C2>& b,
                         const Tile<V, RB, CB>& bias) {
  TMATMUL(dst, a, b);
  const int64_t n = detail::imin(dst.vc, bias.vc);
  using CT = arith_t<D>;
  for (int64_t i = 0; i < dst.vr; ++i) {
    D* d = dst.data + i * CD;
    for (int64_t j = 0; j < n; ++j)
      d[j] = convert<D>(elem::add(convert<CT>(d[j]), convert<CT>(bias.data[j])));
  }
}

}  // namespace pto
