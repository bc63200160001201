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

// A loop whose body is one `if` with a condition free of the loop's variable (codegen's variants
// for a dynamic width) is unswitched so that the nest under each branch is interchanged; the
// copy of the loop in the else branch gets a name of its own (%i_1: names are distinct).
const char* kVariants = R"(
func @variants(%K: f32[8, 4], %Q: f32[12, 8, 4], %O: f32[12, 8, 4] out, %n: i64) {
  parallel for %i = 0 to 12 {
    if (%n <= 64) {
      parallel for %h = 0 to 8 {
        alloc %k: f32[1, 4] vec
        alloc %q: f32[1, 4] vec
        TLOAD %k, %K[%h:1, 0:4]
        TLOAD %q, %Q[%i, %h:1, 0:4]
        TADD %q, %q, %k
        TSTORE %O[%i, %h:1, 0:4], %q
      }
    } else {
      parallel for %g = 0 to 8 {
        alloc %k2: f32[1, 4] vec
        alloc %q2: f32[1, 4] vec
        TLOAD %k2, %K[%g:1, 0:4]
        TLOAD %q2, %Q[%i, %g:1, 0:4]
        TMUL %q2, %q2, %k2
        TSTORE %O[%i, %g:1, 0:4], %q2
      }
    }
  }
})";

TEST(PassInterchange, VariantsUnderAnInvariantIfAreInterchanged) {
  Program got = expect_pass(kVariants, ic, R"(
func @variants(%K: f32[8, 4], %Q: f32[12, 8, 4], %O: f32[12, 8, 4] out, %n: i64) {
  if (%n <= 64) {
    parallel for %h = 0 to 8 {
      alloc %k: f32[1, 4] vec
      alloc %q: f32[1, 4] vec
      TLOAD %k, %K[%h:1, 0:4]
      for %i = 0 to 12 {
        TLOAD %q, %Q[%i, %h:1, 0:4]
        TADD %q, %q, %k
        TSTORE %O[%i, %h:1, 0:4], %q
      }
    }
  } else {
    parallel for %g = 0 to 8 {
      alloc %k2: f32[1, 4] vec
      alloc %q2: f32[1, 4] vec
      TLOAD %k2, %K[%g:1, 0:4]
      for %i_1 = 0 to 12 {
        TLOAD %q2, %Q[%i_1, %g:1, 0:4]
        TMUL %q2, %q2, %k2
        TSTORE %O[%i_1, %g:1, 0:4], %q2
      }
    }
  }
})",
                            Level::Tile);
  for (int64_t n : {5, 100}) EXPECT_TRUE(equivalent(parse_program(kVariants), got, {n}));
  // the `if` keeps its label (codegen compiles the else of kWideRowsElse lazily)
  Program labelled = parse_program(kVariants);
  labelled.body[0]->body[0]->var = kWideRowsElse;
  Program out = ic(labelled);
  ASSERT_EQ(out.body[0]->kind, StmtKind::If);
  EXPECT_EQ(out.body[0]->var, kWideRowsElse);
}

// Each of these keeps its loops: a serial outer loop (its iterations may depend on each other);
// loads that all move with %i; a load of a buffer the loops write (it would read another
// iteration's result); a loaded tile that the body writes again; an inner loop of 2 iterations
// under an outer one of 3 (the pool would get 2 tasks instead of 3); an `if` whose condition
// names the outer variable.
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
})",
      R"(
func @depends(%K: f32[8, 4], %Q: f32[12, 8, 4], %O: f32[12, 8, 4] out) {
  parallel for %i = 0 to 12 {
    if (%i < 6) {
      parallel for %h = 0 to 8 {
        alloc %k: f32[1, 4] vec
        alloc %q: f32[1, 4] vec
        TLOAD %k, %K[%h:1, 0:4]
        TLOAD %q, %Q[%i, %h:1, 0:4]
        TADD %q, %q, %k
        TSTORE %O[%i, %h:1, 0:4], %q
      }
    }
  }
})"};
  for (const char* c : cases) expect_pass(c, ic, c, Level::Tile);
}
