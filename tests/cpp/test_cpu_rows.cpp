// pto/cpu/vexp.hpp and pto/cpu/rows.hpp, compiled the way kernels are (-O3 -march=native, where
// the AVX-512 or AVX2 paths are taken), with -mavx2 -mfma (the AVX2 paths on any x86-64) and
// without -march (the portable paths): a self-checking program.
// - exp_span equals math::exp (the element semantics) bit for bit, on a sweep of the float range
//   with the special values, and is within 2 ulp of double-precision exp on the normal range;
// - gelu_span, tanh_span, sigmoid_span and silu_span (vactivation.hpp) equal math::'s functions
//   bit for bit on such a sweep, their range edges and a dense grid where their formulas meet;
// - each fused row function (softmax also after a scale) computes what its instruction sequence computes
// (tile form and
//   global form, partial valid regions, odd widths, a strided view, inf / NaN rows);
// - binary_rows and gather_rows (gather.hpp) equal the instructions they stand for;
// - row maxima / minima (vmaxps / vminps where a row has no NaN) follow TROWMAX / TROWMIN's rule
//   bit for bit, and reduce_rows equals TLOAD then the reduction.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "backends/cpu/compiler.h"
#include "gtest/gtest.h"
#include "test_run_capture.h"

namespace {

const char* kBody = R"PTO(
#include <cmath>
static bool close(float a, float b, float tol) {
  if (a != a || b != b) return a != a && b != b;
  if (a == b) return true;
  return std::fabs(double(a) - double(b)) <= tol * std::fmax(std::fabs(double(b)), 1e-30);
}

static void exp_checks() {
  std::vector<float> x;
  const float specials[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, -NAN, 88.72f, 88.73f, 88.8f, 89.0f, 1e30f,
                            -87.33f, -87.34f, -103.97f, -103.98f, -104.0f, -105.0f, -1e30f, 1e-40f, -1e-40f};
  for (float s : specials) x.push_back(s);
  for (uint64_t b = 0; b < (1ull << 32); b += 4099) x.push_back(bit_cast<float>(uint32_t(b)));
  std::vector<float> y(x.size());
  detail::exp_span(y.data(), x.data(), int64_t(x.size()));
  double worst = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    CHECK(same(y[i], math::exp(x[i])), "exp(%a): %a, math::exp %a", x[i], y[i], math::exp(x[i]));
    const double ref = std::exp(double(x[i]));
    if (std::fabs(x[i]) < 87.0f) {
      const double ulp = std::ldexp(1.0, std::ilogb(ref) - 23);
      worst = std::fmax(worst, std::fabs(double(y[i]) - ref) / ulp);
    }
  }
  CHECK(y[2] == INFINITY && y[3] == 0.0f && y[4] != y[4] && y[0] == 1.0f, "exp specials");
  CHECK(worst <= 2.0, "exp: %.2f ulp from double", worst);
#ifdef PTO_VF16
  // Without its clamps (a softmax's exponents): the same bits wherever x <= 0 or NaN.
  std::vector<float> np;
  for (float v : x)
    if (!(v > 0.0f)) np.push_back(v);
  while (np.size() % 16) np.push_back(-1.0f);
  for (size_t i = 0; i < np.size(); i += 16) {
    const detail::vf16 e = detail::vexp16<true>(detail::vf16_load(np.data() + i));
    for (int j = 0; j < 16; ++j)
      CHECK(same(e[j], math::exp(np[i + j])), "vexp16<true>(%a): %a, math::exp %a", np[i + j], e[j], math::exp(np[i + j]));
  }
#endif
}

template <class Span, class Ref>
static void activation_checks(const char* name, Span span, Ref ref) {
  std::vector<float> x;
  const float specials[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, -NAN, 16.0f, -16.0f, 16.0001f, -16.0001f,
                            15.0f, -15.0f, 15.0001f, -15.0001f, 1.4142135f, -1.4142135f, 1.4142137f,
                            -1.4142137f, 14.849242f, -14.849242f, 0.625f, -0.625f, 0.62499994f, -0.62499994f,
                            200.0f, -200.0f, -200.00002f, 88.0f, -88.0f, 1e30f, -1e30f, 1e-40f, -1e-40f};
  for (float s : specials) x.push_back(s);
  for (uint64_t b = 0; b < (1ull << 32); b += 4099) x.push_back(bit_cast<float>(uint32_t(b)));
  for (int i = 0; i <= 200001; ++i) x.push_back(-8.0f + 16.0f * float(i) / 200000.0f);  // odd count: a tail
  std::vector<float> y(x.size());
  span(y.data(), x.data(), int64_t(x.size()));
  for (size_t i = 0; i < x.size(); ++i)
    CHECK(same(y[i], ref(x[i])), "%s(%a): %a, math:: %a", name, x[i], y[i], ref(x[i]));
}
static void activations_checks() {
  activation_checks("gelu", detail::gelu_span, [](float v) { return math::gelu(v); });
  activation_checks("tanh", detail::tanh_span, [](float v) { return math::tanh(v); });
  activation_checks("sigmoid", detail::sigmoid_span, [](float v) { return math::sigmoid(v); });
  activation_checks("silu", detail::silu_span, [](float v) { return math::silu(v); });
  std::vector<float> s = {INFINITY, -INFINITY, NAN, -0.0f}, y(4);
  detail::gelu_span(y.data(), s.data(), 4);
  CHECK(y[0] == INFINITY && same(y[1], -0.0f) && y[2] != y[2] && same(y[3], -0.0f), "gelu specials");
  detail::silu_span(y.data(), s.data(), 4);
  CHECK(y[0] == INFINITY && same(y[1], -0.0f) && y[2] != y[2], "silu specials");
  detail::tanh_span(y.data(), s.data(), 4);
  CHECK(y[0] == 1.0f && y[1] == -1.0f && y[2] != y[2] && same(y[3], -0.0f), "tanh specials");
}

constexpr int R = 3, C = 203;  // odd width: blocks of 32 and 16 and a tail
using Full = Tile<float, R, C>;
using Col = Tile<float, R, 1>;
using RowT = Tile<float, 1, C>;
static std::mt19937 rng(11);
static void fill(Full& x, int vr, int vc, int row_kind) {
  std::uniform_real_distribution<float> u(-30.0f, 30.0f);
  for (auto& v : x.data) v = u(rng);
  if (row_kind == 1) x.data[C + 7] = INFINITY;    // row 1: an inf
  if (row_kind == 2) x.data[2 * C + 5] = NAN;     // row 2: a NaN
  if (row_kind == 3) for (int c = 0; c < C; ++c) x.data[c] = -INFINITY;
  if (row_kind == 4) for (int c = 0; c < C; ++c) x.data[c] = 3.3f, x.data[C + c] += -1234.5f;  // equal; offset
  if (row_kind == 5)  // maxima of 0 whose sign depends on the order: +0 and -0 among negatives, before the tail
    for (int r = 0; r < 2; ++r)
      for (int c = 0; c < C; ++c) {
        const float neg = -std::fabs(x.data[r * C + c]);
        x.data[r * C + c] = c >= 32 ? neg : (c < 16) == (r == 0) ? 0.0f : -0.0f;  // row 0: -0, row 1: +0
      }
  x.vr = vr;
  x.vc = vc;
}
static void expect_same_tile(const Full& a, const Full& b, float tol, const char* what) {
  CHECK(a.vr == b.vr && a.vc == b.vc, "%s: valid %dx%d vs %dx%d", what, a.vr, a.vc, b.vr, b.vc);
  for (int r = 0; r < a.vr; ++r)
    for (int c = 0; c < a.vc; ++c)
      CHECK(close(a.data[r * C + c], b.data[r * C + c], tol), "%s [%d,%d]: %a vs %a", what, r, c,
            a.data[r * C + c], b.data[r * C + c]);
}
static void expect_same_col(const Col& a, const Col& b, float tol, const char* what) {
  CHECK(a.vr == b.vr, "%s: rows %d vs %d", what, a.vr, b.vr);
  for (int r = 0; r < a.vr; ++r) CHECK(close(a.data[r], b.data[r], tol), "%s [%d]: %a vs %a", what, r, a.data[r], b.data[r]);
}

static void softmax_checks(int vr, int vc, int kind) {
  Full x, e, e2; Col m, s, m2, s2;
  fill(x, vr, vc, kind);
  TROWMAX(m, x); TSUB(e, x, m); TEXP(e, e); TROWSUM(s, e); TRECIP(s, s); TMUL(e, e, s);
  fused::softmax_rows(e2, x, m2, s2);
  expect_same_tile(e2, e, 0.0f, "softmax");
  expect_same_col(m2, m, 0.0f, "softmax max");
  for (int r = 0; r < vr; ++r) CHECK(same(m2.data[r], m.data[r]), "softmax max bits [%d]: %a vs %a", r, m2.data[r], m.data[r]);
  expect_same_col(s2, s, 0.0f, "softmax 1/sum");
  // Global form, from a buffer with a row stride, into a view with one row fewer.
  std::vector<float> in(R * (C + 5)), out(R * (C + 3), -7.0f);
  for (int r = 0; r < R; ++r) for (int c = 0; c < C; ++c) in[r * (C + 5) + c] = x.data[r * C + c];
  Full xg, eg; Col mg, sg;
  fused::softmax_rows<true>(gview(out.data(), int64_t(C + 3), int64_t(1), int64_t(vr - 1), int64_t(vc)),
                            gview(in.data(), int64_t(C + 5), int64_t(1), int64_t(vr), int64_t(vc)), xg, eg, mg, sg);
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C + 3; ++c) {
      const float want = r < vr - 1 && c < vc ? e.data[r * C + c] : -7.0f;
      CHECK(same(out[r * (C + 3) + c], want), "softmax global [%d,%d]: %a vs %a", r, c, out[r * (C + 3) + c], want);
    }
  expect_same_col(mg, m, 0.0f, "softmax global max");
  // Every row stored: the rows overlapped (rows_piped), here in place and streaming, one float past a
  // 64-byte boundary (each row's stores start after a head of single floats).
  alignas(64) static float io[R * C + 16];
  float* p = io + 1;
  for (int i = 0; i < R * C; ++i) p[i] = x.data[i];
  fused::softmax_rows<true>(gview(p, int64_t(C), int64_t(1), int64_t(vr), int64_t(vc)),
                            gview(p, int64_t(C), int64_t(1), int64_t(vr), int64_t(vc)), xg, eg, mg, sg);
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) {
      const float want = r < vr && c < vc ? e.data[r * C + c] : x.data[r * C + c];
      CHECK(same(p[r * C + c], want), "softmax in place [%d,%d]: %a vs %a", r, c, p[r * C + c], want);
    }
  expect_same_col(mg, m, 0.0f, "softmax in place max");
  expect_same_col(sg, s, 0.0f, "softmax in place 1/sum");
  // In place over rows that overlap one another (a row stride shorter than the row): every row
  // is read before any is written, as TLOAD, the sequence, TSTORE.
  if (vr > 1 && vc > 8) {
    const int64_t rs = vc / 2;
    std::vector<float> buf(size_t(rs * (vr - 1) + vc)), ref;
    for (size_t i = 0; i < buf.size(); ++i) buf[i] = x.data[i % (R * C)];
    ref = buf;
    Full xl, el;
    Col ml, sl;
    TLOAD(xl, gview(ref.data(), rs, int64_t(1), int64_t(vr), int64_t(vc)));
    TROWMAX(ml, xl); TSUB(el, xl, ml); TEXP(el, el); TROWSUM(sl, el); TRECIP(sl, sl); TMUL(el, el, sl);
    TSTORE(gview(ref.data(), rs, int64_t(1), int64_t(vr), int64_t(vc)), el);
    fused::softmax_rows<false>(gview(buf.data(), rs, int64_t(1), int64_t(vr), int64_t(vc)),
                               gview(buf.data(), rs, int64_t(1), int64_t(vr), int64_t(vc)), xg, eg, mg, sg);
    for (size_t i = 0; i < buf.size(); ++i) CHECK(same(buf[i], ref[i]), "softmax over overlapping rows [%zu]", i);
  }
  // A view with a column stride: the instructions as written.
  std::vector<float> tr(C * R), out2(R * C, -7.0f);
  for (int r = 0; r < R; ++r) for (int c = 0; c < C; ++c) tr[c * R + r] = x.data[r * C + c];
  fused::softmax_rows<false>(gview(out2.data(), int64_t(C), int64_t(1), int64_t(vr), int64_t(vc)),
                             gview(tr.data(), int64_t(1), int64_t(R), int64_t(vr), int64_t(vc)), xg, eg, mg, sg);
  for (int r = 0; r < vr; ++r)
    for (int c = 0; c < vc; ++c) CHECK(same(out2[r * C + c], e.data[r * C + c]), "softmax strided [%d,%d]", r, c);
}

// The softmax after the scores' scale (mul_softmax_rows / div_softmax_rows): a power-of-two
// divisor (taken as a product), another divisor, two factors; tile form (also in place, as the
// attention's scores) and global form. Row 0 of kind 0 holds subnormal-making values.
static void log_softmax_checks(int vr, int vc, int kind) {
  Full x, y, e, y2;
  Col m, s, m2, s2;
  fill(x, vr, vc, kind);
  TROWMAX(m, x); TSUB(y, x, m); TEXP(e, y); TROWSUM(s, e); TLOG(s, s); TSUB(y, y, s);
  fused::log_softmax_rows(y2, x, m2, s2);
  expect_same_tile(y2, y, 0.0f, "log_softmax");
  for (int r = 0; r < vr; ++r)
    CHECK(same(m2.data[r], m.data[r]) && same(s2.data[r], s.data[r]), "log_softmax max / log-sum [%d]", r);
  // Global form, from a buffer with a row stride, streaming into a view one float past a 64-byte
  // boundary; and in place.
  std::vector<float> in(R * (C + 5));
  for (int r = 0; r < R; ++r) for (int c = 0; c < C; ++c) in[r * (C + 5) + c] = x.data[r * C + c];
  alignas(64) static float out[R * C + 16];
  for (int stream = 0; stream < 2; ++stream)
    for (int inplace = 0; inplace < 2; ++inplace) {
      float* o = out + 1;
      for (int i = 0; i < R * C; ++i) o[i] = inplace ? x.data[i] : -7.0f;
      Full xg, yg;
      Col mg, sg;
      auto ov = gview(o, int64_t(C), int64_t(1), int64_t(vr), int64_t(vc));
      auto iv = inplace ? ov : gview(in.data(), int64_t(C + 5), int64_t(1), int64_t(vr), int64_t(vc));
      if (stream) fused::log_softmax_rows<true>(ov, iv, xg, yg, mg, sg);
      else fused::log_softmax_rows<false>(ov, iv, xg, yg, mg, sg);
      for (int r = 0; r < R; ++r)
        for (int c = 0; c < C; ++c) {
          const float want = r < vr && c < vc ? y.data[r * C + c] : (inplace ? x.data[r * C + c] : -7.0f);
          CHECK(same(o[r * C + c], want), "log_softmax global (stream %d, in place %d) [%d,%d]: %a vs %a", stream,
                inplace, r, c, o[r * C + c], want);
        }
    }
}

static void scaled_softmax_checks(int vr, int vc, int kind) {
  const float scales[] = {8.0f, 11.3137085f, 0.125f, 0.0883883476f};
  for (int k = 0; k < 4; ++k) {
    const bool div = k < 2;
    const float f = scales[k];
    Full x, y, e, e2, e3; Col m, s, m2, s2;
    fill(x, vr, vc, kind);
    if (kind == 0)
      for (int c = 0; c < C; ++c) x.data[c] *= 1e-38f;
    if (div) TDIV(y, x, f); else TMUL(y, x, f);
    TROWMAX(m, y); TSUB(e, y, m); TEXP(e, e); TROWSUM(s, e); TRECIP(s, s); TMUL(e, e, s);
    if (div) fused::div_softmax_rows(e2, x, m2, s2, f); else fused::mul_softmax_rows(e2, x, m2, s2, f);
    expect_same_tile(e2, e, 0.0f, div ? "div_softmax" : "mul_softmax");
    expect_same_col(m2, m, 0.0f, "scaled softmax max");
    expect_same_col(s2, s, 0.0f, "scaled softmax 1/sum");
    e3 = x;  // in place
    if (div) fused::div_softmax_rows(e3, e3, m2, s2, f); else fused::mul_softmax_rows(e3, e3, m2, s2, f);
    expect_same_tile(e3, e, 0.0f, "scaled softmax in place");
    std::vector<float> in(R * C), out(R * C, -7.0f);
    for (int i = 0; i < R * C; ++i) in[i] = x.data[i];
    Full xg, eg; Col mg, sg;
    auto o = gview(out.data(), int64_t(C), int64_t(1), int64_t(vr), int64_t(vc));
    auto g = gview(in.data(), int64_t(C), int64_t(1), int64_t(vr), int64_t(vc));
    if (div) fused::div_softmax_rows<true>(o, g, xg, eg, mg, sg, f); else fused::mul_softmax_rows<true>(o, g, xg, eg, mg, sg, f);
    for (int r = 0; r < vr; ++r)
      for (int c = 0; c < vc; ++c) CHECK(same(out[r * C + c], e.data[r * C + c]), "scaled softmax global [%d,%d]", r, c);
  }
}

static void norm_checks(int vr, int vc, int kind, bool use_w, bool use_b) {
  Full x, y, z, z2; Col r1, u, r2, u2; RowT w, b;
  fill(x, vr, vc, kind);
  for (int c = 0; c < C; ++c) w.data[c] = 0.5f + 0.01f * c, b.data[c] = 0.25f - 0.003f * c;
  const float n = float(vc), eps = 1e-5f;
  // RMS norm.
  TMUL(y, x, x); TROWSUM(r1, y); TDIV(r1, r1, n); TADD(r1, r1, eps); TRSQRT(r1, r1); TMUL(z, x, r1);
  if (use_w) TMUL(z, z, w);
  if (use_b) TADD(z, z, b);
  fused::rms_norm_rows(z2, x, r2, n, eps, use_w ? w.data : nullptr, use_b ? b.data : nullptr);
  expect_same_tile(z2, z, 0.0f, "rms_norm");
  expect_same_col(r2, r1, 0.0f, "rms_norm rsqrt");
  // Layer norm, shifted by each row's first element (lower_composites.cpp `centred`).
  Col c0;
  TEXTRACT(c0, x, 0, 0);
  TSUB(z, x, c0); TROWSUM(u, z); TDIV(u, u, n); TSUB(z, z, u); TMUL(y, z, z); TROWSUM(r1, y); TDIV(r1, r1, n);
  TADD(r1, r1, eps); TRSQRT(r1, r1); TMUL(z, z, r1);
  if (kind == 4)
    for (int c = 0; c < vc; ++c) CHECK(z.data[c] == 0.0f, "layer_norm of equal values [0,%d]: %a", c, z.data[c]);
  if (use_w) TMUL(z, z, w);
  if (use_b) TADD(z, z, b);
  fused::layer_norm_rows(z2, x, c0, u2, r2, n, n, eps, use_w ? w.data : nullptr, use_b ? b.data : nullptr);
  expect_same_tile(z2, z, 0.0f, "layer_norm");
  expect_same_col(u2, u, 0.0f, "layer_norm mean");
  expect_same_col(r2, r1, 0.0f, "layer_norm rsqrt");
  std::vector<float> out(R * C, -7.0f), in(x.data, x.data + R * C);
  Full xg, zg; Col ug, rg;
  fused::layer_norm_rows<true>(gview(out.data(), int64_t(C), int64_t(1), int64_t(vr), int64_t(vc)),
                               gview(in.data(), int64_t(C), int64_t(1), int64_t(vr), int64_t(vc)), xg, zg, c0, ug, rg, n, n,
                               eps, use_w ? w.data : nullptr, use_b ? b.data : nullptr);
  for (int r = 0; r < vr; ++r)
    for (int c = 0; c < vc; ++c) CHECK(same(out[r * C + c], z2.data[r * C + c]), "layer_norm global [%d,%d]", r, c);
  // Layer norm in place, streaming, one float past a 64-byte boundary (rows overlapped).
  {
    alignas(64) static float ln_io[R * C + 16];
    float* q = ln_io + 1;
    for (int i = 0; i < R * C; ++i) q[i] = x.data[i];
    fused::layer_norm_rows<true>(gview(q, int64_t(C), int64_t(1), int64_t(vr), int64_t(vc)),
                                 gview(q, int64_t(C), int64_t(1), int64_t(vr), int64_t(vc)), xg, zg, c0, ug, rg, n, n,
                                 eps, use_w ? w.data : nullptr, use_b ? b.data : nullptr);
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < C; ++c) {
        const float want = r < vr && c < vc ? z2.data[r * C + c] : x.data[r * C + c];
        CHECK(same(q[r * C + c], want), "layer_norm in place [%d,%d]: %a vs %a", r, c, q[r * C + c], want);
      }
    expect_same_col(ug, u, 0.0f, "layer_norm in place mean");
    expect_same_col(rg, r1, 0.0f, "layer_norm in place rsqrt");
  }
  // RMS norm in place, streaming, at an address one float past a 64-byte boundary (the streaming
  // stores start after a head of single floats).
  alignas(64) static float io[R * C + 16];
  float* p = io + 1;
  for (int i = 0; i < R * C; ++i) p[i] = x.data[i];
  fused::rms_norm_rows(z2, x, r2, n, eps, use_w ? w.data : nullptr, use_b ? b.data : nullptr);
  fused::rms_norm_rows<true>(gview(p, int64_t(C), int64_t(1), int64_t(vr), int64_t(vc)),
                             gview(p, int64_t(C), int64_t(1), int64_t(vr), int64_t(vc)), xg, zg, rg, n, eps,
                             use_w ? w.data : nullptr, use_b ? b.data : nullptr);
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) {
      const float want = r < vr && c < vc ? z2.data[r * C + c] : x.data[r * C + c];
      CHECK(same(p[r * C + c], want), "rms_norm in place [%d,%d]: %a vs %a", r, c, p[r * C + c], want);
    }
  expect_same_col(rg, r2, 0.0f, "rms_norm global rsqrt");
}

// binary_rows against TLOAD, TLOAD, TSUB, TSTORE; an output overlapping a source one row down
// (the call must read every source row before writing over it: it takes the three steps then).
static void binary_checks() {
  std::vector<float> buf(8 * C), ref;
  std::uniform_real_distribution<float> u(-3.0f, 3.0f);
  for (auto& v : buf) v = u(rng);
  ref = buf;
  Full a, b, y;
  auto gv = [](float* p, int rows, int cols) { return gview(p, int64_t(C), int64_t(1), int64_t(rows), int64_t(cols)); };
  TLOAD(a, gv(ref.data(), R, C - 1));
  TLOAD(b, gv(ref.data() + 4 * C, R, C - 1));
  TSUB(y, a, b);
  TSTORE(gv(ref.data() + C, R, C - 1), y);
  Full a2, b2, y2;
  fused::binary_rows<false>(gv(buf.data() + C, R, C - 1), gv(buf.data(), R, C - 1), gv(buf.data() + 4 * C, R, C - 1),
                            a2, b2, y2, pto::detail::OpSub{});
  for (size_t i = 0; i < buf.size(); ++i) CHECK(same(buf[i], ref[i]), "binary overlapping [%zu]: %a vs %a", i, buf[i], ref[i]);
  std::vector<float> out(R * C, -7.0f);
  fused::binary_rows<true>(gv(out.data(), R, C), gv(buf.data(), R, C), gv(buf.data() + 4 * C, R, C), a2, b2, y2,
                           pto::detail::OpMax{});
  for (int i = 0; i < R * C; ++i) CHECK(same(out[i], elem::max(buf[i], buf[4 * C + i])), "binary max [%d]", i);
  // Streaming, the four arithmetic operators (16 lanes at a time) into an output one float past a
  // 64-byte boundary (a head of single floats first), inf / NaN / denormal operands included.
  alignas(64) static float o2[R * C + 16];
  buf[3] = INFINITY, buf[4 * C + 3] = INFINITY, buf[5] = NAN, buf[40] = 1e-40f, buf[4 * C + 41] = 0.0f;
  auto check_op = [&](auto op, auto ref, const char* what) {
    fused::binary_rows<true>(gview(o2 + 1, int64_t(C), int64_t(1), int64_t(R), int64_t(C)), gv(buf.data(), R, C),
                             gv(buf.data() + 4 * C, R, C), a2, b2, y2, op);
    for (int i = 0; i < R * C; ++i) CHECK(same(o2[1 + i], ref(buf[i], buf[4 * C + i])), "binary %s [%d]", what, i);
  };
  check_op(pto::detail::OpAdd{}, [](float p, float q) { return elem::add(p, q); }, "add");
  check_op(pto::detail::OpSub{}, [](float p, float q) { return elem::sub(p, q); }, "sub");
  check_op(pto::detail::OpMul{}, [](float p, float q) { return elem::mul(p, q); }, "mul");
  check_op(pto::detail::OpDiv{}, [](float p, float q) { return elem::div(p, q); }, "div");
  check_op(pto::detail::OpMin{}, [](float p, float q) { return elem::min(p, q); }, "min");
}


// gather_rows against MGATHER, TSTORE: in range and out of range indices (reported, zero rows),
// an output view with fewer rows and columns, streaming to an unaligned row stride, and an output
// inside the table (the two instructions as written).
// TROWMAX / TROWMIN's rule over 32 lanes, combined pairwise, then the tail: what reduce_span's
// vector form (vmaxps / vminps where no NaN) must give bit for bit.
template <bool Max>
static float extreme_rule(const float* p, int64_t n) {
  auto op = [](float a, float b) { return Max ? ((a > b || a != a) ? a : b) : ((a < b || a != a) ? a : b); };
  const float init = Max ? -INFINITY : INFINITY;
  float acc[32], tail = init;
  for (float& a : acc) a = init;
  int64_t i = 0;
  for (; i + 32 <= n; i += 32)
    for (int j = 0; j < 32; ++j) acc[j] = op(acc[j], p[i + j]);
  for (; i < n; ++i) tail = op(tail, p[i]);
  for (int w = 16; w >= 1; w /= 2)
    for (int j = 0; j < w; ++j) acc[j] = op(acc[j], acc[j + w]);
  return op(acc[0], tail);
}
template <template <class> class Red>
static void reduce_rows_check(GlobalView<float> v, const char* what) {
  Full t, t2;
  Col want, got;
  TLOAD(t, v);
  detail::row_reduce<Red>(want, t);
  fused::reduce_rows<Red>(got, v, t2);
  CHECK(got.vr == want.vr && got.vc == want.vc && t2.vr == t.vr && t2.vc == t.vc, "%s: valid regions", what);
  for (int r = 0; r < want.vr; ++r) CHECK(same(got.data[r], want.data[r]), "%s [%d]: %a vs %a", what, r, got.data[r], want.data[r]);
}
static void reduce_checks() {
  const float specials[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, -NAN, 1.0f, -1.0f};
  for (int t = 0; t < 20000; ++t) {
    const int64_t n = int64_t(rng() % 150);
    const int kind = int(rng() % 4);
    std::vector<float> x(static_cast<size_t>(n));
    for (auto& v : x)
      v = kind == 0 ? std::uniform_real_distribution<float>(-1, 1)(rng)
        : kind == 1 ? specials[rng() % 8]
        : kind == 2 ? (rng() % 2 ? 0.0f : -0.0f) - float(rng() % 2)  // ties of zeros: order decides the sign
                    : (rng() % 64 == 0 ? NAN : -float(rng() % 3));
    const float mx = detail::reduce_span<float>(x.data(), n, detail::MaxR<float>{});
    const float mn = detail::reduce_span<float>(x.data(), n, detail::MinR<float>{});
    CHECK(same(mx, extreme_rule<true>(x.data(), n)), "max of %d (kind %d): %a vs %a", int(n), kind, mx,
          extreme_rule<true>(x.data(), n));
    CHECK(same(mn, extreme_rule<false>(x.data(), n)), "min of %d (kind %d): %a vs %a", int(n), kind, mn,
          extreme_rule<false>(x.data(), n));
  }
  // reduce_rows: the rows reduced in place equal TLOAD then the instruction (valid regions too),
  // from a view with a row stride, a column-strided one (taken as written) and a partial one.
  Full x;
  fill(x, R, C, 2);
  std::vector<float> in(R * (C + 5)), in_t(R * C * 2);
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) in[r * (C + 5) + c] = in_t[(c * R + r) * 2] = x.data[r * C + c];
  const GlobalView<float> views[] = {gview(in.data(), int64_t(C + 5), int64_t(1), int64_t(R), int64_t(C)),
                                     gview(in_t.data(), int64_t(2), int64_t(2 * R), int64_t(R), int64_t(C)),
                                     gview(in.data() + 3, int64_t(C + 5), int64_t(1), int64_t(R - 1), int64_t(C - 40))};
  for (const auto& v : views) {
    reduce_rows_check<detail::SumR>(v, "reduce_rows sum");
    reduce_rows_check<detail::MaxR>(v, "reduce_rows max");
    reduce_rows_check<detail::MinR>(v, "reduce_rows min");
  }
}

static void gather_checks() {
  constexpr int V = 9, W = 37;
  std::vector<float> table(V * W);
  std::uniform_real_distribution<float> u(-3.0f, 3.0f);
  for (auto& v : table) v = u(rng);
  Tile<int64_t, 1, 6> idx;
  const int64_t ids[6] = {3, 0, 8, 11, 3, -1};
  for (int k = 0; k < 6; ++k) idx.data[k] = ids[k];
  idx.vr = 1;
  idx.vc = 6;
  static int reports = 0;
  pto_kernel_args args{};
  args.report_error = [](void*, const char*) { ++reports; };
  auto tv = gview(table.data(), int64_t(W), int64_t(1), int64_t(V), int64_t(W));
  for (int stream = 0; stream < 2; ++stream) {
    Tile<float, 6, W> rows, rows2;
    std::vector<float> want(6 * (W + 3), -7.0f), got(6 * (W + 3), -7.0f);
    auto ov = [&](std::vector<float>& o) { return gview(o.data() + 1, int64_t(W + 3), int64_t(1), int64_t(5), int64_t(W - 2)); };
    reports = 0;
    MGATHER(rows, tv, idx, &args);
    TSTORE(ov(want), rows);
    CHECK(reports == 2, "MGATHER reports %d", reports);
    reports = 0;
    if (stream)
      fused::gather_rows<true>(ov(got), tv, idx, rows2, &args);
    else
      fused::gather_rows<false>(ov(got), tv, idx, rows2, &args);
    CHECK(reports == 2, "gather_rows reports %d", reports);
    CHECK(rows2.vr == rows.vr && rows2.vc == rows.vc, "gather_rows valid %dx%d", rows2.vr, rows2.vc);
    for (size_t k = 0; k < got.size(); ++k) CHECK(same(got[k], want[k]), "gather_rows [%zu]: %a vs %a", k, got[k], want[k]);
  }
  // Output rows 4.. of the table itself: MGATHER reads every row before TSTORE writes.
  std::vector<float> t2 = table, t3 = table;
  Tile<float, 6, W> rows, rows2;
  auto in2 = gview(t2.data(), int64_t(W), int64_t(1), int64_t(V), int64_t(W));
  MGATHER(rows, in2, idx, &args);
  TSTORE(gview(t2.data() + 4 * W, int64_t(W), int64_t(1), int64_t(5), int64_t(W)), rows);
  fused::gather_rows<false>(gview(t3.data() + 4 * W, int64_t(W), int64_t(1), int64_t(5), int64_t(W)),
                            gview(t3.data(), int64_t(W), int64_t(1), int64_t(V), int64_t(W)), idx, rows2, &args);
  for (size_t k = 0; k < t2.size(); ++k) CHECK(same(t3[k], t2[k]), "gather_rows into its table [%zu]", k);
}

int main() {
  exp_checks();
  activations_checks();
  binary_checks();
  gather_checks();
  reduce_checks();
  for (int kind = 0; kind < 6; ++kind) {
    softmax_checks(R, C, kind);
    softmax_checks(2, 37, kind);
    scaled_softmax_checks(R, C, kind);
    log_softmax_checks(R, C, kind);
    log_softmax_checks(2, 37, kind);
    scaled_softmax_checks(3, 37, kind);
    norm_checks(R, C, kind, kind != 1, kind != 2);
    norm_checks(2, 100, kind, true, true);
  }
  if (fails == 0) std::printf("OK\n");
  return fails == 0 ? 0 : 1;
}
)PTO";
const std::string kProgram = std::string(kBitCheckHead) + kBody;

TEST(CpuRows, FusedRowsAndExpUnderMarchNative) {
  compile_and_run_check(kProgram.c_str(), "-O2 -march=native -fno-math-errno");
}
TEST(CpuRows, FusedRowsAndExpPortable) { compile_and_run_check(kProgram.c_str(), "-O2 -fno-math-errno"); }
TEST(CpuRows, FusedRowsAndExpUnderAvx2Fma) { compile_and_run_check_avx2_fma(kProgram.c_str()); }

}  // namespace
