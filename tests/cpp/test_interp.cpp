// Reference interpreter: semantics of statements, views, valid regions and instructions.
#include "test_interp_helpers.h"

namespace interp_test {
namespace {

TEST(Interp, LoadAddStore) {
  auto x = param("x", {8, 8}), y = param("y", {8, 8}), o = output("o", {8, 8});
  auto a = tile("a", 8, 8), b = tile("b", 8, 8), c = tile("c", 8, 8);
  Program p = program({x, y, o}, {alloc(a), alloc(b), alloc(c), op(Opcode::TLOAD, {W(a), W(x)}),
                                  op(Opcode::TLOAD, {W(b), W(y)}), op(Opcode::TADD, {W(c), W(a), W(b)}),
                                  op(Opcode::TSTORE, {W(o), W(c)})});
  HostF hx = ramp({8, 8}), hy = ramp({8, 8}, 0.5f), ho = nanf({8, 8});
  pypto::interp::interpret(p, args({hx.arg(), hy.arg(), ho.arg()}));
  for (size_t i = 0; i < 64; ++i) EXPECT_EQ(ho.data[i], hx.data[i] + hy.data[i]);
}

// A 64x64 tile over the right edge of a 50x70 tensor: only the 50x6 valid part moves.
TEST(Interp, EdgeTileValidExtent) {
  auto x = param("x", {50, 70}), o = output("o", {50, 70});
  auto t = tile("t", 64, 64), u = tile("u", 64, 64);
  View vx = clamped(x, I(0), I(64), 64, 64), vo = clamped(o, I(0), I(64), 64, 64);
  Program p = program({x, o}, {alloc(t), alloc(u), op(Opcode::TLOAD, {W(t), vx}),
                               op(Opcode::TMUL, {W(u), W(t), F(2.0)}), op(Opcode::TSTORE, {vo, W(u)})});
  HostF hx = ramp({50, 70}), ho = nanf({50, 70});
  pypto::interp::interpret(p, args({hx.arg(), ho.arg()}));
  for (int64_t r = 0; r < 50; ++r)
    for (int64_t c = 0; c < 70; ++c) {
      if (c >= 64)
        EXPECT_EQ(ho.at(r, c), 2 * hx.at(r, c));
      else
        EXPECT_TRUE(std::isnan(ho.at(r, c)));
    }
}

// Tiled matmul with ragged M, N and K: loops, min() valid extents, TMATMUL then TMATMUL_ACC.
TEST(Interp, TiledMatmulRagged) {
  const int64_t M = 37, K = 45, N = 29, T = 16;
  auto A = param("A", {M, K}), B = param("B", {K, N}), C = output("C", {M, N});
  auto a = tile("a", T, T, DType::F32, Space::Mat), b = tile("b", T, T, DType::F32, Space::Mat);
  auto c = tile("c", T, T, DType::F32, Space::Acc);
  Expr i = var("i"), j = var("j"), k = var("k");
  std::vector<Stmt> kbody = {alloc(a), alloc(b), op(Opcode::TLOAD, {W(a), clamped(A, i, k, T, T)}),
                             op(Opcode::TLOAD, {W(b), clamped(B, k, j, T, T)}),
                             op(Opcode::TMATMUL_ACC, {W(c), W(a), W(b)})};
  std::vector<Stmt> jbody = {alloc(c), op(Opcode::TEXPANDS, {W(c), F(0)}),
                             for_loop("k", I(0), I(K), I(T), kbody),
                             op(Opcode::TSTORE, {clamped(C, i, j, T, T), W(c)})};
  Program p = program({A, B, C}, {for_loop("i", I(0), I(M), I(T),
                                           {for_loop("j", I(0), I(N), I(T), jbody, LoopKind::Parallel)})});
  HostF ha = ramp({M, K}), hb = ramp({K, N}, 0.125f), hc = nanf({M, N});
  pypto::interp::interpret(p, args({ha.arg(), hb.arg(), hc.arg()}));
  for (int64_t r = 0; r < M; ++r)
    for (int64_t q = 0; q < N; ++q) {
      double s = 0;
      for (int64_t z = 0; z < K; ++z) s += double(ha.at(r, z)) * hb.at(z, q);
      EXPECT_NEAR(hc.at(r, q), s, 1e-4 * (1 + std::fabs(s)));
    }
}

// TMATMUL alone on a partly valid pair: k = min(a.vc, b.vr), result valid a.vr x b.vc.
TEST(Interp, MatmulValidRegion) {
  auto A = param("A", {5, 3}), B = param("B", {4, 6}), C = output("C", {8, 8});
  auto a = tile("a", 8, 8), b = tile("b", 8, 8), c = tile("c", 8, 8, DType::F32, Space::Acc);
  Program p = program({A, B, C}, {alloc(a), alloc(b), alloc(c), op(Opcode::TLOAD, {W(a), W(A)}),
                                  op(Opcode::TLOAD, {W(b), W(B)}), op(Opcode::TMATMUL, {W(c), W(a), W(b)}),
                                  op(Opcode::TSTORE, {W(C), W(c)})});
  HostF ha = ramp({5, 3}), hb = ramp({4, 6}), hc = nanf({8, 8});
  pypto::interp::interpret(p, args({ha.arg(), hb.arg(), hc.arg()}));
  for (int64_t r = 0; r < 8; ++r)
    for (int64_t q = 0; q < 8; ++q) {
      if (r < 5 && q < 6) {
        double s = 0;
        for (int64_t z = 0; z < 3; ++z) s += double(ha.at(r, z)) * hb.at(z, q);
        EXPECT_FLOAT_EQ(hc.at(r, q), float(s));
      } else {
        EXPECT_TRUE(std::isnan(hc.at(r, q))) << r << "," << q;
      }
    }
}

// A transposed load: the view lists base dims (1, 0) of a row-major tensor.
TEST(Interp, TransposedViewAndStridedArg) {
  auto x = param("x", {3, 5}), o = output("o", {5, 3});
  auto t = tile("t", 5, 3);
  View vt = W(x);
  vt.dims = {1, 0};
  Program p = program({x, o}, {alloc(t), op(Opcode::TLOAD, {W(t), vt}), op(Opcode::TSTORE, {W(o), W(t)})});
  HostF hx = ramp({3, 5}), ho = nanf({5, 3});
  pypto::interp::interpret(p, args({hx.arg(), ho.arg()}));
  for (int64_t r = 0; r < 5; ++r)
    for (int64_t c = 0; c < 3; ++c) EXPECT_EQ(ho.at(r, c), hx.at(c, r));
  // The same program on a column-major input (strides {1, 3}).
  HostF hy = ramp({3, 5});
  hy.strides = {1, 3};
  ho = nanf({5, 3});
  pypto::interp::interpret(p, args({hy.arg(), ho.arg()}));
  for (int64_t r = 0; r < 5; ++r)
    for (int64_t c = 0; c < 3; ++c) EXPECT_EQ(ho.at(r, c), hy.data[size_t(c + 3 * r)]);
}

// Stepped views and rank-1 views (1 x n tiles).
TEST(Interp, SteppedAndRank1Views) {
  auto x = param("x", {10}), o = output("o", {5});
  auto t = tile("t", 1, 8);
  View vx = W(x);
  vx.offset = {I(1)};
  vx.size = {5};
  vx.step = {2};
  vx.valid = {I(5)};
  Program p = program({x, o}, {alloc(t), op(Opcode::TLOAD, {W(t), vx}), op(Opcode::TSTORE, {W(o), W(t)})});
  HostF hx = ramp({10}), ho = nanf({5});
  hx.strides = {1};
  ho.strides = {1};
  pypto::interp::interpret(p, args({hx.arg(), ho.arg()}));
  for (int64_t i = 0; i < 5; ++i) EXPECT_EQ(ho.data[size_t(i)], hx.data[size_t(1 + 2 * i)]);
}

// Dropped dims: x[2] of a 3-d tensor as a 2-d view.
TEST(Interp, DroppedDimension) {
  auto x = param("x", {3, 4, 5}), o = output("o", {4, 5});
  auto t = tile("t", 4, 5);
  View vx = W(x);
  vx.offset = {I(2), I(0), I(0)};
  vx.size = {1, 4, 5};
  vx.valid = {I(1), I(4), I(5)};
  vx.dims = {1, 2};
  Program p = program({x, o}, {alloc(t), op(Opcode::TLOAD, {W(t), vx}), op(Opcode::TSTORE, {W(o), W(t)})});
  HostF hx = ramp({3, 4, 5}), ho = nanf({4, 5});
  pypto::interp::interpret(p, args({hx.arg(), ho.arg()}));
  for (int64_t i = 0; i < 20; ++i) EXPECT_EQ(ho.data[size_t(i)], hx.data[size_t(40 + i)]);
}

TEST(Interp, LetIfAndScalarParams) {
  auto x = param("x", {4, 4}), o = output("o", {4, 4});
  auto t = tile("t", 4, 4);
  Expr n = var("n"), alpha = var("alpha", DType::F32), s = var("s");
  Program p = program({x, o},
                      {alloc(t), op(Opcode::TLOAD, {W(t), W(x)}), let("s", n * I(2)),
                       if_then(cmp(ExprOp::Lt, s, I(5)), {op(Opcode::TMUL, {W(t), W(t), alpha})},
                               {op(Opcode::TADD, {W(t), W(t), alpha})}),
                       op(Opcode::TSTORE, {W(o), W(t)})},
                      {ScalarParam{"n", DType::I64}, ScalarParam{"alpha", DType::F32}});
  HostF hx = ramp({4, 4}), ho = nanf({4, 4});
  pypto::interp::interpret(p,
                           args({hx.arg(), ho.arg()}, {ScalarValue{false, 2, 0}, ScalarValue{true, 0, 3.0}}));
  for (size_t i = 0; i < 16; ++i) EXPECT_EQ(ho.data[i], hx.data[i] * 3);
  pypto::interp::interpret(p,
                           args({hx.arg(), ho.arg()}, {ScalarValue{false, 3, 0}, ScalarValue{true, 0, 3.0}}));
  for (size_t i = 0; i < 16; ++i) EXPECT_EQ(ho.data[i], hx.data[i] + 3);
}

// Valid regions propagate: a binary op over a partly valid tile and a broadcast row vector.
TEST(Interp, BroadcastAndValidIntersection) {
  auto x = param("x", {3, 5}), r = param("r", {1, 8}), o = output("o", {8, 8});
  auto t = tile("t", 8, 8), v = tile("v", 1, 8), d = tile("d", 8, 8);
  Program p = program({x, r, o}, {alloc(t), alloc(v), alloc(d), op(Opcode::TLOAD, {W(t), W(x)}),
                                  op(Opcode::TLOAD, {W(v), W(r)}), op(Opcode::TSUB, {W(d), W(t), W(v)}),
                                  op(Opcode::TSTORE, {W(o), W(d)})});
  HostF hx = ramp({3, 5}), hr = ramp({1, 8}, 0.75f), ho = nanf({8, 8});
  pypto::interp::interpret(p, args({hx.arg(), hr.arg(), ho.arg()}));
  for (int64_t i = 0; i < 8; ++i)
    for (int64_t j = 0; j < 8; ++j) {
      if (i < 3 && j < 5)
        EXPECT_EQ(ho.at(i, j), hx.at(i, j) - hr.at(0, j));
      else
        EXPECT_TRUE(std::isnan(ho.at(i, j)));
    }
}

TEST(Interp, HalfPrecisionRoundsToNearestEven) {
  auto x = param("x", {1, 4}), o = output("o", {1, 4}, DType::F16);
  auto t = tile("t", 1, 4);
  Program p = program({x, o}, {alloc(t), op(Opcode::TLOAD, {W(t), W(x)}), op(Opcode::TSTORE, {W(o), W(t)})});
  HostF hx({1, 4}, DType::F32, 0);
  hx.data = {1.0f + 0x1p-11f, 1.0f + 3 * 0x1p-11f, 70000.0f, 0x1p-25f * 3};
  Host<uint16_t> ho({1, 4}, DType::F16, 0xFFFF);
  pypto::interp::interpret(p, args({hx.arg(), ho.arg()}));
  EXPECT_EQ(ho.data[0], 0x3C00);  // tie -> even (1.0)
  EXPECT_EQ(ho.data[1], 0x3C02);  // tie -> even (1 + 2^-9)
  EXPECT_EQ(ho.data[2], 0x7C00);  // overflow -> inf
  EXPECT_EQ(ho.data[3], 0x0002);  // subnormal: 1.5 * 2^-24 ties to 2 * 2^-24
}

TEST(Interp, ConvertTruncatesAndWraps) {
  auto x = param("x", {1, 4}), o = output("o", {1, 4}, DType::I32), ob = output("ob", {1, 4}, DType::Bool);
  auto t = tile("t", 1, 4), i = tile("i", 1, 4, DType::I32), b = tile("b", 1, 4, DType::Bool);
  Program p = program({x, o, ob}, {alloc(t), alloc(i), alloc(b), op(Opcode::TLOAD, {W(t), W(x)}),
                                   op(Opcode::TCVT, {W(i), W(t)}), op(Opcode::TSTORE, {W(o), W(i)}),
                                   op(Opcode::TCVT, {W(b), W(t)}), op(Opcode::TSTORE, {W(ob), W(b)})});
  HostF hx({1, 4}, DType::F32, 0);
  hx.data = {-2.7f, 2.7f, 0.0f, 1e3f};
  Host<int32_t> ho({1, 4}, DType::I32, -1);
  Host<uint8_t> hb({1, 4}, DType::Bool, 7);
  pypto::interp::interpret(p, args({hx.arg(), ho.arg(), hb.arg()}));
  EXPECT_EQ(ho.data, (std::vector<int32_t>{-2, 2, 0, 1000}));
  EXPECT_EQ(hb.data, (std::vector<uint8_t>{1, 1, 0, 1}));
}

TEST(Interp, LayoutInstructions) {
  auto x = param("x", {4, 6}), o1 = output("o1", {6, 4}), o2 = output("o2", {2, 3}),
       o3 = output("o3", {4, 6});
  auto t = tile("t", 4, 6), tt = tile("tt", 6, 4), e = tile("e", 2, 3), f = tile("f", 4, 6);
  Program p = program({x, o1, o2, o3},
                      {alloc(t), alloc(tt), alloc(e), alloc(f), op(Opcode::TLOAD, {W(t), W(x)}),
                       op(Opcode::TTRANS, {W(tt), W(t)}), op(Opcode::TSTORE, {W(o1), W(tt)}),
                       op(Opcode::TEXTRACT, {W(e), W(t), I(1), I(2)}), op(Opcode::TSTORE, {W(o2), W(e)}),
                       op(Opcode::TEXPANDS, {W(f), F(-1)}), op(Opcode::TINSERT, {W(f), W(e), I(2), I(4)}),
                       op(Opcode::TSTORE, {W(o3), W(f)})});
  HostF hx = ramp({4, 6}), h1 = nanf({6, 4}), h2 = nanf({2, 3}), h3 = nanf({4, 6});
  pypto::interp::interpret(p, args({hx.arg(), h1.arg(), h2.arg(), h3.arg()}));
  for (int64_t r = 0; r < 6; ++r)
    for (int64_t c = 0; c < 4; ++c) EXPECT_EQ(h1.at(r, c), hx.at(c, r));
  for (int64_t r = 0; r < 2; ++r)
    for (int64_t c = 0; c < 3; ++c) EXPECT_EQ(h2.at(r, c), hx.at(1 + r, 2 + c));
  // TINSERT at (2, 4) clips the 2x3 source to 2x2.
  for (int64_t r = 0; r < 4; ++r)
    for (int64_t c = 0; c < 6; ++c)
      EXPECT_EQ(h3.at(r, c), (r >= 2 && c >= 4) ? hx.at(1 + r - 2, 2 + c - 4) : -1.0f);
}

TEST(Interp, SyncPairsAndLoopPrivateTiles) {
  auto x = param("x", {4, 4}), o = output("o", {4, 4});
  auto t = tile("t", 4, 4);
  Program p =
      program({x, o}, {op(Opcode::SET_FLAG, {I(0), I(2), I(0)}),
                       for_loop("i", I(0), I(3), I(1),
                                {alloc(t), op(Opcode::WAIT_FLAG, {I(0), I(2), I(0)}),
                                 op(Opcode::TLOAD, {W(t), W(x)}), op(Opcode::PIPE_BARRIER, {I(5)}),
                                 op(Opcode::SET_FLAG, {I(0), I(2), I(0)}), op(Opcode::TSTORE, {W(o), W(t)})}),
                       op(Opcode::WAIT_FLAG, {I(0), I(2), I(0)})});
  HostF hx = ramp({4, 4}), ho = nanf({4, 4});
  pypto::interp::interpret(p, args({hx.arg(), ho.arg()}));
  EXPECT_EQ(ho.data, hx.data);
}

TEST(Interp, GlobalScratchRoundTrip) {
  auto x = param("x", {4, 4}), o = output("o", {4, 4});
  auto g = buffer("g", DType::F16, {4, 4}, Space::Global, BufferKind::Temp);
  auto t = tile("t", 4, 4), u = tile("u", 4, 4);
  Program p = program({x, o}, {alloc(g), alloc(t), alloc(u), op(Opcode::TLOAD, {W(t), W(x)}),
                               op(Opcode::TSTORE, {W(g), W(t)}), op(Opcode::TLOAD, {W(u), W(g)}),
                               op(Opcode::TSTORE, {W(o), W(u)})});
  HostF hx = ramp({4, 4}, 0.3f), ho = nanf({4, 4});
  pypto::interp::interpret(p, args({hx.arg(), ho.arg()}));
  for (size_t i = 0; i < 16; ++i) EXPECT_NEAR(ho.data[i], hx.data[i], 2e-3);  // via f16
}

}  // namespace
}  // namespace interp_test
