// Dedicated backward formulas of the row-wise composite ops (layer_norm, rms_norm, softmax,
// log_softmax). Differentiating their expansion instruction by instruction gives a dozen
// row passes, each over a zero-filled adjoint; these formulas are one group each, which fusion
// turns into one row nest: it reads x (or the saved y) and the cotangent once per row and writes
// dx once; the column sums of the weight and bias gradients end the group, accumulated in the
// same nest from the rows it holds (tile_fused.cpp).
#include <cctype>

#include "ir/builder_impl.h"
#include "passes/autodiff_impl.h"
#include "passes/lower_composites.h"

namespace pypto::passes::ad {

using namespace ir;

namespace {

std::vector<int> last_dims(int rank, int64_t n) {
  std::vector<int> d;
  for (int i = rank - int(n); i < rank; ++i) d.push_back(i);
  return d;
}

int64_t int_operand(const Op& op, size_t i) { return as_int(std::get<Expr>(op.args[i])).value_or(1); }

std::string label(Opcode c) {
  std::string n(opcode_name(c));
  for (char& ch : n) ch = char(std::tolower(static_cast<unsigned char>(ch)));
  return n;
}

}  // namespace

// The composites kept whole for composite_rule: autodiff lowers every other composite first.
const std::vector<Opcode>& composites_with_rules() {
  static const std::vector<Opcode> codes{Opcode::SOFTMAX, Opcode::LOG_SOFTMAX, Opcode::LAYER_NORM,
                                         Opcode::RMS_NORM, Opcode::HARDTANH};
  return codes;
}

void Differentiator::composite_rule(const StmtNode* s, const Env& env, const View& g) {
  const Op& op = s->op;
  const Operand& x = op.args[1];
  auto bin = [&](Opcode c, const Operand& a, const Operand& b) -> View { return b_.binary(c, a, b); };
  switch (op.code) {
    case Opcode::SOFTMAX:
    case Opcode::LOG_SOFTMAX: {
      if (!has_adjoint(x)) return;
      // y: the saved result or the replayed one (a softmax's probabilities usually feed a matmul
      // whose gradient needs them anyway).
      View y = std::get<View>(value(op.args[0], s, env, true));
      std::vector<int> dims{int(int_operand(op, 2))};
      b_.begin_group(label(op.code));
      View dx;
      if (op.code == Opcode::SOFTMAX) {  // y (g - sum(g y))
        View sum = b_.reduce(Opcode::TROWSUM, bin(Opcode::TMUL, g, y), dims, true);
        dx = bin(Opcode::TMUL, bin(Opcode::TSUB, g, sum), y);
      } else {  // g - exp(y) sum(g)
        View sum = b_.reduce(Opcode::TROWSUM, g, dims, true);
        dx = bin(Opcode::TSUB, g, bin(Opcode::TMUL, b_.unary(Opcode::TEXP, y), sum));
      }
      accumulate(x, dx, env);
      b_.end_group();
      return;
    }
    case Opcode::LAYER_NORM:
    case Opcode::RMS_NORM: {
      const bool ln = op.code == Opcode::LAYER_NORM;
      const Operand& w = op.args[2];
      const Operand* bias = ln ? &op.args[3] : nullptr;
      const bool weighted = view_of(w) != nullptr;
      const bool dw = weighted && has_adjoint(w);
      const bool db = bias && has_adjoint(*bias);
      if (!has_adjoint(x) && !dw && !db) return;
      View xv = std::get<View>(value(x, s, env));
      auto dims = last_dims(xv.rank(), int_operand(op, ln ? 4 : 3));
      double eps = as_float(std::get<Expr>(op.args[ln ? 5 : 4])).value_or(0.0);
      b_.begin_group(label(op.code));
      if (!has_adjoint(x) && !dw) {
        accumulate(*bias, g, env);
        return b_.end_group();
      }
      // The forward's statistics, recomputed from the row in cache: xhat = (x - mean) * rstd.
      View xc = ln ? centred(b_, xv, dims) : xv;
      View rstd = b_.unary(Opcode::TRSQRT,
                           bin(Opcode::TADD, b_.mean(bin(Opcode::TMUL, xc, xc), dims, true),
                               float_imm(eps, xv.buf->dtype == DType::F64 ? DType::F64 : DType::F32)));
      View xhat = bin(Opcode::TMUL, xc, rstd);
      View gx;  // g * xhat, whose column sums are the weight's gradient
      if (dw) gx = bin(Opcode::TMUL, g, xhat);
      if (has_adjoint(x)) {
        // dx = rstd (gw - mean(gw) - xhat mean(gw xhat)), gw = g * w (rms_norm: no mean(gw) term)
        View gw = weighted ? bin(Opcode::TMUL, g, value(w, s, env)) : g;
        View proj = bin(Opcode::TMUL, xhat, b_.mean(bin(Opcode::TMUL, gw, xhat), dims, true));
        View centred = ln ? bin(Opcode::TSUB, gw, b_.mean(gw, dims, true)) : gw;
        accumulate(x, bin(Opcode::TMUL, bin(Opcode::TSUB, centred, proj), rstd), env);
      }
      // The column sums end the row nest (fusion folds them into it when they come before the
      // copies into the adjoints; the group is flattened, so gx stays in scope).
      View sw = dw ? summed_to(w, gx) : View{}, sb = db ? summed_to(*bias, g) : View{};
      if (dw) accumulate(w, sw, env);
      if (db) accumulate(*bias, sb, env);
      b_.end_group();
      return;
    }
    case Opcode::HARDTANH: {  // g where lo < x < hi, as torch (a clamp's lowering passes g at the bounds)
      if (!has_adjoint(x)) return;
      View xv = std::get<View>(value(x, s, env));
      Expr zero = constant(0, xv);
      b_.begin_group(label(op.code));
      View below_hi = b_.select(bin(Opcode::TCMP_LT, xv, op.args[3]), g, zero);
      accumulate(x, b_.select(bin(Opcode::TCMP_GT, xv, op.args[2]), below_hi, zero), env);
      b_.end_group();
      return;
    }
    default:
      refuse(s, std::string("no derivative rule for ") + std::string(opcode_name(op.code)));
  }
}

}  // namespace pypto::passes::ad
