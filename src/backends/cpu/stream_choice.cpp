#include "backends/cpu/stream_choice.h"

#include "pto/cpu/stream_rule.hpp"
#include "target/target.h"

#include <algorithm>

namespace pypto::cpu {
namespace {

using namespace ir;

// A buffer's size in bytes: a constant where its shape is static (saturating), else the C++
// expression over its extents.
struct Bytes {
  int64_t value = 0;
  std::string dynamic;  // empty when static
};

Bytes buffer_bytes(const View& v, const ExprText& ex) {
  const Buffer& b = *v.buf;
  if (!b.is_dynamic()) {
    int64_t bytes = dtype_bytes(b.dtype);
    for (int64_t d : b.shape) bytes = pto::saturating_mul(bytes, d);
    return {bytes, ""};
  }
  std::string s = "pto::buffer_bytes(" + std::to_string(dtype_bytes(b.dtype));
  for (int d = 0; d < b.rank(); ++d)
    s += ", " + (b.is_dynamic(d) ? ex.as_i(b.extent(d)) : std::to_string(b.shape[d]));
  return {0, s + ")"};
}

}  // namespace

std::string stream_choice(const View& out, const std::vector<const View*>& alongside, const ExprText& ex) {
  if (!out.buf || out.buf->kind == BufferKind::Temp || out.buf->space != Space::Global) return "false";
  const int64_t cache = std::max<int64_t>(runtime::host_target().l3_bytes, 8 << 20);
  const Bytes o = buffer_bytes(out, ex);
  int64_t fixed = 0;  // the static sizes alongside, summed here; the dynamic ones by the kernel
  std::vector<std::string> dynamic;
  for (const View* v : alongside) {
    const Bytes b = buffer_bytes(*v, ex);
    if (b.dynamic.empty())
      fixed = pto::saturating_add(fixed, b.value);
    else
      dynamic.push_back(b.dynamic);
  }
  if (o.dynamic.empty() && dynamic.empty())
    return pto::streams_past_cache(o.value, fixed, cache) ? "true" : "false";
  std::string sum = std::to_string(fixed);
  for (const std::string& d : dynamic) sum = "pto::saturating_add(" + sum + ", " + d + ")";
  return "pto::streams_past_cache(" + (o.dynamic.empty() ? std::to_string(o.value) : o.dynamic) + ", " + sum +
         ", " + std::to_string(cache) + ")";
}

}  // namespace pypto::cpu
