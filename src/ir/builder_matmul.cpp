// Builder matrix products: matmul with NumPy's batching and 1-d rules (a batch of rows times one
// matrix folded into one whole-matrix product), matmul_as (a wider result dtype) and matmul_acc.
#include <algorithm>
#include <utility>

#include "ir/builder.h"
#include "ir/builder_impl.h"

namespace pypto::ir {

View Builder::matmul(const View& a0, const View& b0) {
  return matmul_as(a0, b0, promote_types(a0.buf->dtype, b0.buf->dtype));
}

// The product with a result of dtype `out` (TMATMUL's operands share a dtype; its result may be
// wider: int8 operands into int32, as scaled_mm needs).
View Builder::matmul_as(const View& a0, const View& b0, DType out_dtype) {
  if (a0.rank() == 0 || b0.rank() == 0) throw Error("matmul: operands must have at least one dimension");
  // x @ W for x of shape (..., M, K) and a 2-D W (nn.Linear on a batch of sequences; also a
  // permuted x): one (prod(...) * M, K) @ (K, N) product, which the backend runs as one
  // whole-matrix GEMM, instead of one small product per batch element. Static, fully valid
  // shapes only (a ragged tile of a user loop keeps the batched product), and big enough.
  if (a0.rank() >= 3 && b0.rank() == 2 && a0.buf->dtype != DType::Bool && b0.buf->dtype != DType::Bool) {
    auto sa = a0.shape(), sb = b0.shape();
    auto va = a0.valid_shape();
    bool plain = sa.back() == sb[0];
    int64_t rows = 1;
    for (size_t i = 0; plain && i < sa.size(); ++i) {
      auto v = as_int(va[i]);
      plain = sa[i] != kDynamicBound && v && *v == sa[i];
      if (i + 1 < sa.size()) rows *= sa[i];
    }
    plain = plain && sb[0] != kDynamicBound && sb[1] != kDynamicBound && rows >= 32 && sb[1] >= 32 &&
            sb[0] >= 32 && double(rows) * double(sb[1]) * double(sb[0]) >= double(1 << 21);
    if (plain) {
      std::vector<int64_t> shape(sa.begin(), sa.end() - 1);
      shape.push_back(sb[1]);
      if (rows == sa[sa.size() - 2]) {
        // Every batch dim is 1 (a batch of one sequence): the product writes the result's rows
        // through a view, and reads x through one; no copies either side.
        std::vector<Expr> valid;
        for (int64_t n : shape) valid.push_back(int_imm(n));
        View out = impl_->new_temp(shape, out_dtype, valid);
        View out2 = out, a2 = a0;
        for (int i = int(sa.size()) - 3; i >= 0; --i) {
          out2 = squeeze(out2, i);
          a2 = squeeze(a2, i);
        }
        impl_->emit_op(Opcode::TMATMUL, {out2, a2, b0});
        return out;
      }
      return reshape(matmul_as(reshape(a0, {rows, sa.back()}), b0, out_dtype), shape);
    }
  }
  if (a0.buf->dtype == DType::Bool || b0.buf->dtype == DType::Bool)
    throw Error("matmul: bool tensors are not supported");
  bool a1 = a0.rank() == 1, b1 = b0.rank() == 1;
  View a = a1 ? unsqueeze(a0, 0) : a0;
  View b = b1 ? unsqueeze(b0, 1) : b0;
  auto sa = a.shape(), sb = b.shape();
  auto ta = impl_->traced_shape(a), tb = impl_->traced_shape(b);  // dynamic dims at their traced extents
  if (sa.back() != sb[sb.size() - 2] || ta.back() != tb[tb.size() - 2])
    throw Error("matmul: inner dimensions do not match: " + shape_str(impl_->traced_shape(a0)) + " @ " +
                shape_str(impl_->traced_shape(b0)));
  std::vector<int64_t> ba(sa.begin(), sa.end() - 2), bb(sb.begin(), sb.end() - 2);
  std::vector<int64_t> batch;
  try {
    batch = broadcast_shapes(ba, bb);
  } catch (const Error&) {
    throw Error("matmul: batch dimensions of " + shape_str(a0.shape()) + " and " + shape_str(b0.shape()) +
                " cannot be broadcast");
  }
  auto shape = batch;
  shape.push_back(sa[sa.size() - 2]);
  shape.push_back(sb.back());
  auto va = a.valid_shape(), vb = b.valid_shape();
  std::vector<Expr> valid(shape.size());
  for (size_t i = 0; i < batch.size(); ++i) {
    Expr e;
    size_t ia = i + ba.size() - batch.size(), ib = i + bb.size() - batch.size();
    if (i + ba.size() >= batch.size() && ba[ia] == batch[i]) e = min_valid(e, va[ia]);
    if (i + bb.size() >= batch.size() && bb[ib] == batch[i]) e = min_valid(e, vb[ib]);
    valid[i] = e ? e : int_imm(batch[i]);
  }
  valid[batch.size()] = va[va.size() - 2];
  valid[batch.size() + 1] = vb.back();
  View out = impl_->new_temp(shape, out_dtype, valid);
  impl_->emit_op(Opcode::TMATMUL, {out, a, b});
  View res = out;
  if (b1) res = squeeze(res, -1);
  if (a1) res = squeeze(res, -2 + (b1 ? 1 : 0));
  return res;
}

void Builder::matmul_acc(const View& dst, const View& a, const View& b) {
  if (a.rank() < 2 || b.rank() < 2 || dst.rank() < 2)
    throw Error("matmul accumulate needs operands of rank >= 2");
  auto sa = a.shape(), sb = b.shape();
  auto ta = impl_->traced_shape(a), tb = impl_->traced_shape(b);
  if (sa.back() != sb[sb.size() - 2] || ta.back() != tb[tb.size() - 2])
    throw Error("matmul: inner dimensions do not match: " + shape_str(ta) + " @ " + shape_str(tb));
  std::vector<int64_t> batch = broadcast_shapes(std::vector<int64_t>(sa.begin(), sa.end() - 2),
                                                std::vector<int64_t>(sb.begin(), sb.end() - 2));
  batch.push_back(sa[sa.size() - 2]);
  batch.push_back(sb.back());
  auto sd = dst.shape();
  // PTO's valid-region rule: a static tile may accumulate a smaller (edge) product.
  bool ok = sd.size() == batch.size();
  for (size_t i = 0; ok && i < sd.size(); ++i)
    ok = batch[i] <= sd[i] && (batch[i] == sd[i] || i + 2 >= sd.size());
  if (!ok)
    throw Error("cannot accumulate a product of shape " + shape_str(batch) + " into a tensor of shape " +
                shape_str(sd));
  impl_->emit_op(Opcode::TMATMUL_ACC, {dst, impl_->unaliased(dst, a), impl_->unaliased(dst, b)});
}

}  // namespace pypto::ir
