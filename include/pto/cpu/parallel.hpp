// The parallel loop of generated code: hands [0, n) to the runtime's thread pool through the
// C ABI (pto_kernel_args::parallel_for), or runs it serially when there is no pool.
#pragma once
#include <type_traits>

#include "pto/abi.h"
#include "pto/cpu/types.hpp"

namespace pto {

// True once the runtime asked the kernel to stop (Ctrl-C): generated loops return early.
PTO_INLINE bool stop_requested(const pto_kernel_args* a) {
  return a->stop != nullptr && __atomic_load_n(a->stop, __ATOMIC_RELAXED) != 0;
}

// body(int64_t iter) for iter in [0, n). Iterations may run concurrently on different threads.
template <class F>
inline void parallel_for(pto_parallel_for_fn pf, int64_t n, F&& body) {
  if (n <= 0) return;
  if (pf == nullptr || n == 1) {
    for (int64_t i = 0; i < n; ++i) body(i);
    return;
  }
  using FT = std::remove_reference_t<F>;
  pto_loop_body trampoline = [](void* ctx, int64_t begin, int64_t end) {
    FT& f = *static_cast<FT*>(ctx);
    for (int64_t i = begin; i < end; ++i) f(i);
  };
  pf(n, trampoline, const_cast<void*>(static_cast<const void*>(&body)));
}

}  // namespace pto
