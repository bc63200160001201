// The element-wise epilogue of an int8 whole-matrix product (scaled_mm's cast, scales and bias),
// fused into the store of each block of int32 sums: the vector kernels' (pto/cpu/matmul_int8.hpp)
// and the AMX tiles' (pto/cpu/matmul_int8_amx.hpp). Built by pto::mmatmul_epilogue from the
// instructions code generation folds into the product (backends/cpu/matmul_runs.h).
#pragma once
#include <cstdint>

#include "pto/cpu/elementwise.hpp"
#include "pto/cpu/matmul_lowp.hpp"
#include "pto/cpu/types.hpp"

namespace pto {
namespace i8mm {

// A value as rounded on its own (an empty asm the compiler cannot see through): a step's product is
// never contracted with the next step's sum into one FMA (kernels compile with GCC's default
// -ffp-contract=fast), as the instructions round each.
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#define PTO_I8_ROUNDED(x) __asm__("" : "+v"(x))
#elif defined(__GNUC__) && defined(__aarch64__)
#define PTO_I8_ROUNDED(x) __asm__("" : "+w"(x))
#else
#define PTO_I8_ROUNDED(x) (void)0
#endif
// An element-wise epilogue on the int32 product, fused into the store (scaled_mm's cast and
// scales, code generation's pto::mmatmul_epilogue): y = f32(x), then each step in order, in f32
// with one rounding per step as the instructions (TCVT, TMUL, TADD) it replaces.
struct EpiStep {
  enum Op : int { kMul = 0, kAdd = 1 } op;
  enum Axis : int { kRows = 0, kCols = 1, kScalar = 2 } axis;
  const float* p;  // kRows: p[i * stride], kCols: p[j] (unit stride); kScalar: p[0], or s without p
  int64_t stride;
  float s;
};
constexpr int kMaxEpiSteps = 8;
struct Epilogue {
  int n = 0;
  EpiStep step[kMaxEpiSteps];
  // The value at (i, j) of a product element x (scalar; the kernels apply it to whole blocks).
  float at(int32_t x, int64_t i, int64_t j) const {
    float y = convert<float>(x);
    for (int s = 0; s < n; ++s) {
      const EpiStep& e = step[s];
      const float v = e.axis == EpiStep::kRows ? e.p[i * e.stride] : e.axis == EpiStep::kCols ? e.p[j] : e.s;
      y = e.op == EpiStep::kMul ? elem::mul(y, v) : elem::add(y, v);
      PTO_I8_ROUNDED(y);
    }
    return y;
  }
};

// Stores epi(r) for an M_ x (NV vectors of int32 sums) block into the f32 C (mr x nr of it), the
// block at (row0, col0) of the product.
template <int M_, int NV, class VS>
PTO_INLINE void store_epilogue(const VS (&r)[M_][NV], float* c, int64_t ldc, int64_t mr, int64_t nr,
                               const Epilogue& e, int64_t row0, int64_t col0) {
  constexpr int kW = int(sizeof(VS) / 4), NR = NV * kW;
  typedef float vf __attribute__((vector_size(kW * 4)));
  vf y[M_][NV];
#pragma GCC unroll 16
  for (int i = 0; i < M_; ++i)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) y[i][v] = __builtin_convertvector(r[i][v], vf);
  for (int s = 0; s < e.n; ++s) {
    const EpiStep& st = e.step[s];
    const bool mul = st.op == EpiStep::kMul;
    if (st.axis == EpiStep::kCols) {
      vf w[NV];
      if (nr == NR) {
#pragma GCC unroll 4
        for (int v = 0; v < NV; ++v) __builtin_memcpy(&w[v], st.p + col0 + v * kW, sizeof(vf));
      } else {
        alignas(64) float t[NR] = {};
        for (int64_t j = 0; j < nr; ++j) t[j] = st.p[col0 + j];
#pragma GCC unroll 4
        for (int v = 0; v < NV; ++v) __builtin_memcpy(&w[v], t + v * kW, sizeof(vf));
      }
#pragma GCC unroll 16
      for (int i = 0; i < M_; ++i)
#pragma GCC unroll 4
        for (int v = 0; v < NV; ++v) {
          y[i][v] = mul ? y[i][v] * w[v] : y[i][v] + w[v];
          PTO_I8_ROUNDED(y[i][v]);
        }
    } else {
#pragma GCC unroll 16
      for (int i = 0; i < M_; ++i) {
        const float x = st.axis == EpiStep::kScalar ? st.s : i < mr ? st.p[(row0 + i) * st.stride] : 0.0f;
#pragma GCC unroll 4
        for (int v = 0; v < NV; ++v) {
          y[i][v] = mul ? y[i][v] * x : y[i][v] + x;
          PTO_I8_ROUNDED(y[i][v]);
        }
      }
    }
  }
  lowp::store_block<M_, NV, kW>(y, c, ldc, false, mr, nr);
}

}  // namespace i8mm
}  // namespace pto
