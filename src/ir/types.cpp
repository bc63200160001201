// Names and sizes of element types and memory spaces.
#include "ir/types.h"

namespace pypto::ir {

namespace {
struct DTypeRow {
  DType t;
  std::string_view name;
  int bytes;
};
constexpr DTypeRow kDTypes[] = {
    {DType::F32, "f32", 4}, {DType::F16, "f16", 2}, {DType::BF16, "bf16", 2}, {DType::F64, "f64", 8},
    {DType::I32, "i32", 4}, {DType::I64, "i64", 8}, {DType::Bool, "bool", 1}, {DType::I8, "i8", 1},
    {DType::U8, "u8", 1},   {DType::I16, "i16", 2},
};
constexpr std::string_view kSpaces[] = {"gm", "vec", "mat", "acc"};
}  // namespace

std::string_view dtype_name(DType t) {
  for (const auto& r : kDTypes)
    if (r.t == t) return r.name;
  return "?";
}

std::optional<DType> parse_dtype(std::string_view s) {
  for (const auto& r : kDTypes)
    if (r.name == s) return r.t;
  return std::nullopt;
}

int dtype_bytes(DType t) {
  for (const auto& r : kDTypes)
    if (r.t == t) return r.bytes;
  return 0;
}

std::string_view space_name(Space s) {
  auto i = size_t(s);
  return i < std::size(kSpaces) ? kSpaces[i] : "?";
}

std::optional<Space> parse_space(std::string_view s) {
  for (size_t i = 0; i < std::size(kSpaces); ++i)
    if (kSpaces[i] == s) return Space(i);
  return std::nullopt;
}

}  // namespace pypto::ir
