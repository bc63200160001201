// Scalar expressions: simplification, bounds, evaluation, text round trip.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include "ir/expr.h"
#include "ir/parser.h"

namespace pypto::ir {
namespace {

Expr I(int64_t v) { return int_imm(v); }
const Expr i = var("i"), j = var("j"), k = var("k"), M = var("M");
std::string S(const Expr& e) { return to_string(e); }

TEST(ExprSimplify, LinearCancellation) {
  EXPECT_EQ(S((i + I(64)) - i), "64");
  EXPECT_EQ(S(i + I(64) - (i + I(32))), "32");
  EXPECT_EQ(S(i - i), "0");
  EXPECT_EQ(S(i + I(0)), "%i");
  EXPECT_EQ(S(i * I(1)), "%i");
  EXPECT_EQ(S(i * I(0)), "0");
  EXPECT_EQ(S(I(3) * (i + I(2)) - i * I(3)), "6");
  EXPECT_EQ(S(I(0) - i), "(%i * -1)");
  EXPECT_EQ(S(I(64) - i - j), "((64 - %i) - %j)");
  EXPECT_EQ(S(j + i * I(2) + I(5) - k), "((((%i * 2) + %j) - %k) + 5)");
  // Order of construction does not matter.
  EXPECT_TRUE(expr_equal(i + j + I(1), I(1) + j + i));
  EXPECT_TRUE(expr_equal(i * j, j * i));
}

TEST(ExprSimplify, ConstantFolding) {
  EXPECT_EQ(S(I(2) + I(3) * I(4)), "14");
  EXPECT_EQ(*as_int(div(I(-7), I(2))), -4);  // floor division
  EXPECT_EQ(*as_int(mod(I(-7), I(2))), 1);   // remainder takes the divisor's sign
  EXPECT_EQ(*as_int(mod(I(7), I(-2))), -1);
  EXPECT_EQ(*as_int(div(I(7), I(-2))), -4);
  EXPECT_EQ(*as_int(div(I(-8), I(2))), -4);
  EXPECT_EQ(S(float_imm(1.5) * float_imm(2)), "3.0f");
  EXPECT_EQ(S(float_imm(1.5, DType::F64) + I(1)), "2.5");
  EXPECT_EQ(S(div(float_imm(1), float_imm(4))), "0.25f");
  EXPECT_EQ(*as_float(mod(float_imm(-7, DType::F64), float_imm(2, DType::F64))), 1.0);
  EXPECT_EQ(S(cmp(ExprOp::Lt, I(1), I(2))), "1");
  EXPECT_EQ(S(cmp(ExprOp::Eq, float_imm(1), I(2))), "0");
  EXPECT_EQ(S(select(I(1), i, j)), "%i");
  EXPECT_EQ(S(select(I(0), i, j)), "%j");
  EXPECT_EQ(S(cast(float_imm(2.7), DType::I64)), "2");
  EXPECT_EQ(S(cast(float_imm(-2.7), DType::I64)), "-2");
  EXPECT_EQ(S(cast(I(5), DType::F64)), "5.0");
  EXPECT_EQ(S(cast(I(5), DType::I32)), "cast<i32>(5)");
  EXPECT_EQ(S(unary_math(ExprOp::Sqrt, I(64))), "8.0f");
  EXPECT_EQ(S(logic(ExprOp::And, I(1), cmp(ExprOp::Lt, i, j))), "(%i < %j)");
  EXPECT_EQ(S(logic(ExprOp::Or, I(1), cmp(ExprOp::Lt, i, j))), "1");
  EXPECT_EQ(S(logic_not(I(0))), "1");
  EXPECT_EQ(S(float_imm(2.9, DType::I64)), "2");  // an integer dtype makes an integer constant
  EXPECT_THROW(i + Expr(), Error);
  EXPECT_THROW(min(Expr(), i), Error);
}

TEST(ExprSimplify, FloatPromotion) {
  Expr x = var("x", DType::F32), y = var("y", DType::F64);
  EXPECT_EQ((x + I(2))->dtype, DType::F32);
  EXPECT_EQ((x + y)->dtype, DType::F64);
  EXPECT_EQ((i * x)->dtype, DType::F32);
  EXPECT_EQ(div(x, I(2))->dtype, DType::F32);
  EXPECT_EQ(S(div(x, I(2))), "(%x / 2)");
  EXPECT_EQ(S(div(i, I(2))), "(%i // 2)");
  EXPECT_EQ(S(x + float_imm(0)), "%x");
  EXPECT_EQ(S(x * float_imm(1)), "%x");
  // Floats are not reassociated: (x + 1) - x stays.
  EXPECT_EQ(S((x + float_imm(1)) - x), "((%x + 1.0f) - %x)");
  EXPECT_EQ(cmp(ExprOp::Lt, x, y)->dtype, DType::I64);
}

TEST(ExprSimplify, MinMax) {
  EXPECT_EQ(S(min(i + I(64), M) - i), "min(64, (%M - %i))");
  EXPECT_EQ(S(max(i + I(64), M) - i), "max(64, (%M - %i))");
  EXPECT_EQ(S(min(i + I(64), i + I(32))), "(%i + 32)");
  EXPECT_EQ(S(min(i, i)), "%i");
  EXPECT_EQ(S(min(I(3), I(7))), "3");
  EXPECT_EQ(S(max(I(3), I(7))), "7");
  EXPECT_EQ(S(min(i, j)), S(min(j, i)));
  EXPECT_EQ(S(min(i + j, i + M)), "(%i + min(%M, %j))");
  EXPECT_EQ(S(min(M, I(10)) + I(5)), "(min(10, %M) + 5)");
  EXPECT_EQ(S(min(M + I(5), j + I(5))), "(min(%M, %j) + 5)");
  EXPECT_EQ(S(min(i + I(64), M) - i + j), "(%j + min(64, (%M - %i)))");
  EXPECT_EQ(S(I(10) - min(i, j)), "(10 - min(%i, %j))");
  EXPECT_EQ(S(i - min(i, j)), "max(0, (%i - %j))");
  EXPECT_EQ(S(min(i, j)), "min(%i, %j)");                // bounds cannot decide: stays
  EXPECT_EQ(S(min(mod(i, I(64)), I(64))), "(%i % 64)");  // decided by bounds of the remainder
  EXPECT_EQ(S(min(i, min(i, j))), "min(%i, %j)");
  // The edge-tile extent of a 64-wide loop over 200.
  Expr off = i, valid = min(I(64), I(200) - i);
  Expr last = off + valid - I(1);
  auto b = bounds(last, {{"i", {0, 192}}});
  ASSERT_TRUE(b);
  EXPECT_EQ(b->hi, 199);
  EXPECT_EQ(b->lo, 63);
}

TEST(ExprSimplify, DivMod) {
  EXPECT_EQ(S(div(i * I(64) + I(128), I(64))), "(%i + 2)");
  EXPECT_EQ(S(div(i * I(64) + j, I(64))), "(%i + (%j // 64))");
  EXPECT_EQ(S(mod(i * I(64) + j + I(65), I(64))), "((%j + 1) % 64)");
  EXPECT_EQ(S(mod(i * I(64), I(64))), "0");
  EXPECT_EQ(S(div(div(i, I(4)), I(8))), "(%i // 32)");
  EXPECT_EQ(S(mod(mod(i, I(8)), I(64))), "(%i % 8)");
  EXPECT_EQ(S(div(i, I(1))), "%i");
  EXPECT_EQ(S(mod(i, I(1))), "0");
  EXPECT_EQ(S(div(i, I(0))), "0");  // x // 0 == 0 (pto/elem.hpp), folded as it runs
}

TEST(ExprSimplify, Comparisons) {
  EXPECT_EQ(S(cmp(ExprOp::Lt, i, i + I(1))), "1");
  EXPECT_EQ(S(cmp(ExprOp::Le, i + I(1), i)), "0");
  EXPECT_EQ(S(cmp(ExprOp::Eq, i, i)), "1");
  EXPECT_EQ(S(cmp(ExprOp::Ne, i + I(2), i)), "1");
  EXPECT_EQ(S(cmp(ExprOp::Lt, mod(i, I(8)), I(8))), "1");
  EXPECT_EQ(S(cmp(ExprOp::Lt, i, j)), "(%i < %j)");
  EXPECT_THROW(cmp(ExprOp::Add, i, j), Error);
}

TEST(ExprBounds, Intervals) {
  VarBounds vb{{"i", {0, 10}}, {"j", {-3, 4}}};
  auto b = [&](const Expr& e) { return bounds(e, vb); };
  EXPECT_EQ(b(i + j)->lo, -3);
  EXPECT_EQ(b(i + j)->hi, 14);
  EXPECT_EQ(b(i - j)->lo, -4);
  EXPECT_EQ(b(i - j)->hi, 13);
  EXPECT_EQ(b(i * j)->lo, -30);
  EXPECT_EQ(b(i * j)->hi, 40);
  EXPECT_EQ(b(div(j, I(2)))->lo, -2);  // floor(-3/2)
  EXPECT_EQ(b(div(j, I(2)))->hi, 2);
  EXPECT_EQ(b(mod(i, I(4)))->lo, 0);
  EXPECT_EQ(b(mod(i, I(4)))->hi, 3);
  EXPECT_EQ(b(mod(i + I(20), I(64)))->lo, 20);  // no wrap: exact
  EXPECT_EQ(b(mod(i + I(20), I(64)))->hi, 30);
  EXPECT_EQ(b(min(i, j))->hi, 4);
  EXPECT_EQ(b(max(i, j))->lo, 0);
  EXPECT_EQ(b(select(cmp(ExprOp::Lt, i, j), i, I(100)))->hi, 100);
  EXPECT_EQ(b(select(cmp(ExprOp::Lt, i, I(20)), i, I(100)))->hi, 10);  // cond decided by bounds
  EXPECT_FALSE(b(i + k));                                              // k unknown
  EXPECT_FALSE(bounds(i, {}));                                         // var not in map
  EXPECT_FALSE(b(div(i, j)));                                          // divisor range contains 0
  EXPECT_FALSE(b(float_imm(1.0)));
  EXPECT_EQ(bounds(mod(k, I(16)), {})->hi, 15);  // remainder bounded even when k is not
}

TEST(ExprEval, Values) {
  ScalarEnv env{{"i", {false, -7, 0}}, {"j", {false, 2, 0}}, {"x", {true, 0, 1.5}}};
  EXPECT_EQ(eval(div(i, j), env).i, -4);
  EXPECT_EQ(eval(mod(i, j), env).i, 1);
  EXPECT_EQ(eval(mod(j, i), env).i, -5);
  EXPECT_EQ(eval(min(i, j) * I(3), env).i, -21);
  EXPECT_EQ(eval(select(cmp(ExprOp::Lt, i, j), I(10), I(20)), env).i, 10);
  ScalarValue v = eval(var("x", DType::F32) * I(2), env);
  EXPECT_TRUE(v.is_float);
  EXPECT_EQ(v.f, 3.0);
  EXPECT_EQ(eval(cast(var("x", DType::F32), DType::I64), env).i, 1);
  EXPECT_NEAR(eval(unary_math(ExprOp::Exp, var("x", DType::F64)), env).f, std::exp(1.5), 1e-15);
  EXPECT_EQ(eval(logic_not(cmp(ExprOp::Eq, i, j)), env).i, 1);
  EXPECT_THROW(eval(i + k, env), Error);        // unknown variable
  EXPECT_EQ(eval(div(j, i + I(7)), env).i, 0);  // x // 0 == 0, as in compiled code (pto/elem.hpp)
  EXPECT_EQ(eval(mod(j, j - I(2)), env).i, 0);  // x % 0 == 0
}

// & | ^ << >> ~ on integers: pto/elem.hpp's values (shifts past the width give 0 or the sign fill),
// folded, evaluated and simplified alike; & and | of 0/1 values are the logical operators.
TEST(ExprBitwise, ValuesFoldingAndSimplification) {
  ScalarEnv env{{"i", {false, 3, 0}}, {"j", {false, -7, 0}}};
  auto ev = [&](const Expr& e) { return eval(e, env).i; };
  EXPECT_EQ(ev(bitwise(ExprOp::BitAnd, i, I(6))), 2);  // not `i && 6`
  EXPECT_EQ(ev(bitwise(ExprOp::BitOr, i, I(8))), 11);
  EXPECT_EQ(ev(bitwise(ExprOp::BitXor, i, j)), 3 ^ -7);
  EXPECT_EQ(ev(bitwise(ExprOp::Shl, i, I(62))), int64_t(uint64_t(3) << 62));
  EXPECT_EQ(ev(bitwise(ExprOp::Shl, i, I(64))), 0);
  EXPECT_EQ(ev(bitwise(ExprOp::Shl, i, I(-1))), 0);
  EXPECT_EQ(ev(bitwise(ExprOp::Shr, j, I(1))), -4);
  EXPECT_EQ(ev(bitwise(ExprOp::Shr, j, I(70))), -1);
  EXPECT_EQ(ev(bit_not(j)), 6);
  EXPECT_EQ(S(bitwise(ExprOp::Shl, I(5), I(2))), "20");  // constants fold
  EXPECT_EQ(S(bit_not(I(0))), "-1");
  EXPECT_EQ(S(bitwise(ExprOp::BitOr, i, I(0))), "%i");
  EXPECT_EQ(S(bitwise(ExprOp::BitAnd, i, I(0))), "0");
  EXPECT_EQ(S(bit_not(bit_not(i))), "%i");
  EXPECT_TRUE(expr_equal(bitwise(ExprOp::BitXor, i, j), bitwise(ExprOp::BitXor, j, i)));  // one order
  const Expr lt = cmp(ExprOp::Lt, i, j), ne = cmp(ExprOp::Ne, j, k);
  EXPECT_TRUE(expr_equal(bitwise(ExprOp::BitAnd, lt, ne), logic(ExprOp::And, lt, ne)));
  auto b = bounds(bitwise(ExprOp::BitAnd, i, I(15)), {});
  ASSERT_TRUE(b);
  EXPECT_EQ(b->lo, 0);
  EXPECT_EQ(b->hi, 15);
  EXPECT_THROW(bitwise(ExprOp::BitAnd, var("x", DType::F32), I(1)), Error);
  EXPECT_THROW(bit_not(float_imm(1.5)), Error);
}

TEST(ExprText, RoundTrip) {
  std::vector<Expr> es = {
      I(0),
      I(-5),
      I(std::numeric_limits<int64_t>::min()),
      I(std::numeric_limits<int64_t>::max()),
      float_imm(0.1),
      float_imm(0.1, DType::F64),
      float_imm(1e20),
      float_imm(-0.0),
      float_imm(1e-30, DType::F64),
      float_imm(std::numeric_limits<double>::infinity()),
      float_imm(-std::numeric_limits<double>::infinity(), DType::F64),
      float_imm(std::nan("")),
      float_imm(2.5, DType::F16),
      cast(I(7), DType::I32),
      cast(I(3), DType::Bool),
      min(i + I(64), M) - i,
      max(i, j) * k,
      div(i, I(3)),
      mod(i + j, I(7)),
      cmp(ExprOp::Le, i, j),
      logic(ExprOp::Or, cmp(ExprOp::Lt, i, j), cmp(ExprOp::Ne, j, k)),
      logic_not(cmp(ExprOp::Eq, i, I(3))),
      select(cmp(ExprOp::Lt, i, j), i, I(-3)),
      cast(i, DType::F32),
      unary_math(ExprOp::Sqrt, cast(i, DType::F64)),
      unary_math(ExprOp::Log, var("x", DType::I64)),
      var("weird name\"\\"),
      var("a.b_1"),
      i - I(std::numeric_limits<int64_t>::min()),
      cast(float_imm(std::nan("")), DType::I64),
      cast(float_imm(1e300, DType::F64), DType::I32),
      bitwise(ExprOp::BitAnd, i, I(6)),
      bitwise(ExprOp::Shl, bitwise(ExprOp::BitXor, i, j), bitwise(ExprOp::Shr, k, I(2))),
      bit_not(bitwise(ExprOp::BitOr, i, j)),
  };
  for (const auto& e : es) {
    std::string s = to_string(e);
    Expr back = parse_expr(s);
    EXPECT_EQ(to_string(back), s);
    // Floats come back with their dtype; vars read standalone are i64, which all of these are.
    EXPECT_TRUE(expr_equal(back, e)) << s;
    EXPECT_EQ(expr_hash(back), expr_hash(e)) << s;
  }
  EXPECT_EQ(S(float_imm(0.1)), "0.1f");
  EXPECT_EQ(S(float_imm(-0.0)), "-0.0f");
  EXPECT_EQ(S(float_imm(std::nan(""))), "nanf");
  EXPECT_EQ(S(float_imm(2.5, DType::F16)), "cast<f16>(2.5)");
}

TEST(ExprText, ParseForms) {
  EXPECT_EQ(S(parse_expr("(%a > %b)")), "(%b < %a)");
  EXPECT_EQ(S(parse_expr(" ( ( %a + 1 ) ) ")), "(%a + 1)");  // redundant parentheses accepted
  EXPECT_EQ(S(parse_expr("(1 + 2)")), "(1 + 2)");            // rebuilt exactly as written
  EXPECT_EQ(parse_expr("1e3")->dtype, DType::F64);
  EXPECT_EQ(parse_expr("1e3f")->dtype, DType::F32);
  EXPECT_EQ(parse_expr("(%x / 2.0)")->dtype, DType::F64);
  EXPECT_EQ(*as_float(parse_expr("-inff")), -std::numeric_limits<double>::infinity());
  for (const char* bad : {"(%a + )", "(%a + %b", "min(%a)", "%a %b", "5f", "(%a ? %b)", "cast<q>(1)", "",
                          "99999999999999999999", "@x", "$"}) {
    EXPECT_THROW(parse_expr(bad), Error) << bad;
  }
  try {
    parse_expr("\n  (%a + )");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("line 2, col 9"), std::string::npos) << e.what();
  }
}

TEST(ExprVars, CollectAndSubstitute) {
  std::vector<std::string> vs;
  collect_vars(min(i + j, i * k), vs);
  EXPECT_EQ(vs, (std::vector<std::string>{"i", "j", "k"}));
  EXPECT_EQ(S(substitute(min(i + I(64), M) - i, {{"i", I(192)}, {"M", I(200)}})), "8");
  EXPECT_EQ(S(substitute(i + j, {{"j", I(0) - i}})), "0");
  Expr e = i + j;
  EXPECT_EQ(substitute(e, {{"q", I(1)}}).get(), e.get());  // untouched: same node
}

// ---- randomized: canonical forms are stable, evaluation agrees with the unsimplified tree ------

struct Gen {
  std::mt19937 rng;
  int pick(int n) { return std::uniform_int_distribution<int>(0, n - 1)(rng); }
  // Returns the simplified expression and the same tree built without simplification (text).
  Expr gen(int depth) {
    if (depth == 0 || pick(4) == 0) {
      switch (pick(3)) {
        case 0:
          return int_imm(pick(41) - 20);
        default:
          return var(std::string(1, char('a' + pick(4))));
      }
    }
    Expr a = gen(depth - 1), b = gen(depth - 1);
    switch (pick(9)) {
      case 0:
        return a + b;
      case 1:
        return a - b;
      case 2:
        return a * int_imm(pick(7) - 3);
      case 3:
        return min(a, b);
      case 4:
        return max(a, b);
      case 5:
        return div(a, int_imm(pick(8) + 1));
      case 6:
        return mod(a, int_imm(pick(8) + 1));
      case 7:
        return select(cmp(pick(2) ? ExprOp::Lt : ExprOp::Le, a, b), a, b);
      default:
        return a * b;
    }
  }
};

// Rebuild bottom-up through the simplifying constructors.
Expr rebuild(const Expr& e) {
  if (e->args.empty()) return e;
  std::vector<Expr> args;
  for (const auto& a : e->args) args.push_back(rebuild(a));
  return make_expr(e->op, e->dtype, args);
}

TEST(ExprRandom, SimplificationPreservesValueAndIsStable) {
  Gen g{std::mt19937(1234)};
  for (int n = 0; n < 3000; ++n) {
    Expr e = g.gen(4);
    std::string s = to_string(e);
    Expr raw = parse_expr(s);  // the same tree, not re-simplified
    ASSERT_TRUE(expr_equal(raw, e)) << s;
    Expr again = rebuild(e);
    EXPECT_EQ(to_string(again), s) << "not a fixed point";
    for (int t = 0; t < 5; ++t) {
      ScalarEnv env;
      VarBounds vb;
      for (char c = 'a'; c <= 'd'; ++c) {
        int64_t v = g.pick(61) - 30;
        env[std::string(1, c)] = ScalarValue{false, v, 0};
        vb[std::string(1, c)] = {v - g.pick(5), v + g.pick(5)};
      }
      ScalarValue x = eval(e, env);
      auto bb = bounds(e, vb);
      if (bb) {
        EXPECT_LE(bb->lo, x.i) << s;
        EXPECT_GE(bb->hi, x.i) << s;
      }
    }
  }
}

// Simplification must not change values: compare against a tree built with no simplification.
TEST(ExprRandom, SimplifiedEqualsUnsimplified) {
  std::mt19937 rng(99);
  auto pick = [&](int n) { return std::uniform_int_distribution<int>(0, n - 1)(rng); };
  std::function<std::string(int)> gen = [&](int depth) -> std::string {
    if (depth == 0 || pick(4) == 0) {
      if (pick(3) == 0) return std::to_string(pick(41) - 20);
      return std::string("%") + char('a' + pick(4));
    }
    std::string a = gen(depth - 1), b = gen(depth - 1);
    switch (pick(8)) {
      case 0:
        return "(" + a + " + " + b + ")";
      case 1:
        return "(" + a + " - " + b + ")";
      case 2:
        return "(" + a + " * " + std::to_string(pick(7) - 3) + ")";
      case 3:
        return "min(" + a + ", " + b + ")";
      case 4:
        return "max(" + a + ", " + b + ")";
      case 5:
        return "(" + a + " // " + std::to_string(pick(8) + 1) + ")";
      case 6:
        return "(" + a + " % " + std::to_string(pick(8) + 1) + ")";
      default:
        return "select((" + a + " < " + b + "), " + a + ", " + b + ")";
    }
  };
  for (int n = 0; n < 3000; ++n) {
    std::string s = gen(5);
    Expr raw = parse_expr(s);
    Expr simp = rebuild(raw);
    for (int t = 0; t < 5; ++t) {
      ScalarEnv env;
      for (char c = 'a'; c <= 'd'; ++c)
        env[std::string(1, c)] = ScalarValue{false, int64_t(pick(201) - 100), 0};
      ASSERT_EQ(eval(raw, env).i, eval(simp, env).i) << s << "  ->  " << to_string(simp);
    }
  }
}

}  // namespace
}  // namespace pypto::ir
