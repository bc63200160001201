// promote_small_temps: before/after tests. A rank-2 `gm` temporary that fits one tile and that
// every tensor-level instruction references whole moves to `vec`; anything else stays in memory.
#include "passes/promote.h"

#include "test_pass_util.h"

using namespace pass_test;

namespace {

Program promote(const Program& p) { return passes::promote_small_temps(p, small_tiles()); }

void expect_promote(const char* before, const char* after) {
  Program got = expect_pass(before, promote, after, Level::Tensor);
  EXPECT_TRUE(equivalent(parse_program(before), got));
}

void expect_not_promoted(const char* p) { expect_promote(p, p); }

}  // namespace

// The seed's `C_tile = pypto.zeros(...)`, accumulated with `+=` over K and stored once: the
// accumulator lives in a local tile for the whole K loop.
TEST(PassPromote, SeedAccumulatorPromoted) {
  expect_promote(R"(
func @mm(%A: f32[10, 12], %B: f32[12, 9], %C: f32[10, 9] out) {
  for %i = 0 to 10 step 4 {
    for %j = 0 to 9 step 4 {
      alloc %t: f32[4, 4] gm
      TEXPANDS %t, 0.0f
      for %k = 0 to 12 step 4 {
        TMATMUL_ACC %t, %A[%i:4 valid min(4, (10 - %i)), %k:4 valid min(4, (12 - %k))], %B[%k:4 valid min(4, (12 - %k)), %j:4 valid min(4, (9 - %j))]
      }
      TMOV %C[%i:4 valid min(4, (10 - %i)), %j:4 valid min(4, (9 - %j))], %t
    }
  }
})",
                 R"(
func @mm(%A: f32[10, 12], %B: f32[12, 9], %C: f32[10, 9] out) {
  for %i = 0 to 10 step 4 {
    for %j = 0 to 9 step 4 {
      alloc %t: f32[4, 4] vec
      TEXPANDS %t, 0.0f
      for %k = 0 to 12 step 4 {
        TMATMUL_ACC %t, %A[%i:4 valid min(4, (10 - %i)), %k:4 valid min(4, (12 - %k))], %B[%k:4 valid min(4, (12 - %k)), %j:4 valid min(4, (9 - %j))]
      }
      TMOV %C[%i:4 valid min(4, (10 - %i)), %j:4 valid min(4, (9 - %j))], %t
    }
  }
})");
}

// A chain of small temporaries (an accumulator over a ragged row block, its row sums, a product)
// is promoted as a whole, row vectors (4 x 1) included.
TEST(PassPromote, ChainOfSmallTemporariesPromoted) {
  expect_promote(R"(
func @k(%A: f32[10, 8], %C: f32[10, 8] out) {
  for %i = 0 to 10 step 4 {
    alloc %t: f32[4, 8] gm
    TEXPANDS %t, 0.0f
    TADD %t, %t, %A[%i:4 valid min(4, (10 - %i)), 0:8]
    alloc %t_1: f32[4, 1] gm
    TROWSUM %t_1, %t
    alloc %t_2: f32[4, 8] gm
    TMUL %t_2, %t, %t_1
    TMOV %C[%i:4 valid min(4, (10 - %i)), 0:8], %t_2
  }
})",
                 R"(
func @k(%A: f32[10, 8], %C: f32[10, 8] out) {
  for %i = 0 to 10 step 4 {
    alloc %t: f32[4, 8] vec
    TEXPANDS %t, 0.0f
    TADD %t, %t, %A[%i:4 valid min(4, (10 - %i)), 0:8]
    alloc %t_1: f32[4, 1] vec
    TROWSUM %t_1, %t
    alloc %t_2: f32[4, 8] vec
    TMUL %t_2, %t, %t_1
    TMOV %C[%i:4 valid min(4, (10 - %i)), 0:8], %t_2
  }
})");
}

// A temporary some instruction views only partly: tiling could not use the tile as is.
TEST(PassPromote, PartialViewNotPromoted) {
  expect_not_promoted(R"(
func @part(%A: f32[4, 8], %C: f32[4, 8] out) {
  alloc %t: f32[4, 8] gm
  TEXPANDS %t, 0.0f
  TADD %t[0:2, 0:8], %A[0:2, 0:8], 1.0f
  TMOV %C, %t
})");
}

// Too big for one tile: 16 columns > the 8-wide tile; 8 x 8 > the 4 rows a matmul tile has.
TEST(PassPromote, TooBigNotPromoted) {
  expect_not_promoted(R"(
func @big(%A: f32[8, 8], %C: f32[8, 16] out, %D: f32[8, 8] out) {
  alloc %t: f32[8, 16] gm
  TEXPANDS %t, 1.0f
  TMOV %C, %t
  alloc %u: f32[8, 8] gm
  TEXPANDS %u, 0.0f
  TMATMUL_ACC %u, %A, %A
  TMOV %D, %u
})");
}

// Few rows but more columns than one tile holds: not promoted either.
TEST(PassPromote, TooWideNotPromoted) {
  expect_not_promoted(R"(
func @wide(%C: f32[1, 16] out) {
  alloc %t: f32[1, 16] gm
  TEXPANDS %t, 1.0f
  TMOV %C, %t
})");
}

// Only rank-2 temporaries are promoted; parameters and outputs never move.
TEST(PassPromote, OtherRanksAndParametersNotPromoted) {
  expect_not_promoted(R"(
func @ranks(%A: f32[4, 8], %C: f32[4, 8] out) {
  alloc %t: f32[2, 4, 8] gm
  TEXPANDS %t, 1.0f
  TMOV %C, %t[0, 0:4, 0:8]
  alloc %v: f32[8] gm
  TADD %v, %A[0, 0:8], 1.0f
  TADD %C, %C, %v
})");
}

// A temporary that already-tiled code (here a TLOAD, as in a fused nest) reads from memory must
// stay in memory; an equal temporary read only by tensor-level code is promoted.
TEST(PassPromote, ReadByTiledCodeNotPromoted) {
  expect_promote(R"(
func @tiled(%A: f32[4, 8], %C: f32[4, 8] out) {
  alloc %t: f32[4, 8] gm
  TADD %t, %A, 2.0f
  alloc %x: f32[4, 8] vec
  TLOAD %x, %t
  TSTORE %C, %x
  alloc %u: f32[4, 8] gm
  TEXPANDS %u, 3.0f
  TADD %C, %C, %u
})",
                 R"(
func @tiled(%A: f32[4, 8], %C: f32[4, 8] out) {
  alloc %t: f32[4, 8] gm
  TADD %t, %A, 2.0f
  alloc %x: f32[4, 8] vec
  TLOAD %x, %t
  TSTORE %C, %x
  alloc %u: f32[4, 8] vec
  TEXPANDS %u, 3.0f
  TADD %C, %C, %u
})");
}
