// Builder views: slices with Python's index rules (run-time bounds checked on the host),
// permute/transpose, squeeze/unsqueeze and broadcasting. No instruction is emitted for a view.
#include <algorithm>
#include <climits>
#include <utility>

#include "ir/builder.h"
#include "ir/builder_impl.h"
#include "ir/structural.h"

namespace pypto::ir {

// --- views -----------------------------------------------------------------------------------

namespace {
// Python's rule for a slice bound `e` on a dimension of length `len`: a negative bound counts
// from the end (and clamps at 0). A bound past the end needs no clamp here: the slice's extent is
// max(stop - start, 0) with stop <= len. Run-time bounds of unknown sign become a select; the
// two branches are returned for the static-size bound.
struct SliceBound {
  Expr value, if_negative, if_not_negative;  // the branches are null unless value is a select
};
SliceBound normalize_bound(const Expr& e, const Expr& len, const VarBounds& vb) {
  if (auto c = as_int(e)) {
    if (*c >= 0) return {e, nullptr, nullptr};
    if (auto n = as_int(len)) return {int_imm(std::max<int64_t>(*c + *n, 0)), nullptr, nullptr};
    return {max(e + len, int_imm(0)), nullptr, nullptr};
  }
  auto b = bounds(e, vb);
  if (b && b->lo >= 0) return {e, nullptr, nullptr};
  Expr wrapped = max(e + len, int_imm(0));
  if (b && b->hi < 0) return {wrapped, nullptr, nullptr};
  return {select(cmp(ExprOp::Lt, e, int_imm(0)), wrapped, e), wrapped, e};
}
}  // namespace

void Builder::Impl::require_in_range(const Expr& k, const Expr& len, int dim) {
  auto kb = bounds(k, var_bounds);
  auto lb = bounds(len, var_bounds);
  if (kb && lb && kb->lo >= 0 && kb->hi < lb->lo) return;
  IndexCheck c;
  c.index = k;
  c.length = len;
  c.dim = dim;
  c.scopes = check_scopes();
  c.where = where;
  prog.index_checks.push_back(std::move(c));
}

void Builder::Impl::require_extent(const Expr& extent, int64_t lo, int64_t hi, int dim,
                                   const std::string& message) {
  const size_t before = prog.index_checks.size();
  require_in_range(extent - int_imm(lo), int_imm(hi - lo + 1), dim);
  if (prog.index_checks.size() > before) prog.index_checks.back().message = message;
}

std::vector<CheckScope> Builder::Impl::check_scopes() const {
  std::vector<CheckScope> scopes;
  for (auto& f : frames) {
    if (f.kind == Frame::For)
      scopes.push_back(CheckScope{f.var, f.lo, f.hi, f.step, nullptr});
    else if (f.kind == Frame::Then)
      scopes.push_back(CheckScope{"", nullptr, nullptr, nullptr, f.cond});
    else if (f.kind == Frame::Else)
      scopes.push_back(CheckScope{"", nullptr, nullptr, nullptr, logic_not(f.cond)});
  }
  return scopes;
}

View Builder::slice(const View& v, const std::vector<Index>& idx) {
  int r = v.rank();
  int consumed = 0;
  for (auto& ix : idx)
    if (ix.kind != Index::NewAxis) ++consumed;
  if (consumed > r)
    throw Error("too many indices for a tensor of shape " + shape_str(v.shape()) + ": " +
                std::to_string(consumed) + " given");
  // Signs of starts, stops and extents are judged knowing the dimension symbols' range; the
  // static size of a window (upper_bound) is not: a window of a dynamic dim bounded only by its
  // symbol stays dynamic (size kDynamicBound).
  VarBounds vb = impl_->var_bounds;
  vb.insert(impl_->symbol_bounds.begin(), impl_->symbol_bounds.end());
  View out = v;
  std::vector<int> dims;
  std::vector<int> new_axes;  // positions in the result that are new size-1 axes
  int p = 0;
  for (auto& ix : idx) {
    if (ix.kind == Index::NewAxis) {
      new_axes.push_back(int(dims.size()) + int(new_axes.size()));
      continue;
    }
    int bd = v.dims[p];
    int64_t n = v.size[bd];
    Expr V = v.valid[bd];  // the dimension's length as Python sees it
    if (ix.kind == Index::Int) {
      Expr i = ix.start;
      auto c = as_int(i);
      auto cv = as_int(V);
      if (c && cv) {
        int64_t k = *c < 0 ? *c + *cv : *c;
        if (k < 0 || k >= *cv)
          throw Error("index " + std::to_string(*c) + " is out of range for dimension " + std::to_string(p) +
                      " of size " + std::to_string(*cv));
        i = int_imm(k);
      } else {
        auto b = bounds(i, vb);
        if (!(b && b->lo >= 0))
          i = (b && b->hi < 0) ? i + V : ir::select(cmp(ExprOp::Lt, i, int_imm(0)), i + V, i);
        impl_->require_in_range(i, V, p);
      }
      out.offset[bd] = v.offset[bd] + i * int_imm(v.step[bd]);
      out.size[bd] = 1;
      out.step[bd] = 1;
      out.valid[bd] = int_imm(1);
    } else {
      int64_t s = ix.step;
      if (s <= 0) throw Error("slice steps must be positive compile-time integers");
      SliceBound st = ix.start ? normalize_bound(ix.start, V, vb) : SliceBound{int_imm(0), nullptr, nullptr};
      SliceBound sp = ix.stop ? normalize_bound(ix.stop, V, vb) : SliceBound{V, nullptr, nullptr};
      auto extent = [&](const Expr& a, const Expr& e) {
        Expr len = min(e, V) - a;
        auto lb = bounds(len, vb);
        if (!lb || lb->lo < 0) len = max(len, int_imm(0));  // an empty slice stays empty
        return s == 1 ? len : div(len + int_imm(s - 1), int_imm(s));
      };
      Expr ext = extent(st.value, sp.value);
      // The static size bounds every branch of a run-time sign test separately: interval
      // arithmetic over the select itself would lose the start/stop correlation.
      int64_t hi = 0;
      for (const Expr& a : {st.if_negative, st.if_not_negative, st.if_negative ? nullptr : st.value})
        for (const Expr& e : {sp.if_negative, sp.if_not_negative, sp.if_negative ? nullptr : sp.value})
          if (a && e) hi = std::max(hi, impl_->upper_bound(extent(a, e), n));
      int64_t static_size = std::min(hi, (n + s - 1) / s);
      // A dynamic dim stays dynamic unless the slice has a provably smaller static length.
      if (n == kDynamicBound && static_size == (n + s - 1) / s) static_size = kDynamicBound;
      if (static_size <= 0)
        throw Error("slice selects no elements of dimension " + std::to_string(p) + " (size " +
                    std::to_string(n) + ")");
      out.offset[bd] = v.offset[bd] + st.value * int_imm(v.step[bd]);
      out.size[bd] = static_size;
      out.step[bd] = v.step[bd] * s;
      // (the per-branch bound holds, but interval arithmetic over the select cannot see it)
      // (a dynamic dim's extent is below kDynamicBound by construction: no min with the bound, which
      // would make x[:, None] of a dynamic dim a different extent expression than x's own)
      if (static_size != kDynamicBound && impl_->upper_bound(ext, LLONG_MAX) > static_size)
        ext = min(ext, int_imm(static_size));
      auto c = as_int(ext);
      out.valid[bd] = (c && *c >= static_size) ? int_imm(static_size) : ext;
      dims.push_back(bd);
    }
    ++p;
  }
  for (; p < r; ++p) dims.push_back(v.dims[p]);
  out.dims = dims;
  for (int pos : new_axes) out = unsqueeze(out, pos);
  return out;
}

View Builder::permute(const View& v, std::vector<int> perm) {
  int r = v.rank();
  if (int(perm.size()) != r) throw Error("permute: expected " + std::to_string(r) + " dimensions");
  std::vector<bool> seen(r, false);
  View out = v;
  for (int i = 0; i < r; ++i) {
    int d = normalize_dim(perm[i], r, "permute");
    if (seen[d]) throw Error("permute: repeated dimension " + std::to_string(perm[i]));
    seen[d] = true;
    out.dims[i] = v.dims[d];
  }
  return out;
}

View Builder::transpose(const View& v, int d0, int d1) {
  int r = v.rank();
  std::vector<int> perm(r);
  for (int i = 0; i < r; ++i) perm[i] = i;
  std::swap(perm[normalize_dim(d0, r, "transpose")], perm[normalize_dim(d1, r, "transpose")]);
  return permute(v, perm);
}

View Builder::squeeze(const View& v, int dim) {
  int d = normalize_dim(dim, v.rank(), "squeeze");
  if (v.shape()[d] != 1)
    throw Error("squeeze: dimension " + std::to_string(dim) + " has size " + std::to_string(v.shape()[d]) +
                ", not 1");
  View out = v;
  out.dims.erase(out.dims.begin() + d);
  return out;
}

View Builder::unsqueeze(const View& v, int dim) {
  int d = normalize_dim(dim, v.rank() + 1, "unsqueeze");
  auto shape = v.shape();
  auto valid = v.valid_shape();
  shape.insert(shape.begin() + d, 1);
  valid.insert(valid.begin() + d, int_imm(1));
  View t = impl_->new_temp(shape, v.buf->dtype, valid);
  impl_->emit_op(Opcode::TMOV, {squeeze(t, d), v});
  return t;
}

View Builder::broadcast_to(const View& v, std::vector<int64_t> shape) {
  auto out = broadcast_shapes(v.shape(), shape);
  if (out != shape) throw Error("cannot broadcast shape " + shape_str(v.shape()) + " to " + shape_str(shape));
  View t = impl_->new_temp(shape, v.buf->dtype, broadcast_valid(shape, {&v}));
  impl_->emit_op(Opcode::TMOV, {t, v});
  return t;
}

}  // namespace pypto::ir
