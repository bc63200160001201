// Products of a few rows with a transposed B, as dot products: C (M x N, M <= kDotRows) = sum_t
// A_t * B_t where B_t's columns are contiguous (x @ W.T with W stored out_features x in_features,
// the layout of every torch Linear), so each element of C is the dot product of a row of A and a
// row of W, both read in order. One decoding step of a language model is such products (M = 1);
// packing W for the register-tiled GEMM would transpose all of it to use each element once (a
// 1 x 768 x 768 product with its tanh: 110 us against torch's 26).
//
// Order of the additions (within the tolerance every backend is held to, not bit-equal to the
// tiled GEMM): per term, kW partial sums (one per vector lane, each over the k = lane mod kW),
// the ragged end of k added one by one to a scalar sum, the lanes then added in order.
#pragma once
#include "pto/abi.h"
#include "pto/cpu/gemm_kernel.hpp"
#include "pto/cpu/gemm_wrapped.hpp"
#include "pto/cpu/types.hpp"

namespace pto {
namespace gemm {

constexpr int64_t kDotRows = 4;

// Whether dot_rows_f32 serves this sum: few rows, A's rows and B's columns contiguous in every
// term, and a destination that is not wrapped.
inline bool dot_rows_applies(int64_t M, const Term* t, int nt, const Epilogue& epi) {
  if (M < 1 || M > kDotRows || epi.wrap > 0 || nt < 1) return false;
  for (int i = 0; i < nt; ++i)
    if (t[i].b_rs != 1 || t[i].a_cs != 1 || t[i].b_cs == 1) return false;
  return true;
}

// Columns [j0, j1) of C for M_ rows, NC columns at a time: M_ x NC vector accumulators.
template <int M_>
inline void dot_rows_block(int64_t j0, int64_t j1, const Term* t, int nt, float* C, int64_t ldc, bool acc,
                           const Epilogue& epi) {
  constexpr int NC = M_ <= 2 ? 8 : 4;  // at least 8 independent FMA chains
  for (int64_t j = j0; j < j1; j += NC) {
    const int nj = int(detail::imin(NC, j1 - j));
    vf s[M_][NC];
    float tail[M_][NC];
#pragma GCC unroll 4
    for (int m = 0; m < M_; ++m)
#pragma GCC unroll 8
      for (int c = 0; c < NC; ++c) {
        s[m][c] = vf{};
        tail[m][c] = 0.0f;
      }
    for (int u = 0; u < nt; ++u) {
      const Term& tm = t[u];
      const float* w[NC];
#pragma GCC unroll 8
      for (int c = 0; c < NC; ++c) w[c] = tm.b + (j + (c < nj ? c : nj - 1)) * tm.b_cs;  // ragged: repeat
      const float* x[M_];
#pragma GCC unroll 4
      for (int m = 0; m < M_; ++m) x[m] = tm.a + m * tm.a_rs;
      int64_t p = 0;
      for (; p + kW <= tm.k; p += kW) {
        vf xv[M_], wv[NC];
#pragma GCC unroll 4
        for (int m = 0; m < M_; ++m) __builtin_memcpy(&xv[m], x[m] + p, sizeof(vf));
#pragma GCC unroll 8
        for (int c = 0; c < NC; ++c) __builtin_memcpy(&wv[c], w[c] + p, sizeof(vf));
#pragma GCC unroll 4
        for (int m = 0; m < M_; ++m)
#pragma GCC unroll 8
          for (int c = 0; c < NC; ++c) s[m][c] += xv[m] * wv[c];
      }
      for (; p < tm.k; ++p)
        for (int m = 0; m < M_; ++m)
          for (int c = 0; c < NC; ++c) tail[m][c] += x[m][p] * w[c][p];
    }
    for (int m = 0; m < M_; ++m)
      for (int c = 0; c < nj; ++c) {
        float v = 0.0f;
        for (int l = 0; l < kW; ++l) v += s[m][c][l];
        v += tail[m][c];
        float& out = C[m * ldc + j + c];
        if (acc) v = out + v;
        if (epi.bias) v = elem::add(v, epi.bias[j + c]);
        if (epi.relu) v = elem::relu(v);
        out = v;
      }
  }
}

struct DotRows {
  int64_t M, N;
  const Term* t;
  int nt;
  float* C;
  int64_t ldc;
  bool acc;
  Epilogue epi;
  static constexpr int64_t kColumns = 64;  // columns per parallel item
};

template <int M_>
inline void dot_rows_items(void* ctx, int64_t begin, int64_t end) {
  const DotRows& d = *static_cast<const DotRows*>(ctx);
  dot_rows_block<M_>(begin * DotRows::kColumns, detail::imin(d.N, end * DotRows::kColumns), d.t, d.nt, d.C,
                     d.ldc, d.acc, d.epi);
}

// C = (or +=) the sum of the products (dot_rows_applies holds), on the pool `pf` (nullptr: this
// thread) in pieces of 64 columns.
inline void dot_rows_f32(pto_parallel_for_fn pf, int64_t M, int64_t N, const Term* t, int nt, float* C,
                         int64_t ldc, bool acc, const Epilogue& epi) {
  DotRows d{M, N, t, nt, C, ldc, acc, epi};
  pto_loop_body body = M == 1   ? &dot_rows_items<1>
                       : M == 2 ? &dot_rows_items<2>
                       : M == 3 ? &dot_rows_items<3>
                                : &dot_rows_items<4>;
  const int64_t items = (N + DotRows::kColumns - 1) / DotRows::kColumns;
  double flops = 0;
  for (int i = 0; i < nt; ++i) flops += 2.0 * double(M) * double(N) * double(t[i].k);
  if (pf == nullptr || items < 2 || flops < 1e6)
    body(&d, 0, items);
  else
    pf(items, body, &d);
}

}  // namespace gemm
}  // namespace pto
