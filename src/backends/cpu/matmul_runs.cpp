// Sums of whole-matrix products (see matmul_runs.h).
#include "backends/cpu/matmul_runs.h"

#include <algorithm>

namespace pypto::cpu {
using namespace ir;

namespace {
bool same_exprs(const std::vector<Expr>& x, const std::vector<Expr>& y) {
  if (x.size() != y.size()) return false;
  for (size_t i = 0; i < x.size(); ++i)
    if (!expr_equal(x[i], y[i])) return false;
  return true;
}

bool same_window(const View& a, const View& b) {
  return a.buf == b.buf && a.size == b.size && a.step == b.step && a.dims == b.dims &&
         same_exprs(a.offset, b.offset) && same_exprs(a.valid, b.valid);
}

const Op* memory_matmul_op(const Stmt& s) {
  if (!s || s->kind != StmtKind::OpStmt) return nullptr;
  const Op& op = s->op;
  if ((op.code != Opcode::MMATMUL && op.code != Opcode::MMATMUL_ACC) || op.args.size() != 3) return nullptr;
  for (const Operand& a : op.args)
    if (!std::holds_alternative<View>(a)) return nullptr;
  return &op;
}
}  // namespace

size_t memory_matmul_run(const std::vector<Stmt>& body, size_t i) {
  const Op* first = memory_matmul_op(body[i]);
  if (!first) return 1;
  const View& dst = std::get<View>(first->args[0]);
  size_t n = 1;
  while (i + n < body.size()) {
    const Op* next = memory_matmul_op(body[i + n]);
    if (!next || next->code != Opcode::MMATMUL_ACC || !same_window(std::get<View>(next->args[0]), dst)) break;
    ++n;
  }
  return n;
}

std::vector<std::string> memory_matmul_sum_calls(const std::vector<Stmt>& body, size_t i, size_t n,
                                                 const std::string& pool,
                                                 const std::function<std::string(const Op&, size_t)>& gview) {
  std::vector<std::string> calls;
  for (size_t c = 0; c < n; c += kMaxMatmulTerms) {  // later calls accumulate onto the earlier
    const Op& first = body[i + c]->op;
    std::string call = "pto::mmatmul_sum(" + pool +
                       (first.code == Opcode::MMATMUL_ACC ? ", true, " : ", false, ") + gview(first, 0);
    for (size_t t = c; t < std::min(n, c + kMaxMatmulTerms); ++t)
      call += ", " + gview(body[i + t]->op, 1) + ", " + gview(body[i + t]->op, 2);
    calls.push_back(call + ")");
  }
  return calls;
}

}  // namespace pypto::cpu
