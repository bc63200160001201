// The driver shared by the low-precision tile matmuls (pto/cpu/matmul_bf16.hpp: bf16 x bf16 -> f32,
// pto/cpu/matmul_int8.hpp: int8 x int8 -> int32): both run an MR x NR register block of one
// micro-kernel over the row blocks of A for each NR-column panel of B, reading A in place. The
// element-specific parts (packing B, the micro-kernels, int8's row-sum correction) are a "kernel
// family" K, constructed once per call (it packs what it needs), with
//   using A (operand element), D (result element);
//   static constexpr int MR, NR;
//   K(const A* a, const A* b, int64_t m, int64_t n, int64_t k);
//   template <int M_> void block(const A* rows, int64_t i0, int64_t jp, D* c, int64_t ldc, bool acc,
//                                int64_t mr, int64_t nr) const;   // rows: A's row i0, row stride C
#pragma once
#include "pto/cpu/types.hpp"

namespace pto {
namespace lowp {

// Per-thread scratch (packed B, the ragged rows of A, int8's row corrections), grown on demand.
// Exported for the same reason as gemm::pack_buffers: one thread-local object per thread across all
// loaded kernels.
inline namespace abi_v1 {
struct Scratch {
  void* p = nullptr;
  int64_t cap = 0;
  ~Scratch() {
    if (p) ::operator delete(p, std::align_val_t(64));
  }
  template <class T>
  T* get(int64_t n) {
    const int64_t bytes = n * int64_t(sizeof(T));
    if (bytes > cap) {
      if (p) ::operator delete(p, std::align_val_t(64));
      p = ::operator new(size_t(bytes), std::align_val_t(64));
      cap = bytes;
    }
    return static_cast<T*>(p);
  }
};
enum ScratchSlot { kPackedB = 0, kTailRows = 1, kRowCorr = 2, kSlots = 3 };
#if defined(__GNUC__) || defined(__clang__)
__attribute__((visibility("default")))
#endif
inline Scratch& scratch(ScratchSlot which) {
  static thread_local Scratch s[kSlots];
  return s[which];
}
}  // namespace abi_v1

// The types and block shape a kernel family declares (the rest of its interface is above).
template <class A_, class D_, int MR_, int NR_>
struct Family {
  using A = A_;
  using D = D_;
  static constexpr int MR = MR_, NR = NR_;
};

// Stores an M_ x (NV vectors of W lanes) register block into C (row stride ldc; elements E, the
// vectors' lane type, which may alias D as unsigned aliases int32_t), only mr x nr of it, adding to
// C's values when acc.
template <int M_, int NV, int W, class V, class D>
PTO_INLINE void store_block(const V (&r)[M_][NV], D* c, int64_t ldc, bool acc, int64_t mr, int64_t nr) {
  typedef std::remove_reference_t<decltype(r[0][0][0])> E;
  typedef E VU __attribute__((vector_size(W * sizeof(E)), aligned(4), may_alias));
  constexpr int NR = NV * W;
  E* ce = reinterpret_cast<E*>(c);
  if (mr == M_ && nr == NR) {
#pragma GCC unroll 16
    for (int i = 0; i < M_; ++i)
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) {
        VU* cp = reinterpret_cast<VU*>(ce + i * ldc + v * W);
        *cp = acc ? *cp + r[i][v] : r[i][v];
      }
    return;
  }
  alignas(64) E tmp[M_ * NR];
#pragma GCC unroll 16
  for (int i = 0; i < M_; ++i)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) __builtin_memcpy(tmp + i * NR + v * W, &r[i][v], sizeof(V));
  for (int64_t i = 0; i < mr; ++i)
    for (int64_t j = 0; j < nr; ++j)
      ce[i * ldc + j] = acc ? E(ce[i * ldc + j] + tmp[i * NR + j]) : tmp[i * NR + j];
}

// d (row stride CD) (+)= a (m x k, row stride C) * b (k x n), with the kernel family K.
// Row blocks: when m is not a multiple of MR but splits into blocks of MR, MR-1 and MR-2 rows
// (any m >= (MR-2) * ceil(m / MR), e.g. 128 = 8 x 13 + 2 x 12 for MR = 14) the blocks are balanced,
// so no register row is wasted; otherwise MR-row blocks and a last, ragged one copied into a zeroed
// MR-row block (same row stride), so the kernel never reads past the tile.
template <class K, int CD, int C>
inline void matmul_blocks(typename K::D* d, const typename K::A* a, const typename K::A* b, int64_t m,
                          int64_t n, int64_t k, bool acc) {
  using A = typename K::A;
  constexpr int MR = K::MR, NR = K::NR;
  static_assert(MR >= 3, "balanced blocks use MR, MR-1 and MR-2 rows");
  if (m <= 0 || n <= 0) return;
  if (k <= 0) {
    if (!acc)
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) d[i * CD + j] = typename K::D(0);
    return;
  }
  const K ker(a, b, m, n, k);
  const int64_t panels = (n + NR - 1) / NR;
  const int64_t blocks = (m + MR - 1) / MR;
  const int64_t base = m / blocks, extra = m % blocks;  // `extra` blocks of base+1 rows, then base
  if (m % MR != 0 && base >= MR - 2) {
    for (int64_t jp = 0; jp < panels; ++jp) {
      const int64_t j0 = jp * NR, nr = detail::imin(NR, n - j0);
      int64_t i0 = 0;
      for (int64_t bi = 0; bi < blocks; ++bi) {
        const int64_t rows = base + (bi < extra ? 1 : 0);
        if (rows == MR)
          ker.template block<MR>(a + i0 * C, i0, jp, d + i0 * CD + j0, CD, acc, MR, nr);
        else if (rows == MR - 1)
          ker.template block<MR - 1>(a + i0 * C, i0, jp, d + i0 * CD + j0, CD, acc, MR - 1, nr);
        else
          ker.template block<MR - 2>(a + i0 * C, i0, jp, d + i0 * CD + j0, CD, acc, MR - 2, nr);
        i0 += rows;
      }
    }
    return;
  }
  const int64_t m_full = m / MR * MR;
  A* tail = nullptr;
  if (m_full < m) {
    tail = scratch(kTailRows).get<A>(int64_t(MR) * C);
    __builtin_memset(static_cast<void*>(tail), 0, sizeof(A) * size_t(MR) * C);
    for (int64_t i = m_full; i < m; ++i)
      __builtin_memcpy(tail + (i - m_full) * C, a + i * C, sizeof(A) * size_t(k));
  }
  for (int64_t jp = 0; jp < panels; ++jp) {
    const int64_t j0 = jp * NR, nr = detail::imin(NR, n - j0);
    for (int64_t i0 = 0; i0 < m_full; i0 += MR)
      ker.template block<MR>(a + i0 * C, i0, jp, d + i0 * CD + j0, CD, acc, MR, nr);
    if (tail) ker.template block<MR>(tail, m_full, jp, d + m_full * CD + j0, CD, acc, m - m_full, nr);
  }
}

}  // namespace lowp
}  // namespace pto
