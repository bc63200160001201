// pto/cpu/rows_grad.hpp's layer_norm_x_grad_rows (the layer norm's statistics from x, then dx's
// run), compiled as kernels are (-march=native), with -mavx2 -mfma and portably: a self-checking
// program. It computes what TLOAD X; TLOAD c; layer_norm_rows; layer_norm_grad_rows compute (the
// instructions those stand for: tests/cpp/test_cpu_rows.cpp, test_cpu_rows_grad.cpp), bit for
// bit: several row blocks accumulating the column sums, with and without each, a ragged last
// block, odd widths, streaming stores to an unaligned row stride, dx with fewer rows, inf / NaN
// in x, dx added to a sum so far, dx written over x row for row; and the fallbacks (x column-
// strided, dx one row below x, x's view narrower than dy's).
#include "gtest/gtest.h"
#include "test_run_capture.h"

namespace {

const char* kBody = R"PTO(
template <int R, int C>
struct State {
  Tile<float, R, C> x, z, d, a, g, b, e;
  Tile<float, R, 1> c, u, r, p, q;
  Tile<float, 1, C> p1, c1, p2, c2;
};

enum Layout { kPlain, kInPlace, kStrided, kBelow, kNarrow };

// rows x cols of x and dy (row stride ld); dx (row stride ldo; dx_cut rows short per block);
// cs: which column sums (bit 0: dw, bit 1: db); kind 1: an inf in x, 2: a NaN.
template <int R, int C, bool Stream>
static void run(int rows, int cols, int ld, int ldo, int dx_cut, int cs, int kind, Layout lay, bool adds = false) {
  std::mt19937 rng(rows * 131 + cols * 7 + cs * 3 + kind + lay * 17);
  std::uniform_real_distribution<float> u(-3.0f, 3.0f);
  std::vector<float> x(size_t(rows + 2) * ld + 64), dy(size_t(rows) * ld + 64);
  for (auto& v : x) v = u(rng) + 2.0f;
  for (auto& v : dy) v = u(rng);
  if (kind == 1) x[size_t(1) * ld + 3] = INFINITY;
  if (kind == 2) x[size_t(2) * ld + 5] = NAN;
  std::vector<float> xt(size_t(cols) * rows);  // x transposed (a column stride)
  for (int r = 0; r < rows; ++r) for (int c = 0; c < cols; ++c) xt[size_t(c) * rows + r] = x[size_t(r) * ld + c];
  Tile<float, 1, C> w;
  for (int c = 0; c < C; ++c) w.data[c] = u(rng);
  w.vr = 1, w.vc = cols;
  const bool over = lay == kInPlace || lay == kBelow;  // dx written into (a copy of) x
  std::vector<float> xs[2] = {x, x}, outs[2];
  for (auto& o : outs) {
    o.assign(size_t(rows + 1) * ldo + 64, 0.0f);
    for (size_t i = 0; i < o.size(); ++i) o[i] = adds ? 0.001f * float(i % 4001) - 2.0f : -7.0f;
  }
  State<R, C> st[2];
  for (auto& s : st)
    for (auto* t : {&s.c1, &s.c2}) {
      for (auto& v : t->data) v = 0.125f;
      t->vr = 1, t->vc = C;
    }
  for (int r0 = 0; r0 < rows; r0 += R) {
    const int vr = rows - r0 < R ? rows - r0 : R;
    const int wrows = vr > dx_cut ? vr - dx_cut : 0;
    for (int k = 0; k < 2; ++k) {
      State<R, C>& s = st[k];
      for (int i = 0; i < R; ++i) s.p.data[i] = s.r.data[i] = 1234.0f;
      float* xk = (over ? xs[k].data() : x.data()) + size_t(r0) * ld;
      float* out = over ? xs[k].data() + size_t(r0 + (lay == kBelow ? 1 : 0)) * ld : outs[k].data() + 1 + size_t(r0) * ldo;
      const int64_t ro = over ? ld : ldo;
      auto gdx = gview(out, ro, int64_t(1), int64_t(wrows), int64_t(cols));
      auto gdy = gview(dy.data() + size_t(r0) * ld, int64_t(ld), int64_t(1), int64_t(vr), int64_t(cols));
      auto gx = lay == kStrided ? gview(xt.data() + r0, int64_t(1), int64_t(rows), int64_t(vr), int64_t(cols))
                                : gview(xk, int64_t(ld), int64_t(1), int64_t(vr), int64_t(lay == kNarrow ? cols - 3 : cols));
      auto gc = lay == kStrided ? gview(xt.data() + r0, int64_t(1), int64_t(rows), int64_t(vr), int64_t(1))
                                : gview(xk, int64_t(ld), int64_t(1), int64_t(vr), int64_t(1));
      const float n = float(cols), eps = 1e-5f;
      auto* P1 = cs & 1 ? &s.p1 : nullptr;
      auto* C1 = cs & 1 ? &s.c1 : nullptr;
      auto* P2 = cs & 2 ? &s.p2 : nullptr;
      auto* C2 = cs & 2 ? &s.c2 : nullptr;
      GlobalView<float> gadd = adds ? gdx : GlobalView<float>{};
      if (k == 0) {  // the instructions
        TLOAD(s.x, gx); TLOAD(s.c, gc);
        Tile<float, R, C> y;
        TSUB(s.z, s.x, s.c); TROWSUM(s.u, s.z); TDIV(s.u, s.u, n); TSUB(s.z, s.z, s.u); TMUL(y, s.z, s.z);
        TROWSUM(s.r, y); TDIV(s.r, s.r, n); TADD(s.r, s.r, eps); TRSQRT(s.r, s.r); TMUL(s.z, s.z, s.r);
        TLOAD(s.d, gdy); TMUL(s.a, s.d, s.z); TMUL(s.g, s.d, w); TMUL(s.b, s.g, s.z); TROWSUM(s.p, s.b);
        TDIV(s.p, s.p, n); TMUL(s.z, s.z, s.p); TROWSUM(s.q, s.g); TDIV(s.q, s.q, n); TSUB(s.g, s.g, s.q);
        TSUB(s.g, s.g, s.z); TMUL(s.g, s.g, s.r);
        if (adds) TLOAD(s.e, gadd), TADD(s.g, s.e, s.g);
        if (Stream) TSTORE(gdx, s.g, kStream); else TSTORE(gdx, s.g);
        if (P1) TCOLSUM(*P1, s.a), TADD(*C1, *C1, *P1);
        if (P2) TCOLSUM(*P2, s.d), TADD(*C2, *C2, *P2);
      } else {
        fused::layer_norm_x_grad_rows<Stream>(gdx, gdy, s.d, s.z, s.a, s.g, s.b, w, s.p, s.q, s.r, n, n, P1, C1, P2,
                                              C2, gadd, adds ? &s.e : nullptr, gx, gc, s.x, s.c, s.u, n, n, eps);
      }
    }
    for (int i = 0; i < vr; ++i)
      CHECK(same(st[1].p.data[i], st[0].p.data[i]) && same(st[1].q.data[i], st[0].q.data[i]) &&
            same(st[1].u.data[i], st[0].u.data[i]) && same(st[1].r.data[i], st[0].r.data[i]),
            "p, q, mean, rstd row %d (%dx%d of %dx%d, layout %d)", r0 + i, rows, cols, R, C, int(lay));
    CHECK(st[1].u.vr == st[0].u.vr && st[1].r.vr == st[0].r.vr && st[1].x.vr == st[0].x.vr &&
          st[1].x.vc == st[0].x.vc && st[1].g.vr == st[0].g.vr && st[1].c.vr == st[0].c.vr,
          "valid regions at block %d", r0);
  }
  const std::vector<float>& got = over ? xs[1] : outs[1];
  const std::vector<float>& want = over ? xs[0] : outs[0];
  for (size_t i = 0; i < got.size(); ++i)
    CHECK(same(got[i], want[i]), "dx %dx%d cs %d kind %d layout %d: [%zu] %a vs %a", rows, cols, cs, kind, int(lay), i,
          got[i], want[i]);
  for (int c = 0; c < C; ++c) {
    CHECK(same(st[1].c1.data[c], st[0].c1.data[c]), "dw %dx%d [%d]: %a vs %a", rows, cols, c, st[1].c1.data[c],
          st[0].c1.data[c]);
    CHECK(same(st[1].c2.data[c], st[0].c2.data[c]), "db [%d]", c);
  }
}

int main() {
  for (int kind = 0; kind < 3; ++kind)
    for (int cs = 0; cs < 4; ++cs) {
      run<2, 203, true>(7, 203, 211, 205, 0, cs, kind, kPlain);  // ragged last block, odd width
      run<4, 96, false>(16, 96, 96, 96, 0, cs, kind, kPlain);
    }
  run<3, 80, true>(9, 77, 80, 81, 1, 3, 0, kPlain);           // dx one row short, columns fewer than C
  run<2, 203, false>(7, 203, 211, 205, 0, 3, 0, kPlain, true);  // dx added to a sum so far
  run<2, 203, true>(7, 203, 211, 205, 0, 1, 1, kPlain, true);
  run<2, 64, true>(6, 64, 64, 64, 0, 3, 0, kInPlace);  // dx over x, row for row
  run<2, 64, false>(6, 64, 64, 64, 0, 3, 0, kStrided);  // the fallbacks
  run<2, 64, false>(6, 64, 64, 64, 0, 3, 0, kBelow);
  run<2, 64, false>(6, 64, 64, 64, 0, 3, 0, kNarrow);
  if (fails == 0) std::printf("OK\n");
  return fails == 0 ? 0 : 1;
}
)PTO";
const std::string kProgram = std::string(kBitCheckHead) + kBody;

TEST(CpuRowsGradX, LayerNormXGradUnderMarchNative) {
  compile_and_run_check(kProgram.c_str(), "-O2 -march=native -fno-math-errno");
}
TEST(CpuRowsGradX, LayerNormXGradPortable) { compile_and_run_check(kProgram.c_str(), "-O2 -fno-math-errno"); }
TEST(CpuRowsGradX, LayerNormXGradUnderAvx2Fma) { compile_and_run_check_avx2_fma(kProgram.c_str()); }

}  // namespace
