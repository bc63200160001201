// parallelize: before/after tests. A loop becomes `parallel for` only when its iterations provably
// write disjoint memory and read nothing another iteration writes.
#include "passes/parallelize.h"

#include "test_pass_util.h"

using namespace pass_test;

namespace {

Program par(const Program& p) { return passes::parallelize(p); }

void expect_parallelize(const char* before, const char* after) {
  Program got = expect_pass(before, par, after, Level::Tile);
  // Marking loops never changes what a program computes, and the pass is idempotent. The C++
  // tests run parallel loops shuffled with race checks (test_interp_parallel.cpp), so a loop
  // wrongly marked parallel computes something else or fails with a race here.
  EXPECT_TRUE(same_program(par(got), got));
  Program in = parse_program(before);
  EXPECT_TRUE(equivalent(in, got, std::vector<int64_t>(in.scalars.size(), 2)));
}

}  // namespace

// The seed's tile matmul: the i and j loops write disjoint windows of C through tiles allocated in
// their bodies; the k loop accumulates into %t, allocated outside it, so it stays serial.
TEST(PassParallelize, SeedMatmulTileLoopsParallelReductionSerial) {
  expect_parallelize(R"(
func @mm(%A: f32[10, 12], %B: f32[12, 9], %C: f32[10, 9] out) {
  for %i = 0 to 10 step 4 {
    for %j = 0 to 9 step 4 {
      alloc %t: f32[4, 4] vec
      TEXPANDS %t, 0.0f
      for %k = 0 to 12 step 8 {
        alloc %a: f32[4, 8] mat
        alloc %b: f32[8, 4] mat
        TLOAD %a, %A[%i:4 valid min(4, (10 - %i)), %k:8 valid min(8, (12 - %k))]
        TLOAD %b, %B[%k:8 valid min(8, (12 - %k)), %j:4 valid min(4, (9 - %j))]
        TMATMUL_ACC %t, %a, %b
      }
      TSTORE %C[%i:4 valid min(4, (10 - %i)), %j:4 valid min(4, (9 - %j))], %t
    }
  }
})",
                     R"(
func @mm(%A: f32[10, 12], %B: f32[12, 9], %C: f32[10, 9] out) {
  parallel for %i = 0 to 10 step 4 {
    parallel for %j = 0 to 9 step 4 {
      alloc %t: f32[4, 4] vec
      TEXPANDS %t, 0.0f
      for %k = 0 to 12 step 8 {
        alloc %a: f32[4, 8] mat
        alloc %b: f32[8, 4] mat
        TLOAD %a, %A[%i:4 valid min(4, (10 - %i)), %k:8 valid min(8, (12 - %k))]
        TLOAD %b, %B[%k:8 valid min(8, (12 - %k)), %j:4 valid min(4, (9 - %j))]
        TMATMUL_ACC %t, %a, %b
      }
      TSTORE %C[%i:4 valid min(4, (10 - %i)), %j:4 valid min(4, (9 - %j))], %t
    }
  }
})");
}

// Every iteration reads and writes the same window of a global: a reduction, left serial.
TEST(PassParallelize, ReductionIntoGlobalStaysSerial) {
  const char* p = R"(
func @red(%A: f32[32, 8], %C: f32[4, 8] out) {
  for %k = 0 to 32 step 4 {
    alloc %x: f32[4, 8] vec
    alloc %c: f32[4, 8] vec
    TLOAD %x, %A[%k:4, 0:8]
    TLOAD %c, %C
    TADD %c, %c, %x
    TSTORE %C, %c
  }
})";
  expect_parallelize(p, p);
}

// A tile allocated before the loop is written by every iteration: shared state, serial.
TEST(PassParallelize, TileAllocatedOutsideTheLoopStaysSerial) {
  const char* p = R"(
func @copy(%A: f32[16, 16], %C: f32[16, 16] out) {
  alloc %t: f32[4, 16] vec
  for %i = 0 to 16 step 4 {
    TLOAD %t, %A[%i:4, 0:16]
    TSTORE %C[%i:4, 0:16], %t
  }
})";
  expect_parallelize(p, p);
}

// In place, each iteration reads the next window of the buffer it writes: another iteration's
// footprint, so the loop is serial. The same reads of a buffer nobody writes are harmless.
TEST(PassParallelize, ReadsOutsideTheIterationsFootprint) {
  const char* in_place = R"(
func @stencil(%X: f32[16, 8] out) {
  for %i = 0 to 12 step 4 {
    alloc %x: f32[4, 8] vec
    alloc %y: f32[4, 8] vec
    TLOAD %x, %X[%i:4, 0:8]
    TLOAD %y, %X[(%i + 4):4, 0:8]
    TADD %x, %x, %y
    TSTORE %X[%i:4, 0:8], %x
  }
})";
  expect_parallelize(in_place, in_place);
  expect_parallelize(R"(
func @stencil(%A: f32[16, 8], %C: f32[12, 8] out) {
  for %i = 0 to 12 step 4 {
    alloc %x: f32[4, 8] vec
    alloc %y: f32[4, 8] vec
    TLOAD %x, %A[%i:4, 0:8]
    TLOAD %y, %A[(%i + 4):4, 0:8]
    TADD %x, %x, %y
    TSTORE %C[%i:4, 0:8], %x
  }
})",
                     R"(
func @stencil(%A: f32[16, 8], %C: f32[12, 8] out) {
  parallel for %i = 0 to 12 step 4 {
    alloc %x: f32[4, 8] vec
    alloc %y: f32[4, 8] vec
    TLOAD %x, %A[%i:4, 0:8]
    TLOAD %y, %A[(%i + 4):4, 0:8]
    TADD %x, %x, %y
    TSTORE %C[%i:4, 0:8], %x
  }
})");
}

// An in-place update whose reads stay inside its own window is parallel; a prefetch of the next
// window is a hint, not an access.
TEST(PassParallelize, InPlaceUpdateWithPrefetchIsParallel) {
  expect_parallelize(R"(
func @inplace(%X: f32[16, 8] out) {
  for %i = 0 to 16 step 4 {
    if ((%i + 4) < 16) {
      TPREFETCH %X[(%i + 4):4, 0:8]
    }
    alloc %x: f32[4, 8] vec
    TLOAD %x, %X[%i:4, 0:8]
    TADD %x, %x, 1.0f
    TSTORE %X[%i:4, 0:8], %x
  }
})",
                     R"(
func @inplace(%X: f32[16, 8] out) {
  parallel for %i = 0 to 16 step 4 {
    if ((%i + 4) < 16) {
      TPREFETCH %X[(%i + 4):4, 0:8]
    }
    alloc %x: f32[4, 8] vec
    TLOAD %x, %X[%i:4, 0:8]
    TADD %x, %x, 1.0f
    TSTORE %X[%i:4, 0:8], %x
  }
})");
}

// Offsets that are not affine in the loop variable (i*i, i//2), or affine with a coefficient that
// is not a constant (i*n), prove nothing: serial. Windows wider than the step overlap: serial.
// A scaled offset (2*i) whose window fits in 2*step is disjoint: parallel.
TEST(PassParallelize, OffsetsNotAffineOrOverlappingStaySerial) {
  const char* serial = R"(
func @nonaffine(%A: f32[16, 8], %C: f32[64, 8] out, %n: i64) {
  for %i = 0 to 4 {
    alloc %x: f32[4, 8] vec
    TLOAD %x, %A[(%i * 4):4, 0:8]
    TSTORE %C[((%i * %i) * 4):4, 0:8], %x
  }
  for %i2 = 0 to 8 {
    alloc %x2: f32[4, 8] vec
    TLOAD %x2, %A[0:4, 0:8]
    TSTORE %C[((%i2 // 2) * 4):4, 0:8], %x2
  }
  for %i3 = 0 to 4 {
    alloc %x3: f32[4, 8] vec
    TLOAD %x3, %A[0:4, 0:8]
    TSTORE %C[(%i3 * %n):4 valid 4, 0:8], %x3
  }
  for %i4 = 0 to 8 step 2 {
    alloc %x4: f32[4, 8] vec
    TLOAD %x4, %A[0:4, 0:8]
    TSTORE %C[%i4:4, 0:8], %x4
  }
})";
  expect_parallelize(serial, serial);
  expect_parallelize(R"(
func @scaled(%A: f32[16, 8], %C: f32[32, 8] out) {
  for %i = 0 to 16 step 4 {
    alloc %x: f32[4, 8] vec
    TLOAD %x, %A[%i:4, 0:8]
    TSTORE %C[(%i * 2):8 valid 4, 0:8], %x
  }
})",
                     R"(
func @scaled(%A: f32[16, 8], %C: f32[32, 8] out) {
  parallel for %i = 0 to 16 step 4 {
    alloc %x: f32[4, 8] vec
    TLOAD %x, %A[%i:4, 0:8]
    TSTORE %C[(%i * 2):8 valid 4, 0:8], %x
  }
})");
}

// Outer loop variables and scalar parameters shift the footprint by the same amount in every
// iteration: the i loop is parallel; the column loop, disjoint in dim 1, too when its tiles are its
// own; it is serial when its tiles belong to the enclosing iteration. A conditional store counts.
TEST(PassParallelize, OuterVariablesColumnsAndConditionalStores) {
  expect_parallelize(R"(
func @cols(%A: f32[16, 16], %C: f32[24, 16] out, %n: i64) {
  for %i = 0 to 12 step 4 {
    alloc %x: f32[4, 8] vec
    for %c = 0 to 16 step 8 {
      TLOAD %x, %A[%i:4, %c:8]
      if (%i < 8) {
        TSTORE %C[(%i + %n):4 valid min(4, ((24 - %i) - %n)), %c:8], %x
      }
    }
  }
  for %i2 = 0 to 16 step 4 {
    for %c2 = 0 to 16 step 8 {
      alloc %x2: f32[4, 8] vec
      TLOAD %x2, %A[%i2:4, %c2:8]
      TSTORE %C[(%i2 + 8):4, %c2:8], %x2
    }
  }
})",
                     R"(
func @cols(%A: f32[16, 16], %C: f32[24, 16] out, %n: i64) {
  parallel for %i = 0 to 12 step 4 {
    alloc %x: f32[4, 8] vec
    for %c = 0 to 16 step 8 {
      TLOAD %x, %A[%i:4, %c:8]
      if (%i < 8) {
        TSTORE %C[(%i + %n):4 valid min(4, ((24 - %i) - %n)), %c:8], %x
      }
    }
  }
  parallel for %i2 = 0 to 16 step 4 {
    parallel for %c2 = 0 to 16 step 8 {
      alloc %x2: f32[4, 8] vec
      TLOAD %x2, %A[%i2:4, %c2:8]
      TSTORE %C[(%i2 + 8):4, %c2:8], %x2
    }
  }
})");
}

// A loop the user declared parallel (pypto.prange) stays parallel, whatever the analysis says:
// rows i*i are disjoint, which the affine analysis cannot prove.
TEST(PassParallelize, UserParallelLoopsStayParallel) {
  const char* p = R"(
func @prange(%A: f32[4, 16], %C: f32[10, 16] out) {
  parallel for %i = 0 to 4 {
    alloc %x: f32[1, 16] vec
    TLOAD %x, %A[%i:1, 0:16]
    TSTORE %C[(%i * %i):1, 0:16], %x
  }
})";
  expect_parallelize(p, p);
}

// The disjointness boundary: windows of step + 1 rows overlap their neighbour by one row and stay
// serial; windows of exactly step rows tile the buffer and go parallel. Both also run shuffled.
TEST(PassParallelize, WindowOneWiderThanTheStepStaysSerial) {
  const char* p = R"(
func @w(%A: f32[68, 8], %C: f32[68, 8] out) {
  for %i = 0 to 64 step 4 {
    alloc %x: f32[5, 8] vec
    TLOAD %x, %A[%i:5, 0:8]
    TSTORE %C[%i:5, 0:8], %x
  }
  for %j = 0 to 8 step 2 {
    alloc %y: f32[68, 3] vec
    TLOAD %y, %A[0:68, %j:3 valid min(3, (8 - %j))]
    TSTORE %C[0:68, %j:3 valid min(3, (8 - %j))], %y
  }
})";
  expect_parallelize(p, p);
}

TEST(PassParallelize, WindowOfExactlyTheStepIsParallel) {
  expect_parallelize(R"(
func @w(%A: f32[68, 8], %C: f32[68, 8] out) {
  for %i = 0 to 68 step 4 {
    alloc %x: f32[4, 8] vec
    TLOAD %x, %A[%i:4, 0:8]
    TSTORE %C[%i:4, 0:8], %x
  }
  for %j = 0 to 8 step 3 {
    alloc %y: f32[68, 3] vec
    TLOAD %y, %A[0:68, %j:3 valid min(3, (8 - %j))]
    TSTORE %C[0:68, %j:3 valid min(3, (8 - %j))], %y
  }
})",
                     R"(
func @w(%A: f32[68, 8], %C: f32[68, 8] out) {
  parallel for %i = 0 to 68 step 4 {
    alloc %x: f32[4, 8] vec
    TLOAD %x, %A[%i:4, 0:8]
    TSTORE %C[%i:4, 0:8], %x
  }
  parallel for %j = 0 to 8 step 3 {
    alloc %y: f32[68, 3] vec
    TLOAD %y, %A[0:68, %j:3 valid min(3, (8 - %j))]
    TSTORE %C[0:68, %j:3 valid min(3, (8 - %j))], %y
  }
})");
}

// Two writes moving at different rates (rows i and 2i): at i = 0 both fit in one step's window,
// yet iteration 4 writes rows 8-9 (2i) which iteration 8 writes too (i): serial.
TEST(PassParallelize, WritesAtDifferentRatesStaySerial) {
  const char* p = R"(
func @rates(%A: f32[16, 8], %C: f32[32, 8] out) {
  for %i = 0 to 16 step 4 {
    alloc %x: f32[4, 8] vec
    alloc %y: f32[2, 8] vec
    TLOAD %x, %A[%i:4, 0:8]
    TLOAD %y, %A[%i:2, 0:8]
    TSTORE %C[%i:4, 0:8], %x
    TSTORE %C[(%i * 2):2, 0:8], %y
  }
})";
  expect_parallelize(p, p);
}

// Writes at several offsets moving together (an attention head's q, k and v columns at c, 24 + c
// and 48 + c, each iteration updating its own): the three column ranges over the whole loop are
// apart, so the iterations are independent. Shifting one range into another's (offset 20 + c,
// where iteration c + 20 of the first write lands) or reading the next iteration's columns
// keeps the loop serial.
TEST(PassParallelize, WindowsAtSeveralOffsetsApartOverTheLoopAreParallel) {
  const std::string heads = R"(
func @heads(%A: f32[8, 72], %C: f32[8, 72] out) {
  for %c = 0 to 24 step 4 {
    alloc %x: f32[8, 4] vec
    alloc %y: f32[8, 4] vec
    TLOAD %x, %A[0:8, %c:4]
    TLOAD %y, %C[0:8, (%c + 24):4]
    TADD %y, %y, %x
    TSTORE %C[0:8, (%c + 24):4], %y
    TSTORE %C[0:8, %c:4], %x
    TSTORE %C[0:8, (%c + 48):4], %x
  }
})";
  std::string parallel = heads;
  parallel.replace(parallel.find("  for %c"), 8, "  parallel for %c");
  expect_parallelize(heads.c_str(), parallel.c_str());
  const char* overlapping = R"(
func @heads(%A: f32[8, 72], %C: f32[8, 72] out) {
  for %c = 0 to 24 step 4 {
    alloc %x: f32[8, 4] vec
    TLOAD %x, %A[0:8, %c:4]
    TSTORE %C[0:8, %c:4], %x
    TSTORE %C[0:8, (%c + 20):4], %x
  }
})";
  expect_parallelize(overlapping, overlapping);
  const char* reads_next = R"(
func @heads(%A: f32[8, 72], %C: f32[8, 72] out) {
  for %c = 0 to 24 step 4 {
    alloc %x: f32[8, 4] vec
    TLOAD %x, %C[0:8, (%c + 4):4]
    TSTORE %C[0:8, (%c + 48):4], %x
    TSTORE %C[0:8, %c:4], %x
  }
})";
  expect_parallelize(reads_next, reads_next);
}
