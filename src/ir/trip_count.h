// The number of iterations of `for (v = lo; step > 0 ? v < hi : v > hi; v += step)`, computed
// without overflow: a walker that steps `v += step` near INT64_MAX would wrap and never stop.
// Iteration t has v = lo + t * step, which is in range for every t < trip_count(...).
#pragma once
#include <cstdint>

namespace pypto::ir {

inline __int128 trip_count(int64_t lo, int64_t hi, int64_t step) {
  const __int128 span = step > 0 ? __int128(hi) - lo : __int128(lo) - hi;
  const __int128 mag = step > 0 ? __int128(step) : -__int128(step);
  return span > 0 && mag > 0 ? (span + mag - 1) / mag : 0;
}

}  // namespace pypto::ir
