// Parallel loops on the OpenMP runtime another library of the process already runs (torch's
// libgomp, or Intel's libiomp), instead of on PyPTO's own pool: after a torch op, torch's
// OpenMP threads still spin waiting for work, and a second pool of threads would fight them for
// the same cores. attach() finds that runtime among the loaded libraries; from then on
// parallel_for hands each team thread one contiguous chunk through GOMP_parallel.
#pragma once
#include <cstdint>
#include <string>

#include "exec/thread_pool.h"

namespace pypto::runtime::openmp {
// Finds a loaded OpenMP runtime (never loads one). Returns its path, or "" when none is loaded.
std::string attach();
void detach();
bool attached();
// True on a thread that runs inside a region of the attached runtime (nested loops run inline).
bool in_region();
// body over [0, n) on up to `threads` team threads; the first exception a chunk throws is
// rethrown after the region.
void parallel_for(int64_t n, LoopBody body, void* ctx, int threads);
}  // namespace pypto::runtime::openmp
