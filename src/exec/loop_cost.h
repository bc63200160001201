// The cost model of parallel loops: waking other threads costs microseconds, which a small loop
// cannot win back. The first time a loop (its body and trip count) runs, its iterations run one
// by one on the calling thread, timed, until it is done or has taken half of kSmallLoopNanos; a
// loop estimated below kSmallLoopNanos in all runs serially from then on, a bigger one has its
// remaining iterations run in parallel.
#pragma once
#include <cstdint>

#include "exec/thread_pool.h"

namespace pypto::runtime {
constexpr int64_t kSmallLoopNanos = 10000;
// Runs the iterations the cost model wants on this thread and returns how many ([0, count)): n
// for a small loop, 1 while measuring a new one, 0 for a known big one. The caller runs
// [count, n) in parallel.
int64_t run_serial_part(int64_t n, LoopBody body, void* ctx);
// Forgets every measurement (tests).
void reset_loop_costs();
}  // namespace pypto::runtime
