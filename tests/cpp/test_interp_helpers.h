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

// A rows x cols window of a rank-2 buffer at (r0, c0) with the given valid extents.
inline View win(const BufferRef& b, Expr r0, Expr c0, int64_t rows, int64_t cols, Expr vr, Expr vc) {
  View v = View::whole(b);
  v.offset = {std::move(r0), std::move(c0)};
  v.size = {rows, cols};
  v.valid = {std::move(vr), std::move(vc)};
  return v;
}
// The window clamped to the buffer, as a front end slicing b[r0:r0+rows, c0:c0+cols] makes it.
inline View clamped(const BufferRef& b, Expr r0, Expr c0, int64_t rows, int64_t cols) {
  Expr vr = min(I(rows), I(b->shape[0]) - r0), vc = min(I(cols), I(b->shape[1]) - c0);
  return win(b, r0, c0, rows, cols, vr, vc);
}

inline Program program(std::vector<BufferRef> params, std::vector<Stmt> body,
                       std::vector<ScalarParam> scalars = {}) {
  Program p;
  p.name = "t";
  p.params = std::move(params);
  p.scalars = std::move(scalars);
  p.body = std::move(body);
  return p;
}

// Host data for one f32/f64/i32 tensor param, row-major unless strides are given.
template <class T>
struct Host {
  std::vector<T> data;
  std::vector<int64_t> shape, strides;
  DType dtype;
  Host(std::vector<int64_t> s, DType t, T fill) : shape(std::move(s)), dtype(t) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    data.assign(size_t(n), fill);
    strides.assign(shape.size(), 1);
    for (size_t i = shape.size(); i-- > 1;) strides[i - 1] = strides[i] * shape[i];
  }
  T& at(int64_t r, int64_t c) { return data[size_t(r * strides[0] + c * strides[1])]; }
  TensorArg arg() { return TensorArg{data.data(), dtype, shape, strides}; }
};
using HostF = Host<float>;
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
