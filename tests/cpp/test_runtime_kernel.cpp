// runtime::Kernel: lowering once, text at every level, argument checks, and running on both
// backends (the CPU result is compared with the interpreter's and with a double reference).
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>

#include "ir/builder.h"
#include "runtime/kernel.h"
#include "test_cpu_codegen_util.h"

namespace {

using namespace cpu_test;
using pypto::runtime::Backend;
using pypto::runtime::Kernel;

// out = relu(A @ B + bias) * s, for a runtime scalar s.
Program linear_program(int64_t M, int64_t K, int64_t N) {
  Builder b("linear");
  View A = b.add_param("A", DType::F32, {M, K});
  View B = b.add_param("B", DType::F32, {K, N});
  View bias = b.add_param("bias", DType::F32, {N});
  Expr s = b.add_scalar_param("s", DType::F32);
  View y = b.binary(Opcode::TADD, b.matmul(A, B), bias);
  y = b.binary(Opcode::TMUL, b.unary(Opcode::TRELU, y), s);
  return b.finish({y});
}

struct LinearData {
  int64_t M, K, N;
  HostF A, B, bias;
  std::vector<double> want;
  LinearData(int64_t m, int64_t k, int64_t n, double s)
      : M(m), K(k), N(n), A(random_f32({m, k}, 21)), B(random_f32({k, n}, 22)), bias(random_f32({n}, 23)) {
    want.assign(size_t(M * N), 0.0);
    for (int64_t r = 0; r < M; ++r)
      for (int64_t c = 0; c < N; ++c) {
        double acc = bias.data[size_t(c)];
        for (int64_t q = 0; q < K; ++q) acc += double(A.at(r, q)) * B.at(q, c);
        want[size_t(r * N + c)] = std::max(acc, 0.0) * s;
      }
  }
  RunArgs args(HostF& out, double s) { return {{A.arg(), B.arg(), bias.arg(), out.arg()}, {{true, 0, s}}}; }
};

TEST(RuntimeKernel, CpuMatchesInterpreterAndReference) {
  REQUIRE_PTO_HEADERS();
  LinearData d(70, 45, 33, 1.5);
  Program p = linear_program(d.M, d.K, d.N);
  Kernel cpu(p, Backend::Cpu, {}), interp(p, Backend::Interp, {});
  HostF out = nan_f32({d.M, d.N}), outi = nan_f32({d.M, d.N});
  cpu.run(d.args(out, 1.5));
  interp.run(d.args(outi, 1.5));
  EXPECT_LT(rel_err(out.data, d.want), 1e-5);
  EXPECT_LT(rel_err(outi.data, d.want), 1e-5);
  EXPECT_LT(rel_err(out.data, outi.data), 1e-5);
  // A scalar is a runtime value: no recompile, new result.
  HostF out2 = nan_f32({d.M, d.N});
  cpu.run(d.args(out2, -0.5));
  for (size_t k = 0; k < out2.data.size(); ++k)
    EXPECT_FLOAT_EQ(out2.data[k], out.data[k] / 1.5f * -0.5f) << k;
}

TEST(RuntimeKernel, CompileReportsCaching) {
  REQUIRE_PTO_HEADERS();
  // A shape no other test uses, so the first compile in a fresh cache is a real one.
  Program p = linear_program(19, 23, 29);
  Kernel k1(p, Backend::Cpu, {});
  double t1 = k1.compile();
  EXPECT_EQ(k1.compile(), 0.0);  // already compiled
  std::printf("[ measure  ] first compile of a lowered linear kernel: %.0f ms (%s)\n", t1 * 1e3,
              k1.compiled_from_cache() ? "from cache" : "compiled");
  Kernel k2(p, Backend::Cpu, {});
  EXPECT_EQ(k2.compile(), 0.0);
  EXPECT_TRUE(k2.compiled_from_cache());
  Kernel ki(p, Backend::Interp, {});
  EXPECT_EQ(ki.compile(), 0.0);
}

// A cached kernel called again and again computes the same thing every time, into fresh output.
// (Its per-call cost is measured by bench/system.py's dispatch case, not here.)
TEST(RuntimeKernel, RepeatedCallsOfACachedKernel) {
  REQUIRE_PTO_HEADERS();
  Builder b("tiny_add");
  View x = b.add_param("x", DType::F32, {4, 4});
  View y = b.add_param("y", DType::F32, {4, 4});
  Program p = b.finish({b.binary(Opcode::TADD, x, y)});
  Kernel k(p, Backend::Cpu, {});
  HostF X = random_f32({4, 4}, 31), Y = random_f32({4, 4}, 32), Z = nan_f32({4, 4});
  RunArgs a{{X.arg(), Y.arg(), Z.arg()}, {}};
  k.run(a);
  for (size_t i = 0; i < Z.data.size(); ++i) ASSERT_EQ(Z.data[i], X.data[i] + Y.data[i]);
  for (int r = 0; r < 50; ++r) {
    std::fill(Z.data.begin(), Z.data.end(), std::numeric_limits<float>::quiet_NaN());
    X.data[size_t(r % 16)] += 1.0f;
    k.run(a);
    for (size_t i = 0; i < Z.data.size(); ++i) ASSERT_EQ(Z.data[i], X.data[i] + Y.data[i]) << r;
  }
}

TEST(RuntimeKernel, TextAtEveryLevel) {
  Program p = linear_program(16, 16, 16);
  Kernel k(p, Backend::Interp, {});
  for (const char* level : {"tensor", "tile", "isa"}) {
    std::string t = k.as_text(level);
    EXPECT_NE(t.find("TMATMUL"), std::string::npos) << level << ":\n" << t;
  }
  EXPECT_NE(k.as_text("isa").find("TLOAD"), std::string::npos);
  std::string src = k.as_text("source");  // generated even for the interpreter backend
  EXPECT_NE(src.find("pypto_kernel"), std::string::npos);
  EXPECT_NE(src.find("pto::TMATMUL"), std::string::npos);
  try {
    k.as_text("llvm");
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("'llvm'"), std::string::npos) << m;
    for (const char* level : {"tensor", "tile", "isa", "source"})
      EXPECT_NE(m.find(level), std::string::npos) << m;
  }
}

void expect_run_error(Kernel& k, const RunArgs& a, std::vector<std::string> fragments) {
  try {
    k.run(a);
    ADD_FAILURE() << "expected an error containing '" << fragments[0] << "'";
  } catch (const Error& e) {
    for (const auto& f : fragments) EXPECT_NE(std::string(e.what()).find(f), std::string::npos) << e.what();
  }
}

TEST(RuntimeKernel, ArgumentChecks) {
  Program p = linear_program(13, 7, 5);
  for (Backend be : {Backend::Interp, Backend::Cpu}) {
    Kernel k(p, be, {});
    LinearData d(13, 7, 5, 1.0);
    HostF out = nan_f32({13, 5});
    // Wrong shape: B transposed.
    HostF Bt = random_f32({5, 7}, 1);
    expect_run_error(k, {{d.A.arg(), Bt.arg(), d.bias.arg(), out.arg()}, {{true, 0, 1.0}}},
                     {"argument 2 ('B')", "expected f32[7, 5], got f32[5, 7]"});
    // Wrong dtype.
    Host<double> Ad({13, 7}, DType::F64, 1.0);
    expect_run_error(k, {{Ad.arg(), d.B.arg(), d.bias.arg(), out.arg()}, {{true, 0, 1.0}}},
                     {"argument 1 ('A')", "expected f32[13, 7], got f64[13, 7]"});
    // Wrong counts.
    expect_run_error(k, {{d.A.arg(), d.B.arg()}, {{true, 0, 1.0}}}, {"takes 4 tensor arguments, got 2"});
    expect_run_error(k, {{d.A.arg(), d.B.arg(), d.bias.arg(), out.arg()}, {}},
                     {"takes 1 scalar argument, got 0"});
    // Nothing was written by the failed calls.
    for (float x : out.data) EXPECT_TRUE(std::isnan(x));
  }
}

}  // namespace
