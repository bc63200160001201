// int8 x int8 -> int32 whole-matrix products on AMX tiles (TDPBSSD: signed x signed bytes): the
// global kernel family i8mm::Amx of pto/cpu/matmul_lowp.hpp's driver, used by MMATMUL of int8
// operands and by pto::mmatmul_epilogue where pto::amx::enabled() (pto/cpu/amx.hpp).
//
// Semantics (docs/isa.md §7.8): exact int32 dot products wrapping modulo 2^32; addition modulo
// 2^32 is associative, so the tiles give the vector kernels' bits (no +128 correction: the
// instruction multiplies signed bytes by signed bytes).
//
// Blocking as bf16's (pto/cpu/matmul_bf16_amx.hpp): four 16 x 16 int32 accumulators for a 32 x 32
// block of C; a step is 64 K values (16 quads): two A tiles, two B tiles, four TDPBSSD. Layouts:
//   A panel (32 rows): step q, row i, quad w at ap[(q * 32 + i) * 16 + w] (a quad = four bytes);
//   B panel (32 columns): step q, half h, quad w, column j at bp[((q * 2 + h) * 16 + w) * 16 + j],
//     a quad holding B(4w..4w+3, c) in its bytes, lowest first.
// K past k, rows past the panel's and columns past the matrix's are packed as zeros.
#pragma once
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>

#include "pto/cpu/amx.hpp"
#include "pto/cpu/matmul_epilogue.hpp"
#include "pto/cpu/types.hpp"

#if PTO_AMX_TILE && defined(__AMX_INT8__) && defined(__AVX512F__)
#define PTO_AMX_INT8 1
#else
#define PTO_AMX_INT8 0
#endif

namespace pto {
namespace i8mm {

#if PTO_AMX_INT8

typedef unsigned char v32b __attribute__((vector_size(32)));
typedef unsigned char v64b __attribute__((vector_size(64)));
typedef uint16_t v32h __attribute__((vector_size(64)));
typedef uint16_t v64h __attribute__((vector_size(128)));

struct Amx {
  using A = int8_t;
  using PA = uint32_t;
  using PB = uint32_t;
  using Scope = amx::Scope;
  static constexpr int MR = 32, NR = 32;
  static constexpr int KQ = 16;  // K quads per tile step (64 K values)
  // Half the L2, as bf16mm::Amx's (2048^3 scaled_mm, 2 threads: 5.5-6.2 ms with 2 MiB, 4.7-5.1).
  static constexpr int64_t kBBlockBytes = int64_t(1) << 20;
  static int64_t depth(int64_t k) { return ((k + 3) / 4 + KQ - 1) / KQ * KQ; }
  static int64_t b_panel(int64_t k) { return depth(k) * NR; }

  static void pack_a(const A* a, int64_t rs, int64_t cs, int64_t rows, int64_t k, PA* ap) {
    amx::pack_a_rows(a, rs, cs, rows, k, depth(k) / KQ, ap);
  }

  static void pack_b(const A* b, int64_t rs, int64_t cs, int64_t k, int64_t cols, PB* bp) {
    const int64_t kq = depth(k), full = k / 4;
    auto at = [bp](int64_t w, int64_t j) -> uint32_t& {
      return bp[(((w / KQ) * 2 + j / 16) * KQ + w % KQ) * 16 + j % 16];
    };
    if (cs == 1 && cols == NR) {
      for (int64_t w = 0; w < full; ++w) {
        v32b r0, r1, r2, r3;
        std::memcpy(&r0, b + 4 * w * rs, 32);
        std::memcpy(&r1, b + (4 * w + 1) * rs, 32);
        std::memcpy(&r2, b + (4 * w + 2) * rs, 32);
        std::memcpy(&r3, b + (4 * w + 3) * rs, 32);
        // Byte pairs (rows 0-1, 2-3) of the 32 columns, then their quads.
        const v64b p01 = amx::zip<v64b>(r0, r1);
        const v64b p23 = amx::zip<v64b>(r2, r3);
        const v64h q = amx::zip<v64h>((v32h)p01, (v32h)p23);
        std::memcpy(&at(w, 0), &q, 64);
        std::memcpy(&at(w, 16), reinterpret_cast<const char*>(&q) + 64, 64);
      }
    } else if (rs == 1) {  // a transposed B (x @ W.T): a quad is four adjacent bytes of W's row
      amx::pack_b_transposed(reinterpret_cast<const unsigned char*>(b), cs, full, cols, bp);
    } else {
      for (int64_t w = 0; w < full; ++w)
        for (int64_t j = 0; j < NR; ++j) {
          uint32_t x = 0;
          for (int t = 0; t < 4 && j < cols; ++t)
            x |= uint32_t(static_cast<unsigned char>(b[(4 * w + t) * rs + j * cs])) << (8 * t);
          at(w, j) = x;
        }
    }
    for (int64_t w = full; w < kq; ++w)  // a last partial quad (bytes past k zero), then zeros
      for (int64_t j = 0; j < NR; ++j) {
        uint32_t x = 0;
        for (int t = 0; t < 4 && j < cols && 4 * w + t < k; ++t)
          x |= uint32_t(static_cast<unsigned char>(b[(4 * w + t) * rs + j * cs])) << (8 * t);
        at(w, j) = x;
      }
  }

  // The 32 x 32 block of int32 sums of A panel * B panel, added to C's tile values when `acc`
  // (ci: C as int32, row stride ldc in elements), left in tmm0-3.
  static void sums(int64_t k, const PA* PTO_RESTRICT ap, const PB* PTO_RESTRICT bp, const int32_t* ci,
                   int64_t ld_bytes, bool acc) {
    if (acc)
      amx::load_acc(ci, ld_bytes);
    else
      amx::zero_acc();
    amx::block_steps<amx::Dot::kInt8>(depth(k) / KQ, reinterpret_cast<const char*>(ap),
                                      reinterpret_cast<const char*>(bp));
  }
  // C block (+)= A panel * B panel (int32 C; mr x nr stored): a whole block by the tiles
  // themselves, anything else through a 32 x 32 buffer.
  template <int M_, class D>
  static void kernel(int64_t k, const PA* PTO_RESTRICT ap, const PB* PTO_RESTRICT bp, D* c, int64_t ldc,
                     bool acc, int64_t mr, int64_t nr) {
    static_assert(sizeof(D) == 4, "an int32 destination");
    int32_t* ci = reinterpret_cast<int32_t*>(c);
    if (mr == MR && nr == NR) {
      sums(k, ap, bp, ci, ldc * 4, acc);
      amx::store_acc(ci, ldc * 4);
      return;
    }
    alignas(64) int32_t buf[MR * NR];
    for (int64_t i = 0; acc && i < MR; ++i)
      for (int64_t j = 0; j < NR; ++j) buf[i * NR + j] = i < mr && j < nr ? ci[i * ldc + j] : 0;
    sums(k, ap, bp, buf, NR * 4, acc);
    amx::store_acc(buf, NR * 4);
    for (int64_t i = 0; i < mr; ++i) std::memcpy(ci + i * ldc, buf + i * NR, size_t(nr) * 4);
  }

  // C block = e(A panel * B panel) (f32 C), the block at (row0, col0) of the product.
  template <int M_>
  static void kernel_epi(int64_t k, const PA* PTO_RESTRICT ap, const PB* PTO_RESTRICT bp, float* c,
                         int64_t ldc, int64_t mr, int64_t nr, const Epilogue& e, int64_t row0, int64_t col0) {
    typedef int v16i __attribute__((vector_size(64)));
    alignas(64) int32_t buf[MR * NR];
    sums(k, ap, bp, nullptr, NR * 4, false);
    amx::store_acc(buf, NR * 4);
    // In two halves of 16 rows: store_epilogue keeps its block in registers.
    for (int h = 0; h < 2 && 16 * h < mr; ++h) {
      v16i r[16][2];
      for (int i = 0; i < 16; ++i) std::memcpy(r[i], buf + (16 * h + i) * NR, sizeof(r[i]));
      store_epilogue<16>(r, c + 16 * h * ldc, ldc, detail::imin(16, mr - 16 * h), nr, e, row0 + 16 * h, col0);
    }
  }
};
#endif

}  // namespace i8mm
}  // namespace pto
