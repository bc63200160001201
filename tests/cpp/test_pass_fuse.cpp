// fuse: before/after tests. Consecutive tensor-level instructions sharing a row space become one
// loop nest whose intermediates live in tiles; a large matmul takes its elementwise epilogue into
// its accumulator. Each result is also run on the interpreter (tiled with the same 4 x 8 tiles)
// against the unfused program.
#include "passes/fuse.h"

#include "ir/mutator.h"
#include "passes/fusion_group.h"
#include "passes/tile_fused.h"

#include "test_pass_util.h"

using namespace pass_test;

namespace {

using Mode = passes::FusionOptions::Mode;

// fuse marks the groups and tile_ops emits their nests: these tests check both halves at once,
// on the marked program with each group replaced by its nest as tile_ops emits it (instructions
// outside groups stay at the tensor level).
class EmitGroups : public StmtMutator {
 public:
  explicit EmitGroups(const Program& p) : nb_(p), refs_(passes::fusion::count_refs(p.body)) {}
  std::vector<Stmt> mutate_block(const std::vector<Stmt>& in) override {
    std::vector<Stmt> out;
    std::set<const Buffer*> allocs, dropped;
    for (const Stmt& s : in) {
      if (s->kind == StmtKind::Alloc) allocs.insert(s->buffer.get());
      if (passes::fusion::is_group(s))
        passes::emit_fused_group(nb_, small_tiles(), refs_, passes::fusion::group_of(*s, allocs), s->body,
                                 out, dropped,
                                 [this](const Stmt& t, std::vector<Stmt>& o) { mutate_into(t, o); });
      else
        mutate_into(s, out);
    }
    passes::drop_allocs(out, dropped);
    return out;
  }

 private:
  passes::NestBuilder nb_;
  std::map<const Buffer*, int> refs_;
};

Program fuse_with(const Program& p, Mode mode, std::set<std::string> kinds = {}) {
  passes::FusionOptions o;
  o.mode = mode;
  o.kinds = std::move(kinds);
  Program marked = passes::fuse(p, o, small_tiles());
  return EmitGroups(marked).mutate_program(marked);
}

Program fuse_full(const Program& p) { return fuse_with(p, passes::FusionOptions::Full); }
// Everything but matmuls: elementwise chains and row reductions.
Program fuse_no_matmul(const Program& p) {
  std::set<std::string> kinds(passes::fusion_names().begin(), passes::fusion_names().end());
  kinds.erase("matmul");
  return fuse_with(p, passes::FusionOptions::Listed, kinds);
}
// fusion=False: only the instructions of one composite op.
Program fuse_default(const Program& p) { return fuse_with(p, passes::FusionOptions::Default); }

template <class Pass>
void expect_fuse(const char* before, Pass&& pass, const char* after) {
  Program got = expect_pass(before, pass, after, Level::Tensor);
  EXPECT_TRUE(equivalent(parse_program(before), got));
}

}  // namespace

// add (row-vector broadcast) -> exp -> scale: one nest over 4 x 8 tiles; the temporaries are
// dropped (no allocation, no store) and the chain computes in place in one tile.
TEST(PassFuse, ElementwiseChainIntoOneNest) {
  const char* before = R"(
func @chain(%A: f32[10, 12], %b: f32[12], %C: f32[10, 12] out) {
  alloc %t1: f32[10, 12] gm
  TADD %t1, %A, %b
  alloc %t2: f32[10, 12] gm
  TEXP %t2, %t1
  TMUL %C, %t2, 2.0f
})";
  expect_fuse(before, fuse_no_matmul, R"(
func @chain(%A: f32[10, 12], %b: f32[12], %C: f32[10, 12] out) {
  for %f0 = 0 to 10 step 4 {
    alloc %x: f32[4, 8] vec
    alloc %x_1: f32[1, 8] vec
    alloc %y: f32[4, 8] vec
    for %f1 = 0 to 12 step 8 {
      TLOAD %x, %A[%f0:4 valid min(4, (10 - %f0)), %f1:8 valid min(8, (12 - %f1))]
      TLOAD %x_1, %b[%f1:8 valid min(8, (12 - %f1))]
      TADD %y, %x, %x_1
      TEXP %y, %y
      TMUL %y, %y, 2.0f
      TSTORE %C[%f0:4 valid min(4, (10 - %f0)), %f1:8 valid min(8, (12 - %f1))], %y
    }
  }
})");
  // fusion="off", and fusion=False on instructions that come from no composite op: nothing changes.
  Program p = parse_program(before);
  EXPECT_TRUE(same_program(fuse_with(p, passes::FusionOptions::Off), p));
  EXPECT_TRUE(same_program(fuse_default(p), p));
  // The marked program: one labelled group, which tile_ops turns into the nest above.
  passes::FusionOptions full;
  full.mode = passes::FusionOptions::Full;
  std::string marked = print(passes::fuse(p, full, small_tiles()));
  EXPECT_NE(marked.find("seq fused_rows {"), std::string::npos) << marked;
}

// A softmax (row max, subtract, exp, row sum, divide) with fusion Full: one nest over full-width
// row tiles (4 rows of 8, the last tile ragged), every intermediate in a tile.
TEST(PassFuse, SoftmaxRowGroup) {
  const char* before = R"(
func @softmax(%X: f32[7, 8], %C: f32[7, 8] out) {
  alloc %m: f32[7, 1] gm
  TROWMAX %m, %X
  alloc %s: f32[7, 8] gm
  TSUB %s, %X, %m
  alloc %e: f32[7, 8] gm
  TEXP %e, %s
  alloc %z: f32[7, 1] gm
  TROWSUM %z, %e
  TDIV %C, %e, %z
})";
  const char* after = R"(
func @softmax(%X: f32[7, 8], %C: f32[7, 8] out) {
  for %f0 = 0 to 7 step 4 {
    alloc %x: f32[4, 8] vec
    alloc %r: f32[4, 1] vec
    alloc %y: f32[4, 8] vec
    alloc %r_1: f32[4, 1] vec
    TLOAD %x, %X[%f0:4 valid min(4, (7 - %f0)), 0:8]
    TROWMAX %r, %x
    TSUB %y, %x, %r
    TEXP %y, %y
    TROWSUM %r_1, %y
    TDIV %y, %y, %r_1
    TSTORE %C[%f0:4 valid min(4, (7 - %f0)), 0:8], %y
  }
})";
  expect_fuse(before, fuse_full, after);
  // In the default mode the instructions of one composite op fuse: here lower_composites's
  // expansion of a SOFTMAX, labelled with its name.
  const char* composite = R"(
func @softmax(%X: f32[7, 8], %C: f32[7, 8] out) {
  seq softmax {
    alloc %m: f32[7, 1] gm
    TROWMAX %m, %X
    alloc %s: f32[7, 8] gm
    TSUB %s, %X, %m
    alloc %e: f32[7, 8] gm
    TEXP %e, %s
    alloc %z: f32[7, 1] gm
    TROWSUM %z, %e
    TDIV %C, %e, %z
  }
})";
  expect_fuse(composite, fuse_default, after);
  Program plain = parse_program(before);
  EXPECT_TRUE(same_program(fuse_default(plain), plain));
}

// An attention block with fusion Full (as the front end builds it for 2 heads, rows in blocks of
// 4): scores = Q K^T (a matmul with a small right operand joins the row group), scale, softmax,
// times V, stored into the output window; nothing reaches memory in between.
TEST(PassFuse, AttentionBlockRowGroup) {
  expect_fuse(R"(
func @attn(%Q: f32[2, 6, 4], %K: f32[2, 6, 4], %V: f32[2, 6, 4], %t: f32[2, 6, 4] out) {
  for %i = 0 to 6 step 4 {
    alloc %t_1: f32[2, 4, 6] gm
    TMATMUL %t_1[0:2, 0:4 valid min(4, (6 - %i)), 0:6], %Q[0:2, %i:4 valid min(4, (6 - %i)), 0:4], %K[0:2, 0:6, 0:4] perm(0, 2, 1)
    alloc %t_2: f32[2, 4, 6] gm
    TDIV %t_2[0:2, 0:4 valid min(4, (6 - %i)), 0:6], %t_1[0:2, 0:4 valid min(4, (6 - %i)), 0:6], 2.0f
    alloc %t_3: f32[2, 4, 1] gm
    TROWMAX %t_3[0:2, 0:4 valid min(4, (6 - %i)), 0:1], %t_2[0:2, 0:4 valid min(4, (6 - %i)), 0:6]
    alloc %t_4: f32[2, 4, 6] gm
    TSUB %t_4[0:2, 0:4 valid min(4, (6 - %i)), 0:6], %t_2[0:2, 0:4 valid min(4, (6 - %i)), 0:6], %t_3[0:2, 0:4 valid min(4, (6 - %i)), 0:1]
    alloc %t_5: f32[2, 4, 6] gm
    TEXP %t_5[0:2, 0:4 valid min(4, (6 - %i)), 0:6], %t_4[0:2, 0:4 valid min(4, (6 - %i)), 0:6]
    alloc %t_6: f32[2, 4, 1] gm
    TROWSUM %t_6[0:2, 0:4 valid min(4, (6 - %i)), 0:1], %t_5[0:2, 0:4 valid min(4, (6 - %i)), 0:6]
    alloc %t_7: f32[2, 4, 6] gm
    TDIV %t_7[0:2, 0:4 valid min(4, (6 - %i)), 0:6], %t_5[0:2, 0:4 valid min(4, (6 - %i)), 0:6], %t_6[0:2, 0:4 valid min(4, (6 - %i)), 0:1]
    alloc %t_8: f32[2, 4, 4] gm
    TMATMUL %t_8[0:2, 0:4 valid min(4, (6 - %i)), 0:4], %t_7[0:2, 0:4 valid min(4, (6 - %i)), 0:6], %V
    TMOV %t[0:2, %i:4 valid min(4, (6 - %i)), 0:4], %t_8[0:2, 0:4 valid min(4, (6 - %i)), 0:4]
  }
})",
              fuse_full, R"(
func @attn(%Q: f32[2, 6, 4], %K: f32[2, 6, 4], %V: f32[2, 6, 4], %t: f32[2, 6, 4] out) {
  for %i = 0 to 6 step 4 {
    for %f0 = 0 to 2 {
      alloc %x: f32[4, 4] vec
      alloc %x_1: f32[4, 6] vec
      alloc %y: f32[4, 6] vec
      alloc %r: f32[4, 1] vec
      alloc %r_1: f32[4, 1] vec
      alloc %x_2: f32[6, 4] vec
      alloc %y_1: f32[4, 4] vec
      TLOAD %x, %Q[%f0, %i:4 valid min(4, (6 - %i)), 0:4]
      TLOAD %x_1, %K[%f0, 0:6, 0:4] perm(2, 1)
      TMATMUL %y, %x, %x_1
      TDIV %y, %y, 2.0f
      TROWMAX %r, %y
      TSUB %y, %y, %r
      TEXP %y, %y
      TROWSUM %r_1, %y
      TDIV %y, %y, %r_1
      TLOAD %x_2, %V[%f0, 0:6, 0:4]
      TMATMUL %y_1, %y, %x_2
      TSTORE %t[%f0, %i:4 valid min(4, (6 - %i)), 0:4], %y_1
    }
  }
})");
}

// fusion=['matmul', 'add', 'relu'] on a linear layer whose weight is large (520 x 512 > 256 K
// elements): the matmul keeps its own M x N x K tiling and bias + relu run on the accumulator
// tile before its single store.
TEST(PassFuse, MatmulEpilogueListed) {
  auto listed = [](const Program& p) {
    return fuse_with(p, passes::FusionOptions::Listed, {"matmul", "add", "relu"});
  };
  expect_fuse(R"(
func @linear(%x: f32[6, 520], %w: f32[520, 512], %b: f32[512], %C: f32[6, 512] out) {
  alloc %t: f32[6, 512] gm
  TMATMUL %t, %x, %w
  alloc %t_1: f32[6, 512] gm
  TADD %t_1, %t, %b
  TRELU %C, %t_1
})",
              listed, R"(
func @linear(%x: f32[6, 520], %w: f32[520, 512], %b: f32[512], %C: f32[6, 512] out) {
  for %m0 = 0 to 6 step 4 {
    alloc %acc: f32[4, 8] acc
    alloc %a: f32[4, 8] mat
    alloc %b_1: f32[8, 8] mat
    alloc %x_1: f32[1, 8] vec
    for %m1 = 0 to 512 step 8 {
      TEXPANDS %acc, 0.0f
      for %k = 0 to 520 step 8 {
        TLOAD %a, %x[%m0:4 valid min(4, (6 - %m0)), %k:8 valid min(8, (520 - %k))]
        TLOAD %b_1, %w[%k:8 valid min(8, (520 - %k)), %m1:8 valid min(8, (512 - %m1))]
        TMATMUL_ACC %acc, %a, %b_1
      }
      TLOAD %x_1, %b[%m1:8 valid min(8, (512 - %m1))]
      TADD %acc, %acc, %x_1
      TRELU %acc, %acc
      TSTORE %C[%m0:4 valid min(4, (6 - %m0)), %m1:8 valid min(8, (512 - %m1))], %acc
    }
  }
})");
}

// The same layer with a small weight: with 'matmul' listed it joins a row group (the whole 6 x 12
// input is one row tile); with only 'add' and 'relu' listed the matmul is a group boundary, and
// only bias + relu fuse, reading the matmul's result from memory; with 'matmul' and 'relu'
// listed nothing fuses (the add between them is not listed), nor with fusion=False.
TEST(PassFuse, SmallMatmulListedVersusDefault) {
  const char* before = R"(
func @linear(%x: f32[6, 12], %w: f32[12, 10], %b: f32[10], %C: f32[6, 10] out) {
  alloc %t: f32[6, 10] gm
  TMATMUL %t, %x, %w
  alloc %t_1: f32[6, 10] gm
  TADD %t_1, %t, %b
  TRELU %C, %t_1
})";
  auto listed = [](const Program& p) {
    return fuse_with(p, passes::FusionOptions::Listed, {"matmul", "add", "relu"});
  };
  expect_fuse(before, listed, R"(
func @linear(%x: f32[6, 12], %w: f32[12, 10], %b: f32[10], %C: f32[6, 10] out) {
  alloc %x_1: f32[6, 12] vec
  alloc %x_2: f32[12, 10] vec
  alloc %y: f32[6, 10] vec
  alloc %x_3: f32[1, 10] vec
  TLOAD %x_1, %x
  TLOAD %x_2, %w
  TMATMUL %y, %x_1, %x_2
  TLOAD %x_3, %b
  TADD %y, %y, %x_3
  TRELU %y, %y
  TSTORE %C, %y
})");
  auto add_relu = [](const Program& p) {
    return fuse_with(p, passes::FusionOptions::Listed, {"add", "relu"});
  };
  expect_fuse(before, add_relu, R"(
func @linear(%x: f32[6, 12], %w: f32[12, 10], %b: f32[10], %C: f32[6, 10] out) {
  alloc %t: f32[6, 10] gm
  TMATMUL %t, %x, %w
  for %f0 = 0 to 6 step 4 {
    alloc %x_1: f32[4, 8] vec
    alloc %x_2: f32[1, 8] vec
    alloc %y: f32[4, 8] vec
    for %f1 = 0 to 10 step 8 {
      TLOAD %x_1, %t[%f0:4 valid min(4, (6 - %f0)), %f1:8 valid min(8, (10 - %f1))]
      TLOAD %x_2, %b[%f1:8 valid min(8, (10 - %f1))]
      TADD %y, %x_1, %x_2
      TRELU %y, %y
      TSTORE %C[%f0:4 valid min(4, (6 - %f0)), %f1:8 valid min(8, (10 - %f1))], %y
    }
  }
})");
  Program p = parse_program(before);
  EXPECT_TRUE(same_program(fuse_with(p, passes::FusionOptions::Listed, {"matmul", "relu"}), p));
  EXPECT_TRUE(same_program(fuse_default(p), p));
  EXPECT_THROW(fuse_with(p, passes::FusionOptions::Listed, {"matmul", "bogus"}), Error);
}

// A temporary read after the group (by a matmul, which the default mode does not fuse) is stored
// from its tile inside the nest and keeps its allocation; the next op computes into a new tile.
// The row vector %b does not depend on the loop's rows: its load opens the loop body.
TEST(PassFuse, TemporaryUsedAfterTheGroupIsStored) {
  expect_fuse(R"(
func @bound(%A: f32[6, 8], %b: f32[8], %W: f32[8, 4], %C: f32[6, 8] out, %D: f32[6, 4] out) {
  alloc %t1: f32[6, 8] gm
  TADD %t1, %A, %b
  TEXP %C, %t1
  TMATMUL %D, %t1, %W
})",
              fuse_no_matmul, R"(
func @bound(%A: f32[6, 8], %b: f32[8], %W: f32[8, 4], %C: f32[6, 8] out, %D: f32[6, 4] out) {
  alloc %t1: f32[6, 8] gm
  for %f0 = 0 to 6 step 4 {
    alloc %x: f32[4, 8] vec
    alloc %x_1: f32[1, 8] vec
    alloc %y: f32[4, 8] vec
    alloc %y_1: f32[4, 8] vec
    TLOAD %x_1, %b
    TLOAD %x, %A[%f0:4 valid min(4, (6 - %f0)), 0:8]
    TADD %y, %x, %x_1
    TSTORE %t1[%f0:4 valid min(4, (6 - %f0)), 0:8], %y
    TEXP %y_1, %y
    TSTORE %C[%f0:4 valid min(4, (6 - %f0)), 0:8], %y_1
  }
  TMATMUL %D, %t1, %W
})");
}

// The group writes C[0:4] and rereads it (stored, then loaded again: the store comes first); the
// third instruction reads another window of C, which the group may not reorder against: it ends
// the group.
TEST(PassFuse, ReadThroughAnotherWindowOfAWrittenBufferEndsTheGroup) {
  expect_fuse(R"(
func @window(%A: f32[8, 8], %C: f32[8, 8] out, %D: f32[4, 8] out) {
  TADD %C[0:4, 0:8], %A[0:4, 0:8], 1.0f
  TEXP %C[0:4, 0:8], %C[0:4, 0:8]
  TMUL %D, %C[4:4, 0:8], 2.0f
})",
              fuse_full, R"(
func @window(%A: f32[8, 8], %C: f32[8, 8] out, %D: f32[4, 8] out) {
  alloc %x: f32[4, 8] vec
  alloc %y: f32[4, 8] vec
  alloc %x_1: f32[4, 8] vec
  alloc %y_1: f32[4, 8] vec
  TLOAD %x, %A[0:4, 0:8]
  TADD %y, %x, 1.0f
  TSTORE %C[0:4, 0:8], %y
  TLOAD %x_1, %C[0:4, 0:8]
  TEXP %y_1, %x_1
  TSTORE %C[0:4, 0:8], %y_1
  TMUL %D, %C[4:4, 0:8], 2.0f
})");
}

// Regression: a copy (TMOV) into a dropped temporary reuses the loaded tile of its source; that
// tile must not then be overwritten in place, since the source is read again later (here by the
// add) or, when its load is hoisted out of an inner loop, by the next iteration.
TEST(PassFuse, CopyOfALoadedTileIsNotOverwritten) {
  expect_fuse(R"(
func @alias(%A: f32[4, 8], %C: f32[4, 8] out) {
  alloc %t1: f32[4, 8] gm
  TMOV %t1, %A
  alloc %t2: f32[4, 8] gm
  TEXP %t2, %t1
  TADD %C, %t2, %A
})",
              fuse_no_matmul, R"(
func @alias(%A: f32[4, 8], %C: f32[4, 8] out) {
  alloc %x: f32[4, 8] vec
  alloc %y: f32[4, 8] vec
  TLOAD %x, %A
  TEXP %y, %x
  TADD %y, %y, %x
  TSTORE %C, %y
})");
  expect_fuse(R"(
func @alias2(%A: f32[4, 8], %C: f32[2, 3, 4, 8] out) {
  alloc %t1: f32[2, 3, 4, 8] gm
  TMOV %t1, %A
  TEXP %C, %t1
})",
              fuse_no_matmul, R"(
func @alias2(%A: f32[4, 8], %C: f32[2, 3, 4, 8] out) {
  for %f0 = 0 to 2 {
    alloc %x: f32[4, 8] vec
    alloc %y: f32[4, 8] vec
    TLOAD %x, %A
    for %f1 = 0 to 3 {
      TEXP %y, %x
      TSTORE %C[%f0, %f1, 0:4, 0:8], %y
    }
  }
})");
}

// Instructions over different row spaces do not fuse; single instructions are left to tiling.
TEST(PassFuse, DifferentRowSpacesLeftAlone) {
  const char* p = R"(
func @rows(%A: f32[6, 8], %B: f32[4, 8], %C: f32[6, 8] out, %D: f32[4, 8] out) {
  TADD %C, %A, 1.0f
  TEXP %D, %B
})";
  expect_fuse(p, fuse_full, p);
}

// A group that read a buffer through one window must not write it through another (here shifted by
// a row): fused tile by tile, the second tile would read a row the first already overwrote.
TEST(PassFuse, WriteThroughAnotherWindowOfAReadBufferEndsTheGroup) {
  Program p = parse_program(R"(
func @shift(%A: f32[9, 8], %C: f32[9, 8] out, %D: f32[8, 8] out) {
  if (1 < 2) {
    TMOV %C, %A
  }
  TMUL %D, %C[0:8, 0:8], 2.0f
  TADD %C[1:8, 0:8], %D, 1.0f
})");
  EXPECT_TRUE(equivalent(p, fuse_full(p)));
}

// A conversion to f16 inside a chain rounds: it must not join a group computing in f32 tiles.
TEST(PassFuse, NarrowingConversionRoundsBetweenGroups) {
  Program p = parse_program(R"(
func @h(%A: f32[8, 8], %C: f32[8, 8] out) {
  alloc %t: f32[8, 8] gm
  alloc %h: f16[8, 8] gm
  alloc %u: f32[8, 8] gm
  TMUL %t, %A, 3.0f
  TCVT %h, %t
  TCVT %u, %h
  TADD %C, %u, 1.0f
})");
  EXPECT_TRUE(equivalent(p, fuse_full(p)));
}
