// CPU PTO headers: gemm_f32 (shapes across every blocking edge, any strides, accumulate) and
// TMATMUL / TMATMUL_ACC / TMATMUL_BIAS on ragged tiles, against a double-precision reference.
#include <chrono>
#include <thread>

#include "test_cpu_isa_util.hpp"

namespace {
using namespace pto_test;

struct Mat {
  int64_t rows, cols, rs, cs;
  std::vector<float> v;
  // A rows x cols matrix stored with the given layout (transposed when rs == 1).
  Mat(int64_t r, int64_t c, bool transposed, int64_t pad = 0)
      : rows(r), cols(c), rs(transposed ? 1 : c + pad), cs(transposed ? r + pad : 1) {
    v.assign(size_t(transposed ? (c * (r + pad)) : (r * (c + pad))) + 1, float(kNaN));
    for (int64_t i = 0; i < r; ++i)
      for (int64_t j = 0; j < c; ++j) v[size_t(i * rs + j * cs)] = float(rand_nz(0.1, 1.0));
  }
  double operator()(int64_t i, int64_t j) const { return v[size_t(i * rs + j * cs)]; }
};

void check_gemm(int64_t M, int64_t N, int64_t K, bool at, bool bt, bool acc, int64_t ldc_pad = 3) {
  SCOPED_TRACE("M=" + std::to_string(M) + " N=" + std::to_string(N) + " K=" + std::to_string(K) +
               (at ? " A^T" : "") + (bt ? " B^T" : "") + (acc ? " acc" : ""));
  Mat A(M, K, at, 1), B(K, N, bt, 2);
  const int64_t ldc = N + ldc_pad;
  std::vector<float> C(size_t(M * ldc + 1), -99.0f), C0;
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) C[size_t(i * ldc + j)] = acc ? float(rand_nz()) : float(kNaN);
  C0 = C;
  gemm_f32(M, N, K, A.v.data(), A.rs, A.cs, B.v.data(), B.rs, B.cs, C.data(), ldc, acc);
  int bad = 0;
  for (int64_t i = 0; i < M; ++i) {
    for (int64_t j = 0; j < ldc; ++j) {
      float got = C[size_t(i * ldc + j)];
      if (j >= N) {  // outside the matrix: untouched
        if (got != -99.0f && ++bad < 5) ADD_FAILURE() << "wrote outside C at " << i << "," << j;
        continue;
      }
      double ref = acc ? double(C0[size_t(i * ldc + j)]) : 0.0, mag = std::fabs(ref);
      for (int64_t p = 0; p < K; ++p) {
        ref += A(i, p) * B(p, j);
        mag += std::fabs(A(i, p) * B(p, j));
      }
      // Worst-case bound of a float dot product of length K (plus the accumulator).
      if (!(std::fabs(got - ref) <= 6e-8 * double(K + 2) * mag) && ++bad < 5)
        ADD_FAILURE() << "at " << i << "," << j << ": got " << got << " want " << ref;
    }
  }
  EXPECT_EQ(bad, 0);
}

TEST(CpuIsaGemm, ShapesAcrossBlockEdges) {
  for (auto [m, n, k] : {std::array<int64_t, 3>{1, 1, 1},
                         {7, 5, 3},
                         {14, 32, 64},
                         {6, 16, 17},
                         {15, 33, 257},
                         {29, 70, 300},
                         {64, 64, 64},
                         {1, 300, 40},
                         {300, 1, 40},
                         {170, 40, 20},
                         // K left over after the micro-kernel's unrolled k steps (4 per trip on
                         // AVX2): 2 and 3 steps, also in a slice after a full one (kc 256-1024)
                         {31, 19, 7},
                         {50, 40, 1030},
                         {96, 48, 2051}}) {
    check_gemm(m, n, k, false, false, false);
  }
}

TEST(CpuIsaGemm, LargeBlocking) {
  check_gemm(200, 1100, 33, false, false, false);  // > MC rows, > NC columns
  check_gemm(45, 50, 600, false, false, true);     // several KC blocks, accumulating
}

TEST(CpuIsaGemm, StridesAndAccumulate) {
  for (bool at : {false, true})
    for (bool bt : {false, true})
      for (bool acc : {false, true}) check_gemm(37, 45, 71, at, bt, acc);
  check_gemm(20, 30, 0, false, false, false);  // K == 0: C = 0
  check_gemm(20, 30, 0, false, false, true);   // K == 0, accumulate: unchanged
}

TEST(CpuIsaGemm, GeneralStrides) {
  // A with element strides (rs=3K, cs=2) and B with (rs=1, cs=5K): neither side contiguous.
  const int64_t M = 19, N = 23, K = 31;
  std::vector<float> A(size_t(M * 3 * K)), B(size_t(N * 5 * K)), C(size_t(M * N));
  for (auto& x : A) x = float(rand_nz());
  for (auto& x : B) x = float(rand_nz());
  gemm_f32(M, N, K, A.data(), 3 * K, 2, B.data(), 1, 5 * K, C.data(), N, false);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double ref = 0, mag = 0;
      for (int64_t p = 0; p < K; ++p) {
        double t = double(A[size_t(i * 3 * K + p * 2)]) * B[size_t(p + j * 5 * K)];
        ref += t;
        mag += std::fabs(t);
      }
      ASSERT_NEAR(C[size_t(i * N + j)], ref, 6e-8 * (K + 1) * mag);
    }
}

// Three threads, each chunk on its own std::thread: the packed B block is written by some threads
// and read by others, so a chunk reading panels before every chunk packed them shows up.
void three_thread_pool(int64_t n, pto_loop_body body, void* ctx) {
  std::vector<std::thread> th;
  const int64_t cut1 = n / 4, cut2 = n / 2 + 1;  // uneven chunks
  th.emplace_back(body, ctx, 0, cut1);
  th.emplace_back(body, ctx, cut1, cut2);
  body(ctx, cut2, n);
  for (auto& t : th) t.join();
}

// Two threads, the first starting its chunk late (a core shared with another process): the other
// claims the slow chunk's column panels and row tiles (gemm::claim_runs) and the late thread finds
// them done.
void late_thread_pool(int64_t n, pto_loop_body body, void* ctx) {
  const int64_t cut = n / 2;
  std::thread late([=] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    body(ctx, 0, cut);
  });
  body(ctx, cut, n);
  late.join();
}

// Checks C (M x N of row stride ldc; C0 its contents before, when accumulating) against
// relu(C0 + bias + A0 B0 + A1 B1) in double, and that nothing past column N was written (-99).
int check_sum_of_two(const std::vector<float>& C, const std::vector<float>* C0, int64_t M, int64_t N,
                     int64_t ldc, const Mat& A0, const Mat& B0, const Mat& A1, const Mat& B1,
                     const std::vector<float>& bias) {
  int bad = 0;
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < ldc; ++j) {
      const float got = C[size_t(i * ldc + j)];
      if (j >= N) {
        if (got != -99.0f && ++bad < 5) ADD_FAILURE() << "wrote outside C at " << i << "," << j;
        continue;
      }
      double ref = (C0 ? double((*C0)[size_t(i * ldc + j)]) : 0.0) + bias[size_t(j)], mag = std::fabs(ref);
      for (int64_t p = 0; p < A0.cols; ++p) ref += A0(i, p) * B0(p, j), mag += std::fabs(A0(i, p) * B0(p, j));
      for (int64_t p = 0; p < A1.cols; ++p) ref += A1(i, p) * B1(p, j), mag += std::fabs(A1(i, p) * B1(p, j));
      ref = ref < 0 ? 0 : ref;
      if (!(std::fabs(got - ref) <= 6e-8 * double(A0.cols + A1.cols + 3) * mag) && ++bad < 5)
        ADD_FAILURE() << "at " << i << "," << j << ": got " << got << " want " << ref;
    }
  return bad;
}

TEST(CpuIsaGemm, SharedPackedBlocksAcrossThreads) {
  // A sum of two products (K pieces of 57 and 40) with a blocking small enough that the kc slices,
  // mc blocks, nc pieces and nb blocks all have ragged edges, bias + relu at the last store, on
  // one thread, on three sharing each packed B block, and on two of which one starts late. With mc
  // of 4 MR the rows are one A block, which one thread runs packing each B panel as it reads it
  // (gemm_sum_panels_f32), unless every B is row-major (then B is read in place: few rows).
  using namespace pto::gemm;
  for (const int64_t mc : {2 * MR, 4 * MR})
    for (const bool b1t : {false, true}) {
      SCOPED_TRACE("mc " + std::to_string(mc) + (b1t ? ", B1 transposed" : ""));
      const Blocking bk{40, mc, 2 * NR, 3 * NR, 40};
      const int64_t M = 3 * MR + 5, N = 7 * NR + 9, K0 = 57, K1 = 40, ldc = N + 3;
      Mat A0(M, K0, false), B0(K0, N, false), A1(M, K1, true), B1(K1, N, b1t, 4);
      std::vector<float> bias(static_cast<size_t>(N));
      for (auto& x : bias) x = float(rand_nz());
      const Term t[2] = {{A0.v.data(), A0.rs, A0.cs, B0.v.data(), B0.rs, B0.cs, K0},
                         {A1.v.data(), A1.rs, A1.cs, B1.v.data(), B1.rs, B1.cs, K1}};
      for (pto_parallel_for_fn pf : {pto_parallel_for_fn(nullptr), pto_parallel_for_fn(&three_thread_pool),
                                     pto_parallel_for_fn(&late_thread_pool)}) {
        std::vector<float> C(size_t(M * ldc), -99.0f);
        for (int64_t i = 0; i < M; ++i)
          for (int64_t j = 0; j < N; ++j) C[size_t(i * ldc + j)] = float(kNaN);
        gemm_sum_f32<MR, NV>(M, N, t, 2, C.data(), ldc, false, bk, Epilogue{bias.data(), true}, pf);
        SCOPED_TRACE(pf == &late_thread_pool ? "2 threads, one late" : pf ? "3 threads" : "1 thread");
        EXPECT_EQ(check_sum_of_two(C, nullptr, M, N, ldc, A0, B0, A1, B1, bias), 0);
      }
    }
}

// A few rows against a transposed B (x @ W.T at decode time): dot products of contiguous rows
// (gemm_dot.hpp) through mmatmul_sum_f32, for 1-4 rows, ragged columns and K (a vector's tail),
// a sum of two terms, accumulating, with bias + relu, on one thread and on three.
TEST(CpuIsaGemm, FewRowsAgainstTransposedBAsDotProducts) {
  using namespace pto::gemm;
  for (int64_t M = 1; M <= 5; ++M)
    for (pto_parallel_for_fn pf : {pto_parallel_for_fn(nullptr), pto_parallel_for_fn(&three_thread_pool)})
      for (bool acc : {false, true}) {
        SCOPED_TRACE("M " + std::to_string(M) + (pf ? ", 3 threads" : "") + (acc ? ", acc" : ""));
        const int64_t N = 203, K0 = 37, K1 = 300, ldc = N + 3;
        Mat A0(M, K0, false, 2), B0(K0, N, true, 1), A1(M, K1, false), B1(K1, N, true);
        std::vector<float> bias(static_cast<size_t>(N));
        for (auto& x : bias) x = float(rand_nz());
        const Term t[2] = {{A0.v.data(), A0.rs, A0.cs, B0.v.data(), B0.rs, B0.cs, K0},
                           {A1.v.data(), A1.rs, A1.cs, B1.v.data(), B1.rs, B1.cs, K1}};
        EXPECT_EQ(dot_rows_applies(M, t, 2, Epilogue{}), M <= kDotRows);
        std::vector<float> C(size_t(M * ldc), -99.0f), C0;
        for (int64_t i = 0; i < M; ++i)
          for (int64_t j = 0; j < N; ++j) C[size_t(i * ldc + j)] = acc ? float(rand_nz()) : float(kNaN);
        C0 = C;
        mmatmul_sum_f32(pf, C.data(), ldc, 1, M, N, t, 2, acc, Epilogue{bias.data(), true});
        EXPECT_EQ(check_sum_of_two(C, acc ? &C0 : nullptr, M, N, ldc, A0, B0, A1, B1, bias), 0);
      }
}

// ---- tile instructions
// -------------------------------------------------------------------------------------
template <class D, int RD, int CD, class T, int R, int C, class U, int R2, int C2>
double ref_dot(const Tile<T, R, C>& a, const Tile<U, R2, C2>& b, int i, int j, int k, double* mag) {
  double s = 0;
  *mag = 0;
  for (int p = 0; p < k; ++p) {
    s += at(a, i, p) * at(b, p, j);
    *mag += std::fabs(at(a, i, p) * at(b, p, j));
  }
  return s;
}

TEST(CpuIsaMatmul, RaggedTiles) {
  Tile<float, 24, 40> a;
  Tile<float, 40, 36> b;
  fill_random(a, 20, 37);  // k = min(a.vc, b.vr) = 35
  fill_random(b, 35, 30);
  Tile<float, 24, 36> d;
  poison(d);
  TMATMUL(d, a, b);
  ASSERT_EQ(d.vr, 20);
  ASSERT_EQ(d.vc, 30);
  for (int i = 0; i < 20; ++i)
    for (int j = 0; j < 30; ++j) {
      double mag, ref = ref_dot<float, 24, 36>(a, b, i, j, 35, &mag);
      ASSERT_NEAR(at(d, i, j), ref, 6e-8 * 37 * mag) << i << "," << j;
    }

  // ACC: updates i < min(dst.vr, a.vr), j < min(dst.vc, b.vc); the rest stays; valid unchanged.
  Tile<float, 24, 36> acc;
  fill_random(acc, 18, 33);
  Tile<float, 24, 36> before = acc;
  TMATMUL_ACC(acc, a, b);
  ASSERT_EQ(acc.vr, 18);
  ASSERT_EQ(acc.vc, 33);
  for (int i = 0; i < 18; ++i)
    for (int j = 0; j < 33; ++j) {
      if (j >= 30) {
        ASSERT_EQ(at(acc, i, j), at(before, i, j));
        continue;
      }
      double mag, ref = at(before, i, j) + ref_dot<float, 24, 36>(a, b, i, j, 35, &mag);
      ASSERT_NEAR(at(acc, i, j), ref, 6e-8 * 38 * (mag + std::fabs(at(before, i, j)))) << i << "," << j;
    }

  Tile<float, 1, 36> bias;
  fill_random(bias, 1, 36);
  poison(d);
  TMATMUL_BIAS(d, a, b, bias);
  ASSERT_EQ(d.vr, 20);
  ASSERT_EQ(d.vc, 30);
  for (int i = 0; i < 20; ++i)
    for (int j = 0; j < 30; ++j) {
      double mag, ref = ref_dot<float, 24, 36>(a, b, i, j, 35, &mag) + at(bias, 0, j);
      ASSERT_NEAR(at(d, i, j), ref, 6e-8 * 38 * (mag + std::fabs(at(bias, 0, j)))) << i << "," << j;
    }
}

// Full blocks run in place on the tiles, ragged strips through gemm_f32: cover the mixes.
template <int M, int K, int N>
void check_tile_matmul(int vm, int vk, int vn, bool acc) {
  SCOPED_TRACE(std::to_string(M) + "x" + std::to_string(K) + "x" + std::to_string(N) + " valid " +
               std::to_string(vm) + "x" + std::to_string(vk) + "x" + std::to_string(vn) +
               (acc ? " acc" : ""));
  Tile<float, M, K> a;
  Tile<float, K, N> b;
  fill_random(a, vm, vk);
  fill_random(b, vk, vn);
  Tile<float, M, N> d;
  fill_random(d, vm, vn);
  Tile<float, M, N> before = d;
  if (acc)
    TMATMUL_ACC(d, a, b);
  else
    TMATMUL(d, a, b);
  ASSERT_EQ(d.vr, vm);
  ASSERT_EQ(d.vc, vn);
  for (int i = 0; i < vm; ++i)
    for (int j = 0; j < vn; ++j) {
      double mag, ref = ref_dot<float, M, N>(a, b, i, j, vk, &mag);
      if (acc) {
        ref += at(before, i, j);
        mag += std::fabs(at(before, i, j));
      }
      ASSERT_NEAR(at(d, i, j), ref, 6e-8 * (vk + 2) * mag) << i << "," << j;
    }
}

TEST(CpuIsaMatmul, InPlaceBlocksAndStrips) {
  for (bool acc : {false, true}) {
    check_tile_matmul<64, 64, 64>(64, 64, 64, acc);
    check_tile_matmul<40, 50, 80>(37, 45, 70, acc);
    check_tile_matmul<16, 16, 16>(16, 16, 16, acc);
    check_tile_matmul<16, 16, 16>(13, 11, 9, acc);
    check_tile_matmul<8, 8, 8>(8, 7, 8, acc);
    check_tile_matmul<1, 64, 64>(1, 64, 64, acc);
    check_tile_matmul<64, 64, 1>(64, 64, 1, acc);
    check_tile_matmul<96, 32, 48>(96, 32, 48, acc);
    check_tile_matmul<32, 32, 32>(32, 0, 32, acc);  // k == 0
  }
}

TEST(CpuIsaMatmul, SeedStyleAccumulationLoop) {
  // C(64x64) = sum over k-tiles of A_k * B_k, as the seed's tile matmul does it (K = 200, ragged).
  const int K = 200;
  std::vector<float> A(64 * K), B(K * 64);
  for (auto& x : A) x = float(rand_nz());
  for (auto& x : B) x = float(rand_nz());
  Tile<float, 64, 64> c;
  TEXPANDS(c, 0.0f);
  for (int k0 = 0; k0 < K; k0 += 64) {
    Tile<float, 64, 64> a, b;
    TLOAD(a, gview(A.data() + k0, K, 1, 64, K - k0));
    TLOAD(b, gview(B.data() + k0 * 64, 64, 1, K - k0, 64));
    TMATMUL_ACC(c, a, b);
  }
  expect_tile(
      c, 64, 64,
      [&](int i, int j) {
        double s = 0;
        for (int p = 0; p < K; ++p) s += double(A[i * K + p]) * B[p * 64 + j];
        return s;
      },
      2e-5, 1e-4);
}

TEST(CpuIsaMatmul, DoubleAndIntegerTiles) {
  Tile<double, 9, 13> a;
  Tile<double, 13, 7> b;
  fill_random(a, 9, 11);
  fill_random(b, 12, 7);
  Tile<double, 9, 7> d;
  poison(d);
  TMATMUL(d, a, b);
  expect_tile(
      d, 9, 7,
      [&](int i, int j) {
        double s = 0;
        for (int p = 0; p < 11; ++p) s += at(a, i, p) * at(b, p, j);
        return s;
      },
      1e-14);
  Tile<int32_t, 5, 6> ia;
  Tile<int32_t, 6, 4> ib;
  fill_random(ia, 5, 6, 0, 20);
  fill_random(ib, 6, 4, 0, 20);
  Tile<int32_t, 5, 4> id;
  TEXPANDS(id, 1);
  TMATMUL_ACC(id, ia, ib);
  expect_tile(
      id, 5, 4,
      [&](int i, int j) {
        double s = 1;
        for (int p = 0; p < 6; ++p) s += at(ia, i, p) * at(ib, p, j);
        return s;
      },
      0);
}

// scaled_mm's epilogue as one call (row_fusion.h) gives what TCVT, TMUL by a column and TMUL by a
// row give, bit for bit, valid regions included: ragged scales leave rows and columns at the
// earlier instruction's value, and nothing outside the int32 tile's valid region is written.
TEST(CpuIsaMatmul, FusedScaleEpilogueMatchesTheInstructions) {
  struct Valid {
    int ar, ac, cr, cc, rr, rc;
  };
  for (Valid v : {Valid{9, 13, 9, 1, 1, 13}, Valid{7, 11, 5, 1, 1, 9}, Valid{9, 13, 9, 0, 1, 13},
                  Valid{9, 13, 9, 1, 0, 13}, Valid{0, 13, 9, 1, 1, 13}}) {
    SCOPED_TRACE(std::to_string(v.ar) + "x" + std::to_string(v.ac) + " c " + std::to_string(v.cr) + "x" +
                 std::to_string(v.cc) + " r " + std::to_string(v.rr) + "x" + std::to_string(v.rc));
    Tile<int32_t, 9, 13> a;
    Tile<float, 9, 1> c;
    Tile<float, 1, 13> r;
    fill_random(a, 9, 13, 16000000, 2000000000);  // past 2^24: the conversion rounds
    fill_random(c, 9, 1);
    fill_random(r, 1, 13);
    a.vr = v.ar, a.vc = v.ac, c.vr = v.cr, c.vc = v.cc, r.vr = v.rr, r.vc = v.rc;
    Tile<float, 9, 13> want, got;
    poison(want);
    poison(got);
    TCVT(want, a);
    TMUL(want, want, c);
    TMUL(want, want, r);
    pto::fused::cvt_scale_rows_cols(got, a, c, r);
    EXPECT_EQ(got.vr, want.vr);
    EXPECT_EQ(got.vc, want.vc);
    for (int i = 0; i < 9 * 13; ++i)
      EXPECT_TRUE(std::memcmp(&got.data[i], &want.data[i], sizeof(float)) == 0) << "element " << i;
  }
}

}  // namespace
