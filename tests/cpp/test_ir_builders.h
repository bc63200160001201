// Terse constructors for hand-built IR in the C++ tests: buffers of each kind, whole views,
// constants and single-instruction statements.
#pragma once
#include <string>
#include <vector>

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

}  // namespace ir_build
