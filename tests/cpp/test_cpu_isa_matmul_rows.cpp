// CPU PTO headers: products of few rows that read B in place (gemm_sum_f32's row-table path), at
// row strides that alias in the caches, and sums stored through a wrapped destination
// (pto::mmatmul_sum_wrapped, pto/cpu/gemm_wrapped.hpp), against double-precision references. A
// self-checking program compiled three ways: portable, -march=native (the AVX-512 tiles and masked
// stores) and AVX2 + FMA.
#include "test_run_capture.h"

namespace {

const char* kProgram = R"PTO(
#include "pto/pto.hpp"
#include <cmath>
#include <cstdio>
#include <limits>
#include <random>
#include <string>
#include <thread>
#include <vector>
using namespace pto::gemm;
static std::mt19937 rng(11);
static int fails = 0;
#define CHECK(c, ...) do { if (!(c)) { if (++fails < 20) { std::printf(__VA_ARGS__); std::printf("\n"); } } } while (0)
static const float kNaN = std::numeric_limits<float>::quiet_NaN();

static std::vector<float> random_floats(int64_t n) {
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = std::uniform_real_distribution<float>(0.1f, 1.0f)(rng) * ((rng() & 1) ? 1 : -1);
  return v;
}

// Two threads, uneven chunks, each on its own std::thread.
static void two_thread_pool(int64_t n, pto_loop_body body, void* ctx) {
  const int64_t cut = n / 3;
  std::thread other(body, ctx, 0, cut);
  body(ctx, cut, n);
  other.join();
}

// Row strides of 1, 4 and 16 KiB (N + pad floats) put a micro-panel's rows in a few cache sets;
// the in-place path slices K more finely there. Every tile, K past several slices, a pool.
static void aliased_strides() {
  for (int tile : {int(kTileMain), int(kTileNarrow), int(kTileWide)}) {
#if !defined(__AVX512F__)
    if (tile == kTileWide) continue;  // the wide tile exists with AVX-512 only
#endif
    for (int64_t M : {int64_t(3), int64_t(16), int64_t(29), int64_t(48)})
      for (int64_t ldb : {int64_t(256), int64_t(1024), int64_t(4096)}) {
        const int64_t N = ldb - 7, K = 150;
        const std::vector<float> A = random_floats(M * K), B = random_floats(K * ldb);
        const Term t{A.data(), K, 1, B.data(), ldb, 1, K};
        std::vector<float> C(size_t(M * N), kNaN);
        const Epilogue epi;
        gemm_share_f32(&two_thread_pool, M, N, &t, 1, C.data(), N, false, tile, &epi);
        for (int64_t i = 0; i < M; ++i)
          for (int64_t j = 0; j < N; ++j) {
            double ref = 0, mag = 0;
            for (int64_t p = 0; p < K; ++p) {
              const double x = double(A[size_t(i * K + p)]) * B[size_t(p * ldb + j)];
              ref += x;
              mag += std::fabs(x);
            }
            const float got = C[size_t(i * N + j)];
            CHECK(std::fabs(got - ref) <= 6e-8 * double(K + 1) * mag, "tile %d M=%ld ldb=%ld at %ld,%ld: %g vs %g",
                  tile, long(M), long(ldb), long(i), long(j), got, ref);
          }
      }
  }
}

// A stride-1 convolution's sum as lowered (passes/lower_composites.cpp): the input in rows of
// wrap = W + gap floats, one term per tap, each output row's keep = W columns stored through the
// wrap into out[o, y, x] (row stride ldc per channel, ldy per image row, column stride cs).
struct WrappedCase {
  int64_t O, C, H, W, gap, taps;  // taps x taps filter
  int64_t cs = 1;                 // the destination's column stride
};

static void check_wrapped(const WrappedCase& c, pto_parallel_for_fn pf) {
  const std::string what = "O=" + std::to_string(c.O) + " C=" + std::to_string(c.C) + " W=" + std::to_string(c.W) +
                           " gap=" + std::to_string(c.gap) + " cs=" + std::to_string(c.cs) + (pf ? " 2 threads" : "");
  const int64_t wrap = c.W + c.gap, Ho = c.H, columns = Ho * wrap, L = (Ho + c.taps) * wrap + c.taps;
  const std::vector<float> x = random_floats(c.C * L), w = random_floats(c.O * c.C * c.taps * c.taps);
  const int64_t ldy = c.W * c.cs + 5, ldc = Ho * ldy + 3;  // padded, so stray writes land in poison
  std::vector<float> out(size_t(c.O * ldc), -99.0f);
  for (int64_t o = 0; o < c.O; ++o)
    for (int64_t y = 0; y < Ho; ++y)
      for (int64_t j = 0; j < c.W; ++j) out[size_t(o * ldc + y * ldy + j * c.cs)] = kNaN;
  const auto dst = pto::gview(out.data(), ldc, c.cs, c.O, c.W);
  auto a = [&](int64_t tap) {  // w[:, :, tap]: O x C, element (o, ch) at w[(o*C + ch)*taps^2 + tap]
    return pto::gview(static_cast<const float*>(w.data() + tap), c.C * c.taps * c.taps, c.taps * c.taps, c.O, c.C);
  };
  auto b = [&](int64_t tap) {  // the input shifted by the tap's offset, C x columns
    const int64_t shift = (tap / c.taps) * wrap + tap % c.taps;
    return pto::gview(static_cast<const float*>(x.data() + shift), L, int64_t(1), c.C, columns);
  };
  if (c.taps == 1)
    pto::mmatmul_sum_wrapped(pf, dst, ldy, wrap, columns, a(0), b(0));
  else
    pto::mmatmul_sum_wrapped(pf, dst, ldy, wrap, columns, a(0), b(0), a(1), b(1), a(2), b(2), a(3), b(3), a(4),
                             b(4), a(5), b(5), a(6), b(6), a(7), b(7), a(8), b(8));
  for (int64_t o = 0; o < c.O; ++o)
    for (int64_t k = 0; k < ldc; ++k) {
      const int64_t y = k / ldy, j = (k % ldy) / c.cs;
      const bool inside = y < Ho && (k % ldy) % c.cs == 0 && j < c.W;
      const float got = out[size_t(o * ldc + k)];
      if (!inside) {
        CHECK(got == -99.0f, "%s: wrote outside at %ld,%ld", what.c_str(), long(o), long(k));
        continue;
      }
      double ref = 0, mag = 0;
      for (int64_t tap = 0; tap < c.taps * c.taps; ++tap) {
        const int64_t shift = (tap / c.taps) * wrap + tap % c.taps;
        for (int64_t ch = 0; ch < c.C; ++ch) {
          const double p = double(w[size_t((o * c.C + ch) * c.taps * c.taps + tap)]) *
                           x[size_t(ch * L + shift + y * wrap + j)];
          ref += p;
          mag += std::fabs(p);
        }
      }
      CHECK(std::fabs(got - ref) <= 6e-8 * double(c.C * c.taps * c.taps + 1) * mag, "%s at %ld,%ld,%ld: %g vs %g",
            what.c_str(), long(o), long(y), long(j), got, ref);
    }
}


int main() {
  aliased_strides();
  const std::vector<WrappedCase> cases = {
      {64, 16, 9, 13, 2, 3},      // few rows: in place, every panel crossing image rows
      {64, 48, 20, 56, 1, 3},     // K = 432: several slices accumulated in the strip
      {5, 3, 4, 6, 3, 3},         // fewer columns than a panel (all ragged), a wrap of 9
      {70, 8, 7, 11, 2, 3},       // more rows than the in-place path takes: the plain product, stored
      {16, 4, 6, 5, 0, 1},        // a 1 x 1 filter: no gap (wrap == keep)
      {24, 6, 5, 17, 2, 3, 2},    // a strided destination (column stride 2)
  };
  for (const WrappedCase& c : cases)
    for (pto_parallel_for_fn pf : {pto_parallel_for_fn(nullptr), pto_parallel_for_fn(&two_thread_pool)})
      check_wrapped(c, pf);
  if (fails == 0) std::printf("OK\n");
  return fails == 0 ? 0 : 1;
}
)PTO";

TEST(CpuIsaGemmRows, Portable) { compile_and_run_check(kProgram, "-O2 -pthread"); }
TEST(CpuIsaGemmRows, MarchNative) { compile_and_run_check(kProgram, "-O3 -march=native -pthread"); }
TEST(CpuIsaGemmRows, Avx2Fma) {
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) GTEST_SKIP() << "no AVX2 + FMA";
  compile_and_run_check(kProgram, "-O2 -mavx2 -mfma -pthread");
#else
  GTEST_SKIP() << "x86-64 GCC only";
#endif
}

}  // namespace
