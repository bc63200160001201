// Elementwise instructions: fills, unary, binary (with broadcasting), compares, select, convert.
//
// Valid-region rule (docs/isa.md): the destination's valid region is the intersection
// of the sources', where a scalar does not limit it and a source tile with a static extent of 1
// (R == 1 or C == 1) broadcasts along that dimension and does not limit it either (unless its
// valid extent there is 0, which makes the result empty). A source tile of unary instructions
// never broadcasts: dst.valid = src.valid. Everything is clamped to the destination's R x C.
//
// Compute type: binary/unary arithmetic happens in the promotion of the destination's and the
// source tiles' element types (int32 < int64 < float < double; bool counts as int32); scalar
// operands are converted to it ("weak" scalars, docs/isa.md §2). Compares use the source tiles'
// promotion (not the destination's).
//
// Element semantics (integer wrap, x / 0, NaN/inf rules): pto/elem.hpp, one function per opcode.
#pragma once
#include "pto/cpu/types.hpp"
#include "pto/cpu/vactivation.hpp"
#include "pto/cpu/vexp.hpp"
#include "pto/elem.hpp"
#include "pto/math.hpp"

namespace pto {
namespace detail {

constexpr int64_t kNoLimit = int64_t(1) << 62;

// Per-row access to a source: a pointer walked with unit stride, or one value for the whole row.
// A bool is read as its byte (x != 0): GCC does not vectorise a loop that loads `bool`s next to
// wider elements (a TSEL's mask, a compare's result read back), where it does bytes.
template <class T>
PTO_INLINE auto load_elem(const T* p, int64_t i) {
  if constexpr (std::is_same_v<T, bool>)
    return reinterpret_cast<const unsigned char*>(p)[i] != 0;
  else
    return p[i];
}

template <class T>
struct RowPtr {
  const T* p;
  template <class CT>
  PTO_INLINE CT get(int64_t i) const {
    return convert<CT>(load_elem(p, i));
  }
};
template <class V>
struct RowVal {
  V v;
  template <class CT>
  PTO_INLINE CT get(int64_t) const {
    return v;
  }
};

template <class X, int RD, int CD, bool Bcast, class = void>
struct Src;

// A scalar operand.
template <class S, int RD, int CD, bool Bcast>
struct Src<S, RD, CD, Bcast, std::enable_if_t<std::is_arithmetic_v<S>>> {
  static constexpr bool flat_ok = true;
  S v;
  PTO_INLINE int64_t lim_r() const { return kNoLimit; }
  PTO_INLINE int64_t lim_c() const { return kNoLimit; }
  template <class CT>
  PTO_INLINE RowVal<CT> row(int64_t) const {
    return {convert<CT>(v)};
  }
  template <class CT>
  PTO_INLINE RowVal<CT> flat() const {
    return {convert<CT>(v)};
  }
};

// A tile operand; with Bcast, static extents of 1 broadcast.
template <class T, int R, int C, int RD, int CD, bool Bcast>
struct Src<Tile<T, R, C>, RD, CD, Bcast, void> {
  static constexpr bool bc_r = Bcast && R == 1;
  static constexpr bool bc_c = Bcast && C == 1;
  // Rows are consecutive in memory with the destination's row stride: one flat loop will do.
  static constexpr bool flat_ok = C == CD && (!bc_r || RD == 1) && (!bc_c || CD == 1);
  const Tile<T, R, C>& t;
  PTO_INLINE int64_t lim_r() const { return bc_r ? (t.vr > 0 ? kNoLimit : 0) : t.vr; }
  PTO_INLINE int64_t lim_c() const { return bc_c ? (t.vc > 0 ? kNoLimit : 0) : t.vc; }
  template <class CT>
  PTO_INLINE auto row(int64_t r) const {
    const T* p = t.data + (bc_r ? 0 : r * C);
    if constexpr (bc_c)
      return RowVal<CT>{convert<CT>(p[0])};
    else
      return RowPtr<T>{p};
  }
  template <class CT>
  PTO_INLINE RowPtr<T> flat() const {
    return {t.data};
  }
};

// A TSEL mask: a tile whose elements are read as 0/1 (x != 0 in the mask's own type).
template <class M, int R, int C>
struct Mask {
  const Tile<M, R, C>& t;
};
template <class M>
struct RowMask {
  const M* p;
  template <class CT>
  PTO_INLINE CT get(int64_t i) const {
    return CT(convert<bool>(load_elem(p, i)));
  }
};
template <class M, int R, int C, int RD, int CD, bool Bcast>
struct Src<Mask<M, R, C>, RD, CD, Bcast, void> : Src<Tile<M, R, C>, RD, CD, Bcast, void> {
  using Base = Src<Tile<M, R, C>, RD, CD, Bcast, void>;
  PTO_INLINE Src(const Mask<M, R, C>& m) : Base{m.t} {}
  template <class CT>
  PTO_INLINE auto row(int64_t r) const {
    const M* p = this->t.data + (Base::bc_r ? 0 : r * C);
    if constexpr (Base::bc_c)
      return RowVal<CT>{CT(convert<bool>(p[0]))};
    else
      return RowMask<M>{p};
  }
  template <class CT>
  PTO_INLINE RowMask<M> flat() const {
    return {this->t.data};
  }
};

template <class X, int RD, int CD, bool Bcast>
PTO_INLINE Src<X, RD, CD, Bcast> make_src(const X& x) {
  return Src<X, RD, CD, Bcast>{x};
}

// The loop nest shared by every elementwise instruction: dst[r,c] = op(src_k[r,c]...).
template <class CT, class D, int R, int C, class Op, class... S>
inline void ew_run(Tile<D, R, C>& dst, Op op, const S&... s) {
  int64_t vr = R, vc = C;
  ((vr = imin(vr, s.lim_r()), vc = imin(vc, s.lim_c())), ...);
  if (vr < 0) vr = 0;
  if (vc < 0) vc = 0;
  constexpr bool flat_ok = (S::flat_ok && ...);
  if (flat_ok && vc == C) {
    D* d = dst.data;
    const int64_t n = vr * C;
    [&](auto... a) __attribute__((always_inline)) {
      for (int64_t i = 0; i < n; ++i) d[i] = convert<D>(op(a.template get<CT>(i)...));
    }(s.template flat<CT>()...);
  } else {
    for (int64_t r = 0; r < vr; ++r) {
      D* d = dst.data + r * C;
      [&](auto... a) __attribute__((always_inline)) {
        for (int64_t c = 0; c < vc; ++c) d[c] = convert<D>(op(a.template get<CT>(c)...));
      }(s.template row<CT>(r)...);
    }
  }
  // Written after the loops: a source may be the destination itself.
  dst.vr = int(vr);
  dst.vc = int(vc);
}

// ---- compute types -------------------------------------------------------------------------------
template <class Base, class X>
struct fold_tile {
  using type = Base;
};
template <class Base, class T, int R, int C>
struct fold_tile<Base, Tile<T, R, C>> {
  using type = promote_t<Base, T>;
};
template <class Base, class... X>
struct fold_tiles {
  using type = Base;
};
template <class Base, class X, class... Xs>
struct fold_tiles<Base, X, Xs...> {
  using type = typename fold_tiles<typename fold_tile<Base, X>::type, Xs...>::type;
};

// Arithmetic: destination and source tiles; compare: source tiles only. Scalar operands are
// converted to this type (docs/isa.md §2: `TADD d, a_i32, 1.5` adds 1).
template <class D, class... X>
using arith_ct = typename fold_tiles<arith_t<D>, X...>::type;
template <class... X>
using cmp_ct = typename fold_tiles<int32_t, X...>::type;

// ---- element operations --------------------------------------------------------------------------
// Each functor forwards to the instruction's element function in pto/elem.hpp, the one definition
// of its semantics (integer wrap, division by zero, NaN and inf rules included).
#define PTO_ELEM_OP(Name, fn)                  \
  struct Name {                                \
    template <class... T>                      \
    PTO_INLINE auto operator()(T... x) const { \
      return elem::fn(x...);                   \
    }                                          \
  };
PTO_ELEM_OP(OpExp, exp)
PTO_ELEM_OP(OpLog, log)
PTO_ELEM_OP(OpSqrt, sqrt)
PTO_ELEM_OP(OpRsqrt, rsqrt)
PTO_ELEM_OP(OpRecip, recip)
PTO_ELEM_OP(OpTanh, tanh)
PTO_ELEM_OP(OpSigmoid, sigmoid)
PTO_ELEM_OP(OpErf, erf)
PTO_ELEM_OP(OpGelu, gelu)
PTO_ELEM_OP(OpGeluTanh, gelu_tanh)
PTO_ELEM_OP(OpSilu, silu)
PTO_ELEM_OP(OpFloor, floor)
PTO_ELEM_OP(OpNeg, neg)
PTO_ELEM_OP(OpAbs, abs)
PTO_ELEM_OP(OpRelu, relu)
PTO_ELEM_OP(OpNot, lnot)
PTO_ELEM_OP(OpAdd, add)
PTO_ELEM_OP(OpSub, sub)
PTO_ELEM_OP(OpMul, mul)
PTO_ELEM_OP(OpDiv, div)
PTO_ELEM_OP(OpMax, max)
PTO_ELEM_OP(OpMin, min)
PTO_ELEM_OP(OpPow, pow)
PTO_ELEM_OP(OpAnd, land)
PTO_ELEM_OP(OpOr, lor)
PTO_ELEM_OP(OpLt, lt)
PTO_ELEM_OP(OpSin, sin)
PTO_ELEM_OP(OpCos, cos)
PTO_ELEM_OP(OpTan, tan)
PTO_ELEM_OP(OpExp2, exp2)
PTO_ELEM_OP(OpExpm1, expm1)
PTO_ELEM_OP(OpLog2, log2)
PTO_ELEM_OP(OpLog10, log10)
PTO_ELEM_OP(OpLog1p, log1p)
PTO_ELEM_OP(OpCbrt, cbrt)
PTO_ELEM_OP(OpErfc, erfc)
PTO_ELEM_OP(OpErfinv, erfinv)
PTO_ELEM_OP(OpLgamma, lgamma)
PTO_ELEM_OP(OpDigamma, digamma)
PTO_ELEM_OP(OpTrigamma, trigamma)
PTO_ELEM_OP(OpCeil, ceil)
PTO_ELEM_OP(OpRound, round)
PTO_ELEM_OP(OpTrunc, trunc)
PTO_ELEM_OP(OpSign, sign)
PTO_ELEM_OP(OpAtan2, atan2)
PTO_ELEM_OP(OpHypot, hypot)
PTO_ELEM_OP(OpCopysign, copysign)
PTO_ELEM_OP(OpFmod, fmod)
PTO_ELEM_OP(OpRem, floormod)
PTO_ELEM_OP(OpFloorDiv, floordiv)
PTO_ELEM_OP(OpGcd, gcd)
PTO_ELEM_OP(OpBNot, bnot)
PTO_ELEM_OP(OpBAnd, band)
PTO_ELEM_OP(OpBOr, bor)
PTO_ELEM_OP(OpBXor, bxor)
PTO_ELEM_OP(OpShl, shl)
PTO_ELEM_OP(OpShr, shr)
PTO_ELEM_OP(OpLe, le)
PTO_ELEM_OP(OpGt, gt)
PTO_ELEM_OP(OpGe, ge)
PTO_ELEM_OP(OpEq, eq)
PTO_ELEM_OP(OpNe, ne)
#undef PTO_ELEM_OP

struct OpMov {
  template <class T>
  PTO_INLINE T operator()(T x) const {
    return x;
  }
};
struct OpSel {
  template <class T>
  PTO_INLINE T operator()(T m, T a, T b) const {
    return elem::sel(m, a, b);
  }
};

// Pow with a scalar exponent: the common exponents avoid the scalar libm call.
struct OpSquare {
  template <class T>
  PTO_INLINE T operator()(T a) const {
    return a * a;
  }
};
struct OpCube {
  template <class T>
  PTO_INLINE T operator()(T a) const {
    return a * a * a;
  }
};
// pow(x, +-0.5) as a root: pow(-inf, 0.5) == +inf and pow(-0, 0.5) == +0, where sqrt gives NaN, -0.
struct OpPowHalf {
  template <class T>
  PTO_INLINE T operator()(T a) const {
    return a == -T(__builtin_inf()) ? T(__builtin_inf()) : elem::sqrt(a) + T(0);
  }
};
struct OpPowMinusHalf {
  template <class T>
  PTO_INLINE T operator()(T a) const {
    return a == -T(__builtin_inf()) ? T(0) : T(1) / (elem::sqrt(a) + T(0));
  }
};

// ---- drivers -------------------------------------------------------------------------------------
template <class CT, class D, int R, int C, class X, class Op>
inline void unary_ct(Tile<D, R, C>& dst, const X& src, Op op) {
  ew_run<CT>(dst, op, make_src<X, R, C, false>(src));
}
template <class D, int R, int C, class X, class Op>
inline void unary(Tile<D, R, C>& dst, const X& src, Op op) {
  unary_ct<arith_ct<D, X>>(dst, src, op);
}
template <class D, int R, int C, class A, class B, class Op>
inline void binary(Tile<D, R, C>& dst, const A& a, const B& b, Op op) {
  ew_run<arith_ct<D, A, B>>(dst, op, make_src<A, R, C, true>(a), make_src<B, R, C, true>(b));
}
template <class D, int R, int C, class A, class B, class Op>
inline void compare(Tile<D, R, C>& dst, const A& a, const B& b, Op op) {
  ew_run<cmp_ct<A, B>>(dst, op, make_src<A, R, C, true>(a), make_src<B, R, C, true>(b));
}

// sqrt: libm's sqrtf may set errno, which stops GCC from vectorising it unless the kernel is
// built with -fno-math-errno; the SIMD builtins below do not have that problem.
PTO_INLINE void sqrt_span(float* d, const float* s, int64_t n, bool recip) {
  int64_t done = 0;
#if !defined(__NO_MATH_ERRNO__) && defined(__GNUC__) && !defined(__clang__) && \
    (defined(__AVX512F__) || defined(__AVX__) || defined(__SSE2__))
#if defined(__AVX512F__)
  typedef float V __attribute__((vector_size(64)));
#define PTO_VSQRT(v) __builtin_ia32_sqrtps512_mask(v, v, (unsigned short)-1, 4)
#elif defined(__AVX__)
  typedef float V __attribute__((vector_size(32)));
#define PTO_VSQRT(v) __builtin_ia32_sqrtps256(v)
#else
  typedef float V __attribute__((vector_size(16)));
#define PTO_VSQRT(v) __builtin_ia32_sqrtps(v)
#endif
  constexpr int64_t W = int64_t(sizeof(V) / sizeof(float));
  done = n / W * W;
  for (int64_t i = 0; i < done; i += W) {
    V v;
    __builtin_memcpy(&v, s + i, sizeof v);
    v = PTO_VSQRT(v);
    if (recip) v = 1.0f / v;
    __builtin_memcpy(d + i, &v, sizeof v);
  }
#undef PTO_VSQRT
#endif
  for (int64_t i = done; i < n; ++i) d[i] = recip ? elem::rsqrt(s[i]) : elem::sqrt(s[i]);
}

// A unary float instruction through span(d, s, n) over src's valid region: one span for whole
// rows laid out alike, else one per row.
template <int R, int C, int R2, int C2, class Span>
inline void float_span_tile(Tile<float, R, C>& dst, const Tile<float, R2, C2>& src, Span span) {
  const int64_t vr = clamp0(src.vr, R), vc = clamp0(src.vc, C);
  if (C == C2 && vc == C) {
    span(dst.data, src.data, vr * C);
  } else {
    for (int64_t r = 0; r < vr; ++r) span(dst.data + r * C, src.data + r * C2, vc);
  }
  dst.vr = int(vr);
  dst.vc = int(vc);
}

// The float unary instructions with a vector form over spans (vexp.hpp, vactivation.hpp), whose results
// are their functor's bit for bit: span_form<Op>(d, s, n) computes d[i] = Op{}(s[i]).
template <class Op>
constexpr bool has_span_form =
    std::is_same_v<Op, OpExp> || std::is_same_v<Op, OpGelu> || std::is_same_v<Op, OpTanh> ||
    std::is_same_v<Op, OpSigmoid> || std::is_same_v<Op, OpSilu>;
template <class Op>
PTO_INLINE void span_form(float* d, const float* s, int64_t n) {
  static_assert(has_span_form<Op>);
  if constexpr (std::is_same_v<Op, OpExp>)
    exp_span(d, s, n);
  else if constexpr (std::is_same_v<Op, OpGelu>)
    gelu_span(d, s, n);
  else if constexpr (std::is_same_v<Op, OpTanh>)
    tanh_span(d, s, n);
  else if constexpr (std::is_same_v<Op, OpSigmoid>)
    sigmoid_span(d, s, n);
  else
    silu_span(d, s, n);
}

template <int R, int C, int R2, int C2>
inline void sqrt_tile(Tile<float, R, C>& dst, const Tile<float, R2, C2>& src, bool recip) {
  float_span_tile(dst, src, [recip](float* d, const float* s, int64_t n) { sqrt_span(d, s, n, recip); });
}

}  // namespace detail

// ---- fills ---------------------------------------------------------------------------------------
template <class D, int R, int C, class S>
inline void TEXPANDS(Tile<D, R, C>& dst, S s) {
  const D v = convert<D>(s);
  for (int64_t i = 0; i < int64_t(R) * C; ++i) dst.data[i] = v;
  dst.vr = R;
  dst.vc = C;
}

// dst[r,c] = start + c
template <class D, int R, int C, class S>
inline void TCI(Tile<D, R, C>& dst, S start) {
  using CT = arith_t<D>;
  const CT s0 = convert<CT>(start);
  for (int64_t c = 0; c < C; ++c) dst.data[c] = convert<D>(elem::add(s0, CT(c)));
  for (int64_t r = 1; r < R; ++r)
    for (int64_t c = 0; c < C; ++c) dst.data[r * C + c] = dst.data[c];
  dst.vr = R;
  dst.vc = C;
}

// ---- unary ---------------------------------------------------------------------------------------
#define PTO_DEFINE_UNARY(NAME, OP)                                   \
  template <class D, int R, int C, class S, int R2, int C2>          \
  inline void NAME(Tile<D, R, C>& dst, const Tile<S, R2, C2>& src) { \
    detail::unary(dst, src, detail::OP{});                           \
  }
PTO_DEFINE_UNARY(TMOV, OpMov)
PTO_DEFINE_UNARY(TCVT, OpMov)
PTO_DEFINE_UNARY(TNEG, OpNeg)
PTO_DEFINE_UNARY(TABS, OpAbs)
PTO_DEFINE_UNARY(TLOG, OpLog)
PTO_DEFINE_UNARY(TRECIP, OpRecip)
PTO_DEFINE_UNARY(TRELU, OpRelu)
PTO_DEFINE_UNARY(TERF, OpErf)
PTO_DEFINE_UNARY(TGELU_TANH, OpGeluTanh)
PTO_DEFINE_UNARY(TFLOOR, OpFloor)
PTO_DEFINE_UNARY(TNOT, OpNot)
PTO_DEFINE_UNARY(TTAN, OpTan)
PTO_DEFINE_UNARY(TEXP2, OpExp2)
PTO_DEFINE_UNARY(TEXPM1, OpExpm1)
PTO_DEFINE_UNARY(TLOG2, OpLog2)
PTO_DEFINE_UNARY(TLOG10, OpLog10)
PTO_DEFINE_UNARY(TLOG1P, OpLog1p)
PTO_DEFINE_UNARY(TCBRT, OpCbrt)
PTO_DEFINE_UNARY(TCEIL, OpCeil)
PTO_DEFINE_UNARY(TROUND, OpRound)
PTO_DEFINE_UNARY(TTRUNC, OpTrunc)
PTO_DEFINE_UNARY(TSIGN, OpSign)
PTO_DEFINE_UNARY(TBNOT, OpBNot)
PTO_DEFINE_UNARY(TERFC, OpErfc)
PTO_DEFINE_UNARY(TERFINV, OpErfinv)
PTO_DEFINE_UNARY(TLGAMMA, OpLgamma)
PTO_DEFINE_UNARY(TDIGAMMA, OpDigamma)
PTO_DEFINE_UNARY(TTRIGAMMA, OpTrigamma)
#undef PTO_DEFINE_UNARY

template <class D, int R, int C, class S, int R2, int C2>
inline void TSQRT(Tile<D, R, C>& dst, const Tile<S, R2, C2>& src) {
  if constexpr (std::is_same_v<D, float> && std::is_same_v<S, float>)
    detail::sqrt_tile(dst, src, false);
  else
    detail::unary(dst, src, detail::OpSqrt{});
}
// float exp and the activations with a span form (vexp.hpp, vactivation.hpp): math::'s results in
// fewer instructions.
#define PTO_DEFINE_SPAN_UNARY(NAME, OP)                                 \
  template <class D, int R, int C, class S, int R2, int C2>             \
  inline void NAME(Tile<D, R, C>& dst, const Tile<S, R2, C2>& src) {    \
    if constexpr (std::is_same_v<D, float> && std::is_same_v<S, float>) \
      detail::float_span_tile(dst, src, detail::span_form<detail::OP>); \
    else                                                                \
      detail::unary(dst, src, detail::OP{});                            \
  }
PTO_DEFINE_SPAN_UNARY(TEXP, OpExp)
PTO_DEFINE_SPAN_UNARY(TGELU, OpGelu)
PTO_DEFINE_SPAN_UNARY(TTANH, OpTanh)
PTO_DEFINE_SPAN_UNARY(TSIGMOID, OpSigmoid)
PTO_DEFINE_SPAN_UNARY(TSILU, OpSilu)
#undef PTO_DEFINE_SPAN_UNARY
template <class D, int R, int C, class S, int R2, int C2>
inline void TRSQRT(Tile<D, R, C>& dst, const Tile<S, R2, C2>& src) {
  if constexpr (std::is_same_v<D, float> && std::is_same_v<S, float>)
    detail::sqrt_tile(dst, src, true);
  else
    detail::unary(dst, src, detail::OpRsqrt{});
}

// ---- binary / compare ----------------------------------------------------------------------------
#define PTO_DEFINE_BINARY(NAME, OP, DRIVER)                      \
  template <class D, int R, int C, class A, class B>             \
  inline void NAME(Tile<D, R, C>& dst, const A& a, const B& b) { \
    detail::DRIVER(dst, a, b, detail::OP{});                     \
  }
PTO_DEFINE_BINARY(TADD, OpAdd, binary)
PTO_DEFINE_BINARY(TSUB, OpSub, binary)
PTO_DEFINE_BINARY(TMUL, OpMul, binary)
PTO_DEFINE_BINARY(TDIV, OpDiv, binary)
PTO_DEFINE_BINARY(TMAX, OpMax, binary)
PTO_DEFINE_BINARY(TMIN, OpMin, binary)
PTO_DEFINE_BINARY(TAND, OpAnd, binary)
PTO_DEFINE_BINARY(TOR, OpOr, binary)
PTO_DEFINE_BINARY(TATAN2, OpAtan2, binary)
PTO_DEFINE_BINARY(THYPOT, OpHypot, binary)
PTO_DEFINE_BINARY(TCOPYSIGN, OpCopysign, binary)
PTO_DEFINE_BINARY(TFMOD, OpFmod, binary)
PTO_DEFINE_BINARY(TREM, OpRem, binary)
PTO_DEFINE_BINARY(TFLOORDIV, OpFloorDiv, binary)
PTO_DEFINE_BINARY(TGCD, OpGcd, binary)
PTO_DEFINE_BINARY(TBAND, OpBAnd, binary)
PTO_DEFINE_BINARY(TBOR, OpBOr, binary)
PTO_DEFINE_BINARY(TBXOR, OpBXor, binary)
PTO_DEFINE_BINARY(TSHL, OpShl, binary)
PTO_DEFINE_BINARY(TSHR, OpShr, binary)
PTO_DEFINE_BINARY(TCMP_LT, OpLt, compare)
PTO_DEFINE_BINARY(TCMP_LE, OpLe, compare)
PTO_DEFINE_BINARY(TCMP_GT, OpGt, compare)
PTO_DEFINE_BINARY(TCMP_GE, OpGe, compare)
PTO_DEFINE_BINARY(TCMP_EQ, OpEq, compare)
PTO_DEFINE_BINARY(TCMP_NE, OpNe, compare)
#undef PTO_DEFINE_BINARY

template <class D, int R, int C, class A, class B>
inline void TPOW(Tile<D, R, C>& dst, const A& a, const B& b) {
  using CT = detail::arith_ct<D, A, B>;
  if constexpr (is_tile_v<A> && std::is_arithmetic_v<B> && std::is_floating_point_v<CT>) {
    const CT e = CT(b);
    if (e == CT(1)) return detail::unary_ct<CT>(dst, a, detail::OpMov{});
    if (e == CT(2)) return detail::unary_ct<CT>(dst, a, detail::OpSquare{});
    if (e == CT(3)) return detail::unary_ct<CT>(dst, a, detail::OpCube{});
    if (e == CT(-1)) return detail::unary_ct<CT>(dst, a, detail::OpRecip{});
    if (e == CT(0.5)) return detail::unary_ct<CT>(dst, a, detail::OpPowHalf{});
    if (e == CT(-0.5)) return detail::unary_ct<CT>(dst, a, detail::OpPowMinusHalf{});
  }
  detail::binary(dst, a, b, detail::OpPow{});
}

// dst = mask != 0 ? a : b. The mask is tested in its own type (elem::sel): it is loaded into the
// compute type as 0/1, so a NaN or fractional float mask counts as true, as in the interpreter.
template <class D, int R, int C, class M, int RM, int CM, class A, class B>
inline void TSEL(Tile<D, R, C>& dst, const Tile<M, RM, CM>& mask, const A& a, const B& b) {
  using CT = detail::arith_ct<D, A, B>;
  detail::ew_run<CT>(dst, detail::OpSel{}, detail::make_src<detail::Mask<M, RM, CM>, R, C, true>({mask}),
                     detail::make_src<A, R, C, true>(a), detail::make_src<B, R, C, true>(b));
}

}  // namespace pto
