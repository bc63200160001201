// Memory instructions (the only ones that touch global views): TLOAD, TSTORE, TPREFETCH, the
// indexed-row MGATHER, MSCATTER, MSCATTER_ADD, and the whole-matrix MMATMUL, MMATMUL_ACC.
#include <algorithm>
#include <string>
#include <vector>

#include "backends/interp/machine.h"

namespace pypto::interp {
using namespace ir;

namespace {
// An index vector tile: 1 x N holds its indices along the row, N x 1 down the column.
int64_t index_count(const Tile& idx) { return idx.R == 1 ? idx.vc : idx.vr; }

// The r-th index, checked against a dimension of `rows` rows (the error every backend reports).
int64_t row_index(Machine& m, const Op& op, const Tile& idx, int64_t r, int64_t rows) {
  if (idx.dtype != DType::I32 && idx.dtype != DType::I64)
    m.fail(op, "index tile '" + idx.name + "' must be i32 or i64");
  const int64_t i = (idx.R == 1 ? m.get(op, idx, 0, r) : m.get(op, idx, r, 0)).i;
  if (i < 0 || i >= rows)
    m.fail(op, std::string(opcode_name(op.code)) + ": index " + std::to_string(i) +
                   " is out of range for a dimension of size " + std::to_string(rows));
  return i;
}

// The table operand of an indexed-row instruction: a rank-1 view is a column (each element a row).
GView table_view(Machine& m, const Op& op, size_t i) {
  GView g = m.global_view(op, i);
  if (std::get<View>(op.args[i]).rank() == 1) {
    g.rows = g.cols;
    g.cols = 1;
    g.rdim = g.cdim;
    g.rstep = g.cstep;
    g.cdim = -1;
    g.cstep = 0;
  }
  return g;
}
}  // namespace

void exec_memory(Machine& m, const Op& op) {
  switch (op.code) {
    case Opcode::TLOAD: {
      Tile& dst = m.tile(op, 0);
      const GView g = m.global_view(op, 1);
      // The view's valid extent, clamped to the tile; converted to the tile's dtype by put().
      const int64_t vr = std::min(g.rows, dst.R), vc = std::min(g.cols, dst.C);
      for (int64_t i = 0; i < vr; ++i)
        for (int64_t j = 0; j < vc; ++j) m.put(op, dst, i, j, m.gread(op, g, i, j));
      m.set_valid(op, dst, vr, vc);
      break;
    }
    case Opcode::TSTORE: {
      const GView g = m.global_view(op, 0);
      const Tile& src = m.tile(op, 1);
      const int64_t vr = std::min(g.rows, src.vr), vc = std::min(g.cols, src.vc);
      for (int64_t i = 0; i < vr; ++i)
        for (int64_t j = 0; j < vc; ++j) m.gwrite(op, g, i, j, m.get(op, src, i, j));
      break;
    }
    case Opcode::TPREFETCH: {
      // A hint: no effect on results, but prefetching outside the tensor is still a bug. Views
      // are affine with positive steps, so checking the corners checks the whole region.
      const GView g = m.global_view(op, 0);
      if (g.rows > 0 && g.cols > 0) {
        for (int64_t i : {int64_t(0), g.rows - 1})
          for (int64_t j : {int64_t(0), g.cols - 1}) m.global_address(op, g, i, j);
      }
      break;
    }
    case Opcode::MGATHER: {
      Tile& dst = m.tile(op, 0);
      const GView g = table_view(m, op, 1);
      const Tile& idx = m.tile(op, 2);
      const int64_t n = index_count(idx), vc = std::min(g.cols, dst.C);
      std::vector<int64_t> rows(size_t(std::max<int64_t>(n, 0)));
      for (int64_t r = 0; r < n; ++r) rows[size_t(r)] = row_index(m, op, idx, r, g.rows);
      m.set_valid(op, dst, n, vc);
      for (int64_t r = 0; r < n; ++r)
        for (int64_t j = 0; j < vc; ++j) m.put(op, dst, r, j, m.gread(op, g, rows[size_t(r)], j));
      break;
    }
    case Opcode::MSCATTER:
    case Opcode::MSCATTER_ADD: {
      const GView g = table_view(m, op, 0);
      const Tile& src = m.tile(op, 1);
      const Tile& idx = m.tile(op, 2);
      const int64_t n = std::min(src.vr, index_count(idx)), vc = std::min(g.cols, src.vc);
      for (int64_t r = 0; r < n; ++r) {
        const int64_t i = row_index(m, op, idx, r, g.rows);
        for (int64_t j = 0; j < vc; ++j) {
          Num v = m.get(op, src, r, j);
          if (op.code == Opcode::MSCATTER_ADD) v = add_num(m.gread(op, g, i, j), v);
          m.gwrite(op, g, i, j, v);
        }
      }
      break;
    }
    case Opcode::MMATMUL:
    case Opcode::MMATMUL_ACC: {
      // As TMATMUL on tiles: dot products over k < min(a.cols, b.rows) into rows
      // < min(dst.rows, a.rows) and columns < min(dst.cols, b.cols) (MMATMUL_ACC adds the old
      // value first). Floats in double, rounded once per element to f32; int8 operands into an i32
      // destination exactly, wrapping modulo 2^32.
      const GView d = m.global_view(op, 0), a = m.global_view(op, 1), b = m.global_view(op, 2);
      const int64_t M = std::min(d.rows, a.rows), N = std::min(d.cols, b.cols);
      const int64_t K = std::max<int64_t>(0, std::min(a.cols, b.rows));
      if (M <= 0 || N <= 0) break;
      const bool integer = d.buf->dtype == DType::I32;
      const bool acc = op.code == Opcode::MMATMUL_ACC;
      if (integer) {
        std::vector<int64_t> A(size_t(M * K)), B(size_t(K * N));
        for (int64_t i = 0; i < M; ++i)
          for (int64_t p = 0; p < K; ++p) A[size_t(i * K + p)] = m.gread(op, a, i, p).i;
        for (int64_t p = 0; p < K; ++p)
          for (int64_t j = 0; j < N; ++j) B[size_t(p * N + j)] = m.gread(op, b, p, j).i;
        for (int64_t i = 0; i < M; ++i)
          for (int64_t j = 0; j < N; ++j) {
            uint64_t s = acc ? uint64_t(m.gread(op, d, i, j).i) : 0;
            for (int64_t p = 0; p < K; ++p) s += uint64_t(A[size_t(i * K + p)] * B[size_t(p * N + j)]);
            m.gwrite(op, d, i, j, round_to(DType::I32, inum(int64_t(s))));
          }
        break;
      }
      std::vector<double> A(size_t(M * K)), B(size_t(K * N));
      for (int64_t i = 0; i < M; ++i)
        for (int64_t p = 0; p < K; ++p) A[size_t(i * K + p)] = m.gread(op, a, i, p).as_double();
      for (int64_t p = 0; p < K; ++p)
        for (int64_t j = 0; j < N; ++j) B[size_t(p * N + j)] = m.gread(op, b, p, j).as_double();
      for (int64_t i = 0; i < M; ++i)
        for (int64_t j = 0; j < N; ++j) {
          double s = acc ? m.gread(op, d, i, j).as_double() : 0.0;
          for (int64_t p = 0; p < K; ++p) s += A[size_t(i * K + p)] * B[size_t(p * N + j)];
          // Sums are f32 (a bf16 destination is rounded from the f32 sum, as from an f32 tile).
          m.gwrite(op, d, i, j, fnum(double(float(s))));
        }
      break;
    }
    default:
      m.fail(op, "not a memory instruction");
  }
}

}  // namespace pypto::interp
