// Layout instructions (TTRANS TRESHAPE TEXTRACT TINSERT TFILLPAD) and gather/scatter.
#include <algorithm>
#include <string>

#include "backends/interp/machine.h"
#include "pto/elem.hpp"

namespace pypto::interp {
using namespace ir;

namespace {
std::string dims(int64_t r, int64_t c) { return std::to_string(r) + "x" + std::to_string(c); }

int64_t index_at(Machine& m, const Op& op, const Tile& idx, int64_t r) {
  if (idx.dtype != DType::I32 && idx.dtype != DType::I64)
    m.fail(op, "index tile '" + idx.name + "' must be i32 or i64");
  return m.get(op, idx, r, 0).i;
}
}  // namespace

void exec_layout(Machine& m, const Op& op) {
  Tile& dst = m.tile(op, 0);
  const Tile& src = m.tile(op, 1);
  switch (op.code) {
    case Opcode::TTRANS:
      commit(m, op, dst, src.vc, src.vr, [&](int64_t r, int64_t c) { return m.get(op, src, c, r); });
      break;
    case Opcode::TRESHAPE: {
      if (src.R * src.C != dst.R * dst.C)
        m.fail(op, "TRESHAPE needs equal sizes, got " + dims(src.R, src.C) + " -> " + dims(dst.R, dst.C));
      if (src.vr != src.R || src.vc != src.C)
        m.fail(op, "TRESHAPE needs a fully valid source; '" + src.name + "' has valid region " +
                       dims(src.vr, src.vc) + " of " + dims(src.R, src.C));
      commit(m, op, dst, dst.R, dst.C, [&](int64_t r, int64_t c) {
        const int64_t k = r * dst.C + c;  // row-major reinterpretation
        return m.get(op, src, k / src.C, k % src.C);
      });
      break;
    }
    case Opcode::TEXTRACT: {
      const int64_t r0 = m.int_scalar(op, 2), c0 = m.int_scalar(op, 3);
      if (r0 < 0 || c0 < 0) m.fail(op, "negative TEXTRACT origin");
      const int64_t vr = std::max<int64_t>(0, std::min(dst.R, src.vr - r0));
      const int64_t vc = std::max<int64_t>(0, std::min(dst.C, src.vc - c0));
      commit(m, op, dst, vr, vc, [&](int64_t r, int64_t c) { return m.get(op, src, r0 + r, c0 + c); });
      break;
    }
    case Opcode::TINSERT: {
      const int64_t r0 = m.int_scalar(op, 2), c0 = m.int_scalar(op, 3);
      if (r0 < 0 || c0 < 0) m.fail(op, "negative TINSERT origin");
      const int64_t nr = std::max<int64_t>(0, std::min(src.vr, dst.R - r0));
      const int64_t nc = std::max<int64_t>(0, std::min(src.vc, dst.C - c0));
      std::vector<Num> out(size_t(nr * nc));
      for (int64_t r = 0; r < nr; ++r)
        for (int64_t c = 0; c < nc; ++c) out[size_t(r * nc + c)] = m.get(op, src, r, c);
      for (int64_t r = 0; r < nr; ++r)  // dst's valid region is left as it is
        for (int64_t c = 0; c < nc; ++c) m.put(op, dst, r0 + r, c0 + c, out[size_t(r * nc + c)]);
      break;
    }
    case Opcode::TFILLPAD: {
      const Num value = round_to(fill_dtype(dst.dtype), m.scalar(op, 2));
      const int64_t vr = src.vr, vc = src.vc;
      commit(m, op, dst, dst.R, dst.C,
             [&](int64_t r, int64_t c) { return (r < vr && c < vc) ? m.get(op, src, r, c) : value; });
      break;
    }
    case Opcode::TGATHER: {
      const Tile& idx = m.tile(op, 2);
      commit(m, op, dst, idx.vr, src.vc, [&](int64_t r, int64_t c) {
        const int64_t i = index_at(m, op, idx, r);
        if (i < 0 || i >= src.vr)
          m.fail(op, "gather index " + std::to_string(i) + " (row " + std::to_string(r) + " of '" + idx.name +
                         "') out of range [0, " + std::to_string(src.vr) + ")");
        return m.get(op, src, i, c);
      });
      break;
    }
    case Opcode::TARGSORT: {
      // A stable sort of each row's valid part; NaN after +inf (ascending) or first (descending).
      const bool desc = m.int_scalar(op, 2) != 0;
      std::vector<Num> row(size_t(src.vc));
      std::vector<int64_t> order(size_t(src.vc));
      std::vector<Num> out(size_t(src.vr * src.vc));
      auto key_less = [](const Num& a, const Num& b) {  // a < b, NaN the greatest
        if (!a.is_float) return a.i < b.i;
        if (b.f != b.f) return a.f == a.f;
        return a.f < b.f;
      };
      // A destination narrower than the row takes the first dst.C entries of the permutation.
      const int64_t k = std::min(src.vc, dst.C);
      for (int64_t r = 0; r < src.vr; ++r) {
        for (int64_t c = 0; c < src.vc; ++c) {
          row[size_t(c)] = m.get(op, src, r, c);
          order[size_t(c)] = c;
        }
        std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
          return desc ? key_less(row[size_t(b)], row[size_t(a)]) : key_less(row[size_t(a)], row[size_t(b)]);
        });
        for (int64_t c = 0; c < k; ++c) out[size_t(r * src.vc + c)] = inum(order[size_t(c)]);
      }
      commit(m, op, dst, src.vr, k, [&](int64_t r, int64_t c) { return out[size_t(r * src.vc + c)]; });
      break;
    }
    case Opcode::TSCAN: {
      // Running sum or product of each row, in order (kind bit 0: product, bit 1: from the end);
      // bit 2: running maximum (bit 0: minimum) by TMAX's / TMIN's rule, the accumulator first.
      const int64_t kind = m.int_scalar(op, 2);
      const bool prod = (kind & 1) != 0, rev = (kind & 2) != 0, extreme = (kind & 4) != 0;
      const DType ct = compute_dtype(dst.dtype);
      auto mul_num = [](const Num& a, const Num& b) {  // integers wrap, as elem::mul
        if (a.is_float || b.is_float) return fnum(a.as_double() * b.as_double());
        return inum(int64_t(uint64_t(a.i) * uint64_t(b.i)));
      };
      auto extreme_num = [&](const Num& a, const Num& b) {
        namespace e = pto::elem;
        if (a.is_float || b.is_float)
          return fnum(prod ? e::min(a.as_double(), b.as_double()) : e::max(a.as_double(), b.as_double()));
        return inum(prod ? e::min(a.i, b.i) : e::max(a.i, b.i));
      };
      std::vector<Num> out(size_t(src.vr * src.vc));
      for (int64_t r = 0; r < src.vr; ++r) {
        Num acc = round_to(ct, prod && !extreme ? inum(1) : inum(0));
        for (int64_t i = 0; i < src.vc; ++i) {
          const int64_t c = rev ? src.vc - 1 - i : i;
          const Num v = m.get(op, src, r, c);
          // A running extreme starts at the first element: the rule's max(-inf, v) is v, NaN too.
          acc = round_to(ct, extreme ? (i == 0 ? v : extreme_num(acc, v))
                             : prod  ? mul_num(acc, v)
                                     : add_num(acc, v));
          out[size_t(r * src.vc + c)] = acc;
        }
      }
      commit(m, op, dst, src.vr, src.vc, [&](int64_t r, int64_t c) { return out[size_t(r * src.vc + c)]; });
      break;
    }
    case Opcode::TSCATTER:
    case Opcode::TSCATTER_ADD: {
      const Tile& idx = m.tile(op, 2);
      std::vector<int64_t> rows(size_t(src.vr));
      std::vector<Num> out(size_t(src.vr * src.vc));
      for (int64_t r = 0; r < src.vr; ++r) {
        const int64_t i = index_at(m, op, idx, r);
        if (i < 0 || i >= dst.R)
          m.fail(op, "scatter index " + std::to_string(i) + " (row " + std::to_string(r) + " of '" +
                         idx.name + "') out of range [0, " + std::to_string(dst.R) + ")");
        rows[size_t(r)] = i;
        for (int64_t c = 0; c < src.vc; ++c) out[size_t(r * src.vc + c)] = m.get(op, src, r, c);
      }
      // In order: with repeated indices the last row wins (TSCATTER) or all of them add up.
      const bool add = op.code == Opcode::TSCATTER_ADD;
      for (int64_t r = 0; r < src.vr; ++r)
        for (int64_t c = 0; c < src.vc; ++c) {
          const Num& v = out[size_t(r * src.vc + c)];
          if (!add) {
            m.put(op, dst, rows[size_t(r)], c, v);
            continue;
          }
          m.put(op, dst, rows[size_t(r)], c, add_num(m.get(op, dst, rows[size_t(r)], c), v));
        }
      break;
    }
    default:
      m.fail(op, "not a layout instruction");
  }
}

}  // namespace pypto::interp
