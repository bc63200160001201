#include "passes/pass_util.h"

#include <algorithm>

namespace pypto::passes {

bool covers_buffer(const ir::View& v) {
  for (int d = 0; d < v.buf->rank(); ++d) {
    auto o = ir::as_int(v.offset[d]);
    if (!o || *o != 0 || v.size[d] != v.buf->shape[d] || v.step[d] != 1) return false;
  }
  if (v.rank() != v.buf->rank()) return false;
  for (int d = 0; d < v.rank(); ++d)
    if (v.dims[d] != d) return false;
  return true;
}

bool mentions(const ir::View& v, const std::string& var, bool valid) {
  std::vector<std::string> vars;
  for (auto& e : v.offset) ir::collect_vars(e, vars);
  if (valid)
    for (auto& e : v.valid) ir::collect_vars(e, vars);
  return std::find(vars.begin(), vars.end(), var) != vars.end();
}

}  // namespace pypto::passes
