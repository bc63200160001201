// Builder composites for the everyday tensor operations that need no instruction of their own:
// triangular masks, variance and logsumexp, any/all, argmax/argmin, stack, roll,
// repeat_interleave, one_hot and constant padding. Each is a short sequence of core builder
// calls (iota, compare, select, reductions, slices and stores) that fusion later merges.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "ir/builder.h"
#include "ir/builder_impl.h"

namespace pypto::ir {

namespace {

// The permutation that moves dimension d of a rank-r tensor last (and its inverse).
std::vector<int> move_last(int r, int d) {
  std::vector<int> p;
  for (int i = 0; i < r; ++i)
    if (i != d) p.push_back(i);
  p.push_back(d);
  return p;
}

std::vector<int> inverse(const std::vector<int>& p) {
  std::vector<int> q(p.size());
  for (size_t i = 0; i < p.size(); ++i) q[size_t(p[i])] = int(i);
  return q;
}

std::vector<int> all_dims(const View& x, std::vector<int> dims, const char* what) {
  int r = x.rank();
  if (dims.empty())
    for (int i = 0; i < r; ++i) dims.push_back(i);
  for (auto& d : dims) d = normalize_dim(d, r, what);
  std::sort(dims.begin(), dims.end());
  dims.erase(std::unique(dims.begin(), dims.end()), dims.end());
  return dims;
}

Index range_index(int64_t start, int64_t stop) {
  Index ix;
  ix.start = int_imm(start);
  ix.stop = int_imm(stop);
  return ix;
}

}  // namespace

// i64 iota of shape [1, .., n, .., 1] (rank r, n at dim d): an arange stored into a [1, .., 1, n]
// temporary, viewed with its last dimension moved to d.
View iota_along(Builder& b, int64_t n, int r, int d) {
  std::vector<int64_t> shape(size_t(r), 1);
  shape.back() = n;
  View t = b.empty(shape, DType::I64);
  View row = t;
  for (int i = 0; i + 1 < r; ++i) row = b.squeeze(row, 0);
  b.assign(row, b.arange(int_imm(0), n, int_imm(1), DType::I64));
  return b.permute(t, inverse(move_last(r, d)));
}

// tril (lower) / triu of x whose row or column count is dynamic: a loop over the rows, each row's
// kept window copied and the rest zero-filled (the iota masks need static extents).
static View triangle_by_rows(Builder& b, const View& x, int64_t k, bool lower) {
  const auto s = x.shape();
  const auto valid = x.valid_shape();
  const int r = x.rank();
  std::vector<Expr> extents(static_cast<size_t>(r));
  for (int d = 0; d < r; ++d)
    if (s[size_t(d)] == kDynamicBound) extents[size_t(d)] = valid[size_t(d)];
  View out = b.empty(s, x.buf->dtype, extents);
  const Expr m = valid[size_t(r - 1)];
  Expr i = b.begin_for("i", int_imm(0), valid[size_t(r - 2)], int_imm(1));
  // Columns [0, cut) are kept by tril (j <= i + k) and zeroed by triu (j < i + k).
  const Expr cut = min(max(i + int_imm(lower ? k + 1 : k), int_imm(0)), m);
  std::vector<Index> head(static_cast<size_t>(r)), tail(static_cast<size_t>(r));
  for (auto* ix : {&head, &tail}) {
    (*ix)[size_t(r - 2)].kind = Index::Int;
    (*ix)[size_t(r - 2)].start = i;
  }
  head[size_t(r - 1)].start = int_imm(0);
  head[size_t(r - 1)].stop = cut;
  tail[size_t(r - 1)].start = cut;
  tail[size_t(r - 1)].stop = m;
  const std::vector<Index>& kept = lower ? head : tail;
  const std::vector<Index>& zero = lower ? tail : head;
  b.assign(b.slice(out, kept), b.slice(x, kept));
  b.assign(b.slice(out, zero), int_imm(0));
  b.end_for();
  return out;
}

View Builder::tril(const View& x, int64_t k) {
  if (x.rank() < 2)
    throw Error("tril: needs a tensor of at least 2 dimensions, got shape " + shape_str(x.shape()));
  auto s = x.shape();
  int64_t n = s[s.size() - 2], m = s.back();
  if (n == kDynamicBound || m == kDynamicBound) return triangle_by_rows(*this, x, k, true);
  View diff = binary(Opcode::TSUB, iota_along(*this, m, 2, 1), iota_along(*this, n, 2, 0));  // j - i
  return select(binary(Opcode::TCMP_LE, diff, int_imm(k)), x, int_imm(0));
}

View Builder::triu(const View& x, int64_t k) {
  if (x.rank() < 2)
    throw Error("triu: needs a tensor of at least 2 dimensions, got shape " + shape_str(x.shape()));
  auto s = x.shape();
  int64_t n = s[s.size() - 2], m = s.back();
  if (n == kDynamicBound || m == kDynamicBound) return triangle_by_rows(*this, x, k, false);
  View diff = binary(Opcode::TSUB, iota_along(*this, m, 2, 1), iota_along(*this, n, 2, 0));
  return select(binary(Opcode::TCMP_GE, diff, int_imm(k)), x, int_imm(0));
}

// Statistics compute in f32 (or f64) and round to a f16/bf16 input's type at the end, as torch.
static View to_compute(Builder& b, const View& x) {
  DType t = x.buf->dtype;
  DType c = is_float(t) ? compute_dtype(t) : DType::F32;
  return c == t ? x : b.cast(x, c);
}

static View to_storage(Builder& b, const View& y, DType t) {
  return (t == DType::F16 || t == DType::BF16) ? b.cast(y, t) : y;
}

View Builder::variance(const View& x, std::vector<int> dims, double correction, bool keepdim) {
  dims = all_dims(x, dims, "var");
  View xs = to_compute(*this, x);
  Expr count = int_imm(1);
  auto vs = x.valid_shape();
  for (int d : dims) count = count * vs[size_t(d)];
  View mu = mean(xs, dims, true);
  View xc = binary(Opcode::TSUB, xs, mu);
  View ss = reduce(Opcode::TROWSUM, binary(Opcode::TMUL, xc, xc), dims, keepdim);
  DType ft = xs.buf->dtype;
  // 1 / (N - correction): inf (and so NaN or inf, as torch) when there are too few elements.
  Expr inv = as_int(count) ? float_imm(1.0 / (double(*as_int(count)) - correction), ft)
                           : div(float_imm(1.0, ft), ir::cast(count, ft) - float_imm(correction, ft));
  return to_storage(*this, binary(Opcode::TMUL, ss, inv), x.buf->dtype);
}

View Builder::logsumexp(const View& x, std::vector<int> dims, bool keepdim) {
  dims = all_dims(x, dims, "logsumexp");
  View xs = to_compute(*this, x);
  View m = reduce(Opcode::TROWMAX, xs, dims, true);
  // An infinite maximum is replaced by 0 so that rows of -inf give -inf and +inf gives +inf
  // (x - m would be NaN); a NaN maximum stays NaN.
  View inf_max = binary(Opcode::TCMP_EQ, unary(Opcode::TABS, m), float_imm(INFINITY, xs.buf->dtype));
  View shift = select(inf_max, float_imm(0.0, xs.buf->dtype), m);
  View s = reduce(Opcode::TROWSUM, unary(Opcode::TEXP, binary(Opcode::TSUB, xs, shift)), dims, true);
  View y = binary(Opcode::TADD, unary(Opcode::TLOG, s), shift);
  if (!keepdim)
    for (auto it = dims.rbegin(); it != dims.rend(); ++it) y = squeeze(y, *it);
  return to_storage(*this, y, x.buf->dtype);
}

static View any_all(Builder& b, Opcode row_op, const View& x, std::vector<int> dims, bool keepdim) {
  View nz = x.buf->dtype == DType::Bool ? x : b.binary(Opcode::TCMP_NE, x, int_imm(0));
  View r = b.reduce(row_op, b.cast(nz, DType::I32), dims, keepdim);
  return b.binary(Opcode::TCMP_NE, r, int_imm(0));
}

View Builder::any(const View& x, std::vector<int> dims, bool keepdim) {
  return any_all(*this, Opcode::TROWMAX, x, all_dims(x, dims, "any"), keepdim);
}

View Builder::all(const View& x, std::vector<int> dims, bool keepdim) {
  return any_all(*this, Opcode::TROWMIN, x, all_dims(x, dims, "all"), keepdim);
}

// The first index along `dim` holding the extreme value; a NaN counts as the extreme (as torch).
View Builder::arg_extreme(Opcode arg_op, const View& x, int dim, bool keepdim, const char* what) {
  int r = x.rank();
  if (r == 0) throw Error(std::string(what) + ": needs a tensor of at least 1 dimension");
  if (x.buf->dtype == DType::Bool) throw Error(std::string(what) + ": not supported for bool tensors");
  int d = normalize_dim(dim, r, what);
  auto perm = move_last(r, d);
  View xp = permute(x, perm);
  auto shape = xp.shape();
  auto valid = xp.valid_shape();
  if (!as_int(valid.back()))  // as torch, no index of an empty dimension: an error when it runs
    impl_->require_extent(valid.back(), 1, kDynamicBound, d,
                          std::string(what) + ": dimension " + std::to_string(d) +
                              " is empty at run time: there is no index to return");
  shape.back() = 1;
  valid.back() = int_imm(1);
  View idx = impl_->new_temp(shape, DType::I64, valid);
  impl_->emit_op(arg_op, {idx, xp});
  if (!keepdim) return squeeze(idx, r - 1);
  return permute(idx, inverse(perm));
}

View Builder::argmax(const View& x, int dim, bool keepdim) {
  return arg_extreme(Opcode::TROWARGMAX, x, dim, keepdim, "argmax");
}

View Builder::argmin(const View& x, int dim, bool keepdim) {
  return arg_extreme(Opcode::TROWARGMIN, x, dim, keepdim, "argmin");
}

View Builder::stack(const std::vector<View>& xs, int dim) {
  if (xs.empty()) throw Error("stack: no tensors given");
  auto shape = xs[0].shape();
  int r = int(shape.size());
  int d = normalize_dim(dim, r + 1, "stack");
  for (auto& x : xs)
    if (x.shape() != shape)
      throw Error("stack: all tensors must have the same shape, got " + shape_str(shape) + " and " +
                  shape_str(x.shape()));
  auto os = shape;
  os.insert(os.begin() + d, int64_t(xs.size()));
  DType t = xs[0].buf->dtype;
  // Dynamic dimensions keep the parts' extents (empty() puts the bound back for them).
  auto valid = xs[0].valid_shape();
  valid.insert(valid.begin() + d, nullptr);
  std::vector<Expr> extents(os.size());
  bool dynamic = false;
  for (size_t i = 0; i < os.size(); ++i)
    if (os[i] == kDynamicBound) {
      extents[i] = valid[i];
      os[i] = 1;
      dynamic = true;
    }
  View out = dynamic ? empty(os, t, extents) : empty(os, t);
  for (size_t i = 0; i < xs.size(); ++i) {
    std::vector<Index> idx(size_t(d) + 1);
    idx[size_t(d)].kind = Index::Int;
    idx[size_t(d)].start = int_imm(int64_t(i));
    assign(slice(out, idx), xs[i]);
  }
  return out;
}

View Builder::roll(const View& x, int64_t shift, int dim) {
  int r = x.rank();
  int d = normalize_dim(dim, r, "roll");
  int64_t n = x.shape()[size_t(d)];
  int64_t s = ((shift % n) + n) % n;
  if (s == 0) return copy(x);
  View out = empty(x.shape(), x.buf->dtype);
  std::vector<Index> dst(size_t(d) + 1), src(size_t(d) + 1);
  dst[size_t(d)] = range_index(s, n);
  src[size_t(d)] = range_index(0, n - s);
  assign(slice(out, dst), slice(x, src));
  dst[size_t(d)] = range_index(0, s);
  src[size_t(d)] = range_index(n - s, n);
  assign(slice(out, dst), slice(x, src));
  return out;
}

View Builder::repeat_interleave(const View& x, int64_t repeats, int dim) {
  if (repeats < 1) throw Error("repeat_interleave: repeats must be >= 1, got " + std::to_string(repeats));
  int r = x.rank();
  int d = normalize_dim(dim, r, "repeat_interleave");
  auto shape = x.shape();
  int64_t n = shape[size_t(d)];
  shape[size_t(d)] = n * repeats;
  View out = empty(shape, x.buf->dtype);
  // out[.., j::repeats, ..] = x for each j: one loop of strided stores.
  Expr j = begin_for("rep", int_imm(0), int_imm(repeats), int_imm(1));
  std::vector<Index> idx(size_t(d) + 1);
  idx[size_t(d)].start = j;
  idx[size_t(d)].stop = j + int_imm((n - 1) * repeats + 1);
  idx[size_t(d)].step = repeats;
  assign(slice(out, idx), x);
  end_for();
  return out;
}

// Scans run as log2(n) passes of the Hillis-Steele form: pass k combines every element with the
// one k places before it (a shifted view), so each pass is one elementwise instruction over the
// whole tensor, parallel across every other dimension and tiled like any elementwise op.
static Index span(int64_t a, int64_t b) { return range_index(a, b); }

View Builder::scan(Opcode combine, const View& x, int dim) {
  int r = x.rank();
  if (r == 0) throw Error("scan: needs a tensor of at least 1 dimension");
  int d = normalize_dim(dim, r, "scan");
  DType t = x.buf->dtype;
  if (!is_float(t)) t = DType::I64;
  if (combine == Opcode::TADD || combine == Opcode::TMUL)
    return row_scan(t == x.buf->dtype ? x : cast(x, t), d, combine == Opcode::TMUL, false);
  View cur = t == x.buf->dtype ? copy(x) : cast(x, t);
  int64_t n = x.shape()[size_t(d)];
  for (int64_t k = 1; k < n; k *= 2) {
    View next = empty(x.shape(), t);
    std::vector<Index> head(size_t(d) + 1), tail(size_t(d) + 1), prev(size_t(d) + 1);
    head[size_t(d)] = span(0, k);
    tail[size_t(d)] = span(k, n);
    prev[size_t(d)] = span(0, n - k);
    assign(slice(next, head), slice(cur, head));
    impl_->emit_op(combine, {slice(next, tail), slice(cur, tail), slice(cur, prev)});
    cur = next;
  }
  return cur;
}

// One TSCAN along dim (moved last by a view): a running sum or product per row, one pass over
// memory instead of the log2(n) passes above.
View Builder::row_scan(const View& x, int dim, bool product, bool reverse) {
  int r = x.rank();
  int d = normalize_dim(dim, r, "scan");
  std::vector<int> perm;
  for (int i = 0; i < r; ++i)
    if (i != d) perm.push_back(i);
  perm.push_back(d);
  View xp = permute(x, perm);
  if (reverse) impl_->require_whole_row(xp, d, product ? "reversed cumprod" : "reversed cumsum");
  View out = impl_->new_temp(xp.shape(), x.buf->dtype, xp.valid_shape(), "scan");
  impl_->emit_op(Opcode::TSCAN, {out, xp, int_imm((product ? 1 : 0) | (reverse ? 2 : 0))});
  return permute(out, inverse_perm(perm));
}

// cummax / cummin: the running extreme by one TSCAN (TMAX's / TMIN's rule: a NaN stays), and
// the index of the last element that reached it (torch's: a tie takes the later index; after a
// NaN, the latest NaN): the running maximum of the indices where x equals the running extreme or
// is NaN. The values returned are x gathered at those indices (the same values), so that their
// gradient goes to the element each came from, as torch's. Two scans along dim instead of log2(n) passes over
// the tensor (1024^2 cummax on 2 Zen 4 cores: 20.5 -> 3.1 ms, torch 1.0), and a dynamic dim works as any
// other.
std::pair<View, View> Builder::scan_extreme(Opcode combine, const View& x, int dim) {
  int r = x.rank();
  if (r == 0) throw Error("scan: needs a tensor of at least 1 dimension");
  if (x.buf->dtype == DType::Bool) throw Error("cummax/cummin: not supported for bool tensors");
  int d = normalize_dim(dim, r, "scan");
  const auto perm = move_last(r, d);
  View xp = permute(x, perm);
  auto scan = [&](const View& v, int64_t kind) {
    View out = impl_->new_temp(v.shape(), v.buf->dtype, v.valid_shape(), "scan");
    impl_->emit_op(Opcode::TSCAN, {out, v, int_imm(kind)});
    return out;
  };
  View val = scan(xp, combine == Opcode::TMIN ? 5 : 4);
  View hit = binary(Opcode::TCMP_EQ, xp, val);
  if (is_float(x.buf->dtype)) hit = binary(Opcode::TOR, hit, binary(Opcode::TCMP_NE, xp, xp));
  View iota = impl_->new_temp(xp.shape(), DType::I64, xp.valid_shape(), "iota");
  impl_->emit_op(Opcode::TCI, {iota, int_imm(0)});  // the index along the last dim
  View idx = scan(select(hit, iota, int_imm(0)), 4);
  View at = permute(idx, inverse(perm));
  return {gather_elements(x, d, at), at};
}

View Builder::one_hot(const View& idx, int64_t num_classes) {
  if (is_float(idx.buf->dtype) || idx.buf->dtype == DType::Bool)
    throw Error("one_hot: needs an integer index tensor, got " + std::string(dtype_name(idx.buf->dtype)));
  if (num_classes < 1) throw Error("one_hot: num_classes must be >= 1, got " + std::to_string(num_classes));
  // A class outside [0, num_classes) is an error when the kernel runs, as in torch (not a zero row):
  // the classes pass through a bounds-checked gather from the class list itself, which yields them
  // unchanged.
  View classes = arange(int_imm(0), num_classes, int_imm(1), DType::I64);
  View col = unsqueeze(take(classes, 0, idx, false), idx.rank());  // (.., 1)
  View hit = binary(Opcode::TCMP_EQ, col, classes);
  return cast(hit, DType::I64);
}

View Builder::pad(const View& x, const std::vector<int64_t>& pads, Expr value) {
  int r = x.rank();
  if (pads.size() % 2 || int(pads.size()) > 2 * r)
    throw Error("pad: expected an even number of padding amounts, at most two per dimension (" +
                std::to_string(2 * r) + "), got " + std::to_string(pads.size()));
  auto shape = x.shape();
  auto os = shape;
  std::vector<Index> dst(static_cast<size_t>(r)), src(static_cast<size_t>(r));
  bool empty_source = false;
  for (size_t p = 0; p < pads.size() / 2; ++p) {
    size_t d = size_t(r) - 1 - p;
    int64_t before = pads[2 * p], after = pads[2 * p + 1], n = shape[d];
    os[d] = n + before + after;
    if (os[d] < 1)
      throw Error("pad: padding " + std::to_string(before) + ", " + std::to_string(after) +
                  " leaves dimension " + std::to_string(d) + " of size " + std::to_string(n) + " empty");
    int64_t s0 = std::max<int64_t>(0, -before), s1 = n - std::max<int64_t>(0, -after);
    if (s1 <= s0) {  // everything of x is cropped in this dimension: only the fill remains
      empty_source = true;
      continue;
    }
    src[d] = range_index(s0, s1);
    int64_t d0 = std::max<int64_t>(0, before);
    dst[d] = range_index(d0, d0 + (s1 - s0));
  }
  View out = full(os, x.buf->dtype, value);
  if (!empty_source) assign(slice(out, dst), slice(x, src));
  return out;
}

}  // namespace pypto::ir
