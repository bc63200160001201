// Core types of the CPU PTO headers: storage floats (half_t, bf16_t), tiles, global views,
// scratch buffers, and the element conversion every instruction uses.
//
// Compile-time cost matters (kernels are compiled at run time), so these headers avoid <cmath>,
// <algorithm> and the intrinsics headers; they use compiler builtins instead.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <mutex>
#include <new>
#include <type_traits>
#include <vector>

#include "pto/base.hpp"
#include "pto/elem.hpp"

namespace pto {

// ---- 16-bit storage floats ---------------------------------------------------------------------
// Arithmetic never happens in these types: TLOAD/TSTORE/TCVT convert to and from float.
struct half_t {
  uint16_t bits;
};
struct bf16_t {
  uint16_t bits;
};

// The conversions are pto/elem.hpp's (one rounding from any source type).
PTO_INLINE float to_float(half_t h) { return elem::f16_to_float(h.bits); }
PTO_INLINE half_t half_from_float(float f) { return half_t{elem::f16_from_float(f)}; }
PTO_INLINE float to_float(bf16_t h) { return elem::bf16_to_float(h.bits); }
PTO_INLINE bf16_t bf16_from_float(float f) { return bf16_t{elem::bf16_from_float(f)}; }
// bf16_from_float on every lane of a vector of f32 (VF, GCC vector extension), as the bf16 bit
// patterns in a vector of uint16_t of as many lanes (VU16): round to nearest even, a NaN quiet.
// At most one register wide: GCC compiles the select of a wider vector lane by lane.
template <class VU16, class VF>
PTO_INLINE VU16 bf16_bits_from_floats(VF x) {
  static_assert(sizeof(VF) <= 64, "one vector register at most (wider selects become scalar code)");
  typedef uint32_t VU __attribute__((vector_size(sizeof(VF))));
  const VU u = (VU)x;
  const VU rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  const VU nan = (u >> 16) | 0x40u;
  return __builtin_convertvector((u & 0x7fffffffu) > 0x7f800000u ? nan : rounded, VU16);
}

PTO_INLINE float to_float(float f) { return f; }
template <class T>
PTO_INLINE T from_float(float f) {
  if constexpr (std::is_same_v<T, half_t>)
    return half_from_float(f);
  else if constexpr (std::is_same_v<T, bf16_t>)
    return bf16_from_float(f);
  else
    return elem::cast<T>(f);
}

// ---- element type traits -----------------------------------------------------------------------
template <class T>
inline constexpr bool is_f16_v = std::is_same_v<T, half_t> || std::is_same_v<T, bf16_t>;
// bool tiles are C++ bool (one byte holding 0/1); uint8_t is the IR's u8.
template <class T>
inline constexpr bool is_bool_v = std::is_same_v<T, bool>;

// The type arithmetic on an element happens in: f16/bf16 -> float; bool, int8, uint8, int16 ->
// int32 (narrowed again, wrapping, when stored: the same values as arithmetic in the narrow type).
template <class T>
struct arith {
  using type = T;
};
template <>
struct arith<half_t> {
  using type = float;
};
template <>
struct arith<bf16_t> {
  using type = float;
};
template <>
struct arith<int8_t> {
  using type = int32_t;
};
template <>
struct arith<uint8_t> {
  using type = int32_t;
};
template <>
struct arith<int16_t> {
  using type = int32_t;
};
template <>
struct arith<bool> {
  using type = int32_t;
};
template <class T>
using arith_t = typename arith<std::remove_cv_t<T>>::type;

// Promotion for mixed operands: int32 < int64 < float < double (bool counts as int32).
template <class A, class B>
struct promote2 {
  using a = arith_t<A>;
  using b = arith_t<B>;
  template <class T>
  static constexpr int rk() {
    return std::is_same_v<T, double> ? 4 : std::is_same_v<T, float> ? 3 : sizeof(T) == 8 ? 2 : 1;
  }
  using type = std::conditional_t<(rk<a>() >= rk<b>()), a, b>;
};
template <class T, class... Ts>
struct promote {
  using type = arith_t<T>;
};
template <class T, class U, class... Ts>
struct promote<T, U, Ts...> {
  using type = typename promote<typename promote2<T, U>::type, Ts...>::type;
};
template <class... Ts>
using promote_t = typename promote<Ts...>::type;

// Converts one element by the rules of pto/elem.hpp (elem::cast): float -> integer truncates
// toward zero and saturates, NaN -> 0; integers wrap; anything -> bool is (x != 0).
template <class D, class S>
PTO_INLINE D convert(S s) {
  using DD = std::remove_cv_t<D>;
  if constexpr (std::is_same_v<DD, std::remove_cv_t<S>>) {
    return s;
  } else if constexpr (is_f16_v<S>) {
    return convert<DD>(to_float(s));
  } else if constexpr (std::is_same_v<DD, half_t>) {
    return half_t{elem::f16_from(s)};  // one rounding (from a double or an integer too)
  } else if constexpr (std::is_same_v<DD, bf16_t>) {
    return bf16_t{elem::bf16_from(s)};
  } else {
    return elem::cast<DD>(s);
  }
}

// ---- tiles ---------------------------------------------------------------------------------------
// A local R x C buffer, row-major with row stride C, plus its runtime valid region vr x vc.
// Elements outside the valid region are padding: instructions never read them (their values are
// unspecified, and the constructor leaves the data uninitialised on purpose).
template <typename T, int R, int C>
struct Tile {
  static_assert(R > 0 && C > 0, "Tile: static shape must be positive");
  using value_type = T;
  static constexpr int rows = R, cols = C;
  alignas(64) T data[R * C];
  int vr = R, vc = C;

  PTO_INLINE T* row(int64_t r) { return data + r * C; }
  PTO_INLINE const T* row(int64_t r) const { return data + r * C; }
  PTO_INLINE T& at(int64_t r, int64_t c) { return data[r * C + c]; }
  PTO_INLINE const T& at(int64_t r, int64_t c) const { return data[r * C + c]; }
};

template <class X>
struct is_tile : std::false_type {};
template <class T, int R, int C>
struct is_tile<Tile<T, R, C>> : std::true_type {};
template <class X>
inline constexpr bool is_tile_v = is_tile<std::remove_cv_t<std::remove_reference_t<X>>>::value;

// ---- global views --------------------------------------------------------------------------------
// A 2-D strided window into a tensor in main memory: element (r, c) is ptr[r*rs + c*cs], for
// r < vr and c < vc. Strides are in elements and may be anything (0, negative, transposed).
template <typename T>
struct GlobalView {
  T* ptr;
  int64_t rs, cs, vr, vc;
};

template <typename T>
PTO_INLINE GlobalView<T> gview(T* ptr, int64_t rs, int64_t cs, int64_t vr, int64_t vc) {
  return GlobalView<T>{ptr, rs, cs, vr, vc};
}

// ---- scratch buffers -----------------------------------------------------------------------------
// Large blocks are kept for reuse: a kernel allocates its global temporaries at every call, and
// blocks of this size come from mmap or are trimmed back to the system when freed, so each call
// page-faulted them in afresh (a chain of six 2.4 MB copies ran 3x slower than with the memory
// kept). Freed blocks of at least kMinBytes are held, up to kLimitBytes in all (the least
// recently freed dropped first), and handed out again for a request of the same rounded size.
// One cache per process: its accessor is exported (see pack_buffers in gemm_kernel.hpp), so every
// loaded kernel library shares it; it is never destroyed (a buffer freed during exit still finds it).
inline namespace scratch_v1 {
class ScratchCache {
 public:
  static constexpr size_t kMinBytes = size_t(256) << 10, kLimitBytes = size_t(256) << 20;
  static size_t rounded(size_t bytes) { return (bytes + 4095) / 4096 * 4096; }
  void* take(size_t bytes) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (size_t i = blocks_.size(); i-- > 0;)
        if (blocks_[i].bytes == bytes) {
          void* p = blocks_[i].p;
          blocks_.erase(blocks_.begin() + std::ptrdiff_t(i));
          held_ -= bytes;
          return p;
        }
    }
    return ::operator new(bytes, std::align_val_t(64));
  }
  void give(void* p, size_t bytes) {
    std::vector<Block> freed;
    if (bytes > kLimitBytes) {
      freed.push_back({p, bytes});
    } else {
      std::lock_guard<std::mutex> lock(mu_);
      blocks_.push_back({p, bytes});
      held_ += bytes;
      while (held_ > kLimitBytes) {
        freed.push_back(blocks_.front());
        held_ -= blocks_.front().bytes;
        blocks_.erase(blocks_.begin());
      }
    }
    for (const Block& b : freed) ::operator delete(b.p, std::align_val_t(64));
  }

 private:
  struct Block {
    void* p;
    size_t bytes;
  };
  std::mutex mu_;
  std::vector<Block> blocks_;  // the least recently freed first
  size_t held_ = 0;
};
#if defined(__GNUC__) || defined(__clang__)
__attribute__((visibility("default")))
#endif
inline ScratchCache& scratch_cache() {
  static ScratchCache* cache = new ScratchCache;
  return *cache;
}
}  // namespace scratch_v1

// 64-byte aligned heap memory for temporaries too big for the stack. Contents start uninitialised.
template <typename T>
class ScratchBuffer {
 public:
  explicit ScratchBuffer(int64_t n) : n_(n > 0 ? n : 0) {
    if (n_ <= 0) return;
    const size_t bytes = size_t(n_) * sizeof(T);
    p_ = static_cast<T*>(bytes >= ScratchCache::kMinBytes ? scratch_cache().take(ScratchCache::rounded(bytes))
                                                          : ::operator new(bytes, std::align_val_t(64)));
  }
  ~ScratchBuffer() { release(); }
  ScratchBuffer(const ScratchBuffer&) = delete;
  ScratchBuffer& operator=(const ScratchBuffer&) = delete;
  ScratchBuffer(ScratchBuffer&& o) noexcept : p_(o.p_), n_(o.n_) {
    o.p_ = nullptr;
    o.n_ = 0;
  }
  ScratchBuffer& operator=(ScratchBuffer&& o) noexcept {
    if (this != &o) {
      release();
      p_ = o.p_;
      n_ = o.n_;
      o.p_ = nullptr;
      o.n_ = 0;
    }
    return *this;
  }
  T* data() { return p_; }
  const T* data() const { return p_; }
  int64_t size() const { return n_; }
  T& operator[](int64_t i) { return p_[i]; }
  const T& operator[](int64_t i) const { return p_[i]; }

 private:
  void release() {
    const size_t bytes = size_t(n_) * sizeof(T);
    if (p_ && bytes >= ScratchCache::kMinBytes)
      scratch_cache().give(p_, ScratchCache::rounded(bytes));
    else if (p_)
      ::operator delete(p_, std::align_val_t(64));
    p_ = nullptr;
  }
  T* p_ = nullptr;
  int64_t n_ = 0;
};

namespace detail {
PTO_INLINE int64_t imin(int64_t a, int64_t b) { return a < b ? a : b; }
PTO_INLINE int64_t imax(int64_t a, int64_t b) { return a > b ? a : b; }
PTO_INLINE int64_t clamp0(int64_t v, int64_t hi) { return v < 0 ? 0 : (v > hi ? hi : v); }
}  // namespace detail

}  // namespace pto
