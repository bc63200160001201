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
  opt.memory_matmul =
      false;  // the tile loop itself (with it, the nest is one MMATMUL: test_pass_raise_tile_matmul)
  auto l = passes::lower(p, opt);
  verify(l.isa, Level::Tile);
  std::string text = print(l.isa);
  EXPECT_NE(text.find("parallel for"), std::string::npos) << text;
  // The accumulator tile is promoted to local memory: no scratch in global memory at all.
  EXPECT_EQ(text.find(" gm\n"), std::string::npos) << text;
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

namespace {
// The seed's optimized_attention at tensor level.
Program attention(int64_t B, int64_t H, int64_t S, int64_t D, bool with_mask) {
  Builder b("attention");
  View Q = b.add_param("Q", DType::F32, {B, H, S, D});
  View K = b.add_param("K", DType::F32, {B, H, S, D});
  View V = b.add_param("V", DType::F32, {B, H, S, D});
  View mask = with_mask ? b.add_param("mask", DType::F32, {1, 1, S, S}) : View{};
  View out = b.empty({B, H, S, D}, DType::F32);
  Expr i = b.begin_for("i", int_imm(0), int_imm(S), int_imm(128));
  Expr e = min(i + int_imm(128), int_imm(S));
  Index all, rows;
  rows.start = i;
  rows.stop = e;
  View scores = b.matmul(b.slice(Q, {all, all, rows}), b.transpose(K, -2, -1));
  if (with_mask) b.update(Opcode::TADD, scores, b.slice(mask, {all, all, rows, all}));
  View attn = b.softmax(b.binary(Opcode::TDIV, scores, float_imm(std::sqrt(double(D)))), -1);
  b.assign(b.slice(out, {all, all, rows, all}), b.matmul(attn, V));
  b.end_for();
  return b.finish({out});
}

std::vector<float> run_attention(const Program& p, bool with_mask, int64_t B, int64_t H, int64_t S, int64_t D,
                                 const passes::PipelineOptions& opt, std::string* isa = nullptr) {
  auto l = passes::lower(p, opt);
  verify(l.isa, Level::Tile);
  if (isa) *isa = print(l.isa);
  auto Q = random_vec(B * H * S * D, 11), K = random_vec(B * H * S * D, 12),
       V = random_vec(B * H * S * D, 13);
  std::vector<float> M(S * S), O(B * H * S * D, NAN);
  for (int64_t r = 0; r < S; ++r)
    for (int64_t c = 0; c < S; ++c) M[r * S + c] = c > r ? -1e9f : 0.f;
  runtime::RunArgs args;
  args.tensors = {arg(Q, {B, H, S, D}), arg(K, {B, H, S, D}), arg(V, {B, H, S, D})};
  if (with_mask) args.tensors.push_back(arg(M, {1, 1, S, S}));
  args.tensors.push_back(arg(O, {B, H, S, D}));
  interp::interpret(l.isa, args);
  return O;
}
}  // namespace

TEST(Fusion, AttentionFusedEqualsUnfusedAndKeepsScoresInTiles) {
  const int64_t B = 1, H = 2, S = 300, D = 64;
  for (bool mask : {false, true}) {
    Program p = attention(B, H, S, D, mask);
    passes::PipelineOptions unfused, fused;
    unfused.fusion_off = true;
    fused.fusion = true;
    std::string text;
    auto a = run_attention(p, mask, B, H, S, D, unfused);
    auto b = run_attention(p, mask, B, H, S, D, fused, &text);
    std::vector<double> ref(a.begin(), a.end());
    EXPECT_LT(rel_err(b, ref), 1e-5);
    // No global scratch inside the block loop: scores, softmax and the product stay in tiles.
    EXPECT_EQ(text.find(" gm\n"), std::string::npos) << text;
  }
}

TEST(Fusion, MatmulEpilogueIsOneNest) {
  const int64_t M = 130, K = 600, N = 520;
  Builder b("fused_linear");
  View x = b.add_param("x", DType::F32, {M, K});
  View w = b.add_param("w", DType::F32, {K, N});
  View bias = b.add_param("b", DType::F32, {N});
  View y = b.unary(Opcode::TRELU, b.binary(Opcode::TADD, b.matmul(x, w), bias));
  Program p = b.finish({y});
  passes::PipelineOptions opt;
  opt.fusion_ops = {"matmul", "add", "relu"};
  // With whole-matrix products (the CPU), the matmul is one MMATMUL and its epilogue a pass of
  // its own; without them (the NPU simulator), one tiled nest with the epilogue fused.
  EXPECT_NE(print(passes::lower(p, opt).isa).find("MMATMUL %"), std::string::npos);
  opt.memory_matmul = false;
  auto l = passes::lower(p, opt);
  std::string text = print(l.isa);
  EXPECT_EQ(text.find(" gm\n"), std::string::npos) << text;
  auto X = random_vec(M * K, 21), W = random_vec(K * N, 22), Bi = random_vec(N, 23);
  std::vector<float> Y(M * N, NAN);
  runtime::RunArgs args;
  args.tensors = {arg(X, {M, K}), arg(W, {K, N}), arg(Bi, {N}), arg(Y, {M, N})};
  interp::interpret(l.isa, args);
  std::vector<double> ref(M * N);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double s = Bi[n];
      for (int64_t k = 0; k < K; ++k) s += double(X[m * K + k]) * W[k * N + n];
      ref[m * N + n] = std::max(s, 0.0);
    }
  EXPECT_LT(rel_err(Y, ref), 1e-5);
}
