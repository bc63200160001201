// passes::autodiff: the backward's parameters (only what it reads), gradients checked on the
// interpreter against hand-computed ones, the seed's tile loops, and the refusals.
#include "passes/autodiff.h"

#include "test_pass_util.h"

using namespace pass_test;

namespace {

std::vector<std::string> param_names(const Program& p) {
  std::vector<std::string> out;
  for (auto& b : p.params) out.push_back(b->name);
  return out;
}

int count_ops(const Program& p, Opcode code) {
  int n = 0;
  passes::walk(p.body, [&](const Stmt& s) { n += s->kind == StmtKind::OpStmt && s->op.code == code; });
  return n;
}

}  // namespace

// relu(x @ w + b): the ReLU mask comes from the saved output, so the matmul is not recomputed and
// b is not read at all.
TEST(PassAutodiff, FusedLinearReadsOnlyWhatItNeeds) {
  Program fwd = parse_program(R"(
func @fl(%x: f32[6, 5], %w: f32[5, 4], %b: f32[4], %y: f32[6, 4] out) {
  alloc %t: f32[6, 4] gm
  TMATMUL %t, %x, %w
  alloc %t_1: f32[6, 4] gm
  TADD %t_1, %t, %b
  TRELU %y, %t_1
}
)");
  passes::Backward bw = passes::autodiff(fwd);
  verify(bw.program, Level::Tensor);
  EXPECT_EQ(param_names(bw.program), (std::vector<std::string>{"x", "w", "y", "d_y", "d_x", "d_w", "d_b"}));
  ASSERT_EQ(bw.args.size(), 4u);
  EXPECT_EQ(bw.args[2].role, passes::Backward::Role::Saved);
  EXPECT_EQ(bw.args[3].role, passes::Backward::Role::Cotangent);
  EXPECT_EQ(bw.grads, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(count_ops(bw.program, Opcode::TMATMUL), 2);  // dx and dw; no recomputed x @ w
}

// y = x * w with w broadcast over rows: dx = dy * w, dw = column sums of dy * x.
TEST(PassAutodiff, BroadcastGradientIsSummed) {
  Program fwd = parse_program(R"(
func @scale(%x: f32[3, 5], %w: f32[5], %y: f32[3, 5] out) {
  TMUL %y, %x, %w
}
)");
  passes::Backward bw = passes::autodiff(fwd);
  auto d = run(bw.program, 7);  // x, w, d_y, d_x, d_w
  ASSERT_EQ(d.size(), 5u);
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 5; ++j) EXPECT_NEAR(d[3][i * 5 + j], d[2][i * 5 + j] * d[1][j], 1e-5);
  for (int j = 0; j < 5; ++j) {
    double s = 0;
    for (int i = 0; i < 3; ++i) s += double(d[2][i * 5 + j]) * d[0][i * 5 + j];
    EXPECT_NEAR(d[4][j], s, 1e-4);
  }
}

// The seed's tile matmul: disjoint output tiles, a loop-carried `C_tile += A_tile @ B_tile`, ragged
// edges, the result written into the argument C. dA = dC @ B^T and dB = A^T @ dC.
TEST(PassAutodiff, SeedTileMatmul) {
  Program fwd = parse_program(R"(
func @mm(%A: f32[10, 7], %B: f32[7, 9], %C: f32[10, 9]) {
  for %i = 0 to 10 step 4 {
    for %j = 0 to 9 step 4 {
      alloc %t: f32[4, 4] gm
      TEXPANDS %t, 0.0f
      for %k = 0 to 7 step 4 {
        TMATMUL_ACC %t, %A[%i:4 valid min(4, (10 - %i)), %k:4 valid min(4, (7 - %k))], %B[%k:4 valid min(4, (7 - %k)), %j:4 valid min(4, (9 - %j))]
      }
      TMOV %C[%i:4 valid min(4, (10 - %i)), %j:4 valid min(4, (9 - %j))], %t
    }
  }
}
)");
  passes::Backward bw = passes::autodiff(fwd);
  EXPECT_EQ(bw.results, (std::vector<int>{2}));  // C is written: a result
  auto d = run(bw.program, 3);                   // A, B, d_C, then the gradients of A, B and C's old value
  ASSERT_EQ(d.size(), 6u);
  const auto &A = d[0], &B = d[1], &dC = d[2], &dA = d[3], &dB = d[4], &dC_old = d[5];
  for (int i = 0; i < 10; ++i)
    for (int k = 0; k < 7; ++k) {
      double s = 0;
      for (int j = 0; j < 9; ++j) s += double(dC[i * 9 + j]) * B[k * 9 + j];
      EXPECT_NEAR(dA[i * 7 + k], s, 1e-4);
    }
  for (int k = 0; k < 7; ++k)
    for (int j = 0; j < 9; ++j) {
      double s = 0;
      for (int i = 0; i < 10; ++i) s += double(A[i * 7 + k]) * dC[i * 9 + j];
      EXPECT_NEAR(dB[k * 9 + j], s, 1e-4);
    }
  for (float v : dC_old) EXPECT_EQ(v, 0.0f);  // C is overwritten: its old value does not matter
}

// p = p * x[i] carried across iterations: the derivative needs every intermediate p, which the
// program overwrites; the loop keeps them on a tape. dx[i] = dp * prod(x) / x[i].
TEST(PassAutodiff, LoopCarriedValueOnATape) {
  const char* text = R"(
func @prod(%x: f32[3, 4], %p: f32[4] out) {
  TEXPANDS %p, 1.0f
  for %i = 0 to 3 {
    alloc %t: f32[4] gm
    TMUL %t, %p, %x[%i, 0:4]
    TMOV %p, %t
  }
}
)";
  passes::Backward bw = passes::autodiff(parse_program(text));
  auto d = run(bw.program, 5);  // x, d_p, d_x
  ASSERT_EQ(d.size(), 3u);
  for (int j = 0; j < 4; ++j) {
    double prod = 1;
    for (int i = 0; i < 3; ++i) prod *= d[0][i * 4 + j];
    for (int i = 0; i < 3; ++i) EXPECT_NEAR(d[2][i * 4 + j], d[1][j] * prod / d[0][i * 4 + j], 1e-4);
  }
  // With a trip count known only at run time there is no tape to size: refused, pointing to
  // the manual route.
  std::string dynamic = text;
  dynamic.replace(dynamic.find("(%x: f32[3, 4], %p: f32[4] out)"), 31,
                  "(%x: f32[3, 4], %p: f32[4] out, %n: i64)");
  dynamic.replace(dynamic.find("to 3"), 4, "to %n");
  try {
    passes::autodiff(parse_program(dynamic.c_str()));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("defvjp"), std::string::npos) << m;
    EXPECT_NE(m.find("%p"), std::string::npos) << m;
  }
}

// A dynamic forward gives a dynamic backward: the loop over the dynamic length %S keeps its
// carried value on a tape sized at run time, and the symbol stays bound by x's dim.
TEST(PassAutodiff, DynamicLengthLoopTapeAndSymbolBinding) {
  passes::Backward bw = passes::autodiff(parse_program(R"(
func @prod(%x: f32[%S, 4], %p: f32[4] out) {
  TEXPANDS %p, 1.0f
  for %i = 0 to %S {
    alloc %t: f32[4] gm
    TMUL %t, %p, %x[%i, 0:4]
    TMOV %p, %t
  }
}
)"));
  verify(bw.program, Level::Tensor);
  const ScalarParam& sym = bw.program.scalars.back();
  ASSERT_TRUE(sym.is_dim_symbol());
  EXPECT_EQ(bw.program.params[size_t(sym.param)]->name, "x");
  EXPECT_EQ(sym.dim, 0);
  bool dynamic_tape = false;
  passes::walk(bw.program.body, [&](const Stmt& s) {
    if (s->kind == StmtKind::Alloc && s->buffer->name.find("tape") == 0)
      dynamic_tape = s->buffer->is_dynamic(0);
  });
  EXPECT_TRUE(dynamic_tape);
  EXPECT_TRUE(bw.program.params.back()->is_dynamic(0));  // d_x: [%S, 4]
}

// y = rowsum(x) over a dynamic %S: dx reads only dy, but x stays a parameter to bind %S.
TEST(PassAutodiff, DynamicSymbolBinderKeptWhereItsValuesAreNotRead) {
  passes::Backward bw = passes::autodiff(parse_program(R"(
func @rs(%x: f32[3, %S], %y: f32[3, 1] out) {
  TROWSUM %y, %x
}
)"));
  verify(bw.program, Level::Tensor);
  EXPECT_EQ(param_names(bw.program), (std::vector<std::string>{"x", "d_y", "d_x"}));
  const ScalarParam& sym = bw.program.scalars.back();
  ASSERT_TRUE(sym.is_dim_symbol());
  EXPECT_EQ(sym.param, 0);
  EXPECT_EQ(sym.dim, 1);
}

TEST(PassAutodiff, RefusesGather) {
  Program fwd = parse_program(R"(
func @g(%x: f32[8, 4], %idx: i32[8, 4], %y: f32[8, 4] out) {
  TGATHER %y, %x, %idx
}
)");
  EXPECT_THROW(passes::autodiff(fwd), Error);
}

// A residual chain z = y + y @ w, y = x + x @ w: the cotangent passes through the additions
// without copies (each adjoint a copy of the one before is read through to it, also when that
// one was accumulated into first), and the products added into an adjoint are accumulated by the
// matmul (TMATMUL_ACC) instead of through a temporary. Gradients against a hand computation:
// dy = g + g w^T, dx = dy + dy w^T, dw = x^T dy + y^T g.
TEST(PassAutodiff, ResidualChainReadsThroughCopiesAndAccumulatesProducts) {
  Program fwd = parse_program(R"(
func @res(%x: f32[4, 3], %w: f32[3, 3], %z: f32[4, 3] out) {
  alloc %t: f32[4, 3] gm
  TMATMUL %t, %x, %w
  alloc %y: f32[4, 3] gm
  TADD %y, %x, %t
  alloc %u: f32[4, 3] gm
  TMATMUL %u, %y, %w
  TADD %z, %y, %u
}
)");
  passes::Backward bw = passes::autodiff(fwd);
  verify(bw.program, Level::Tensor);
  SCOPED_TRACE(print(bw.program));
  EXPECT_GE(count_ops(bw.program, Opcode::TMATMUL_ACC), 2);
  // Only the two adjoints accumulated into start as copies (d_y of the cotangent, d_x of d_y);
  // the adjoints of t, u and of z's first term read the cotangent or d_y themselves.
  EXPECT_EQ(count_ops(bw.program, Opcode::TMOV), 2);
  auto d = run(bw.program, 11);  // x, w, d_z, d_x, d_w
  ASSERT_EQ(d.size(), 5u);
  const auto &x = d[0], &w = d[1], &g = d[2];
  auto mm_t = [&](const std::vector<double>& a, int r) {  // a (r x 3) @ w^T
    std::vector<double> o(size_t(r) * 3, 0.0);
    for (int i = 0; i < r; ++i)
      for (int j = 0; j < 3; ++j)
        for (int k = 0; k < 3; ++k) o[i * 3 + j] += a[i * 3 + k] * w[j * 3 + k];
    return o;
  };
  std::vector<double> gd(g.begin(), g.end()), y(12, 0.0);
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 3; ++j) {
      y[i * 3 + j] = x[i * 3 + j];
      for (int k = 0; k < 3; ++k) y[i * 3 + j] += x[i * 3 + k] * w[k * 3 + j];
    }
  std::vector<double> dy = mm_t(gd, 4);
  for (int i = 0; i < 12; ++i) dy[i] += gd[i];
  std::vector<double> dx = mm_t(dy, 4);
  for (int i = 0; i < 12; ++i) EXPECT_NEAR(d[3][i], dx[i] + dy[i], 1e-4);
  for (int k = 0; k < 3; ++k)
    for (int j = 0; j < 3; ++j) {
      double s = 0;
      for (int i = 0; i < 4; ++i) s += x[i * 3 + k] * dy[i * 3 + j] + y[i * 3 + k] * gd[i * 3 + j];
      EXPECT_NEAR(d[4][k * 3 + j], s, 1e-4);
    }
}
