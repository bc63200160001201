// CPU PTO headers: TTRANS, TRESHAPE, TEXTRACT, TINSERT, TFILLPAD, TGATHER, TSCATTER.
#include "test_cpu_isa_util.hpp"

namespace {
using namespace pto_test;

TEST(CpuIsaLayout, Trans) {
  Tile<float, 12, 20> s;
  fill_random(s, 9, 17);
  Tile<float, 20, 12> d;
  poison(d);
  TTRANS(d, s);
  expect_tile(d, 17, 9, [&](int r, int c) { return at(s, c, r); }, 0);
  Tile<float, 40, 40> big;
  fill_random(big, 37, 33);
  Tile<float, 40, 40> bt;
  TTRANS(bt, big);
  expect_tile(bt, 33, 37, [&](int r, int c) { return at(big, c, r); }, 0);
  Tile<float, 40, 40> orig = big;
  TTRANS(big, big);  // in place
  expect_tile(big, 33, 37, [&](int r, int c) { return at(orig, c, r); }, 0);
  Tile<int64_t, 3, 5> i;
  fill_random(i);
  Tile<int64_t, 5, 3> it;
  TTRANS(it, i);
  expect_tile(it, 5, 3, [&](int r, int c) { return at(i, c, r); }, 0);
}

TEST(CpuIsaLayout, Reshape) {
  Tile<float, 6, 8> s;
  fill_random(s);
  Tile<float, 4, 12> d;
  poison(d);
  TRESHAPE(d, s);
  expect_tile(d, 4, 12, [&](int r, int c) { return s.data[r * 12 + c]; }, 0);
  Tile<float, 48, 1> v;
  TRESHAPE(v, d);
  expect_tile(v, 48, 1, [&](int r, int) { return s.data[r]; }, 0);
}

TEST(CpuIsaLayout, Extract) {
  Tile<float, 20, 30> s;
  fill_random(s, 18, 27);
  struct Case {
    int r0, c0, er, ec;
  };
  for (Case k : {Case{0, 0, 8, 16}, Case{5, 7, 8, 16}, Case{14, 20, 4, 7}, Case{18, 0, 0, 16},
                 Case{-1, 0, 0, 0}, Case{17, 26, 1, 1}, Case{30, 40, 0, 0}}) {
    Tile<float, 8, 16> d;
    poison(d);
    TEXTRACT(d, s, k.r0, k.c0);
    expect_tile(
        d, k.er, k.ec, [&](int r, int c) { return at(s, k.r0 + r, k.c0 + c); }, 0, 0,
        "r0=" + std::to_string(k.r0) + " c0=" + std::to_string(k.c0));
  }
}

TEST(CpuIsaLayout, InsertPreservesTheRest) {
  for (auto [r0, c0] : {std::pair<int, int>{0, 0}, {3, 5}, {10, 20}, {15, 28}, {20, 0}}) {
    Tile<float, 16, 30> d;
    fill_random(d, 14, 29);
    Tile<float, 16, 30> before = d;
    Tile<float, 8, 12> s;
    fill_random(s, 6, 11);
    TINSERT(d, s, r0, c0);
    EXPECT_EQ(d.vr, 14);
    EXPECT_EQ(d.vc, 29);
    for (int r = 0; r < 16; ++r)
      for (int c = 0; c < 30; ++c) {
        bool in = r >= r0 && r < r0 + 6 && c >= c0 && c < c0 + 11;
        double want = in ? at(s, r - r0, c - c0) : at(before, r, c);
        if (std::isnan(want))
          ASSERT_TRUE(std::isnan(at(d, r, c)));
        else
          ASSERT_EQ(at(d, r, c), want) << r << "," << c << " r0=" << r0 << " c0=" << c0;
      }
  }
}

TEST(CpuIsaLayout, FillPad) {
  Tile<float, 10, 14> s;
  fill_random(s, 7, 9);
  Tile<float, 10, 14> d;
  poison(d);
  TFILLPAD(d, s, -1.5);
  expect_tile(d, 10, 14, [&](int r, int c) { return (r < 7 && c < 9) ? at(s, r, c) : -1.5; }, 0, 0, "copy");
  Tile<float, 10, 14> orig = s;
  TFILLPAD(s, s, 0);  // in place
  expect_tile(
      s, 10, 14, [&](int r, int c) { return (r < 7 && c < 9) ? at(orig, r, c) : 0.0; }, 0, 0, "in place");
  Tile<float, 16, 16> wide;
  poison(wide);
  TFILLPAD(wide, orig, -INFINITY);  // a bigger destination
  expect_tile(
      wide, 16, 16, [&](int r, int c) { return (r < 7 && c < 9) ? at(orig, r, c) : -INFINITY; }, 0, 0,
      "wider");
}

template <class I>
void check_gather_scatter() {
  Tile<float, 10, 24> src;
  fill_random(src, 9, 21);
  Tile<I, 8, 1> idx;
  const I iv[8] = {3, 0, 8, 8, 9 /* out of valid range */, -1, 5, 1};
  for (int i = 0; i < 8; ++i) idx.data[i] = iv[i];
  idx.vr = 7;
  idx.vc = 1;
  Tile<float, 8, 24> d;
  poison(d);
  TGATHER(d, src, idx);
  expect_tile(
      d, 7, 21,
      [&](int r, int c) {
        I i = iv[r];
        return (i >= 0 && i < 9) ? at(src, i, c) : 0.0;  // out of range rows read as zeros
      },
      0);

  Tile<float, 10, 24> dst;
  fill_random(dst, 10, 24);
  Tile<float, 10, 24> before = dst;
  Tile<float, 8, 24> rows;
  fill_random(rows, 6, 20);
  const I sv[8] = {2, 7, 11 /* out of range: skipped */, -3, 0, 9, 4, 4};
  for (int i = 0; i < 8; ++i) idx.data[i] = sv[i];
  idx.vr = 8;
  TSCATTER(dst, rows, idx);
  EXPECT_EQ(dst.vr, 10);
  EXPECT_EQ(dst.vc, 24);
  for (int r = 0; r < 10; ++r)
    for (int c = 0; c < 24; ++c) {
      double want = at(before, r, c);
      for (int k = 0; k < 6; ++k)
        if (sv[k] == r && c < 20) want = at(rows, k, c);
      ASSERT_EQ(at(dst, r, c), want) << r << "," << c;
    }
}

TEST(CpuIsaGather, GatherScatterI32AndI64) {
  check_gather_scatter<int32_t>();
  check_gather_scatter<int64_t>();
}

}  // namespace
