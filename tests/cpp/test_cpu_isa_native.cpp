// The test binary is built without -march=native, so the other test_cpu_isa*.cpp exercise the
// headers' portable SIMD paths. Generated kernels are compiled with -O3 -march=native, which
// selects other paths (AVX-512 / AVX2 micro-kernels, vector sqrt builtins, wider lanes): this test
// compiles a self-checking program the way kernels are compiled and runs it.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "backends/cpu/compiler.h"
#include "test_cpu_isa_util.hpp"
#include "test_run_capture.h"

namespace {

const char* kProgram = R"PTO(
#include "pto/pto.hpp"
#include <cmath>
#include <cstdio>
#include <vector>
#include <random>
using namespace pto;
static std::mt19937 rng(7);
static float rnd() { return std::uniform_real_distribution<float>(0.1f, 1.0f)(rng) * ((rng() & 1) ? 1 : -1); }
static int fails = 0;
#define CHECK(c, ...) do { if (!(c)) { ++fails; std::printf(__VA_ARGS__); std::printf("\n"); } } while (0)

static void gemm_case(long M, long N, long K, bool at, bool bt, bool acc) {
  std::vector<float> A(M * K), B(K * N), C(M * N);
  for (auto& x : A) x = rnd();
  for (auto& x : B) x = rnd();
  for (auto& x : C) x = rnd();
  std::vector<float> C0 = C;
  gemm_f32(M, N, K, A.data(), at ? 1 : K, at ? M : 1, B.data(), bt ? 1 : N, bt ? K : 1, C.data(), N, acc);
  for (long i = 0; i < M; ++i)
    for (long j = 0; j < N; ++j) {
      double ref = acc ? C0[i * N + j] : 0, mag = std::fabs(ref);
      for (long p = 0; p < K; ++p) {
        double t = double(A[at ? p * M + i : i * K + p]) * B[bt ? j * K + p : p * N + j];
        ref += t; mag += std::fabs(t);
      }
      if (!(std::fabs(C[i * N + j] - ref) <= 6e-8 * (K + 2) * mag)) {
        CHECK(false, "gemm %ld %ld %ld at (%ld,%ld): %g vs %g", M, N, K, i, j, C[i * N + j], ref);
        return;
      }
    }
}

template <class F, class G>
static void math_case(const char* name, F inst, G ref, double lo, double hi, double tol) {
  static Tile<float, 1, 4096> x, y;
  std::uniform_real_distribution<double> U(lo, hi);
  double worst = 0;
  for (int k = 0; k < 8; ++k) {
    for (int i = 0; i < 4096; ++i) x.data[i] = float(U(rng));
    x.vc = 4093;  // a ragged tail
    inst(y, x);
    CHECK(y.vc == 4093, "%s valid", name);
    for (int i = 0; i < 4093; ++i) {
      double r = ref(double(x.data[i])), e = std::fabs(y.data[i] - r) / std::fabs(r);
      if (!(e <= worst)) worst = e;
    }
  }
  CHECK(worst <= tol, "%s: max rel err %g", name, worst);
}

int main() {
  for (long m : {1L, 13L, 14L, 15L, 64L, 170L})
    for (long n : {1L, 16L, 31L, 32L, 33L, 100L})
      for (long k : {1L, 7L, 64L, 300L}) gemm_case(m, n, k, false, false, false);
  gemm_case(61, 47, 129, true, false, true);
  gemm_case(61, 47, 129, false, true, false);
  gemm_case(61, 47, 129, true, true, true);
  gemm_case(200, 1100, 20, false, false, true);

  math_case("exp", [](auto& o, const auto& i) { TEXP(o, i); }, [](double v) { return std::exp(v); }, -87, 88, 1e-6);
  math_case("log", [](auto& o, const auto& i) { TLOG(o, i); }, [](double v) { return std::log(v); }, 1e-3, 1e6, 1e-6);
  math_case("tanh", [](auto& o, const auto& i) { TTANH(o, i); }, [](double v) { return std::tanh(v); }, -9, 9, 1e-6);
  math_case("sigmoid", [](auto& o, const auto& i) { TSIGMOID(o, i); }, [](double v) { return 1 / (1 + std::exp(-v)); }, -80, 30, 1e-6);
  math_case("erf", [](auto& o, const auto& i) { TERF(o, i); }, [](double v) { return std::erf(v); }, -5, 5, 1e-6);
  math_case("silu", [](auto& o, const auto& i) { TSILU(o, i); }, [](double v) { return v / (1 + std::exp(-v)); }, -80, 80, 1e-6);
  math_case("gelu", [](auto& o, const auto& i) { TGELU(o, i); }, [](double v) { return 0.5 * v * std::erfc(-v / std::sqrt(2.0)); }, -12, 10, 2e-6);
  math_case("gelu_tanh", [](auto& o, const auto& i) { TGELU_TANH(o, i); }, [](double v) { return v / (1 + std::exp(-1.5957691216057308 * (v + 0.044715 * v * v * v))); }, -9, 10, 2e-6);
  math_case("sqrt", [](auto& o, const auto& i) { TSQRT(o, i); }, [](double v) { return std::sqrt(v); }, 1e-3, 1e3, 6e-8);
  math_case("rsqrt", [](auto& o, const auto& i) { TRSQRT(o, i); }, [](double v) { return 1 / std::sqrt(v); }, 1e-3, 1e3, 1.2e-7);
  math_case("floor-", [](auto& o, const auto& i) { TFLOOR(o, i); }, [](double v) { return std::floor(v); }, -1e5, -1, 0);
  math_case("floor+", [](auto& o, const auto& i) { TFLOOR(o, i); }, [](double v) { return std::floor(v); }, 1, 1e5, 0);

  // Broadcasting binary ops, row reductions and a tile matmul on ragged tiles.
  Tile<float, 37, 70> a, d; Tile<float, 1, 70> row; Tile<float, 37, 1> col, rs;
  for (auto& v : a.data) v = rnd();
  for (auto& v : row.data) v = rnd();
  for (auto& v : col.data) v = rnd();
  a.vr = 35; a.vc = 67;
  for (int r = 0; r < 37; ++r) for (int c = 0; c < 70; ++c) if (r >= 35 || c >= 67) a.data[r * 70 + c] = NAN;
  TADD(d, a, row);
  TMUL(d, d, col);
  CHECK(d.vr == 35 && d.vc == 67, "binary valid");
  for (int r = 0; r < 35; ++r) for (int c = 0; c < 67; ++c) {
    float want = (a.data[r * 70 + c] + row.data[c]) * col.data[r];
    CHECK(std::fabs(d.data[r * 70 + c] - want) <= 1e-6f * std::fabs(want), "bcast (%d,%d)", r, c);
  }
  TROWSUM(rs, a);
  for (int r = 0; r < 35; ++r) {
    double s = 0, m = 0;
    for (int c = 0; c < 67; ++c) { s += a.data[r * 70 + c]; m += std::fabs(a.data[r * 70 + c]); }
    CHECK(std::fabs(rs.data[r] - s) <= 1e-6 * m, "rowsum %d", r);
  }
  Tile<float, 70, 37> b; Tile<float, 37, 37> mm;
  for (auto& v : b.data) v = rnd();
  b.vr = 67; b.vc = 33;
  TMATMUL(mm, a, b);
  CHECK(mm.vr == 35 && mm.vc == 33, "matmul valid");
  for (int i = 0; i < 35; ++i) for (int j = 0; j < 33; ++j) {
    double s = 0, m = 0;
    for (int p = 0; p < 67; ++p) { double t = double(a.data[i * 70 + p]) * b.data[p * 37 + j]; s += t; m += std::fabs(t); }
    CHECK(std::fabs(mm.data[i * 37 + j] - s) <= 6e-8 * 70 * m, "matmul (%d,%d)", i, j);
  }
  // Transposed copies (16 x 16 blocks transposed in registers, ragged edges element by element):
  // TLOAD from a column-major view, TSTORE to one, TTRANS; exact.
  static float g[128 * 96], out[64 * 128];
  for (auto& v : g) v = rnd();
  for (int vr : {48, 45, 16, 7})
    for (int vc : {64, 61, 17}) {
      Tile<float, 48, 64> t; Tile<float, 64, 48> tt;
      TLOAD(t, gview(g + 97, 1, 96, vr, vc));
      CHECK(t.vr == vr && t.vc == vc, "load^T valid");
      for (int r = 0; r < vr; ++r) for (int c = 0; c < vc; ++c)
        CHECK(t.data[r * 64 + c] == g[97 + r + c * 96], "load^T %dx%d (%d,%d)", vr, vc, r, c);
      for (auto& v : out) v = -7.0f;
      TSTORE(gview(out, 1, 128, vr, vc), t);
      for (int c = 0; c < 64; ++c) for (int r = 0; r < 128; ++r)
        CHECK(out[c * 128 + r] == (r < vr && c < vc ? t.data[r * 64 + c] : -7.0f), "store^T %dx%d (%d,%d)", vr, vc, r, c);
      TTRANS(tt, t);
      for (int r = 0; r < vc; ++r) for (int c = 0; c < vr; ++c)
        CHECK(tt.data[r * 48 + c] == t.data[c * 64 + r], "trans %dx%d (%d,%d)", vr, vc, r, c);
    }
  if (fails == 0) std::printf("OK\n");
  return fails == 0 ? 0 : 1;
}
)PTO";

TEST(CpuIsaNative, HeadersPassUnderMarchNative) { compile_and_run_check(kProgram, "-O3 -march=native"); }
// The same program with AVX2 + FMA only (8-lane transposes, the 6 x 16 GEMM tile): Zen 3 and the like.
TEST(CpuIsaNative, HeadersPassUnderAvx2Fma) { compile_and_run_check_avx2_fma(kProgram); }

}  // namespace
