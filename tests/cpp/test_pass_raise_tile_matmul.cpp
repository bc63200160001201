// raise_tile_matmul: a tile loop computing a whole product becomes one TMATMUL (then MMATMUL);
// loops that compute anything else stay as written.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "backends/interp/interpreter.h"
#include "ir/builder.h"
#include "ir/printer.h"
#include "passes/pipeline.h"
#include "passes/raise_tile_matmul.h"

using namespace pypto;
using namespace pypto::ir;

namespace {

// The seed's matrix_multiply over A (M x K), B (K x N), C (M x N) with T x T tiles; the loops run
// to lm, ln, lk (the shapes by default), C's window is taken from `c_src` (C itself by default).
struct Loops {
  int64_t lm = -1, ln = -1, lk = -1;
  bool store_into_a = false;
};
Program tile_matmul(int64_t M, int64_t K, int64_t N, int64_t T, Loops L = {}) {
  Builder b("matrix_multiply");
  View A = b.add_param("A", DType::F32, {M, K});
  View B = b.add_param("B", DType::F32, {K, N});
  View C = b.add_param("C", DType::F32, {M, N});
  Expr i = b.begin_for("i", int_imm(0), int_imm(L.lm < 0 ? M : L.lm), int_imm(T));
  Expr j = b.begin_for("j", int_imm(0), int_imm(L.ln < 0 ? N : L.ln), int_imm(T));
  View acc = b.full({T, T}, DType::F32, float_imm(0.0));
  Expr k = b.begin_for("k", int_imm(0), int_imm(L.lk < 0 ? K : L.lk), int_imm(T));
  auto sl = [T](Expr lo) {
    Index ix;
    ix.start = lo;
    ix.stop = lo + int_imm(T);
    return ix;
  };
  b.matmul_acc(acc, b.slice(A, {sl(i), sl(k)}), b.slice(B, {sl(k), sl(j)}));
  b.end_for();
  b.assign(b.slice(L.store_into_a ? A : C, {sl(i), sl(j)}), acc);
  b.end_for();
  b.end_for();
  return b.finish({});
}

int count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t p = text.find(what); p != std::string::npos; p = text.find(what, p + 1)) ++n;
  return n;
}

std::string raised_text(const Program& p) {
  passes::TileSizes sizes;
  return print(passes::raise_tile_matmul(p, sizes));
}

}  // namespace

TEST(RaiseTileMatmul, SeedLoopBecomesOneProductAndRunsRight) {
  const int64_t M = 200, K = 130, N = 99;  // ragged edges in every dimension
  Program p = tile_matmul(M, K, N, 64);
  EXPECT_EQ(raised_text(p).find("for "), std::string::npos) << raised_text(p);
  auto l = passes::lower(p, {});
  const std::string isa = print(l.isa);
  EXPECT_EQ(count(isa, "MMATMUL %C, %A, %B"), 1) << isa;
  EXPECT_EQ(isa.find("for "), std::string::npos) << isa;
  std::mt19937 g(7);
  std::normal_distribution<float> d;
  std::vector<float> A(M * K), B(K * N), C(M * N, NAN);
  for (auto& x : A) x = d(g);
  for (auto& x : B) x = d(g);
  auto arg = [](std::vector<float>& v, int64_t r, int64_t c) {
    runtime::TensorArg a;
    a.data = v.data();
    a.dtype = DType::F32;
    a.shape = {r, c};
    a.strides = {c, 1};
    return a;
  };
  runtime::RunArgs args;
  args.tensors = {arg(A, M, K), arg(B, K, N), arg(C, M, N)};
  interp::interpret(l.isa, args);
  double num = 0, den = 0;
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double r = 0;
      for (int64_t k = 0; k < K; ++k) r += double(A[m * K + k]) * B[k * N + n];
      num += (C[m * N + n] - r) * (C[m * N + n] - r);
      den += r * r;
    }
  EXPECT_LT(std::sqrt(num / den), 1e-5);
}

TEST(RaiseTileMatmul, LoopsComputingLessOrElsewhereStay) {
  const int64_t M = 256, K = 256, N = 256;
  // Part of K, of the rows, of the columns: not the whole product.
  for (Loops L : {Loops{-1, -1, 128}, Loops{128, -1, -1}, Loops{-1, 192, -1}}) {
    const std::string text = raised_text(tile_matmul(M, K, N, 64, L));
    EXPECT_EQ(count(text, "for "), 3) << text;
  }
  // The result written into an operand: the tiles read what earlier tiles wrote.
  Loops into_a;
  into_a.store_into_a = true;
  const std::string text = raised_text(tile_matmul(M, K, M, 64, into_a));
  EXPECT_EQ(count(text, "for "), 3) << text;
  // Too small for the whole-matrix GEMM: the tile loop is kept (tiled as the user wrote it).
  EXPECT_EQ(count(raised_text(tile_matmul(64, 64, 64, 32)), "for "), 3);
  // Matmul tiles asked for (tuning): loops stay.
  passes::PipelineOptions opt;
  opt.mm_tile_m = 64;
  EXPECT_NE(print(passes::lower(tile_matmul(M, K, N, 64), opt).isa).find("TMATMUL_ACC"), std::string::npos);
}
