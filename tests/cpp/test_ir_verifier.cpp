// The verifier: valid programs pass, and each kind of violation is caught with a useful message.
// Most cases are written as IR text, which is the shortest way to state a program.
#include <gtest/gtest.h>

#include "ir/ir.h"
#include "ir/parser.h"
#include "ir/printer.h"
#include "ir/verifier.h"

namespace pypto::ir {
namespace {

// Expects verify to throw an Error whose message contains `msg`.
void expect_violation(const Program& p, Level level, const std::string& msg) {
  try {
    verify(p, level);
    ADD_FAILURE() << "no violation reported; expected: " << msg << "\n" << print(p);
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(msg), std::string::npos)
        << "message: " << e.what() << "\nexpected: " << msg;
  }
}

void expect_violation(const std::string& text, Level level, const std::string& msg) {
  SCOPED_TRACE(text);
  expect_violation(parse_program(text), level, msg);
}

const char* kGood = R"(
func @good(%A: f32[100, 70], %B: f32[70, 40], %C: f32[100, 40] out, %s: f32) {
  parallel for %i = 0 to 100 step 32 {
    alloc %acc: f32[32, 40] acc
    alloc %a: f32[32, 70] mat
    alloc %b: f32[70, 40] mat
    alloc %v: f32[32, 40] vec
    alloc %r: f32[32, 1] vec
    alloc %m: bool[32, 40] vec
    let %rows = min(32, (100 - %i))
    TLOAD %a, %A[%i:32 valid %rows, 0:70]
    TLOAD %b, %B
    TMATMUL %acc, %a, %b
    TMOV %v, %acc
    TADD %v, %v, %s
    TROWMAX %r, %v
    TROWEXPAND %v, %r
    TCMP_LT %m, %v, 0.0f
    TSEL %v, %m, %v, 1.0f
    if (%rows < 32) {
      TSTORE %C[%i:32 valid %rows, 0:40], %v
    } else {
      TSTORE %C[%i:32, 0:40], %v
    }
    PIPE_BARRIER 2
  }
}
)";

TEST(IrVerifier, AcceptsValidPrograms) {
  Program p = parse_program(kGood);
  EXPECT_NO_THROW(verify(p, Level::Tile));
  EXPECT_NO_THROW(verify(p, Level::Tensor));
}

TEST(IrVerifier, NamesAndScopes) {
  expect_violation("func @k(%A: f32[4], %A: f32[4]) { }", Level::Tensor, "name %A is defined twice");
  expect_violation("func @k(%A: f32[4], %n: i64) { for %n = 0 to 4 { } }", Level::Tensor,
                   "name %n is defined twice");
  expect_violation("func @k(%A: f32[4]) { let %x = 1 let %x = 2 }", Level::Tensor,
                   "name %x is defined twice");
  // Sibling loops may not reuse a name either: one namespace per program.
  expect_violation("func @k(%A: f32[4]) { for %i = 0 to 4 { } for %i = 0 to 4 { } }", Level::Tensor,
                   "name %i is defined twice");

  // The parser rejects undefined names in text, so out-of-scope uses are built by hand.
  Program p = parse_program("func @k(%A: f32[4]) { for %i = 0 to 4 { alloc %t: f32[4] gm } TEXP %A, %A }");
  std::get<View>(p.body[1]->op.args[1]).offset[0] = var("i");
  expect_violation(p, Level::Tensor, "variable %i used outside its scope");

  p = parse_program("func @k(%A: f32[4]) { for %i = 0 to 4 { alloc %t: f32[4] gm } TEXP %A, %A }");
  p.body[1]->op.args[1] = View::whole(p.body[0]->body[0]->buffer);
  expect_violation(p, Level::Tensor, "buffer %t used outside its scope");

  p = parse_program("func @k(%A: f32[4]) { TEXP %A, %A let %n = 3 }");
  std::get<View>(p.body[0]->op.args[0]).offset[0] = var("n");
  expect_violation(p, Level::Tensor, "variable %n used outside its scope or before its definition");

  p = parse_program("func @k(%A: f32[4], %s: f32) { TADD %A, %A, %s }");
  p.body[0]->op.args[2] = var("s", DType::F64);
  expect_violation(p, Level::Tensor, "variable %s is used as f64 but declared f32");

  p = parse_program("func @k(%A: f32[4]) { TEXP %A, %A }");
  auto fake = std::make_shared<Buffer>(*p.params[0]);
  fake->shape = {5};
  p.body[0]->op.args[1] = View::whole(fake);
  expect_violation(p, Level::Tensor, "does not match the buffer's declaration");
}

TEST(IrVerifier, DeclarationsAndLoops) {
  expect_violation("func @k(%A: f32[4] vec) { }", Level::Tensor, "is not in global memory");
  expect_violation("func @k(%A: f32[4] temp) { }", Level::Tensor, "has kind temp");
  expect_violation("func @k(%A: f32[4]) { alloc %t: f32[4] gm out }", Level::Tensor, "must have kind temp");
  expect_violation("func @k(%A: f32[4], %b: bool) { }", Level::Tensor, "scalar parameter %b has dtype bool");
  expect_violation("func @k(%A: f32[4]) { for %i = 0 to 4 step 0 { } }", Level::Tensor,
                   "loop step must be positive");
  expect_violation("func @k(%A: f32[4]) { for %i = 0 to 4.0f { } }", Level::Tensor,
                   "loop end `4.0f` is not an integer");
}

TEST(IrVerifier, Operands) {
  Program p = parse_program("func @k(%A: f32[4]) { TADD %A, %A, %A }");
  p.body[0]->op.args.pop_back();
  expect_violation(p, Level::Tensor, "TADD takes 3 operands, got 2");
  expect_violation("func @k(%A: f32[4]) { TADD 1, %A, %A }", Level::Tensor, "operand 0 must be a view");
  expect_violation("func @k(%A: f32[4]) { TEXP %A, 1.0f }", Level::Tensor, "operand 1 must be a view");
  expect_violation("func @k(%A: f32[4]) { TEXPANDS %A, %A }", Level::Tensor, "operand 1 must be a scalar");
  expect_violation("func @k(%A: f32[4]) { PIPE_BARRIER %A }", Level::Tensor, "operand 0 must be a scalar");
  expect_violation("func @k(%A: f32[4]) { SET_FLAG 0, 1, 2.0f }", Level::Tensor,
                   "sync operands are integers");
  // Tensor-level instructions convert implicitly; tile-level ones compute in one type.
  const char* mixed =
      "func @k(%A: f32[4], %B: f64[4], %M: bool[4], %I: i32[4]) { TADD %A, %A, %B TCMP_LT %M, %A, %B "
      "TDIV %A, %I, %I TAND %M, %A, %I TNOT %M, %A }";
  EXPECT_NO_THROW(verify(parse_program(mixed), Level::Tensor));
  const std::string tiles =
      "func @k(%G: f32[4]) { alloc %a: f32[4, 4] vec alloc %b: f64[4, 4] vec alloc %m: bool[4, 4] vec "
      "alloc %i: i32[4, 4] mat ";
  expect_violation(tiles + "TADD %a, %a, %b }", Level::Tile, "operand 2 is f64, the destination is f32");
  expect_violation(tiles + "TEXP %a, %b }", Level::Tile, "operand 1 is f64, the destination is f32");
  expect_violation(tiles + "TCMP_LT %m, %a, %b }", Level::Tile, "operand 2 is f64, operand 1 is f32");
  expect_violation(tiles + "TMATMUL %a, %a, %i }", Level::Tile, "operand 2 is i32, operand 1 is f32");
  expect_violation(tiles + "TTRANS %a, %b }", Level::Tile, "operand 1 is f64, the destination is f32");
  EXPECT_NO_THROW(verify(parse_program(tiles + "TCMP_LE %m, %b, 1.0 TAND %m, %m, %m TNOT %m, %a TCVT %i, %b "
                                               "TSEL %a, %m, %a, 2.0f TADD %a, %a, 1 }"),
                         Level::Tile));
  expect_violation("func @k(%A: f32[4, 1], %I: f32[4, 1]) { TGATHER %A, %A, %I }", Level::Tensor,
                   "index must be i32 or i64");
  // Compare destinations may be bool or a number; TCVT converts.
  EXPECT_NO_THROW(verify(parse_program("func @k(%A: f32[4], %M: bool[4], %F: f32[4]) { TCMP_LT %M, %A, 1.0f "
                                       "TCMP_GE %F, %A, %A TCVT %M, %A }"),
                         Level::Tensor));
}

TEST(IrVerifier, Views) {
  expect_violation("func @k(%A: f32[4, 8]) { TEXP %A, %A[0:4] }", Level::Tensor, "for each of its 2 dims");
  expect_violation("func @k(%A: f32[4, 8]) { TEXP %A, %A[0:4, 0:8] perm(0, 2) }", Level::Tensor,
                   "view dim 2 out of range");
  expect_violation("func @k(%A: f32[4, 8]) { TEXP %A, %A[0:4, 0:8] perm(1, 1) }", Level::Tensor,
                   "listed twice");
  expect_violation("func @k(%A: f32[4, 8]) { TEXP %A, %A[0:4, 0:8 valid 9] }", Level::Tensor,
                   "valid extent 9 outside 0..8");
  expect_violation("func @k(%A: f32[4, 8]) { TEXP %A, %A[0:4, -1:8] }", Level::Tensor, "negative offset");
  expect_violation("func @k(%A: f32[4, 8]) { TEXP %A, %A[0:4, 4:8] }", Level::Tensor,
                   "valid region [4, 11] outside dim 1 of %A (size 8)");
  expect_violation("func @k(%A: f32[4, 8]) { TEXP %A, %A[0:4, 0:4 step 3] }", Level::Tensor,
                   "valid region [0, 9] outside dim 1");
  expect_violation("func @k(%A: f32[4, 8]) { TEXP %A, %A[4, 0:8] }", Level::Tensor,
                   "valid region [4, 4] outside dim 0");
  expect_violation("func @k(%A: f32[4, 8]) { TEXP %A, %A[0:2, 0:8] perm(1) }", Level::Tensor,
                   "indexed dim 0 must have size 1");
  expect_violation("func @k(%A: f32[4, 8]) { TEXP %A, %A[0:4, 0:8 valid 1.5f] }", Level::Tensor,
                   "view valid extent `1.5f` is not an integer");
  Program p = parse_program("func @k(%A: f32[4, 8]) { TEXP %A, %A[0:4, 0:8 step 2] }");
  std::get<View>(p.body[0]->op.args[1]).step[1] = 0;
  expect_violation(p, Level::Tensor, "view step must be >= 1");
  // A window may hang past the edge as long as its valid region does not.
  EXPECT_NO_THROW(verify(parse_program("func @k(%A: f32[4, 8]) { TEXP %A[0:4, 0:8], %A[0:4, 4:8 valid 4] }"),
                         Level::Tensor));
}

TEST(IrVerifier, TileLevel) {
  const std::string head = "func @k(%A: f32[64, 64], %B: f32[64, 64] out) { ";
  auto tile = [&](const std::string& body, const std::string& msg) {
    expect_violation(head + body + " }", Level::Tile, msg);
  };
  tile("TEXP %B, %A", "must be a local tile (vec/mat/acc), not %B in gm");
  tile("alloc %t: f32[4, 4] vec TEXP %t, %t[0:2, 0:2]", "compute instructions take whole tiles");
  tile("alloc %t: f32[4] vec TEXP %t, %t", "tiles have rank 2");
  tile("alloc %t: f32[4, 4] vec TLOAD %t, %t", "operand 1 of TLOAD must be a global view");
  tile("alloc %t: f32[4, 4] vec TLOAD %B, %A", "operand 0 of TLOAD must be a local tile");
  tile("alloc %t: f32[4, 4] vec TSTORE %t, %t", "operand 0 of TSTORE must be a global view");
  tile("alloc %t: f32[4, 4] vec TSTORE %B[0:4, 0:4], %A[0:4, 0:4]",
       "operand 1 of TSTORE must be a local tile");
  tile("alloc %t: f32[4, 4] vec TPREFETCH %t", "operand 0 of TPREFETCH must be a global view");
  tile("alloc %c: f32[16, 8] acc alloc %a: f32[16, 4] mat alloc %b: f32[5, 8] mat TMATMUL %c, %a, %b",
       "shapes must be dst MxN, a MxK, b KxN; got dst 16x8, a 16x4, b 5x8");
  tile("alloc %c: f32[16, 9] acc alloc %a: f32[16, 4] mat alloc %b: f32[4, 8] mat TMATMUL_ACC %c, %a, %b",
       "shapes must be dst MxN");
  tile(
      "alloc %c: f32[16, 8] acc alloc %a: f32[16, 4] mat alloc %b: f32[4, 8] mat alloc %z: f32[8, 1] vec "
      "TMATMUL_BIAS %c, %a, %b, %z",
      "bias must be 1x8, got 8x1");
  tile("alloc %s: f32[16, 8] vec alloc %r: f32[8, 1] vec TROWSUM %r, %s",
       "dst must be 16x1 for src 16x8, got 8x1");
  tile("alloc %s: f32[16, 8] vec alloc %r: f32[1, 16] vec TCOLMAX %r, %s",
       "dst must be 1x8 for src 16x8, got 1x16");
  tile("alloc %d: f32[16, 8] vec alloc %r: f32[16, 2] vec TROWEXPAND %d, %r", "src must be 16x1, got 16x2");
  tile("alloc %d: f32[16, 8] vec alloc %r: f32[1, 4] vec TCOLEXPAND %d, %r", "src must be 1x8, got 1x4");
  tile("alloc %d: f32[16, 8] vec alloc %s: f32[16, 8] vec TTRANS %d, %s",
       "dst must be the transpose of src 16x8");
  tile("alloc %d: f32[16, 8] vec alloc %s: f32[10, 10] vec TRESHAPE %d, %s", "element counts differ");
  tile("alloc %d: f32[16, 8] vec alloc %s: f32[16, 8] vec alloc %x: i32[16, 2] vec TGATHER %d, %s, %x",
       "index tile must be Rx1");
  tile("TLOAD %A, %A", "operand 0 of TLOAD must be a local tile");
  // Valid tile programs: global rank-1 and rank-0 views, scalars in binary ops, layout ops.
  EXPECT_NO_THROW(verify(parse_program("func @k(%A: f32[64], %S: f32[]) { alloc %t: f32[1, 64] vec "
                                       "alloc %u: f32[64, 1] vec alloc %c: f32[1, 1] vec "
                                       "TLOAD %t, %A TTRANS %u, %t TCOLSUM %c, %u TMUL %c, 2.0f, %c "
                                       "TSTORE %S, %c TSTORE %A[0:64 valid 10], %t }"),
                         Level::Tile));
  // The tensor level accepts what the tile level rejects.
  EXPECT_NO_THROW(verify(parse_program(head + "TEXP %B, %A }"), Level::Tensor));
}

TEST(IrVerifier, MessagesNameTheStatement) {
  try {
    verify(parse_program("func @k(%A: f32[4]) { for %i = 0 to 4 { TADD %A, %A, %A[0:4 valid 5] } }"),
           Level::Tensor);
    FAIL();
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("verify: operand 2: valid extent 5 outside 0..4"), std::string::npos) << m;
    EXPECT_NE(m.find("(in `TADD %A, %A, %A[0:4 valid 5]`)"), std::string::npos) << m;
  }
}

}  // namespace
}  // namespace pypto::ir
