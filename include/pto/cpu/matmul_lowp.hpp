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
//
// Whole-matrix products on global memory (MMATMUL of narrow operands) have a driver of their own
// below (mmatmul): both operands packed into the micro-kernel's order from any strides, the whole
// K in registers.
#pragma once
#include <type_traits>
#include <utility>

#include "pto/abi.h"
#include "pto/cpu/gemm_kernel.hpp"
#include "pto/cpu/types.hpp"

namespace pto {
namespace lowp {

// Per-thread scratch (packed B, the ragged rows of A, int8's row corrections), grown on demand.
// Exported for the same reason as gemm::pack_buffers: one thread-local object per thread across all
// loaded kernels.
inline namespace abi_v2 {
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
enum ScratchSlot { kPackedB = 0, kTailRows = 1, kRowCorr = 2, kPackedA = 3, kSlots = 4 };
#if defined(__GNUC__) || defined(__clang__)
__attribute__((visibility("default")))
#endif
inline Scratch& scratch(ScratchSlot which) {
  static thread_local Scratch s[kSlots];
  return s[which];
}
}  // namespace abi_v2

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

// ---- packing A by 32-bit words (a bf16 K pair, an int8 K quad) -------------------------------
typedef uint32_t v16u __attribute__((vector_size(64)));

// One MR-row panel of A by 32-bit words: ap[p * MR + i] = the word at s + i * rs + 4 * p (rs in
// bytes) for p < words, i < rows; zero for rows past `rows`.
template <int MR>
inline void pack_a_words(const unsigned char* s, int64_t rs, int64_t rows, int64_t words, uint32_t* ap) {
  int64_t p0 = 0;
#if defined(__AVX512F__)
  if constexpr (MR <= 16) {
    // Blocks of 16 words of the MR rows transposed in registers (16 vector loads, 64 shuffles
    // and MR-lane stores instead of 32-bit copies; rows past MR are zero lanes, never stored).
    if (rows == MR)
      for (; p0 + 16 <= words; p0 += 16) {
        v16u x[16];
#pragma GCC unroll 16
        for (int i = 0; i < 16; ++i) {
          x[i] = v16u{};
          if (i < MR) __builtin_memcpy(&x[i], s + i * rs + 4 * p0, sizeof(v16u));
        }
        gemm::transpose16(x);
#pragma GCC unroll 16
        for (int p = 0; p < 16; ++p) __builtin_memcpy(ap + (p0 + p) * MR, &x[p], MR * 4);
      }
  }
#endif
  if (rows == MR) {
    // MR row streams, contiguous writes (as gemm::pack_a).
    for (int64_t p = p0; p < words; ++p)
#pragma GCC unroll 16
      for (int i = 0; i < MR; ++i) __builtin_memcpy(ap + p * MR + i, s + i * rs + 4 * p, 4);
  } else {
    for (int64_t p = 0; p < words; ++p) {
      for (int i = 0; i < rows; ++i) __builtin_memcpy(ap + p * MR + i, s + i * rs + 4 * p, 4);
      for (int64_t i = rows; i < MR; ++i) ap[p * MR + i] = 0u;
    }
  }
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

// ---- whole-matrix products (MMATMUL with narrow operands) ---------------------------------------
// A "global kernel family" G packs both operands into the micro-kernel's order and runs it over
// the whole K with the sums in registers, so each element of C is stored once (rounded once to a
// bf16 C) and the dot product is one chain, the order of the tile instruction:
//   using A (operand element), PA, PB (packed A / B elements);
//   static constexpr int MR, NR;
//   static int64_t depth(int64_t k);            // packed steps per row (K pairs for bf16)
//   static int64_t b_panel(int64_t k);          // PB elements of one packed NR-column panel
//       // (also where the packed rows from k on start, for k a multiple of kPackStripK)
//   static void pack_a(const A* a, int64_t rs, int64_t cs, int64_t rows, int64_t k, PA* ap);
//       // one MR-row panel: ap[p * MR + i], rows past `rows` zero
//   static void pack_b(const A* b, int64_t rs, int64_t cs, int64_t k, int64_t cols, PB* bp);
//       // one NR-column panel, columns past `cols` zero
//   template <int M_, class D> static void kernel(int64_t k, const PA* ap, const PB* bp, D* c,
//       int64_t ldc, bool acc, int64_t mr, int64_t nr);  // C block (+)= A panel * B panel
// and, for families with an element-wise epilogue E fused into the store (int8's scales):
//   template <int M_, class D> static void kernel_epi(int64_t k, const PA* ap, const PB* bp, D* c,
//       int64_t ldc, int64_t mr, int64_t nr, const E& e, int64_t row0, int64_t col0);
//       // C block = e(A panel * B panel), the block's first element at (row0, col0) of C
// A family may also declare `using Scope = ...;`, an object that lives for each share of work
// (pto/cpu/amx.hpp's tile configuration); families without one get an empty scope.
struct NoEpilogue {};
struct NoScope {};
template <class G, class = void>
struct ScopeOf {
  using type = NoScope;
};
template <class G>
struct ScopeOf<G, std::void_t<typename G::Scope>> {
  using type = typename G::Scope;
};
template <class T>
struct Strided {  // element (i, j) at p[i * rs + j * cs]
  const T* p;
  int64_t rs, cs;
};

// The row panels of an m-row product: balanced as matmul_blocks' (MR, MR-1 and MR-2 rows where
// that covers m), else MR-row panels and a ragged last one.
struct RowPanels {
  int64_t count, base, extra;
  bool balanced;
  RowPanels(int64_t m, int mr)
      : count((m + mr - 1) / mr), base(m / count), extra(m % count), balanced(m % mr != 0 && base >= mr - 2) {
    if (!balanced) base = mr, extra = 0;
  }
  int64_t row(int64_t i) const { return i * base + detail::imin(i, extra); }
  int64_t rows(int64_t i, int64_t m) const { return detail::imin(base + (i < extra ? 1 : 0), m - row(i)); }
};

// Bytes of packed B per block of columns (the loop over A's panels runs once per block): measured
// on Zen 4 (1 MiB L2, K = 2048), 2 MiB blocks beat 0.5 MiB ones by 8%, since each block rereads
// the packed A of the whole share, which costs more than B panels coming from L3. A family may
// declare its own `static constexpr int64_t kBBlockBytes` (the AMX ones: 1 MiB, half their L2).
#ifndef PTO_LOWP_BBLOCK
#define PTO_LOWP_BBLOCK (int64_t(2) << 20)
#endif
template <class G, class = void>
struct BBlockBytes {
  static constexpr int64_t value = PTO_LOWP_BBLOCK;
};
template <class G>
struct BBlockBytes<G, std::void_t<decltype(G::kBBlockBytes)>> {
  static constexpr int64_t value = G::kBBlockBytes;
};
// Packed B panels per block of columns for the family G at depth k.
template <class G>
inline int64_t b_block_panels(int64_t k) {
  return detail::imax(1, BBlockBytes<G>::value / (G::b_panel(k) * int64_t(sizeof(typename G::PB))));
}
// Rows of a row-major B packed per strip (PackedOperands::pack): a multiple of every family's
// depth step (K pairs, K quads), so a strip's packed rows start at b_panel(k0).
constexpr int64_t kPackStripK = 128;
// Where both packed operands together would take more than this, each share packs its own, one
// block of B at a time (gemm_share) instead of the whole product's operands once.
constexpr int64_t kPackedWholeBytes = int64_t(256) << 20;

// Both operands of C (m x n) = A (m x k) * B (k x n), packed: row panel i of A at ap + i * MR *
// depth(k), column panel j of B at bp + j * b_panel(k).
template <class G>
struct PackedOperands {
  using A = typename G::A;
  int64_t m, n, k;
  Strided<A> a, b;
  RowPanels rp;
  int64_t col_panels;
  typename G::PA* ap;
  typename G::PB* bp;
  int64_t b_first = 0;  // B's panel j is at bp + (j - b_first) * b_panel(k)
  // Packs A's row panels [i0, i1) and B's column panels [j0, j1).
  void pack(int64_t i0, int64_t i1, int64_t j0, int64_t j1) const {
    const int64_t kd = G::depth(k);
    for (int64_t i = i0; i < i1; ++i)
      G::pack_a(a.p + rp.row(i) * a.rs, a.rs, a.cs, rp.rows(i, m), k, ap + i * G::MR * kd);
    // A row-major B is packed in strips of kPackStripK rows across all the panels [j0, j1): one
    // panel's 64 bytes per row at a time would touch a new page on every row (a TLB miss per row
    // when rows are 4 KiB apart), a strip's rows stay in L2 while each of its panels is written.
    // A strip starting at row k0 starts at element b_panel(k0) of a packed panel (k0 even).
    const int64_t strip = b.cs == 1 ? kPackStripK : k;
    for (int64_t k0 = 0; k0 < k; k0 += strip) {
      const int64_t kk = detail::imin(strip, k - k0), off = k0 == 0 ? 0 : G::b_panel(k0);
      for (int64_t j = j0; j < j1; ++j) {
        const int64_t c = j * G::NR;
        G::pack_b(b.p + k0 * b.rs + c * b.cs, b.rs, b.cs, kk, detail::imin(G::NR, n - c),
                  bp + (j - b_first) * G::b_panel(k) + off);
      }
    }
  }
  // Items [begin, end) of the pool's packing loop over count() items: the same share of A's
  // panels and of B's, so contiguous ranges of items balance the threads' bytes.
  int64_t count() const { return rp.count + col_panels; }
  static void pack_items(void* ctx, int64_t begin, int64_t end) {
    const PackedOperands& o = *static_cast<const PackedOperands*>(ctx);
    const int64_t n = o.count();
    o.pack(begin * o.rp.count / n, end * o.rp.count / n, begin * o.col_panels / n, end * o.col_panels / n);
  }
  // C's row panels [i0, i1) x column panels [j0, j1): blocks of columns outer, A's panels, then
  // B's panels of the block.
  template <class D, class E = NoEpilogue>
  void multiply(int64_t i0, int64_t i1, int64_t j0, int64_t j1, D* c, int64_t ldc, bool acc,
                const E* epi = nullptr, int64_t row0 = 0) const {
    constexpr int MR = G::MR, NR = G::NR;
    const typename ScopeOf<G>::type scope;
    const int64_t kd = G::depth(k), bpn = G::b_panel(k), block = b_block_panels<G>(k);
    for (int64_t jb = j0; jb < j1; jb += block) {
      const int64_t je = detail::imin(j1, jb + block);
      for (int64_t i = i0; i < i1; ++i) {
        const int64_t r = rp.row(i), rows = rp.rows(i, m);
        const typename G::PA* pa = ap + i * MR * kd;
        for (int64_t j = jb; j < je; ++j) {
          const typename G::PB* pb = bp + (j - b_first) * bpn;
          D* cb = c + r * ldc + j * NR;
          const int64_t nr = detail::imin(NR, n - j * NR);
          if constexpr (std::is_same_v<E, NoEpilogue>) {
            if (rows == MR - 1)
              G::template kernel<MR - 1>(k, pa, pb, cb, ldc, acc, rows, nr);
            else if (rows == MR - 2 && rp.balanced)
              G::template kernel<MR - 2>(k, pa, pb, cb, ldc, acc, rows, nr);
            else
              G::template kernel<MR>(k, pa, pb, cb, ldc, acc, rows, nr);
          } else {
            if (rows == MR - 1)
              G::template kernel_epi<MR - 1>(k, pa, pb, cb, ldc, rows, nr, *epi, row0 + r, j * NR);
            else if (rows == MR - 2 && rp.balanced)
              G::template kernel_epi<MR - 2>(k, pa, pb, cb, ldc, rows, nr, *epi, row0 + r, j * NR);
            else
              G::template kernel_epi<MR>(k, pa, pb, cb, ldc, rows, nr, *epi, row0 + r, j * NR);
          }
        }
      }
    }
  }
};

// C (m x n, row stride ldc) (+)= A (m x k) * B (k x n) on one thread, packing one block of B's
// panels at a time into this thread's scratch (for products too big to pack whole).
template <class G, class D, class E = NoEpilogue>
inline void gemm_share(int64_t m, int64_t n, int64_t k, Strided<typename G::A> a, Strided<typename G::A> b,
                       D* c, int64_t ldc, bool acc, const E* epi = nullptr, int64_t row0 = 0) {
  if (m <= 0 || n <= 0) return;
  const int64_t bpn = G::b_panel(k), block = b_block_panels<G>(k);
  PackedOperands<G> o{m, n, k, a, b, RowPanels(m, G::MR), (n + G::NR - 1) / G::NR, nullptr, nullptr};
  o.ap = scratch(kPackedA).get<typename G::PA>(o.rp.count * G::MR * G::depth(k));
  o.bp = scratch(kPackedB).get<typename G::PB>(detail::imin(block, o.col_panels) * bpn);
  o.pack(0, o.rp.count, 0, 0);
  for (int64_t jb = 0; jb < o.col_panels; jb += block) {
    const int64_t je = detail::imin(o.col_panels, jb + block);
    o.b_first = jb;
    o.pack(0, 0, jb, je);
    o.multiply(0, o.rp.count, jb, je, c, ldc, acc, epi, row0);
  }
}

// One call's product on the pool, after its operands were packed: shares of row panels (or, for a
// wide and short product, column panels).
template <class G, class D, class E>
struct PackedProduct {
  const PackedOperands<G>* o;
  D* c;
  int64_t ldc;
  bool acc, split_n;
  const E* epi;
  static void run(void* ctx, int64_t begin, int64_t end) {
    const PackedProduct& p = *static_cast<const PackedProduct*>(ctx);
    if (p.split_n)
      p.o->multiply(0, p.o->rp.count, begin, end, p.c, p.ldc, p.acc, p.epi);
    else
      p.o->multiply(begin, end, 0, p.o->col_panels, p.c, p.ldc, p.acc, p.epi);
  }
};

// Rows [r0, r1) of one call's product, each share packing its own operands (gemm_share).
template <class G, class D, class E>
struct SharedProduct {
  int64_t m, n, k;
  Strided<typename G::A> a, b;
  D* c;
  int64_t ldc;
  bool acc;
  const E* epi;
  static void run(void* ctx, int64_t begin, int64_t end) {
    const SharedProduct& g = *static_cast<const SharedProduct*>(ctx);
    const int64_t r0 = begin * G::MR, r1 = detail::imin(end * G::MR, g.m);
    if (r0 < r1)
      gemm_share<G>(r1 - r0, g.n, g.k, Strided<typename G::A>{g.a.p + r0 * g.a.rs, g.a.rs, g.a.cs}, g.b,
                    g.c + r0 * g.ldc, g.ldc, g.acc, g.epi, r0);
  }
};

// dst = (or +=, acc) a * b on global memory with the family G: rows i < min(dst.vr, a.vr), columns
// j < min(dst.vc, b.vc), k < min(a.vc, b.vr). Split across the pool `pf` (nullptr: one thread) in
// two steps: the threads pack both operands whole into the calling thread's scratch (each panel
// once), then multiply shares of row (or column) panels, so no share packs what another one
// packs too. A strided destination goes through a row-major scratch. With an epilogue `epi` (not
// acc; the family's kernel_epi), dst = epi(a * b), finished at each element's store; E::at(0, i, j)
// gives an element of an empty product (K = 0).
template <class G, class D, class T, class E = NoEpilogue>
inline void mmatmul(pto_parallel_for_fn pf, GlobalView<D> dst, GlobalView<T> a, GlobalView<T> b, bool acc,
                    const E* epi = nullptr) {
  using DD = std::remove_const_t<D>;
  const int64_t M = detail::imin(dst.vr, a.vr), N = detail::imin(dst.vc, b.vc);
  const int64_t K = detail::imax(0, detail::imin(a.vc, b.vr));
  if (M <= 0 || N <= 0) return;
  if (K <= 0) {
    if (!acc)
      for (int64_t i = 0; i < M; ++i)
        for (int64_t j = 0; j < N; ++j) {
          if constexpr (std::is_same_v<E, NoEpilogue>)
            dst.ptr[i * dst.rs + j * dst.cs] = DD{};
          else
            dst.ptr[i * dst.rs + j * dst.cs] = epi->at(0, i, j);
        }
    return;
  }
  if (dst.cs != 1) {  // rare (a transposed output view)
    ScratchBuffer<DD> t(M * N);
    for (int64_t i = 0; acc && i < M; ++i)
      for (int64_t j = 0; j < N; ++j) t[i * N + j] = dst.ptr[i * dst.rs + j * dst.cs];
    mmatmul<G>(pf, GlobalView<DD>{t.data(), N, 1, M, N}, a, b, acc, epi);
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) dst.ptr[i * dst.rs + j * dst.cs] = t[i * N + j];
    return;
  }
  // Small products: one thread (waking the pool costs more than it saves).
  if (2.0 * double(M) * double(N) * double(K) < 4e6) pf = nullptr;
  PackedOperands<G> o{M,
                      N,
                      K,
                      {a.ptr, a.rs, a.cs},
                      {b.ptr, b.rs, b.cs},
                      RowPanels(M, G::MR),
                      (N + G::NR - 1) / G::NR,
                      nullptr,
                      nullptr};
  const int64_t a_elems = o.rp.count * G::MR * G::depth(K), b_elems = o.col_panels * G::b_panel(K);
  const double bytes = double(a_elems) * sizeof(typename G::PA) + double(b_elems) * sizeof(typename G::PB);
  if (bytes > double(kPackedWholeBytes)) {
    SharedProduct<G, DD, E> g{M, N, K, o.a, o.b, dst.ptr, dst.rs, acc, epi};
    const int64_t items = (M + G::MR - 1) / G::MR;
    if (pf == nullptr || items < 2) return SharedProduct<G, DD, E>::run(&g, 0, items);
    return pf(items, &SharedProduct<G, DD, E>::run, &g);
  }
  o.ap = scratch(kPackedA).get<typename G::PA>(a_elems);
  o.bp = scratch(kPackedB).get<typename G::PB>(b_elems);
  PackedProduct<G, DD, E> p{&o, dst.ptr, dst.rs, acc, N > M, epi};
  const int64_t items = p.split_n ? o.col_panels : o.rp.count;
  if (pf == nullptr || items < 2) {
    o.pack(0, o.rp.count, 0, o.col_panels);
    return PackedProduct<G, DD, E>::run(&p, 0, items);
  }
  pf(o.count(), &PackedOperands<G>::pack_items, &o);
  pf(items, &PackedProduct<G, DD, E>::run, &p);
}

}  // namespace lowp
}  // namespace pto
