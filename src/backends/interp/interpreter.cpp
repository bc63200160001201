// The reference interpreter's machine: argument binding, the statement walker, buffers, operand
// resolution and checked element access. Instruction semantics live in the sibling files.
#include "backends/interp/interpreter.h"

#include <algorithm>
#include <cmath>
#include <locale>
#include <sstream>

#include "backends/interp/machine.h"
#include "exec/arg_check.h"
#include "exec/interrupt.h"
#include "ir/printer.h"
#include "ir/trip_count.h"

namespace pypto::interp {
using namespace ir;

namespace {
std::string shape_str(const std::vector<int64_t>& s) {
  std::ostringstream o;
  o.imbue(std::locale::classic());
  o << "[";
  for (size_t i = 0; i < s.size(); ++i) o << (i ? ", " : "") << s[i];
  o << "]";
  return o.str();
}

std::string tile_element(const Tile& t, int64_t r, int64_t c) {
  return "element [" + std::to_string(r) + ", " + std::to_string(c) + "] of tile '" + t.name + "'";
}

std::string global_element(const GlobalBuf& b, int64_t a) {
  return "element " + std::to_string(a) + (b.external ? " (in strides)" : " (row-major)") + " of '" + b.name +
         "'";
}

// The element's address identifies it across views (and across aliasing caller tensors).
const void* element_key(const GlobalBuf& b, int64_t a) {
  return b.external ? static_cast<const void*>(b.data + a * dtype_bytes(b.dtype)) : &b.val[size_t(a)];
}
}  // namespace

Machine::Machine(const Program& p, const runtime::RunArgs& args, ExecObserver* observer)
    : prog_(p), observer_(observer) {
  runtime::check_args(p, args, runtime::written_params(p));
  for (size_t k = 0; k < p.params.size(); ++k) {
    const Buffer& b = *p.params[k];
    const runtime::TensorArg& t = args.tensors[k];
    auto g = std::make_unique<GlobalBuf>();
    g->name = b.name;
    g->dtype = b.dtype;
    g->shape = t.shape;  // (dynamic dims: checked against their extents by check_args)
    g->external = true;
    g->data = static_cast<char*>(t.data);
    g->strides = t.strides;
    globals_[b.name] = std::move(g);
  }
  std::vector<ScalarValue> scalars = args.scalars;
  runtime::bind_dim_symbols(p, args.tensors, scalars);
  for (size_t k = 0; k < p.scalars.size(); ++k) {
    const ScalarParam& sp = p.scalars[k];
    ScalarValue v = scalars[k];
    if (is_float(sp.dtype))
      v = round_to(sp.dtype, fnum(v.as_double()));
    else
      v = ScalarValue{false, v.is_float ? int64_t(v.f) : v.i, 0};  // check_args: an integral value
    env_[sp.name] = v;
  }
}

void Machine::run() { visit_block(prog_.body); }

int64_t Machine::eval_int(const Expr& e, const char* what) const {
  if (!e) throw Error(std::string("missing expression for ") + what);
  ScalarValue v = eval(e, env_);
  if (v.is_float) {
    if (!(v.f == std::floor(v.f) && std::fabs(v.f) < 9.2e18))
      throw Error(std::string(what) + " `" + to_string(e) + "` is not an integer");
    return int64_t(v.f);
  }
  return v.i;
}

void Machine::visit_if(const StmtNode& s) {
  if (!s.cond) throw Error("if without a condition");
  visit_block(eval(s.cond, env_).as_double() != 0 ? s.body : s.orelse);
}

void Machine::visit_let(const StmtNode& s) {
  if (!s.value) throw Error("let '" + s.var + "' without a value");
  env_[s.var] = eval(s.value, env_);
}

void Machine::visit_for(const StmtNode& s) {
  const int64_t lo = eval_int(s.lo, "loop start"), hi = eval_int(s.hi, "loop end");
  const int64_t step = s.step ? eval_int(s.step, "loop step") : 1;
  if (step == 0) throw Error("loop '" + s.var + "' has step 0");
  if (s.loop_kind == LoopKind::Parallel) {
    // Iterations are independent by contract: run them in the order PYPTO_INTERP_PARALLEL asks
    // and record their accesses, so a dependence between them is an error, not a lucky pass.
    std::vector<int64_t> values =
        parallel_iterations(lo, hi, step, parallel_, std::hash<std::string>{}(s.var) ^ races_.depth());
    const size_t depth = races_.depth();
    races_.enter(s.var, values);
    if (observer_) observer_->on_parallel_enter(depth, int64_t(values.size()));
    for (size_t k = 0; k < values.size(); ++k) {
      if (runtime::stop_requested()) throw runtime::Interrupted();  // Ctrl-C, between iterations
      races_.iteration(k);
      if (observer_) observer_->on_parallel_iteration(depth, int64_t((values[k] - lo) / step));
      env_[s.var] = ScalarValue{false, values[k], 0};
      visit_block(s.body);
    }
    races_.leave();
    if (observer_) observer_->on_parallel_leave(depth);
  } else {
    for (__int128 t = 0, trips = trip_count(lo, hi, step); t < trips; ++t) {
      if (runtime::stop_requested()) throw runtime::Interrupted();
      env_[s.var] = ScalarValue{false, int64_t(lo + t * step), 0};
      visit_block(s.body);
    }
  }
  env_.erase(s.var);
}

void Machine::allocate(const BufferRef& b) {
  if (!b) throw Error("alloc of a null buffer");
  if (globals_.count(b->name) && globals_[b->name]->external)
    throw Error("alloc of '" + b->name + "' shadows a parameter");
  // The interpreter holds every element (24 bytes with its written bit): refuse what cannot fit
  // rather than overflow the count or die in the allocator.
  const std::vector<int64_t> shape = runtime_shape(*b, env_);  // dynamic extents evaluated now
  int64_t n = 1;
  for (int64_t d : shape)
    if (d < 0 || __builtin_mul_overflow(n, d, &n) || n > (int64_t(1) << 32))
      throw Error("alloc of '" + b->name + "' " + shape_str(shape) + " is too large for the interpreter");
  if (b->space == Space::Global) {
    // Scratch in global memory: fresh (unwritten) at every execution of its Alloc.
    auto g = std::make_unique<GlobalBuf>();
    g->name = b->name;
    g->dtype = b->dtype;
    g->shape = shape;
    g->val.assign(size_t(n), fnum(NAN));
    g->written.assign(size_t(n), 0);
    g->parallel_depth = races_.depth();
    globals_[b->name] = std::move(g);
    return;
  }
  auto t = std::make_unique<Tile>();
  t->name = b->name;
  t->dtype = b->dtype;
  if (b->rank() == 2) {
    t->R = b->shape[0];
    t->C = b->shape[1];
  } else if (b->rank() == 1) {
    t->C = b->shape[0];
  } else if (b->rank() != 0) {
    throw Error("tile '" + b->name + "' has rank " + std::to_string(b->rank()) + "; local tiles are rank 2");
  }
  t->vr = t->R;
  t->vc = t->C;
  t->val.assign(size_t(t->R * t->C), fnum(NAN));
  t->written.assign(size_t(t->R * t->C), 0);
  t->parallel_depth = races_.depth();
  tiles_[b->name] = std::move(t);
}

void Machine::exec_op(const Op& op) {
  const OpcodeInfo& info = opcode_info(op.code);
  if (info.num_operands >= 0 && int(op.args.size()) != info.num_operands)
    fail(op, std::string(info.name) + " takes " + std::to_string(info.num_operands) + " operands, got " +
                 std::to_string(op.args.size()));
  switch (info.category) {
    case OpCategory::Memory:
      exec_memory(*this, op);
      break;
    case OpCategory::Fill:
    case OpCategory::Unary:
    case OpCategory::Binary:
    case OpCategory::Compare:
    case OpCategory::Select:
    case OpCategory::Convert:
      exec_elementwise(*this, op);
      break;
    case OpCategory::Reduce:
    case OpCategory::Expand:
      exec_reduce_expand(*this, op);
      break;
    case OpCategory::Matrix:
      exec_matrix(*this, op);
      break;
    case OpCategory::Layout:
    case OpCategory::Gather:
      exec_layout(*this, op);
      break;
    case OpCategory::Sync:
      exec_sync(*this, op);
      break;
    case OpCategory::Composite:
      fail(op, std::string(info.name) + " is a tensor-level composite op: lower the program first");
  }
  if (observer_) {
    std::vector<ScalarValue> scalars;
    for (size_t i = 0; i < op.args.size(); ++i)
      if (is_scalar(op, i)) scalars.push_back(scalar(op, i));
    observer_->on_op(op, operand_uses(op), scalars);
  }
}

std::vector<OperandUse> Machine::operand_uses(const Op& op) {
  std::vector<OperandUse> uses;
  for (size_t i = 0; i < op.args.size(); ++i) {
    const View* v = std::get_if<View>(&op.args[i]);
    if (!v || !v->buf) continue;
    OperandUse u{v->buf.get(), i == 0, 0, 0};
    if (v->buf->space == Space::Global) {
      const GView g = global_view(op, i);
      u.rows = g.rows;
      u.cols = g.cols;
      u.lo = u.hi = g.base;
      for (size_t d = 0; d < g.base.size(); ++d) {
        const int64_t reach =
            (int(d) == g.rdim ? (g.rows - 1) * g.rstep : 0) + (int(d) == g.cdim ? (g.cols - 1) * g.cstep : 0);
        (reach < 0 ? u.lo : u.hi)[d] += reach;
      }
    } else {
      auto it = tiles_.find(v->buf->name);
      if (it != tiles_.end()) {
        u.rows = it->second->vr;
        u.cols = it->second->vc;
      }
    }
    uses.push_back(u);
  }
  return uses;
}

// ---- operands ---------------------------------------------------------------------------------

void Machine::fail(const Op& op, const std::string& what) const {
  std::string text;
  try {
    text = print(op);
  } catch (const std::exception&) {
    text = std::string(opcode_name(op.code)) + " ...";
  }
  throw Error(what + " in `" + text + "`");
}

const View& Machine::view_operand(const Op& op, size_t i) const {
  if (i >= op.args.size()) fail(op, "missing operand " + std::to_string(i));
  const View* v = std::get_if<View>(&op.args[i]);
  if (!v) fail(op, "operand " + std::to_string(i) + " must be a tile or view, not a scalar");
  if (!v->buf) fail(op, "operand " + std::to_string(i) + " is a view of no buffer");
  return *v;
}

Tile& Machine::tile(const Op& op, size_t i) {
  const View& v = view_operand(op, i);
  if (v.buf->space == Space::Global)
    fail(op, "not a tile-level program: operand " + std::to_string(i) + " of " +
                 std::string(opcode_name(op.code)) + " is the global buffer '" + v.buf->name +
                 "' (compute instructions take local tiles); run the pipeline first");
  auto it = tiles_.find(v.buf->name);
  if (it == tiles_.end()) fail(op, "tile '" + v.buf->name + "' is used before its alloc");
  if (!v.is_whole())
    fail(op, "operand " + std::to_string(i) + " must be a whole tile, got a view of '" + v.buf->name + "'");
  return *it->second;
}

bool Machine::is_scalar(const Op& op, size_t i) const {
  return i < op.args.size() && std::holds_alternative<Expr>(op.args[i]);
}

Num Machine::scalar(const Op& op, size_t i) const {
  if (!is_scalar(op, i)) fail(op, "operand " + std::to_string(i) + " must be a scalar");
  const Expr& e = std::get<Expr>(op.args[i]);
  if (!e) fail(op, "operand " + std::to_string(i) + " is an empty expression");
  return eval(e, env_);
}

int64_t Machine::int_scalar(const Op& op, size_t i) const {
  const Num v = scalar(op, i);
  if (!v.is_float) return v.i;
  if (!(v.f == std::floor(v.f) && std::fabs(v.f) < 9.2e18))
    fail(op, "operand " + std::to_string(i) + " must be an integer");
  return int64_t(v.f);
}

GView Machine::global_view(const Op& op, size_t i) {
  const View& v = view_operand(op, i);
  if (v.buf->space != Space::Global)
    fail(op, "operand " + std::to_string(i) + " must be a global view, got local tile '" + v.buf->name + "'");
  auto it = globals_.find(v.buf->name);
  if (it == globals_.end()) fail(op, "global buffer '" + v.buf->name + "' is used before its alloc");
  GView g;
  g.buf = it->second.get();
  const size_t n = g.buf->shape.size();
  if (v.offset.size() != n || v.size.size() != n || v.step.size() != n || v.valid.size() != n)
    fail(op, "malformed view of '" + v.buf->name + "': per-dimension lists do not match rank " +
                 std::to_string(n));
  std::vector<int64_t> valid(n);
  g.base.resize(n);
  for (size_t d = 0; d < n; ++d) {
    g.base[d] = v.offset[d] ? eval_int(v.offset[d], "view offset") : 0;
    const int64_t ext = v.valid[d] ? eval_int(v.valid[d], "view valid extent") : v.size[d];
    valid[d] = std::clamp<int64_t>(ext, 0, v.size[d]);
  }
  std::vector<bool> listed(n, false);
  for (int d : v.dims) {
    if (d < 0 || size_t(d) >= n || listed[size_t(d)])
      fail(op, "malformed view of '" + v.buf->name + "': bad dims list");
    listed[size_t(d)] = true;
  }
  const int k = int(v.dims.size());
  if (k >= 1) g.cdim = v.dims[size_t(k - 1)];
  if (k >= 2) g.rdim = v.dims[size_t(k - 2)];
  bool empty = false;
  for (size_t d = 0; d < n; ++d) {
    if (int(d) == g.rdim || int(d) == g.cdim) continue;
    // Dropped dims and leading view dims select one index; more would not fit a 2-D tile.
    if (valid[d] == 0) empty = true;
    if (listed[d] && valid[d] > 1)
      fail(op, "view of '" + v.buf->name + "' has more than two dimensions of extent > 1");
  }
  g.rows = g.rdim >= 0 ? valid[size_t(g.rdim)] : 1;
  g.cols = g.cdim >= 0 ? valid[size_t(g.cdim)] : 1;
  if (empty) g.rows = g.cols = 0;
  g.rstep = g.rdim >= 0 ? v.step[size_t(g.rdim)] : 0;
  g.cstep = g.cdim >= 0 ? v.step[size_t(g.cdim)] : 0;
  return g;
}

// ---- element access -----------------------------------------------------------------------------

Num Machine::get(const Op& op, const Tile& t, int64_t r, int64_t c) const {
  if (r < 0 || c < 0 || r >= t.vr || c >= t.vc)
    fail(op, "read of '" + t.name + "'[" + std::to_string(r) + ", " + std::to_string(c) +
                 "] outside its valid region " + std::to_string(t.vr) + "x" + std::to_string(t.vc));
  const size_t k = size_t(r * t.C + c);
  if (races_.active()) {
    const std::string race = races_.access(&t.val[k], t.parallel_depth, false);
    if (!race.empty()) fail(op, race + ": " + tile_element(t, r, c));
  }
  if (!t.written[k])
    fail(op, "read of unwritten tile element '" + t.name + "'[" + std::to_string(r) + ", " +
                 std::to_string(c) + "]");
  return t.val[k];
}

void Machine::set_valid(const Op& op, Tile& t, int64_t vr, int64_t vc) const {
  if (vr < 0 || vc < 0 || vr > t.R || vc > t.C)
    fail(op, "valid region " + std::to_string(vr) + "x" + std::to_string(vc) + " does not fit tile '" +
                 t.name + "' (" + std::to_string(t.R) + "x" + std::to_string(t.C) + ")");
  t.vr = vr;
  t.vc = vc;
}

void Machine::put(const Op& op, Tile& t, int64_t r, int64_t c, const Num& v) const {
  if (r < 0 || c < 0 || r >= t.R || c >= t.C)
    fail(op, "out-of-bounds write of '" + t.name + "'[" + std::to_string(r) + ", " + std::to_string(c) +
                 "] (tile " + std::to_string(t.R) + "x" + std::to_string(t.C) + ")");
  const size_t k = size_t(r * t.C + c);
  if (races_.active()) {
    const std::string race = races_.access(&t.val[k], t.parallel_depth, true);
    if (!race.empty()) fail(op, race + ": " + tile_element(t, r, c));
  }
  t.val[k] = round_to(t.dtype, v);
  t.written[k] = 1;
}

int64_t Machine::global_address(const Op& op, const GView& v, int64_t i, int64_t j) const {
  const GlobalBuf& b = *v.buf;
  int64_t addr = 0;
  bool oob = false;
  const size_t n = b.shape.size();
  int64_t idx[16];
  std::vector<int64_t> big;
  int64_t* ix = idx;
  if (n > 16) {
    big.resize(n);
    ix = big.data();
  }
  for (size_t d = 0; d < n; ++d) {
    int64_t x = v.base[d];
    if (int(d) == v.rdim) x += i * v.rstep;
    if (int(d) == v.cdim) x += j * v.cstep;
    ix[d] = x;
    if (x < 0 || x >= b.shape[d]) oob = true;
    addr = b.external ? addr + x * b.strides[d] : addr * b.shape[d] + x;
  }
  if (oob) {
    std::string s = "out-of-bounds access " + b.name + "[";
    for (size_t d = 0; d < n; ++d) s += (d ? ", " : "") + std::to_string(ix[d]);
    fail(op, s + "] (shape " + shape_str(b.shape) + ")");
  }
  return addr;
}

Num Machine::gread(const Op& op, const GView& v, int64_t i, int64_t j) const {
  const int64_t a = global_address(op, v, i, j);
  const GlobalBuf& b = *v.buf;
  if (races_.active()) {
    const std::string race = races_.access(element_key(b, a), b.parallel_depth, false);
    if (!race.empty()) fail(op, race + ": " + global_element(b, a));
  }
  if (b.external) return load_scalar(b.dtype, b.data + a * dtype_bytes(b.dtype));
  if (!b.written[size_t(a)])
    fail(op, "read of unwritten element " + std::to_string(a) + " (row-major) of scratch buffer '" + b.name +
                 "'");
  return b.val[size_t(a)];
}

void Machine::gwrite(const Op& op, const GView& v, int64_t i, int64_t j, const Num& x) const {
  const int64_t a = global_address(op, v, i, j);
  GlobalBuf& b = *v.buf;
  if (races_.active()) {
    const std::string race = races_.access(element_key(b, a), b.parallel_depth, true);
    if (!race.empty()) fail(op, race + ": " + global_element(b, a));
  }
  const Num r = round_to(b.dtype, x);
  if (b.external) {
    store_scalar(b.dtype, b.data + a * dtype_bytes(b.dtype), r);
  } else {
    b.val[size_t(a)] = r;
    b.written[size_t(a)] = 1;
  }
}

void interpret(const Program& tile_program, const runtime::RunArgs& args, ExecObserver* observer) {
  Machine m(tile_program, args, observer);
  m.run();
}

}  // namespace pypto::interp
