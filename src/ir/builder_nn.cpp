// Builder composites: operators decomposed into PTO instructions (softmax, norms, concat,
// reshape, conv2d). Each is a short sequence of the core builder calls; the fusion pass later
// merges the resulting loop nests.
#include <algorithm>
#include <numeric>

#include "ir/builder.h"
#include "ir/builder_impl.h"

namespace pypto::ir {

View Builder::softmax(const View& x, int dim) {
  View m = reduce(Opcode::TROWMAX, x, {dim}, true);
  View e = unary(Opcode::TEXP, binary(Opcode::TSUB, x, m));
  View s = reduce(Opcode::TROWSUM, e, {dim}, true);
  // One reciprocal per row and a multiply per element: a vector divide costs ~10x a multiply.
  return binary(Opcode::TMUL, e, unary(Opcode::TRECIP, s));
}

View Builder::log_softmax(const View& x, int dim) {
  View m = reduce(Opcode::TROWMAX, x, {dim}, true);
  View z = binary(Opcode::TSUB, x, m);
  View s = reduce(Opcode::TROWSUM, unary(Opcode::TEXP, z), {dim}, true);
  return binary(Opcode::TSUB, z, unary(Opcode::TLOG, s));
}

namespace {
std::vector<int> last_dims(int rank, int n, const char* what) {
  if (n < 1 || n > rank)
    throw Error(std::string(what) + ": normalized_shape has " + std::to_string(n) +
                " dimensions but the input has rank " + std::to_string(rank));
  std::vector<int> d;
  for (int i = rank - n; i < rank; ++i) d.push_back(i);
  return d;
}

void check_affine(const View* p, const std::vector<int64_t>& want, const char* what, const char* name) {
  if (p && p->shape() != want)
    throw Error(std::string(what) + ": " + name + " has shape " + shape_str(p->shape()) + ", expected " +
                shape_str(want));
}
}  // namespace

View Builder::layer_norm(const View& x, int nd, const View* weight, const View* bias, double eps) {
  auto dims = last_dims(x.rank(), nd, "layer_norm");
  auto shape = x.shape();
  std::vector<int64_t> norm_shape(shape.end() - nd, shape.end());
  check_affine(weight, norm_shape, "layer_norm", "weight");
  check_affine(bias, norm_shape, "layer_norm", "bias");
  View mu = mean(x, dims, true);
  View xc = binary(Opcode::TSUB, x, mu);
  View var = mean(binary(Opcode::TMUL, xc, xc), dims, true);
  View y = binary(Opcode::TMUL, xc, unary(Opcode::TRSQRT, binary(Opcode::TADD, var, float_imm(eps))));
  if (weight) y = binary(Opcode::TMUL, y, *weight);
  if (bias) y = binary(Opcode::TADD, y, *bias);
  return y;
}

View Builder::rms_norm(const View& x, int nd, const View* weight, double eps) {
  auto dims = last_dims(x.rank(), nd, "rms_norm");
  auto shape = x.shape();
  check_affine(weight, std::vector<int64_t>(shape.end() - nd, shape.end()), "rms_norm", "weight");
  View ms = mean(binary(Opcode::TMUL, x, x), dims, true);
  View y = binary(Opcode::TMUL, x, unary(Opcode::TRSQRT, binary(Opcode::TADD, ms, float_imm(eps))));
  if (weight) y = binary(Opcode::TMUL, y, *weight);
  return y;
}

View Builder::concat(const std::vector<View>& xs, int dim) {
  if (xs.empty()) throw Error("concat: no tensors given");
  int r = xs[0].rank();
  int d = normalize_dim(dim, r, "concat");
  auto shape = xs[0].shape();
  int64_t total = 0;
  DType t = xs[0].buf->dtype;
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
  View out = empty(shape, t);
  int64_t off = 0;
  for (auto& x : xs) {
    std::vector<Index> idx(r);
    idx[d].start = int_imm(off);
    idx[d].stop = int_imm(off + x.shape()[d]);
    assign(slice(out, idx), x);
    off += x.shape()[d];
  }
  return out;
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
    View out = empty(shape, v.buf->dtype, out_extents);
    View target = out;
    for (int i = int(shape.size()) - 1; i >= 0; --i)
      if (shape[i] == 1) target = squeeze(target, i);
    assign(target, cur);
    return out;
  }
  size_t pre = 0;
  while (pre < s1.size() && pre < d1.size() && s1[pre] == d1[pre]) ++pre;
  size_t suf = 0;
  while (suf < s1.size() - pre && suf < d1.size() - pre && s1[s1.size() - 1 - suf] == d1[d1.size() - 1 - suf])
    ++suf;
  size_t ns = s1.size() - pre - suf, nd = d1.size() - pre - suf;
  bool split = ns == 1 && nd == 2, merge = ns == 2 && nd == 1;
  if (!split && !merge)
    throw Error(
        "reshape from " + shape_str(src) + " to " + shape_str(shape) +
        " is not supported yet: split one dimension in two or merge two adjacent dimensions per reshape");
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

  std::vector<int64_t> lead(xs.begin(), xs.end() - 3);  // N or nothing
  View padded = x;
  if (pt || pb || pl || pr) {
    auto ps = lead;
    ps.insert(ps.end(), {C, Hp, Wp});
    padded = full(ps, x.buf->dtype, float_imm(0.0));
    std::vector<Index> inner(r);
    inner[r - 2].start = int_imm(pt);
    inner[r - 2].stop = int_imm(pt + H);
    inner[r - 1].start = int_imm(pl);
    inner[r - 1].stop = int_imm(pl + W);
    assign(slice(padded, inner), x);
  }
  auto os = lead;
  os.insert(os.end(), {O, Ho, Wo});
  // f64 operands give an f64 result; f32, f16 and bf16 accumulate in f32.
  DType acc_t = (x.buf->dtype == DType::F64 || w.buf->dtype == DType::F64) ? DType::F64 : DType::F32;
  View out = full(os, acc_t, float_imm(0.0, acc_t));
  // out[.., o, y, x] += sum_c w[o, c, dy, dx] * padded[.., c, y*s + dy*d, x*s + dx*d]: for each tap,
  // a matmul batched over the output rows: [.., Ho, O, C] @ [.., Ho, C, Wo] -> [.., Ho, O, Wo].
  std::vector<int> to_rows(r);  // (.., C, Ho, Wo) -> (.., Ho, C, Wo)
  std::iota(to_rows.begin(), to_rows.end(), 0);
  std::swap(to_rows[r - 3], to_rows[r - 2]);
  View out_rows = permute(out, to_rows);
  for (int64_t dy = 0; dy < kh; ++dy) {
    for (int64_t dx = 0; dx < kw; ++dx) {
      std::vector<Index> wi(4);
      wi[2].kind = wi[3].kind = Index::Int;
      wi[2].start = int_imm(dy);
      wi[3].start = int_imm(dx);
      View tap = slice(w, wi);  // (O, C)
      std::vector<Index> xi(r);
      xi[r - 2].start = int_imm(dy * dilation[0]);
      xi[r - 2].stop = int_imm(dy * dilation[0] + (Ho - 1) * stride[0] + 1);
      xi[r - 2].step = stride[0];
      xi[r - 1].start = int_imm(dx * dilation[1]);
      xi[r - 1].stop = int_imm(dx * dilation[1] + (Wo - 1) * stride[1] + 1);
      xi[r - 1].step = stride[1];
      View win = permute(slice(padded, xi), to_rows);  // (.., Ho, C, Wo)
      matmul_acc(out_rows, tap, win);
    }
  }
  if (bias) {
    std::vector<Index> bi{Index{}, Index{Index::NewAxis}, Index{Index::NewAxis}};
    update(Opcode::TADD, out, slice(*bias, bi));
  }
  return out;
}

}  // namespace pypto::ir
