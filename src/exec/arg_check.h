// The one check of a kernel's arguments, used by every entry point (runtime::Kernel, the
// interpreter, the bindings' direct ISA runs): count, dtype, shape, strides and data of each
// tensor, integer scalars, and for every tensor the program writes: writable memory, no element
// reachable twice (stride 0, as broadcast_to/expand make), no overlap with any other argument.
#pragma once
#include <vector>

#include "exec/tensor_arg.h"
#include "ir/ir.h"

namespace pypto::runtime {

// Per tensor param, whether some instruction of `p` writes it (it is an instruction's
// destination).
std::vector<bool> written_params(const ir::Program& p);

// Throws ir::Error naming the argument and the problem. `written` is written_params(p).
// args.scalars holds the caller's scalars, optionally followed by the dimension symbols (then they
// must match the shapes). Dynamic dims: two arguments sharing a symbol must agree, outputs must
// have the extents their expressions give, and no extent may exceed ir::kDynamicBound.
void check_args(const ir::Program& p, const RunArgs& args, const std::vector<bool>& written);

// Completes `scalars` (the caller's) with the dimension symbols read from the tensors' shapes.
void bind_dim_symbols(const ir::Program& p, const std::vector<TensorArg>& tensors,
                      std::vector<ir::ScalarValue>& scalars);

}  // namespace pypto::runtime
