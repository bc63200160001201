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
void interpret(const ir::Program& tile_program, const runtime::RunArgs& args);
}  // namespace pypto::interp
