// Dynamic dimensions (ir.h): text form, verifier, lowering over a symbolic extent, the
// interpreter at several extents, and the argument check of arguments sharing a symbol.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "backends/interp/interpreter.h"
#include "ir/builder.h"
#include "ir/parser.h"
#include "ir/printer.h"
#include "ir/verifier.h"
#include "passes/pipeline.h"

namespace pypto::ir {
namespace {

const char* kScaleAdd = R"(func @scale_add(%x: f32[%S, 40], %y: f32[%S, 40], %out: f32[%S, 40] out, %a: f32) {
  alloc %t: f32[%S, 40] gm
  TMUL %t, %x, %a
  TADD %out, %t, %y
}
)";

TEST(DynamicDims, TextFormRoundTripsAndDeclaresSymbols) {
  Program p = parse_program(kScaleAdd);
  ASSERT_EQ(p.scalars.size(), 2u);  // the caller's %a, then the symbol %S
  EXPECT_EQ(p.scalars[0].name, "a");
  EXPECT_TRUE(p.scalars[1].is_dim_symbol());
  EXPECT_EQ(p.scalars[1].param, 0);
  EXPECT_EQ(p.caller_scalars(), 1u);
  EXPECT_TRUE(p.params[1]->is_dynamic(0));
  EXPECT_EQ(p.params[1]->shape[0], kDynamicBound);
  EXPECT_EQ(print(p), kScaleAdd);
  EXPECT_TRUE(structural_equal(parse_program(print(p)), p));
  verify(p, Level::Tensor);
}

TEST(DynamicDims, VerifierRejectsAMisdeclaredSymbol) {
  Program p = parse_program(kScaleAdd);
  p.scalars[1].dim = 1;  // dim 1 of %x is static
  EXPECT_THROW(verify(p, Level::Tensor), Error);
  Program q = parse_program(kScaleAdd);
  q.params[0]->shape[0] = 64;  // a dynamic dim must carry the bound
  EXPECT_THROW(verify(q, Level::Tensor), Error);
}

// A dynamic extent is a function of dimension symbols: one of constants only, or naming a
// caller's scalar, binds nothing the runtime can size a buffer from (the interpreter and the CPU
// backend refused it only when run, the second once only after reading past the array).
TEST(DynamicDims, VerifierRejectsAnExtentThatNamesNoDimensionSymbol) {
  auto message = [](const char* text) -> std::string {
    try {
      verify(parse_program(text), Level::Tile);
    } catch (const Error& e) {
      return e.what();
    }
    return "accepted";
  };
  std::string m = message("func @k(%x: f32[(2 + 3), 8], %y: f32[5, 8] out) { }");
  EXPECT_NE(m.find("dynamic dim 0 of %x (`(2 + 3)`) names no dimension symbol"), std::string::npos) << m;
  m = message("func @k(%x: f32[%S, 8], %y: f32[(3 - 1), 8] out) { }");
  EXPECT_NE(m.find("dynamic dim 0 of %y (`(3 - 1)`) names no dimension symbol"), std::string::npos) << m;
  m = message("func @k(%x: f32[%S, 8]) { alloc %t: f32[(1 + 1), 8] gm }");
  EXPECT_NE(m.find("dynamic dim 0 of %t (`(1 + 1)`) names no dimension symbol"), std::string::npos) << m;
  m = message("func @k(%n: i64, %x: f32[%n, 8], %y: f32[%n, 8] out) { }");
  EXPECT_NE(m.find("dynamic dim 0 of %x (`%n`) names %n, which is not a dimension symbol"), std::string::npos)
      << m;
  m = message("func @k(%x: f32[%S, 8]) { for %i = 0 to 4 { alloc %t: f32[(%S + %i), 8] gm } }");
  EXPECT_NE(m.find("names %i, which is not a dimension symbol"), std::string::npos) << m;
  // Expressions of symbols stay valid, in params and global temporaries alike.
  EXPECT_EQ(message("func @k(%x: f32[%S, 8], %y: f32[(%S + 1), 8] out) { alloc %t: f32[(%S * 2), 8] gm }"),
            "accepted");
}

TEST(DynamicDims, TilingLoopsOverTheSymbolAndTheInterpreterRunsAnyExtent) {
  passes::Lowered l = passes::lower(parse_program(kScaleAdd), passes::PipelineOptions{});
  std::string tile = print(l.tile);
  EXPECT_NE(tile.find("to %S step"), std::string::npos) << tile;
  EXPECT_NE(tile.find("min("), std::string::npos) << tile;  // the ragged edge over the remainder
  for (int64_t n : {1, 7, 64, 130}) {
    std::vector<float> x(size_t(n * 40)), y(x.size()), out(x.size(), NAN);
    for (size_t i = 0; i < x.size(); ++i) {
      x[i] = float(i % 17) * 0.25f + 1;
      y[i] = float(i % 5) - 2.5f;
    }
    auto arg = [&](std::vector<float>& v) {
      return runtime::TensorArg{v.data(), DType::F32, {n, 40}, {40, 1}, false};
    };
    runtime::RunArgs args{{arg(x), arg(y), arg(out)}, {ScalarValue{true, 0, 3.0}}};
    interp::interpret(l.isa, args);
    for (size_t i = 0; i < x.size(); ++i) ASSERT_FLOAT_EQ(out[i], x[i] * 3.0f + y[i]) << n << " " << i;
  }
}

TEST(DynamicDims, ArgumentsSharingASymbolMustAgree) {
  passes::Lowered l = passes::lower(parse_program(kScaleAdd), passes::PipelineOptions{});
  std::vector<float> x(9 * 40, 1.f), y(7 * 40, 1.f), out(9 * 40);
  runtime::RunArgs args{{runtime::TensorArg{x.data(), DType::F32, {9, 40}, {40, 1}, false},
                         runtime::TensorArg{y.data(), DType::F32, {7, 40}, {40, 1}, false},
                         runtime::TensorArg{out.data(), DType::F32, {9, 40}, {40, 1}, false}},
                        {ScalarValue{true, 0, 1.0}}};
  try {
    interp::interpret(l.isa, args);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("argument 2 ('y')"), std::string::npos) << m;
    EXPECT_NE(m.find("dynamic dimension %S of argument 1 ('x')"), std::string::npos) << m;
  }
}

TEST(DynamicDims, BuilderSharesSymbolsAndKeepsTemporariesDynamic) {
  Builder b("k");
  View x = b.add_param("x", DType::F32, {1, 8}, {"S", ""});
  View w = b.add_param("w", DType::F32, {1, 8}, {"S", ""});
  View y = b.softmax(b.binary(Opcode::TADD, x, w), -1);
  Program p = b.finish({y});
  ASSERT_EQ(p.scalars.size(), 1u);  // one symbol, bound by x
  EXPECT_EQ(p.params.back()->kind, BufferKind::Output);
  EXPECT_TRUE(p.params.back()->is_dynamic(0));
  EXPECT_EQ(to_string(p.params.back()->dyn[0]), "%S");
  verify(p, Level::Tensor);
}

}  // namespace
}  // namespace pypto::ir
