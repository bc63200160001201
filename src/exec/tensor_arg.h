// How a caller's tensor reaches a kernel: a pointer into the caller's memory, never a copy.
#pragma once
#include <cstdint>
#include <vector>

#include "ir/expr.h"
#include "ir/types.h"

namespace pypto::runtime {

struct TensorArg {
  void* data = nullptr;
  ir::DType dtype = ir::DType::F32;
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;  // in elements, as DLPack
  bool read_only = false;        // the caller's memory may not be written (a kernel writing it is refused)
};

// Arguments of one kernel call: one TensorArg per Program param (inputs and outputs, in order)
// and one value per scalar param.
struct RunArgs {
  std::vector<TensorArg> tensors;
  std::vector<ir::ScalarValue> scalars;
};

}  // namespace pypto::runtime
