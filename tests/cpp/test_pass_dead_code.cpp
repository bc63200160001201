// eliminate_dead_code: before/after tests. Instructions whose results nothing live reads go, with
// their buffers' allocations and loops left empty; writes into outputs and inputs, and every write
// to a buffer something live reads, stay.
#include "passes/dead_code.h"

#include "test_pass_util.h"

using namespace pass_test;

namespace {

Program dce(const Program& p) { return passes::eliminate_dead_code(p); }

void expect_dce(const char* before, const char* after) {
  Program got = expect_pass(before, dce, after, Level::Tensor);
  EXPECT_TRUE(equivalent(parse_program(before), got));
}

}  // namespace

// A product and its row maxima nothing returns (a traced model's unused branch): dropped, with their
// temporaries; the output's chain stays.
TEST(PassDeadCode, UnusedChainDropped) {
  expect_dce(R"(
func @f(%x: f32[6, 8], %w: f32[8, 8], %y: f32[6, 8] out) {
  alloc %t: f32[6, 8] gm
  TMATMUL %t, %x, %w
  alloc %u: f32[6, 1] gm
  TROWMAX %u, %t
  alloc %v: f32[6, 8] gm
  TEXP %v, %x
  TADD %y, %v, 1.0f
})",
             R"(
func @f(%x: f32[6, 8], %w: f32[8, 8], %y: f32[6, 8] out) {
  alloc %v: f32[6, 8] gm
  TEXP %v, %x
  TADD %y, %v, 1.0f
})");
}

// A loop whose only instruction is dead goes whole; a write into an input (an in-place update the
// caller sees) is an effect and stays, as does everything it reads.
TEST(PassDeadCode, DeadLoopDroppedInputWritesKept) {
  expect_dce(R"(
func @f(%x: f32[6, 8], %y: f32[6, 8] out) {
  alloc %t: f32[6, 8] gm
  for %i = 0 to 6 step 2 {
    TMUL %t[%i:2 valid min(2, (6 - %i)), 0:8], %x[%i:2 valid min(2, (6 - %i)), 0:8], 2.0f
  }
  alloc %s: f32[6, 8] gm
  TABS %s, %y
  TADD %x, %s, 1.0f
  TNEG %y, %s
})",
             R"(
func @f(%x: f32[6, 8], %y: f32[6, 8] out) {
  alloc %s: f32[6, 8] gm
  TABS %s, %y
  TADD %x, %s, 1.0f
  TNEG %y, %s
})");
}

// A buffer read by something live keeps every write to it, partial ones included (liveness is
// per buffer): nothing changes.
TEST(PassDeadCode, PartialWritesOfALiveBufferKept) {
  const char* p = R"(
func @f(%x: f32[6, 8], %y: f32[6, 8] out) {
  alloc %t: f32[6, 8] gm
  TMUL %t[0:3, 0:8], %x[0:3, 0:8], 2.0f
  TNEG %t[3:3, 0:8], %x[3:3, 0:8]
  TADD %y, %t, 1.0f
})";
  expect_dce(p, p);
}
