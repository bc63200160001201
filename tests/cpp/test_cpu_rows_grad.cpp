// pto/cpu/rows_grad.hpp, compiled the way kernels are (-O3 -march=native, where the AVX-512 or
// AVX2 paths are taken), with -mavx2 -mfma (the AVX2 paths on any x86-64) and without -march (the
// portable paths): a self-checking program.
// layer_norm_grad_rows computes what its instruction run computes, bit for bit: over several row
// blocks accumulating the column sums, with and without each column sum, a ragged last block,
// odd widths, streaming stores to an unaligned row stride, dx with fewer rows than dy, inf / NaN
// rows, dx added to a gradient summed so far, and the fallbacks (a column-strided view, dx overlapping dy, a
// narrower weight).
#include "gtest/gtest.h"
#include "test_run_capture.h"

namespace {

const char* kBody = R"PTO(
template <int R, int C>
struct Grad {
  using Full = Tile<float, R, C>;
  using Col = Tile<float, R, 1>;
  using RowT = Tile<float, 1, C>;
  Full z, d, a, g, b;
  Col p, q;
  RowT p1, c1, p2, c2;
};

// rows x cols of dy (row stride ld) and xhat; blocks of R rows; dx written to out (row stride
// ldo, dx_rows of each block's rows); cs: which column sums (bit 0: dw, bit 1: db).
template <int R, int C, bool Stream>
static void run(int rows, int cols, int ld, int ldo, int dx_rows_cut, int cs, int kind, int w_cols, bool overlap,
                bool strided, bool adds = false) {
  std::mt19937 rng(rows * 131 + cols * 7 + cs + kind);
  std::uniform_real_distribution<float> u(-3.0f, 3.0f);
  std::vector<float> dy(size_t(rows) * ld + 64), xh(size_t(rows) * C), rr(rows);
  for (auto& v : dy) v = u(rng);
  for (auto& v : xh) v = u(rng);
  for (auto& v : rr) v = 0.5f + 0.25f * u(rng);
  if (kind == 1) dy[size_t(1) * ld + 3] = INFINITY;
  if (kind == 2) xh[size_t(2) * C + 5] = NAN;
  Tile<float, 1, C> w;
  for (int c = 0; c < C; ++c) w.data[c] = u(rng);
  w.vr = 1, w.vc = w_cols;
  alignas(64) static float outbuf[2][64 * 512 + 64];
  std::vector<float> tr(size_t(rows) * cols);  // dy transposed (a column stride)
  for (int r = 0; r < rows; ++r) for (int c = 0; c < cols; ++c) tr[size_t(c) * rows + r] = dy[size_t(r) * ld + c];
  std::vector<float> dys[2] = {dy, dy};
  Grad<R, C> ref, got;
  for (Grad<R, C>* s : {&ref, &got}) {
    for (auto* t : {&s->c1, &s->c2}) {
      for (auto& v : t->data) v = 0.125f;
      t->vr = 1, t->vc = C;
    }
  }
  for (int k = 0; k < 2; ++k) {
    float* out = outbuf[k] + 1;  // one float past a 64-byte boundary
    for (int i = 0; i < 64 * 512 + 63; ++i) out[i] = adds ? 0.001f * float(i % 4001) - 2.0f : -7.0f;
  }
  for (int r0 = 0; r0 < rows; r0 += R) {
    const int vr = rows - r0 < R ? rows - r0 : R;
    const int wrows = vr > dx_rows_cut ? vr - dx_rows_cut : 0;
    for (int k = 0; k < 2; ++k) {
      Grad<R, C>& s = k ? got : ref;
      for (int r = 0; r < vr; ++r) {
        for (int c = 0; c < C; ++c) s.z.data[r * C + c] = xh[size_t(r0 + r) * C + c];
        s.p.data[r] = 1234.0f;
      }
      s.z.vr = vr, s.z.vc = cols;
      Tile<float, R, 1> r1;
      for (int r = 0; r < vr; ++r) r1.data[r] = rr[r0 + r];
      r1.vr = vr, r1.vc = 1;
      std::vector<float>& dyk = overlap ? dys[k] : dy;  // overlapping: each run its own copy
      float* out = (overlap ? dyk.data() : outbuf[k] + 1) + size_t(r0 + (overlap ? 1 : 0)) * ldo;
      auto gdx = gview(out, int64_t(ldo), int64_t(1), int64_t(wrows), int64_t(cols));
      auto gdy = strided ? gview(tr.data() + r0, int64_t(1), int64_t(rows), int64_t(vr), int64_t(cols))
                         : gview(dyk.data() + size_t(r0) * ld, int64_t(ld), int64_t(1), int64_t(vr), int64_t(cols));
      const float n = float(cols);
      Tile<float, R, C> e;
      if (k == 0) {
        TLOAD(s.d, gdy); TMUL(s.a, s.d, s.z); TMUL(s.g, s.d, w); TMUL(s.b, s.g, s.z); TROWSUM(s.p, s.b);
        TDIV(s.p, s.p, n); TMUL(s.z, s.z, s.p); TROWSUM(s.q, s.g); TDIV(s.q, s.q, n); TSUB(s.g, s.g, s.q);
        TSUB(s.g, s.g, s.z); TMUL(s.g, s.g, r1);
        if (adds) TLOAD(e, gdx), TADD(s.g, e, s.g);
        if (Stream) TSTORE(gdx, s.g, kStream); else TSTORE(gdx, s.g);
        if (cs & 1) TCOLSUM(s.p1, s.a), TADD(s.c1, s.c1, s.p1);
        if (cs & 2) TCOLSUM(s.p2, s.d), TADD(s.c2, s.c2, s.p2);
      } else {
        fused::layer_norm_grad_rows<Stream>(gdx, gdy, s.d, s.z, s.a, s.g, s.b, w, s.p, s.q, r1, n, n,
                                            cs & 1 ? &s.p1 : nullptr, cs & 1 ? &s.c1 : nullptr,
                                            cs & 2 ? &s.p2 : nullptr, cs & 2 ? &s.c2 : nullptr,
                                            adds ? gdx : GlobalView<float>{}, adds ? &e : nullptr);
      }
    }
    for (int r = 0; r < vr; ++r) {
      CHECK(same(got.p.data[r], ref.p.data[r]) && same(got.q.data[r], ref.q.data[r]), "p, q row %d (%dx%d of %dx%d)", r0 + r, rows, cols, R, C);
    }
    CHECK(got.p.vr == ref.p.vr && got.g.vr == ref.g.vr && got.g.vc == ref.g.vc && got.d.vr == ref.d.vr,
          "valid regions at block %d", r0);
    if (overlap) break;  // one block compared
  }
  if (overlap)
    for (size_t i = 0; i < dy.size(); ++i) CHECK(same(dys[1][i], dys[0][i]), "dx over dy [%zu]", i);
  if (!overlap)
    for (int i = 0; i < 64 * 512 + 63; ++i)
      CHECK(same(outbuf[1][i + 1], outbuf[0][i + 1]), "dx %dx%d cs %d kind %d: [%d] %a vs %a", rows, cols, cs, kind,
            i, outbuf[1][i + 1], outbuf[0][i + 1]);
  for (int c = 0; c < C; ++c) {
    CHECK(same(got.c1.data[c], ref.c1.data[c]), "dw %dx%d [%d]: %a vs %a", rows, cols, c, got.c1.data[c], ref.c1.data[c]);
    CHECK(same(got.c2.data[c], ref.c2.data[c]), "db [%d]: %a vs %a", c, got.c2.data[c], ref.c2.data[c]);
    CHECK(same(got.p1.data[c], ref.p1.data[c]) || !(cs & 1) || c >= ref.p1.vc, "dw part [%d]", c);
  }
  CHECK(got.c1.vc == ref.c1.vc && got.c2.vc == ref.c2.vc && got.p1.vc == ref.p1.vc, "column sums' valid");
}

int main() {
  for (int kind = 0; kind < 3; ++kind)
    for (int cs = 0; cs < 4; ++cs) {
      run<2, 203, true>(7, 203, 211, 205, 0, cs, kind, 203, false, false);   // ragged last block, odd width
      run<4, 96, false>(16, 96, 96, 96, 0, cs, kind, 96, false, false);
    }
  run<3, 80, true>(9, 77, 80, 81, 1, 3, 0, 80, false, false);   // dx one row short, columns fewer than C
  run<2, 203, false>(7, 203, 211, 205, 0, 3, 0, 203, false, false, true);  // dx added to a sum so far
  run<2, 203, true>(7, 203, 211, 205, 0, 1, 1, 203, false, false, true);
  {  // absent tiles as literal nullptrs, as code generation writes them
    Tile<float, 2, 8> t[6];
    Tile<float, 1, 8> w;
    Tile<float, 2, 1> p, q, r;
    float buf[16] = {};
    auto v = gview(buf, int64_t(8), int64_t(1), int64_t(0), int64_t(8));
    fused::layer_norm_grad_rows<false>(v, v, t[0], t[1], t[2], t[3], t[4], w, p, q, r, 8.0f, 8.0f, nullptr, nullptr,
                                       nullptr, nullptr, GlobalView<float>{}, nullptr);
  }
  run<2, 64, false>(6, 64, 64, 64, 0, 3, 0, 64, false, true, true);  // column-strided dy: the fallback
  run<2, 64, false>(6, 64, 64, 64, 0, 3, 0, 64, false, true);
  run<2, 64, false>(6, 64, 64, 64, 0, 3, 0, 40, false, false);  // a narrower weight: the fallback
  run<2, 64, false>(4, 64, 64, 64, 0, 3, 0, 64, true, false);   // dx one row below dy: the fallback
  if (fails == 0) std::printf("OK\n");
  return fails == 0 ? 0 : 1;
}
)PTO";
const std::string kProgram = std::string(kBitCheckHead) + kBody;

TEST(CpuRowsGrad, LayerNormGradUnderMarchNative) {
  compile_and_run_check(kProgram.c_str(), "-O2 -march=native -fno-math-errno");
}
TEST(CpuRowsGrad, LayerNormGradPortable) { compile_and_run_check(kProgram.c_str(), "-O2 -fno-math-errno"); }
TEST(CpuRowsGrad, LayerNormGradUnderAvx2Fma) { compile_and_run_check_avx2_fma(kProgram.c_str()); }

}  // namespace
