// Reference interpreter: every misuse it must catch raises ir::Error naming the problem and the
// instruction.
#include "test_interp_helpers.h"

namespace interp_test {
namespace {

Program copy_program(View src_view, BufferRef x, BufferRef o, int64_t R, int64_t C) {
  auto t = tile("t", R, C);
  return program(
      {x, o}, {alloc(t), op(Opcode::TLOAD, {W(t), std::move(src_view)}), op(Opcode::TSTORE, {W(o), W(t)})});
}

TEST(InterpErrors, OutOfBoundsLoad) {
  auto x = param("x", {50, 70}), o = output("o", {64, 64});
  // The valid extent was not clamped to the tensor: the view runs past column 70.
  Program p = copy_program(win(x, I(0), I(64), 64, 64, I(50), I(64)), x, o, 64, 64);
  HostF hx = ramp({50, 70}), ho = nanf({64, 64});
  expect_error(p, args({hx.arg(), ho.arg()}), {"out-of-bounds", "x[0, 70]", "TLOAD"});
}

TEST(InterpErrors, OutOfBoundsStoreNegativeOffset) {
  auto x = param("x", {4, 4}), o = output("o", {4, 4});
  auto t = tile("t", 4, 4);
  Program p = program({x, o}, {alloc(t), op(Opcode::TLOAD, {W(t), W(x)}),
                               op(Opcode::TSTORE, {win(o, I(-1), I(0), 4, 4, I(4), I(4)), W(t)})});
  HostF hx = ramp({4, 4}), ho = nanf({4, 4});
  expect_error(p, args({hx.arg(), ho.arg()}), {"out-of-bounds", "o[-1, 0]", "TSTORE"});
}

TEST(InterpErrors, UnwrittenTileRead) {
  auto x = param("x", {4, 4}), o = output("o", {4, 4});
  auto t = tile("t", 4, 4), u = tile("u", 4, 4);
  Program p = program(
      {x, o}, {alloc(t), alloc(u), op(Opcode::TADD, {W(u), W(t), F(1)}), op(Opcode::TSTORE, {W(o), W(u)})});
  HostF hx = ramp({4, 4}), ho = nanf({4, 4});
  expect_error(p, args({hx.arg(), ho.arg()}), {"unwritten", "'t'[0, 0]", "TADD"});
}

// A tile loaded with a 3x3 region, then grown by TFILLPAD? No: reading a partly written tile
// through TINSERT's unchanged valid region catches the hole.
TEST(InterpErrors, PartlyWrittenTile) {
  auto x = param("x", {2, 2}), o = output("o", {4, 4});
  auto t = tile("t", 2, 2), u = tile("u", 4, 4);
  Program p =
      program({x, o}, {alloc(t), alloc(u), op(Opcode::TLOAD, {W(t), W(x)}),
                       op(Opcode::TINSERT, {W(u), W(t), I(0), I(0)}), op(Opcode::TSTORE, {W(o), W(u)})});
  HostF hx = ramp({2, 2}), ho = nanf({4, 4});
  expect_error(p, args({hx.arg(), ho.arg()}), {"unwritten", "'u'[0, 2]", "TSTORE"});
}

TEST(InterpErrors, LoopPrivateTileIsFresh) {
  auto x = param("x", {4, 4}), o = output("o", {4, 4});
  auto t = tile("t", 4, 4);
  // Iteration 0 loads, iteration 1 reads a fresh (unwritten) t.
  Program p = program(
      {x, o},
      {for_loop("i", I(0), I(2), I(1),
                {alloc(t), if_then(cmp(ExprOp::Eq, var("i"), I(0)), {op(Opcode::TLOAD, {W(t), W(x)})}),
                 op(Opcode::TSTORE, {W(o), W(t)})})});
  HostF hx = ramp({4, 4}), ho = nanf({4, 4});
  expect_error(p, args({hx.arg(), ho.arg()}), {"unwritten", "TSTORE"});
}

TEST(InterpErrors, UnwrittenScratchRead) {
  auto x = param("x", {4, 4}), o = output("o", {4, 4});
  auto g = buffer("g", DType::F32, {4, 4}, Space::Global, BufferKind::Temp);
  Program p = copy_program(W(g), x, o, 4, 4);
  p.body.insert(p.body.begin(), alloc(g));
  HostF hx = ramp({4, 4}), ho = nanf({4, 4});
  expect_error(p, args({hx.arg(), ho.arg()}), {"unwritten", "scratch buffer 'g'", "TLOAD"});
}

TEST(InterpErrors, ResultDoesNotFitTile) {
  auto x = param("x", {8, 8}), o = output("o", {4, 4});
  auto t = tile("t", 8, 8), u = tile("u", 4, 4);
  Program p =
      program({x, o}, {alloc(t), alloc(u), op(Opcode::TLOAD, {W(t), W(x)}), op(Opcode::TEXP, {W(u), W(t)})});
  HostF hx = ramp({8, 8}), ho = nanf({4, 4});
  expect_error(p, args({hx.arg(), ho.arg()}), {"does not fit tile 'u'", "TEXP"});
}

TEST(InterpErrors, WaitWithoutSet) {
  auto x = param("x", {1, 1});
  Program p =
      program({x}, {op(Opcode::SET_FLAG, {I(2), I(3), I(1)}), op(Opcode::WAIT_FLAG, {I(2), I(3), I(1)}),
                    op(Opcode::WAIT_FLAG, {I(2), I(3), I(1)})});
  HostF hx = ramp({1, 1});
  expect_error(p, args({hx.arg()}), {"WAIT_FLAG", "no SET_FLAG"});
}

TEST(InterpErrors, TensorLevelProgramRejected) {
  auto x = param("x", {4, 4}), o = output("o", {4, 4});
  Program p = program({x, o}, {op(Opcode::TADD, {W(o), W(x), F(1)})});
  HostF hx = ramp({4, 4}), ho = nanf({4, 4});
  expect_error(p, args({hx.arg(), ho.arg()}), {"not a tile-level program", "run the pipeline first"});
}

TEST(InterpErrors, TileUsedBeforeAlloc) {
  auto x = param("x", {4, 4});
  auto t = tile("t", 4, 4);
  Program p = program({x}, {op(Opcode::TLOAD, {W(t), W(x)})});
  HostF hx = ramp({4, 4});
  expect_error(p, args({hx.arg()}), {"before its alloc"});
}

TEST(InterpErrors, ArgumentChecks) {
  auto x = param("x", {4, 4}), o = output("o", {4, 4});
  Program p = copy_program(W(x), x, o, 4, 4);
  p.scalars = {ScalarParam{"n", DType::I64}};
  HostF hx = ramp({4, 4}), ho = nanf({4, 4}), bad = ramp({4, 5});
  Host<double> hd({4, 4}, DType::F64, 1.0);
  expect_error(p, args({hx.arg()}, {ScalarValue{}}), {"takes 2 tensor arguments, got 1"});
  expect_error(p, args({bad.arg(), ho.arg()}, {ScalarValue{}}), {"'x'", "expected f32[4, 4], got f32[4, 5]"});
  expect_error(p, args({hd.arg(), ho.arg()}, {ScalarValue{}}), {"'x'", "expected f32[4, 4], got f64[4, 4]"});
  expect_error(p, args({hx.arg(), ho.arg()}), {"takes 1 scalar argument, got 0"});
  expect_error(p, args({hx.arg(), ho.arg()}, {ScalarValue{true, 0, 1.5}}), {"'n'", "expected an integer"});
}

TEST(InterpErrors, GatherIndexOutOfRange) {
  auto x = param("x", {4, 4}), ix = param("ix", {2, 1}, DType::I32), o = output("o", {2, 4});
  auto t = tile("t", 4, 4), it = tile("it", 2, 1, DType::I32), d = tile("d", 2, 4);
  Program p =
      program({x, ix, o}, {alloc(t), alloc(it), alloc(d), op(Opcode::TLOAD, {W(t), W(x)}),
                           op(Opcode::TLOAD, {W(it), W(ix)}), op(Opcode::TGATHER, {W(d), W(t), W(it)}),
                           op(Opcode::TSTORE, {W(o), W(d)})});
  HostF hx = ramp({4, 4}), ho = nanf({2, 4});
  Host<int32_t> hi({2, 1}, DType::I32, 0);
  hi.data = {3, 1};
  pypto::interp::interpret(p, args({hx.arg(), hi.arg(), ho.arg()}));
  for (int64_t c = 0; c < 4; ++c) EXPECT_EQ(ho.at(0, c), hx.at(3, c));
  hi.data = {1, 4};
  expect_error(p, args({hx.arg(), hi.arg(), ho.arg()}), {"gather index 4", "TGATHER"});
}

TEST(InterpErrors, WrongOperandKinds) {
  auto x = param("x", {4, 4});
  auto t = tile("t", 4, 4);
  Program p = program({x}, {alloc(t), op(Opcode::TLOAD, {W(t), W(x)}), op(Opcode::TEXP, {W(t), F(1)})});
  HostF hx = ramp({4, 4});
  expect_error(p, args({hx.arg()}), {"must be a tile", "TEXP"});
  Program q = program({x}, {alloc(t), op(Opcode::TADD, {W(t), W(x)})});
  expect_error(q, args({hx.arg()}), {"takes 3 operands, got 2"});
}

}  // namespace
}  // namespace interp_test
