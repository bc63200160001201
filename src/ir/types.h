// Element types and memory spaces of the PTO IR.
#pragma once
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

namespace pypto::ir {

// I8, U8, I16 are storage types: they compute in i32 and are narrowed (wrapping) when stored.
enum class DType : uint8_t { F32, F16, BF16, F64, I32, I64, Bool, I8, U8, I16 };

// "f32", "f16", "bf16", "f64", "i32", "i64", "bool", "i8", "u8", "i16"
std::string_view dtype_name(DType t);
std::optional<DType> parse_dtype(std::string_view s);
int dtype_bytes(DType t);
inline bool is_float(DType t) {
  return t == DType::F32 || t == DType::F16 || t == DType::BF16 || t == DType::F64;
}
inline bool is_small_int(DType t) { return t == DType::I8 || t == DType::U8 || t == DType::I16; }
// The type arithmetic happens in: f16/bf16 are storage types that compute in f32.
inline DType compute_dtype(DType t) { return (t == DType::F16 || t == DType::BF16) ? DType::F32 : t; }

// Where a buffer lives. Global: caller tensors and scratch in main memory. The local spaces mirror
// an NPU core: Vec (vector unit buffer), Mat (matrix-unit operand buffer), Acc (matmul accumulator).
enum class Space : uint8_t { Global, Vec, Mat, Acc };
std::string_view space_name(Space s);  // "gm", "vec", "mat", "acc"
std::optional<Space> parse_space(std::string_view s);

// Every user-facing failure of the core (bad shapes, bad IR, bad text) is a pypto::Error; the
// Python layer turns it into an exception that names the kernel's source line.
struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

}  // namespace pypto::ir
