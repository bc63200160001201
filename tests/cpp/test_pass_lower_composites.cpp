// lower_composites: composite ops survive building as single ops (shape and dtype inferred),
// expand into instructions that compute the same as a C++ reference, and a target's lowering
// replaces the default one for its opcode.
#include "passes/lower_composites.h"

#include <cmath>

#include "ir/builder.h"
#include "ir/mutator.h"
#include "ir/visitor.h"
#include "passes/pipeline.h"
#include "test_pass_util.h"

using namespace pass_test;

namespace {

bool has_composites(const Program& p) {
  bool found = false;
  for_each_stmt(p.body, [&](const Stmt& s) {
    found |= s->kind == StmtKind::OpStmt && opcode_info(s->op.code).category == OpCategory::Composite;
  });
  return found;
}

int count_op(const Program& p, Opcode code) {
  int n = 0;
  for_each_stmt(p.body, [&](const Stmt& s) { n += s->kind == StmtKind::OpStmt && s->op.code == code; });
  return n;
}

}  // namespace

TEST(PassLowerComposites, BuilderEmitsOneOpWithInferredTypes) {
  Builder b("k");
  View x = b.add_param("x", DType::F64, {2, 3, 6, 6});
  View w = b.add_param("w", DType::F32, {4, 3, 3, 3});
  View y = b.conv2d(x, w, nullptr, {1, 1}, {1, 1}, {1, 1}, false);
  EXPECT_EQ(y.buf->dtype, DType::F64);  // f64 stays f64
  EXPECT_EQ(y.shape(), (std::vector<int64_t>{2, 4, 6, 6}));
  View i = b.add_param("i", DType::I32, {4, 5});
  EXPECT_EQ(b.softmax(i, -1).buf->dtype, DType::F32);
  EXPECT_EQ(b.concat({x, x}, 1).shape(), (std::vector<int64_t>{2, 6, 6, 6}));
  Operand lo = int_imm(0), hi = View(i);
  EXPECT_EQ(b.clamp(i, &lo, &hi).buf->dtype, DType::I32);
  Program p = b.finish({y});
  EXPECT_EQ(count_op(p, Opcode::CONV2D), 1);
  EXPECT_EQ(count_op(p, Opcode::TMATMUL_ACC), 0);
  EXPECT_NO_THROW(verify(p, Level::Tensor));
  Program l = passes::lower_composites(p);
  EXPECT_FALSE(has_composites(l)) << print(l);
  EXPECT_EQ(count_op(l, Opcode::TMATMUL_ACC), 9);  // one per tap of the 3x3 kernel
  EXPECT_NO_THROW(verify(l, Level::Tensor)) << print(l);
  EXPECT_THROW(verify(p, Level::Tile), Error);  // composites never reach the tile level
}

// Softmax, layer norm and clamp through the whole pipeline on the interpreter, against doubles.
TEST(PassLowerComposites, ExpansionsComputeTheReference) {
  Program p = parse_program(R"(
func @k(%x: f32[5, 12], %w: f32[12], %s: f32[5, 12] out, %n: f32[5, 12] out, %c: f32[5, 12] out) {
  SOFTMAX %s, %x, 1
  LAYER_NORM %n, %x, %w, 0, 1, 1e-05
  CLAMP %c, %x, -0.5f, %x[0:1, 0:12]
})");
  auto data = run(passes::lower(p, {}).isa, 7);
  const auto &x = data[0], &w = data[1], &s = data[2], &n = data[3], &c = data[4];
  double err_s = 0, err_n = 0, err_c = 0, den = 0;
  for (int r = 0; r < 5; ++r) {
    double mx = -INFINITY, sum = 0, mu = 0, var = 0;
    for (int k = 0; k < 12; ++k) mx = std::max(mx, double(x[r * 12 + k]));
    for (int k = 0; k < 12; ++k) sum += std::exp(x[r * 12 + k] - mx), mu += x[r * 12 + k] / 12.0;
    for (int k = 0; k < 12; ++k) var += (x[r * 12 + k] - mu) * (x[r * 12 + k] - mu) / 12.0;
    for (int k = 0; k < 12; ++k) {
      double xv = x[r * 12 + k];
      double rs = std::exp(xv - mx) / sum, rn = (xv - mu) / std::sqrt(var + 1e-5) * w[k];
      double rc = std::min(std::max(xv, -0.5), double(x[k]));
      err_s += std::pow(s[r * 12 + k] - rs, 2), err_n += std::pow(n[r * 12 + k] - rn, 2);
      err_c += std::pow(c[r * 12 + k] - rc, 2), den += rn * rn;
    }
  }
  EXPECT_LT(std::sqrt(err_s / 5), 1e-6);
  EXPECT_LT(std::sqrt(err_n / den), 1e-5);
  EXPECT_EQ(err_c, 0);
}

// A target's softmax (exp, sum, divide) replaces the default one (which multiplies by a reciprocal).
TEST(PassLowerComposites, TargetLoweringReplacesTheDefault) {
  Program p = parse_program(R"(
func @k(%x: f32[4, 8], %y: f32[4, 8] out) {
  SOFTMAX %y, %x, 1
})");
  std::map<Opcode, passes::CompositeLowering> target{{Opcode::SOFTMAX, [](Builder& b, const Op& op) {
                                                        const View& x = std::get<View>(op.args[1]);
                                                        View e = b.unary(Opcode::TEXP, x);
                                                        View s = b.reduce(Opcode::TROWSUM, e, {1}, true);
                                                        b.emit(op_stmt(Op{Opcode::TDIV, {op.args[0], e, s}}));
                                                      }}};
  Program def = passes::lower_composites(p), own = passes::lower_composites(p, target);
  EXPECT_EQ(count_op(def, Opcode::TRECIP), 1);
  EXPECT_EQ(count_op(own, Opcode::TDIV), 1);
  EXPECT_EQ(count_op(own, Opcode::TRECIP), 0);
  EXPECT_TRUE(equivalent(def, own));
  passes::PipelineOptions o;
  o.composite_lowerings = target;
  EXPECT_EQ(count_op(passes::lower(p, o).tile, Opcode::TDIV), 1);
}
