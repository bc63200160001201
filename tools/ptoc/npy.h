// A small reader and writer of NumPy .npy files (format versions 1-3, little-endian, C order),
// enough for ptoc to feed kernels and save their results.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "ir/types.h"

namespace pypto::ptoc {

struct Array {
  ir::DType dtype = ir::DType::F32;
  std::vector<int64_t> shape;
  std::vector<uint8_t> data;  // C order, dtype's storage layout (f16: IEEE half, bf16: top of f32)
  int64_t numel() const;
};

// Reads f2/f4/f8, i1/i2/i4/i8, u1/u2/u4/u8 and b1 arrays; integer kinds other than i4/i8 widen to
// i64, u8 must fit. Throws ir::Error naming the file on anything else (big-endian, Fortran order,
// object arrays, truncated data).
Array read_npy(const std::string& path);
// Writes f32/f64/f16/i32/i64/bool natively; bf16 is written as f32 (NumPy has no bf16).
void write_npy(const std::string& path, const Array& a);

// A copy of `a` with elements converted to `t` (float->int truncates toward zero, ->bool is != 0).
Array convert(const Array& a, ir::DType t);
// An array of `t` and `shape` filled with NaN (floats) or the type's lowest value (integers).
Array poisoned(ir::DType t, const std::vector<int64_t>& shape);

}  // namespace pypto::ptoc
