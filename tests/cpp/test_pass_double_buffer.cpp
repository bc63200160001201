// double_buffer: before/after tests. Each loop whose body loads windows that move with the loop
// variable gets, at the top of its body, a prefetch of the windows of the next iteration, guarded
// by `next < hi`; nothing else changes.
#include "passes/double_buffer.h"

#include "test_pass_util.h"

using namespace pass_test;

namespace {
Program db(const Program& p) { return passes::double_buffer(p); }
}  // namespace

// The seed's K loop: both operand windows move with %k, so both are prefetched at %k + 8, with
// the next window's valid extents (min(8, 12 - (%k + 8)) = min(8, 4 - %k), never negative). The
// loads of the enclosing %i loop's body (%W) do not depend on %i: nothing is prefetched for them,
// and the %i loop's own moving loads sit in the inner loop, which handles them.
TEST(PassDoubleBuffer, MatmulKLoopPrefetchesNextOperandWindows) {
  const char* before = R"(
func @db(%A: f32[10, 12], %B: f32[12, 9], %W: f32[4, 8], %C: f32[10, 9] out) {
  for %i = 0 to 10 step 4 {
    alloc %t: f32[4, 4] vec
    alloc %w: f32[4, 8] vec
    TEXPANDS %t, 0.0f
    TLOAD %w, %W
    for %k = 0 to 12 step 8 {
      alloc %a: f32[4, 8] mat
      alloc %b: f32[8, 4] mat
      TLOAD %a, %A[%i:4 valid min(4, (10 - %i)), %k:8 valid min(8, (12 - %k))]
      TLOAD %b, %B[%k:8 valid min(8, (12 - %k)), 0:4]
      TMATMUL_ACC %t, %a, %b
    }
    TSTORE %C[%i:4 valid min(4, (10 - %i)), 0:4], %t
  }
})";
  Program got = expect_pass(before, db, R"(
func @db(%A: f32[10, 12], %B: f32[12, 9], %W: f32[4, 8], %C: f32[10, 9] out) {
  for %i = 0 to 10 step 4 {
    alloc %t: f32[4, 4] vec
    alloc %w: f32[4, 8] vec
    TEXPANDS %t, 0.0f
    TLOAD %w, %W
    for %k = 0 to 12 step 8 {
      if ((%k + 8) < 12) {
        TPREFETCH %A[%i:4 valid max(0, min(4, (10 - %i))), (%k + 8):8 valid max(0, min(8, (4 - %k)))]
        TPREFETCH %B[(%k + 8):8 valid max(0, min(8, (4 - %k))), 0:4]
      }
      alloc %a: f32[4, 8] mat
      alloc %b: f32[8, 4] mat
      TLOAD %a, %A[%i:4 valid min(4, (10 - %i)), %k:8 valid min(8, (12 - %k))]
      TLOAD %b, %B[%k:8 valid min(8, (12 - %k)), 0:4]
      TMATMUL_ACC %t, %a, %b
    }
    TSTORE %C[%i:4 valid min(4, (10 - %i)), 0:4], %t
  }
})",
                            Level::Tile);
  EXPECT_TRUE(equivalent(parse_program(before), got));
}

// A loop with a non-zero start, a step of 3 and a run-time bound: the guard is `%j + 3 < %n`.
TEST(PassDoubleBuffer, RuntimeBoundAndOddStep) {
  const char* before = R"(
func @db2(%A: f32[16, 32], %C: f32[16, 32] out, %n: i64) {
  for %j = 2 to %n step 3 {
    alloc %x: f32[16, 2] vec
    TLOAD %x, %A[0:16, %j:2 valid min(2, (32 - %j))]
    TSTORE %C[0:16, %j:2 valid min(2, (32 - %j))], %x
  }
})";
  Program got = expect_pass(before, db, R"(
func @db2(%A: f32[16, 32], %C: f32[16, 32] out, %n: i64) {
  for %j = 2 to %n step 3 {
    if ((%j + 3) < %n) {
      TPREFETCH %A[0:16, (%j + 3):2 valid max(0, min(2, (29 - %j)))]
    }
    alloc %x: f32[16, 2] vec
    TLOAD %x, %A[0:16, %j:2 valid min(2, (32 - %j))]
    TSTORE %C[0:16, %j:2 valid min(2, (32 - %j))], %x
  }
})",
                            Level::Tile);
  EXPECT_TRUE(equivalent(parse_program(before), got, {32}));
}

// Loads that do not move with the loop (the same window every iteration, or a window whose valid
// extent alone depends on the loop), and loops without loads, are left alone.
TEST(PassDoubleBuffer, LoopInvariantLoadsLeftAlone) {
  const char* p = R"(
func @inv(%A: f32[16, 8], %C: f32[16, 8] out) {
  for %i = 0 to 16 step 4 {
    alloc %x: f32[4, 8] vec
    TLOAD %x, %A[0:4, 0:8]
    TSTORE %C[%i:4, 0:8], %x
  }
  for %j = 0 to 8 step 4 {
    alloc %y: f32[16, 4] vec
    TLOAD %y, %A[0:16 valid min(16, (20 - %j)), 0:4]
    TSTORE %C[0:16, 4:4], %y
  }
  for %k = 0 to 4 {
    alloc %z: f32[4, 8] vec
    TEXPANDS %z, 1.0f
    TSTORE %C[%k:1, 0:8], %z
  }
})";
  Program got = expect_pass(p, db, p, Level::Tile);
  EXPECT_TRUE(equivalent(parse_program(p), got));
}
