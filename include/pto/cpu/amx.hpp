// Intel AMX (Advanced Matrix Extensions) for the CPU backend: whether the process may use the
// tile registers, and the one tile configuration the matmul families use.
//
// AMX needs three things: a compiler targeting a CPU that has it (-march=native on Sapphire
// Rapids and later defines __AMX_TILE__), a kernel that enables the 8 KiB tile state for the
// process (Linux >= 5.16: arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)), and no request
// to stay off the native dot products (PTO_NO_NATIVE_DOT, set by PYPTO_NATIVE_DOT=0; or
// PTO_NO_AMX, set by PYPTO_AMX=0, which keeps AVX512-BF16 / VNNI but not the tiles). The first
// two are asked at run time, once per process: where the kernel refuses, the families fall back
// to the vector paths of the same header.
//
// The tile configuration (palette 1) is per thread and other libraries in the process (oneDNN)
// load their own, so a matmul loads it at the start of each share of work (AmxScope) and
// releases the tiles at its end; nothing is assumed across calls.
#pragma once
#include <cstdint>
#include <cstring>
#include <utility>

#include "pto/base.hpp"

#if defined(__AMX_TILE__) && defined(__linux__) && defined(__GNUC__) && !defined(PTO_NO_NATIVE_DOT) && \
    !defined(PTO_NO_AMX) && !defined(__CUDACC__)
#define PTO_AMX_TILE 1

#include <sys/syscall.h>
#include <unistd.h>
#include "pto/cpu/transpose.hpp"
#else
#define PTO_AMX_TILE 0
#endif

namespace pto {
namespace amx {

#if PTO_AMX_TILE
// The tile instructions as inline assembly (both syntaxes), not <immintrin.h>: with -march=native
// on a CPU with AVX-512 that header costs ~0.25 s of every kernel's compile. Tile numbers are
// literals pasted into the instruction text. Loads and stores name memory as clobbered, since
// the compiler cannot see which bytes a strided tile access touches.
#define PTO_TILE_LOADD(t, base, stride)                                     \
  __asm__ volatile("{tileloadd\t(%0,%1,1), %%tmm" #t "|tileloadd\t%%tmm" #t \
                   ", [%0+%1*1]}" ::"r"((const void*)(base)),               \
                   "r"((long)(stride))                                      \
                   : "memory")
#define PTO_TILE_STORED(t, base, stride)                                                 \
  __asm__ volatile("{tilestored\t%%tmm" #t ", (%0,%1,1)|tilestored\t[%0+%1*1], %%tmm" #t \
                   "}" ::"r"((void*)(base)),                                             \
                   "r"((long)(stride))                                                   \
                   : "memory")
#define PTO_TILE_ZERO(t) __asm__ volatile("tilezero\t%%tmm" #t::)
#define PTO_TILE_DOT(insn, c, a, b)                                                                   \
  __asm__ volatile("{" insn "\t%%tmm" #b ", %%tmm" #a ", %%tmm" #c "|" insn "\t%%tmm" #c ", %%tmm" #a \
                   ", %%tmm" #b "}" ::)

// Products with fewer rows go to the vector kernels: a 32-row block of tiles computes zeros for
// the rows it lacks.
constexpr int64_t kMinRows = 16;

// Whether the kernel lets this process use the tile data (asked once; the answer is per process).
inline bool enabled() {
  static const bool ok = [] {
    constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
    return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
  }();
  return ok;
}

// Palette 1 with all eight tiles at their largest shape, 16 rows of 64 bytes: a bf16 A tile is
// 16 rows x 32 K, a B tile 16 K pairs (or int8 K quads) x 16 columns, an accumulator 16 x 16
// 32-bit values. Ragged shapes are padded with zeros by the packing, never by the configuration.
struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
  TileConfig() {
    for (int t = 0; t < 8; ++t) colsb[t] = 64, rows[t] = 16;
  }
};

// Loads the configuration for the lifetime of a share of work and releases the tiles after it.
struct Scope {
  Scope() {
    static const TileConfig cfg;
    __asm__ volatile("ldtilecfg\t%0" ::"m"(cfg));
  }
  ~Scope() { __asm__ volatile("tilerelease" ::: "memory"); }
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;
};

// The dot-product instruction of a block's steps.
enum class Dot { kBf16, kInt8 };  // TDPBF16PS (bf16 pairs into f32), TDPBSSD (int8 quads into int32)

#define PTO_AMX_DOT(D, c, a, b)           \
  do {                                    \
    if constexpr (D == Dot::kBf16)        \
      PTO_TILE_DOT("tdpbf16ps", c, a, b); \
    else                                  \
      PTO_TILE_DOT("tdpbssd", c, a, b);   \
  } while (0)

// The accumulators tmm0-3 (a 32 x 32 block of 4-byte sums: rows 0-15 / 16-31 x columns 0-15 /
// 16-31) from, to, or as zeros, a block at c with rows ld bytes apart.
PTO_INLINE void load_acc(const void* c, int64_t ld) {
  const char* p = static_cast<const char*>(c);
  PTO_TILE_LOADD(0, p, ld);
  PTO_TILE_LOADD(1, p + 64, ld);
  PTO_TILE_LOADD(2, p + 16 * ld, ld);
  PTO_TILE_LOADD(3, p + 16 * ld + 64, ld);
}
PTO_INLINE void store_acc(void* c, int64_t ld) {
  char* p = static_cast<char*>(c);
  PTO_TILE_STORED(0, p, ld);
  PTO_TILE_STORED(1, p + 64, ld);
  PTO_TILE_STORED(2, p + 16 * ld, ld);
  PTO_TILE_STORED(3, p + 16 * ld + 64, ld);
}
PTO_INLINE void zero_acc() {
  PTO_TILE_ZERO(0);
  PTO_TILE_ZERO(1);
  PTO_TILE_ZERO(2);
  PTO_TILE_ZERO(3);
}

// x[B], y[B], x[B+1], y[B+1], ...: the lanes of a vector R interleaving two vectors (the K pairs
// or quads of B's columns from its rows, in the B tile layout).
template <class R, int B, class V, size_t... I>
PTO_INLINE R zip(V x, V y, std::index_sequence<I...>) {
  constexpr int n = int(sizeof(V) / sizeof(x[0]));
  return __builtin_shufflevector(x, y, int((I & 1) ? n + B + I / 2 : B + I / 2)...);
}
template <class R, int B = 0, class V>
PTO_INLINE R zip(V x, V y) {
  return zip<R, B>(x, y, std::make_index_sequence<sizeof(R) / sizeof(x[0])>{});
}

// Packs one 32-row panel of A (elements E: bf16 or int8; element (i, k) at a[i * rs + k * cs],
// `rows` valid rows, k columns) into `steps` tile steps of 64 bytes per row: step q, row i holds
// A(i, q * S .. q * S + S - 1) for S = 64 / sizeof(E), zeros past k and past `rows`. A step's
// 2 KiB are the two A tiles of the families' block (rows 0-15, then 16-31).
template <class E>
inline void pack_a_rows(const E* a, int64_t rs, int64_t cs, int64_t rows, int64_t k, int64_t steps,
                        uint32_t* ap) {
  constexpr int64_t S = 64 / int64_t(sizeof(E));
  E* d = reinterpret_cast<E*>(ap);
  if (cs == 1) {
    for (int64_t q = 0; q < steps; ++q) {
      const int64_t kk = k - q * S < 0 ? 0 : (k - q * S < S ? k - q * S : S);
      for (int64_t i = 0; i < 32; ++i) {
        E* row = d + (q * 32 + i) * S;
        const int64_t copied = i < rows ? kk : 0;
        if (copied == S) {  // the common case: one 64-byte copy the compiler inlines
          std::memcpy(row, a + i * rs + q * S, 64);
          continue;
        }
        std::memcpy(row, a + i * rs + q * S, size_t(copied) * sizeof(E));
        std::memset(row + copied, 0, size_t(S - copied) * sizeof(E));
      }
    }
    return;
  }
  // A transposed A (x^T dy): read along the rows of the stored matrix.
  std::memset(d, 0, size_t(steps) * 32 * 64);
  for (int64_t kk = 0; kk < k; ++kk) {
    E* dq = d + (kk / S) * 32 * S + kk % S;
    for (int64_t i = 0; i < rows; ++i) dq[i * S] = a[i * rs + kk * cs];
  }
}

// Packs the whole words (K pairs of bf16, K quads of int8) of a transposed B (x @ W.T: column j
// of B is row j of W, cs bytes apart, its words adjacent) into the B tile layout of the families:
// word w of column j at bp[((w / 16 * 2 + j / 16) * 16 + w % 16) * 16 + j % 16], columns past
// `cols` (of the panel's 32) zero. 16 x 16 blocks of words are transposed in registers.
inline void pack_b_transposed(const unsigned char* s, int64_t cs, int64_t words, int64_t cols, uint32_t* bp) {
  typedef uint32_t v16u __attribute__((vector_size(64)));
  const int64_t blocks = words / 16;
  for (int64_t q = 0; q < blocks; ++q)
    for (int h = 0; h < 2; ++h) {
      v16u x[16];
#pragma GCC unroll 16
      for (int r = 0; r < 16; ++r) {
        x[r] = v16u{};
        if (16 * h + r < cols) std::memcpy(&x[r], s + (16 * h + r) * cs + 64 * q, 64);
      }
      detail::transpose16(x);
#pragma GCC unroll 16
      for (int p = 0; p < 16; ++p) std::memcpy(bp + ((q * 2 + h) * 16 + p) * 16, &x[p], 64);
    }
  for (int64_t w = blocks * 16; w < words; ++w)
    for (int64_t j = 0; j < 32; ++j) {
      uint32_t x = 0;
      if (j < cols) std::memcpy(&x, s + j * cs + 4 * w, 4);
      bp[((w / 16 * 2 + j / 16) * 16 + w % 16) * 16 + j % 16] = x;
    }
}

// Prefetches one 512-byte quarter of a step's 2 KiB of packed operand into L1.
PTO_INLINE void prefetch_quarter(const char* p) {
#pragma GCC unroll 8
  for (int l = 0; l < 8; ++l) __builtin_prefetch(p + 64 * l, 0, 3);
}

// A 32 x 32 block's steps over packed panels, into the accumulators tmm0-3 (rows 0-15 / 16-31 x
// columns 0-15 / 16-31): each step reads 2 KiB of A (two 16-row tiles, 64-byte rows) and 2 KiB of
// B (two 16-column tiles) and runs four dot products. The panels come from L2 (a panel of the
// whole K does not fit L1), so the next step of both is prefetched into L1 a quarter at a time
// between the dot products: measured 1.25-1.3x over none on a Sapphire Rapids class core, where a
// tile load from L2 stalls the next dot product.
template <Dot D>
PTO_INLINE void block_steps(int64_t steps, const char* ap, const char* bp) {
  constexpr int64_t kStep = 2048;  // bytes of each operand per step
  for (int64_t q = 0; q < steps; ++q) {
    const char* a = ap + q * kStep;
    const char* b = bp + q * kStep;
    PTO_TILE_LOADD(4, a, 64);
    PTO_TILE_LOADD(6, b, 64);
    PTO_AMX_DOT(D, 0, 4, 6);
    prefetch_quarter(a + kStep);
    prefetch_quarter(b + kStep);
    PTO_TILE_LOADD(5, a + 1024, 64);
    PTO_AMX_DOT(D, 2, 5, 6);
    prefetch_quarter(a + kStep + 512);
    prefetch_quarter(b + kStep + 512);
    PTO_TILE_LOADD(7, b + 1024, 64);
    PTO_AMX_DOT(D, 1, 4, 7);
    prefetch_quarter(a + kStep + 1024);
    prefetch_quarter(b + kStep + 1024);
    PTO_AMX_DOT(D, 3, 5, 7);
    prefetch_quarter(a + kStep + 1536);
    prefetch_quarter(b + kStep + 1536);
  }
}
#undef PTO_AMX_DOT
#else
inline bool enabled() { return false; }
#endif

}  // namespace amx
}  // namespace pto
