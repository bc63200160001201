// Matrix instructions: TMATMUL, TMATMUL_ACC, TMATMUL_BIAS.
#include <algorithm>
#include <type_traits>

#include "backends/interp/machine.h"
#include "pto/elem.hpp"

namespace pypto::interp {
using namespace ir;

namespace {

// Dot products in the compute type T of the operands and dst (pto::promote_t): floats in double,
// rounded once per result element; integers exactly, wrapping (pto::elem::add / mul).
template <class T>
void matmul(Machine& m, const Op& op, DType ct) {
  namespace e = pto::elem;
  Tile& dst = m.tile(op, 0);
  const Tile& a = m.tile(op, 1);
  const Tile& b = m.tile(op, 2);
  auto val = [&](const Num& v) { return std::is_integral_v<T> ? T(round_to(ct, v).i) : T(v.as_double()); };
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
  auto num = [](T x) { return std::is_integral_v<T> ? inum(int64_t(x)) : fnum(double(x)); };
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

}  // namespace

void exec_matrix(Machine& m, const Op& op) {
  const DType ct = promote_compute({m.tile(op, 0).dtype, m.tile(op, 1).dtype, m.tile(op, 2).dtype});
  switch (ct) {
    case DType::I32:
      return matmul<int32_t>(m, op, ct);
    case DType::I64:
      return matmul<int64_t>(m, op, ct);
    default:
      return matmul<double>(m, op, ct);
  }
}

}  // namespace pypto::interp
