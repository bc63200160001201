// tile_ops: before/after tests. Each tensor-level instruction becomes a loop nest of TLOAD /
// tile instruction / TSTORE over tiles of its destination (here 4 x 8 elementwise tiles and
// 4 x 8 x 8 matmul tiles), with every window's valid extent clamped at the ragged edges. The
// tiled programs are also run on the interpreter against references computed here.
#include "passes/tile_ops.h"

#include <algorithm>

#include "test_pass_util.h"

using namespace pass_test;

namespace {

Program tile(const Program& p) { return passes::tile_ops(p, small_tiles()); }

// Relative norm error of a run's output against a float64 reference (every element written).
::testing::AssertionResult matches(const std::vector<float>& out, const std::vector<double>& ref) {
  if (out.size() != ref.size())
    return ::testing::AssertionFailure() << "size " << out.size() << " vs " << ref.size();
  double num = 0, den = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    if (std::isnan(out[i])) return ::testing::AssertionFailure() << "element " << i << " not written";
    num += (out[i] - ref[i]) * (out[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  double err = std::sqrt(num / std::max(den, 1e-30));
  if (err > 1e-5) return ::testing::AssertionFailure() << "relative error " << err;
  return ::testing::AssertionSuccess();
}

// out[M x N] = a[M x K] @ b[K x N], row-major.
std::vector<double> matmul_ref(const std::vector<float>& a, const std::vector<float>& b, int64_t M, int64_t K,
                               int64_t N) {
  std::vector<double> c(size_t(M * N), 0.0);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t k = 0; k < K; ++k)
      for (int64_t j = 0; j < N; ++j)
        c[size_t(i * N + j)] += double(a[size_t(i * K + k)]) * b[size_t(k * N + j)];
  return c;
}

}  // namespace

// Broadcasting sources (a row vector b[12], a column c[10, 1]) over a 10 x 12 destination cut in
// 4 x 8 tiles: the edge tiles are 2 rows and 4 columns, through valid extents. Each instruction is
// its own nest; the row vector loads as a 1 x 8 tile, the column as 4 x 1.
TEST(PassTileOps, ElementwiseBroadcastingAndRaggedEdges) {
  Program got = expect_pass(R"(
func @bcast(%A: f32[10, 12], %b: f32[12], %c: f32[10, 1], %C: f32[10, 12] out) {
  TADD %C, %A, %b
  TMUL %C, %C, %c
})",
                            tile, R"(
func @bcast(%A: f32[10, 12], %b: f32[12], %c: f32[10, 1], %C: f32[10, 12] out) {
  for %e0 = 0 to 10 step 4 {
    alloc %x: f32[4, 8] vec
    alloc %x_1: f32[1, 8] vec
    alloc %y: f32[4, 8] vec
    for %e1 = 0 to 12 step 8 {
      TLOAD %x, %A[%e0:4 valid min(4, (10 - %e0)), %e1:8 valid min(8, (12 - %e1))]
      TLOAD %x_1, %b[%e1:8 valid min(8, (12 - %e1))]
      TADD %y, %x, %x_1
      TSTORE %C[%e0:4 valid min(4, (10 - %e0)), %e1:8 valid min(8, (12 - %e1))], %y
    }
  }
  for %e0_1 = 0 to 10 step 4 {
    alloc %x_2: f32[4, 8] vec
    alloc %x_3: f32[4, 1] vec
    alloc %y_1: f32[4, 8] vec
    for %e1_1 = 0 to 12 step 8 {
      TLOAD %x_2, %C[%e0_1:4 valid min(4, (10 - %e0_1)), %e1_1:8 valid min(8, (12 - %e1_1))]
      TLOAD %x_3, %c[%e0_1:4 valid min(4, (10 - %e0_1)), 0:1]
      TMUL %y_1, %x_2, %x_3
      TSTORE %C[%e0_1:4 valid min(4, (10 - %e0_1)), %e1_1:8 valid min(8, (12 - %e1_1))], %y_1
    }
  }
})",
                            Level::Tile);
  auto d = run(got, 7);
  std::vector<double> ref(120);
  for (int i = 0; i < 10; ++i)
    for (int j = 0; j < 12; ++j)
      ref[size_t(i * 12 + j)] = (double(d[0][size_t(i * 12 + j)]) + d[1][size_t(j)]) * d[2][size_t(i)];
  EXPECT_TRUE(matches(d[3], ref));
}

// Comparisons produce bool tiles; select takes its mask as bool; an iota continues across column
// tiles (its start advances with the column offset).
TEST(PassTileOps, CompareSelectAndIota) {
  Program got = expect_pass(R"(
func @sel(%A: f32[6, 12], %B: f32[6, 12], %C: f32[6, 12] out, %D: f32[3, 20] out) {
  alloc %m: bool[6, 12] gm
  TCMP_GT %m, %A, 0.0f
  TSEL %C, %m, %A, %B
  TCI %D, 1
})",
                            tile, R"(
func @sel(%A: f32[6, 12], %B: f32[6, 12], %C: f32[6, 12] out, %D: f32[3, 20] out) {
  alloc %m: bool[6, 12] gm
  for %e0 = 0 to 6 step 4 {
    alloc %x: f32[4, 8] vec
    alloc %y: bool[4, 8] vec
    for %e1 = 0 to 12 step 8 {
      TLOAD %x, %A[%e0:4 valid min(4, (6 - %e0)), %e1:8 valid min(8, (12 - %e1))]
      TCMP_GT %y, %x, 0.0f
      TSTORE %m[%e0:4 valid min(4, (6 - %e0)), %e1:8 valid min(8, (12 - %e1))], %y
    }
  }
  for %e0_1 = 0 to 6 step 4 {
    alloc %x_1: bool[4, 8] vec
    alloc %x_2: f32[4, 8] vec
    alloc %x_3: f32[4, 8] vec
    alloc %y_1: f32[4, 8] vec
    for %e1_1 = 0 to 12 step 8 {
      TLOAD %x_1, %m[%e0_1:4 valid min(4, (6 - %e0_1)), %e1_1:8 valid min(8, (12 - %e1_1))]
      TLOAD %x_2, %A[%e0_1:4 valid min(4, (6 - %e0_1)), %e1_1:8 valid min(8, (12 - %e1_1))]
      TLOAD %x_3, %B[%e0_1:4 valid min(4, (6 - %e0_1)), %e1_1:8 valid min(8, (12 - %e1_1))]
      TSEL %y_1, %x_1, %x_2, %x_3
      TSTORE %C[%e0_1:4 valid min(4, (6 - %e0_1)), %e1_1:8 valid min(8, (12 - %e1_1))], %y_1
    }
  }
  for %e1_2 = 0 to 20 step 8 {
    alloc %y_2: f32[3, 8] vec
    TCI %y_2, (%e1_2 + 1)
    TSTORE %D[0:3, %e1_2:8 valid min(8, (20 - %e1_2))], %y_2
  }
})",
                            Level::Tile);
  auto d = run(got, 3);
  std::vector<double> sel(72), iota(60);
  for (size_t i = 0; i < 72; ++i) sel[i] = d[0][i] > 0 ? d[0][i] : d[1][i];
  for (size_t i = 0; i < 60; ++i) iota[i] = double(1 + i % 20);
  EXPECT_TRUE(matches(d[2], sel));
  EXPECT_TRUE(matches(d[3], iota));
}

// A row reduction over 20 columns: chunks of 16 (twice the tile width), the first reduced into
// the accumulator and the rest combined into it (TADD for a sum, TMAX for a max); 32 / 16 = 2
// rows per tile, so 3 row tiles.
TEST(PassTileOps, RowReductionWithChunkedColumns) {
  Program got = expect_pass(R"(
func @rsum(%A: f32[6, 20], %C: f32[6, 1] out, %D: f32[6, 1] out) {
  TROWSUM %C, %A
  TROWMAX %D, %A
})",
                            tile, R"(
func @rsum(%A: f32[6, 20], %C: f32[6, 1] out, %D: f32[6, 1] out) {
  for %e0 = 0 to 6 step 2 {
    alloc %x: f32[2, 16] vec
    alloc %acc: f32[2, 1] vec
    alloc %part: f32[2, 1] vec
    TLOAD %x, %A[%e0:2 valid min(2, (6 - %e0)), 0:16]
    TROWSUM %acc, %x
    for %c = 16 to 20 step 16 {
      TLOAD %x, %A[%e0:2 valid min(2, (6 - %e0)), %c:16 valid min(16, (20 - %c))]
      TROWSUM %part, %x
      TADD %acc, %acc, %part
    }
    TSTORE %C[%e0:2 valid min(2, (6 - %e0)), 0:1], %acc
  }
  for %e0_1 = 0 to 6 step 2 {
    alloc %x_1: f32[2, 16] vec
    alloc %acc_1: f32[2, 1] vec
    alloc %part_1: f32[2, 1] vec
    TLOAD %x_1, %A[%e0_1:2 valid min(2, (6 - %e0_1)), 0:16]
    TROWMAX %acc_1, %x_1
    for %c_1 = 16 to 20 step 16 {
      TLOAD %x_1, %A[%e0_1:2 valid min(2, (6 - %e0_1)), %c_1:16 valid min(16, (20 - %c_1))]
      TROWMAX %part_1, %x_1
      TMAX %acc_1, %acc_1, %part_1
    }
    TSTORE %D[%e0_1:2 valid min(2, (6 - %e0_1)), 0:1], %acc_1
  }
})",
                            Level::Tile);
  auto d = run(got, 5);
  std::vector<double> sum(6, 0.0), mx(6, -1e300);
  for (size_t i = 0; i < 6; ++i)
    for (size_t j = 0; j < 20; ++j) {
      sum[i] += d[0][i * 20 + j];
      mx[i] = std::max(mx[i], double(d[0][i * 20 + j]));
    }
  EXPECT_TRUE(matches(d[1], sum));
  EXPECT_TRUE(matches(d[2], mx));
}

// A batched matmul whose batch dims broadcast both ways: A[2, 1, 5, 12] @ B[3, 12, 10] ->
// C[2, 3, 5, 10]. The batch loops index A by %m0 only (its dim 1 is 1) and B by %m1 only (it has
// no dim 0); M and N tile by 4 x 8 with ragged edges; K = 12 runs in steps of 8.
TEST(PassTileOps, BatchedMatmulWithBroadcastBatchDims) {
  Program got = expect_pass(R"(
func @bmm(%A: f32[2, 1, 5, 12], %B: f32[3, 12, 10], %C: f32[2, 3, 5, 10] out) {
  TMATMUL %C, %A, %B
})",
                            tile, R"(
func @bmm(%A: f32[2, 1, 5, 12], %B: f32[3, 12, 10], %C: f32[2, 3, 5, 10] out) {
  for %m0 = 0 to 2 {
    alloc %acc: f32[4, 8] acc
    alloc %a: f32[4, 8] mat
    alloc %b: f32[8, 8] mat
    for %m1 = 0 to 3 {
      for %m2 = 0 to 5 step 4 {
        for %m3 = 0 to 10 step 8 {
          TEXPANDS %acc, 0.0f
          for %k = 0 to 12 step 8 {
            TLOAD %a, %A[%m0, 0, %m2:4 valid min(4, (5 - %m2)), %k:8 valid min(8, (12 - %k))]
            TLOAD %b, %B[%m1, %k:8 valid min(8, (12 - %k)), %m3:8 valid min(8, (10 - %m3))]
            TMATMUL_ACC %acc, %a, %b
          }
          TSTORE %C[%m0, %m1, %m2:4 valid min(4, (5 - %m2)), %m3:8 valid min(8, (10 - %m3))], %acc
        }
      }
    }
  }
})",
                            Level::Tile);
  auto d = run(got, 11);
  std::vector<double> ref;
  for (int b0 = 0; b0 < 2; ++b0)
    for (int b1 = 0; b1 < 3; ++b1) {
      std::vector<float> a(d[0].begin() + b0 * 60, d[0].begin() + (b0 + 1) * 60);
      std::vector<float> b(d[1].begin() + b1 * 120, d[1].begin() + (b1 + 1) * 120);
      auto c = matmul_ref(a, b, 5, 12, 10);
      ref.insert(ref.end(), c.begin(), c.end());
    }
  EXPECT_TRUE(matches(d[2], ref));
}

// The seed's tile matmul after promotion: TMATMUL_ACC accumulates straight into the local %t (no
// accumulator of its own, no load or store of it); the final TMOV of the 4 x 4 tile into a window
// of C that is only 2 x 1 at the corner is one TSTORE, clamped by the window's valid extents.
TEST(PassTileOps, MatmulAccIntoPromotedTileAndStoreOfLargerTile) {
  Program got = expect_pass(R"(
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
})",
                            tile, R"(
func @mm(%A: f32[10, 12], %B: f32[12, 9], %C: f32[10, 9] out) {
  for %i = 0 to 10 step 4 {
    for %j = 0 to 9 step 4 {
      alloc %t: f32[4, 4] vec
      TEXPANDS %t, 0.0f
      for %k = 0 to 12 step 4 {
        alloc %a: f32[4, 4] mat
        alloc %b: f32[4, 4] mat
        TLOAD %a, %A[%i:4 valid min(4, (10 - %i)), %k:4 valid min(4, (12 - %k))]
        TLOAD %b, %B[%k:4 valid min(4, (12 - %k)), %j:4 valid min(4, (9 - %j))]
        TMATMUL_ACC %t, %a, %b
      }
      TSTORE %C[%i:4 valid min(4, (10 - %i)), %j:4 valid min(4, (9 - %j))], %t
    }
  }
})",
                            Level::Tile);
  auto d = run(got, 13);
  EXPECT_TRUE(matches(d[2], matmul_ref(d[0], d[1], 10, 12, 9)));
}

// Local destinations and sources: a matmul into a local tile walks K itself (TEXPANDS, then
// TMATMUL_ACC per K step); a copy of a global into a local tile of its shape is one TLOAD;
// instructions on local tiles only are already tile level and pass through; the copy of a local
// tile into a global is one TSTORE.
TEST(PassTileOps, LocalTilesComputedInPlace) {
  Program got = expect_pass(R"(
func @loc(%A: f32[4, 12], %B: f32[12, 6], %X: f32[4, 6], %C: f32[4, 6] out) {
  alloc %t: f32[4, 6] vec
  TMATMUL %t, %A, %B
  alloc %u: f32[4, 6] vec
  TMOV %u, %X
  TADD %t, %t, %u
  TRELU %t, %t
  TMOV %C, %t
})",
                            tile, R"(
func @loc(%A: f32[4, 12], %B: f32[12, 6], %X: f32[4, 6], %C: f32[4, 6] out) {
  alloc %t: f32[4, 6] vec
  alloc %a: f32[4, 8] mat
  alloc %b: f32[8, 6] mat
  TEXPANDS %t, 0.0f
  for %k = 0 to 12 step 8 {
    TLOAD %a, %A[0:4, %k:8 valid min(8, (12 - %k))]
    TLOAD %b, %B[%k:8 valid min(8, (12 - %k)), 0:6]
    TMATMUL_ACC %t, %a, %b
  }
  alloc %u: f32[4, 6] vec
  TLOAD %u, %X
  TADD %t, %t, %u
  TRELU %t, %t
  TSTORE %C, %t
})",
                            Level::Tile);
  auto d = run(got, 17);
  auto ref = matmul_ref(d[0], d[1], 4, 12, 6);
  for (size_t i = 0; i < ref.size(); ++i) ref[i] = std::max(0.0, ref[i] + d[2][i]);
  EXPECT_TRUE(matches(d[3], ref));
}

// Instructions that exist only at tile level cannot take global tensors.
TEST(PassTileOps, TileOnlyInstructionOnGlobalsIsAnError) {
  Program p = parse_program(R"(
func @bad(%A: f32[4, 1], %C: f32[4, 8] out) {
  TROWEXPAND %C, %A
})");
  try {
    tile(p);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("TROWEXPAND is a tile-level instruction"), std::string::npos)
        << e.what();
  }
}

// A source with fewer rows than the destination (and more than one, so no broadcast): the tiles
// past its end see a valid extent clamped at 0, not a negative one, so they write nothing; the
// rows it covers are computed.
TEST(PassTileOps, SourceShorterThanTheDestination) {
  Program p = parse_program(R"(
func @short(%A: f32[12, 8], %B: f32[2, 8], %C: f32[12, 8] out) {
  TADD %C, %A, %B
})");
  auto got = run(p, 3);
  const auto& a = got[0];
  const auto& b = got[1];
  const auto& c = got[2];
  for (int r = 0; r < 12; ++r)
    for (int k = 0; k < 8; ++k) {
      const size_t i = size_t(r * 8 + k);
      if (r < 2)
        EXPECT_EQ(c[i], a[i] + b[i]) << r << " " << k;
      else
        EXPECT_TRUE(std::isnan(c[i])) << r << " " << k;
    }
}
