// Accuracy of the vectorised float element functions (pto::math) against double precision, run
// through the tile instructions so the measured code is the vectorised loop. Target: relative
// error <= 1e-6 over the normal range (exp/log/tanh/sigmoid/erf and the activations).
#include "test_cpu_isa_util.hpp"

namespace {
using namespace pto_test;

constexpr int kN = 4096;
using Row = Tile<float, 1, kN>;

// Max relative error (|got - ref| / max(|ref|, floor)) over samples of [lo, hi].
template <class Inst, class Ref>
double max_rel_err(Inst inst, Ref ref, double lo, double hi, double floor = 0, bool log_spaced = false,
                   int rounds = 40) {
  double worst = 0;
  Row x, y;
  for (int k = 0; k < rounds; ++k) {
    for (int i = 0; i < kN; ++i)
      x.data[i] = float(log_spaced ? std::exp(urand(std::log(lo), std::log(hi))) : urand(lo, hi));
    inst(y, x);
    for (int i = 0; i < kN; ++i) {
      double r = ref(double(x.data[i]));
      double e = std::fabs(double(y.data[i]) - r) / std::max(std::fabs(r), floor);
      if (!(e <= worst)) worst = e;  // NaN counts as the worst
    }
  }
  return worst;
}

#define INST(NAME) [](Row& o, const Row& i) { NAME(o, i); }

TEST(CpuIsaMath, ExpLog) {
  EXPECT_LE(max_rel_err(INST(TEXP), [](double x) { return std::exp(x); }, -87.3, 88.7), 1e-6);
  EXPECT_LE(max_rel_err(INST(TEXP), [](double x) { return std::exp(x); }, -1e-3, 1e-3), 1e-6);
  // Subnormal results: absolute accuracy at the subnormal spacing.
  EXPECT_LE(max_rel_err(INST(TEXP), [](double x) { return std::exp(x); }, -103.9, -87.4, 1.2e-38), 1e-6);
  EXPECT_LE(max_rel_err(INST(TLOG), [](double x) { return std::log(x); }, 1e-37, 1e37, 0, true), 1e-6);
  EXPECT_LE(max_rel_err(INST(TLOG), [](double x) { return std::log(x); }, 0.5, 2.0), 1e-6);
  EXPECT_LE(max_rel_err(INST(TLOG), [](double x) { return std::log(x); }, 1e-44, 1e-38, 0, true), 1e-6);
}

TEST(CpuIsaMath, TanhSigmoidErf) {
  EXPECT_LE(max_rel_err(INST(TTANH), [](double x) { return std::tanh(x); }, -12, 12), 1e-6);
  EXPECT_LE(max_rel_err(INST(TTANH), [](double x) { return std::tanh(x); }, -1e-4, 1e-4), 1e-6);
  EXPECT_LE(max_rel_err(INST(TSIGMOID), [](double x) { return 1 / (1 + std::exp(-x)); }, -85, 30), 1e-6);
  EXPECT_LE(max_rel_err(INST(TERF), [](double x) { return std::erf(x); }, -6, 6), 1e-6);
  EXPECT_LE(max_rel_err(INST(TERF), [](double x) { return std::erf(x); }, -1e-3, 1e-3), 1e-6);
  // Absolute error of erf, the usual yardstick.
  EXPECT_LE(max_rel_err(INST(TERF), [](double x) { return std::erf(x); }, -6, 6, 1.0), 2e-7);
}

TEST(CpuIsaMath, Activations) {
  EXPECT_LE(max_rel_err(INST(TSILU), [](double x) { return x / (1 + std::exp(-x)); }, -80, 80), 1e-6);
  auto gelu = [](double x) { return 0.5 * x * std::erfc(-x / std::sqrt(2.0)); };
  auto gelu_tanh = [](double x) {
    return x / (1 + std::exp(-2 * std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
  };
  EXPECT_LE(max_rel_err(INST(TGELU), gelu, -5, 10), 1e-6);
  EXPECT_LE(max_rel_err(INST(TGELU_TANH), gelu_tanh, -5, 10), 1e-6);
  // The negative tails are exp(-x^2/2) and exp(-c x^3): relative accuracy holds there too (the
  // exponent is formed exactly), down to where the results leave the normal float range.
  EXPECT_LE(max_rel_err(INST(TGELU), gelu, -12.5, -5), 2e-6);
  EXPECT_LE(max_rel_err(INST(TGELU_TANH), gelu_tanh, -9, -5), 2e-6);
}

TEST(CpuIsaMath, FloorSqrtRecip) {
  EXPECT_EQ(max_rel_err(INST(TFLOOR), [](double x) { return std::floor(x); }, -1e9, 1e9, 1), 0.0);
  EXPECT_EQ(max_rel_err(INST(TFLOOR), [](double x) { return std::floor(x); }, -4, 4, 1), 0.0);
  EXPECT_LE(max_rel_err(INST(TSQRT), [](double x) { return std::sqrt(x); }, 1e-30, 1e30, 0, true), 6e-8);
  EXPECT_LE(
      max_rel_err(INST(TRSQRT), [](double x) { return 1 / std::sqrt(x); }, 1e-30, 1e30, 0, true), 1.2e-7);
  EXPECT_LE(max_rel_err(INST(TRECIP), [](double x) { return 1 / x; }, 1e-30, 1e30, 0, true), 6e-8);
}

TEST(CpuIsaMath, ScalarAndVectorPathsAgree) {
  // The element functions called one at a time give the same bits as the vectorised tile loop.
  Row x, y;
  for (int i = 0; i < kN; ++i) x.data[i] = float(urand(-30, 30));
  TEXP(y, x);
  for (int i = 0; i < kN; i += 97) EXPECT_NEAR(y.data[i], math::exp(x.data[i]), 2e-7 * y.data[i]);
  TERF(y, x);
  for (int i = 0; i < kN; i += 97) EXPECT_NEAR(y.data[i], math::erf(x.data[i]), 2e-7);
}

}  // namespace
