// The passes of the fused row sequences (pto/cpu/rows.hpp): a row maximum, sums, exp(x - max) with
// its sum, the normalising store. Each is an object that walks one row in blocks of 32 elements:
// begin(), then step() once per whole block of the row, then end() (what is left, and the pass's
// result). Passes over rows of the same length can so share one loop (run_passes): rows.hpp runs
// the last pass of one row, the middle pass of the next and the first pass of the one after
// together, so that the stores of one row stream out while the next rows are read and computed.
//
// Same element functions, roundings and summation orders as the instructions: TROWSUM's and
// TROWMAX's 32 lanes (reduce_span), combined pairwise, then the tail; a pass computes the same
// bits alone or beside others.
#pragma once
#include "pto/cpu/elementwise.hpp"
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
// The same for 32 lane maxima (TROWMAX).
PTO_INLINE float combine32_max(float* acc, float tail) {
  for (int w = 16; w >= 1; w /= 2)
    for (int j = 0; j < w; ++j) acc[j] = MaxR<float>{}(acc[j], acc[j + w]);
  return MaxR<float>{}(acc[0], tail);
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
  PTO_INLINE float plain(float x) const { return x; }
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

// Stores 16 lanes at d; NT: a streaming store (d 64-byte aligned), for an output much bigger than
// the last-level cache (the caller fences once after its rows).
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

// Runs passes over rows of n elements in one loop (each pass keeps its own position).
template <class... P>
PTO_INLINE void run_passes(int64_t n, P&... p) {
  (p.begin(), ...);
  for (int64_t k = 0; k + 32 <= n; k += 32) (p.step(), ...);
  (p.end(), ...);
}

// The row maximum of scale(s) in TROWMAX's order: `result` after end().
template <class Scale>
struct MaxPass {
  const float* s;
  int64_t n;
  Scale sc;
  float result = 0.0f;
  int64_t i = 0;
  // TROWMAX exactly: 32 lanes under OpMax's rule (the accumulator kept where it is greater or NaN),
  // combined pairwise, then the tail.
  static float exact(const float* s, int64_t n, Scale sc) {
    float acc[32];
    for (float& a : acc) a = MaxR<float>::init();
    int64_t i = 0;
    for (; i + 32 <= n; i += 32)
      for (int j = 0; j < 32; ++j) acc[j] = MaxR<float>{}(acc[j], sc.plain(s[i + j]));
    float tail = MaxR<float>::init();
    for (; i < n; ++i) tail = MaxR<float>{}(tail, sc.plain(s[i]));
    return combine32_max(acc, tail);
  }
#if defined(PTO_VF16) && defined(__AVX512F__)
  // The lanes by ExtremeLanes (pto/cpu/reduce.hpp: vmaxps, TROWMAX's rule wherever the row has no
  // NaN); a row with one is done again exactly. The softmax's maximum pass 5.0 -> 2.5 cycles per
  // 16 lanes in L1 (Zen 4).
  ExtremeLanes<true> lanes;
  PTO_INLINE void begin() {}
  PTO_INLINE void step() {
    lanes.add(sc(vf16_load(s + i)), sc(vf16_load(s + i + 16)));
    i += 32;
  }
  PTO_INLINE void end() {
    float tail = MaxR<float>::init();
    for (; i < n; ++i) tail = MaxR<float>{}(tail, sc.plain(s[i]));
    if (!lanes.result(tail, &result)) result = exact(s, n, sc);
  }
#else
  float acc_[32];
  PTO_INLINE void begin() {
    for (float& a : acc_) a = MaxR<float>::init();
  }
  PTO_INLINE void step() {
    for (int j = 0; j < 32; ++j) acc_[j] = MaxR<float>{}(acc_[j], sc.plain(s[i + j]));
    i += 32;
  }
  PTO_INLINE void end() {
    alignas(64) float acc[32];  // not a member: the lanes stay in registers through the loop
    __builtin_memcpy(acc, acc_, sizeof(acc_));
    float tail = MaxR<float>::init();
    for (; i < n; ++i) tail = MaxR<float>{}(tail, sc.plain(s[i]));
    result = combine32_max(acc, tail);
  }
#endif
};

// Sums in TROWSUM's order of term(i) (a float, or 16 lanes at i with PTO_VF16): `result` after
// end(). Term also says which row to prefetch meanwhile (Term::next, or nullptr).
template <class Term>
struct SumPass {
  Term t;
  int64_t n;
  float result = 0.0f;
  int64_t i = 0;
#ifdef PTO_VF16
  vf16 a0, a1;
  PTO_INLINE void begin() { a0 = a1 = vf16{}; }
  PTO_INLINE void step() {
    prefetch_next(t.next, i);
    prefetch_next(t.next, i + 16);
    a0 += t.at16(i);
    a1 += t.at16(i + 16);
    i += 32;
  }
  PTO_INLINE void lanes(float* acc) const {
    vf16_store(acc, a0);
    vf16_store(acc + 16, a1);
  }
#else
  float acc_[32];
  PTO_INLINE void begin() {
    for (float& a : acc_) a = 0.0f;
  }
  PTO_INLINE void step() {
    for (int j = 0; j < 32; ++j) acc_[j] = elem::add(acc_[j], t.at(i + j));
    i += 32;
  }
  PTO_INLINE void lanes(float* acc) const { __builtin_memcpy(acc, acc_, sizeof(acc_)); }
#endif
  PTO_INLINE void end() {
    alignas(64) float acc[32];
    lanes(acc);
    float tail = 0.0f;
    for (; i < n; ++i) tail = elem::add(tail, t.at(i));
    result = combine32(acc, tail);
  }
};

// The terms of the sums: s[i] - c; centred(s[i])^2; d[i] = exp(scale(s[i]) - m) (also stored; m:
// the maximum of scale(s), so the exponents are <= 0 or NaN).
struct DiffTerm {
  const float* s;
  float c;
  const float* next = nullptr;
  PTO_INLINE float at(int64_t i) const { return elem::sub(s[i], c); }
#ifdef PTO_VF16
  PTO_INLINE vf16 at16(int64_t i) const { return vf16_load(s + i) - c; }
#endif
};
template <bool Two>
struct SquareTerm {
  const float* s;
  float c0, c1;
  const float* next;
  PTO_INLINE float at(int64_t i) const {
    const float v = centred<Two>(s[i], c0, c1);
    return rounded(elem::mul(v, v));
  }
#ifdef PTO_VF16
  PTO_INLINE vf16 at16(int64_t i) const {
    const vf16 v = centred16<Two>(s + i, vf16_splat(c0), vf16_splat(c1));
    return vf16_rounded(v * v);
  }
#endif
};
template <class Scale>
struct ExpTerm {
  float* d;
  const float* s;
  float m;
  const float* next;
  Scale sc;
  PTO_INLINE float at(int64_t i) const { return d[i] = elem::exp(elem::sub(sc(s[i]), m)); }
#ifdef PTO_VF16
  PTO_INLINE vf16 at16(int64_t i) const {
    const vf16 e = vexp16<true>(sc(vf16_load(s + i)) - vf16_splat(m));  // <= 0: m is their maximum
    vf16_store(d + i, e);
    return e;
  }
#endif
};

// exp(s[i] - m), summed only (log_softmax: the exponentials are dead); m: the maximum of s.
struct ExpSumTerm {
  const float* s;
  float m;
  const float* next;
  PTO_INLINE float at(int64_t i) const { return elem::exp(elem::sub(s[i], m)); }
#ifdef PTO_VF16
  PTO_INLINE vf16 at16(int64_t i) const { return vexp16<true>(vf16_load(s + i) - vf16_splat(m)); }
#endif
};

// d[i] = (centred(s[i]) * r) [* w[i]] [+ b[i]]; NT: by streaming stores (d may be s); prefetches
// `next` meanwhile.
template <bool Two, bool W, bool B, bool NT>
struct NormalizePass {
  float* d;
  const float* s;
  int64_t n;
  float c0, c1, r;
  const float* w;
  const float* b;
  const float* next = nullptr;
  int64_t i = 0;
  PTO_INLINE void one(int64_t k) {
    float v = elem::mul(centred<Two>(s[k], c0, c1), r);
    if (W) v = elem::mul(v, w[k]);
    if (B) v = elem::add(rounded(v), b[k]);
    d[k] = v;
  }
#ifdef PTO_VF16
  PTO_INLINE void sixteen() {
    prefetch_next(next, i);
    vf16 v = centred16<Two>(s + i, vf16_splat(c0), vf16_splat(c1)) * r;
    if (W) v = v * vf16_load(w + i);
    if (B) v = vf16_rounded(v) + vf16_load(b + i);
    store16<NT>(d + i, v);
    i += 16;
  }
  PTO_INLINE void begin() {
    if constexpr (NT)  // up to d's first 64-byte boundary one by one: same values as the lanes
      for (; i < n && (reinterpret_cast<uintptr_t>(d + i) & 63) != 0; ++i) one(i);
  }
  PTO_INLINE void step() {
    if (i + 32 <= n) sixteen(), sixteen();  // behind the loop by d's alignment: end() catches up
  }
  PTO_INLINE void end() {
    while (i + 16 <= n) sixteen();
    for (; i < n; ++i) one(i);
  }
#else
  PTO_INLINE void begin() {}
  PTO_INLINE void step() {
    for (int j = 0; j < 32; ++j) one(i + j);
    i += 32;
  }
  PTO_INLINE void end() {
    for (; i < n; ++i) one(i);
  }
#endif
};

// One pass alone: the functions the fused sequences elsewhere (rows_grad.hpp) call.
// Sum of s[i] - c in TROWSUM's order.
PTO_INLINE float sum_diff(const float* s, int64_t n, float c) {
  SumPass<DiffTerm> p{{s, c}, n};
  run_passes(n, p);
  return p.result;
}
// Sum of centred(s[i])^2 in TROWSUM's order.
template <bool Two>
PTO_INLINE float sum_sq_diff(const float* s, int64_t n, float c0, float c1, const float* next) {
  SumPass<SquareTerm<Two>> p{{s, c0, c1, next}, n};
  run_passes(n, p);
  return p.result;
}

}  // namespace detail
}  // namespace fused
}  // namespace pto
