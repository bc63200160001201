// Pipe synchronisation. One CPU thread executes a kernel's instructions in program order, so
// every pipe is already synchronised: these are no-ops, kept so generated code mirrors the ISA.
// (The interpreter and the simulator check event pairing; the CPU backend does not.)
#pragma once
#include "pto/cpu/types.hpp"

namespace pto {

PTO_INLINE void SET_FLAG(int /*src_pipe*/, int /*dst_pipe*/, int /*event*/) {}
PTO_INLINE void WAIT_FLAG(int /*src_pipe*/, int /*dst_pipe*/, int /*event*/) {}
PTO_INLINE void PIPE_BARRIER(int /*pipe*/) {}

}  // namespace pto
