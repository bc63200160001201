// A persistent pool of worker threads for parallel loops ($PYPTO_NUM_THREADS, default: all cores).
// parallel_for hands out iterations in contiguous chunks; the calling thread takes part, so a
// one-thread pool runs inline with no synchronisation. An exception thrown by any chunk reaches the
// caller of parallel_for after every chunk has finished.
#pragma once
#include <cstdint>

namespace pypto::runtime {
using LoopBody = void (*)(void* ctx, int64_t begin, int64_t end);
void parallel_for(int64_t n, LoopBody body, void* ctx);
// The parallel loops of compiled kernels: as parallel_for, but a loop too small to pay for waking
// threads runs on the caller (loop_cost.h decides).
void parallel_for_costed(int64_t n, LoopBody body, void* ctx);
int num_threads();
// n <= 0: back to the default. Throws ir::Error above max_threads() (a few per core).
void set_num_threads(int64_t n);
int max_threads();
}  // namespace pypto::runtime
