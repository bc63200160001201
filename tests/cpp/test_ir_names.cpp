// ir/names.h: fresh names never collide with the program's own or with each other, and follow the
// hint, hint_1, hint_2... sequence (the first free suffix) however many are asked for.
#include <gtest/gtest.h>

#include <string>

#include "ir/names.h"
#include "ir/parser.h"

using namespace pypto::ir;

TEST(IrNames, FreshNamesSkipEveryNameTheProgramUses) {
  const Program p = parse_program(R"(
func @f(%x: f32[4, 4], %x_2: f32[4, 4] out, %n: i64) {
  alloc %t: f32[4, 4] gm
  for %i = 0 to %n step 1 {
    TADD %t[0:4, 0:4], %x[0:4, 0:4], 1.0f
  }
  TMOV %x_2, %t
})");
  FreshNames names(p);
  EXPECT_EQ(names.fresh("x"), "x_1");
  EXPECT_EQ(names.fresh("x"), "x_3");  // x_2 is a parameter
  EXPECT_EQ(names.fresh("n"), "n_1");
  EXPECT_EQ(names.fresh("i"), "i_1");
  EXPECT_EQ(names.fresh("t"), "t_1");
  EXPECT_EQ(names.fresh("y"), "y");
  EXPECT_EQ(names.fresh("y"), "y_1");
}

TEST(IrNames, SuffixesStayTheFirstFreeOnesAcrossHints) {
  FreshNames names;
  names.take("a_2");
  EXPECT_EQ(names.fresh("a"), "a");
  EXPECT_EQ(names.fresh("a"), "a_1");
  EXPECT_EQ(names.fresh("a_1"), "a_1_1");
  EXPECT_EQ(names.fresh("a"), "a_3");
  names.take("a_4");
  EXPECT_EQ(names.fresh("a"), "a_5");
  // Many of one hint: each distinct, in order.
  for (int i = 6; i < 20006; ++i) ASSERT_EQ(names.fresh("a"), "a_" + std::to_string(i));
}
