// Terse constructors for hand-built IR in the C++ tests: buffers of each kind, whole views,
// constants and single-instruction statements.
#pragma once
#include <cmath>
#include <string>
#include <vector>

#include "exec/tensor_arg.h"
#include "ir/ir.h"

namespace ir_build {
using namespace pypto::ir;

inline BufferRef buffer(const std::string& name, DType t, std::vector<int64_t> shape, Space s, BufferKind k) {
  auto b = std::make_shared<Buffer>();
  b->name = name;
  b->dtype = t;
  b->shape = std::move(shape);
  b->space = s;
  b->kind = k;
  return b;
}
inline BufferRef param(const std::string& n, std::vector<int64_t> shape, DType t = DType::F32) {
  return buffer(n, t, std::move(shape), Space::Global, BufferKind::Param);
}
inline BufferRef output(const std::string& n, std::vector<int64_t> shape, DType t = DType::F32) {
  return buffer(n, t, std::move(shape), Space::Global, BufferKind::Output);
}
inline BufferRef tile(const std::string& n, int64_t R, int64_t C, DType t = DType::F32,
                      Space s = Space::Vec) {
  return buffer(n, t, {R, C}, s, BufferKind::Temp);
}
inline BufferRef scratch(const std::string& n, std::vector<int64_t> shape, DType t = DType::F32) {
  return buffer(n, t, std::move(shape), Space::Global, BufferKind::Temp);
}
inline View W(const BufferRef& b) { return View::whole(b); }
inline Expr I(int64_t v) { return int_imm(v); }
inline Expr F(double v) { return float_imm(v, DType::F32); }
inline Stmt op(Opcode c, std::vector<Operand> args) { return op_stmt(Op{c, std::move(args)}); }

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

inline Program program(std::string name, std::vector<BufferRef> params, std::vector<Stmt> body,
                       std::vector<ScalarParam> scalars = {}) {
  Program p;
  p.name = std::move(name);
  p.params = std::move(params);
  p.scalars = std::move(scalars);
  p.body = std::move(body);
  return p;
}

// Host data for one tensor param of any element type, row-major unless strides are given.
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
  pypto::runtime::TensorArg arg() { return pypto::runtime::TensorArg{data.data(), dtype, shape, strides}; }
};
using HostF = Host<float>;

}  // namespace ir_build
