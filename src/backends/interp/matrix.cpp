// Matrix instructions: TMATMUL, TMATMUL_ACC, TMATMUL_BIAS, TDWCONV.
#include <algorithm>
#include <type_traits>

#include "backends/interp/machine.h"
#include "pto/elem.hpp"

namespace pypto::interp {
using namespace ir;

namespace {

// An element in the compute type T (integers rounded to ct as the instruction computes them), and
// back: the conversions of every matrix instruction.
template <class T>
T as_compute(const Num& v, DType ct) {
  if constexpr (std::is_integral_v<T>)
    return T(round_to(ct, v).i);
  else
    return T(v.as_double());
}

// Dot products in the compute type T of the operands and dst (pto::promote_t): floats in double,
// rounded once per result element; integers exactly, wrapping (pto::elem::add / mul).
template <class T>
void matmul(Machine& m, const Op& op, DType ct) {
  namespace e = pto::elem;
  Tile& dst = m.tile(op, 0);
  const Tile& a = m.tile(op, 1);
  const Tile& b = m.tile(op, 2);
  auto val = [&](const Num& v) { return as_compute<T>(v, ct); };
  // Ragged K: only the first min(a.vc, b.vr) products count, so padding never leaks in.
  const int64_t k = std::min(a.vc, b.vr);
  const bool acc = op.code == Opcode::TMATMUL_ACC;
  const int64_t M = acc ? std::min(dst.vr, a.vr) : a.vr;
  const int64_t N = acc ? std::min(dst.vc, b.vc) : b.vc;
  // Read the operands once (each read is checked).
  std::vector<T> A(size_t(M * k)), B(size_t(k * N));
  for (int64_t i = 0; i < M; ++i)
    for (int64_t p = 0; p < k; ++p) A[size_t(i * k + p)] = val(m.get(op, a, i, p));
  for (int64_t p = 0; p < k; ++p)
    for (int64_t j = 0; j < N; ++j) B[size_t(p * N + j)] = val(m.get(op, b, p, j));
  std::vector<T> bias;
  if (op.code == Opcode::TMATMUL_BIAS) {
    const Tile& t = m.tile(op, 3);
    for (int64_t j = 0; j < N; ++j) bias.push_back(val(m.get(op, t, 0, j)));
  }
  auto dot = [&](int64_t i, int64_t j, T s) {
    for (int64_t p = 0; p < k; ++p) s = e::add(s, e::mul(A[size_t(i * k + p)], B[size_t(p * N + j)]));
    return s;
  };
  if (!acc) {
    commit(m, op, dst, M, N, [&](int64_t i, int64_t j) {
      return num(e::add(dot(i, j, T(0)), bias.empty() ? T(0) : bias[size_t(j)]));
    });
    return;
  }
  // Accumulate into the existing values; dst's valid region stays as it is.
  std::vector<Num> out(size_t(M * N));
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) out[size_t(i * N + j)] = num(dot(i, j, val(m.get(op, dst, i, j))));
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) m.put(op, dst, i, j, out[size_t(i * N + j)]);
}

// TDWCONV dst, src, w, sh, sw, dh, dw, pt, pb, pl, pr: one plane's 2-D correlation (a depthwise
// convolution's channel) over src padded with pt rows of zeros above, pb below, pl columns on the
// left and pr on the right: dst[i][j] = sum over a < w.vr, b < w.vc of
// w[a][b] * xp[i*sh + a*dh][j*sw + b*dw], xp[r][c] = src[r - pt][c - pl] inside src's valid
// region and 0 outside it. dst's valid region: every window inside the padded extent,
// ((src.vr + pt + pb - (w.vr-1)*dh - 1) / sh + 1) x (the same for columns). The sum is taken as
// TMATMUL's (floats in double, rounded once; integers exactly, wrapping).
template <class T>
void dwconv(Machine& m, const Op& op, DType ct) {
  namespace e = pto::elem;
  Tile& dst = m.tile(op, 0);
  const Tile& src = m.tile(op, 1);
  const Tile& w = m.tile(op, 2);
  int64_t k[8];
  for (size_t i = 0; i < 8; ++i) k[i] = m.int_scalar(op, 3 + i);
  const int64_t sh = k[0], sw = k[1], dh = k[2], dw = k[3], pt = k[4], pb = k[5], pl = k[6], pr = k[7];
  if (sh < 1 || sw < 1 || dh < 1 || dw < 1) m.fail(op, "strides and dilations must be at least 1");
  if (pt < 0 || pb < 0 || pl < 0 || pr < 0) m.fail(op, "paddings must not be negative");
  const int64_t kh = w.vr, kw = w.vc;
  if (kh < 1 || kw < 1) m.fail(op, "the filter's valid region is empty");
  const int64_t span_h = (kh - 1) * dh + 1, span_w = (kw - 1) * dw + 1;
  const int64_t hp = src.vr + pt + pb, wp = src.vc + pl + pr;
  if (hp < span_h || wp < span_w)
    m.fail(op, "a " + std::to_string(span_h) + " x " + std::to_string(span_w) +
                   " window does not fit the padded source's " + std::to_string(hp) + " x " +
                   std::to_string(wp) + " region");
  const int64_t ho = (hp - span_h) / sh + 1, wo = (wp - span_w) / sw + 1;
  auto val = [&](const Num& v) { return as_compute<T>(v, ct); };
  std::vector<T> W(size_t(kh * kw));
  for (int64_t a = 0; a < kh; ++a)
    for (int64_t b = 0; b < kw; ++b) W[size_t(a * kw + b)] = val(m.get(op, w, a, b));
  commit(m, op, dst, ho, wo, [&](int64_t i, int64_t j) {
    T s = T(0);
    for (int64_t a = 0; a < kh; ++a) {
      const int64_t r = i * sh + a * dh - pt;
      if (r < 0 || r >= src.vr) continue;
      for (int64_t b = 0; b < kw; ++b) {
        const int64_t c = j * sw + b * dw - pl;
        if (c >= 0 && c < src.vc) s = e::add(s, e::mul(W[size_t(a * kw + b)], val(m.get(op, src, r, c))));
      }
    }
    return num(s);
  });
}

template <class T>
void matrix(Machine& m, const Op& op, DType ct) {
  if (op.code == Opcode::TDWCONV) return dwconv<T>(m, op, ct);
  matmul<T>(m, op, ct);
}

}  // namespace

void exec_matrix(Machine& m, const Op& op) {
  const DType ct = promote_compute({m.tile(op, 0).dtype, m.tile(op, 1).dtype, m.tile(op, 2).dtype});
  switch (ct) {
    case DType::I32:
      return matrix<int32_t>(m, op, ct);
    case DType::I64:
      return matrix<int64_t>(m, op, ct);
    default:
      return matrix<double>(m, op, ct);
  }
}

}  // namespace pypto::interp
