// The reference interpreter: executes a tile-level PTO program exactly. It is the definition of
// what each instruction means; every backend is tested against it.
//  * Bounds-checked: a view or tile access outside its buffer raises Error.
//  * Each local tile element carries a written bit; reading an element inside a valid region that
//    nothing wrote raises Error ("read of unwritten tile element").
//  * f32 arithmetic is done in float (rounded after every instruction), f16/bf16 compute in f32,
//    f64 in double: the results equal those of a correct native implementation up to the
//    order of floating-point reductions.
#pragma once
#include "exec/tensor_arg.h"
#include "ir/ir.h"

namespace pypto::interp {

// What one executed instruction touched: each buffer operand, whether it was written (operand 0,
// the destination) and its extent (a tile's valid region after the instruction, a global
// view's valid rows x cols).
struct OperandUse {
  const ir::Buffer* buf = nullptr;
  bool write = false;
  int64_t rows = 0, cols = 0;
  // A global view's bounding box: the lowest and highest index it touches per base dimension.
  std::vector<int64_t> lo, hi;
};

// Sees the run instruction by instruction, in program order, after each has executed (the NPU
// simulator times the interpreter's run with it; values are the interpreter's alone).
class ExecObserver {
 public:
  virtual ~ExecObserver() = default;
  // `scalars`: the values of the scalar operands, in operand order.
  virtual void on_op(const ir::Op& op, const std::vector<OperandUse>& uses,
                     const std::vector<ir::ScalarValue>& scalars) = 0;
  // A parallel loop at nesting depth `depth` (0 = outermost) with `iterations` iterations;
  // on_parallel_iteration(k) before the k-th one runs (in the order the interpreter picked).
  virtual void on_parallel_enter(size_t depth, int64_t iterations) {}
  virtual void on_parallel_iteration(size_t depth, int64_t k) {}
  virtual void on_parallel_leave(size_t depth) {}
};

void interpret(const ir::Program& tile_program, const runtime::RunArgs& args,
               ExecObserver* observer = nullptr);
}  // namespace pypto::interp
