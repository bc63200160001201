// The C++ builder: makes a tensor-level Program one statement at a time, the way a front end
// walks a kernel's source. It infers every result's static shape, dtype and valid extents, checks
// operands (broadcasting, matmul inner dimensions, ranks, dtypes) and throws pypto::ir::Error with
// a message naming the offending shapes. Each compute call appends instructions that write a new
// Temp buffer and returns a whole-buffer View of it. Composite operators (softmax, norms, concat,
// conv2d, clamp) are emitted as one composite op each (ir/opcodes.h, builder_nn.cpp), which
// passes/lower_composites expands into PTO instructions.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "ir/ir.h"

namespace pypto::ir {

// One entry of a subscript, after the front end has expanded `...`.
struct Index {
  enum Kind { Int, Slice, NewAxis } kind = Slice;
  Expr start;        // Int: the index; Slice: start (null = 0)
  Expr stop;         // Slice: stop (null = end); clamped to the dimension as in Python
  int64_t step = 1;  // Slice: static positive step
};

class Builder {
 public:
  explicit Builder(std::string name);

  // --- signature ---------------------------------------------------------------------------
  // symbols: per dim, "" for a static dim or the name of a dimension symbol (dims that share a
  // name share the symbol: the arguments must agree at run time). A dynamic dim's shape entry is
  // ignored: it becomes kDynamicBound (ir.h).
  View add_param(const std::string& name, DType dtype, std::vector<int64_t> shape,
                 const std::vector<std::string>& symbols = {});
  Expr add_scalar_param(const std::string& name, DType dtype);

  // --- structured control flow ----------------------------------------------------------------
  // Returns the induction variable; statements built until end_for() form the body.
  Expr begin_for(const std::string& hint, Expr lo, Expr hi, Expr step, bool parallel = false);
  void end_for();
  void begin_if(Expr cond);
  void begin_else();
  void end_if();
  // A labelled group: a public op call (pypto.hardswish, pypto.var, ...: the front end brackets
  // each) or a composite's derivative (passes/autodiff). When the statements built until the
  // matching end_group() hold two or more instructions, they become a `seq LABEL { ... }` (the
  // group's allocations and lets stay in front of it), so the IR says which op each instruction
  // came from, and fusion treats the group as one composite (passes/fuse.h; a composite op's name
  // as the label makes it that op's expansion). Groups nest; only the outermost is labelled.
  void begin_group(const std::string& label);
  void end_group();
  Expr let(const std::string& hint, Expr value);  // bind a scalar under a fresh name

  // --- creation (new Temp buffers in global scratch) ------------------------------------------
  // extents: per dim, null for a static dim or the extent of a dynamic one (an expression of
  // dimension symbols; its shape entry is ignored).
  View empty(std::vector<int64_t> shape, DType dtype, const std::vector<Expr>& extents = {});
  View full(std::vector<int64_t> shape, DType dtype, Expr value, const std::vector<Expr>& extents = {});
  // n static; or n the dynamic bound and `extent` the run-time length (flip along a dynamic
  // dimension).
  View arange(Expr start, int64_t n, Expr step, DType dtype, const Expr& extent = nullptr);

  // --- views (no data movement) --------------------------------------------------------------
  View slice(const View& v, const std::vector<Index>& idx);
  View permute(const View& v, std::vector<int> perm);
  View transpose(const View& v, int d0, int d1);  // negative dims allowed
  View unsqueeze(const View& v, int dim);
  View squeeze(const View& v, int dim);
  // -1 allowed; copies. extents: the result's dynamic dims (null where static), which must stay in
  // place with every dim before them unchanged.
  View reshape(const View& v, std::vector<int64_t> shape, const std::vector<Expr>& extents = {});
  View broadcast_to(const View& v, std::vector<int64_t> shape);  // a copy

  // --- compute (each returns a new Temp) ----------------------------------------------------
  View unary(Opcode op, const View& x);                        // TEXP, TRELU, ...
  View binary(Opcode op, const Operand& a, const Operand& b);  // TADD..., TCMP_*; NumPy broadcasting
  View select(const Operand& cond, const Operand& a, const Operand& b);
  View cast(const View& x, DType t);
  View copy(const View& x);
  // pypto.inplace: the next elementwise op (unary or binary) that reads x, with a result of x's
  // shape and dtype, writes its result into x's buffer instead of a new temporary. Returns x.
  View inplace(const View& x);
  // A copy of x that autodiff treats as a constant (torch's x.detach(), JAX's stop_gradient): no
  // gradient flows through it. The forward value is x's.
  View detach(const View& x);
  // Reduce over `dims` (negative allowed; empty = all) with TROWSUM/TROWMAX/TROWMIN semantics.
  View reduce(Opcode row_op, const View& x, std::vector<int> dims, bool keepdim);
  View mean(const View& x, std::vector<int> dims, bool keepdim);
  View matmul(const View& a, const View& b);                // 1-d and batched operands as numpy.matmul
  View matmul_as(const View& a, const View& b, DType out);  // matmul into an `out` result (int8 -> int32)
  void matmul_acc(const View& dst, const View& a, const View& b);  // dst += a @ b
  View softmax(const View& x, int dim);
  View log_softmax(const View& x, int dim);
  View layer_norm(const View& x, int normalized_dims, const View* weight, const View* bias, double eps);
  View rms_norm(const View& x, int normalized_dims, const View* weight, double eps);
  View concat(const std::vector<View>& xs, int dim);
  // min(max(x, lo), hi); an absent bound is not applied (both absent: x itself).
  View clamp(const View& x, const Operand* lo, const Operand* hi);
  // min(max(x, lo), hi) with no gradient at the bounds (torch's hardtanh, relu6); a float x.
  View hardtanh(const View& x, double lo, double hi);
  // Composites of builder_ops.cpp (masks, statistics, selection by value, layout).
  View tril(const View& x, int64_t k);  // keep x[.., i, j] where j - i <= k, else 0
  View triu(const View& x, int64_t k);  // keep x[.., i, j] where j - i >= k, else 0
  View variance(const View& x, std::vector<int> dims, double correction, bool keepdim);  // empty dims = all
  View logsumexp(const View& x, std::vector<int> dims, bool keepdim);
  View any(const View& x, std::vector<int> dims, bool keepdim);  // bool result
  View all(const View& x, std::vector<int> dims, bool keepdim);
  View argmax(const View& x, int dim, bool keepdim);  // i64; first maximum; a NaN counts as the maximum
  View argmin(const View& x, int dim, bool keepdim);
  View stack(const std::vector<View>& xs, int dim);
  View roll(const View& x, int64_t shift, int dim);
  View repeat_interleave(const View& x, int64_t repeats, int dim);
  View one_hot(const View& idx, int64_t num_classes);  // i64, a new last dimension
  // Inclusive scans along dim (cumsum: TADD, cumprod: TMUL; integers and bool accumulate in i64).
  View scan(Opcode combine, const View& x, int dim);
  // TSCAN along dim: inclusive running sum (or product), from the end with `reverse`.
  View row_scan(const View& x, int dim, bool product, bool reverse);
  // cummax (TMAX) / cummin (TMIN) along dim: {values, i64 indices}; ties and NaN take the later index.
  std::pair<View, View> scan_extreme(Opcode combine, const View& x, int dim);
  // Constant padding; pads: (before, after) per dimension from the last one backwards, as
  // torch.nn.functional.pad; negative amounts crop.
  View pad(const View& x, const std::vector<int64_t>& pads, Expr value);
  // Indexing by tensors (builder_index.cpp). Indices are integer tensors checked when the kernel
  // runs: an index out of range is an error on every backend, never a wild access.
  // Row gather along the second-last dimension (rank 1: the elements): out[.., r, c] = src[.., idx[r], c].
  View gather_rows(const View& src, const View& idx);
  // dst[.., idx[r], c] = src[.., r, c] (accumulate: +=), in order of r.
  void scatter_rows(const View& dst, const View& src, const View& idx, bool accumulate);
  // x indexed along `dim` by idx (any rank): the result's dim is replaced by idx's shape
  // (index_select, embedding, x[idx], x[:, idx]). wrap_negative: -1 is the last (Python indexing).
  View take(const View& x, int dim, const View& idx, bool wrap_negative);
  // x[.., idx, ..] = value (accumulate: +=, index_add / index_put with accumulate) along dim.
  void put(const View& x, int dim, const View& idx, const Operand& value, bool accumulate,
           bool wrap_negative);
  // torch.gather / torch.scatter(_add): elementwise along dim, index of the output's shape.
  View gather_elements(const View& x, int dim, const View& idx);
  View scatter_elements(const View& x, int dim, const View& idx, const Operand& src, bool accumulate);
  View flip(const View& x, const std::vector<int>& dims);
  // Sorting along dim (stable; NaN last ascending, first descending, as torch): the i64 indices
  // (argsort), the values and indices (sort), or the first k of a descending/ascending sort (topk).
  View argsort(const View& x, int dim, bool descending);
  View sort_order(const View& x, int dim, bool descending, int64_t k);
  std::pair<View, View> sort(const View& x, int dim, bool descending);
  std::pair<View, View> topk(const View& x, int64_t k, int dim, bool largest);
  // NCHW or CHW input, OIHW weight. padding: {ph, pw}; same_padding computes it for stride 1.
  View conv2d(const View& x, const View& w, const View* bias, std::vector<int64_t> stride,
              std::vector<int64_t> padding, std::vector<int64_t> dilation, bool same_padding);
  // A depthwise convolution (one filter per channel) of an NCHW or CHW input by a (C, 1, kh, kw)
  // weight, padded {top, bottom, left, right} with zeros: a TDWCONV per plane (the padding its
  // operands) where a padded plane fits a tile, else per band of output rows of a padded copy.
  // Channels and planes of static shape; the batch may be dynamic. Needs depthwise_fits.
  View depthwise_conv2d(const View& x, const View& w, std::vector<int64_t> stride,
                        std::vector<int64_t> padding, std::vector<int64_t> dilation);
  // TDWCONV's geometry: strides, dilations, zero padding top / bottom / left / right.
  struct DwConv {
    int64_t sh = 1, sw = 1, dh = 1, dw = 1, pt = 0, pb = 0, pl = 0, pr = 0;
  };
  // dst = TDWCONV(src, w) on 2-d planes: dst[i][j] = sum w[a][b] xp[i*sh + a*dh][j*sw + b*dw], xp
  // being src with the padding.
  void dwconv_plane(const View& dst, const View& src, const View& w, const DwConv& k);
  // Whether one output row's input rows (span (kh-1)*dh + 1, padded width wp) fit a TDWCONV tile.
  static bool depthwise_fits(int64_t kh, int64_t dh, int64_t wp);

  // --- stores ---------------------------------------------------------------------------------
  void assign(const View& dst, const Operand& src);             // dst[...] = src
  void update(Opcode op, const View& dst, const Operand& src);  // dst op= src (in place)

  // Finish: the Views returned by the kernel. A returned Temp that is whole and allocated at the
  // top level becomes an Output param; anything else is copied into a fresh Output.
  Program finish(const std::vector<View>& outputs);

  // --- for program transformations (passes/autodiff, passes/lower_composites) -----------------
  // A builder that adds statements to `p`: the names it makes avoid every name `p` uses, and
  // take_body() hands over (and clears) what it has emitted so far at the top level.
  static Builder extending(const Program& p);
  std::vector<Stmt> take_body();
  std::string fresh_name(const std::string& hint);  // a name not yet used in this program
  void emit(Stmt s);                                // append an already-built statement
  // Source location of the statements built from now on (the front end sets the kernel's line);
  // `location(s)` finds it again for a statement of the finished program ("" when unknown).
  void set_location(std::string where);
  std::string location(const StmtNode* s) const;
  bool is_detached(const Buffer* b) const;  // made by detach(): autodiff gives it no adjoint

  // Shape helpers the front end uses for error messages and folding.
  static std::vector<int64_t> broadcast_shapes(const std::vector<int64_t>& a, const std::vector<int64_t>& b);

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
  // reshape's one-nest form for splits and merges of independent dims (builder_nn.cpp).
  bool reshape_static_prefix(const View& v, std::vector<int64_t> shape, const std::vector<Expr>& extents,
                             View& out);
  bool reshape_by_groups(const View& v, const View& cur, const std::vector<int64_t>& s1,
                         const std::vector<int64_t>& d1, const std::vector<int64_t>& shape,
                         const std::vector<Expr>& out_extents, View& out);
  // argmax / argmin: TROWARGMAX / TROWARGMIN along `dim` (builder_ops.cpp).
  View arg_extreme(Opcode arg_op, const View& x, int dim, bool keepdim, const char* what);
};

}  // namespace pypto::ir
