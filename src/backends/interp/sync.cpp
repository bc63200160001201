// Sync instructions. The interpreter runs one instruction at a time, so they have no effect on
// data; it checks that they pair up: every WAIT_FLAG consumes an earlier matching SET_FLAG.
#include <string>

#include "backends/interp/machine.h"

namespace pypto::interp {
using namespace ir;

void exec_sync(Machine& m, const Op& op) {
  if (op.code == Opcode::PIPE_BARRIER) {
    const int64_t p = m.int_scalar(op, 0);
    if (p < 0 || p > int64_t(Pipe::ALL)) m.fail(op, "no pipe " + std::to_string(p));
    return;
  }
  const int64_t src = m.int_scalar(op, 0), dst = m.int_scalar(op, 1), ev = m.int_scalar(op, 2);
  for (int64_t p : {src, dst})
    if (p < 0 || p >= int64_t(Pipe::ALL)) m.fail(op, "no pipe " + std::to_string(p));
  if (ev < 0) m.fail(op, "negative event id");
  auto& count = m.flags[{src, dst, ev}];
  if (op.code == Opcode::SET_FLAG) {
    ++count;
  } else if (op.code == Opcode::WAIT_FLAG) {
    if (count == 0)
      m.fail(op, std::string("WAIT_FLAG on event ") + std::to_string(ev) + " from " + pipe_name(src) +
                     " to " + pipe_name(dst) + " that no SET_FLAG has set");
    --count;
  } else {
    m.fail(op, "not a sync instruction");
  }
}

}  // namespace pypto::interp
