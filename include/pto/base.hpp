// The few definitions every PTO header shares, backend-independent: inlining macros and bit_cast.
// Plain C++17 with compiler builtins only (no <cmath>): kernels are compiled at run time, and a
// device compiler (CUDA) must be able to include it too.
#pragma once
#include <cstdint>
#include <type_traits>

#if defined(__CUDACC__)  // the element functions (pto/elem.hpp) serve host and device code alike
#define PTO_INLINE __host__ __device__ __forceinline__
#define PTO_NOINLINE __noinline__
#define PTO_RESTRICT __restrict__
#elif defined(__GNUC__) || defined(__clang__)
#define PTO_INLINE inline __attribute__((always_inline))
#define PTO_NOINLINE __attribute__((noinline))
#define PTO_RESTRICT __restrict__
#else
#define PTO_INLINE inline
#define PTO_NOINLINE
#define PTO_RESTRICT
#endif

namespace pto {

template <class To, class From>
PTO_INLINE To bit_cast(const From& f) {
  static_assert(sizeof(To) == sizeof(From), "bit_cast: size mismatch");
  To t;
  __builtin_memcpy(&t, &f, sizeof t);
  return t;
}

}  // namespace pto
