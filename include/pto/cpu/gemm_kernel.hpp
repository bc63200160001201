// The f32 GEMM's building blocks: the register tile and fallback blocking for the SIMD level the
// kernel is compiled for (-march=native), the per-thread packing buffers, packing of A row panels
// and B column panels, and the MR x NR register-blocked micro-kernel (GCC vector extensions, FMAs)
// that both the packed GEMM over global memory and the tile matmuls run (pto/cpu/matmul.hpp).
//   AVX-512 (32 registers): 14 x 32    AVX/AVX2 (16): 6 x 16    SSE/NEON/other: 6 x 8
// The PTO_GEMM_* macros override the register tile and the blocking (for tuning experiments).
#pragma once
#include <utility>
#include "pto/cpu/transpose.hpp"
#include "pto/cpu/types.hpp"
#if defined(__has_include)
#if __has_include(<sys/mman.h>)
#include <sys/mman.h>  // madvise
#endif
#endif

namespace pto {
namespace gemm {

#if defined(__AVX512F__)
constexpr int kW = 16;  // floats per vector register
#define PTO_GEMM_DEFAULT_MR 14
#elif defined(__AVX__)
constexpr int kW = 8;
#define PTO_GEMM_DEFAULT_MR 6
#else
constexpr int kW = 4;
#define PTO_GEMM_DEFAULT_MR 6
#endif
#ifndef PTO_GEMM_MR
#define PTO_GEMM_MR PTO_GEMM_DEFAULT_MR
#endif
#ifndef PTO_GEMM_NV
#define PTO_GEMM_NV 2
#endif
#if defined(PTO_GEMM_KC) || defined(PTO_GEMM_MC) || defined(PTO_GEMM_NC) || defined(PTO_GEMM_NB)
#define PTO_GEMM_FIXED_BLOCKING 1  // an override: no blocking from the cache sizes
#endif
#ifndef PTO_GEMM_KC
#define PTO_GEMM_KC 256
#endif
#ifndef PTO_GEMM_MC
#define PTO_GEMM_MC 168
#endif
#ifndef PTO_GEMM_NC
#define PTO_GEMM_NC 512
#endif
#ifndef PTO_GEMM_NB
#define PTO_GEMM_NB 4096
#endif

constexpr int MR = PTO_GEMM_MR;
constexpr int NV = PTO_GEMM_NV;
constexpr int NR = NV * kW;
// Fallback blocking, where the CPU reports no cache sizes (blocking() below).
constexpr int64_t KC = PTO_GEMM_KC;
constexpr int64_t MC = (PTO_GEMM_MC / MR) * MR;
constexpr int64_t NC = (PTO_GEMM_NC / NR) * NR;
constexpr int64_t NB = (PTO_GEMM_NB / NR) * NR;

typedef float vf __attribute__((vector_size(kW * 4)));                          // aligned loads
typedef float vfu __attribute__((vector_size(kW * 4), aligned(4), may_alias));  // unaligned C

// Per-thread packing buffers, grown on demand and kept for the next call. Kernels are built with
// -fvisibility=hidden, which would give every loaded kernel library its own copy per thread; the
// accessor is exported instead, so the dynamic linker unifies the thread-local object (a
// GNU-unique symbol) across all kernels of a process. The inline namespace versions its layout
// and allocation. Buffers of 4 MiB or more are 2 MiB aligned and asked for transparent huge pages
// (madvise, where the system has it): the packed B block (up to 32 MiB, every A micro-panel walks
// it) then takes a few TLB entries instead of thousands (2048^3 on one Zen 5 core: 3% faster).
inline namespace abi_v2 {
struct PackBuffers {
  float* a = nullptr;
  float* b = nullptr;
  int64_t a_cap = 0, b_cap = 0;
  static constexpr size_t kHuge = size_t(2) << 20;
  static size_t alignment(size_t bytes) { return bytes >= 2 * kHuge ? kHuge : 64; }
  static void release(float*& p, int64_t& cap) {
    if (p) ::operator delete(p, std::align_val_t(alignment(size_t(cap) * sizeof(float))));
    p = nullptr;
    cap = 0;
  }
  ~PackBuffers() {
    release(a, a_cap);
    release(b, b_cap);
  }
  static float* grow(float*& p, int64_t& cap, int64_t n) {
    if (n > cap) {
      release(p, cap);
      size_t bytes = size_t(n) * sizeof(float);
      const size_t align = alignment(bytes);
      bytes = (bytes + align - 1) / align * align;
      p = static_cast<float*>(::operator new(bytes, std::align_val_t(align)));
#if defined(MADV_HUGEPAGE)
      if (align == kHuge) madvise(p, bytes, MADV_HUGEPAGE);  // advice only: failure changes nothing
#endif
      cap = int64_t(bytes / sizeof(float));
    }
    return p;
  }
};
#if defined(__GNUC__) || defined(__clang__)
__attribute__((visibility("default")))
#endif
inline PackBuffers& pack_buffers() {
  static thread_local PackBuffers buf;
  return buf;
}
}  // namespace abi_v2

// The packings transpose 16 x 16 blocks in registers (pto/cpu/transpose.hpp).
using detail::transpose16;

// Ap[panel][p][i] = A(i0+panel*MR+i, p0+p), rows past mc zero; panels are ldp deep (>= kc: a piece
// of a deeper panel is packed at Ap + offset * MR). Strided rows: writes run contiguously (the MR
// row reads of each p hit MR streams, which the prefetchers follow).
template <int MR>
inline void pack_a(int64_t mc, int64_t kc, const float* A, int64_t rs, int64_t cs, float* Ap, int64_t ldp) {
  for (int64_t i0 = 0; i0 < mc; i0 += MR) {
    const int64_t m = detail::imin(MR, mc - i0);
    float* dst = Ap + i0 * ldp;
    const float* src = A + i0 * rs;
    if (cs == 1) {
      // Rows contiguous: 16 columns (one cache line of each row) at a time, each row's piece read
      // in order. Reading the MR rows at every p instead keeps MR lines live at once, which at a
      // power-of-two row stride share one L1 set and evict each other (2.1x slower at 4 and 8 KiB
      // strides). With 16-lane vectors the 16 x MR block is transposed in registers (16 loads,
      // 64 shuffles, 16 stores of MR lanes; rows past m are zero lanes), else scattered into the
      // panel (in L1).
      int64_t p0 = 0;
      if constexpr (kW == 16 && MR <= 16) {
        for (; p0 + 16 <= kc; p0 += 16) {
          vf x[16];
#pragma GCC unroll 16
          for (int i = 0; i < 16; ++i) {
            x[i] = vf{};
            if (i < m) __builtin_memcpy(&x[i], src + i * rs + p0, sizeof(vf));
          }
          transpose16(x);
#pragma GCC unroll 16
          for (int p = 0; p < 16; ++p) __builtin_memcpy(dst + (p0 + p) * MR, &x[p], MR * sizeof(float));
        }
      } else if (m == MR) {
        for (; p0 + 16 <= kc; p0 += 16)
          for (int i = 0; i < MR; ++i) {
            const float* s = src + i * rs + p0;
            float* d = dst + p0 * MR + i;
#pragma GCC unroll 16
            for (int p = 0; p < 16; ++p) d[p * MR] = s[p];
          }
      }
      for (int i = 0; i < MR; ++i)
        for (int64_t p = p0; p < kc; ++p) dst[p * MR + i] = i < m ? src[i * rs + p] : 0.0f;
    } else if (rs == 1 && m == MR) {
      // A transposed A (x^T dy, a backward's dW): each p's MR elements are adjacent, one vector
      // copy (the generic loop below gathers them as MR scalars at run-time strides: 1024^3 x^T B
      // on one core spent 12% of its time there).
      for (int64_t p = 0; p < kc; ++p) __builtin_memcpy(dst + p * MR, src + p * cs, MR * sizeof(float));
    } else if (m == MR) {
      for (int64_t p = 0; p < kc; ++p)
#pragma GCC unroll 32
        for (int i = 0; i < MR; ++i) dst[p * MR + i] = src[i * rs + p * cs];
    } else {
      for (int64_t p = 0; p < kc; ++p)
#pragma GCC unroll 32
        for (int i = 0; i < MR; ++i) dst[p * MR + i] = i < m ? src[i * rs + p * cs] : 0.0f;
    }
  }
}

// Bp[panel][p][j] = B(p0+p, j0+panel*NR+j), columns past nc zero; panels are ldp deep.
template <int NR>
inline void pack_b(int64_t kc, int64_t nc, const float* B, int64_t rs, int64_t cs, float* Bp, int64_t ldp) {
  int64_t j_full = 0;
  if (cs == 1) {
    // Rows contiguous: the full panels row by row, each row of B read in order and its NR-wide
    // pieces written to their panels (panel by panel, a 8 KiB row stride starts a new DRAM page and
    // prefetch stream every 128 bytes: 1.5x slower).
    j_full = nc / NR * NR;
    for (int64_t p = 0; p < kc; ++p)
      for (int64_t j0 = 0; j0 < j_full; j0 += NR)
        __builtin_memcpy(Bp + j0 * ldp + p * NR, B + p * rs + j0, NR * sizeof(float));
  }
  for (int64_t j0 = j_full; j0 < nc; j0 += NR) {
    const int64_t n = detail::imin(NR, nc - j0);
    float* dst = Bp + j0 * ldp;
    const float* src = B + j0 * cs;
    if (rs == 1 && cs != 1) {
      // A transposed B (x @ W.T): each column of the panel is a contiguous row of W; read it in
      // order (one stream per column) rather than gathering NR rows for every p, 16 rows of the
      // panel at a time. With 16-lane vectors each 16 x 16 block is transposed in registers (16
      // loads, 64 shuffles, 16 stores; columns past n are zero lanes), else the columns are
      // scattered into the rows (their 16 x NR floats stay in L1 while every column writes).
      int64_t p_vec = 0;
      if constexpr (kW == 16 && NR % 16 == 0) {
        for (; p_vec + 16 <= kc; p_vec += 16)
#pragma GCC unroll 1
          for (int h = 0; h < NR; h += 16) {
            vf x[16];
#pragma GCC unroll 16
            for (int j = 0; j < 16; ++j) {
              x[j] = vf{};
              if (h + j < n) __builtin_memcpy(&x[j], src + (h + j) * cs + p_vec, sizeof(vf));
            }
            transpose16(x);
#pragma GCC unroll 16
            for (int p = 0; p < 16; ++p) __builtin_memcpy(dst + (p_vec + p) * NR + h, &x[p], sizeof(vf));
          }
      }
      for (int64_t p0 = p_vec; p0 < kc; p0 += 16) {
        const int64_t p1 = detail::imin(kc, p0 + 16);
        for (int64_t j = 0; j < NR; ++j) {
          float* d = dst + j;
          if (j < n) {
            const float* s = src + j * cs;
            for (int64_t p = p0; p < p1; ++p) d[p * NR] = s[p];
          } else {
            for (int64_t p = p0; p < p1; ++p) d[p * NR] = 0.0f;
          }
        }
      }
    } else {
      // Edges and strided B (a transposed B reads down its columns, one cache line per column,
      // and the next p reuses those lines).
      for (int64_t p = 0; p < kc; ++p)
#pragma GCC unroll 64
        for (int j = 0; j < NR; ++j) dst[p * NR + j] = j < n ? src[p * rs + j * cs] : 0.0f;
    }
  }
}

// C[0:mr, 0:nr] (+)= A(M_ x kc) * B(kc x NV_*kW) with A(i,p) = a[i*AI + p*AP] and
// B(p,j) = b[p*BP + j]: strides are template constants, so the same kernel reads packed panels
// (AI=1, AP=M_, BP=NR) or tiles in place (AI = the tile's row stride, AP=1, BP = B's row stride)
// with immediate address offsets.
// With ROWS, B is read in place through a table of row addresses: B(p,j) = brow[p][j] (b unused).
// On the last k block, `bias` (the tile's first column of a row vector, or null) and `relu` finish
// each element as it is stored: c = relu(c + bias[j]) (pto/elem.hpp's add and relu, in that order,
// as the separate pass over C would compute them). `pf_b` > 0: the rows of B pf_b steps ahead are
// prefetched into L1 at each step (a packed panel streaming from L2; Blocking::pb).
template <int M_, int NV_, int64_t AI, int64_t AP, int64_t BP, bool ROWS = false>
PTO_INLINE void micro_kernel(int64_t kc, const float* PTO_RESTRICT a, const float* PTO_RESTRICT b,
                             float* PTO_RESTRICT c, int64_t ldc, bool acc, int64_t mr, int64_t nr,
                             const float* const* brow = nullptr, int64_t bcol = 0,
                             const float* bias = nullptr, bool relu = false, int64_t pf_b = 0) {
  constexpr int N_ = NV_ * kW;
  vf r[M_][NV_];
#pragma GCC unroll 32
  for (int i = 0; i < M_; ++i)
#pragma GCC unroll 8
    for (int v = 0; v < NV_; ++v) r[i][v] = vf{};
  auto step = [&](int64_t p) __attribute__((always_inline)) {
    vf bv[NV_];
#pragma GCC unroll 8
    for (int v = 0; v < NV_; ++v) {
      if constexpr (ROWS)
        __builtin_memcpy(&bv[v], brow[p] + bcol + v * kW, sizeof(vf));
      else
        __builtin_memcpy(&bv[v], b + p * BP + v * kW, sizeof(vf));
    }
#pragma GCC unroll 32
    for (int i = 0; i < M_; ++i) {
      const float ai = a[i * AI + p * AP];
#pragma GCC unroll 8
      for (int v = 0; v < NV_; ++v) r[i][v] += bv[v] * ai;
    }
  };
  // The C tile is needed only after the k loop: start fetching its lines now.
#pragma GCC unroll 32
  for (int i = 0; i < M_; ++i) {
    __builtin_prefetch(c + i * ldc, 1);
    __builtin_prefetch(c + i * ldc + N_ - 1, 1);
  }
#if !defined(__AVX512F__)
  // Four k steps per loop trip on AVX/AVX2 (6 x 16: 12 FMAs per step). GCC leaves the loop
  // rolled, and a Zen 3 core then runs the kernel at ~70% of an FMA loop (74 GF/s of 106 in CPU
  // time, kc 512); unrolled ~80%, and 2048^3 on one core 66-69 -> 75-81 GF/s. AVX-512 builds keep
  // the rolled loop they were tuned with (14 x 32 at ~98% of an FMA loop on Zen 5).
#pragma GCC unroll 4
#endif
  for (int64_t p = 0; p < kc; ++p) {
    if constexpr (!ROWS)
      if (pf_b > 0)
#pragma GCC unroll 4
        for (int64_t l = 0; l < N_; l += 64 / int64_t(sizeof(float)))
          __builtin_prefetch(b + (p + pf_b) * BP + l, 0, 3);
    step(p);
  }
  if (mr == M_ && nr == N_) {
    // Two loops, not `acc ? *cp + r : r`: the select may be compiled to an add of the old C and a
    // blend, and a destination not yet written (uninitialised memory) holds denormals often
    // enough (pointer bits) that the assists cost more than the whole product.
    auto store = [&](auto finish) __attribute__((always_inline)) {
      if (acc) {
#pragma GCC unroll 32
        for (int i = 0; i < M_; ++i)
#pragma GCC unroll 8
          for (int v = 0; v < NV_; ++v) {
            vfu* cp = reinterpret_cast<vfu*>(c + i * ldc + v * kW);
            *cp = finish(*cp + r[i][v], v);
          }
      } else {
#pragma GCC unroll 32
        for (int i = 0; i < M_; ++i)
#pragma GCC unroll 8
          for (int v = 0; v < NV_; ++v) *reinterpret_cast<vfu*>(c + i * ldc + v * kW) = finish(r[i][v], v);
      }
    };
    if (bias || relu) {
      vf bv[NV_];
#pragma GCC unroll 8
      for (int v = 0; v < NV_; ++v) {
        bv[v] = vf{};
        if (bias) __builtin_memcpy(&bv[v], bias + v * kW, sizeof(vf));
      }
      store([&](vf x, int v) __attribute__((always_inline)) {
        if (bias) x = x + bv[v];
        return relu ? (x < vf{} ? vf{} : x) : x;  // elem::relu
      });
    } else {
      store([](vf x, int) __attribute__((always_inline)) { return x; });
    }
  } else {
    alignas(64) float tmp[M_ * N_];
#pragma GCC unroll 32
    for (int i = 0; i < M_; ++i)
#pragma GCC unroll 8
      for (int v = 0; v < NV_; ++v) __builtin_memcpy(tmp + i * N_ + v * kW, &r[i][v], sizeof(vf));
    for (int64_t i = 0; i < mr; ++i)
      for (int64_t j = 0; j < nr; ++j) {
        float x = acc ? c[i * ldc + j] + tmp[i * N_ + j] : tmp[i * N_ + j];
        if (bias) x = elem::add(x, bias[j]);
        if (relu) x = elem::relu(x);
        c[i * ldc + j] = x;
      }
  }
}

// Row-panel height for a tile of R rows read in place: a divisor of R near MR (no ragged
// panel when the tile is full), else MR.
constexpr int tile_mr(int R) {
  if (R <= MR) return R;
  for (int m = MR; m >= (MR + 1) / 2; --m)
    if (R % m == 0) return m;
  return MR;
}

}  // namespace gemm
}  // namespace pto
