// bf16 x bf16 -> f32 whole-matrix products on AMX tiles (TDPBF16PS): the global kernel family
// bf16mm::Amx of pto/cpu/matmul_lowp.hpp's driver, used by MMATMUL of bf16 operands where
// pto::amx::enabled() (pto/cpu/amx.hpp).
//
// Semantics (docs/isa.md, "bf16 matmul"): the products are exact in f32 and summed in f32 with
// bf16 subnormal operands read as zero and subnormal results flushed, as vdpbf16ps; the order of
// the additions inside one TDPBF16PS (32 products per element) is the hardware's, so the result
// may differ from the vector path's chain by the f32 rounding of partial sums, within the bound
// the tests hold every backend to (relative K * 2^-24 of the sum of |products|).
//
// Blocking: a 32 x 32 block of C is four 16 x 16 f32 accumulator tiles (tmm0-3); each step of 32
// K values loads two A tiles (tmm4-5: rows 0-15 and 16-31) and two B tiles (tmm6-7: columns 0-15
// and 16-31) and runs four TDPBF16PS, over the whole K. Both operands are packed so that every
// tile load reads 1 KiB of consecutive bytes:
//   A panel (32 rows): step q, row i, pair w at ap[(q * 32 + i) * 16 + w] (a pair = two bf16);
//   B panel (32 columns): step q, half h, pair w, column j at bp[((q * 2 + h) * 16 + w) * 16 + j],
//     a pair holding B(2p, c) in its low 16 bits and B(2p+1, c) in its high ones (the VNNI layout).
// K past k, rows past the panel's and columns past the matrix's are packed as zeros.
#pragma once
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>

#include "pto/cpu/amx.hpp"
#include "pto/cpu/types.hpp"

#if PTO_AMX_TILE && defined(__AMX_BF16__) && defined(__AVX512BF16__)
#define PTO_AMX_BF16 1
#else
#define PTO_AMX_BF16 0
#endif

namespace pto {
namespace bf16mm {

#if PTO_AMX_BF16
typedef uint16_t vpair __attribute__((vector_size(64)));  // 32 bf16 bit patterns
typedef uint16_t vhalf __attribute__((vector_size(32)));  // 16 bf16 bit patterns
typedef float v16f __attribute__((vector_size(64)));

struct Amx {
  using A = bf16_t;
  using PA = uint32_t;
  using PB = uint32_t;
  using Scope = amx::Scope;
  static constexpr int MR = 32, NR = 32;
  static constexpr int KP = 16;  // K pairs per tile step (32 K values)
  // B panels per block of columns (matmul_lowp.hpp): half the 2 MiB L2 of the AMX CPUs, so a
  // block stays in L2 beside the A panel streaming past it (2048^3, one core on an Emerald
  // Rapids class Xeon: 8 panels of 128 KiB 1.2-1.4 TFLOP/s, 16 panels 0.8-0.94).
  static constexpr int64_t kBBlockBytes = int64_t(1) << 20;
  static int64_t depth(int64_t k) { return ((k + 1) / 2 + KP - 1) / KP * KP; }
  static int64_t b_panel(int64_t k) { return depth(k) * NR; }

  static void pack_a(const A* a, int64_t rs, int64_t cs, int64_t rows, int64_t k, PA* ap) {
    amx::pack_a_rows(&a->bits, rs, cs, rows, k, depth(k) / KP, ap);
  }

  static void pack_b(const A* b, int64_t rs, int64_t cs, int64_t k, int64_t cols, PB* bp) {
    const int64_t kp = depth(k), full = k / 2;
    const uint16_t* s = &b->bits;
    auto at = [bp](int64_t p, int64_t j) -> uint32_t& {
      return bp[(((p / KP) * 2 + j / 16) * KP + p % KP) * 16 + j % 16];
    };
    if (cs == 1 && cols == NR) {
      for (int64_t p = 0; p < full; ++p) {
        vpair r0, r1;
        std::memcpy(&r0, s + 2 * p * rs, sizeof(vpair));
        std::memcpy(&r1, s + (2 * p + 1) * rs, sizeof(vpair));
        const vpair lo = amx::zip<vpair, 0>(r0, r1), hi = amx::zip<vpair, 16>(r0, r1);  // columns 0-15, 16-31
        std::memcpy(&at(p, 0), &lo, sizeof(vpair));
        std::memcpy(&at(p, 16), &hi, sizeof(vpair));
      }
    } else if (rs == 1) {  // a transposed B (x @ W.T): a pair is two adjacent elements of W's row
      amx::pack_b_transposed(reinterpret_cast<const unsigned char*>(s), cs * 2, full, cols, bp);
    } else {
      for (int64_t p = 0; p < full; ++p)
        for (int64_t j = 0; j < NR; ++j)
          at(p, j) =
              j < cols ? uint32_t(s[2 * p * rs + j * cs]) | uint32_t(s[(2 * p + 1) * rs + j * cs]) << 16 : 0u;
    }
    for (int64_t p = full; p < kp; ++p)  // an odd k's last pair (its high half zero), then zeros
      for (int64_t j = 0; j < NR; ++j)
        at(p, j) = p * 2 < k && j < cols ? uint32_t(s[(k - 1) * rs + j * cs]) : 0u;
  }

  // C block (+)= A panel * B panel: all 32 x 32 of it is computed (the panels are zero-padded),
  // mr x nr stored. A row-major f32 C of a whole block is loaded and stored by the tiles
  // themselves; anything else goes through a 32 x 32 f32 buffer.
  template <int M_, class D>
  static void kernel(int64_t k, const PA* PTO_RESTRICT ap, const PB* PTO_RESTRICT bp, D* c, int64_t ldc,
                     bool acc, int64_t mr, int64_t nr) {
    alignas(64) float buf[MR * NR];
    const bool direct = std::is_same_v<D, float> && mr == MR && nr == NR;
    const int64_t ld = direct ? ldc * int64_t(sizeof(float)) : NR * int64_t(sizeof(float));
    float* cf = direct ? reinterpret_cast<float*>(c) : buf;
    if (acc) {
      if (!direct)
        for (int64_t i = 0; i < MR; ++i)
          for (int64_t j = 0; j < NR; ++j)
            buf[i * NR + j] = i < mr && j < nr ? to_float(c[i * ldc + j]) : 0.0f;
      amx::load_acc(cf, ld);
    } else {
      amx::zero_acc();
    }
    amx::block_steps<amx::Dot::kBf16>(depth(k) / KP, reinterpret_cast<const char*>(ap),
                                      reinterpret_cast<const char*>(bp));
    amx::store_acc(cf, ld);
    if (direct) return;
    if constexpr (std::is_same_v<D, bf16_t>) {
      if (nr == NR) {
        // Whole rows rounded as vectors (bf16_from_float's rounding), 16 lanes at a time: GCC
        // turns the select of a 32-lane (two-register) vector into scalar code (measured: the
        // whole product 1.5x slower than with an f32 destination).
        for (int64_t i = 0; i < mr; ++i)
          for (int h = 0; h < NR; h += 16) {
            v16f x;
            std::memcpy(&x, buf + i * NR + h, sizeof(x));
            const vhalf r = bf16_bits_from_floats<vhalf>(x);
            std::memcpy(c + i * ldc + h, &r, sizeof(r));
          }
        return;
      }
    }
    for (int64_t i = 0; i < mr; ++i)
      for (int64_t j = 0; j < nr; ++j) c[i * ldc + j] = from_float<D>(buf[i * NR + j]);
  }
};
#endif

}  // namespace bf16mm
}  // namespace pto
