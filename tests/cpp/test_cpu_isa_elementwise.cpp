// CPU PTO headers: unary, binary (broadcasting, scalars, ragged valid regions), compare, select,
// convert. Reference: plain double-precision scalar code.
#include "test_cpu_isa_util.hpp"

namespace {
using namespace pto_test;

constexpr double kInf = std::numeric_limits<double>::infinity();

// ---- reference model of operands ------------------------------------------------------------------
template <class X>
double val(const X& x, int r, int c) {
  if constexpr (is_tile_v<X>) {
    constexpr int R = X::rows, C = X::cols;
    return double(x.data[(R == 1 ? 0 : r) * C + (C == 1 ? 0 : c)]);
  } else {
    return double(x);
  }
}
// How far an operand limits the result (the contract's valid-region rule).
template <class X>
double lim_r(const X& x) {
  if constexpr (is_tile_v<X>)
    return X::rows == 1 ? (x.vr > 0 ? kInf : 0) : x.vr;
  else
    return kInf;
}
template <class X>
double lim_c(const X& x) {
  if constexpr (is_tile_v<X>)
    return X::cols == 1 ? (x.vc > 0 ? kInf : 0) : x.vc;
  else
    return kInf;
}

// ---- unary -----------------------------------------------------------------------------------------------
double ref_erf_gelu(double x) { return 0.5 * x * std::erfc(-x / std::sqrt(2.0)); }
double ref_gelu_tanh(double x) {
  double u2 = 2 * std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x);
  return x / (1 + std::exp(-u2));
}

template <class D, int RD, int CD, class S, int R, int C, class Inst, class Ref>
void check_unary(Inst inst, Ref ref, int vr, int vc, double lo, double hi, bool positive, double rtol,
                 double atol, const char* what) {
  Tile<S, R, C> src;
  fill_random(src, vr, vc, lo, hi, positive);
  Tile<D, RD, CD> dst;
  poison(dst);
  inst(dst, src);
  expect_tile(
      dst, std::min(vr, RD), std::min(vc, CD), [&](int r, int c) { return ref(at(src, r, c)); }, rtol, atol,
      what);
}

#define UNARY_CASE(INST, REF, LO, HI, POS, RTOL, ATOL)                                                     \
  do {                                                                                                     \
    auto inst = [](auto& d, const auto& s) { INST(d, s); };                                                \
    auto ref = [](double x) { return REF; };                                                               \
    check_unary<float, 13, 24, float, 13, 24>(inst, ref, 13, 24, LO, HI, POS, RTOL, ATOL, #INST " full");  \
    check_unary<float, 13, 24, float, 13, 24>(inst, ref, 9, 17, LO, HI, POS, RTOL, ATOL, #INST " ragged"); \
    check_unary<float, 16, 32, float, 13, 24>(inst, ref, 11, 23, LO, HI, POS, RTOL, ATOL, #INST " shape"); \
    check_unary<float, 1, 40, float, 1, 40>(inst, ref, 1, 37, LO, HI, POS, RTOL, ATOL, #INST " row");      \
    check_unary<float, 40, 1, float, 40, 1>(inst, ref, 33, 1, LO, HI, POS, RTOL, ATOL, #INST " col");      \
    check_unary<double, 8, 24, double, 8, 24>(inst, ref, 7, 21, LO, HI, POS, 1e-13, ATOL, #INST " f64");   \
  } while (0)

TEST(CpuIsaUnary, FloatOps) {
  const double e = 1.2e-7;  // exactly rounded ops: half an ulp of float, with margin
  UNARY_CASE(TMOV, x, 0.25, 2, false, 0, 0);
  UNARY_CASE(TNEG, -x, 0.25, 2, false, 0, 0);
  UNARY_CASE(TABS, std::fabs(x), 0.25, 2, false, 0, 0);
  UNARY_CASE(TRELU, x < 0 ? 0.0 : x, 0.25, 2, false, 0, 0);
  UNARY_CASE(TSQRT, std::sqrt(x), 0.01, 100, true, e, 0);
  UNARY_CASE(TRSQRT, 1 / std::sqrt(x), 0.01, 100, true, 2 * e, 0);
  UNARY_CASE(TRECIP, 1 / x, 0.01, 100, false, e, 0);
  UNARY_CASE(TEXP, std::exp(x), 0.01, 20, false, 1e-6, 0);
  UNARY_CASE(TLOG, std::log(x), 1e-3, 1e3, true, 1e-6, 0);
  UNARY_CASE(TTANH, std::tanh(x), 0.01, 6, false, 1e-6, 0);
  UNARY_CASE(TSIGMOID, 1 / (1 + std::exp(-x)), 0.01, 20, false, 1e-6, 0);
  UNARY_CASE(TERF, std::erf(x), 0.01, 4, false, 1e-6, 0);
  UNARY_CASE(TGELU, ref_erf_gelu(x), 0.01, 6, false, 2e-6, 1e-12);
  UNARY_CASE(TGELU_TANH, ref_gelu_tanh(x), 0.01, 6, false, 2e-6, 1e-12);
  UNARY_CASE(TSILU, x / (1 + std::exp(-x)), 0.01, 20, false, 1e-6, 0);
  UNARY_CASE(TFLOOR, std::floor(x), 0.01, 1e5, false, 0, 0);
}

TEST(CpuIsaUnary, NotAndIntegerOps) {
  Tile<float, 4, 16> f;
  fill_random(f);
  for (int i = 0; i < 64; i += 3) f.data[i] = (i % 2) ? 0.0f : -0.0f;
  Tile<bool, 4, 16> b;
  poison(b);
  TNOT(b, f);
  expect_tile(b, 4, 16, [&](int r, int c) { return at(f, r, c) == 0 ? 1.0 : 0.0; }, 0);
  Tile<bool, 4, 16> bb;
  TNOT(bb, b);
  expect_tile(bb, 4, 16, [&](int r, int c) { return at(f, r, c) == 0 ? 0.0 : 1.0; }, 0);
  Tile<int32_t, 5, 7> it, io;
  fill_random(it, 4, 6, 0, 10);
  poison(io);
  TNEG(io, it);
  expect_tile(io, 4, 6, [&](int r, int c) { return -at(it, r, c); }, 0);
  TABS(io, it);
  expect_tile(io, 4, 6, [&](int r, int c) { return std::fabs(at(it, r, c)); }, 0);
  TRELU(io, it);
  expect_tile(io, 4, 6, [&](int r, int c) { return std::max(0.0, at(it, r, c)); }, 0);
  Tile<int64_t, 5, 7> i64;
  TEXP(i64, it);  // integer tiles compute transcendental functions in double, then truncate
  for (int r = 0; r < 4; ++r)
    for (int c = 0; c < 6; ++c) {
      ASSERT_EQ(at(i64, r, c), std::trunc(std::exp(at(it, r, c))));
    }
}

TEST(CpuIsaUnary, SpecialValues) {
  Tile<float, 1, 8> s, d;
  const float in[8] = {NAN, INFINITY, -INFINITY, 0.0f, -0.0f, 1e-40f, -1e-40f, 100.0f};
  for (int i = 0; i < 8; ++i) s.data[i] = in[i];
  TEXP(d, s);
  EXPECT_TRUE(std::isnan(d.data[0]));
  EXPECT_EQ(d.data[1], INFINITY);
  EXPECT_EQ(d.data[2], 0.0f);
  EXPECT_EQ(d.data[3], 1.0f);
  EXPECT_EQ(d.data[7], INFINITY);
  TLOG(d, s);
  EXPECT_TRUE(std::isnan(d.data[0]));
  EXPECT_EQ(d.data[1], INFINITY);
  EXPECT_TRUE(std::isnan(d.data[2]));
  EXPECT_EQ(d.data[3], -INFINITY);
  EXPECT_EQ(d.data[4], -INFINITY);
  EXPECT_NEAR(d.data[5], std::log(1e-40), 1e-4);
  EXPECT_TRUE(std::isnan(d.data[6]));
  TRELU(d, s);
  EXPECT_TRUE(std::isnan(d.data[0]));  // NaN propagates
  EXPECT_EQ(d.data[2], 0.0f);
  for (auto inst : {+[](Tile<float, 1, 8>& o, const Tile<float, 1, 8>& i) { TTANH(o, i); },
                    +[](Tile<float, 1, 8>& o, const Tile<float, 1, 8>& i) { TSIGMOID(o, i); },
                    +[](Tile<float, 1, 8>& o, const Tile<float, 1, 8>& i) { TERF(o, i); },
                    +[](Tile<float, 1, 8>& o, const Tile<float, 1, 8>& i) { TGELU(o, i); },
                    +[](Tile<float, 1, 8>& o, const Tile<float, 1, 8>& i) { TGELU_TANH(o, i); },
                    +[](Tile<float, 1, 8>& o, const Tile<float, 1, 8>& i) { TSILU(o, i); },
                    +[](Tile<float, 1, 8>& o, const Tile<float, 1, 8>& i) { TFLOOR(o, i); }}) {
    inst(d, s);
    EXPECT_TRUE(std::isnan(d.data[0]));
    for (int i = 1; i < 8; ++i) EXPECT_FALSE(std::isnan(d.data[i])) << i;
  }
  TTANH(d, s);
  EXPECT_EQ(d.data[1], 1.0f);
  EXPECT_EQ(d.data[2], -1.0f);
  TGELU(d, s);
  EXPECT_EQ(d.data[1], INFINITY);
  EXPECT_EQ(d.data[2], 0.0f);
  TFLOOR(d, s);
  EXPECT_EQ(d.data[2], -INFINITY);
  EXPECT_TRUE(std::signbit(d.data[4]));
  EXPECT_EQ(d.data[6], -1.0f);
}

TEST(CpuIsaUnary, InPlace) {
  Tile<float, 16, 16> t;
  fill_random(t, 16, 16, 0.1, 3);
  Tile<float, 16, 16> orig = t;
  TEXP(t, t);
  expect_tile(t, 16, 16, [&](int r, int c) { return std::exp(at(orig, r, c)); }, 1e-6);
  TSQRT(t, t);
  expect_tile(t, 16, 16, [&](int r, int c) { return std::exp(at(orig, r, c) / 2); }, 1e-6);
}

// ---- binary
// ------------------------------------------------------------------------------------------------
template <class D, int R, int C, class A, class B, class Inst, class Ref>
void check_binary(Inst inst, Ref ref, const A& a, const B& b, double rtol, const std::string& what) {
  Tile<D, R, C> dst;
  poison(dst);
  inst(dst, a, b);
  double er = std::min({double(R), lim_r(a), lim_r(b)}), ec = std::min({double(C), lim_c(a), lim_c(b)});
  expect_tile(
      dst, int(er), int(ec), [&](int r, int c) { return ref(val(a, r, c), val(b, r, c)); }, rtol, 0, what);
}

// Every operand combination of the contract, on f32 tiles.
template <class Inst, class Ref>
void binary_suite(Inst inst, Ref ref, double rtol, double lo, double hi, bool pos, const char* name) {
  Tile<float, 13, 24> a, b;
  Tile<float, 16, 32> wide;
  Tile<float, 1, 24> row;
  Tile<float, 13, 1> col;
  Tile<float, 1, 1> one;
  auto n = [&](const char* s) { return std::string(name) + " " + s; };
  fill_random(a, 13, 24, lo, hi, pos);
  fill_random(b, 13, 24, lo, hi, pos);
  check_binary<float, 13, 24>(inst, ref, a, b, rtol, n("full"));
  fill_random(a, 11, 20, lo, hi, pos);
  fill_random(b, 12, 18, lo, hi, pos);
  check_binary<float, 13, 24>(inst, ref, a, b, rtol, n("ragged"));
  check_binary<float, 13, 24>(inst, ref, a, 1.75f, rtol, n("tile-scalar"));
  check_binary<float, 13, 24>(inst, ref, 1.25, b, rtol, n("scalar-tile (double scalar)"));
  check_binary<float, 13, 24>(inst, ref, 1.5f, 0.75f, rtol, n("scalar-scalar"));
  fill_random(wide, 14, 30, lo, hi, pos);
  check_binary<float, 13, 24>(inst, ref, wide, b, rtol, n("other shape"));
  fill_random(row, 1, 22, lo, hi, pos);
  check_binary<float, 13, 24>(inst, ref, a, row, rtol, n("row broadcast"));
  fill_random(col, 10, 1, lo, hi, pos);
  check_binary<float, 13, 24>(inst, ref, col, b, rtol, n("col broadcast"));
  fill_random(one, 1, 1, lo, hi, pos);
  check_binary<float, 13, 24>(inst, ref, a, one, rtol, n("1x1 broadcast"));
  check_binary<float, 13, 24>(inst, ref, col, row, rtol, n("outer"));
  fill_random(row, 0, 22, lo, hi, pos);
  check_binary<float, 13, 24>(inst, ref, a, row, rtol, n("empty broadcast"));
  fill_random(col, 13, 1, lo, hi, pos);
  Tile<float, 13, 1> col2;
  fill_random(col2, 12, 1, lo, hi, pos);
  check_binary<float, 13, 1>(inst, ref, col, col2, rtol, n("column vectors"));
  Tile<double, 7, 9> da, db;
  fill_random(da, 7, 8, lo, hi, pos);
  fill_random(db, 6, 9, lo, hi, pos);
  check_binary<double, 7, 9>(inst, ref, da, db, rtol * 1e-8, n("f64"));
}

#define BINARY_SUITE(INST, REF, RTOL, LO, HI, POS)                           \
  binary_suite([](auto& d, const auto& a, const auto& b) { INST(d, a, b); }, \
               [](double x, double y) { return REF; }, RTOL, LO, HI, POS, #INST)

TEST(CpuIsaBinary, Arithmetic) {
  const double e = 1.2e-7;
  BINARY_SUITE(TADD, x + y, e, 0.25, 2, false);
  BINARY_SUITE(TSUB, x - y, 3 * e, 0.25, 2, true);  // x - y rounds relative to max(|x|,|y|)
  BINARY_SUITE(TMUL, x * y, e, 0.25, 2, false);
  BINARY_SUITE(TDIV, x / y, e, 0.25, 2, false);
  BINARY_SUITE(TMAX, std::max(x, y), 0, 0.25, 2, false);
  BINARY_SUITE(TMIN, std::min(x, y), 0, 0.25, 2, false);
  BINARY_SUITE(TPOW, std::pow(x, y), 4 * e, 0.25, 2, true);
}

TEST(CpuIsaBinary, PowScalarExponentFastPaths) {
  Tile<float, 9, 20> a;
  fill_random(a, 8, 19, 0.1, 4, true);
  for (double ex : {1.0, 2.0, 3.0, -1.0, 0.5, -0.5, 0.0, 1.7, -2.25}) {
    Tile<float, 9, 20> d;
    poison(d);
    TPOW(d, a, ex);
    expect_tile(
        d, 8, 19, [&](int r, int c) { return std::pow(at(a, r, c), ex); }, 4e-7, 0,
        "exponent " + std::to_string(ex));
  }
}

TEST(CpuIsaBinary, MaxMinPropagateNaN) {
  Tile<float, 1, 4> a, b, d;
  const float av[4] = {NAN, 1.0f, NAN, 2.0f}, bv[4] = {1.0f, NAN, NAN, -3.0f};
  for (int i = 0; i < 4; ++i) {
    a.data[i] = av[i];
    b.data[i] = bv[i];
  }
  TMAX(d, a, b);
  EXPECT_TRUE(std::isnan(d.data[0]) && std::isnan(d.data[1]) && std::isnan(d.data[2]));
  EXPECT_EQ(d.data[3], 2.0f);
  TMIN(d, a, b);
  EXPECT_TRUE(std::isnan(d.data[0]) && std::isnan(d.data[1]) && std::isnan(d.data[2]));
  EXPECT_EQ(d.data[3], -3.0f);
  TMAX(d, a, 0.0f);
  EXPECT_TRUE(std::isnan(d.data[0]));
  EXPECT_EQ(d.data[1], 1.0f);
}

TEST(CpuIsaBinary, IntegerAndLogical) {
  Tile<int32_t, 6, 10> a, b, d;
  fill_random(a, 6, 10, 0, 1000);
  fill_random(b, 5, 9, 0, 50);
  b.data[3] = 0;  // x / 0 -> 0 (no trap)
  TDIV(d, a, b);
  expect_tile(
      d, 5, 9,
      [&](int r, int c) {
        double y = at(b, r, c);
        return y == 0 ? 0.0 : std::trunc(at(a, r, c) / y);
      },
      0);
  TADD(d, a, int64_t(7));
  expect_tile(d, 6, 10, [&](int r, int c) { return at(a, r, c) + 7; }, 0);
  TMUL(d, a, b);
  expect_tile(d, 5, 9, [&](int r, int c) { return at(a, r, c) * at(b, r, c); }, 0);
  TMAX(d, a, b);
  expect_tile(d, 5, 9, [&](int r, int c) { return std::max(at(a, r, c), at(b, r, c)); }, 0);
  // A float scalar is first converted to the integer tiles' type (docs/isa.md §2): 2.5 -> 2.
  TMUL(d, a, 2.5);
  expect_tile(d, 6, 10, [&](int r, int c) { return at(a, r, c) * 2; }, 0);
  Tile<int64_t, 6, 10> l;
  TSUB(l, a, b);
  expect_tile(l, 5, 9, [&](int r, int c) { return at(a, r, c) - at(b, r, c); }, 0);

  Tile<bool, 7, 33> p, q, o;
  fill_random(p, 7, 33);
  fill_random(q, 6, 31);
  TAND(o, p, q);
  expect_tile(o, 6, 31, [&](int r, int c) { return double(at(p, r, c) && at(q, r, c)); }, 0);
  TOR(o, p, q);
  expect_tile(o, 6, 31, [&](int r, int c) { return double(at(p, r, c) || at(q, r, c)); }, 0);
  Tile<bool, 1, 33> prow;
  fill_random(prow, 1, 33);
  TAND(o, p, prow);
  expect_tile(o, 7, 33, [&](int r, int c) { return double(at(p, r, c) && at(prow, 0, c)); }, 0);
}

// ---- compare / select / convert
// ----------------------------------------------------------------------------
TEST(CpuIsaCompare, AllOpsAndOperandKinds) {
  Tile<float, 9, 20> a, b;
  fill_random(a, 9, 19);
  fill_random(b, 8, 20);
  for (int i = 0; i < 20; i += 4) b.data[i] = a.data[i];  // some equal elements
  a.data[21] = NAN;
  Tile<float, 9, 1> col;
  fill_random(col, 9, 1);
  auto run = [&](auto inst, auto ref, const char* name) {
    check_binary<bool, 9, 20>(inst, ref, a, b, 0, std::string(name) + " tile-tile");
    check_binary<bool, 9, 20>(inst, ref, a, 0.5f, 0, std::string(name) + " tile-scalar");
    check_binary<bool, 9, 20>(inst, ref, -0.5, b, 0, std::string(name) + " scalar-tile");
    check_binary<bool, 9, 20>(inst, ref, a, col, 0, std::string(name) + " col broadcast");
    check_binary<float, 9, 20>(inst, ref, a, b, 0, std::string(name) + " numeric dst");
  };
  run([](auto& d, const auto& x, const auto& y) { TCMP_LT(d, x, y); },
      [](double x, double y) { return double(x < y); }, "LT");
  run([](auto& d, const auto& x, const auto& y) { TCMP_LE(d, x, y); },
      [](double x, double y) { return double(x <= y); }, "LE");
  run([](auto& d, const auto& x, const auto& y) { TCMP_GT(d, x, y); },
      [](double x, double y) { return double(x > y); }, "GT");
  run([](auto& d, const auto& x, const auto& y) { TCMP_GE(d, x, y); },
      [](double x, double y) { return double(x >= y); }, "GE");
  run([](auto& d, const auto& x, const auto& y) { TCMP_EQ(d, x, y); },
      [](double x, double y) { return double(x == y); }, "EQ");
  run([](auto& d, const auto& x, const auto& y) { TCMP_NE(d, x, y); },
      [](double x, double y) { return double(x != y); }, "NE");
  // An integer tile against a fractional scalar: the scalar is converted to the tile's type first
  // (docs/isa.md §2: -0.5 truncates to 0), so 0 <= -0.5 holds.
  Tile<int32_t, 2, 8> it;
  for (int i = 0; i < 16; ++i) it.data[i] = i - 8;
  Tile<bool, 2, 8> m;
  TCMP_LE(m, it, -0.5);
  expect_tile(m, 2, 8, [&](int r, int c) { return double(at(it, r, c) <= 0); }, 0);
}

TEST(CpuIsaSelect, MaskAndOperandKinds) {
  Tile<bool, 11, 17> mask;
  fill_random(mask, 10, 17);
  Tile<float, 11, 17> a, b;
  fill_random(a, 11, 16);
  fill_random(b, 11, 17);
  auto sel = [](auto& d, const auto& m, const auto& x, const auto& y) { TSEL(d, m, x, y); };
  auto check = [&](const auto& m, const auto& x, const auto& y, const char* what) {
    Tile<float, 11, 17> d;
    poison(d);
    sel(d, m, x, y);
    double er = std::min({11.0, lim_r(m), lim_r(x), lim_r(y)}),
           ec = std::min({17.0, lim_c(m), lim_c(x), lim_c(y)});
    expect_tile(
        d, int(er), int(ec), [&](int r, int c) { return val(m, r, c) != 0 ? val(x, r, c) : val(y, r, c); }, 0,
        0, what);
  };
  check(mask, a, b, "tiles");
  check(mask, a, -3.0f, "tile/scalar");
  check(mask, 2.0, b, "scalar/tile");
  Tile<bool, 11, 1> mcol;
  fill_random(mcol, 11, 1);
  check(mcol, a, b, "column mask");
  Tile<float, 1, 17> brow;
  fill_random(brow, 1, 17);
  check(mask, a, brow, "row operand");
  Tile<float, 11, 17> fm;  // a numeric mask: nonzero selects a
  fill_random(fm, 11, 17);
  for (int i = 0; i < 11 * 17; i += 3) fm.data[i] = 0.0f;
  check(fm, a, b, "float mask");
}

TEST(CpuIsaConvert, Dtypes) {
  Tile<float, 6, 12> f;
  fill_random(f, 5, 11, 0.25, 300);
  for (int i = 0; i < 72; i += 5) f.data[i] = 0.0f;
  Tile<int32_t, 6, 12> i32;
  poison(i32);
  TCVT(i32, f);
  expect_tile(i32, 5, 11, [&](int r, int c) { return std::trunc(at(f, r, c)); }, 0, 0, "f32->i32");
  Tile<bool, 6, 12> b;
  poison(b);
  TCVT(b, f);
  expect_tile(b, 5, 11, [&](int r, int c) { return double(at(f, r, c) != 0); }, 0, 0, "f32->bool");
  Tile<float, 6, 12> back;
  poison(back);
  TCVT(back, b);
  expect_tile(back, 5, 11, [&](int r, int c) { return double(at(f, r, c) != 0); }, 0, 0, "bool->f32");
  TCVT(back, i32);
  expect_tile(back, 5, 11, [&](int r, int c) { return std::trunc(at(f, r, c)); }, 0, 0, "i32->f32");
  Tile<double, 6, 12> d;
  TCVT(d, f);
  expect_tile(d, 5, 11, [&](int r, int c) { return at(f, r, c); }, 0, 0, "f32->f64");
  for (int i = 0; i < 72; ++i) d.data[i] = 1.0 / 3.0 + i;
  TCVT(back, d);
  expect_tile(back, 5, 11, [&](int r, int c) { return double(float(at(d, r, c))); }, 0, 0, "f64->f32");
  Tile<int64_t, 6, 12> i64;
  for (int i = 0; i < 72; ++i) i64.data[i] = (int64_t(1) << 33) + i;
  i64.vr = 6;
  i64.vc = 12;
  TCVT(i32, i64);
  expect_tile(i32, 6, 12, [&](int r, int c) { return double(r * 12 + c); }, 0, 0, "i64->i32 wraps");
}

}  // namespace
