// Matrix multiply: gemm_f32 on strided memory and the tile instructions TMATMUL / _ACC / _BIAS.
//
// gemm_f32 uses Goto-style blocking: B is packed into KC x NR column panels (an L2-resident block
// of NC columns) and A into MR x KC row panels (zero-padded, so edges need no special loop); an
// MR x NR register-blocked micro-kernel written with GCC vector extensions accumulates with FMAs,
// one A panel (in L1) against every B panel of the block. Tile matmuls run the same micro-kernel
// on the tiles in place (no packing), with compile-time strides. The vector width and the
// MR x NR shape follow the SIMD level the kernel is compiled for (-march=native):
//   AVX-512 (32 registers): 14 x 32    AVX/AVX2 (16): 6 x 16    SSE/NEON/other: 6 x 8
// The PTO_GEMM_* macros override the blocking (for tuning experiments).
#pragma once
#include "pto/abi.h"
#include "pto/cpu/matmul_bf16.hpp"
#include "pto/cpu/matmul_int8.hpp"
#include "pto/cpu/types.hpp"

namespace pto {
namespace gemm {

#if defined(__AVX512F__)
constexpr int kW = 16;  // floats per vector register
#ifndef PTO_GEMM_MR
#define PTO_GEMM_MR 14
#endif
#ifndef PTO_GEMM_NV
#define PTO_GEMM_NV 2
#endif
#elif defined(__AVX__)
constexpr int kW = 8;
#ifndef PTO_GEMM_MR
#define PTO_GEMM_MR 6
#endif
#ifndef PTO_GEMM_NV
#define PTO_GEMM_NV 2
#endif
#else
constexpr int kW = 4;
#ifndef PTO_GEMM_MR
#define PTO_GEMM_MR 6
#endif
#ifndef PTO_GEMM_NV
#define PTO_GEMM_NV 2
#endif
#endif
#ifndef PTO_GEMM_KC
#define PTO_GEMM_KC 256
#endif
#ifndef PTO_GEMM_MC
#define PTO_GEMM_MC 168
#endif
#ifndef PTO_GEMM_NC
#define PTO_GEMM_NC 1024
#endif

constexpr int MR = PTO_GEMM_MR;
constexpr int NV = PTO_GEMM_NV;
constexpr int NR = NV * kW;
constexpr int64_t KC = PTO_GEMM_KC;
constexpr int64_t MC = (PTO_GEMM_MC / MR) * MR;
constexpr int64_t NC = (PTO_GEMM_NC / NR) * NR;

typedef float vf __attribute__((vector_size(kW * 4)));                          // aligned loads
typedef float vfu __attribute__((vector_size(kW * 4), aligned(4), may_alias));  // unaligned C

// Per-thread packing buffers, grown on demand and kept for the next call. Kernels are built with
// -fvisibility=hidden, which would give every loaded kernel library its own copy per thread; the
// accessor is exported instead, so the dynamic linker unifies the thread-local object (a
// GNU-unique symbol) across all kernels of a process. The inline namespace versions its layout.
inline namespace abi_v1 {
struct PackBuffers {
  float* a = nullptr;
  float* b = nullptr;
  int64_t a_cap = 0, b_cap = 0;
  ~PackBuffers() {
    if (a) ::operator delete(a, std::align_val_t(64));
    if (b) ::operator delete(b, std::align_val_t(64));
  }
  static float* grow(float*& p, int64_t& cap, int64_t n) {
    if (n > cap) {
      if (p) ::operator delete(p, std::align_val_t(64));
      p = static_cast<float*>(::operator new(size_t(n) * sizeof(float), std::align_val_t(64)));
      cap = n;
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
}  // namespace abi_v1

// Ap[panel][p][i] = A(i0+panel*MR+i, p0+p), rows past mc zero. Writes run contiguously (the
// MR row reads of each p hit MR streams, which the prefetchers follow): 3x faster than reading
// rows contiguously and scattering the writes.
inline void pack_a(int64_t mc, int64_t kc, const float* A, int64_t rs, int64_t cs, float* Ap) {
  for (int64_t i0 = 0; i0 < mc; i0 += MR) {
    const int64_t m = detail::imin(MR, mc - i0);
    float* dst = Ap + i0 * kc;
    const float* src = A + i0 * rs;
    if (m == MR) {
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

// Bp[panel][p][j] = B(p0+p, j0+panel*NR+j), columns past nc zero.
inline void pack_b(int64_t kc, int64_t nc, const float* B, int64_t rs, int64_t cs, float* Bp) {
  for (int64_t j0 = 0; j0 < nc; j0 += NR) {
    const int64_t n = detail::imin(NR, nc - j0);
    float* dst = Bp + j0 * kc;
    const float* src = B + j0 * cs;
    if (cs == 1 && n == NR) {
      for (int64_t p = 0; p < kc; ++p) __builtin_memcpy(dst + p * NR, src + p * rs, NR * sizeof(float));
    } else if (rs == 1) {
      // A transposed B (x @ W.T): each column of the panel is a contiguous row of W; read it in
      // order (one stream per column) rather than gathering NR rows for every p.
      for (int64_t j = 0; j < NR; ++j) {
        float* d = dst + j;
        if (j < n) {
          const float* s = src + j * cs;
          for (int64_t p = 0; p < kc; ++p) d[p * NR] = s[p];
        } else {
          for (int64_t p = 0; p < kc; ++p) d[p * NR] = 0.0f;
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
template <int M_, int NV_, int64_t AI, int64_t AP, int64_t BP>
PTO_INLINE void micro_kernel(int64_t kc, const float* PTO_RESTRICT a, const float* PTO_RESTRICT b,
                             float* PTO_RESTRICT c, int64_t ldc, bool acc, int64_t mr, int64_t nr) {
  constexpr int N_ = NV_ * kW;
  vf r[M_][NV_];
#pragma GCC unroll 32
  for (int i = 0; i < M_; ++i)
#pragma GCC unroll 8
    for (int v = 0; v < NV_; ++v) r[i][v] = vf{};
  auto step = [&](int64_t p) __attribute__((always_inline)) {
    vf bv[NV_];
#pragma GCC unroll 8
    for (int v = 0; v < NV_; ++v) __builtin_memcpy(&bv[v], b + p * BP + v * kW, sizeof(vf));
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
  for (int64_t p = 0; p < kc; ++p) step(p);
  if (mr == M_ && nr == N_) {
#pragma GCC unroll 32
    for (int i = 0; i < M_; ++i)
#pragma GCC unroll 8
      for (int v = 0; v < NV_; ++v) {
        vfu* cp = reinterpret_cast<vfu*>(c + i * ldc + v * kW);
        *cp = acc ? *cp + r[i][v] : r[i][v];
      }
  } else {
    alignas(64) float tmp[M_ * N_];
#pragma GCC unroll 32
    for (int i = 0; i < M_; ++i)
#pragma GCC unroll 8
      for (int v = 0; v < NV_; ++v) __builtin_memcpy(tmp + i * N_ + v * kW, &r[i][v], sizeof(vf));
    for (int64_t i = 0; i < mr; ++i)
      for (int64_t j = 0; j < nr; ++j)
        c[i * ldc + j] = acc ? c[i * ldc + j] + tmp[i * N_ + j] : tmp[i * N_ + j];
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

// C(M x N, row stride ldc) = (or +=) A(M x K) * B(K x N); element (i,p) of A is
// A[i*lda_r + p*lda_c], (p,j) of B is B[p*ldb_r + j*ldb_c]: any strides, transposed included.
// Single-threaded; callers parallelise over blocks of C.
inline void gemm_f32(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda_r, int64_t lda_c,
                     const float* B, int64_t ldb_r, int64_t ldb_c, float* C, int64_t ldc, bool accumulate) {
  using namespace gemm;
  if (M <= 0 || N <= 0) return;
  if (K <= 0) {
    if (!accumulate)
      for (int64_t i = 0; i < M; ++i)
        for (int64_t j = 0; j < N; ++j) C[i * ldc + j] = 0.0f;
    return;
  }
  PackBuffers& buf = pack_buffers();
  const int64_t kc_max = K < KC ? K : KC;
  const int64_t nc_max = ((N < NC ? N : NC) + NR - 1) / NR * NR;
  const int64_t mc_max = ((M < MC ? M : MC) + MR - 1) / MR * MR;
  float* Bp = PackBuffers::grow(buf.b, buf.b_cap, kc_max * nc_max);
  float* Ap = PackBuffers::grow(buf.a, buf.a_cap, kc_max * mc_max);
  for (int64_t jc = 0; jc < N; jc += NC) {
    const int64_t nc = N - jc < NC ? N - jc : NC;
    for (int64_t pc = 0; pc < K; pc += KC) {
      const int64_t kc = K - pc < KC ? K - pc : KC;
      const bool acc = accumulate || pc > 0;
      pack_b(kc, nc, B + pc * ldb_r + jc * ldb_c, ldb_r, ldb_c, Bp);
      for (int64_t ic = 0; ic < M; ic += MC) {
        const int64_t mc = M - ic < MC ? M - ic : MC;
        pack_a(mc, kc, A + ic * lda_r + pc * lda_c, lda_r, lda_c, Ap);
        // A panel (L1) outer, B panels (L2) inner.
        for (int64_t ir = 0; ir < mc; ir += MR) {
          const int64_t mr = mc - ir < MR ? mc - ir : MR;
          for (int64_t jr = 0; jr < nc; jr += NR) {
            const int64_t nr = nc - jr < NR ? nc - jr : NR;
            micro_kernel<MR, NV, 1, MR, NR>(kc, Ap + ir * kc, Bp + jr * kc, C + (ic + ir) * ldc + jc + jr,
                                            ldc, acc, mr, nr);
          }
        }
      }
    }
  }
}

}  // namespace pto

// The packed GEMM is most of a kernel's compile time (about 0.5 s of g++ per kernel with a
// MMATMUL). The CPU backend compiles it once per machine and header version into a library of
// its own (PTO_SHARED_GEMM_DEFINE), loaded before kernels built with PTO_SHARED_GEMM, which call
// it instead of instantiating it. Exports and other builds keep it inline.
#if defined(PTO_SHARED_GEMM) || defined(PTO_SHARED_GEMM_DEFINE)
extern "C" __attribute__((visibility("default"))) void pto_shared_gemm_f32(
    int64_t M, int64_t N, int64_t K, const float* A, int64_t lda_r, int64_t lda_c, const float* B,
    int64_t ldb_r, int64_t ldb_c, float* C, int64_t ldc, bool accumulate);
#endif
#if defined(PTO_SHARED_GEMM_DEFINE)
extern "C" void pto_shared_gemm_f32(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda_r,
                                    int64_t lda_c, const float* B, int64_t ldb_r, int64_t ldb_c, float* C,
                                    int64_t ldc, bool accumulate) {
  pto::gemm_f32(M, N, K, A, lda_r, lda_c, B, ldb_r, ldb_c, C, ldc, accumulate);
}
#endif

namespace pto {
namespace gemm {
#if defined(PTO_SHARED_GEMM)
#define PTO_GEMM_F32 ::pto_shared_gemm_f32
#else
#define PTO_GEMM_F32 ::pto::gemm_f32
#endif
// Rows [r0, r1) (or columns, when split_n) of C = (or +=) A * B: one thread's share.
struct Shared {
  int64_t M, N, K;
  const float *A, *B;
  int64_t lda_r, lda_c, ldb_r, ldb_c;
  float* C;
  int64_t ldc;
  bool acc, split_n;
  int64_t grain;  // rows (or columns) per parallel item
};
inline void run_share(void* ctx, int64_t begin, int64_t end) {
  const Shared& s = *static_cast<const Shared*>(ctx);
  const int64_t lim = s.split_n ? s.N : s.M;
  const int64_t r0 = begin * s.grain, r1 = detail::imin(end * s.grain, lim);
  if (r0 >= r1) return;
  if (s.split_n)
    PTO_GEMM_F32(s.M, r1 - r0, s.K, s.A, s.lda_r, s.lda_c, s.B + r0 * s.ldb_c, s.ldb_r, s.ldb_c, s.C + r0,
                 s.ldc, s.acc);
  else
    PTO_GEMM_F32(r1 - r0, s.N, s.K, s.A + r0 * s.lda_r, s.lda_r, s.lda_c, s.B, s.ldb_r, s.ldb_c,
                 s.C + r0 * s.ldc, s.ldc, s.acc);
}
}  // namespace gemm

// MMATMUL / MMATMUL_ACC: dst = (or +=) a * b on global memory, the whole product in one
// instruction: rows i < min(dst.vr, a.vr), columns j < min(dst.vc, b.vc), k < min(a.vc, b.vr).
// The rows (or, for a wide and short product, the columns) are split into one contiguous share
// per thread of `pf`; each thread runs the packed gemm_f32 on its share, so every thread packs
// each B (or A) block once and reuses it across its whole share. pf == nullptr: one thread.
template <class D, class T, class U>
inline void mmatmul_f32(pto_parallel_for_fn pf, GlobalView<D> dst, GlobalView<T> a, GlobalView<U> b,
                        bool acc) {
  static_assert(std::is_same_v<std::remove_const_t<D>, float> &&
                    std::is_same_v<std::remove_const_t<T>, float> &&
                    std::is_same_v<std::remove_const_t<U>, float>,
                "MMATMUL takes f32 views");
  using namespace gemm;
  const int64_t M = detail::imin(dst.vr, a.vr), N = detail::imin(dst.vc, b.vc);
  const int64_t K = detail::imax(0, detail::imin(a.vc, b.vr));
  if (M <= 0 || N <= 0) return;
  if (dst.cs != 1) {  // a strided destination: no C tile stores; rare (a transposed output view)
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        float s = 0.0f;
        for (int64_t p = 0; p < K; ++p) s += a.ptr[i * a.rs + p * a.cs] * b.ptr[p * b.rs + j * b.cs];
        float& c = dst.ptr[i * dst.rs + j * dst.cs];
        c = acc ? c + s : s;
      }
    return;
  }
  Shared s{M, N, K, a.ptr, b.ptr, a.rs, a.cs, b.rs, b.cs, dst.ptr, dst.rs, acc, false, MR};
  // Split the longer side; items of one register tile so the per-thread shares stay even.
  s.split_n = N > M;
  s.grain = s.split_n ? NR : MR;
  const int64_t items = ((s.split_n ? N : M) + s.grain - 1) / s.grain;
  // Small products: one thread (waking the pool costs more than it saves).
  if (pf == nullptr || items < 2 || 2.0 * double(M) * double(N) * double(K) < 4e6)
    return run_share(&s, 0, items);
  pf(items, &run_share, &s);
}

template <class D, class T, class U>
inline void MMATMUL(pto_parallel_for_fn pf, GlobalView<D> dst, GlobalView<T> a, GlobalView<U> b) {
  mmatmul_f32(pf, dst, a, b, false);
}
template <class D, class T, class U>
inline void MMATMUL_ACC(pto_parallel_for_fn pf, GlobalView<D> dst, GlobalView<T> a, GlobalView<U> b) {
  mmatmul_f32(pf, dst, a, b, true);
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
