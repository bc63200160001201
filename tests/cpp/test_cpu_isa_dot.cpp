// The native dot-product paths of the CPU headers (pto/cpu/matmul_bf16.hpp: vdpbf16ps,
// pto/cpu/matmul_int8.hpp: vpdpbusd) exist only
// under -march=native on a CPU that has them, and the test binary is built without it: this test
// compiles a self-checking program the way kernels are compiled, twice (native, and with
// PTO_NO_NATIVE_DOT, the portable path that PYPTO_NATIVE_DOT=0 selects), checks each against a
// float64 reference and checks that both give the same bits (docs/isa.md: one summation order).
// Where the CPU has AMX the native build runs bf16 and int8 products on the tiles (int8: the same
// bits; bf16: an order of its own, checked against float64), so a third build without them
// (PTO_NO_AMX) is the one whose bf16 bits must equal the portable path's.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "backends/cpu/compiler.h"
#include "gtest/gtest.h"
#include "target/target.h"
#include "test_run_capture.h"

namespace {

const char* kProgram = R"PTO(
#include "pto/pto.hpp"
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>
using namespace pto;
static std::mt19937 rng(11);
static float rnd() { return std::uniform_real_distribution<float>(0.05f, 2.0f)(rng) * ((rng() & 1) ? 1 : -1); }
static int fails = 0;
// The result bits, hashed: bf16 products (the vector paths give the same bits natively and
// portably; AMX tiles may not) and int8 ones (every path gives the same bits).
static unsigned long long hash_bf16 = 1469598103934665603ull, hash_i8 = 1469598103934665603ull;
#define CHECK(c, ...) do { if (!(c)) { ++fails; std::printf(__VA_ARGS__); std::printf("\n"); } } while (0)

// dst (+)= a (m x k) * b (k x n) on tiles whose padding is NaN; checked against float64 with the
// bound of an f32 accumulation, and the result bits hashed.
template <int R, int C, int R2, int C2>
static void bf16_case(int m, int k, int n, bool acc) {
  static Tile<bf16_t, R, C> a;
  static Tile<bf16_t, R2, C2> b;
  static Tile<float, R, C2> d;
  for (auto& v : a.data) v = bf16_from_float(NAN);
  for (auto& v : b.data) v = bf16_from_float(NAN);
  for (int i = 0; i < m; ++i) for (int p = 0; p < k; ++p) a.data[i * C + p] = bf16_from_float(rnd());
  for (int p = 0; p < k; ++p) for (int j = 0; j < n; ++j) b.data[p * C2 + j] = bf16_from_float(rnd());
  for (auto& v : d.data) v = NAN;
  for (int i = 0; i < m; ++i) for (int j = 0; j < n; ++j) d.data[i * C2 + j] = acc ? rnd() : NAN;
  static float d0[R * C2];
  for (int i = 0; i < R * C2; ++i) d0[i] = d.data[i];
  a.vr = m; a.vc = k; b.vr = k; b.vc = n; d.vr = m; d.vc = n;
  if (acc) TMATMUL_ACC(d, a, b); else TMATMUL(d, a, b);
  CHECK(d.vr == m && d.vc == n, "bf16 %dx%dx%d: valid %dx%d", m, k, n, d.vr, d.vc);
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) {
      double s = acc ? d0[i * C2 + j] : 0.0, mag = std::fabs(s);
      for (int p = 0; p < k; ++p) {
        double t = double(to_float(a.data[i * C + p])) * to_float(b.data[p * C2 + j]);
        s += t; mag += std::fabs(t);
      }
      float got = d.data[i * C2 + j];
      if (!(std::fabs(got - s) <= 6e-8 * (k + 2) * mag)) {
        CHECK(false, "bf16 %dx%dx%d acc %d at (%d,%d): %g vs %g", m, k, n, int(acc), i, j, got, s);
        return;
      }
      unsigned bits;
      std::memcpy(&bits, &got, 4);
      hash_bf16 = (hash_bf16 ^ bits) * 1099511628211ull;
    }
  // Outside the valid region nothing is written.
  for (int i = 0; i < R; ++i)
    for (int j = 0; j < C2; ++j)
      if (i >= m || j >= n) CHECK(std::isnan(d.data[i * C2 + j]), "bf16 %dx%dx%d wrote padding (%d,%d)", m, k, n, i, j);
}

// The int8 product is exact (wrapping int32): compared with int64 sums exactly.
template <int R, int C, int R2, int C2>
static void i8_case(int m, int k, int n, bool acc) {
  static Tile<int8_t, R, C> a;
  static Tile<int8_t, R2, C2> b;
  static Tile<int32_t, R, C2> d;
  std::uniform_int_distribution<int> U(-128, 127);
  for (auto& v : a.data) v = int8_t(U(rng));  // padding too: it must not leak in
  for (auto& v : b.data) v = int8_t(U(rng));
  for (auto& v : d.data) v = -7777777;
  for (int i = 0; i < m; ++i) for (int j = 0; j < n; ++j) d.data[i * C2 + j] = acc ? U(rng) * 1000 : -7777777;
  static int32_t d0[R * C2];
  for (int i = 0; i < R * C2; ++i) d0[i] = d.data[i];
  a.vr = m; a.vc = k; b.vr = k; b.vc = n; d.vr = m; d.vc = n;
  if (acc) TMATMUL_ACC(d, a, b); else TMATMUL(d, a, b);
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) {
      long long s = acc ? d0[i * C2 + j] : 0;
      for (int p = 0; p < k; ++p) s += int(a.data[i * C + p]) * int(b.data[p * C2 + j]);
      int32_t got = d.data[i * C2 + j];
      if (got != int32_t(s)) {
        CHECK(false, "i8 %dx%dx%d acc %d at (%d,%d): %d vs %lld", m, k, n, int(acc), i, j, got, s);
        return;
      }
      hash_i8 = (hash_i8 ^ unsigned(got)) * 1099511628211ull;
    }
  for (int i = 0; i < R; ++i)
    for (int j = 0; j < C2; ++j)
      if (i >= m || j >= n) CHECK(d.data[i * C2 + j] == -7777777, "i8 %dx%dx%d wrote padding (%d,%d)", m, k, n, i, j);
}

// MMATMUL of int8 views into int32 (plain, acc) and mmatmul_epilogue into f32 (row and column
// scales, a strided column operand, an added column, an immediate): exact int32 sums, then the
// steps in f32 one rounding each; A and B from any strides (bt: B transposed, as x @ W.T), the
// destination's padding never written. Single-threaded (no pool) and small: every block shape.
static void i8_global_case(int m, int k, int n, bool bt) {
  std::uniform_int_distribution<int> U(-128, 127);
  const int lda = k + 3, ldb = bt ? k + 5 : n + 7, ldc = n + 2;
  std::vector<int8_t> a(size_t(m) * lda), b(size_t(bt ? n : k) * ldb);
  for (auto& v : a) v = int8_t(U(rng));
  for (auto& v : b) v = int8_t(U(rng));
  a[0] = b[0] = -128;
  auto B = [&](int p, int j) { return int(bt ? b[size_t(j) * ldb + p] : b[size_t(p) * ldb + j]); };
  GlobalView<const int8_t> av{a.data(), lda, 1, m, k};
  GlobalView<const int8_t> bv = bt ? GlobalView<const int8_t>{b.data(), 1, ldb, k, n}
                                   : GlobalView<const int8_t>{b.data(), ldb, 1, k, n};
  std::vector<int32_t> c(size_t(m) * ldc, -7777777), c0(c.size());
  for (int i = 0; i < m; ++i) for (int j = 0; j < n; ++j) c[size_t(i) * ldc + j] = U(rng) * 1000;
  c0 = c;
  std::vector<float> sr(size_t(m) * 3), sc(n), bias(size_t(n) * 2), y(size_t(m) * ldc, -5.0f);
  for (auto& v : sr) v = rnd();
  for (auto& v : sc) v = rnd();
  for (auto& v : bias) v = rnd();
  MMATMUL_ACC(nullptr, GlobalView<int32_t>{c.data(), ldc, 1, m, n}, av, bv);
  mmatmul_epilogue(nullptr, GlobalView<float>{y.data(), ldc, 1, m, n}, av, bv,
                   {epi_rows(0, GlobalView<float>{sr.data(), 3, 1, m, 1}), epi_cols(0, GlobalView<float>{sc.data(), n, 1, 1, n}),
                    epi_cols(1, GlobalView<float>{bias.data(), 0, 2, 1, n}), epi_imm(0, 0.75f)});
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < ldc; ++j) {
      const size_t at = size_t(i) * ldc + j;
      if (j >= n) {
        CHECK(c[at] == -7777777 && y[at] == -5.0f, "i8 global %dx%dx%d wrote padding (%d,%d)", m, k, n, i, j);
        continue;
      }
      long long s = 0;
      for (int p = 0; p < k; ++p) s += int(a[size_t(i) * lda + p]) * B(p, j);
      volatile float want = float(int32_t(s));  // volatile: each step rounded (no FMA contraction)
      want = want * sr[size_t(i) * 3];
      want = want * sc[j];
      want = want + bias[size_t(j) * 2];
      want = want * 0.75f;
      if (c[at] != int32_t(s + c0[at]) || y[at] != float(want)) {
        CHECK(false, "i8 global %dx%dx%d bt %d at (%d,%d): %d vs %lld, %a vs %a", m, k, n, int(bt), i, j, c[at],
              s + c0[at], y[at], float(want));
        return;
      }
      hash_i8 = (hash_i8 ^ unsigned(c[at])) * 1099511628211ull;
      unsigned bits;
      std::memcpy(&bits, &y[at], 4);
      hash_i8 = (hash_i8 ^ bits) * 1099511628211ull;
    }
}

// MMATMUL of bf16 views into an f32 or bf16 destination (plain and accumulating; A and B from any
// strides, bt: B transposed): checked against float64 with the bound of an f32 accumulation (plus
// one bf16 rounding for a bf16 destination), the destination's padding never written. Not hashed:
// on AMX tiles (Sapphire Rapids and later) the order of the additions inside one TDPBF16PS is the
// hardware's, so the native bits may differ from the portable ones within that bound.
template <class D>
static void bf16_global_case(int m, int k, int n, bool bt, bool acc) {
  const int lda = k + 3, ldb = bt ? k + 5 : n + 7, ldc = n + 2;
  std::vector<bf16_t> a(size_t(m) * lda, bf16_from_float(NAN)), b(size_t(bt ? n : k) * ldb, bf16_from_float(NAN));
  for (int i = 0; i < m; ++i) for (int p = 0; p < k; ++p) a[size_t(i) * lda + p] = bf16_from_float(rnd());
  for (int p = 0; p < k; ++p)
    for (int j = 0; j < n; ++j) b[bt ? size_t(j) * ldb + p : size_t(p) * ldb + j] = bf16_from_float(rnd());
  auto B = [&](int p, int j) { return double(to_float(bt ? b[size_t(j) * ldb + p] : b[size_t(p) * ldb + j])); };
  GlobalView<const bf16_t> av{a.data(), lda, 1, m, k};
  GlobalView<const bf16_t> bv = bt ? GlobalView<const bf16_t>{b.data(), 1, ldb, k, n}
                                   : GlobalView<const bf16_t>{b.data(), ldb, 1, k, n};
  std::vector<D> c(size_t(m) * ldc, from_float<D>(-5.0f));
  for (int i = 0; i < m; ++i) for (int j = 0; j < n; ++j) c[size_t(i) * ldc + j] = from_float<D>(acc ? rnd() : NAN);
  const std::vector<D> c0 = c;
  if (acc) MMATMUL_ACC(nullptr, GlobalView<D>{c.data(), ldc, 1, m, n}, av, bv);
  else MMATMUL(nullptr, GlobalView<D>{c.data(), ldc, 1, m, n}, av, bv);
  const double round = std::is_same_v<D, float> ? 0.0 : 1.0 / 256;
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < ldc; ++j) {
      const size_t at = size_t(i) * ldc + j;
      const double got = to_float(c[at]);
      if (j >= n) {
        CHECK(got == -5.0, "bf16 global %dx%dx%d wrote padding (%d,%d)", m, k, n, i, j);
        continue;
      }
      double s = acc ? double(to_float(c0[at])) : 0.0, mag = std::fabs(s);
      for (int p = 0; p < k; ++p) {
        const double t = double(to_float(a[size_t(i) * lda + p])) * B(p, j);
        s += t;
        mag += std::fabs(t);
      }
      if (!(std::fabs(got - s) <= 6e-8 * (k + 2) * mag + round * std::fabs(s))) {
        CHECK(false, "bf16 global %dx%dx%d bt %d acc %d at (%d,%d): %g vs %g", m, k, n, int(bt), int(acc), i, j, got, s);
        return;
      }
    }
}

int main() {
  i8_case<128, 256, 256, 256>(128, 256, 256, false);
  i8_case<64, 70, 70, 40>(61, 67, 33, true);     // k % 4 == 3, ragged m and n
  i8_case<64, 70, 70, 40>(15, 70, 40, false);    // k % 4 == 2
  i8_case<8, 5, 5, 8>(5, 5, 7, true);            // k % 4 == 1
  i8_case<16, 1, 1, 48>(13, 1, 47, false);
  i8_case<32, 128, 128, 96>(29, 128, 96, true);
  i8_global_case(130, 257, 70, false);  // 130 rows: balanced 13-row panels; k % 4 == 1
  i8_global_case(29, 67, 33, true);     // a ragged 1-row panel; transposed B, k % 4 == 3
  i8_global_case(14, 130, 64, false);   // one whole panel, two 16-quad blocks of A and a rest
  i8_global_case(5, 4, 3, true);
  bf16_case<128, 256, 256, 256>(128, 256, 256, false);
  bf16_case<128, 256, 256, 256>(128, 256, 256, true);
  bf16_case<64, 70, 70, 40>(61, 67, 33, false);   // ragged m (not a multiple of 14), odd k, n < 2 panels
  bf16_case<64, 70, 70, 40>(15, 70, 40, true);
  bf16_case<8, 3, 3, 8>(5, 3, 7, false);
  bf16_case<16, 1, 1, 48>(13, 1, 47, true);        // k = 1: the odd tail alone
  bf16_case<1, 64, 64, 1>(1, 63, 1, false);
  bf16_case<32, 128, 128, 96>(29, 128, 96, false);  // B read in place (rows of whole 32-column panels)
  bf16_case<20, 67, 67, 64>(19, 67, 50, true);       // in place: odd k, ragged n, NaN past k and n
  bf16_global_case<float>(130, 257, 70, false, false);  // AMX where present: ragged blocks, odd k
  bf16_global_case<float>(64, 96, 64, true, true);      // whole 32 x 32 blocks straight from/to C
  bf16_global_case<bf16_t>(64, 64, 96, false, false);   // a bf16 destination, whole rows converted
  bf16_global_case<bf16_t>(33, 31, 45, true, true);
  bf16_global_case<float>(40, 70, 45, true, false);     // transposed B: 16-pair blocks, a rest, 13 columns
  bf16_global_case<float>(5, 7, 9, false, true);        // too few rows for the tiles: vector kernels
  std::printf("amx %d %d\n", int(PTO_AMX_BF16 && amx::enabled()), int(PTO_AMX_INT8 && amx::enabled()));
  std::printf("native %d %d hash %016llx %016llx\n", PTO_NATIVE_BF16_DOT, PTO_NATIVE_INT8_DOT, hash_bf16, hash_i8);
  if (fails == 0) std::printf("OK\n");
  return fails == 0 ? 0 : 1;
}
)PTO";

// Compiles and runs kProgram with `defines`; returns its output (the hash line and OK).
std::string compile_and_run(const std::string& cxx, const std::string& dir, const std::string& defines) {
  const std::string src = dir + "/dot.cpp", exe = dir + "/dot";
  std::ofstream(src) << kProgram;
  int st = 0;
  std::string out = run_capture(cxx + " -std=c++17 -O3 -march=native " + defines + " -I" +
                                    pypto::cpu::include_dir() + " " + src + " -o " + exe,
                                &st);
  EXPECT_EQ(st, 0) << "compile failed:\n" << out;
  if (st != 0) return "";
  out = run_capture(exe, &st);
  EXPECT_EQ(st, 0) << out;
  EXPECT_NE(out.find("OK"), std::string::npos) << out;
  std::remove(src.c_str());
  std::remove(exe.c_str());
  return out;
}

// The bf16 and the int8 hash of the program's output.
std::string hash_of(const std::string& out, int which) {
  auto at = out.find("hash ");
  return at == std::string::npos ? "" : out.substr(at + 5 + 17 * which, 16);
}

TEST(CpuIsaDot, NativeAndPortablePathsAgree) {
  const char* env = std::getenv("PYPTO_CXX");
  std::string cxx = env && *env ? env : "c++";
  int st = 0;
  run_capture("command -v " + cxx, &st);
  if (st != 0) GTEST_SKIP() << "no C++ compiler (" << cxx << ")";
  char dir[] = "/tmp/pto_dot_XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string native = compile_and_run(cxx, dir, "");
  const std::string vector_dot = compile_and_run(cxx, dir, "-DPTO_NO_AMX");  // PYPTO_AMX=0
  const std::string portable = compile_and_run(cxx, dir, "-DPTO_NO_NATIVE_DOT");
  rmdir(dir);
  EXPECT_NE(portable.find("native 0 0"), std::string::npos) << portable;
  // Where the CPU reports AVX512-BF16 / AVX512-VNNI, the default is the native path.
  const auto& simd = pypto::runtime::host_target().simd;
  auto has = [&](const char* f) { return std::find(simd.begin(), simd.end(), f) != simd.end(); };
  if (has("avx512_bf16")) {
    EXPECT_NE(native.find("native 1"), std::string::npos) << native;
  }
  if (has("avx512_vnni")) {
    EXPECT_NE(native.find(" 1 hash"), std::string::npos) << native;
  }
  // Where it reports AMX (and the kernel grants the tile state, as Linux >= 5.16 does), the
  // whole-matrix products run on the tiles; the portable build never does.
  if (has("amx_tile")) {
    EXPECT_NE(native.find("amx 1 1"), std::string::npos) << native;
  }
  EXPECT_NE(portable.find("amx 0 0"), std::string::npos) << portable;
  EXPECT_NE(vector_dot.find("amx 0 0"), std::string::npos) << vector_dot;
  EXPECT_EQ(hash_of(native, 1).size(), 16u) << native;
  // int8 sums are exact: every path gives the same bits. bf16's vector paths agree bit for bit;
  // the AMX tiles (in `native` where the CPU has them) were checked against float64 only.
  EXPECT_EQ(hash_of(native, 1), hash_of(portable, 1)) << "native:\n" << native << "portable:\n" << portable;
  EXPECT_EQ(hash_of(vector_dot, 1), hash_of(portable, 1)) << vector_dot;
  EXPECT_EQ(hash_of(vector_dot, 0), hash_of(portable, 0)) << "vector:\n"
                                                          << vector_dot << "portable:\n"
                                                          << portable;
}

}  // namespace
