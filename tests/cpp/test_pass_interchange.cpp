// interchange_for_reuse: before/after tests. A parallel loop whose body is one parallel loop with
// loads that do not move with the outer variable is interchanged, and those loads (with their
// prefetches) run once per inner iteration; everything else keeps its order inside the new
// serial loop. The cases that must stay as they are stay.
#include "passes/interchange.h"

#include "test_pass_util.h"

using namespace pass_test;

namespace {
Program ic(const Program& p) { return passes::interchange_for_reuse(p); }

// The seed attention's shape, small: blocks of 4 query rows (%i) over 8 heads (%h); each head's
// K^T and V are loaded in the head loop's body. %n: the number of heads the guard of the
// prefetch compares with (the prefetch is the double_buffer pass's).
const char* kAttention = R"(
func @att(%Q: f32[8, 12, 4], %K: f32[8, 12, 4], %V: f32[8, 12, 4], %O: f32[8, 12, 4] out) {
  parallel for %i = 0 to 12 step 4 {
    parallel for %h = 0 to 8 {
      alloc %q: f32[4, 4] vec
      alloc %kt: f32[4, 12] vec
      alloc %v: f32[12, 4] vec
      alloc %s: f32[4, 12] vec
      alloc %o: f32[4, 4] vec
      if ((%h + 1) < 8) {
        TPREFETCH %K[(%h + 1), 0:12, 0:4] perm(2, 1)
      }
      TLOAD %kt, %K[%h, 0:12, 0:4] perm(2, 1)
      TLOAD %q, %Q[%h, %i:4 valid min(4, (12 - %i)), 0:4]
      TLOAD %v, %V[%h, 0:12, 0:4]
      TMATMUL %s, %q, %kt
      TEXP %s, %s
      TMATMUL %o, %s, %v
      TSTORE %O[%h, %i:4 valid min(4, (12 - %i)), 0:4], %o
    }
  }
})";
}  // namespace

TEST(PassInterchange, AttentionLoadsEachHeadsOperandsOnce) {
  Program got = expect_pass(kAttention, ic, R"(
func @att(%Q: f32[8, 12, 4], %K: f32[8, 12, 4], %V: f32[8, 12, 4], %O: f32[8, 12, 4] out) {
  parallel for %h = 0 to 8 {
    alloc %q: f32[4, 4] vec
    alloc %kt: f32[4, 12] vec
    alloc %v: f32[12, 4] vec
    alloc %s: f32[4, 12] vec
    alloc %o: f32[4, 4] vec
    if ((%h + 1) < 8) {
      TPREFETCH %K[(%h + 1), 0:12, 0:4] perm(2, 1)
    }
    TLOAD %kt, %K[%h, 0:12, 0:4] perm(2, 1)
    TLOAD %v, %V[%h, 0:12, 0:4]
    for %i = 0 to 12 step 4 {
      TLOAD %q, %Q[%h, %i:4 valid min(4, (12 - %i)), 0:4]
      TMATMUL %s, %q, %kt
      TEXP %s, %s
      TMATMUL %o, %s, %v
      TSTORE %O[%h, %i:4 valid min(4, (12 - %i)), 0:4], %o
    }
  }
})",
                            Level::Tile);
  EXPECT_TRUE(equivalent(parse_program(kAttention), got));
}

// Each of these keeps its loops: a serial outer loop (its iterations may depend on each other);
// loads that all move with %i; a load of a buffer the loops write (it would read another
// iteration's result); a loaded tile that the body writes again; an inner loop of 2 iterations
// under an outer one of 3 (the pool would get 2 tasks instead of 3).
TEST(PassInterchange, LeavesWhatCannotOrShouldNotMove) {
  const char* cases[] = {
      R"(
func @serial(%K: f32[8, 4], %Q: f32[12, 8, 4], %O: f32[12, 8, 4] out) {
  for %i = 0 to 12 {
    parallel for %h = 0 to 8 {
      alloc %k: f32[1, 4] vec
      alloc %q: f32[1, 4] vec
      TLOAD %k, %K[%h:1, 0:4]
      TLOAD %q, %Q[%i, %h:1, 0:4]
      TADD %q, %q, %k
      TSTORE %O[%i, %h:1, 0:4], %q
    }
  }
})",
      R"(
func @moving(%Q: f32[12, 8, 4], %O: f32[12, 8, 4] out) {
  parallel for %i = 0 to 12 {
    parallel for %h = 0 to 8 {
      alloc %q: f32[1, 4] vec
      TLOAD %q, %Q[%i, %h:1, 0:4]
      TEXP %q, %q
      TSTORE %O[%i, %h:1, 0:4], %q
    }
  }
})",
      R"(
func @written(%Q: f32[12, 8, 4], %O: f32[12, 8, 4] out) {
  parallel for %i = 0 to 12 {
    parallel for %h = 0 to 8 {
      alloc %k: f32[1, 4] vec
      alloc %q: f32[1, 4] vec
      TLOAD %k, %O[0, %h:1, 0:4]
      TLOAD %q, %Q[%i, %h:1, 0:4]
      TADD %q, %q, %k
      TSTORE %O[%i, %h:1, 0:4], %q
    }
  }
})",
      R"(
func @rewritten(%K: f32[8, 4], %Q: f32[12, 8, 4], %O: f32[12, 8, 4] out) {
  parallel for %i = 0 to 12 {
    parallel for %h = 0 to 8 {
      alloc %k: f32[1, 4] vec
      alloc %q: f32[1, 4] vec
      TLOAD %k, %K[%h:1, 0:4]
      TLOAD %q, %Q[%i, %h:1, 0:4]
      TADD %k, %q, %k
      TSTORE %O[%i, %h:1, 0:4], %k
    }
  }
})",
      R"(
func @few(%K: f32[2, 4], %Q: f32[3, 2, 4], %O: f32[3, 2, 4] out) {
  parallel for %i = 0 to 3 {
    parallel for %h = 0 to 2 {
      alloc %k: f32[1, 4] vec
      alloc %q: f32[1, 4] vec
      TLOAD %k, %K[%h:1, 0:4]
      TLOAD %q, %Q[%i, %h:1, 0:4]
      TADD %q, %q, %k
      TSTORE %O[%i, %h:1, 0:4], %q
    }
  }
})"};
  for (const char* c : cases) expect_pass(c, ic, c, Level::Tile);
}
