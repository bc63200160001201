// Matrix instructions: TMATMUL, TMATMUL_ACC, TMATMUL_BIAS.
#include <algorithm>

#include "backends/interp/machine.h"

namespace pypto::interp {
using namespace ir;

void exec_matrix(Machine& m, const Op& op) {
  Tile& dst = m.tile(op, 0);
  const Tile& a = m.tile(op, 1);
  const Tile& b = m.tile(op, 2);
  // Ragged K: only the first min(a.vc, b.vr) products count, so padding never leaks in.
  const int64_t k = std::min(a.vc, b.vr);
  const bool acc = op.code == Opcode::TMATMUL_ACC;
  const int64_t M = acc ? std::min(dst.vr, a.vr) : a.vr;
  const int64_t N = acc ? std::min(dst.vc, b.vc) : b.vc;
  // Read the operands once (each read is checked), then multiply in double.
  std::vector<double> A(size_t(M * k)), B(size_t(k * N));
  for (int64_t i = 0; i < M; ++i)
    for (int64_t p = 0; p < k; ++p) A[size_t(i * k + p)] = m.get(op, a, i, p);
  for (int64_t p = 0; p < k; ++p)
    for (int64_t j = 0; j < N; ++j) B[size_t(p * N + j)] = m.get(op, b, p, j);
  std::vector<double> bias;
  if (op.code == Opcode::TMATMUL_BIAS) {
    const Tile& t = m.tile(op, 3);
    for (int64_t j = 0; j < N; ++j) bias.push_back(m.get(op, t, 0, j));
  }
  auto dot = [&](int64_t i, int64_t j) {
    double s = 0;
    for (int64_t p = 0; p < k; ++p) s += A[size_t(i * k + p)] * B[size_t(p * N + j)];
    return s;
  };
  if (!acc) {
    commit(m, op, dst, M, N,
           [&](int64_t i, int64_t j) { return dot(i, j) + (bias.empty() ? 0.0 : bias[size_t(j)]); });
    return;
  }
  // Accumulate into the existing values; dst's valid region stays as it is.
  std::vector<double> out(size_t(M * N));
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) out[size_t(i * N + j)] = m.get(op, dst, i, j) + dot(i, j);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) m.put(op, dst, i, j, out[size_t(i * N + j)]);
}

}  // namespace pypto::interp
