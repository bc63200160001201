// reuse_temporaries: global temporaries whose lifetimes do not overlap share one buffer; an
// elementwise nest reading one temporary and writing the next through the same tiles computes in
// place. Results are checked on the interpreter against the program without reuse.
#include "passes/reuse_temporaries.h"

#include "ir/builder.h"
#include "ir/visitor.h"
#include "passes/pipeline.h"
#include "test_pass_util.h"

using namespace pass_test;

namespace {

int global_temps(const Program& p) {
  int n = 0;
  for_each_stmt(p.body, [&](const Stmt& s) {
    n += s->kind == StmtKind::Alloc && s->buffer->space == Space::Global &&
         s->buffer->kind == BufferKind::Temp;
  });
  return n;
}

Program chain(int64_t rows, int64_t cols) {
  Builder b("chain");
  View x = b.add_param("x", DType::F32, {rows, cols});
  View y = b.unary(Opcode::TEXP, x);
  y = b.binary(Opcode::TMUL, y, float_imm(0.5));
  y = b.binary(Opcode::TADD, y, x);
  y = b.unary(Opcode::TTANH, y);
  y = b.unary(Opcode::TRELU, y);
  return b.finish({y});
}

}  // namespace

// A five-op chain with fusion off: four full-size temporaries without reuse, one with it.
TEST(PassReuseTemporaries, FiveOpChainWithFusionOffNeedsOneTemporary) {
  Program p = chain(37, 70);
  passes::PipelineOptions o;
  o.fusion_off = true;
  o.promote = false;
  passes::TileSizes ts = small_tiles();
  o.tile_rows = ts.elem_rows;
  o.tile_cols = ts.elem_cols;
  passes::Lowered l = passes::lower(p, o);
  Program unplanned = passes::tile_ops(l.expanded, ts);
  EXPECT_EQ(global_temps(unplanned), 4);
  EXPECT_EQ(global_temps(l.tile), 1) << print(l.tile);
  EXPECT_TRUE(equivalent(unplanned, l.tile));
}

// A temporary still read later keeps its own buffer; one read through another window does too.
TEST(PassReuseTemporaries, OverlappingLifetimesAndOtherWindowsKeepTheirBuffers) {
  Program p = parse_program(R"(
func @k(%A: f32[8, 8], %C: f32[8, 8] out) {
  alloc %t1: f32[8, 8] gm
  alloc %t2: f32[8, 8] gm
  alloc %t3: f32[8, 8] gm
  for %i1 = 0 to 8 step 4 {
    alloc %x1: f32[4, 8] vec
    TLOAD %x1, %A[%i1:4, 0:8]
    TSTORE %t1[%i1:4, 0:8], %x1
  }
  for %i2 = 0 to 8 step 4 {
    alloc %x2: f32[4, 8] vec
    TLOAD %x2, %t1[%i2:4, 0:8]
    TEXP %x2, %x2
    TSTORE %t2[%i2:4, 0:8], %x2
  }
  for %i3 = 0 to 4 step 4 {
    alloc %x3: f32[4, 8] vec
    TLOAD %x3, %t2[(%i3 + 4):4, 0:8]
    TSTORE %t3[%i3:4, 0:8], %x3
    TLOAD %x3, %t2[%i3:4, 0:8]
    TSTORE %t3[(%i3 + 4):4, 0:8], %x3
  }
  for %i4 = 0 to 8 step 4 {
    alloc %x4: f32[4, 8] vec
    alloc %y4: f32[4, 8] vec
    TLOAD %x4, %t3[%i4:4, 0:8]
    TLOAD %y4, %t1[%i4:4, 0:8]
    TADD %x4, %x4, %y4
    TSTORE %C[%i4:4, 0:8], %x4
  }
})");
  Program got = passes::reuse_temporaries(p);
  // t2 lives in place of nothing (t1 is read at the end); t3 is written through other windows than
  // t2 is read, so it cannot take t2's buffer at that statement: all three stay.
  EXPECT_EQ(global_temps(got), 3) << print(got);
  EXPECT_TRUE(equivalent(p, got));
}

// Dynamic dims all have the bound as their shape: [%m, %n] and [%n, %m] do not share a buffer
// (argmax along one dim and argmin along the other of one dynamic input wrote out of bounds),
// while two [%m, %n] temporaries still do.
TEST(PassReuseTemporaries, DynamicTemporariesShareOnlyWithEqualExtents) {
  auto program = [](const char* second) {
    return parse_program(std::string(R"(
func @k(%A: f32[%m, %n], %B: f32[)") +
                         second + R"(], %C: f32[%m, %n] out, %D: f32[)" + second + R"(] out) {
  alloc %t1: f32[%m, %n] gm
  alloc %t2: f32[)" + second +
                         R"(] gm
  TEXP %t1, %A
  TMOV %C, %t1
  TEXP %t2, %B
  TMOV %D, %t2
})");
  };
  Program swapped = program("%n, %m");
  EXPECT_EQ(global_temps(passes::reuse_temporaries(swapped)), 2) << print(passes::reuse_temporaries(swapped));
  Program same = program("%m, %n");
  EXPECT_EQ(global_temps(passes::reuse_temporaries(same)), 1) << print(passes::reuse_temporaries(same));
}
