// Builder composites: softmax, log_softmax, norms, concat, conv2d and clamp are checked here,
// their result's shape and dtype inferred, and emitted as one composite op each (ir/opcodes.h)
// that passes/lower_composites expands at the start of the pipeline. Reshape is built here as
// copies.
#include <algorithm>
#include <numeric>

#include "ir/builder.h"
#include "ir/builder_impl.h"

namespace pypto::ir {

namespace {
// The type a float computation on t happens in and returns: t itself when a float, else f32.
DType float_result(DType t) { return is_float(t) ? t : DType::F32; }

Expr dim_operand(int64_t d) { return int_imm(d); }
Operand optional_view(const View* v) { return v ? Operand(*v) : Operand(int_imm(0)); }
}  // namespace

View Builder::softmax(const View& x, int dim) {
  int d = normalize_dim(dim, x.rank(), "softmax");
  View out = impl_->new_temp(x.shape(), float_result(x.buf->dtype), x.valid_shape());
  impl_->emit_op(Opcode::SOFTMAX, {out, x, dim_operand(d)});
  return out;
}

View Builder::log_softmax(const View& x, int dim) {
  int d = normalize_dim(dim, x.rank(), "log_softmax");
  View out = impl_->new_temp(x.shape(), float_result(x.buf->dtype), x.valid_shape());
  impl_->emit_op(Opcode::LOG_SOFTMAX, {out, x, dim_operand(d)});
  return out;
}

namespace {
void check_norm_dims(int rank, int n, const char* what) {
  if (n < 1 || n > rank)
    throw Error(std::string(what) + ": normalized_shape has " + std::to_string(n) +
                " dimensions but the input has rank " + std::to_string(rank));
}

void check_affine(const View* p, const std::vector<int64_t>& want, const char* what, const char* name) {
  if (p && p->shape() != want)
    throw Error(std::string(what) + ": " + name + " has shape " + shape_str(p->shape()) + ", expected " +
                shape_str(want));
}
}  // namespace

View Builder::layer_norm(const View& x, int nd, const View* weight, const View* bias, double eps) {
  check_norm_dims(x.rank(), nd, "layer_norm");
  auto shape = x.shape();
  std::vector<int64_t> norm_shape(shape.end() - nd, shape.end());
  check_affine(weight, norm_shape, "layer_norm", "weight");
  check_affine(bias, norm_shape, "layer_norm", "bias");
  DType t = float_result(x.buf->dtype);
  if (weight) t = promote_types(t, weight->buf->dtype);
  if (bias) t = promote_types(t, bias->buf->dtype);
  View out = impl_->new_temp(shape, t, x.valid_shape());
  impl_->emit_op(Opcode::LAYER_NORM, {out, x, optional_view(weight), optional_view(bias), int_imm(nd),
                                      float_imm(eps, DType::F64)});
  return out;
}

View Builder::rms_norm(const View& x, int nd, const View* weight, double eps) {
  check_norm_dims(x.rank(), nd, "rms_norm");
  auto shape = x.shape();
  check_affine(weight, std::vector<int64_t>(shape.end() - nd, shape.end()), "rms_norm", "weight");
  DType t = float_result(x.buf->dtype);
  if (weight) t = promote_types(t, weight->buf->dtype);
  View out = impl_->new_temp(shape, t, x.valid_shape());
  impl_->emit_op(Opcode::RMS_NORM, {out, x, optional_view(weight), int_imm(nd), float_imm(eps, DType::F64)});
  return out;
}

View Builder::concat(const std::vector<View>& xs, int dim) {
  if (xs.empty()) throw Error("concat: no tensors given");
  int r = xs[0].rank();
  int d = normalize_dim(dim, r, "concat");
  auto shape = xs[0].shape();
  int64_t total = 0;
  for (auto& x : xs) {
    auto s = x.shape();
    if (int(s.size()) != r) throw Error("concat: all tensors must have the same rank");
    for (int i = 0; i < r; ++i)
      if (i != d && s[i] != shape[i])
        throw Error("concat: shapes " + shape_str(shape) + " and " + shape_str(s) +
                    " differ outside dimension " + std::to_string(dim));
    total += s[d];
  }
  shape[d] = total;
  // Along a dynamic dimension the result's extent is the sum of the parts' (its static size the
  // bound); other dynamic dimensions keep the first part's extents.
  std::vector<Expr> extents(shape.size());
  bool dynamic = false;
  const auto first_valid = xs[0].valid_shape();
  for (int i = 0; i < r; ++i) {
    bool dyn_i = false;
    for (auto& x : xs) dyn_i = dyn_i || x.shape()[size_t(i)] == kDynamicBound;
    if (!dyn_i) continue;
    dynamic = true;
    if (i != d) {
      extents[size_t(i)] = first_valid[size_t(i)];
      continue;
    }
    Expr sum = int_imm(0);
    for (auto& x : xs) sum = sum + x.valid_shape()[size_t(d)];
    extents[size_t(i)] = min(sum, int_imm(kDynamicBound));  // (within the bound a dim may hold)
  }
  if (dynamic)
    for (int i = 0; i < r; ++i)
      if (extents[size_t(i)]) shape[size_t(i)] = 1;  // empty() puts the bound there
  View out = dynamic ? empty(shape, xs[0].buf->dtype, extents) : empty(shape, xs[0].buf->dtype);
  std::vector<Operand> args{out, dim_operand(d)};
  for (auto& x : xs) args.push_back(x);
  impl_->emit_op(Opcode::CONCAT, std::move(args));
  return out;
}

View Builder::clamp(const View& x, const Operand* lo, const Operand* hi) {
  if (!lo && !hi) return x;
  if (!lo) return binary(Opcode::TMIN, x, *hi);
  if (!hi) return binary(Opcode::TMAX, x, *lo);
  std::vector<int64_t> shape = x.shape();
  std::vector<const View*> views{&x};
  DType t = x.buf->dtype;
  for (const Operand* o : {lo, hi}) {
    if (auto v = std::get_if<View>(o)) {
      shape = broadcast_shapes(shape, v->shape());
      views.push_back(v);
    }
    t = promote_types(t, operand_dtype(*o, x.buf->dtype));
  }
  View out = impl_->new_temp(shape, t, broadcast_valid(shape, views));
  impl_->emit_op(Opcode::CLAMP, {out, x, *lo, *hi});
  return out;
}

View Builder::hardtanh(const View& x, double lo, double hi) {
  DType t = x.buf->dtype;
  if (!is_float(t)) throw Error("hardtanh: x must be a float tensor, not " + std::string(dtype_name(t)));
  View out = impl_->new_temp(x.shape(), t, x.valid_shape());
  const DType s = t == DType::F64 ? DType::F64 : DType::F32;  // (as a clamp's scalar bounds)
  impl_->emit_op(Opcode::HARDTANH, {out, x, float_imm(lo, s), float_imm(hi, s)});
  return out;
}

// A reshape whose dims (size-1 dims dropped: s1 -> d1) fall into groups of equal products, each
// one dim kept, one dim split into several or several merged into one, as one copy nest: a loop
// over every outer factor of each group, each iteration copying the block the groups' innermost
// dims span ((3, 224, 224) -> (3, 14, 16, 14, 16): 196 copies of 3 x 16 x 16, where split by split
// it was two copies of the whole). False, leaving `out` unset, where a group regroups several dims
// into several ((6, 4) -> (4, 6)) or the shape has a dynamic dim.
bool Builder::reshape_by_groups(const View& v, const View& cur, const std::vector<int64_t>& s1,
                                const std::vector<int64_t>& d1, const std::vector<int64_t>& shape,
                                const std::vector<Expr>& out_extents, View& out) {
  struct Group {
    size_t s0, s1, d0, d1;  // the dims [s0, s1) of the source and [d0, d1) of the target
  };
  std::vector<Group> groups;
  size_t i = 0, j = 0;
  while (i < s1.size() && j < d1.size()) {
    Group g{i, i + 1, j, j + 1};
    int64_t ps = s1[i], pd = d1[j];
    while (ps != pd) {
      if (ps < pd && g.s1 < s1.size())
        ps *= s1[g.s1++];
      else if (pd < ps && g.d1 < d1.size())
        pd *= d1[g.d1++];
      else
        return false;
    }
    if (g.s1 - g.s0 > 1 && g.d1 - g.d0 > 1) return false;
    if (ps == kDynamicBound) return false;
    groups.push_back(g);
    i = g.s1;
    j = g.d1;
  }
  if (i != s1.size() || j != d1.size()) return false;
  out = empty(shape, v.buf->dtype, out_extents);
  View target = out;
  for (int k = int(shape.size()) - 1; k >= 0; --k)
    if (shape[size_t(k)] == 1) target = squeeze(target, k);
  std::vector<Index> si(s1.size()), di(d1.size());
  int loops = 0;
  for (const Group& g : groups) {
    // The side with several dims is indexed by the loop variables but its last dim; the single
    // dim of the other side takes the window they select.
    const bool split = g.s1 - g.s0 == 1;
    const std::vector<int64_t>& many = split ? d1 : s1;
    std::vector<Index>& many_ix = split ? di : si;
    Index& one_ix = split ? si[g.s0] : di[g.d0];
    const size_t m0 = split ? g.d0 : g.s0, m1 = split ? g.d1 : g.s1;
    if (m1 - m0 == 1) continue;  // a dim kept as it is
    int64_t stride = 1;          // of factor m0 in the single dim: the product of those after it
    for (size_t k = m0 + 1; k < m1; ++k) stride *= many[k];
    Expr offset = int_imm(0);
    for (size_t k = m0; k + 1 < m1; ++k) {  // outer factors outermost: the copies walk memory in order
      Expr a = begin_for("r", int_imm(0), int_imm(many[k]), int_imm(1));
      ++loops;
      many_ix[k].kind = Index::Int;
      many_ix[k].start = a;
      offset = offset + a * int_imm(stride);
      stride /= many[k + 1];
    }
    one_ix.start = offset;
    one_ix.stop = offset + int_imm(many[m1 - 1]);
  }
  assign(slice(target, di), slice(cur, si));
  for (int k = 0; k < loops; ++k) end_for();
  return true;
}

// A reshape that regroups only static dims in front of an unchanged suffix holding every dynamic
// dim ([B, H, R, S, D] -> [B, H*R, S, D] with S dynamic: Llama's repeat_kv): a loop over the
// target prefix's elements, each copying one suffix block from the source element of the same
// row-major position. False (out unset) where the shapes are not of that form. `shape` has its
// dynamic dims as kDynamicBound, `extents` their extents.
bool Builder::reshape_static_prefix(const View& v, std::vector<int64_t> shape,
                                    const std::vector<Expr>& extents, View& out) {
  const auto src = v.shape();
  const auto src_valid = v.valid_shape();
  auto first_dynamic = [](const std::vector<int64_t>& s) {
    return size_t(std::find(s.begin(), s.end(), kDynamicBound) - s.begin());
  };
  const size_t i0 = first_dynamic(src), j0 = first_dynamic(shape);
  if (i0 == src.size() || j0 == shape.size() || src.size() - i0 != shape.size() - j0) return false;
  for (size_t k = 0; i0 + k < src.size(); ++k) {
    const int64_t a = src[i0 + k], b = shape[j0 + k];
    if (a != b) return false;
    if (a == kDynamicBound &&
        !(j0 + k < extents.size() && extents[j0 + k] && expr_equal(extents[j0 + k], src_valid[i0 + k])))
      return false;
  }
  int64_t ps = 1, pd = 1;
  int infer = -1;
  for (size_t k = 0; k < i0; ++k) ps *= src[k];
  for (size_t k = 0; k < j0; ++k) {
    if (shape[k] == -1 && infer < 0) {
      infer = int(k);
      continue;
    }
    if (shape[k] < 0) return false;
    pd *= shape[k];
  }
  if (infer >= 0) {
    if (pd == 0 || ps % pd) return false;
    shape[size_t(infer)] = ps / pd;
    pd = ps;
  }
  if (ps != pd || (i0 == j0 && std::equal(src.begin(), src.begin() + std::ptrdiff_t(i0), shape.begin())))
    return false;
  std::vector<Expr> out_extents(shape.size());
  for (size_t k = 0; j0 + k < shape.size(); ++k)
    if (shape[j0 + k] == kDynamicBound) out_extents[j0 + k] = src_valid[i0 + k];
  out = empty(shape, v.buf->dtype, out_extents);
  std::vector<Index> di(shape.size()), si(src.size());
  Expr linear = int_imm(0);
  for (size_t k = 0; k < j0; ++k) {
    Expr a = begin_for("r", int_imm(0), int_imm(shape[k]), int_imm(1));
    di[k].kind = Index::Int;
    di[k].start = a;
    linear = linear * int_imm(shape[k]) + a;
  }
  int64_t stride = ps;
  for (size_t k = 0; k < i0; ++k) {
    stride /= src[k];
    si[k].kind = Index::Int;
    si[k].start = mod(div(linear, int_imm(stride)), int_imm(src[k]));
  }
  assign(slice(out, di), slice(v, si));
  for (size_t k = 0; k < j0; ++k) end_for();
  return true;
}

// Reshape by splitting one dimension into several or merging adjacent dimensions into one,
// each as a loop of strided copies; the common prefix and suffix of the shapes stay put.
// Dynamic dims (static size kDynamicBound) must stay in place with all dims before them: `extents`
// gives the result's dynamic dims (null where static), e.g. [S, H*D] -> [S, H, D].
View Builder::reshape(const View& v, std::vector<int64_t> shape, const std::vector<Expr>& extents) {
  auto src = v.shape();
  auto src_valid = v.valid_shape();
  size_t kept = 0;  // leading dims carried over unchanged, covering every dynamic dim
  for (size_t i = 0; i < src.size(); ++i)
    if (src[i] == kDynamicBound) kept = i + 1;
  for (size_t i = 0; i < shape.size(); ++i)
    if (i < extents.size() && extents[i]) {
      shape[i] = kDynamicBound;
      kept = std::max(kept, i + 1);
    }
  std::vector<Expr> out_extents;
  if (View out; kept > 0 && reshape_static_prefix(v, shape, extents, out)) return out;
  if (kept > 0) {
    for (size_t i = 0; i < kept; ++i) {
      bool same = i < src.size() && i < shape.size() && shape[i] == src[i] &&
                  (src[i] != kDynamicBound ||
                   (i < extents.size() && extents[i] && expr_equal(extents[i], src_valid[i])));
      if (!same)
        throw Error("reshape from " + shape_str(src) + " to " + shape_str(shape) +
                    ": a dynamic dimension must stay in place, with the dimensions before it unchanged");
      out_extents.push_back(src[i] == kDynamicBound ? src_valid[i] : nullptr);
    }
    out_extents.resize(shape.size());
  }
  int64_t n = 1, known = 1;
  for (size_t i = kept; i < src.size(); ++i) n *= src[i];
  int infer = -1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i < kept) continue;
    if (shape[i] == -1) {
      if (infer >= 0) throw Error("reshape: only one dimension may be -1");
      infer = int(i);
    } else {
      known *= shape[i];
    }
  }
  if (infer >= 0 && known > 0 && n % known == 0) shape[infer] = n / known;
  int64_t m = std::accumulate(shape.begin() + std::ptrdiff_t(std::min(kept, shape.size())), shape.end(),
                              int64_t(1), std::multiplies<int64_t>());
  if (m != n)
    throw Error("reshape: cannot reshape a tensor of shape " + shape_str(src) + " into " + shape_str(shape));
  // Drop size-1 dims from both sides, remembering where they go: size-1 dims are free.
  std::vector<int64_t> s1, d1;
  View cur = v;
  for (int i = int(src.size()) - 1; i >= 0; --i)
    if (src[i] == 1) cur = squeeze(cur, i);
  for (auto s : src)
    if (s != 1) s1.push_back(s);
  for (auto s : shape)
    if (s != 1) d1.push_back(s);
  if (s1 == d1) {
    if (shape == s1) return cur;  // only size-1 dims dropped: a view of the same elements
    View out = empty(shape, v.buf->dtype, out_extents);
    View target = out;
    for (int i = int(shape.size()) - 1; i >= 0; --i)
      if (shape[i] == 1) target = squeeze(target, i);
    assign(target, cur);
    return out;
  }
  if (View out; reshape_by_groups(v, cur, s1, d1, shape, out_extents, out)) return out;
  size_t pre = 0;
  while (pre < s1.size() && pre < d1.size() && s1[pre] == d1[pre]) ++pre;
  size_t suf = 0;
  while (suf < s1.size() - pre && suf < d1.size() - pre && s1[s1.size() - 1 - suf] == d1[d1.size() - 1 - suf])
    ++suf;
  size_t ns = s1.size() - pre - suf, nd = d1.size() - pre - suf;
  bool split = ns == 1 && nd == 2, merge = ns == 2 && nd == 1;
  if (!split && !merge) {
    // Any other regrouping is a chain of the two moves: merge the first two differing source
    // dims (s1[pre], s1[pre+1]) until one is left, then split the first target dim off it, each a
    // copy of its own (the fusion passes see through them).
    std::vector<size_t> nz_src, nz_dst;  // full indices of the non-1 dims
    for (size_t i = 0; i < src.size(); ++i)
      if (src[i] != 1) nz_src.push_back(i);
    for (size_t i = 0; i < shape.size(); ++i)
      if (shape[i] != 1) nz_dst.push_back(i);
    std::vector<int64_t> mid;
    size_t lo, hi;  // the full dims [lo, hi] of one side become one
    const std::vector<int64_t>& side = ns >= 2 ? src : shape;
    if (ns >= 2) {
      lo = nz_src[pre], hi = nz_src[pre + 1];
    } else {
      lo = nz_dst[pre + 1], hi = nz_dst[pre + nd - 1];
    }
    if (lo < kept)
      throw Error("reshape from " + shape_str(src) + " to " + shape_str(shape) + ": not supported");
    int64_t prod = 1;
    for (size_t i = lo; i <= hi; ++i) prod *= side[i];
    mid.assign(side.begin(), side.begin() + std::ptrdiff_t(lo));
    mid.push_back(prod);
    mid.insert(mid.end(), side.begin() + std::ptrdiff_t(hi) + 1, side.end());
    std::vector<Expr> ext(extents.begin(), extents.begin() + std::ptrdiff_t(std::min(kept, extents.size())));
    std::vector<Expr> ext_out(extents.begin(),
                              extents.begin() + std::ptrdiff_t(std::min(extents.size(), shape.size())));
    View step = reshape(v, mid, ext);
    return reshape(step, shape, ext_out);
  }
  View out = empty(shape, v.buf->dtype, out_extents);
  View target = out;
  for (int i = int(shape.size()) - 1; i >= 0; --i)
    if (shape[i] == 1) target = squeeze(target, i);
  // split: cur[.., a*B:(a+1)*B, ..] -> target[.., a, :, ..]; merge: the reverse.
  const View& wide = split ? cur : target;  // the side with one dimension of A*B
  const View& tall = split ? target : cur;  // the side with dimensions A, B
  int64_t A = split ? d1[pre] : s1[pre];
  int64_t B = split ? d1[pre + 1] : s1[pre + 1];
  Expr a = begin_for("r", int_imm(0), int_imm(A), int_imm(1));
  std::vector<Index> wi(pre + 1), ti(pre + 1);
  wi[pre].start = a * int_imm(B);
  wi[pre].stop = a * int_imm(B) + int_imm(B);
  ti[pre].kind = Index::Int;
  ti[pre].start = a;
  View w = slice(wide, wi), t = slice(tall, ti);
  if (split)
    assign(t, w);
  else
    assign(w, t);
  end_for();
  return out;
}

View Builder::conv2d(const View& x, const View& w, const View* bias, std::vector<int64_t> stride,
                     std::vector<int64_t> padding, std::vector<int64_t> dilation, bool same_padding) {
  int r = x.rank();
  if (r != 3 && r != 4) throw Error("conv2d: input must be CHW or NCHW, got shape " + shape_str(x.shape()));
  if (w.rank() != 4) throw Error("conv2d: weight must be OIHW, got shape " + shape_str(w.shape()));
  auto xs = x.shape(), ws = w.shape();
  int64_t C = xs[r - 3], H = xs[r - 2], W = xs[r - 1];
  int64_t O = ws[0], kh = ws[2], kw = ws[3];
  if (ws[1] != C)
    throw Error("conv2d: weight " + shape_str(ws) + " expects " + std::to_string(ws[1]) +
                " input channels, input " + shape_str(xs) + " has " + std::to_string(C));
  if (stride.size() != 2 || dilation.size() != 2) throw Error("conv2d: stride and dilation need two values");
  if (stride[0] < 1 || stride[1] < 1 || dilation[0] < 1 || dilation[1] < 1)
    throw Error("conv2d: stride and dilation must be >= 1");
  int64_t pt, pb, pl, pr;
  if (same_padding) {
    if (stride[0] != 1 || stride[1] != 1) throw Error("conv2d: padding='same' needs stride 1");
    int64_t th = dilation[0] * (kh - 1), tw = dilation[1] * (kw - 1);
    pt = th / 2, pb = th - pt, pl = tw / 2, pr = tw - pl;  // the extra row/column goes last (as torch)
  } else {
    if (padding.size() != 2 || padding[0] < 0 || padding[1] < 0)
      throw Error("conv2d: padding needs two values >= 0");
    pt = pb = padding[0];
    pl = pr = padding[1];
  }
  int64_t Hp = H + pt + pb, Wp = W + pl + pr;
  int64_t Ho = (Hp - dilation[0] * (kh - 1) - 1) / stride[0] + 1;
  int64_t Wo = (Wp - dilation[1] * (kw - 1) - 1) / stride[1] + 1;
  if (Ho < 1 || Wo < 1) throw Error("conv2d: the kernel is larger than the padded input");
  if (bias && bias->shape() != std::vector<int64_t>{O})
    throw Error("conv2d: bias must have shape (" + std::to_string(O) + ",), got " + shape_str(bias->shape()));

  auto os = std::vector<int64_t>(xs.begin(), xs.end() - 3);  // N or nothing
  os.insert(os.end(), {O, Ho, Wo});
  // f64 operands give an f64 result; f32, f16 and bf16 accumulate in f32.
  DType t = compute_dtype(promote_types(float_result(x.buf->dtype), float_result(w.buf->dtype)));
  View out = impl_->new_temp(os, t, {});
  impl_->emit_op(Opcode::CONV2D,
                 {out, x, w, optional_view(bias), int_imm(stride[0]), int_imm(stride[1]), int_imm(pt),
                  int_imm(pb), int_imm(pl), int_imm(pr), int_imm(dilation[0]), int_imm(dilation[1])});
  return out;
}

// The input tile of one TDWCONV: at most 48 KiB in f64 (the CPU backend's stack tiles).
static constexpr int64_t kDepthwiseTileElems = (48 << 10) / 8;

void Builder::dwconv_plane(const View& dst, const View& src, const View& w, const DwConv& k) {
  if (dst.rank() != 2 || src.rank() != 2 || w.rank() != 2) throw Error("TDWCONV: 2-d planes");
  impl_->emit_op(Opcode::TDWCONV, {dst, src, w, int_imm(k.sh), int_imm(k.sw), int_imm(k.dh), int_imm(k.dw),
                                   int_imm(k.pt), int_imm(k.pb), int_imm(k.pl), int_imm(k.pr)});
}

bool Builder::depthwise_fits(int64_t kh, int64_t dh, int64_t wp) {
  return kh >= 1 && dh >= 1 && wp >= 1 && ((kh - 1) * dh + 1) * wp <= kDepthwiseTileElems;
}

View Builder::depthwise_conv2d(const View& x, const View& w, std::vector<int64_t> stride,
                               std::vector<int64_t> padding, std::vector<int64_t> dilation) {
  const int r = x.rank();
  if (r != 3 && r != 4)
    throw Error("depthwise conv2d: input must be CHW or NCHW, got shape " + shape_str(x.shape()));
  const auto xs = x.shape(), ws = w.shape();
  const int64_t C = xs[size_t(r - 3)], H = xs[size_t(r - 2)], W = xs[size_t(r - 1)];
  if (w.rank() != 4 || ws[0] != C || ws[1] != 1)
    throw Error("depthwise conv2d: weight must be (" + std::to_string(C) + ", 1, kh, kw), got " +
                shape_str(ws));
  if (stride.size() != 2 || dilation.size() != 2 || padding.size() != 4 || stride[0] < 1 || stride[1] < 1 ||
      dilation[0] < 1 || dilation[1] < 1 || *std::min_element(padding.begin(), padding.end()) < 0)
    throw Error("depthwise conv2d: two strides and dilations >= 1, four paddings >= 0");
  for (int64_t e : {C, H, W, ws[2], ws[3]})
    if (e == kDynamicBound) throw Error("depthwise conv2d: the channels and planes need static shapes");
  DwConv k{stride[0], stride[1], dilation[0], dilation[1], padding[0], padding[1], padding[2], padding[3]};
  const int64_t kh = ws[2], kw = ws[3], Hp = H + k.pt + k.pb, Wp = W + k.pl + k.pr;
  const int64_t Ho = (Hp - k.dh * (kh - 1) - 1) / k.sh + 1, Wo = (Wp - k.dw * (kw - 1) - 1) / k.sw + 1;
  if (Ho < 1 || Wo < 1 || Hp < k.dh * (kh - 1) + 1 || Wp < k.dw * (kw - 1) + 1)
    throw Error("depthwise conv2d: the kernel is larger than the padded input");
  if (!depthwise_fits(kh, k.dh, Wp)) throw Error("depthwise conv2d: a row of windows does not fit a tile");
  // Output rows per TDWCONV: all of them, the padding in the instruction, where the padded plane
  // fits a tile; else the most that divide Ho and fit, over a padded copy of x.
  auto span = [&](int64_t rows) { return (rows - 1) * k.sh + (kh - 1) * k.dh + 1; };
  int64_t band = Ho;
  View src = x;
  DwConv kb = k;
  if (Hp * Wp > kDepthwiseTileElems) {
    for (int64_t b = Ho; b >= 1; --b)  // (1 always fits: depthwise_fits)
      if (Ho % b == 0 && span(b) * Wp <= kDepthwiseTileElems) {
        band = b;
        break;
      }
    std::vector<int64_t> ps(xs.begin(), xs.end() - 2);
    ps.insert(ps.end(), {Hp, Wp});
    std::vector<Expr> pv(ps.size());  // the run-time extent of a dynamic batch, none for static dims
    bool dynamic = false;
    for (int q = 0; q < r - 3; ++q)
      if (xs[size_t(q)] == kDynamicBound) pv[size_t(q)] = x.valid_shape()[size_t(q)], dynamic = true;
    src = full(ps, x.buf->dtype, int_imm(0), dynamic ? pv : std::vector<Expr>{});
    std::vector<Index> inner(static_cast<size_t>(r), Index{});
    inner[size_t(r - 2)] = Index{Index::Slice, int_imm(k.pt), int_imm(k.pt + H), 1};
    inner[size_t(r - 1)] = Index{Index::Slice, int_imm(k.pl), int_imm(k.pl + W), 1};
    assign(slice(src, inner), x);
    kb.pt = kb.pb = kb.pl = kb.pr = 0;
  }
  const int64_t in_rows = band == Ho ? H : span(band), in_cols = band == Ho ? W : Wp;
  std::vector<int64_t> os(xs.begin(), xs.end() - 3);
  os.insert(os.end(), {C, Ho, Wo});
  std::vector<Expr> valid;
  const auto xv = x.valid_shape();
  for (int q = 0; q < r - 3; ++q) valid.push_back(xv[size_t(q)]);
  for (int64_t e : {C, Ho, Wo}) valid.push_back(int_imm(e));
  const DType t = compute_dtype(promote_types(float_result(x.buf->dtype), float_result(w.buf->dtype)));
  View out = impl_->new_temp(os, t, valid, "dw");
  // Channels outermost (parallel: a batch of one has as many planes), then the batch, then bands.
  const Expr c = begin_for("c", int_imm(0), int_imm(C), int_imm(1), true);
  Expr n;
  if (r == 4) n = begin_for("n", int_imm(0), xv[0], int_imm(1));
  const Expr b = begin_for("band", int_imm(0), int_imm(Ho / band), int_imm(1));
  auto plane = [&](Expr rows_from, int64_t rows, int64_t cols) {
    std::vector<Index> at;
    if (r == 4) at.push_back(Index{Index::Int, n, nullptr, 1});
    at.push_back(Index{Index::Int, c, nullptr, 1});
    at.push_back(Index{Index::Slice, rows_from, rows_from + int_imm(rows), 1});
    at.push_back(Index{Index::Slice, int_imm(0), int_imm(cols), 1});
    return at;
  };
  const std::vector<Index> wat{Index{Index::Int, c, nullptr, 1}, Index{Index::Int, int_imm(0), nullptr, 1},
                               Index{Index::Slice, int_imm(0), int_imm(kh), 1},
                               Index{Index::Slice, int_imm(0), int_imm(kw), 1}};
  dwconv_plane(slice(out, plane(b * int_imm(band), band, Wo)),
               slice(src, plane(b * int_imm(band * k.sh), in_rows, in_cols)), slice(w, wat), kb);
  end_for();
  if (r == 4) end_for();
  end_for();
  return out;
}

}  // namespace pypto::ir
