// NumPy / PyTorch (CPU) arrays -> runtime::TensorArg without copying, via nanobind's DLPack and
// buffer-protocol import. The TensorArg borrows the array's memory: keep the ndarray alive (hold
// the nanobind object) for as long as the TensorArg is used.
#pragma once
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <string>

#include "exec/tensor_arg.h"
#include "ir/types.h"

namespace pypto::bindings {

// Any dtype, any device, any layout; read-only arrays accepted too (checks happen here, so the
// errors can name the problem instead of nanobind's generic "incompatible function arguments").
using AnyArray = nanobind::ndarray<nanobind::ro>;

// Throws ir::Error naming the dtype / device when it is not supported (CPU f32 f16 bf16 f64 i32
// i64 bool only).
runtime::TensorArg to_tensor_arg(const AnyArray& a);

// Whether the caller's array may be written (false for read-only NumPy arrays, arrays over
// immutable buffers such as bytes, and DLPack exports flagged read-only).
bool is_writable(nanobind::handle array);

// DLPack dtype -> ir::DType, or ir::Error("unsupported array dtype ...").
ir::DType dtype_from_dlpack(nanobind::dlpack::dtype t);

// ir::DType -> the DLPack dtype nanobind uses (for allocating outputs).
nanobind::dlpack::dtype dlpack_from_dtype(ir::DType t);

// The qualified name of an object's type, for messages.
std::string py_type_name(nanobind::handle h);

// A kernel's run-time scalar argument `i`: a Python int or float (or anything with __index__ /
// __float__, such as NumPy scalars); ir::Error otherwise.
ir::ScalarValue to_scalar(nanobind::handle h, size_t i);

}  // namespace pypto::bindings
