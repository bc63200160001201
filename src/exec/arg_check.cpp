// The one argument check: see arg_check.h.
#include "exec/arg_check.h"

#include "ir/number_text.h"
#include "ir/visitor.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <string>

namespace pypto::runtime {
namespace {

using ir::Error;

std::string type_text(ir::DType t, const std::vector<int64_t>& shape) {
  std::string s = std::string(ir::dtype_name(t)) + "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// The expected type, dynamic dims written as their extent (`f32[%S, 64]`).
std::string type_text(const ir::Buffer& b) {
  std::string s = std::string(ir::dtype_name(b.dtype)) + "[";
  for (int i = 0; i < b.rank(); ++i)
    s += (i ? ", " : "") +
         (b.is_dynamic(i) ? ir::to_string(b.dyn[size_t(i)]) : std::to_string(b.shape[size_t(i)]));
  return s + "]";
}

int64_t numel(const TensorArg& t) {
  int64_t n = 1;
  for (int64_t s : t.shape) n *= s;
  return n;
}

// Byte range [lo, hi) that the tensor's elements occupy.
struct Span {
  uintptr_t lo, hi;
};
Span span_of(const TensorArg& t) {
  const int64_t es = int64_t(ir::dtype_bytes(t.dtype));
  int64_t lo = 0, hi = 0;
  for (size_t d = 0; d < t.shape.size(); ++d) {
    int64_t reach = (t.shape[d] - 1) * t.strides[d];
    (reach < 0 ? lo : hi) += reach;
  }
  auto base = reinterpret_cast<uintptr_t>(t.data);
  return Span{base + uintptr_t(lo * es), base + uintptr_t(hi * es + es)};
}

// Dimensions of size > 1 ordered by |stride|, as (|stride|, size).
std::vector<std::pair<int64_t, int64_t>> layout_of(const TensorArg& t) {
  std::vector<std::pair<int64_t, int64_t>> dims;
  for (size_t d = 0; d < t.shape.size(); ++d)
    if (t.shape[d] > 1) dims.emplace_back(std::llabs(t.strides[d]), t.shape[d]);
  std::sort(dims.begin(), dims.end());
  return dims;
}

// No element is reachable through two index tuples: each stride clears the extent of the
// smaller ones (a sufficient test; it holds for every layout NumPy and torch make without
// as_strided, and fails for stride 0).
bool elements_distinct(const TensorArg& t) {
  if (numel(t) == 0) return true;  // no elements to reach twice
  int64_t extent = 1;
  bool row_major = true;  // the common case, without layout_of's sort (this runs on every call)
  for (size_t d = t.shape.size(); d-- > 0 && row_major;) {
    if (t.shape[d] > 1) row_major = t.strides[d] == extent;
    extent *= t.shape[d];
  }
  if (row_major) return true;
  extent = 1;
  for (auto [stride, size] : layout_of(t)) {
    if (stride < extent) return false;
    extent = stride * size;
  }
  return true;
}

// Whether two arguments may share an element. Both viewing one array with the same strides
// (column blocks of one matrix, say) are told apart exactly; otherwise intersecting byte ranges
// count as overlap.
bool may_overlap(const TensorArg& a, const TensorArg& b) {
  Span sa = span_of(a), sb = span_of(b);
  if (sa.hi <= sb.lo || sb.hi <= sa.lo) return false;
  if (a.dtype != b.dtype || a.strides != b.strides || !elements_distinct(a)) return true;
  const int64_t es = int64_t(ir::dtype_bytes(a.dtype));
  int64_t delta = (reinterpret_cast<intptr_t>(b.data) - reinterpret_cast<intptr_t>(a.data));
  if (delta % es) return true;
  delta /= es;
  // Split the element offset of b from a along the strides, largest first, into per-dimension
  // index offsets; the boxes [0, shape) and [off, off + shape) must meet in every dimension.
  std::vector<size_t> order(a.shape.size());
  for (size_t d = 0; d < order.size(); ++d) order[d] = d;
  std::sort(order.begin(), order.end(),
            [&](size_t x, size_t y) { return std::llabs(a.strides[x]) > std::llabs(a.strides[y]); });
  bool meet = true;
  for (size_t d : order) {
    int64_t st = a.strides[d];
    if (st == 0 || a.shape[d] == 1) continue;
    int64_t off = delta / st;  // toward zero; the remainder must go to smaller strides
    delta -= off * st;
    if (std::llabs(off) >= a.shape[d]) meet = false;
  }
  if (delta != 0) return true;  // not on the common lattice: stay conservative
  return meet;
}

}  // namespace

std::vector<bool> written_params(const ir::Program& p) {
  std::vector<bool> out(p.params.size(), false);
  ir::for_each_stmt(p.body, [&](const ir::Stmt& s) {
    if (s->kind != ir::StmtKind::OpStmt || s->op.args.empty()) return;
    // Operand 0 is the destination, except for a prefetch (a hint) and sync instructions.
    if (s->op.code == ir::Opcode::TPREFETCH || ir::opcode_info(s->op.code).category == ir::OpCategory::Sync)
      return;
    const ir::View* dst = std::get_if<ir::View>(&s->op.args[0]);
    if (!dst || !dst->buf) return;
    for (size_t i = 0; i < p.params.size(); ++i)
      if (p.params[i] == dst->buf || p.params[i]->name == dst->buf->name) out[i] = true;
  });
  return out;
}

namespace {
// Dynamic dims: each symbol's binding dim is within [0, kDynamicBound]; every other dynamic dim
// (an argument sharing the symbol, an output) has the extent its expression gives.
template <class Who>
void check_dynamic_dims(const ir::Program& p, const RunArgs& args, const Who& who) {
  ir::ScalarEnv env;
  std::vector<std::string> bound_by(p.scalars.size());
  std::map<std::string, size_t> binder;  // symbol -> the param that binds it
  for (size_t j = p.caller_scalars(); j < p.scalars.size(); ++j) {
    const ir::ScalarParam& s = p.scalars[j];
    int64_t v = args.tensors[size_t(s.param)].shape[size_t(s.dim)];
    if (v > ir::kDynamicBound)
      throw Error(who(size_t(s.param)) + ": dim " + std::to_string(s.dim) + " is " + std::to_string(v) +
                  ", more than a dynamic dimension may hold (" + std::to_string(ir::kDynamicBound) + ")");
    if (j < args.scalars.size() && (args.scalars[j].is_float || args.scalars[j].i != v))
      throw Error("kernel '" + p.name + "': the value passed for dimension symbol %" + s.name +
                  " does not match the argument's shape");
    env[s.name] = ir::ScalarValue{false, v, 0};
    binder[s.name] = size_t(s.param);
  }
  for (size_t i = 0; i < p.params.size(); ++i) {
    const ir::Buffer& b = *p.params[i];
    for (int d = 0; d < b.rank(); ++d) {
      int64_t got = args.tensors[i].shape[size_t(d)];
      int64_t want = b.is_dynamic(d) ? ir::eval(b.dyn[size_t(d)], env).i : b.shape[size_t(d)];
      if (got == want) continue;
      std::string msg = who(i) + ": expected " + type_text(b) + ", got " +
                        type_text(args.tensors[i].dtype, args.tensors[i].shape);
      if (b.is_dynamic(d)) {
        std::vector<std::string> vars;
        ir::collect_vars(b.dyn[size_t(d)], vars);
        for (auto& v : vars)
          if (binder.count(v) && binder[v] != i)
            msg += ": dim " + std::to_string(d) + " must be " + std::to_string(want) +
                   " as the dynamic dimension %" + v + " of " + who(binder[v]) + " makes it";
      }
      throw Error(msg);
    }
  }
}
}  // namespace

void bind_dim_symbols(const ir::Program& p, const std::vector<TensorArg>& tensors,
                      std::vector<ir::ScalarValue>& scalars) {
  scalars.resize(p.caller_scalars());
  for (size_t j = p.caller_scalars(); j < p.scalars.size(); ++j) {
    const ir::ScalarParam& s = p.scalars[j];
    scalars.push_back(ir::ScalarValue{false, tensors[size_t(s.param)].shape[size_t(s.dim)], 0});
  }
}

void check_args(const ir::Program& p, const RunArgs& args, const std::vector<bool>& written) {
  if (args.tensors.size() != p.params.size())
    throw Error("kernel '" + p.name + "' takes " + std::to_string(p.params.size()) + " tensor argument" +
                (p.params.size() == 1 ? "" : "s") + ", got " + std::to_string(args.tensors.size()));
  // Messages are built only on failure: this check runs on every call of a cached kernel.
  auto who = [&](size_t i) { return "argument " + std::to_string(i + 1) + " ('" + p.params[i]->name + "')"; };
  for (size_t i = 0; i < p.params.size(); ++i) {
    const ir::Buffer& b = *p.params[i];
    const TensorArg& t = args.tensors[i];
    if (t.dtype != b.dtype || (b.is_dynamic() ? t.shape.size() != b.shape.size() : t.shape != b.shape))
      throw Error(who(i) + ": expected " + type_text(b) + ", got " + type_text(t.dtype, t.shape));
    if (t.strides.size() != t.shape.size())
      throw Error(who(i) + ": has " + std::to_string(t.strides.size()) + " strides for " +
                  std::to_string(t.shape.size()) + " dimensions");
    if (!t.data && numel(t) > 0) throw Error(who(i) + ": null data pointer");
    if (i >= written.size() || !written[i]) continue;
    if (t.read_only) throw Error(who(i) + ": the kernel writes this argument, but its memory is read-only");
    if (!elements_distinct(t))
      throw Error(who(i) +
                  ": the kernel writes this argument, but its strides reach one element through "
                  "several indices (a stride-0 view such as broadcast_to or expand); pass a copy");
  }
  for (size_t i = 0; i < p.params.size(); ++i) {
    if (i >= written.size() || !written[i] || numel(args.tensors[i]) == 0) continue;
    for (size_t j = 0; j < p.params.size(); ++j) {
      if (j == i || (j < i && written[j]) || numel(args.tensors[j]) == 0) continue;
      if (may_overlap(args.tensors[i], args.tensors[j]))
        throw Error(who(i) + ": the kernel writes this argument, and it shares memory with " + who(j) +
                    "; pass arrays that do not overlap (or a copy)");
    }
  }
  const size_t nc = p.caller_scalars();
  if (args.scalars.size() != nc && args.scalars.size() != p.scalars.size())
    throw Error("kernel '" + p.name + "' takes " + std::to_string(nc) + " scalar argument" +
                (nc == 1 ? "" : "s") + ", got " + std::to_string(args.scalars.size()));
  // Every dynamic dim, not only those with a dimension symbol: an extent written as an expression
  // of constants (`f32[(0 - 4), 8]`) binds no symbol, and unchecked it let any extent through
  // (the CPU backend then read past the caller's array).
  if (std::any_of(p.params.begin(), p.params.end(), [](const ir::BufferRef& b) { return b->is_dynamic(); }))
    check_dynamic_dims(p, args, who);
  for (size_t j = 0; j < nc; ++j) {
    const ir::ScalarParam& s = p.scalars[j];
    const ir::ScalarValue& v = args.scalars[j];
    if (!ir::is_float(s.dtype) && v.is_float && v.f != std::floor(v.f))
      throw Error("scalar argument '" + s.name + "': expected an integer (" +
                  std::string(ir::dtype_name(s.dtype)) + "), got " + ir::format_g(v.f));
  }
}

}  // namespace pypto::runtime
