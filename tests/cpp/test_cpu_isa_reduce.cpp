// CPU PTO headers: TROWSUM/MAX/MIN, TCOLSUM/MAX/MIN, TROWEXPAND, TCOLEXPAND. Source padding is
// poisoned (NaN), so a reduction that reads past the valid region fails.
#include "test_cpu_isa_util.hpp"

namespace {
using namespace pto_test;

template <class T, int R, int C>
double ref_reduce(const Tile<T, R, C>& s, bool rows, int idx, int n, int kind) {
  double acc = kind == 0 ? 0.0 : (kind == 1 ? -INFINITY : INFINITY);
  for (int k = 0; k < n; ++k) {
    double x = rows ? at(s, idx, k) : at(s, k, idx);
    if (kind == 0)
      acc += x;
    else if (std::isnan(x) || std::isnan(acc))
      acc = NAN;
    else
      acc = kind == 1 ? std::max(acc, x) : std::min(acc, x);
  }
  return acc;
}
template <class T, int R, int C>
double abs_sum(const Tile<T, R, C>& s, bool rows, int idx, int n) {
  double a = 0;
  for (int k = 0; k < n; ++k) a += std::fabs(rows ? at(s, idx, k) : at(s, k, idx));
  return a;
}

template <class T, int R, int C>
void check_row_reductions(int vr, int vc) {
  SCOPED_TRACE("rows " + std::to_string(R) + "x" + std::to_string(C) + " valid " + std::to_string(vr) + "x" +
               std::to_string(vc));
  Tile<T, R, C> s;
  fill_random(s, vr, vc);
  Tile<T, R, 1> d;
  const double eps = std::is_same_v<T, float> ? 2e-7 : 1e-15;
  poison(d);
  TROWSUM(d, s);
  ASSERT_EQ(d.vr, vr);
  ASSERT_EQ(d.vc, 1);
  for (int r = 0; r < vr; ++r)
    EXPECT_NEAR(at(d, r, 0), ref_reduce(s, true, r, vc, 0), eps * (abs_sum(s, true, r, vc) + 1e-30)) << r;
  poison(d);
  TROWMAX(d, s);
  expect_tile(d, vr, 1, [&](int r, int) { return ref_reduce(s, true, r, vc, 1); }, 0);
  poison(d);
  TROWMIN(d, s);
  expect_tile(d, vr, 1, [&](int r, int) { return ref_reduce(s, true, r, vc, 2); }, 0);
}

template <class T, int R, int C>
void check_col_reductions(int vr, int vc) {
  Tile<T, R, C> s;
  fill_random(s, vr, vc);
  Tile<T, 1, C> d;
  const double eps = std::is_same_v<T, float> ? 2e-7 : 1e-15;
  poison(d);
  TCOLSUM(d, s);
  ASSERT_EQ(d.vr, 1);
  ASSERT_EQ(d.vc, vc);
  for (int c = 0; c < vc; ++c)
    EXPECT_NEAR(at(d, 0, c), ref_reduce(s, false, c, vr, 0), eps * (abs_sum(s, false, c, vr) + 1e-30));
  poison(d);
  TCOLMAX(d, s);
  expect_tile(d, 1, vc, [&](int, int c) { return ref_reduce(s, false, c, vr, 1); }, 0);
  poison(d);
  TCOLMIN(d, s);
  expect_tile(d, 1, vc, [&](int, int c) { return ref_reduce(s, false, c, vr, 2); }, 0);
}

TEST(CpuIsaReduce, RowReductions) {
  check_row_reductions<float, 13, 24>(13, 24);
  check_row_reductions<float, 13, 24>(11, 19);
  check_row_reductions<float, 5, 100>(5, 77);  // lane blocks plus a tail
  check_row_reductions<float, 3, 256>(3, 256);
  check_row_reductions<float, 4, 8>(4, 0);  // empty rows: 0, -inf, +inf
  check_row_reductions<float, 64, 1>(60, 1);
  check_row_reductions<double, 7, 70>(6, 65);
}

TEST(CpuIsaReduce, ColReductions) {
  check_col_reductions<float, 13, 24>(13, 24);
  check_col_reductions<float, 13, 24>(9, 21);
  check_col_reductions<float, 1, 40>(1, 33);
  check_col_reductions<float, 6, 8>(0, 8);
  check_col_reductions<double, 30, 7>(29, 7);
  // Blocks of register accumulators (64 floats, 32 doubles) plus a tail.
  check_col_reductions<float, 5, 150>(3, 131);
  check_col_reductions<float, 4, 128>(4, 128);
  check_col_reductions<double, 9, 100>(7, 97);
  // dst sharing src's storage (a 1-row source): each column block is read before it is written.
  Tile<float, 1, 200> t;
  fill_random(t, 1, 190);
  Tile<float, 1, 200> ref = t;
  TCOLSUM(t, t);
  expect_tile(t, 1, 190, [&](int, int c) { return double(at(ref, 0, c)); }, 0);
}

TEST(CpuIsaReduce, IntegerAndNaN) {
  Tile<int32_t, 6, 40> s;
  fill_random(s, 5, 37, 0, 1000);
  Tile<int32_t, 6, 1> d;
  TROWSUM(d, s);
  expect_tile(d, 5, 1, [&](int r, int) { return ref_reduce(s, true, r, 37, 0); }, 0);
  TROWMAX(d, s);
  expect_tile(d, 5, 1, [&](int r, int) { return ref_reduce(s, true, r, 37, 1); }, 0);
  Tile<int32_t, 1, 40> cd;
  TCOLMIN(cd, s);
  expect_tile(cd, 1, 37, [&](int, int c) { return ref_reduce(s, false, c, 5, 2); }, 0);
  Tile<int32_t, 4, 100> wide;  // a block of 64 columns and a tail, summed into int64
  fill_random(wide, 4, 99, 0, 1000);
  Tile<int64_t, 1, 100> wd;
  TCOLSUM(wd, wide);
  expect_tile(wd, 1, 99, [&](int, int c) { return ref_reduce(wide, false, c, 4, 0); }, 0);

  Tile<float, 2, 50> f;
  fill_random(f);
  f.at(0, 45) = NAN;  // in the tail
  f.at(1, 3) = NAN;   // in the lane block
  Tile<float, 2, 1> m;
  TROWMAX(m, f);
  EXPECT_TRUE(std::isnan(m.data[0]) && std::isnan(m.data[1]));
  TROWMIN(m, f);
  EXPECT_TRUE(std::isnan(m.data[0]) && std::isnan(m.data[1]));
  TROWSUM(m, f);
  EXPECT_TRUE(std::isnan(m.data[0]) && std::isnan(m.data[1]));
  Tile<float, 1, 50> cm;
  TCOLMAX(cm, f);
  EXPECT_TRUE(std::isnan(cm.data[45]) && std::isnan(cm.data[3]));
  EXPECT_FALSE(std::isnan(cm.data[4]));
  Tile<float, 3, 140> g;  // NaN in a full block of register accumulators and in the tail
  fill_random(g);
  g.at(1, 10) = NAN;
  g.at(2, 130) = NAN;
  Tile<float, 1, 140> gm;
  TCOLMIN(gm, g);
  EXPECT_TRUE(std::isnan(gm.data[10]) && std::isnan(gm.data[130]));
  EXPECT_FALSE(std::isnan(gm.data[11]) || std::isnan(gm.data[129]));
}

TEST(CpuIsaExpand, RowAndColExpand) {
  Tile<float, 12, 1> col;
  fill_random(col, 9, 1);
  Tile<float, 12, 20> d;
  poison(d);
  TROWEXPAND(d, col);
  expect_tile(d, 9, 20, [&](int r, int) { return at(col, r, 0); }, 0);
  Tile<float, 1, 20> row;
  fill_random(row, 1, 17);
  poison(d);
  d.vr = 3;
  TCOLEXPAND(d, row);
  expect_tile(d, 12, 17, [&](int, int c) { return at(row, 0, c); }, 0);
  // Conversions and a wider source for TROWEXPAND (column 0 is used).
  Tile<int32_t, 12, 3> icol;
  fill_random(icol, 12, 3);
  Tile<double, 12, 5> dd;
  TROWEXPAND(dd, icol);
  expect_tile(dd, 12, 5, [&](int r, int) { return at(icol, r, 0); }, 0);
  // Softmax-like chain: x - rowmax(x) broadcast via TROWEXPAND and via a column operand agree.
  Tile<float, 8, 32> x, e1, e2, ex;
  fill_random(x, 8, 30);
  Tile<float, 8, 1> mx;
  TROWMAX(mx, x);
  TROWEXPAND(ex, mx);
  TSUB(e1, x, ex);
  TSUB(e2, x, mx);
  expect_tile(e1, 8, 30, [&](int r, int c) { return at(e2, r, c); }, 0);
}

}  // namespace
