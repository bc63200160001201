// Checks a program's invariants; throws Error describing the first violation.
//  Tensor level: names unique, every var and buffer defined before use, operand counts match the
//  opcode table, views in range of their buffers (static sizes), dtypes consistent.
//  Tile level additionally: compute operands are whole local tiles of rank 2; only TLOAD/TSTORE/
//  TPREFETCH touch Global views; tile shapes agree as each instruction requires.
#pragma once
#include "ir/ir.h"

namespace pypto::ir {
enum class Level { Tensor, Tile };
void verify(const Program& p, Level level);
}  // namespace pypto::ir
