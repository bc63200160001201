// Memory instructions: TLOAD, TSTORE, TPREFETCH (the only ones that touch global views).
#include <algorithm>

#include "backends/interp/machine.h"

namespace pypto::interp {
using namespace ir;

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
    default:
      m.fail(op, "not a memory instruction");
  }
}

}  // namespace pypto::interp
