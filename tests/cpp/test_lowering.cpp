// Builder + tiling + parallelize, executed on the reference interpreter against C++ references.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "backends/interp/interpreter.h"
#include "ir/builder.h"
#include "ir/printer.h"
#include "ir/verifier.h"
#include "passes/pipeline.h"

using namespace pypto;
using namespace pypto::ir;

namespace {

std::vector<float> random_vec(size_t n, unsigned seed) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d;
  std::vector<float> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

runtime::TensorArg arg(std::vector<float>& v, std::vector<int64_t> shape) {
  runtime::TensorArg a;
  a.data = v.data();
  a.dtype = DType::F32;
  a.shape = shape;
  a.strides.assign(shape.size(), 1);
  for (int i = int(shape.size()) - 2; i >= 0; --i) a.strides[i] = a.strides[i + 1] * shape[i + 1];
  return a;
}

double rel_err(const std::vector<float>& out, const std::vector<double>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    num += (out[i] - ref[i]) * (out[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

// The seed's tile matrix_multiply, built as the front end would build it.
Program seed_matmul(int64_t M, int64_t K, int64_t N) {
  Builder b("matrix_multiply");
  View A = b.add_param("A", DType::F32, {M, K});
  View B = b.add_param("B", DType::F32, {K, N});
  View C = b.add_param("C", DType::F32, {M, N});
  const int64_t T = 64;
  Expr i = b.begin_for("i", int_imm(0), int_imm(M), int_imm(T));
  Expr j = b.begin_for("j", int_imm(0), int_imm(N), int_imm(T));
  View acc = b.full({T, T}, DType::F32, float_imm(0.0));
  Expr k = b.begin_for("k", int_imm(0), int_imm(K), int_imm(T));
  auto sl = [](Expr lo) {
    Index ix;
    ix.start = lo;
    ix.stop = lo + int_imm(64);
    return ix;
  };
  View a = b.slice(A, {sl(i), sl(k)});
  View bt = b.slice(B, {sl(k), sl(j)});
  b.matmul_acc(acc, a, bt);
  b.end_for();
  b.assign(b.slice(C, {sl(i), sl(j)}), acc);
  b.end_for();
  b.end_for();
  return b.finish({});
}

}  // namespace

TEST(Lowering, SeedMatmulRaggedOnInterpreter) {
  const int64_t M = 200, K = 130, N = 99;
  Program p = seed_matmul(M, K, N);
  passes::PipelineOptions opt;
  auto l = passes::lower(p, opt);
  verify(l.isa, Level::Tile);
  std::string text = print(l.isa);
  EXPECT_NE(text.find("parallel for"), std::string::npos) << text;
  auto A = random_vec(M * K, 1), B = random_vec(K * N, 2);
  std::vector<float> C(M * N, NAN);
  runtime::RunArgs args;
  args.tensors = {arg(A, {M, K}), arg(B, {K, N}), arg(C, {M, N})};
  interp::interpret(l.isa, args);
  std::vector<double> ref(M * N, 0);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n)
      for (int64_t k = 0; k < K; ++k) ref[m * N + n] += double(A[m * K + k]) * B[k * N + n];
  EXPECT_LT(rel_err(C, ref), 1e-5);
}

TEST(Lowering, SoftmaxWithReturnedOutput) {
  const int64_t R = 37, Cn = 1100;
  Builder b("softmax");
  View x = b.add_param("x", DType::F32, {R, Cn});
  View y = b.softmax(x, -1);
  Program p = b.finish({y});
  auto l = passes::lower(p, {});
  ASSERT_EQ(l.isa.params.size(), 2u);
  auto X = random_vec(R * Cn, 3);
  std::vector<float> Y(R * Cn, NAN);
  runtime::RunArgs args;
  args.tensors = {arg(X, {R, Cn}), arg(Y, {R, Cn})};
  interp::interpret(l.isa, args);
  std::vector<double> ref(R * Cn);
  for (int64_t r = 0; r < R; ++r) {
    double m = -INFINITY, s = 0;
    for (int64_t c = 0; c < Cn; ++c) m = std::max(m, double(X[r * Cn + c]));
    for (int64_t c = 0; c < Cn; ++c) s += std::exp(X[r * Cn + c] - m);
    for (int64_t c = 0; c < Cn; ++c) ref[r * Cn + c] = std::exp(X[r * Cn + c] - m) / s;
  }
  EXPECT_LT(rel_err(Y, ref), 1e-5);
}

TEST(Lowering, BatchedMatmulBroadcastAndBias) {
  const int64_t Bt = 3, M = 70, K = 300, N = 20;
  Builder b("bmm");
  View x = b.add_param("x", DType::F32, {Bt, M, K});
  View w = b.add_param("w", DType::F32, {K, N});
  View bias = b.add_param("bias", DType::F32, {N});
  View y = b.unary(Opcode::TRELU, b.binary(Opcode::TADD, b.matmul(x, w), bias));
  Program p = b.finish({y});
  auto l = passes::lower(p, {});
  auto X = random_vec(Bt * M * K, 4), W = random_vec(K * N, 5), Bi = random_vec(N, 6);
  std::vector<float> Y(Bt * M * N, NAN);
  runtime::RunArgs args;
  args.tensors = {arg(X, {Bt, M, K}), arg(W, {K, N}), arg(Bi, {N}), arg(Y, {Bt, M, N})};
  interp::interpret(l.isa, args);
  std::vector<double> ref(Bt * M * N);
  for (int64_t q = 0; q < Bt; ++q)
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) {
        double s = Bi[n];
        for (int64_t k = 0; k < K; ++k) s += double(X[(q * M + m) * K + k]) * W[k * N + n];
        ref[(q * M + m) * N + n] = std::max(s, 0.0);
      }
  EXPECT_LT(rel_err(Y, ref), 1e-5);
}

TEST(Lowering, ColumnReductionAndMean) {
  const int64_t R = 45, Cn = 33;
  Builder b("colmean");
  View x = b.add_param("x", DType::F32, {R, Cn});
  View y = b.mean(x, {0}, false);
  Program p = b.finish({y});
  auto l = passes::lower(p, {});
  auto X = random_vec(R * Cn, 7);
  std::vector<float> Y(Cn, NAN);
  runtime::RunArgs args;
  args.tensors = {arg(X, {R, Cn}), arg(Y, {Cn})};
  interp::interpret(l.isa, args);
  std::vector<double> ref(Cn, 0);
  for (int64_t r = 0; r < R; ++r)
    for (int64_t c = 0; c < Cn; ++c) ref[c] += X[r * Cn + c] / double(R);
  EXPECT_LT(rel_err(Y, ref), 1e-5);
}

TEST(Lowering, ShapeErrorsNameBothShapes) {
  Builder b("bad");
  View x = b.add_param("x", DType::F32, {3, 4});
  View y = b.add_param("y", DType::F32, {5, 6});
  try {
    b.matmul(x, y);
    FAIL();
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("(3, 4)"), std::string::npos) << m;
    EXPECT_NE(m.find("(5, 6)"), std::string::npos) << m;
  }
  EXPECT_THROW(b.binary(Opcode::TADD, x, y), Error);
}
