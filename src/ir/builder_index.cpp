// Builder: indexing by tensors. Everything rests on two tensor-level instructions, TGATHER and
// TSCATTER(_ADD), which move whole rows along the second-last dimension through a rank-1 index
// tensor (tiling lowers them to MGATHER / MSCATTER, which check every index when the kernel runs).
// Any other indexed dimension is permuted into place (a view); torch.gather / torch.scatter index
// single elements through the flattened tensor.
#include <algorithm>
#include <numeric>

#include "ir/builder.h"
#include "ir/builder_impl.h"

namespace pypto::ir {

namespace {

void check_index(const View& idx, const char* what) {
  DType t = idx.buf->dtype;
  if (is_float(t) || t == DType::Bool)
    throw Error(std::string(what) + ": indices must be an integer tensor, got " + std::string(dtype_name(t)));
}

// The permutation that brings dimension d of a rank-r view to the row position (second-last):
// the last dimension stays last unless d is the last one, which swaps with the second-last.
std::vector<int> to_rows(int r, int d) {
  std::vector<int> p;
  if (d == r - 1) {
    for (int i = 0; i < r; ++i) p.push_back(i);
    std::swap(p[size_t(r - 2)], p[size_t(r - 1)]);
    return p;
  }
  for (int i = 0; i < r - 1; ++i)
    if (i != d) p.push_back(i);
  p.push_back(d);
  p.push_back(r - 1);
  return p;
}

int64_t numel(const std::vector<int64_t>& s) {
  return std::accumulate(s.begin(), s.end(), int64_t(1), std::multiplies<int64_t>());
}

}  // namespace

std::vector<int> inverse_perm(const std::vector<int>& p) {
  std::vector<int> q(p.size());
  for (size_t i = 0; i < p.size(); ++i) q[size_t(p[i])] = int(i);
  return q;
}

// A rank-1 copy of v in row-major order (each reshape step merges the last two dimensions).
static View flatten_all(Builder& b, const View& v) {
  if (v.rank() > 1)
    for (int64_t s : v.shape())
      if (s == kDynamicBound)
        throw Error(
            "scatter and indexing by a tensor of 2 or more dims "
            "address elements by their flat position, which needs static shapes: " +
            shape_str(v.shape()) + " has a dynamic dimension (keep it static)");
  View cur = v;
  if (cur.rank() == 0) return b.reshape(cur, {1});
  while (cur.rank() > 1) {
    auto s = cur.shape();
    s[s.size() - 2] *= s.back();
    s.pop_back();
    cur = b.reshape(cur, s);
  }
  return cur;
}

// Splits dimension d of v into `sizes` (none: d is dropped; it must then have size 1).
static View unflatten(Builder& b, const View& v, int d, const std::vector<int64_t>& sizes) {
  if (sizes.empty()) return b.squeeze(v, d);
  View cur = v;
  for (size_t k = 0; k + 1 < sizes.size(); ++k) {
    auto s = cur.shape();
    int64_t rest = s[size_t(d) + k] / sizes[k];
    s[size_t(d) + k] = rest;
    s.insert(s.begin() + long(d + k), sizes[k]);
    cur = b.reshape(cur, s);
  }
  return cur;
}

View Builder::gather_rows(const View& src, const View& idx) {
  check_index(idx, "gather");
  if (idx.rank() != 1)
    throw Error("gather_rows: the index tensor must have rank 1, got " + shape_str(idx.shape()));
  int r = src.rank();
  if (r < 1) throw Error("gather: cannot index a 0-d tensor");
  int rd = r == 1 ? 0 : r - 2;
  auto shape = src.shape();
  auto valid = src.valid_shape();
  shape[size_t(rd)] = idx.shape()[0];
  valid[size_t(rd)] = idx.valid_shape()[0];
  View out = impl_->new_temp(shape, src.buf->dtype, valid, "g");
  impl_->emit_op(Opcode::TGATHER, {out, src, idx});
  return out;
}

void Builder::scatter_rows(const View& dst, const View& src, const View& idx, bool accumulate) {
  check_index(idx, accumulate ? "index_add" : "index_put");
  if (idx.rank() != 1)
    throw Error("scatter_rows: the index tensor must have rank 1, got " + shape_str(idx.shape()));
  int r = dst.rank();
  int rd = r == 1 ? 0 : r - 2;
  auto want = dst.shape();
  if (r < 1) throw Error("scatter: cannot index a 0-d tensor");
  want[size_t(rd)] = idx.shape()[0];
  if (src.shape() != want)
    throw Error("scatter: the values have shape " + shape_str(src.shape()) + ", expected " + shape_str(want));
  impl_->emit_op(accumulate ? Opcode::TSCATTER_ADD : Opcode::TSCATTER, {dst, src, idx});
}

// Python's rule for an index tensor: -1 is the last element.
static View wrap_index(Builder& b, const View& idx, int64_t n) {
  return b.select(b.binary(Opcode::TCMP_LT, idx, int_imm(0)), b.binary(Opcode::TADD, idx, int_imm(n)), idx);
}

View Builder::take(const View& x, int dim, const View& idx, bool wrap_negative) {
  check_index(idx, "index");
  int r = x.rank();
  if (r == 0) throw Error("index: cannot index a 0-d tensor with a tensor");
  int d = normalize_dim(dim, r, "index");
  View flat = idx.rank() == 1 ? idx : flatten_all(*this, idx);
  if (wrap_negative) flat = wrap_index(*this, flat, x.shape()[size_t(d)]);
  View g;
  if (r == 1) {
    g = gather_rows(x, flat);
  } else {
    auto perm = to_rows(r, d);
    g = permute(gather_rows(permute(x, perm), flat), inverse_perm(perm));
  }
  return idx.rank() == 1 ? g : unflatten(*this, g, d, idx.shape());
}

void Builder::put(const View& x, int dim, const View& idx, const Operand& value, bool accumulate,
                  bool wrap_negative) {
  check_index(idx, accumulate ? "index_add" : "index_put");
  int r = x.rank();
  if (r == 0) throw Error("index_put: cannot index a 0-d tensor with a tensor");
  int d = normalize_dim(dim, r, "index_put");
  auto xs = x.shape();
  // The values take the indexed shape: x's dims with dim replaced by idx's, broadcast as NumPy.
  std::vector<int64_t> target(xs.begin(), xs.begin() + d);
  for (auto s : idx.shape()) target.push_back(s);
  target.insert(target.end(), xs.begin() + d + 1, xs.end());
  View src;
  if (auto v = std::get_if<View>(&value)) {
    src = v->shape() == target ? *v : broadcast_to(*v, target);
  } else {
    src = full(target, x.buf->dtype, std::get<Expr>(value));
  }
  View flat = idx.rank() == 1 ? idx : flatten_all(*this, idx);
  if (idx.rank() == 0) {
    src = unsqueeze(src, d);
  } else {
    for (int k = 1; k < idx.rank(); ++k) {  // merge the index dims of the values into one
      auto s = src.shape();
      s[size_t(d)] *= s[size_t(d) + 1];
      s.erase(s.begin() + d + 1);
      src = reshape(src, s);
    }
  }
  if (wrap_negative) flat = wrap_index(*this, flat, xs[size_t(d)]);
  if (r == 1) return scatter_rows(x, src, flat, accumulate);
  auto perm = to_rows(r, d);
  scatter_rows(permute(x, perm), permute(src, perm), flat, accumulate);
}

// torch's rule for gather / scatter: the index is no larger than the tensor in every dim but `d`
// (a dynamic dim of the tensor is not known here).
static void check_index_shape(const char* what, const std::vector<int64_t>& xs, int d,
                              const std::vector<int64_t>& is) {
  for (size_t k = 0; k < xs.size(); ++k)
    if (int(k) != d && xs[k] != kDynamicBound && is[k] > xs[k])
      throw Error(std::string(what) + ": index shape " + shape_str(is) + " exceeds the tensor's " +
                  shape_str(xs) + " in dimension " + std::to_string(k));
}

// Linear (row-major) positions of the elements idx selects along dim in a tensor of shape xs,
// after checking every index against xs[dim] with a gather from a scratch vector of that length.
static View linear_index(Builder& b, const std::vector<int64_t>& xs, int d, const View& idx) {
  int r = int(xs.size());
  auto is = idx.shape();
  check_index_shape("gather/scatter", xs, d, is);
  View id64 = idx.buf->dtype == DType::I64 ? idx : b.cast(idx, DType::I64);
  b.gather_rows(b.full({xs[size_t(d)]}, DType::Bool, int_imm(0)), flatten_all(b, id64));  // the range check
  View lin = b.binary(Opcode::TMUL, id64, int_imm(numel({xs.begin() + d + 1, xs.end()})));
  for (int k = 0; k < r; ++k) {
    if (k == d) continue;
    int64_t stride = numel({xs.begin() + k + 1, xs.end()});
    lin = b.binary(Opcode::TADD, lin,
                   b.binary(Opcode::TMUL, iota_along(b, is[size_t(k)], r, k), int_imm(stride)));
  }
  return flatten_all(b, lin);
}

// torch.gather: out[.., k, ..] = x[.., idx[.., k, ..], ..] along dim. With dim moved last (views),
// a loop over idx's other indices gathers each row of idx from x's row (a rank-1 TGATHER: its
// elements are the rows): nothing is flattened, so x is not copied (a language model's log-prob
// gather from its logits read 4 bytes of them per index, not all), any dim may be dynamic, and the
// gather checks every index against x's extent along dim.
View Builder::gather_elements(const View& x, int dim, const View& idx) {
  check_index(idx, "gather");
  int r = x.rank();
  if (idx.rank() != r)
    throw Error("gather: the index must have the input's rank " + std::to_string(r) + ", got shape " +
                shape_str(idx.shape()));
  int d = normalize_dim(dim, r, "gather");
  check_index_shape("gather", x.shape(), d, idx.shape());
  if (r == 1) return gather_rows(x, idx);  // (a rank-1 table's elements are its rows)
  std::vector<int> perm;
  for (int i = 0; i < r; ++i)
    if (i != d) perm.push_back(i);
  perm.push_back(d);
  View xp = permute(x, perm), ip = permute(idx, perm);
  View out = impl_->new_temp(ip.shape(), x.buf->dtype, ip.valid_shape(), "gathered");
  std::vector<Index> at(static_cast<size_t>(r));
  const auto iv = ip.valid_shape();
  for (int k = 0; k < r - 1; ++k) {
    at[size_t(k)].kind = Index::Int;
    at[size_t(k)].start = begin_for("g", int_imm(0), iv[size_t(k)], int_imm(1));
  }
  impl_->emit_op(Opcode::TGATHER, {slice(out, at), slice(xp, at), slice(ip, at)});  // into out's row
  for (int k = 0; k < r - 1; ++k) end_for();
  return permute(out, inverse_perm(perm));
}

View Builder::scatter_elements(const View& x, int dim, const View& idx, const Operand& src, bool accumulate) {
  check_index(idx, "scatter");
  int r = x.rank();
  if (idx.rank() != r)
    throw Error("scatter: the index must have the input's rank " + std::to_string(r) + ", got shape " +
                shape_str(idx.shape()));
  int d = normalize_dim(dim, r, "scatter");
  View lin = linear_index(*this, x.shape(), d, idx);
  View vals;
  if (auto v = std::get_if<View>(&src)) {
    if (v->rank() != r) throw Error("scatter: src must have the input's rank");
    std::vector<Index> part(static_cast<size_t>(r));
    for (int k = 0; k < r; ++k) {
      if (v->shape()[size_t(k)] < idx.shape()[size_t(k)])
        throw Error("scatter: src " + shape_str(v->shape()) + " is smaller than the index " +
                    shape_str(idx.shape()));
      part[size_t(k)].start = int_imm(0);
      part[size_t(k)].stop = int_imm(idx.shape()[size_t(k)]);
    }
    vals = flatten_all(*this, slice(*v, part));
  } else {
    vals = full({numel(idx.shape())}, x.buf->dtype, std::get<Expr>(src));
  }
  View out = flatten_all(*this, x);  // a fresh copy, updated in place
  scatter_rows(out, vals, lin, accumulate);
  return r == 1 ? out : reshape(out, x.shape());
}

View Builder::argsort(const View& x, int dim, bool descending) { return sort_order(x, dim, descending, 0); }

// The first k entries (all with k = 0) of the stable sorting permutation along dim: TARGSORT into
// a destination k wide selects them without sorting the rest of the row.
View Builder::sort_order(const View& x, int dim, bool descending, int64_t k) {
  int r = x.rank();
  if (r == 0) throw Error("sort: needs a tensor of at least 1 dimension");
  if (x.buf->dtype == DType::Bool) throw Error("sort: not supported for bool tensors");
  int d = normalize_dim(dim, r, "sort");
  std::vector<int> perm;  // the sorted dimension last (a view)
  for (int i = 0; i < r; ++i)
    if (i != d) perm.push_back(i);
  perm.push_back(d);
  View xp = permute(x, perm);
  impl_->require_whole_row(xp, d, k > 0 ? "topk" : "sort");
  auto shape = xp.shape();
  auto valid = xp.valid_shape();
  if (k > 0) {
    shape.back() = k;
    valid.back() = min_valid(valid.back(), int_imm(k));
  }
  View out = impl_->new_temp(shape, DType::I64, valid, "order");
  impl_->emit_op(Opcode::TARGSORT, {out, xp, int_imm(descending ? 1 : 0)});
  return permute(out, inverse_perm(perm));
}

std::pair<View, View> Builder::sort(const View& x, int dim, bool descending) {
  View idx = argsort(x, dim, descending);
  return {gather_elements(x, dim, idx), idx};
}

std::pair<View, View> Builder::topk(const View& x, int64_t k, int dim, bool largest) {
  int r = x.rank();
  int d = normalize_dim(dim, r, "topk");
  int64_t n = x.shape()[size_t(d)];
  if (k < 1 || k > n)
    throw Error("topk: k = " + std::to_string(k) + " is out of range for a dimension of size " +
                std::to_string(n));
  if (n == kDynamicBound)  // as torch: an error when the dim is shorter than k at run time
    impl_->require_extent(x.valid_shape()[size_t(d)], k, kDynamicBound, d,
                          "topk: k = " + std::to_string(k) + " is out of range for dimension " +
                              std::to_string(d) + " of the run-time size");
  View idx = sort_order(x, d, largest, k);
  return {gather_elements(x, d, idx), idx};
}

View Builder::flip(const View& x, const std::vector<int>& dims) {
  View cur = x;
  std::vector<bool> seen(size_t(x.rank()), false);
  for (int dim : dims) {
    int d = normalize_dim(dim, x.rank(), "flip");
    if (seen[size_t(d)]) throw Error("flip: dimension " + std::to_string(dim) + " appears twice");
    seen[size_t(d)] = true;
    int64_t n = x.shape()[size_t(d)];
    if (n == kDynamicBound) {  // reversed over the run-time extent
      Expr e = x.valid_shape()[size_t(d)];
      cur = take(cur, d, arange(e - int_imm(1), n, int_imm(-1), DType::I64, e), false);
      continue;
    }
    cur = take(cur, d, arange(int_imm(n - 1), n, int_imm(-1), DType::I64), false);
  }
  return dims.empty() ? copy(x) : cur;
}

}  // namespace pypto::ir
