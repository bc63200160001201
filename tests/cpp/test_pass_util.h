// Shared helpers for the before/after pass tests (test_pass_*.cpp), in the TVM style: a program
// written as IR text, one pass applied, and the result compared structurally with the expected
// program, also written as text. A second check runs both programs on the reference interpreter
// with the same random inputs, so an expected text that merely restates the pass's output would
// still have to compute the same thing as the input.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "backends/interp/interpreter.h"
#include "ir/parser.h"
#include "ir/printer.h"
#include "ir/verifier.h"
#include "passes/nest.h"
#include "passes/tile_ops.h"

namespace pass_test {
using namespace pypto;
using namespace pypto::ir;

// Small tiles, so that a few dozen elements already make loops with ragged edges.
inline passes::TileSizes small_tiles() {
  passes::TileSizes t;
  t.elem_rows = t.ew_rows = 4;
  t.elem_cols = t.ew_cols = 8;
  t.mm_m = 4;
  t.mm_n = 8;
  t.mm_k = 8;
  return t;
}

// The structural comparison, printing both programs when they differ.
inline ::testing::AssertionResult same_program(const Program& got, const Program& want) {
  if (structural_equal(got, want)) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "\n--- got:\n" << print(got) << "\n--- expected:\n" << print(want);
}

// Applies `pass` to the program `before` and expects exactly `after`; the output must verify at
// `level`. Returns the pass's output for further checks.
template <class Pass>
Program expect_pass(const char* before, Pass&& pass, const char* after, Level level) {
  Program in = parse_program(before);
  Program want = parse_program(after);
  Program got = pass(in);
  EXPECT_TRUE(same_program(got, want));
  EXPECT_NO_THROW(verify(got, level)) << print(got);
  return got;
}

inline bool has_tensor_level_ops(const std::vector<Stmt>& body) {
  bool found = false;
  passes::walk(body, [&](const Stmt& s) {
    if (s->kind == StmtKind::OpStmt && passes::is_tensor_level(s->op)) found = true;
  });
  return found;
}

// Runs a program (tiled first when it still has tensor-level instructions) on the interpreter.
// Every f32 parameter gets random data from `seed`; outputs start as NaN, so an element a program
// fails to write stays NaN. Returns the contents of every parameter after the run.
inline std::vector<std::vector<float>> run(const Program& p, unsigned seed,
                                           const std::vector<int64_t>& scalars = {},
                                           const passes::TileSizes& ts = small_tiles()) {
  Program tiled = has_tensor_level_ops(p.body) ? passes::tile_ops(p, ts) : p;
  verify(tiled, Level::Tile);
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist;
  std::vector<std::vector<float>> data;
  runtime::RunArgs args;
  for (auto& b : p.params) {
    if (b->dtype != DType::F32) throw Error("pass_test::run handles f32 parameters only");
    std::vector<float> v(size_t(b->numel()));
    for (auto& x : v) x = b->kind == BufferKind::Output ? std::numeric_limits<float>::quiet_NaN() : dist(gen);
    data.push_back(std::move(v));
  }
  for (size_t i = 0; i < p.params.size(); ++i) {
    runtime::TensorArg a;
    a.data = data[i].data();
    a.dtype = DType::F32;
    a.shape = p.params[i]->shape;
    a.strides.assign(a.shape.size(), 1);
    for (int d = int(a.shape.size()) - 2; d >= 0; --d) a.strides[d] = a.strides[d + 1] * a.shape[d + 1];
    args.tensors.push_back(a);
  }
  for (int64_t s : scalars) {
    ScalarValue v;
    v.i = s;
    args.scalars.push_back(v);
  }
  interp::interpret(tiled, args);
  return data;
}

// Relative norm error between two runs' parameter contents; NaN positions must agree.
inline ::testing::AssertionResult close(const std::vector<std::vector<float>>& got,
                                        const std::vector<std::vector<float>>& want, double tol = 1e-5) {
  if (got.size() != want.size()) return ::testing::AssertionFailure() << "different parameter counts";
  for (size_t i = 0; i < got.size(); ++i) {
    double num = 0, den = 0;
    for (size_t k = 0; k < got[i].size(); ++k) {
      double a = got[i][k], b = want[i][k];
      if (std::isnan(a) != std::isnan(b))
        return ::testing::AssertionFailure()
               << "parameter " << i << ", element " << k << ": " << a << " vs " << b;
      if (std::isnan(a)) continue;
      num += (a - b) * (a - b);
      den += b * b;
    }
    double err = std::sqrt(num / std::max(den, 1e-30));
    if (err > tol) return ::testing::AssertionFailure() << "parameter " << i << ": relative error " << err;
  }
  return ::testing::AssertionSuccess();
}

// The pass preserved the program's meaning: both compute the same on the same random inputs.
inline ::testing::AssertionResult equivalent(const Program& before, const Program& after,
                                             const std::vector<int64_t>& scalars = {},
                                             const passes::TileSizes& ts = small_tiles()) {
  for (unsigned seed : {1u, 2u}) {
    auto r = close(run(after, seed, scalars, ts), run(before, seed, scalars, ts));
    if (!r) return r << "\n--- before:\n" << print(before) << "\n--- after:\n" << print(after);
  }
  return ::testing::AssertionSuccess();
}

}  // namespace pass_test
