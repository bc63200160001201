// Composite lowering pass (see lower_composites.h): the default expansion of each composite op.
#include "passes/lower_composites.h"

#include <algorithm>
#include <cctype>
#include <numeric>

#include "ir/mutator.h"

namespace pypto::passes {
using namespace ir;

namespace {

const View& view_arg(const Op& op, size_t i) { return std::get<View>(op.args[i]); }
const View* optional_view_arg(const Op& op, size_t i) { return std::get_if<View>(&op.args[i]); }
int64_t int_arg(const Op& op, size_t i) {
  auto v = as_int(std::get<Expr>(op.args[i]));
  if (!v)
    throw Error(std::string(opcode_name(op.code)) + ": operand " + std::to_string(i) +
                " must be an integer constant");
  return *v;
}
double float_arg(const Op& op, size_t i) { return *as_float(std::get<Expr>(op.args[i])); }
void emit(Builder& b, Opcode code, std::vector<Operand> args) { b.emit(op_stmt(Op{code, std::move(args)})); }

void softmax(Builder& b, const Op& op) {
  const View &dst = view_arg(op, 0), &x = view_arg(op, 1);
  int dim = int(int_arg(op, 2));
  View m = b.reduce(Opcode::TROWMAX, x, {dim}, true);
  View e = b.unary(Opcode::TEXP, b.binary(Opcode::TSUB, x, m));
  View s = b.reduce(Opcode::TROWSUM, e, {dim}, true);
  // One reciprocal per row and a multiply per element: a vector divide costs ~10x a multiply.
  emit(b, Opcode::TMUL, {dst, e, b.unary(Opcode::TRECIP, s)});
}

void log_softmax(Builder& b, const Op& op) {
  const View &dst = view_arg(op, 0), &x = view_arg(op, 1);
  int dim = int(int_arg(op, 2));
  View m = b.reduce(Opcode::TROWMAX, x, {dim}, true);
  View z = b.binary(Opcode::TSUB, x, m);
  View s = b.reduce(Opcode::TROWSUM, b.unary(Opcode::TEXP, z), {dim}, true);
  emit(b, Opcode::TSUB, {dst, z, b.unary(Opcode::TLOG, s)});
}

std::vector<int> last_dims(int rank, int64_t n) {
  std::vector<int> d(static_cast<size_t>(n));
  std::iota(d.begin(), d.end(), rank - int(n));
  return d;
}

// y * weight + bias (either absent), the last step writing dst.
void affine(Builder& b, const View& dst, const View& y, const View* weight, const View* bias) {
  if (!bias) return emit(b, Opcode::TMUL, {dst, y, *weight});
  emit(b, Opcode::TADD, {dst, weight ? b.binary(Opcode::TMUL, y, *weight) : y, *bias});
}

// x * rsqrt(ms + eps), then the affine part, the last step writing dst.
void normalize(Builder& b, const View& dst, const View& x, const View& ms, double eps, const View* weight,
               const View* bias) {
  // eps in the statistics' own type: a float64 norm keeps all of it (an f32 immediate would round it)
  const DType t = ms.buf->dtype == DType::F64 ? DType::F64 : DType::F32;
  View r = b.unary(Opcode::TRSQRT, b.binary(Opcode::TADD, ms, float_imm(eps, t)));
  if (!weight && !bias) return emit(b, Opcode::TMUL, {dst, x, r});
  affine(b, dst, b.binary(Opcode::TMUL, x, r), weight, bias);
}

void layer_norm(Builder& b, const Op& op) {
  const View &dst = view_arg(op, 0), &x = view_arg(op, 1);
  auto dims = last_dims(x.rank(), int_arg(op, 4));
  View xc = centred(b, x, dims);
  View var = b.mean(b.binary(Opcode::TMUL, xc, xc), dims, true);
  normalize(b, dst, xc, var, float_arg(op, 5), optional_view_arg(op, 2), optional_view_arg(op, 3));
}

void rms_norm(Builder& b, const Op& op) {
  const View &dst = view_arg(op, 0), &x = view_arg(op, 1);
  View ms = b.mean(b.binary(Opcode::TMUL, x, x), last_dims(x.rank(), int_arg(op, 3)), true);
  normalize(b, dst, x, ms, float_arg(op, 4), optional_view_arg(op, 2), nullptr);
}

void concat(Builder& b, const Op& op) {
  const View& dst = view_arg(op, 0);
  int d = int(int_arg(op, 1));
  Expr off = int_imm(0);  // each part at the sum of the extents before it (dynamic ones too)
  for (size_t i = 2; i < op.args.size(); ++i) {
    const View& x = view_arg(op, i);
    const Expr len = x.valid_shape()[size_t(d)];
    std::vector<Index> idx(size_t(dst.rank()));
    idx[size_t(d)].start = off;
    idx[size_t(d)].stop = off + len;
    b.assign(b.slice(dst, idx), x);
    off = off + len;
  }
}

void conv2d_taps(Builder& b, const View& out, const View& x, const View& w, int64_t sh, int64_t sw,
                 int64_t pt, int64_t pb, int64_t pl, int64_t pr, int64_t dh, int64_t dw, int64_t C, int64_t H,
                 int64_t W, int64_t kh, int64_t kw, int64_t Ho, int64_t Wo);

// A slice of v's dimension d: [start, start + len).
View window(Builder& b, const View& v, int d, Expr start, int64_t len) {
  std::vector<Index> idx(size_t(v.rank()));
  idx[size_t(d)].start = start;
  idx[size_t(d)].stop = start + int_imm(len);
  return b.slice(v, idx);
}

// The products of an implicit GEMM convolution and the copy of their wide rows into out. flat:
// [.., rows, L], the input's rows; tap(dy, dx) = (first row, shift): the tap's C rows of flat are
// first, first + row_step, ..., its window starts at column shift (output pixel y*Wp + x is column
// y*Wp + x of the window); wide rows of Wp columns, the first Wo of each kept. One image per
// iteration of a loop over the batch (the batch dims flattened).
void implicit_gemm_products(Builder& b, const View& out, const View& w, const View& flat, int64_t Wp,
                            int64_t row_step,
                            const std::function<std::pair<int64_t, int64_t>(int64_t, int64_t)>& tap) {
  const int r = out.rank();
  auto ws = w.shape(), os = out.shape(), fs = flat.shape();
  const int64_t O = ws[0], C = ws[1], kh = ws[2], kw = ws[3], Ho = os[size_t(r - 2)], Wo = os[size_t(r - 1)];
  const int64_t N = Ho * Wp;
  std::vector<int64_t> batch(fs.begin(), fs.end() - 2), wides = batch;
  wides.insert(wides.end(), {O, N});
  View wide = b.empty(wides, DType::F32);
  auto products = [&](const View& dst, const View& src) {  // dst (O x N) = sum over taps, src: rows x L
    for (int64_t dy = 0; dy < kh; ++dy)
      for (int64_t dx = 0; dx < kw; ++dx) {
        std::vector<Index> wi(4);
        wi[2].kind = wi[3].kind = Index::Int;
        wi[2].start = int_imm(dy);
        wi[3].start = int_imm(dx);
        const auto [first, shift] = tap(dy, dx);
        std::vector<Index> rows(2);
        rows[0].start = int_imm(first);
        rows[0].stop = int_imm(first + (C - 1) * row_step + 1);
        rows[0].step = row_step;
        View shifted = window(b, b.slice(src, rows), 1, int_imm(shift), N);
        emit(b, dy == 0 && dx == 0 ? Opcode::TMATMUL : Opcode::TMATMUL_ACC, {dst, b.slice(w, wi), shifted});
      }
  };
  // The image's products, then its output rows copied out of the wide result (wide, out: views of
  // one image).
  auto image = [&](const std::vector<Index>& at) {
    const View wide_image = b.slice(wide, at);
    products(wide_image, b.slice(flat, at));
    std::vector<Index> oi = at;
    oi.insert(oi.end() - 2, Index{});  // out's image rows and columns: [.., O, Ho, Wo]
    const View out_image = b.slice(out, oi);
    Expr y = b.begin_for("y", int_imm(0), int_imm(Ho), int_imm(1));
    std::vector<Index> row(3);
    row[1].kind = Index::Int;
    row[1].start = y;
    b.assign(b.slice(out_image, row), window(b, wide_image, 1, y * int_imm(Wp), Wo));
    b.end_for();
  };
  int64_t images = 1;
  for (int64_t n : batch) images *= n;
  if (images == 1) {  // no loop: the products then split themselves across the threads
    std::vector<Index> first(batch.size() + 2);
    for (size_t d = 0; d < batch.size(); ++d) {
      first[d].kind = Index::Int;
      first[d].start = int_imm(0);
    }
    image(first);
  } else {
    // One image per iteration (the batch dims flattened into one loop).
    Expr i = b.begin_for("n", int_imm(0), int_imm(images), int_imm(1));
    std::vector<Index> bi(batch.size() + 2);
    Expr rest = i;
    for (size_t d = batch.size(); d-- > 0;) {
      bi[d].kind = Index::Int;
      bi[d].start = d == 0 ? rest : mod(rest, int_imm(batch[d]));
      rest = div(rest, int_imm(batch[d]));
    }
    image(bi);
    b.end_for();
  }
}

// Stride-1 f32 convolution as an implicit GEMM. The input is copied into one zero-padded row of
// length L per channel, `flat`: image row y at g + (y + pt)*Wp, Wp = W + g, each row followed by g
// zeros that serve as its right padding and the next row's left padding (g = max(pl, pr)). In that
// layout the tap (dy, dx) of output pixel n = y*Wp + x reads flat[c, n + g + dy*dh*Wp + dx*dw - pl],
// so each tap is a plain matrix product w[:, :, dy, dx] (O x C) @ flat[:, shifted window]
// (C x Ho*Wp) into a "wide" output of Wp columns per row (the last Wp - Wo of each are discarded).
// The kh*kw products into one destination are consecutive, so the CPU backend runs them as one GEMM
// over K = C*kh*kw (a sum of MMATMULs, include/pto/cpu/matmul.hpp) reading B in place, and folds
// the copy of an image's wide rows into out into that GEMM's stores (a wrapped destination,
// backends/cpu/matmul_runs.h), so the wide result is never written.
void conv2d_implicit_gemm(Builder& b, const View& out, const View& x, const View& w, int64_t pt, int64_t pb,
                          int64_t pl, int64_t pr, int64_t dh, int64_t dw) {
  const int r = x.rank();
  auto xs = x.shape(), ws = w.shape();
  const int64_t C = xs[size_t(r - 3)], H = xs[size_t(r - 2)], W = xs[size_t(r - 1)], kw = ws[3];
  // The gap also keeps an output row (Wo) within a wide row (Wp): Wo = W + pl + pr - (kw-1)*dw.
  const int64_t g = std::max({pl, pr, pl + pr - (kw - 1) * dw});
  const int64_t Wp = W + g, L = g + (H + pt + pb) * Wp + (kw - 1) * dw - pl;
  std::vector<int64_t> fs(xs.begin(), xs.end() - 3);
  fs.insert(fs.end(), {C, L});
  View flat = b.empty(fs, DType::F32);
  {
    // Channel by channel (a parallel loop): its row zeroed, then its image rows copied in, while
    // the row is in L1 (one pass over flat: a whole-buffer fill then the copies cost ~3% more).
    Expr c = b.begin_for("c", int_imm(0), int_imm(C), int_imm(1));
    std::vector<Index> ci(fs.size());
    ci[fs.size() - 2].kind = Index::Int;
    ci[fs.size() - 2].start = c;
    const View flat_c = b.slice(flat, ci);  // [.., L]
    b.assign(flat_c, float_imm(0.0));
    Expr y = b.begin_for("y", int_imm(0), int_imm(H), int_imm(1));
    std::vector<Index> xi(static_cast<size_t>(r));
    xi[size_t(r - 3)].kind = Index::Int;
    xi[size_t(r - 3)].start = c;
    xi[size_t(r - 2)].kind = Index::Int;
    xi[size_t(r - 2)].start = y;
    b.assign(window(b, flat_c, r - 3, (y + int_imm(pt)) * int_imm(Wp) + int_imm(g), W), b.slice(x, xi));
    b.end_for();
    b.end_for();
  }
  implicit_gemm_products(b, out, w, flat, Wp, 1, [&](int64_t dy, int64_t dx) {
    return std::make_pair(int64_t(0), g + dy * dh * Wp + dx * dw - pl);
  });
}

// A strided f32 convolution (dilation 1) as stride-1 ones over its input's phases: with dy = sh*u
// + ra and dx = sw*v + rb, the tap (dy, dx) of output pixel (y, x) reads padded[c, sh*(y + u) + ra,
// sw*(x + v) + rb], pixel (y + u, x + v) of the phase image xq[c, ra, rb][i, j] = padded[c, sh*i +
// ra, sw*j + rb] (Hq x Wq, its padding included). The phase images go into flat's rows, image row i
// at i*Wq, so each tap is a plain matrix product of w[:, :, dy, dx] and its phase's rows of flat,
// shifted by u*Wq + v: the implicit GEMM (implicit_gemm_products) of the kh*kw taps, K = C*kh*kw
// (per-tap batched matmuls took a 7 x 7 stride-2 first layer 100x torch's time).
void conv2d_phases(Builder& b, const View& out, const View& x, const View& w, int64_t sh, int64_t sw,
                   int64_t pt, int64_t pl) {
  const int r = x.rank();
  auto xs = x.shape(), ws = w.shape(), os = out.shape();
  const int64_t C = xs[size_t(r - 3)], H = xs[size_t(r - 2)], W = xs[size_t(r - 1)];
  const int64_t kh = ws[2], kw = ws[3], Ho = os[size_t(r - 2)], Wo = os[size_t(r - 1)];
  // Row phases ra < na, column phases rb < nb; flat's row (c*na + ra)*nb + rb holds xq[c, ra, rb].
  const int64_t na = std::min(sh, kh), nb = std::min(sw, kw), KH = (kh + sh - 1) / sh,
                KW = (kw + sw - 1) / sw;
  const int64_t Hq = Ho + KH - 1, Wq = Wo + KW - 1, phases = na * nb, L = Hq * Wq + KW - 1;
  std::vector<int64_t> fs(xs.begin(), xs.end() - 3);
  fs.insert(fs.end(), {C * phases, L});
  View flat = b.full(fs, DType::F32, float_imm(0.0));
  auto slice = [](int64_t start, int64_t stop, int64_t step) {
    Index s;
    s.start = int_imm(start);
    s.stop = int_imm(stop);
    s.step = step;
    return s;
  };
  for (int64_t ra = 0; ra < na; ++ra)
    for (int64_t rb = 0; rb < nb; ++rb) {
      // xq's rows i whose padded row sh*i + ra is one of x's (sh*i + ra - pt in [0, H)), columns alike.
      const int64_t i0 = std::max<int64_t>(0, (pt - ra + sh - 1) / sh);
      const int64_t i1 = H - 1 + pt - ra < 0 ? 0 : std::min(Hq, (H - 1 + pt - ra) / sh + 1);
      const int64_t j0 = std::max<int64_t>(0, (pl - rb + sw - 1) / sw);
      const int64_t j1 = W - 1 + pl - rb < 0 ? 0 : std::min(Wq, (W - 1 + pl - rb) / sw + 1);
      if (i0 >= i1 || j0 >= j1) continue;
      const int64_t phase = ra * nb + rb, x0 = sw * j0 + rb - pl;
      Expr i = b.begin_for("i", int_imm(i0), int_imm(i1), int_imm(1));
      std::vector<Index> fi(fs.size()), xi(static_cast<size_t>(r));
      fi[fs.size() - 2] = slice(phase, C * phases, phases);
      xi[size_t(r - 2)].kind = Index::Int;
      xi[size_t(r - 2)].start = (i - int_imm(i0)) * int_imm(sh) + int_imm(sh * i0 + ra - pt);
      xi[size_t(r - 1)] = slice(x0, x0 + sw * (j1 - j0 - 1) + 1, sw);
      b.assign(window(b, b.slice(flat, fi), r - 3 + 1, i * int_imm(Wq) + int_imm(j0), j1 - j0),
               b.slice(x, xi));
      b.end_for();
    }
  implicit_gemm_products(b, out, w, flat, Wq, phases, [&](int64_t dy, int64_t dx) {
    return std::make_pair((dy % sh) * nb + dx % sw, (dy / sh) * Wq + dx / sw);
  });
}

// out[.., o, y, x] = sum_c,dy,dx w[o, c, dy, dx] * padded[.., c, y*s + dy*d, x*s + dx*d]: f32
// convolutions are an implicit GEMM (above; strided ones over their input's phases, dilation 1);
// the rest, for each tap, a matmul batched over the output rows: [.., Ho, O, C] @ [.., Ho, C, Wo] -> [.., Ho,
// O, Wo].
void conv2d(Builder& b, const Op& op, bool implicit_gemm) {
  const View &out = view_arg(op, 0), &x = view_arg(op, 1), &w = view_arg(op, 2);
  const View* bias = optional_view_arg(op, 3);
  int64_t sh = int_arg(op, 4), sw = int_arg(op, 5), pt = int_arg(op, 6), pb = int_arg(op, 7),
          pl = int_arg(op, 8), pr = int_arg(op, 9), dh = int_arg(op, 10), dw = int_arg(op, 11);
  int r = x.rank();
  auto xs = x.shape(), ws = w.shape(), os = out.shape();
  int64_t C = xs[size_t(r - 3)], H = xs[size_t(r - 2)], W = xs[size_t(r - 1)];
  int64_t kh = ws[2], kw = ws[3], Ho = os[size_t(r - 2)], Wo = os[size_t(r - 1)];
  const bool f32 = x.buf->dtype == DType::F32 && w.buf->dtype == DType::F32 && out.buf->dtype == DType::F32;
  if (implicit_gemm && sh == 1 && sw == 1 && f32) {
    conv2d_implicit_gemm(b, out, x, w, pt, pb, pl, pr, dh, dw);
  } else if (implicit_gemm && f32 && dh == 1 && dw == 1) {
    conv2d_phases(b, out, x, w, sh, sw, pt, pl);
  } else {
    conv2d_taps(b, out, x, w, sh, sw, pt, pb, pl, pr, dh, dw, C, H, W, kh, kw, Ho, Wo);
  }
  if (bias) {
    std::vector<Index> bi{Index{}, Index{Index::NewAxis}, Index{Index::NewAxis}};
    b.update(Opcode::TADD, out, b.slice(*bias, bi));
  }
}

void conv2d_taps(Builder& b, const View& out, const View& x, const View& w, int64_t sh, int64_t sw,
                 int64_t pt, int64_t pb, int64_t pl, int64_t pr, int64_t dh, int64_t dw, int64_t C, int64_t H,
                 int64_t W, int64_t kh, int64_t kw, int64_t Ho, int64_t Wo) {
  const int r = x.rank();
  auto xs = x.shape();
  View padded = x;
  if (pt || pb || pl || pr) {
    std::vector<int64_t> ps(xs.begin(), xs.end() - 3);
    ps.insert(ps.end(), {C, H + pt + pb, W + pl + pr});
    padded = b.full(ps, x.buf->dtype, float_imm(0.0));
    std::vector<Index> inner(static_cast<size_t>(r));
    inner[size_t(r - 2)].start = int_imm(pt);
    inner[size_t(r - 2)].stop = int_imm(pt + H);
    inner[size_t(r - 1)].start = int_imm(pl);
    inner[size_t(r - 1)].stop = int_imm(pl + W);
    b.assign(b.slice(padded, inner), x);
  }
  b.assign(out, float_imm(0.0, out.buf->dtype == DType::F64 ? DType::F64 : DType::F32));
  std::vector<int> to_rows(static_cast<size_t>(r));  // (.., C, Ho, Wo) -> (.., Ho, C, Wo)
  std::iota(to_rows.begin(), to_rows.end(), 0);
  std::swap(to_rows[size_t(r - 3)], to_rows[size_t(r - 2)]);
  View out_rows = b.permute(out, to_rows);
  for (int64_t dy = 0; dy < kh; ++dy) {
    for (int64_t dx = 0; dx < kw; ++dx) {
      std::vector<Index> wi(4);
      wi[2].kind = wi[3].kind = Index::Int;
      wi[2].start = int_imm(dy);
      wi[3].start = int_imm(dx);
      View tap = b.slice(w, wi);  // (O, C)
      std::vector<Index> xi(static_cast<size_t>(r));
      xi[size_t(r - 2)].start = int_imm(dy * dh);
      xi[size_t(r - 2)].stop = int_imm(dy * dh + (Ho - 1) * sh + 1);
      xi[size_t(r - 2)].step = sh;
      xi[size_t(r - 1)].start = int_imm(dx * dw);
      xi[size_t(r - 1)].stop = int_imm(dx * dw + (Wo - 1) * sw + 1);
      xi[size_t(r - 1)].step = sw;
      View win = b.permute(b.slice(padded, xi), to_rows);  // (.., Ho, C, Wo)
      b.matmul_acc(out_rows, tap, win);
    }
  }
}

void clamp(Builder& b, const Op& op) {
  emit(b, Opcode::TMIN, {view_arg(op, 0), b.binary(Opcode::TMAX, op.args[1], op.args[2]), op.args[3]});
}

// x ** c for the constants with a cheaper exact instruction; anything else stays a TPOW.
bool power(Builder& b, const Op& op) {
  const View* x = optional_view_arg(op, 1);
  const Expr* e = std::get_if<Expr>(&op.args[2]);
  const View& dst = view_arg(op, 0);
  auto c = e ? as_float(*e) : std::nullopt;
  if (!x || !c) return false;
  if (*c == 1) return emit(b, Opcode::TMOV, {dst, *x}), true;
  if (*c == 2) return emit(b, Opcode::TMUL, {dst, *x, *x}), true;
  // (x ** 0.5 stays a TPOW: it is +0 at -0 and +inf at -inf, where a square root is -0 and NaN.)
  if (*c == -1 && is_float(dst.buf->dtype)) return emit(b, Opcode::TRECIP, {dst, *x}), true;
  return false;
}

const std::map<Opcode, CompositeLowering>& default_lowerings() {
  static const std::map<Opcode, CompositeLowering> table{
      {Opcode::SOFTMAX, softmax},
      {Opcode::LOG_SOFTMAX, log_softmax},
      {Opcode::LAYER_NORM, layer_norm},
      {Opcode::RMS_NORM, rms_norm},
      {Opcode::CONV2D, [](Builder& b, const Op& op) { conv2d(b, op, true); }},
      {Opcode::CONCAT, concat},
      {Opcode::CLAMP, clamp},
      {Opcode::HARDTANH, clamp}};  // (differs in its gradient only: autodiff_composites.cpp)
  return table;
}

class Expander : public StmtMutator {
 public:
  Expander(const Program& p, const std::map<Opcode, CompositeLowering>& target)
      : b_(Builder::extending(p)), target_(target) {}

 private:
  Builder b_;
  const std::map<Opcode, CompositeLowering>& target_;

  void mutate_into(const Stmt& s, std::vector<Stmt>& out) override {
    if (s->kind != StmtKind::OpStmt) return StmtMutator::mutate_into(s, out);
    const Op& op = s->op;
    auto t = target_.find(op.code);
    if (t != target_.end()) {
      t->second(b_, op);
    } else if (opcode_info(op.code).category == OpCategory::Composite) {
      default_lowerings().at(op.code)(b_, op);
    } else if (op.code != Opcode::TPOW || !power(b_, op)) {
      return out.push_back(s);
    }
    std::vector<Stmt> body = b_.take_body();
    if (opcode_info(op.code).category != OpCategory::Composite) {
      for (Stmt& n : body) out.push_back(std::move(n));
      return;
    }
    // One sequence labelled with the op's name: fusion treats it as one op of that name.
    Stmt group = seq(std::move(body));
    for (char c : opcode_name(op.code)) group->var += char(std::tolower(static_cast<unsigned char>(c)));
    out.push_back(group);
  }
  Stmt mutate_op(const Stmt& s) override { return s; }
};

}  // namespace

// x minus its mean over dims, computed as (x - s) - mean(x - s) with s the first element of each
// normalised slice: x - s is exact for values within a factor of two of s, so a row of equal
// values centres to exactly 0 and a row far from 0 keeps the precision of its spread (the mean of
// x itself rounds at x's magnitude, which the normalisation then scales by 1/sqrt(var + eps)).
View centred(Builder& b, const View& x, const std::vector<int>& dims) {
  // x[..., 0:1] over dims, as a view of x that keeps the other dims' extents as they are (a slice
  // would restate a dynamic dim as min(bound, n), and the result then no longer fuses with what
  // follows it, such as the bias add).
  View s = x;
  for (int d : dims) {
    const int bd = s.dims[size_t(d)];
    s.size[size_t(bd)] = 1;
    s.valid[size_t(bd)] = min(int_imm(1), x.valid[size_t(bd)]);
  }
  if (!is_float(s.buf->dtype) || compute_dtype(s.buf->dtype) != s.buf->dtype)  // as b.mean: in f32 (or f64)
    s = b.cast(s, DType::F32);
  View xs = b.binary(Opcode::TSUB, x, s);
  return b.binary(Opcode::TSUB, xs, b.mean(xs, dims, true));
}

void lower_conv2d_per_tap(Builder& b, const Op& op) { conv2d(b, op, false); }

Program lower_composites(const Program& p, const std::map<Opcode, CompositeLowering>& target_lowerings) {
  return Expander(p, target_lowerings).mutate_program(p);
}

}  // namespace pypto::passes
