// Shared helpers for the interpreter's GoogleTest files: build small tile-level programs with the
// IR constructors and run them on host vectors.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "backends/interp/interpreter.h"
#include "ir/ir.h"
#include "test_ir_builders.h"

namespace interp_test {
using namespace pypto::ir;
using namespace ir_build;
using pypto::runtime::RunArgs;
using pypto::runtime::TensorArg;

inline Program program(std::vector<BufferRef> params, std::vector<Stmt> body,
                       std::vector<ScalarParam> scalars = {}) {
  return ir_build::program("t", std::move(params), std::move(body), std::move(scalars));
}

inline HostF nanf(std::vector<int64_t> s) { return HostF(std::move(s), DType::F32, NAN); }
// Deterministic non-zero values.
inline HostF ramp(std::vector<int64_t> s, float scale = 0.25f) {
  HostF h(std::move(s), DType::F32, 0);
  for (size_t i = 0; i < h.data.size(); ++i) h.data[i] = scale * float(int(i % 17) - 8) + 0.125f;
  return h;
}

inline RunArgs args(std::vector<TensorArg> t, std::vector<ScalarValue> s = {}) {
  return RunArgs{std::move(t), std::move(s)};
}

// Runs and expects an ir::Error whose message contains every fragment.
inline void expect_error(const Program& p, const RunArgs& a, std::vector<std::string> fragments) {
  try {
    pypto::interp::interpret(p, a);
    ADD_FAILURE() << "expected an error containing '" << fragments[0] << "'";
  } catch (const Error& e) {
    for (const auto& f : fragments)
      EXPECT_NE(std::string(e.what()).find(f), std::string::npos) << "message: " << e.what();
  }
}

}  // namespace interp_test
