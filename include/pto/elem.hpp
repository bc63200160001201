// The element semantics of the PTO ISA: one function per instruction, templated on the type the
// instruction computes in (int32_t, int64_t, float, double). This header is the one definition of
// what an instruction does to one element; every backend calls it: the reference interpreter
// (src/backends/interp/, computing floats in double), the CPU kernels (include/pto/cpu/*.hpp,
// computing f32 in float; their SIMD fast paths are tested to agree with these functions), and
// later the CUDA backend. The rules are those of docs/isa.md §2 and §7; change both together.
//
// How to add an element function (for a new instruction):
//   1. Write it below, `template <class T> PTO_INLINE T name(T x)`, for every compute type:
//      integers with the wrap/zero-division rules below (`if constexpr (is_int_v<T>)`), floats with
//      IEEE semantics and a defined value at +-inf and NaN. Transcendental cores for float/double go
//      into pto/math.hpp; call them from here.
//   2. Call it from the interpreter (src/backends/interp/elementwise.cpp: `unary`/`binary`) and from
//      the CPU header (a functor in include/pto/cpu/elementwise.hpp that forwards to it).
//   3. Document the edge cases in docs/isa.md and add them to tests/cpp/test_elem_semantics.cpp.
//
// Rules (docs/isa.md §2):
// - Integers are two's complement and wrap on overflow (add, sub, mul, neg, abs, pow, sums).
// - Integer division truncates toward zero; x / 0 == 0 and INT_MIN / -1 == INT_MIN (no trap).
// - float -> integer truncates toward zero and saturates at the integer's range; NaN -> 0.
//   integer -> narrower integer wraps; anything -> bool is x != 0 (NaN is true).
// - Float functions of an integer tile compute in double and convert back by the rule above.
// - max/min propagate NaN; compares follow IEEE (NaN compares unequal to everything).
//
// Plain C++17, compiler builtins only (no <cmath>, no host-only calls): it must compile into a
// run-time-compiled kernel quickly and under a device compiler.
#pragma once
#include <cstdint>
#include <limits>
#include <type_traits>

#include "pto/base.hpp"
#include "pto/math.hpp"
#include "pto/special.hpp"

namespace pto {
namespace elem {

template <class T>
inline constexpr bool is_int_v = std::is_integral_v<T>;
template <class T>
inline constexpr bool is_float_v = std::is_floating_point_v<T>;

// ---- conversion ---------------------------------------------------------------------------------
// D, S: bool, int8_t, uint8_t, int16_t, int32_t, int64_t, float, double. (f16/bf16: below.)
template <class D, class S>
PTO_INLINE D cast(S x) {
  if constexpr (std::is_same_v<D, S>) {
    return x;
  } else if constexpr (std::is_same_v<D, bool>) {
    return D(x != S(0));
  } else if constexpr (is_int_v<D> && is_float_v<S>) {
    // Saturating, NaN -> 0. Every select is computed unconditionally (the conversion sees only
    // in-range values), so loops over it vectorise.
    using L = std::numeric_limits<D>;
    constexpr S lo = S(L::min());                 // 0 / -2^(bits-1): exact in float and double
    constexpr S hi = S(2) * S(L::max() / 2 + 1);  // 2^bits / 2^(bits-1): the first value out of range
    const S c = x == x ? x : S(0);                // NaN -> 0
    const S in = c < lo ? lo : (c < hi ? c : lo);
    D r = D(in);
    r = c >= hi ? L::max() : r;
    return r;
  } else if constexpr (is_int_v<D> && is_int_v<S>) {
    return D(std::make_unsigned_t<D>(x));  // wraps modulo 2^bits (GCC/Clang/NVCC define it)
  } else {
    return D(x);  // to float: round to nearest even; overflow gives +-inf
  }
}

// ---- 16-bit storage floats (f16 = IEEE binary16, bf16 = bfloat16), as their bits ------------------
// Branch-free (the loops that convert whole rows vectorise). Every conversion to them rounds once,
// to nearest even (overflow: +-inf; NaN stays a quiet NaN): from a float directly, from a double or
// an integer through float_round_to_odd.
PTO_INLINE float f16_to_float(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000u) << 16;
  uint32_t em = h & 0x7fffu;
  // Shifting exponent+mantissa into float position and multiplying by 2^112 rebiases the exponent
  // and turns half subnormals into float normals exactly.
  float mag = bit_cast<float>(em << 13) * 0x1p112f;
  uint32_t special = (em << 13) | 0x7f800000u;  // inf / NaN keep their payload
  uint32_t m = em >= 0x7c00u ? special : bit_cast<uint32_t>(mag);
  return bit_cast<float>(m | sign);
}
PTO_INLINE uint16_t f16_from_float(float f) {
  uint32_t x = bit_cast<uint32_t>(f);
  uint32_t sign = (x >> 16) & 0x8000u;
  x &= 0x7fffffffu;
  // Normal half range: rebias, add the rounding bias (ties to even), drop 13 bits.
  uint32_t odd = (x >> 13) & 1u;
  uint32_t normal = (x + 0xc8000fffu + odd) >> 13;  // 0xc8000000 == (15 - 127) << 23 (mod 2^32)
  // Subnormal half range: adding 0.5f aligns the value so the FPU's own rounding (to nearest
  // even) yields the half mantissa in the low bits.
  uint32_t sub = bit_cast<uint32_t>(bit_cast<float>(x) + 0.5f) - 0x3f000000u;
  uint32_t r = x < 0x38800000u ? sub : normal;
  r = x >= 0x477ff000u ? 0x7c00u : r;                          // rounds to >= 65520: infinity
  r = x > 0x7f800000u ? (0x7e00u | ((x >> 13) & 0x3ffu)) : r;  // NaN stays (quiet) NaN
  return uint16_t(r | sign);
}
PTO_INLINE float bf16_to_float(uint16_t h) { return bit_cast<float>(uint32_t(h) << 16); }
PTO_INLINE uint16_t bf16_from_float(float f) {
  uint32_t x = bit_cast<uint32_t>(f);
  uint32_t rounded = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
  uint32_t nan = (x >> 16) | 0x40u;
  bool is_nan = (x & 0x7fffffffu) > 0x7f800000u;
  return uint16_t(is_nan ? nan : rounded);
}

// x as a float rounded to odd (toward zero, then the last bit set if anything was lost): rounding
// that float to nearest even in a format of at most 22 significant bits (f16, bf16) gives the same
// result as rounding x directly, which converting x to float first (a second rounding) would not:
// f64 1 + 2^-11 + 2^-40 is f16 1 + 2^-10, not 1.
template <class S>
PTO_INLINE float float_round_to_odd(S x) {
  if constexpr (std::is_same_v<S, float>) {
    return x;
  } else if constexpr (is_float_v<S>) {
    const float f = float(x);  // nearest even; +-inf past the float range
    uint32_t bits = bit_cast<uint32_t>(f);
    const bool inexact = S(f) != x && x == x;
    bits -= inexact && math::fabs(S(f)) > math::fabs(x) ? 1u : 0u;  // toward zero (inf -> FLT_MAX)
    return bit_cast<float>(bits | (inexact ? 1u : 0u));
  } else {
    static_assert(is_int_v<S> && sizeof(S) <= 8, "float_round_to_odd: float or integer source");
    const bool negative = x < S(0);
    const uint64_t u = negative ? uint64_t(0) - uint64_t(x) : uint64_t(x);
    if (u < (uint64_t(1) << 24)) return float(x);    // exact
    const int shift = 64 - __builtin_clzll(u) - 24;  // keep 24 significant bits
    const uint64_t kept = (u >> shift) | ((u & ((uint64_t(1) << shift) - 1)) != 0 ? 1u : 0u);
    const float mag = float(kept) * float(uint64_t(1) << shift);  // both exact
    return negative ? -mag : mag;
  }
}
template <class S>
PTO_INLINE uint16_t f16_from(S x) {
  return f16_from_float(float_round_to_odd(x));
}
template <class S>
PTO_INLINE uint16_t bf16_from(S x) {
  return bf16_from_float(float_round_to_odd(x));
}

// ---- integer arithmetic without undefined behaviour --------------------------------------------
// Computed in an unsigned type at least as wide as `unsigned int`: a narrower unsigned type would be
// promoted to (signed) int, where 16-bit 0xFFFF * 0xFFFF overflows (undefined behaviour).
template <class T>
using wrap_unsigned_t = decltype(std::make_unsigned_t<T>(0) + 0u);
template <class T>
PTO_INLINE T wrap_add(T a, T b) {
  using U = wrap_unsigned_t<T>;
  return T(U(a) + U(b));
}
template <class T>
PTO_INLINE T wrap_sub(T a, T b) {
  using U = wrap_unsigned_t<T>;
  return T(U(a) - U(b));
}
template <class T>
PTO_INLINE T wrap_mul(T a, T b) {
  using U = wrap_unsigned_t<T>;
  return T(U(a) * U(b));
}

// ---- unary --------------------------------------------------------------------------------------
template <class T>
PTO_INLINE T neg(T x) {
  if constexpr (is_int_v<T>)
    return wrap_sub(T(0), x);
  else
    return -x;
}
template <class T>
PTO_INLINE T abs(T x) {
  if constexpr (is_int_v<T>)
    return x < T(0) ? neg(x) : x;  // abs(INT_MIN) == INT_MIN
  else
    return math::fabs(x);
}

// A float function f applied to an integer: computed in double, converted back (saturating).
template <class T, class F>
PTO_INLINE T via_double(T x, F f) {
  if constexpr (is_float_v<T>)
    return f(x);
  else
    return cast<T>(f(double(x)));
}
#define PTO_ELEM_FLOAT_FN(name, body)                                                 \
  template <class T>                                                                  \
  PTO_INLINE T name(T x) {                                                            \
    return via_double(x, [](auto v) __attribute__((always_inline)) { return body; }); \
  }
PTO_ELEM_FLOAT_FN(exp, math::exp(v))                      // exp(-inf) = 0, exp(+inf) = +inf
PTO_ELEM_FLOAT_FN(log, math::log(v))                      // log(0) = -inf, log(x < 0) = NaN, log(+inf) = +inf
PTO_ELEM_FLOAT_FN(sqrt, math::sqrt(v))                    // sqrt(x < 0) = NaN
PTO_ELEM_FLOAT_FN(rsqrt, decltype(v)(1) / math::sqrt(v))  // rsqrt(0) = +inf
PTO_ELEM_FLOAT_FN(recip, decltype(v)(1) / v)              // recip(0) = +inf; of an int: 0 -> max
PTO_ELEM_FLOAT_FN(tanh, math::tanh(v))                    // tanh(+-inf) = +-1
PTO_ELEM_FLOAT_FN(sigmoid, math::sigmoid(v))              // sigmoid(-inf) = 0, (+inf) = 1
PTO_ELEM_FLOAT_FN(erf, math::erf(v))                      // erf(+-inf) = +-1
PTO_ELEM_FLOAT_FN(gelu, math::gelu(v))                    // x/2 (1 + erf(x/sqrt2)); (-inf) = -0
PTO_ELEM_FLOAT_FN(gelu_tanh, math::gelu_tanh(v))          // tanh form; (-inf) = -0
PTO_ELEM_FLOAT_FN(silu, math::silu(v))                    // x sigmoid(x); (-inf) = -0
PTO_ELEM_FLOAT_FN(sin, math::sin(v))                      // sin(+-inf) = NaN
PTO_ELEM_FLOAT_FN(cos, math::cos(v))                      // cos(+-inf) = NaN
PTO_ELEM_FLOAT_FN(tan, math::tan(v))                      // tan(+-inf) = NaN
PTO_ELEM_FLOAT_FN(exp2, math::exp2(v))                    // 2^x, exact for integral x in range
PTO_ELEM_FLOAT_FN(expm1, math::expm1(v))                  // e^x - 1, accurate near 0
PTO_ELEM_FLOAT_FN(log2, math::log2(v))                    // log2(0) = -inf, (x < 0) = NaN
PTO_ELEM_FLOAT_FN(log10, math::log10(v))                  // log10(0) = -inf, (x < 0) = NaN
PTO_ELEM_FLOAT_FN(log1p, math::log1p(v))                  // log(1 + x), accurate near 0; (-1) = -inf
PTO_ELEM_FLOAT_FN(cbrt, math::cbrt(v))                    // real cube root: cbrt(-8) = -2
PTO_ELEM_FLOAT_FN(erfc, math::erfc(v))                    // 1 - erf(x) without cancellation
PTO_ELEM_FLOAT_FN(erfinv, math::erfinv(v))                // erfinv(+-1) = +-inf, |x| > 1: NaN
PTO_ELEM_FLOAT_FN(lgamma, math::lgamma(v))                // log|Gamma(x)|; poles and +-inf: +inf
PTO_ELEM_FLOAT_FN(digamma, math::digamma(v))              // (+-0) = -+inf, poles and -inf: NaN
PTO_ELEM_FLOAT_FN(trigamma, math::trigamma(v))            // poles: +inf, (+inf) = 0, (-inf) = NaN
#undef PTO_ELEM_FLOAT_FN

template <class T>
PTO_INLINE T floor(T x) {
  if constexpr (is_int_v<T>)
    return x;
  else
    return math::floor(x);
}
// Rounding to an integral value; integers are integral already.
#define PTO_ELEM_ROUNDING_FN(name, core) \
  template <class T>                     \
  PTO_INLINE T name(T x) {               \
    if constexpr (is_int_v<T>)           \
      return x;                          \
    else                                 \
      return math::core(x);              \
  }
PTO_ELEM_ROUNDING_FN(ceil, ceil)
PTO_ELEM_ROUNDING_FN(round, rint)  // half to even, as torch.round and numpy.round: round(2.5) = 2
PTO_ELEM_ROUNDING_FN(trunc, trunc)
#undef PTO_ELEM_ROUNDING_FN
template <class T>
PTO_INLINE T sign(T x) {  // -1, 0 or 1; sign(-0.0) = +0 and sign(NaN) = 0, as torch.sign (NumPy: NaN)
  return T((x > T(0)) - (x < T(0)));
}
template <class T>
PTO_INLINE T relu(T x) {
  return x < T(0) ? T(0) : x;  // NaN stays NaN, -0.0 stays -0.0
}
template <class T>
PTO_INLINE T lnot(T x) {
  return x == T(0) ? T(1) : T(0);  // NaN is true, so !NaN == 0
}
// Bitwise not (two's complement). Integers only in the front end; a float is first converted to
// int64 by cast (saturating) and the result converted back.
template <class T>
PTO_INLINE T bnot(T x) {
  if constexpr (is_float_v<T>)
    return T(bnot(cast<int64_t>(x)));
  else
    return T(~x);
}

// ---- binary -------------------------------------------------------------------------------------
template <class T>
PTO_INLINE T add(T a, T b) {
  if constexpr (is_int_v<T>)
    return wrap_add(a, b);
  else
    return a + b;
}
template <class T>
PTO_INLINE T sub(T a, T b) {
  if constexpr (is_int_v<T>)
    return wrap_sub(a, b);
  else
    return a - b;
}
template <class T>
PTO_INLINE T mul(T a, T b) {
  if constexpr (is_int_v<T>)
    return wrap_mul(a, b);
  else
    return a * b;
}
// Integers: truncating division, x / 0 == 0, INT_MIN / -1 == INT_MIN.
template <class T>
PTO_INLINE T div(T a, T b) {
  if constexpr (is_int_v<T>) {
    if (b == T(0)) return T(0);
    if (b == T(-1)) return neg(a);
    return T(a / b);
  } else {
    return a / b;
  }
}
// Remainder of div (sign of the dividend); x % 0 == 0.
template <class T>
PTO_INLINE T rem(T a, T b) {
  if constexpr (is_int_v<T>) {
    if (b == T(0) || b == T(-1)) return T(0);
    return T(a % b);
  } else {
    return __builtin_fmod(a, b);
  }
}
// Python's // and % (floor division; the remainder has the divisor's sign), as the scalar
// expression language uses them. Integers: x // 0 == 0, x % 0 == 0.
template <class T>
PTO_INLINE T floordiv(T a, T b) {
  if constexpr (is_int_v<T>) {
    const T q = div(a, b), r = rem(a, b);
    return (r != T(0) && ((r < T(0)) != (b < T(0)))) ? wrap_sub(q, T(1)) : q;
  } else {
    return math::floor(a / b);
  }
}
template <class T>
PTO_INLINE T floormod(T a, T b) {
  const T r = rem(a, b);
  if constexpr (is_int_v<T>)
    return (r != T(0) && ((r < T(0)) != (b < T(0)))) ? wrap_add(r, b) : r;
  else
    return (r != T(0) && ((r < T(0)) != (b < T(0)))) ? r + b : r;
}
template <class T>
PTO_INLINE T max(T a, T b) {
  return (a > b || a != a) ? a : b;  // NaN in a: a; NaN in b: the compare fails -> b
}
template <class T>
PTO_INLINE T min(T a, T b) {
  return (a < b || a != a) ? a : b;
}
// Integers: exact by squaring, wrapping; a negative exponent gives the truncated 1 / a^-b
// (1 for a == 1, +-1 for a == -1, 0 otherwise; 0 ** negative == 0, as integer division by 0).
template <class T>
PTO_INLINE T pow(T a, T b) {
  if constexpr (is_int_v<T>) {
    if (b < T(0)) return a == T(1) ? T(1) : (a == T(-1) ? ((b & T(1)) ? T(-1) : T(1)) : T(0));
    T r = T(1);
    for (; b != T(0); b = T(b >> 1)) {
      if (b & T(1)) r = wrap_mul(r, a);
      a = wrap_mul(a, a);
    }
    return r;
  } else {
    return math::pow(a, b);
  }
}
// Float functions of two arguments; of integers: computed in double, converted back.
template <class T, class F>
PTO_INLINE T via_double2(T a, T b, F f) {
  if constexpr (is_float_v<T>)
    return f(a, b);
  else
    return cast<T>(f(double(a), double(b)));
}
template <class T>
PTO_INLINE T atan2(T a, T b) {  // the angle of (b, a) in [-pi, pi]
  return via_double2(a, b, [](auto x, auto y) __attribute__((always_inline)) { return math::atan2(x, y); });
}
template <class T>
PTO_INLINE T hypot(T a, T b) {  // sqrt(a^2 + b^2) without overflow; hypot(inf, NaN) = inf
  return via_double2(a, b, [](auto x, auto y) __attribute__((always_inline)) { return math::hypot(x, y); });
}
template <class T>
PTO_INLINE T copysign(T a, T b) {  // |a| with the sign of b (of -0.0 and NaN too)
  if constexpr (is_int_v<T>)
    return b < T(0) ? neg(abs(a)) : abs(a);
  else
    return math::copysign(a, b);
}
// fmod: the remainder of truncating division (sign of the dividend): rem. remainder (torch) and
// Python's %: floormod. Both: x % 0 == 0 for integers, NaN for floats.
template <class T>
PTO_INLINE T fmod(T a, T b) {
  return rem(a, b);
}
// Greatest common divisor of |a| and |b| (gcd(0, 0) = 0), as torch.gcd; integers only in the
// front end. Integers: Euclid on the magnitudes as unsigned (|INT_MIN| is 2^31, so gcd(INT_MIN, 6)
// is 2), the result wrapped (gcd(INT_MIN, 0) = INT_MIN). Floats: the same steps, exact with fmod;
// NaN when an operand is NaN or +-inf (their remainders are NaN and would never reach 0).
template <class T>
PTO_INLINE T gcd(T a, T b) {
  if constexpr (is_int_v<T>) {
    using U = wrap_unsigned_t<T>;
    U x = a < T(0) ? U(0) - U(a) : U(a), y = b < T(0) ? U(0) - U(b) : U(b);
    while (y != U(0)) {
      const U t = U(x % y);
      x = y;
      y = t;
    }
    return T(x);
  } else {
    a = abs(a);
    b = abs(b);
    constexpr T big = std::numeric_limits<T>::max();
    if (!(a <= big && b <= big)) return std::numeric_limits<T>::quiet_NaN();
    while (b != T(0)) {
      const T t = rem(a, b);
      a = b;
      b = t;
    }
    return a;
  }
}

template <class T>
PTO_INLINE T land(T a, T b) {
  return T((a != T(0)) & (b != T(0)));
}
template <class T>
PTO_INLINE T lor(T a, T b) {
  return T((a != T(0)) | (b != T(0)));
}

// ---- bitwise and shifts (integers; floats as bnot) -------------------------------------------------
// A narrow type (i8/u8/i16) computes in i32 and is narrowed when stored: the same bits as the
// operation in the narrow type, shifts included (a shift past the narrow width leaves 0 or -1).
#define PTO_ELEM_BITWISE(name, expr)                      \
  template <class T>                                      \
  PTO_INLINE T name(T a, T b) {                           \
    if constexpr (is_float_v<T>)                          \
      return T(name(cast<int64_t>(a), cast<int64_t>(b))); \
    else                                                  \
      return expr;                                        \
  }
PTO_ELEM_BITWISE(band, T(a& b))
PTO_ELEM_BITWISE(bor, T(a | b))
PTO_ELEM_BITWISE(bxor, T(a ^ b))
#undef PTO_ELEM_BITWISE
// a << b as torch and NumPy: 0 when b < 0 or b >= the width; bits shifted out are lost (wraps).
template <class T>
PTO_INLINE T shl(T a, T b) {
  if constexpr (is_float_v<T>) {
    return T(shl(cast<int64_t>(a), cast<int64_t>(b)));
  } else {
    using U = std::make_unsigned_t<T>;
    constexpr T bits = T(sizeof(T) * 8);
    const bool in = b >= T(0) && b < bits;
    const T r = T(U(a) << (U(b) & U(bits - 1)));
    return in ? r : T(0);
  }
}
// a >> b, arithmetic for signed types; b < 0 or b >= the width gives the sign fill (0 or -1).
template <class T>
PTO_INLINE T shr(T a, T b) {
  if constexpr (is_float_v<T>) {
    return T(shr(cast<int64_t>(a), cast<int64_t>(b)));
  } else {
    constexpr T bits = T(sizeof(T) * 8);
    const bool in = b >= T(0) && b < bits;
    return T(a >> (in ? b : bits - 1));
  }
}

// ---- compare (IEEE: with a NaN only ne is true) --------------------------------------------------
template <class T>
PTO_INLINE bool lt(T a, T b) {
  return a < b;
}
template <class T>
PTO_INLINE bool le(T a, T b) {
  return a <= b;
}
template <class T>
PTO_INLINE bool gt(T a, T b) {
  return a > b;
}
template <class T>
PTO_INLINE bool ge(T a, T b) {
  return a >= b;
}
template <class T>
PTO_INLINE bool eq(T a, T b) {
  return a == b;
}
template <class T>
PTO_INLINE bool ne(T a, T b) {
  return a != b;
}

// ---- select -------------------------------------------------------------------------------------
// The mask is tested in its own type (NaN counts as true), the values are in the result's type.
template <class M, class T>
PTO_INLINE T sel(M mask, T a, T b) {
  return mask != M(0) ? a : b;
}

}  // namespace elem
}  // namespace pto
