// The IR text form: print -> parse gives a structurally equal program and identical text, for
// hand-written programs at both levels and for a few hundred random ones.
#include <gtest/gtest.h>

#include <random>

#include "ir/ir.h"
#include "ir/parser.h"
#include "ir/printer.h"
#include "ir/verifier.h"

namespace pypto::ir {
namespace {

BufferRef buf(const std::string& name, DType t, std::vector<int64_t> shape, Space s = Space::Global,
              BufferKind k = BufferKind::Temp) {
  auto b = std::make_shared<Buffer>();
  b->name = name;
  b->dtype = t;
  b->shape = std::move(shape);
  b->space = s;
  b->kind = k;
  return b;
}

View W(const BufferRef& b) { return View::whole(b); }

// A 2-d window of a global tensor at (r, c), rows x cols, clipped to the tensor.
View window(const BufferRef& b, Expr r, Expr c, int64_t rows, int64_t cols) {
  View v = View::whole(b);
  v.offset = {r, c};
  v.size = {rows, cols};
  v.valid = {min(int_imm(rows), int_imm(b->shape[0]) - r), min(int_imm(cols), int_imm(b->shape[1]) - c)};
  return v;
}

Stmt OP(Opcode c, std::vector<Operand> args) { return op_stmt(Op{c, std::move(args)}); }

void expect_round_trip(const Program& p) {
  std::string text = print(p);
  Program q = parse_program(text);
  EXPECT_TRUE(structural_equal(p, q)) << text << "\n---- reparsed ----\n" << print(q);
  EXPECT_EQ(print(q), text);
  EXPECT_EQ(structural_hash(p), structural_hash(q));
}

// The seed's tile matmul at tile level: C = alpha * A @ B for any M, K, N.
Program tile_matmul() {
  Program p;
  p.name = "matrix_multiply";
  auto A = buf("A", DType::F32, {200, 130}, Space::Global, BufferKind::Param);
  auto B = buf("B", DType::F32, {130, 99}, Space::Global, BufferKind::Param);
  auto C = buf("C", DType::F32, {200, 99}, Space::Global, BufferKind::Output);
  p.params = {A, B, C};
  p.scalars = {{"alpha", DType::F32}};
  Expr i = var("i"), j = var("j"), k = var("k");
  auto acc = buf("acc", DType::F32, {64, 64}, Space::Acc);
  auto a = buf("a", DType::F32, {64, 64}, Space::Mat);
  auto b = buf("b", DType::F32, {64, 64}, Space::Mat);
  auto o = buf("o", DType::F32, {64, 64}, Space::Vec);
  std::vector<Stmt> kloop = {
      alloc(a),
      alloc(b),
      OP(Opcode::TLOAD, {W(a), window(A, i, k, 64, 64)}),
      OP(Opcode::TLOAD, {W(b), window(B, k, j, 64, 64)}),
      OP(Opcode::TMATMUL_ACC, {W(acc), W(a), W(b)}),
  };
  std::vector<Stmt> jbody = {
      alloc(acc),
      alloc(o),
      OP(Opcode::TEXPANDS, {W(acc), float_imm(0)}),
      for_loop("k", int_imm(0), int_imm(130), int_imm(64), kloop),
      OP(Opcode::TMOV, {W(o), W(acc)}),
      OP(Opcode::TMUL, {W(o), W(o), var("alpha", DType::F32)}),
      OP(Opcode::TSTORE, {window(C, i, j, 64, 64), W(o)}),
  };
  p.body = {for_loop("i", int_imm(0), int_imm(200), int_imm(64),
                     {for_loop("j", int_imm(0), int_imm(99), int_imm(64), jbody, LoopKind::Parallel)},
                     LoopKind::Parallel)};
  return p;
}

TEST(IrRoundTrip, TileMatmul) {
  Program p = tile_matmul();
  EXPECT_NO_THROW(verify(p, Level::Tile));
  expect_round_trip(p);
  std::string text = print(p);
  EXPECT_NE(text.find("TLOAD %a, %A[%i:64 valid min(64, (200 - %i)), %k:64 valid min(64, (130 - %k))]"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("%C: f32[200, 99] out, %alpha: f32)"), std::string::npos) << text;
  EXPECT_NE(text.find("alloc %acc: f32[64, 64] acc"), std::string::npos) << text;
  EXPECT_NE(text.find("parallel for %i = 0 to 200 step 64 {"), std::string::npos) << text;
  EXPECT_NE(text.find("TEXPANDS %acc, 0.0f"), std::string::npos) << text;
}

// Tensor level: n-d views, permutations, indexed dims, lets, ifs, scalars of every kind.
Program tensor_program() {
  Program p;
  p.name = "tensor_ops";
  auto X = buf("X", DType::F32, {4, 8, 16}, Space::Global, BufferKind::Param);
  auto Y = buf("Y", DType::F64, {16, 8}, Space::Global, BufferKind::Output);
  auto S = buf("S", DType::I64, {}, Space::Global, BufferKind::Param);
  p.params = {X, Y, S};
  p.scalars = {{"n", DType::I64}, {"eps", DType::F64}, {"scale", DType::F32}};
  auto t = buf("t", DType::F32, {8, 16});
  auto u = buf("u", DType::F64, {16, 8});
  Expr b = var("b"), n = var("n"), e = var("e");
  View xb = W(X);  // X[b] : 8 x 16
  xb.offset[0] = b;
  xb.size[0] = 1;
  xb.valid[0] = int_imm(1);
  xb.dims = {1, 2};
  View ut = W(u);  // transposed view of u
  ut.dims = {1, 0};
  View ys = W(Y);  // Y[2:16 step 2, e] : strided column, one valid extent symbolic
  ys.offset = {int_imm(2), e};
  ys.size = {7, 1};
  ys.step = {2, 1};
  ys.valid = {min(int_imm(7), n), int_imm(1)};
  ys.dims = {0};
  View odd = W(Y);  // a dropped dim whose window is not 1 (needs perm to print)
  odd.size = {16, 8};
  odd.dims = {1};
  p.body = {
      alloc(t),
      alloc(u),
      for_loop(
          "b", int_imm(0), int_imm(4), int_imm(1),
          {
              let("e", mod(b * int_imm(3) + n, int_imm(8))),
              OP(Opcode::TADD, {W(t), xb, var("scale", DType::F32)}),
              if_then(logic(ExprOp::And, cmp(ExprOp::Lt, b, n), logic_not(cmp(ExprOp::Eq, e, int_imm(0)))),
                      {OP(Opcode::TCVT, {ut, W(t)})},
                      {OP(Opcode::TEXPANDS, {W(u), var("eps", DType::F64) * float_imm(2.5, DType::F64)})}),
              OP(Opcode::TMOV, {ys, ut}),
              OP(Opcode::TROWSUM, {odd, W(u)}),
              seq({OP(Opcode::PIPE_BARRIER, {int_imm(2)})}),
          }),
      OP(Opcode::TEXPANDS, {W(S), cast(unary_math(ExprOp::Sqrt, var("eps", DType::F64)), DType::I64)}),
      OP(Opcode::TPREFETCH, {W(X)}),
      OP(Opcode::SET_FLAG, {int_imm(0), int_imm(2), int_imm(1)}),
      OP(Opcode::WAIT_FLAG, {int_imm(0), int_imm(2), int_imm(1)}),
  };
  return p;
}

TEST(IrRoundTrip, TensorLevel) {
  Program p = tensor_program();
  expect_round_trip(p);
  std::string text = print(p);
  EXPECT_NE(text.find("%X[%b, 0:8, 0:16]"), std::string::npos) << text;
  EXPECT_NE(text.find("%u[0:16, 0:8] perm(1, 0)"), std::string::npos) << text;
  EXPECT_NE(text.find("%Y[2:7 step 2 valid min(7, %n), %e]"), std::string::npos) << text;
  EXPECT_NE(text.find("%S: i64[]"), std::string::npos) << text;
}

TEST(IrRoundTrip, StructuralEquality) {
  Program a = tile_matmul(), b = tile_matmul();
  EXPECT_TRUE(structural_equal(a, b));
  EXPECT_EQ(structural_hash(a), structural_hash(b));
  b.body[0]->body[0]->body[3]->step = int_imm(32);  // the k loop's step
  EXPECT_FALSE(structural_equal(a, b));
  b = tile_matmul();
  b.params[2]->kind = BufferKind::Param;
  EXPECT_FALSE(structural_equal(a, b));
  b = tile_matmul();
  b.scalars[0].dtype = DType::F64;
  EXPECT_FALSE(structural_equal(a, b));
}

TEST(IrRoundTrip, HandWrittenText) {
  const char* text = R"(
    # comments and free layout are accepted
    func @k(%A: f32[4, 4], %B: f32[4, 4] out, %n: i64) {
      for %i = 0 to %n {
        alloc %t: f32[4, 4] vec
        TLOAD %t, %A
        TEXP %t, %t
        TSTORE %B[%i:1, 0:4 valid (4 - 0)], %t
      }
    })";
  Program p = parse_program(text);
  EXPECT_EQ(p.params.size(), 2u);
  EXPECT_EQ(p.params[1]->kind, BufferKind::Output);
  EXPECT_EQ(p.scalars.size(), 1u);
  EXPECT_TRUE(expr_equal(p.body[0]->step, int_imm(1)));
  EXPECT_NO_THROW(verify(p, Level::Tile));
  // Uses share the declaring buffer object.
  const auto& body = p.body[0]->body;
  EXPECT_EQ(std::get<View>(body[1]->op.args[0]).buf.get(), body[0]->buffer.get());
  expect_round_trip(p);
}

TEST(IrRoundTrip, ParseErrors) {
  struct Case {
    const char* text;
    const char* msg;
  };
  Case cases[] = {
      {"func @k() { TFOO %x }", "unknown statement or opcode 'TFOO'"},
      {"func @k(%A: f32[4]) { TEXP %A, %B }", "undefined variable '%B'"},
      {"func @k(%A: f32[4]) { TEXP %A[%i:4], %A }", "undefined variable '%i'"},
      {"func @k(%A: f32[4]) {\n  for %i = 0 to 4 { }\n  TEXP %A[%i:4], %A\n}",
       "line 3, col 11: undefined variable '%i'"},
      {"func @k(%A: f32[4]) { TEXP %A[0:4 valid], %A }", "expected an expression"},
      {"func @k(%A: q32[4]) { }", "expected a dtype"},
      {"func @k(%A: f32[4]) { alloc %t: f32[4] }", "expected a memory space"},
      {"func @k(%A: f32[4]) { TEXP %A, (%A + 1) }", "buffer '%A' used as a scalar"},
      {"func @k() { ", "expected '}' before end of input"},
      {"func @k() { } extra", "unexpected text after the program"},
      {"func k() { }", "expected '@name'"},
  };
  for (const auto& c : cases) {
    try {
      parse_program(c.text);
      ADD_FAILURE() << "no error for: " << c.text;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(c.msg), std::string::npos) << e.what();
      EXPECT_EQ(std::string(e.what()).rfind("line ", 0), 0u) << e.what();
    }
  }
}

// ---- random programs --------------------------------------------------------------------------

class RandomProgram {
 public:
  explicit RandomProgram(uint32_t seed) : rng_(seed) {}

  Program make() {
    Program p;
    p.name = pick(5) == 0 ? "odd name" : "k" + std::to_string(pick(1000));
    scopes_.assign(1, {});
    int np = 1 + pick(3);
    for (int i = 0; i < np; ++i) {
      auto b = random_buffer(Space::Global, pick(2) ? BufferKind::Param : BufferKind::Output);
      p.params.push_back(b);
      scopes_.back().bufs.push_back(b);
    }
    int ns = pick(3);
    for (int i = 0; i < ns; ++i) {
      DType t = std::vector<DType>{DType::I64, DType::F32, DType::F64}[size_t(pick(3))];
      std::string n = fresh();
      p.scalars.push_back({n, t});
      scopes_.back().vars.push_back({n, t});
    }
    p.body = block(3);
    return p;
  }

 private:
  struct Scope {
    std::vector<std::pair<std::string, DType>> vars;
    std::vector<BufferRef> bufs;
  };

  int pick(int n) { return std::uniform_int_distribution<int>(0, n - 1)(rng_); }
  std::string fresh() {
    static const char* odd[] = {"x y", "q\"uote", "b\\s", "a.b", "0lead", "_u"};
    std::string base = pick(10) == 0 ? odd[pick(6)] : std::string(1, char('a' + pick(26)));
    return base + std::to_string(counter_++);
  }

  BufferRef random_buffer(Space s, BufferKind k) {
    std::vector<int64_t> shape;
    int r = pick(4);
    for (int i = 0; i < r; ++i) shape.push_back(1 + pick(300));
    DType t = DType(pick(7));
    return buf(fresh(), t, shape, s, k);
  }

  std::vector<std::pair<std::string, DType>> vars_of(bool want_float) {
    std::vector<std::pair<std::string, DType>> out;
    for (auto& sc : scopes_)
      for (auto& v : sc.vars)
        if (is_float(v.second) == want_float) out.push_back(v);
    return out;
  }

  Expr int_expr(int depth) {
    auto vs = vars_of(false);
    if (depth == 0 || pick(3) == 0) {
      if (!vs.empty() && pick(2)) {
        auto& v = vs[size_t(pick(int(vs.size())))];
        return var(v.first, v.second);
      }
      return int_imm(pick(2000) - 1000);
    }
    Expr a = int_expr(depth - 1), b = int_expr(depth - 1);
    switch (pick(11)) {
      case 0:
        return a + b;
      case 1:
        return a - b;
      case 2:
        return a * b;
      case 3:
        return div(a, b);
      case 4:
        return mod(a, int_imm(1 + pick(64)));
      case 5:
        return min(a, b);
      case 6:
        return max(a, b);
      case 7:
        return cmp(ExprOp(int(ExprOp::Lt) + pick(4)), a, b);
      case 8:
        return logic(pick(2) ? ExprOp::And : ExprOp::Or, a, b);
      case 9:
        return select(cmp(ExprOp::Lt, a, b), a, b);
      default:
        return cast(float_expr(depth - 1), pick(2) ? DType::I64 : DType::I32);
    }
  }

  Expr float_expr(int depth) {
    auto vs = vars_of(true);
    if (depth == 0 || pick(3) == 0) {
      if (!vs.empty() && pick(2)) {
        auto& v = vs[size_t(pick(int(vs.size())))];
        return var(v.first, v.second);
      }
      static const double specials[] = {0.0,         -0.0,   1e300,
                                        1e-300,      0.1,    -2.5,
                                        1.0 / 3.0,   3.0e38, std::numeric_limits<double>::infinity(),
                                        std::nan("")};
      double v = pick(3) ? specials[pick(10)] : std::uniform_real_distribution<double>(-1e6, 1e6)(rng_);
      return float_imm(v, std::vector<DType>{DType::F32, DType::F64, DType::F16}[size_t(pick(3))]);
    }
    Expr a = float_expr(depth - 1);
    switch (pick(8)) {
      case 0:
        return a + float_expr(depth - 1);
      case 1:
        return a * int_expr(depth - 1);
      case 2:
        return div(a, float_expr(depth - 1));
      case 3:
        return max(a, float_expr(depth - 1));
      case 4:
        return unary_math(ExprOp(int(ExprOp::Sqrt) + pick(3)), a);
      case 5:
        return cast(int_expr(depth - 1), pick(2) ? DType::F32 : DType::F64);
      case 6:
        return select(cmp(ExprOp::Le, a, float_expr(0)), a, float_expr(0));
      default:
        return a - float_expr(depth - 1);
    }
  }

  Expr scalar() { return pick(2) ? int_expr(2) : float_expr(2); }

  std::vector<BufferRef> buffers() {
    std::vector<BufferRef> out;
    for (auto& sc : scopes_) out.insert(out.end(), sc.bufs.begin(), sc.bufs.end());
    return out;
  }

  View random_view() {
    auto bs = buffers();
    BufferRef b = bs[size_t(pick(int(bs.size())))];
    View v = View::whole(b);
    if (pick(4) == 0) return v;
    int r = b->rank();
    v.dims.clear();
    for (int d = 0; d < r; ++d) {
      bool keep = pick(4) != 0;
      if (pick(2)) v.offset[size_t(d)] = int_expr(2);
      if (keep) {
        v.dims.push_back(d);
        v.size[size_t(d)] = 1 + pick(int(b->shape[size_t(d)]));
        if (pick(4) == 0) v.step[size_t(d)] = 1 + pick(3);
        v.valid[size_t(d)] = pick(3) == 0 ? int_expr(2) : int_imm(v.size[size_t(d)]);
      } else {
        bool odd = pick(6) == 0;  // a dropped dim with an unusual window
        v.size[size_t(d)] = odd ? 2 : 1;
        v.valid[size_t(d)] = odd ? int_expr(1) : int_imm(1);
      }
    }
    if (pick(3) == 0) std::shuffle(v.dims.begin(), v.dims.end(), rng_);
    return v;
  }

  Stmt random_op() {
    Op op;
    op.code = Opcode(pick(int(Opcode::PIPE_BARRIER) + 1));
    const OpcodeInfo& info = opcode_info(op.code);
    int n = info.num_operands >= 0 ? info.num_operands : pick(4);
    bool sync = info.category == OpCategory::Sync;
    for (int k = 0; k < n; ++k) {
      if (sync || (k > 0 && pick(3) == 0)) {
        op.args.push_back(sync ? int_expr(1) : scalar());
      } else {
        op.args.push_back(random_view());
      }
    }
    return op_stmt(op);
  }

  std::vector<Stmt> block(int depth) {
    std::vector<Stmt> body;
    int n = pick(5);
    for (int s = 0; s < n; ++s) body.push_back(stmt(depth));
    return body;
  }

  std::vector<Stmt> scoped_block(int depth, const std::string& loop_var = "") {
    scopes_.emplace_back();
    if (!loop_var.empty()) scopes_.back().vars.push_back({loop_var, DType::I64});
    auto body = block(depth);
    scopes_.pop_back();
    return body;
  }

  Stmt stmt(int depth) {
    int kind = depth > 0 ? pick(8) : 4 + pick(4);
    switch (kind) {
      case 0:
      case 1: {
        std::string v = fresh();
        Expr lo = int_expr(1), hi = int_expr(2), step = pick(2) ? int_imm(1 + pick(64)) : int_expr(1);
        auto body = scoped_block(depth - 1, v);
        return for_loop(v, lo, hi, step, body, pick(2) ? LoopKind::Parallel : LoopKind::Serial);
      }
      case 2: {
        Expr c = int_expr(2);
        auto t = scoped_block(depth - 1);
        auto e = pick(2) ? scoped_block(depth - 1) : std::vector<Stmt>{};
        return if_then(c, t, e);
      }
      case 3:
        return seq(scoped_block(depth - 1));
      case 4: {
        std::string v = fresh();
        Expr e = scalar();
        scopes_.back().vars.push_back({v, e->dtype});
        return let(v, e);
      }
      case 5: {
        auto b = random_buffer(Space(pick(4)), BufferKind::Temp);
        scopes_.back().bufs.push_back(b);
        return alloc(b);
      }
      default:
        return random_op();
    }
  }

  std::mt19937 rng_;
  int counter_ = 0;
  std::vector<Scope> scopes_;
};

TEST(IrRoundTrip, RandomPrograms) {
  int verified = 0;
  for (uint32_t seed = 0; seed < 400; ++seed) {
    Program p = RandomProgram(seed).make();
    SCOPED_TRACE("seed " + std::to_string(seed));
    expect_round_trip(p);
    if (HasFailure()) return;
    // The verifier must answer with a verdict or an Error, never crash, on arbitrary programs.
    try {
      verify(p, Level::Tensor);
      ++verified;
    } catch (const Error&) {
    }
    try {
      verify(p, Level::Tile);
    } catch (const Error&) {
    }
  }
  EXPECT_GT(verified, 0);
}

}  // namespace
}  // namespace pypto::ir
