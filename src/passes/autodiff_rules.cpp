// The derivative rules of passes::autodiff: for one forward instruction `dst = f(srcs)`, add
// g * df/dsrc to each source's adjoint, where g is the adjoint of dst. Values a rule needs come
// from the replayed forward (or the saved results); see autodiff.h.
#include <cmath>

#include "ir/builder_impl.h"
#include "ir/printer.h"
#include "passes/autodiff_impl.h"

namespace pypto::passes::ad {

using namespace ir;

namespace {

// g restricted to the region the forward instruction computed: where a source is not broadcast
// along a dimension, no further than that source's valid extent.
View restrict_to(View g, const std::vector<const View*>& srcs) {
  auto gs = g.shape();
  for (const View* v : srcs) {
    auto vs = v->shape();
    auto vv = v->valid_shape();
    if (vs.size() > gs.size()) continue;
    size_t off = gs.size() - vs.size();
    for (size_t j = 0; j < vs.size(); ++j)
      if (vs[j] == gs[off + j]) g.valid[g.dims[off + j]] = min_valid(g.valid[g.dims[off + j]], vv[j]);
  }
  return g;
}

}  // namespace

void Differentiator::rule(const StmtNode* s, const Env& env) {
  const Op& op = s->op;
  if (op.args.empty()) return;
  const View* dv = view_of(op.args[0]);
  if (!dv) return;
  const View& D = *dv;
  auto cat = opcode_info(op.code).category;
  const int64_t scan_kind = op.code == Opcode::TSCAN ? as_int(std::get<Expr>(op.args[2])).value_or(1) : 0;
  if (op.code == Opcode::TSCAN && (scan_kind & 5) == 1)
    refuse(s, "the gradient of a running product (cumprod) is not derived");
  if (cat == OpCategory::Layout)
    refuse(s, std::string(opcode_name(op.code)) + " is not differentiated at the tensor level");
  if (!adj_.count(D.buf.get())) return;  // no gradient flows through a non-float value
  // A running maximum / minimum (cummax / cummin) only feeds the compares that find its indices:
  // the values returned are gathered at them, and the gather carries the gradient.
  if (op.code == Opcode::TSCAN && (scan_kind & 4)) return;
  if (cat == OpCategory::Gather && op.code != Opcode::TSCAN) return indexed_rows_rule(s, env);
  View g = adjoint(D, env);
  if (!in_place_linear(op) && overwritten(D.buf.get())) {
    // The old value of this region dies here: its adjoint so far belongs to this write alone.
    View snapshot = b_.copy(g);
    b_.assign(g, constant(0, g));
    g = snapshot;
  }
  switch (op.code) {
    case Opcode::TNOT:
    case Opcode::TFLOOR:
    case Opcode::TAND:
    case Opcode::TOR:
    case Opcode::TBNOT:
    case Opcode::TBAND:
    case Opcode::TBOR:
    case Opcode::TBXOR:
    case Opcode::TSHL:
    case Opcode::TSHR:
      return;  // integer or boolean results: no gradient
    case Opcode::TCEIL:
    case Opcode::TTRUNC:
    case Opcode::TROUND:
    case Opcode::TSIGN:
    case Opcode::TFLOORDIV:
    case Opcode::TGCD:
      return;  // piecewise constant: zero almost everywhere (as torch)
    default:
      break;
  }
  if (cat == OpCategory::Composite) return composite_rule(s, env, g);
  if (cat == OpCategory::Fill || cat == OpCategory::Compare || cat == OpCategory::Sync ||
      cat == OpCategory::Memory)
    return;

  auto bin = [&](Opcode c, const Operand& a, const Operand& b) -> View { return b_.binary(c, a, b); };
  auto un = [&](Opcode c, const View& a) -> View { return b_.unary(c, a); };
  auto k = [&](double v) { return constant(v, D); };
  auto square = [&](const Operand& o) -> Operand {  // a view or a scalar, squared
    if (auto v = view_of(o)) return bin(Opcode::TMUL, *v, *v);
    return std::get<Expr>(o) * std::get<Expr>(o);
  };
  auto val = [&](int i) { return value(op.args[i], s, env); };
  auto out = [&]() { return std::get<View>(value(op.args[0], s, env, true)); };
  const Operand& x = op.args.size() > 1 ? op.args[1] : op.args[0];

  if (op.code == Opcode::TSCAN) {  // a running sum's adjoint: the running sum from the other end
    if (!has_adjoint(x)) return;
    View xm = std::get<View>(mapped(x, env));
    const bool rev = (as_int(std::get<Expr>(op.args[2])).value_or(0) & 2) != 0;
    return accumulate(x, b_.row_scan(restrict_to(g, {&xm}), xm.rank() - 1, false, !rev), env);
  }
  if (op.code == Opcode::TDWCONV) return dwconv_rule(s, env, g);
  if (cat == OpCategory::Unary || cat == OpCategory::Convert || cat == OpCategory::Expand ||
      cat == OpCategory::Reduce) {
    if (!has_adjoint(x)) return;
    View xm = std::get<View>(mapped(x, env));
    g = restrict_to(g, {&xm});
    switch (op.code) {
      case Opcode::TMOV:
      case Opcode::TCVT:
      case Opcode::TROWEXPAND:
      case Opcode::TCOLEXPAND:
      case Opcode::TROWSUM:
      case Opcode::TCOLSUM:
        return accumulate(x, g, env);
      case Opcode::TROWMAX:
      case Opcode::TROWMIN:
      case Opcode::TCOLMAX:
      case Opcode::TCOLMIN: {
        // As torch's amax / amin / max(): the elements tied for the extreme share the gradient
        // evenly (a reduction over several dims, one instruction per dim, shares it per stage).
        View hit = bin(Opcode::TCMP_EQ, val(1), out());
        const bool rows = op.code == Opcode::TROWMAX || op.code == Opcode::TROWMIN;
        View ties =
            b_.reduce(Opcode::TROWSUM, b_.select(hit, k(1), k(0)), {xm.rank() - (rows ? 1 : 2)}, true);
        return accumulate(x, b_.select(hit, bin(Opcode::TDIV, g, ties), k(0)), env);
      }
      case Opcode::TNEG:
        return accumulate(x, g, env, true);
      case Opcode::TABS: {
        Operand xv = val(1);
        accumulate(x, b_.select(bin(Opcode::TCMP_GT, xv, k(0)), g, k(0)), env);
        return accumulate(x, b_.select(bin(Opcode::TCMP_LT, xv, k(0)), g, k(0)), env, true);
      }
      case Opcode::TEXP:
        return accumulate(x, bin(Opcode::TMUL, g, out()), env);
      case Opcode::TLOG:
        return accumulate(x, bin(Opcode::TDIV, g, val(1)), env);
      case Opcode::TSQRT:
        return accumulate(x, bin(Opcode::TDIV, g, bin(Opcode::TMUL, out(), k(2))), env);
      case Opcode::TRSQRT: {  // d x^-1/2 = -1/2 x^-3/2 = -1/2 y^3
        View y = out();
        View y3 = bin(Opcode::TMUL, bin(Opcode::TMUL, y, y), y);
        return accumulate(x, bin(Opcode::TMUL, g, bin(Opcode::TMUL, y3, k(-0.5))), env);
      }
      case Opcode::TRECIP: {
        View y = out();
        return accumulate(x, bin(Opcode::TMUL, g, bin(Opcode::TMUL, y, y)), env, true);
      }
      case Opcode::TRELU:
        return accumulate(x, b_.select(bin(Opcode::TCMP_GT, out(), k(0)), g, k(0)), env);
      case Opcode::TTANH: {
        View y = out();
        return accumulate(x, bin(Opcode::TMUL, g, bin(Opcode::TSUB, k(1), bin(Opcode::TMUL, y, y))), env);
      }
      case Opcode::TSIGMOID: {
        View y = out();
        return accumulate(x, bin(Opcode::TMUL, g, bin(Opcode::TMUL, y, bin(Opcode::TSUB, k(1), y))), env);
      }
      case Opcode::TERF: {  // 2/sqrt(pi) exp(-x^2)
        Operand xv = val(1);
        View e = un(Opcode::TEXP, bin(Opcode::TMUL, bin(Opcode::TMUL, xv, xv), k(-1)));
        return accumulate(x, bin(Opcode::TMUL, g, bin(Opcode::TMUL, e, k(2 / std::sqrt(M_PI)))), env);
      }
      case Opcode::TGELU: {  // Phi(x) + x phi(x)
        Operand xv = val(1);
        View cdf =
            bin(Opcode::TMUL, bin(Opcode::TADD, un(Opcode::TERF, bin(Opcode::TMUL, xv, k(M_SQRT1_2))), k(1)),
                k(0.5));
        View pdf = bin(Opcode::TMUL, un(Opcode::TEXP, bin(Opcode::TMUL, bin(Opcode::TMUL, xv, xv), k(-0.5))),
                       k(1 / std::sqrt(2 * M_PI)));
        return accumulate(x, bin(Opcode::TMUL, g, bin(Opcode::TADD, cdf, bin(Opcode::TMUL, xv, pdf))), env);
      }
      case Opcode::TGELU_TANH: {  // y = x/2 (1 + tanh u), u = c (x + a x^3)
        const double c = std::sqrt(2 / M_PI), a = 0.044715;
        Operand xv = val(1);
        View x2 = bin(Opcode::TMUL, xv, xv);
        View u = bin(Opcode::TMUL,
                     bin(Opcode::TMUL, bin(Opcode::TADD, bin(Opcode::TMUL, x2, k(a)), k(1)), xv), k(c));
        View t = un(Opcode::TTANH, u);
        View du = bin(Opcode::TMUL, bin(Opcode::TADD, bin(Opcode::TMUL, x2, k(3 * a)), k(1)), k(c));
        View sech2 = bin(Opcode::TSUB, k(1), bin(Opcode::TMUL, t, t));
        View d = bin(Opcode::TADD, bin(Opcode::TMUL, bin(Opcode::TADD, t, k(1)), k(0.5)),
                     bin(Opcode::TMUL, bin(Opcode::TMUL, bin(Opcode::TMUL, xv, sech2), du), k(0.5)));
        return accumulate(x, bin(Opcode::TMUL, g, d), env);
      }
      case Opcode::TSIN:
        return accumulate(x, bin(Opcode::TMUL, g, un(Opcode::TCOS, std::get<View>(val(1)))), env);
      case Opcode::TCOS:
        return accumulate(x, bin(Opcode::TMUL, g, un(Opcode::TSIN, std::get<View>(val(1)))), env, true);
      case Opcode::TTAN: {  // 1 + tan^2
        View y = out();
        return accumulate(x, bin(Opcode::TMUL, g, bin(Opcode::TADD, bin(Opcode::TMUL, y, y), k(1))), env);
      }
      case Opcode::TEXP2:
        return accumulate(x, bin(Opcode::TMUL, g, bin(Opcode::TMUL, out(), k(M_LN2))), env);
      case Opcode::TEXPM1:
        return accumulate(x, bin(Opcode::TMUL, g, bin(Opcode::TADD, out(), k(1))), env);
      case Opcode::TLOG2:
        return accumulate(x, bin(Opcode::TDIV, g, bin(Opcode::TMUL, val(1), k(M_LN2))), env);
      case Opcode::TLOG10:
        return accumulate(x, bin(Opcode::TDIV, g, bin(Opcode::TMUL, val(1), k(M_LN10))), env);
      case Opcode::TLOG1P:
        return accumulate(x, bin(Opcode::TDIV, g, bin(Opcode::TADD, val(1), k(1))), env);
      case Opcode::TCBRT: {  // 1 / (3 y^2)
        View y = out();
        return accumulate(x, bin(Opcode::TDIV, g, bin(Opcode::TMUL, bin(Opcode::TMUL, y, y), k(3))), env);
      }
      case Opcode::TERFC: {  // -2/sqrt(pi) exp(-x^2)
        Operand xv = val(1);
        View e = un(Opcode::TEXP, bin(Opcode::TMUL, bin(Opcode::TMUL, xv, xv), k(-1)));
        return accumulate(x, bin(Opcode::TMUL, g, bin(Opcode::TMUL, e, k(-2 / std::sqrt(M_PI)))), env);
      }
      case Opcode::TERFINV: {  // sqrt(pi)/2 exp(y^2)
        View y = out();
        View e = un(Opcode::TEXP, bin(Opcode::TMUL, y, y));
        return accumulate(x, bin(Opcode::TMUL, g, bin(Opcode::TMUL, e, k(std::sqrt(M_PI) / 2))), env);
      }
      case Opcode::TLGAMMA:  // digamma x
        return accumulate(x, bin(Opcode::TMUL, g, un(Opcode::TDIGAMMA, std::get<View>(val(1)))), env);
      case Opcode::TDIGAMMA:  // trigamma x
        return accumulate(x, bin(Opcode::TMUL, g, un(Opcode::TTRIGAMMA, std::get<View>(val(1)))), env);
      case Opcode::TSILU: {  // s (1 + x (1 - s))
        Operand xv = val(1);
        View sg = un(Opcode::TSIGMOID, std::get<View>(xv));
        View d = bin(Opcode::TMUL, sg,
                     bin(Opcode::TADD, bin(Opcode::TMUL, xv, bin(Opcode::TSUB, k(1), sg)), k(1)));
        return accumulate(x, bin(Opcode::TMUL, g, d), env);
      }
      default:
        refuse(s, std::string("no derivative rule for ") + std::string(opcode_name(op.code)));
    }
  }

  if (cat == OpCategory::Binary || cat == OpCategory::Select) {
    std::vector<View> srcs;
    for (size_t i = 1; i < op.args.size(); ++i)
      if (auto v = view_of(op.args[i])) srcs.push_back(mapped(*v, env));
    std::vector<const View*> ptrs;
    for (auto& v : srcs) ptrs.push_back(&v);
    g = restrict_to(g, ptrs);
    const Operand& a = op.args[1];
    const Operand& b = op.args[2];
    switch (op.code) {
      case Opcode::TADD:
        accumulate(b, g, env);
        if (!in_place_linear(op)) accumulate(a, g, env);
        return;
      case Opcode::TSUB:
        accumulate(b, g, env, true);
        if (!in_place_linear(op)) accumulate(a, g, env);
        return;
      case Opcode::TMUL:
        if (has_adjoint(a)) accumulate(a, bin(Opcode::TMUL, g, val(2)), env);
        if (has_adjoint(b)) accumulate(b, bin(Opcode::TMUL, g, val(1)), env);
        return;
      case Opcode::TDIV: {
        Operand bv = val(2);
        if (has_adjoint(a)) accumulate(a, bin(Opcode::TDIV, g, bv), env);
        if (has_adjoint(b))
          accumulate(b, bin(Opcode::TDIV, bin(Opcode::TDIV, bin(Opcode::TMUL, g, val(1)), bv), bv), env,
                     true);
        return;
      }
      case Opcode::TMAX:
      case Opcode::TMIN: {
        View pick_a = bin(op.code == Opcode::TMAX ? Opcode::TCMP_GE : Opcode::TCMP_LE, val(1), val(2));
        if (has_adjoint(a)) accumulate(a, b_.select(pick_a, g, k(0)), env);
        if (has_adjoint(b)) accumulate(b, b_.select(pick_a, k(0), g), env);
        return;
      }
      case Opcode::TPOW: {
        Operand av = val(1), bv = val(2);
        if (has_adjoint(a)) {
          Operand bm1 =
              view_of(bv) ? Operand(bin(Opcode::TSUB, bv, k(1))) : Operand(std::get<Expr>(bv) - k(1));
          accumulate(a, bin(Opcode::TMUL, g, bin(Opcode::TMUL, bin(Opcode::TPOW, av, bm1), bv)), env);
        }
        if (has_adjoint(b)) {
          Operand loga = view_of(av) ? Operand(un(Opcode::TLOG, std::get<View>(av)))
                                     : Operand(unary_math(ExprOp::Log, std::get<Expr>(av)));
          accumulate(b, bin(Opcode::TMUL, g, bin(Opcode::TMUL, out(), loga)), env);
        }
        return;
      }
      case Opcode::TATAN2: {  // y = atan2(a, b): da = b / (a^2 + b^2), db = -a / (a^2 + b^2)
        Operand av = val(1), bv = val(2);
        View r2 = bin(Opcode::TADD, square(av), square(bv));
        if (has_adjoint(a)) accumulate(a, bin(Opcode::TDIV, bin(Opcode::TMUL, g, bv), r2), env);
        if (has_adjoint(b)) accumulate(b, bin(Opcode::TDIV, bin(Opcode::TMUL, g, av), r2), env, true);
        return;
      }
      case Opcode::THYPOT: {  // da = a / y, db = b / y
        View y = out();
        if (has_adjoint(a)) accumulate(a, bin(Opcode::TDIV, bin(Opcode::TMUL, g, val(1)), y), env);
        if (has_adjoint(b)) accumulate(b, bin(Opcode::TDIV, bin(Opcode::TMUL, g, val(2)), y), env);
        return;
      }
      case Opcode::TCOPYSIGN: {  // da = y / a (0 where a == 0, as torch); b gets none
        if (!has_adjoint(a)) return;
        Operand av = val(1);
        View ratio = b_.select(bin(Opcode::TCMP_EQ, av, k(0)), k(0), bin(Opcode::TDIV, out(), av));
        return accumulate(a, bin(Opcode::TMUL, g, ratio), env);
      }
      case Opcode::TFMOD:   // a - trunc(a / b) * b
      case Opcode::TREM: {  // a - floor(a / b) * b
        if (has_adjoint(a)) accumulate(a, g, env);
        if (has_adjoint(b)) {
          View q = un(op.code == Opcode::TFMOD ? Opcode::TTRUNC : Opcode::TFLOOR,
                      bin(Opcode::TDIV, val(1), val(2)));
          accumulate(b, bin(Opcode::TMUL, g, q), env, true);
        }
        return;
      }
      case Opcode::TSEL: {
        const Operand& cond = op.args[1];
        const Operand& t = op.args[2];
        const Operand& f = op.args[3];
        if (!has_adjoint(t) && !has_adjoint(f)) return;
        Operand c = value(cond, s, env);
        if (has_adjoint(t)) accumulate(t, b_.select(c, g, k(0)), env);
        if (has_adjoint(f)) accumulate(f, b_.select(c, k(0), g), env);
        return;
      }
      default:
        refuse(s, std::string("no derivative rule for ") + std::string(opcode_name(op.code)));
    }
  }

  if (cat == OpCategory::Matrix) {
    const Operand& a = op.args[1];
    const Operand& b = op.args[2];
    View am = std::get<View>(mapped(a, env)), bm = std::get<View>(mapped(b, env));
    // g over the product's region: rows of a, columns of b, batch dims of either.
    int R = g.rank();
    auto av = am.valid_shape(), bvv = bm.valid_shape();
    g.valid[g.dims[R - 2]] = min_valid(g.valid[g.dims[R - 2]], av[av.size() - 2]);
    g.valid[g.dims[R - 1]] = min_valid(g.valid[g.dims[R - 1]], bvv.back());
    if (has_adjoint(a)) accumulate(a, b_.matmul(g, b_.transpose(std::get<View>(val(2)), -2, -1)), env);
    if (has_adjoint(b)) {
      View bv = std::get<View>(b);
      if (bv.rank() == 2 && bv.dims == std::vector<int>{1, 0}) {
        // W used as W^T (x @ W.T, nn.Linear): its gradient g^T x, made in W's own layout and
        // accumulated through the same transposed view, so the add walks both in memory order.
        View prod = b_.matmul(b_.transpose(g, -2, -1), std::get<View>(val(1)));
        accumulate(b, b_.transpose(prod, -2, -1), env);
      } else {
        accumulate(b, b_.matmul(b_.transpose(std::get<View>(val(1)), -2, -1), g), env);
      }
    }
    if (op.code == Opcode::TMATMUL_BIAS) accumulate(op.args[3], g, env);
    return;
  }
  refuse(s, std::string("no derivative rule for ") + std::string(opcode_name(op.code)));
}

// Row gathers and scatters by an index tensor (embedding lookups, torch.gather/scatter, x[idx]):
// the gradient moves the same rows the other way. The index is data, so it has no gradient.
void Differentiator::indexed_rows_rule(const StmtNode* s, const Env& env) {
  const Op& op = s->op;
  View g = adjoint(std::get<View>(op.args[0]), env);
  const Operand& src = op.args[1];
  View idx = std::get<View>(value(op.args[2], s, env));
  switch (op.code) {
    case Opcode::TGATHER:  // out = src[idx]: each row of g adds to the row it was read from
      if (has_adjoint(src)) b_.scatter_rows(adjoint(std::get<View>(src), env), g, idx, true);
      return;
    case Opcode::TSCATTER_ADD:  // dst[idx] += src: dst's gradient passes through unchanged
      if (has_adjoint(src)) accumulate(src, b_.gather_rows(g, idx), env);
      return;
    case Opcode::TSCATTER: {  // dst[idx] = src: the overwritten rows' old values get no gradient
      View rows = b_.gather_rows(g, idx);
      if (has_adjoint(src)) accumulate(src, rows, env);
      b_.scatter_rows(g, b_.full(rows.shape(), g.buf->dtype, constant(0, g)), idx, false);
      return;
    }
    default:
      refuse(s, std::string("no derivative rule for ") + std::string(opcode_name(op.code)));
  }
}

// TDWCONV: dst[i][j] = sum over taps (a, b) of w[a][b] xp[i*sh + a*dh - pt][j*sw + b*dw - pl] on
// 2-d planes, xp being src with zeros around it. Each tap's window of src (strided by the stride;
// the outputs whose tap reads padding left out) gets w[a][b] * g; w gets the correlation of src
// with g, a TDWCONV with the stride and the dilation exchanged and the same padding (its bottom
// and right ones, or a crop of src, sized so that it gives kh x kw).
void Differentiator::dwconv_rule(const StmtNode* s, const Env& env, const View& g) {
  const Op& op = s->op;
  int64_t k[8];
  for (size_t i = 0; i < 8; ++i) k[i] = *as_int(std::get<Expr>(op.args[3 + i]));
  const int64_t sh = k[0], sw = k[1], dh = k[2], dw = k[3], pt = k[4], pl = k[6];
  const auto gs = g.shape();
  const Operand& src = op.args[1];
  const Operand& w = op.args[2];
  const View xv = std::get<View>(value(src, s, env)), wv = std::get<View>(value(w, s, env));
  const int64_t kh = wv.shape()[0], kw = wv.shape()[1], H = xv.shape()[0], W = xv.shape()[1];
  auto range = [](int64_t lo, int64_t hi) { return Index{Index::Slice, int_imm(lo), int_imm(hi), 1}; };
  if (has_adjoint(w)) {
    // src's rows reached: pt padding, then up to need_h - pt of src, then padding to need_h.
    const int64_t need_h = (gs[0] - 1) * sh + (kh - 1) * dh + 1,
                  need_w = (gs[1] - 1) * sw + (kw - 1) * dw + 1;
    const int64_t rows = std::min(H, need_h - pt), cols = std::min(W, need_w - pl);
    View dwt = b_.full({kh, kw}, g.buf->dtype, constant(0, g));
    if (rows > 0 && cols > 0) {
      Builder::DwConv t{dh, dw, sh, sw, pt, need_h - pt - rows, pl, need_w - pl - cols};
      b_.dwconv_plane(dwt, b_.slice(xv, {range(0, rows), range(0, cols)}), g, t);
    }
    accumulate(w, dwt, env);
  }
  if (!has_adjoint(src)) return;
  const View as = adjoint(std::get<View>(src), env);
  // The outputs i whose tap row a reads src (0 <= i*sh + a*dh - pt < n): [first, last).
  auto inside = [](int64_t n_out, int64_t stride, int64_t off, int64_t n) {
    auto ceil_div = [](int64_t p, int64_t q) { return p >= 0 ? (p + q - 1) / q : -((-p) / q); };
    return std::make_pair(std::max<int64_t>(0, ceil_div(-off, stride)),
                          std::min<int64_t>(n_out, ceil_div(n - off, stride)));
  };
  for (int64_t a = 0; a < kh; ++a) {
    const auto [i0, i1] = inside(gs[0], sh, a * dh - pt, H);
    if (i1 <= i0) continue;
    for (int64_t b = 0; b < kw; ++b) {
      const auto [j0, j1] = inside(gs[1], sw, b * dw - pl, W);
      if (j1 <= j0) continue;
      const int64_t r0 = i0 * sh + a * dh - pt, c0 = j0 * sw + b * dw - pl;
      const View window =
          b_.slice(as, {Index{Index::Slice, int_imm(r0), int_imm(r0 + (i1 - i0 - 1) * sh + 1), sh},
                        Index{Index::Slice, int_imm(c0), int_imm(c0 + (j1 - j0 - 1) * sw + 1), sw}});
      const View gw = b_.slice(g, {range(i0, i1), range(j0, j1)});
      const View tap = b_.slice(wv, {range(a, a + 1), range(b, b + 1)});
      b_.update(Opcode::TADD, window, b_.binary(Opcode::TMUL, gw, tap));
    }
  }
}

}  // namespace pypto::passes::ad
