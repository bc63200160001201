// When a kernel's stores into an output go past the caches (streaming stores, memory.hpp): one
// rule, read by code generation where the sizes are static and by the kernel itself where a
// dimension is dynamic (src/backends/cpu/codegen.cpp emits a call to it then).
#pragma once
#include "pto/base.hpp"

namespace pto {

// Saturating: a size beyond int64 (a broadcast view's nominal extent) counts as INT64_MAX.
PTO_INLINE constexpr int64_t saturating_mul(int64_t a, int64_t b) {
  int64_t r = 0;
  return __builtin_mul_overflow(a, b, &r) ? INT64_MAX : r;
}
PTO_INLINE constexpr int64_t saturating_add(int64_t a, int64_t b) {
  int64_t r = 0;
  return __builtin_add_overflow(a, b, &r) ? INT64_MAX : r;
}

// The bytes of a buffer of `elem`-byte elements and these extents.
template <class... Dims>
PTO_INLINE constexpr int64_t buffer_bytes(int64_t elem, Dims... dims) {
  int64_t bytes = elem;
  ((bytes = saturating_mul(bytes, int64_t(dims))), ...);
  return bytes;
}

// An output bigger than the last-level cache streams: nothing in the kernel reads it back, and it
// would be evicted before the caller could. So does one of at least 8 MiB that a call writes
// while reading `alongside` bytes of other memory once (a fused row pass over two inputs of its
// size), when all of it exceeds the cache: the output's lines would be evicted as well, and a
// plain store first reads each line from memory.
PTO_INLINE constexpr bool streams_past_cache(int64_t out_bytes, int64_t alongside_bytes,
                                             int64_t cache_bytes) {
  return out_bytes >= cache_bytes || (alongside_bytes > 0 && out_bytes >= (int64_t(8) << 20) &&
                                      saturating_add(out_bytes, alongside_bytes) >= cache_bytes);
}

}  // namespace pto
