#include "runtime/kernel_cost.h"

#include <algorithm>
#include <map>

#include "ir/trip_count.h"
#include "ir/visitor.h"

namespace pypto::runtime {
namespace {

// Loop iterations the counter walks one by one (binding the loop variable) before it counts a
// loop as trips x one iteration.
constexpr int64_t kWalkBudget = int64_t(1) << 16;

// Walks the program counting flops (and bytes), each statement times how often it runs.
struct Counter : ir::StmtVisitor {
  KernelCost cost;
  bool memory_bytes = false;  // count the bytes loads and stores move (tile level)
  bool have_env = false;      // env holds the call's scalars: evaluate what is not constant
  ir::ScalarEnv env;
  int64_t walk_budget = kWalkBudget;

  std::optional<int64_t> value(const ir::Expr& e) {
    if (auto c = ir::as_int(e)) return c;
    if (!have_env) return std::nullopt;
    std::vector<std::string> vars;
    ir::collect_vars(e, vars);
    for (const std::string& v : vars)
      if (!env.count(v)) return std::nullopt;
    ir::ScalarValue r = ir::eval(e, env);
    return r.is_float ? int64_t(r.f) : r.i;
  }

  // Tile level: a local tile's valid region is run-time state that TLOAD sets from the global
  // window it reads and each instruction passes from its source to its destination; counted
  // from there, a ragged edge tile (64 rows holding 32) counts its valid rows, not its shape.
  std::map<const ir::Buffer*, std::vector<ir::Expr>> tile_valid;

  std::vector<ir::Expr> valid_shape(const ir::View& v) const {
    if (v.buf && v.buf->space != ir::Space::Global && v.is_whole()) {
      auto it = tile_valid.find(v.buf.get());
      if (it != tile_valid.end() && it->second.size() == size_t(v.rank())) return it->second;
    }
    return v.valid_shape();
  }

  void track_valid(const ir::Op& op) {
    const ir::View* dst = op.args.empty() ? nullptr : std::get_if<ir::View>(&op.args[0]);
    if (!dst || !dst->buf || dst->buf->space == ir::Space::Global) return;
    tile_valid.erase(dst->buf.get());
    std::vector<const ir::View*> srcs;
    for (size_t i = 1; i < op.args.size(); ++i)
      if (const ir::View* v = std::get_if<ir::View>(&op.args[i])) srcs.push_back(v);
    if (!dst->is_whole() || srcs.empty()) return;
    const auto cat = ir::opcode_info(op.code).category;
    const size_t rank = size_t(dst->rank());
    std::vector<ir::Expr> v;
    if (op.code == ir::Opcode::TLOAD) {
      v = srcs[0]->valid_shape();
    } else if (op.code == ir::Opcode::TMATMUL || op.code == ir::Opcode::TMATMUL_ACC ||
               op.code == ir::Opcode::TMATMUL_BIAS) {
      if (srcs.size() < 2 || rank != 2 || srcs[0]->rank() != 2 || srcs[1]->rank() != 2) return;
      v = {valid_shape(*srcs[0])[0], valid_shape(*srcs[1])[1]};  // rows of a, columns of b
    } else if (cat == ir::OpCategory::Unary || cat == ir::OpCategory::Binary ||
               cat == ir::OpCategory::Compare || cat == ir::OpCategory::Select) {
      // per dim, a source not broadcast along it (its tile as long as the destination's)
      v.resize(rank);
      for (size_t d = 0; d < rank; ++d)
        for (const ir::View* src : srcs)
          if (src->rank() == dst->rank() && src->shape()[d] == dst->shape()[d]) {
            v[d] = valid_shape(*src)[d];
            break;
          }
      if (std::any_of(v.begin(), v.end(), [](const ir::Expr& e) { return !e; })) return;
    } else {
      return;  // reductions, layout changes, ...: the tile's shape
    }
    if (v.size() == rank) tile_valid[dst->buf.get()] = std::move(v);
  }

  // Elements of a view's valid region; the static window where an extent is not constant.
  double elements(const ir::View& v) {
    double n = 1;
    std::vector<ir::Expr> valid = valid_shape(v);
    std::vector<int64_t> shape = v.shape();
    for (size_t d = 0; d < shape.size(); ++d) {
      std::optional<int64_t> c = d < valid.size() ? value(valid[d]) : std::nullopt;
      if (!c) cost.exact = false;
      n *= double(c ? *c : shape[d]);
    }
    return n;
  }

  double op_flops(const ir::Op& op) {
    auto view = [&](size_t i) -> const ir::View* {
      return i < op.args.size() ? std::get_if<ir::View>(&op.args[i]) : nullptr;
    };
    const ir::View* dst = view(0);
    if (!dst) return 0;
    const bool memory_matmul = op.code == ir::Opcode::MMATMUL || op.code == ir::Opcode::MMATMUL_ACC;
    switch (memory_matmul ? ir::OpCategory::Matrix : ir::opcode_info(op.code).category) {
      case ir::OpCategory::Matrix: {
        if (op.code == ir::Opcode::TDWCONV) {  // a multiply-add per output element and tap
          const ir::View* w = view(2);
          return w ? 2 * elements(*dst) * elements(*w) : 0;
        }
        const ir::View* a = view(1);
        if (!a || a->rank() == 0) return 0;
        std::vector<int64_t> ashape = a->shape();
        std::optional<int64_t> k = value(valid_shape(*a).back());
        if (!k) cost.exact = false;
        double mn = elements(*dst);
        double f = 2 * mn * double(k ? *k : ashape.back());
        return op.code == ir::Opcode::TMATMUL_BIAS ? f + mn : f;
      }
      case ir::OpCategory::Unary:
        return op.code == ir::Opcode::TMOV ? 0 : elements(*dst);
      case ir::OpCategory::Binary:
      case ir::OpCategory::Compare:
      case ir::OpCategory::Select:
        return elements(*dst);
      case ir::OpCategory::Reduce: {
        const ir::View* src = view(1);
        return src ? elements(*src) : 0;
      }
      default:
        return 0;
    }
  }

  double op_bytes(const ir::Op& op) {
    if (ir::opcode_info(op.code).category != ir::OpCategory::Memory || op.code == ir::Opcode::TPREFETCH ||
        op.args.empty())
      return 0;
    double bytes = 0;  // the destination; a whole-matrix product also reads both operands once
    const size_t n = op.code == ir::Opcode::MMATMUL || op.code == ir::Opcode::MMATMUL_ACC ? 3 : 1;
    for (size_t i = 0; i < n && i < op.args.size(); ++i)
      if (const ir::View* v = std::get_if<ir::View>(&op.args[i]); v && v->buf)
        bytes += elements(*v) * ir::dtype_bytes(v->buf->dtype);
    return bytes;
  }

  // Counts body as run `times` times (times_ is restored on return).
  void walk(const std::vector<ir::Stmt>& body, double times) {
    const double saved = times_;
    times_ = times;
    visit_block(body);
    times_ = saved;
  }

 private:
  double times_ = 1;  // how often the statement being visited runs

  void visit_for(const ir::StmtNode& s) override {
    std::optional<int64_t> lo = value(s.lo), hi = value(s.hi), step = value(s.step);
    std::optional<int64_t> span = ir::as_int(s.hi - s.lo);  // constant even when lo and hi are not
    if (have_env && lo && hi && step && *step > 0 && ir::trip_count(*lo, *hi, *step) <= walk_budget) {
      int64_t n = int64_t(ir::trip_count(*lo, *hi, *step));
      walk_budget -= n;
      for (int64_t t = 0; t < n; ++t) {  // each iteration with its extents (an edge tile is smaller)
        env[s.var] = ir::ScalarValue{false, *lo + t * *step, 0};
        visit_block(s.body);
      }
      env.erase(s.var);
      return;
    }
    double trips = 1;
    if (lo && hi && step)
      trips = double(ir::trip_count(*lo, *hi, *step));
    else if (span && step)
      trips = double(ir::trip_count(0, *span, *step));
    else
      cost.exact = false;
    walk(s.body, times_ * trips);
  }
  void visit_if(const ir::StmtNode& s) override {  // the branch taken, when known; else the costlier one
    if (auto c = value(s.cond)) return visit_block(*c ? s.body : s.orelse);
    cost.exact = false;  // an upper bound
    double before = cost.flops;
    visit_block(s.body);
    double then_flops = cost.flops - before;
    cost.flops = before;
    visit_block(s.orelse);
    cost.flops = before + std::max(then_flops, cost.flops - before);
  }
  void visit_op(const ir::StmtNode& s) override {
    track_valid(s.op);  // (first: an instruction computes its destination's new valid region)
    cost.flops += times_ * op_flops(s.op);
    if (memory_bytes) cost.bytes += times_ * op_bytes(s.op);
  }
};

}  // namespace

KernelCost count_cost(const ir::Program& p, const ir::ScalarEnv* env) {
  Counter c;
  c.have_env = true;  // (without env, loop variables still bind as their loops are walked)
  if (env) c.env = *env;
  c.walk(p.body, 1);
  for (const ir::BufferRef& b : p.params) {
    double n = 1;
    std::vector<int64_t> shape = env ? ir::runtime_shape(*b, *env) : b->shape;
    for (int64_t e : shape) n *= double(e);
    c.cost.bytes += n * ir::dtype_bytes(b->dtype);
  }
  return c.cost;
}

KernelCost count_tile_cost(const std::vector<ir::Stmt>& statements, const ir::ScalarEnv* env) {
  Counter c;
  c.memory_bytes = true;
  c.have_env = true;  // (without env, loop variables still bind as their loops are walked)
  if (env) c.env = *env;
  c.walk(statements, 1);
  return c.cost;
}

}  // namespace pypto::runtime
