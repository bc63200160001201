// Buffers, views, statement constructors and structural identity of programs.
#include "ir/ir.h"

#include "ir/structural.h"

namespace pypto::ir {

int64_t Buffer::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

Expr Buffer::extent(int d) const {
  if (is_dynamic(d)) return dyn[size_t(d)];
  return int_imm(shape[size_t(d)]);
}

size_t Program::caller_scalars() const {
  size_t n = scalars.size();
  while (n > 0 && scalars[n - 1].is_dim_symbol()) --n;
  return n;
}

std::vector<int64_t> dim_symbol_values(const Program& p, const std::vector<std::vector<int64_t>>& shapes) {
  std::vector<int64_t> out;
  for (const auto& s : p.scalars)
    if (s.is_dim_symbol()) out.push_back(shapes.at(size_t(s.param)).at(size_t(s.dim)));
  return out;
}

ScalarEnv dim_symbol_env(const Program& p, const std::vector<std::vector<int64_t>>& input_shapes) {
  std::vector<std::vector<int64_t>> shapes(p.params.size());
  size_t k = 0;
  for (size_t i = 0; i < p.params.size(); ++i)
    if (p.params[i]->kind != BufferKind::Output) {
      if (k >= input_shapes.size()) throw Error("output_shapes: too few input shapes");
      shapes[i] = input_shapes[k++];
      if (shapes[i].size() != size_t(p.params[i]->rank()))
        throw Error("output_shapes: input '" + p.params[i]->name + "' has the wrong rank");
    }
  ScalarEnv env;
  for (const auto& s : p.scalars)
    if (s.is_dim_symbol()) {
      const auto& sh = shapes[size_t(s.param)];
      if (size_t(s.dim) >= sh.size())
        throw Error("output_shapes: the symbol %" + s.name + " is bound by an output");
      env[s.name] = ScalarValue{false, sh[size_t(s.dim)], 0};
    }
  return env;
}

std::vector<std::vector<int64_t>> output_shapes(const Program& p,
                                                const std::vector<std::vector<int64_t>>& input_shapes) {
  ScalarEnv env = dim_symbol_env(p, input_shapes);
  std::vector<std::vector<int64_t>> out;
  for (const auto& b : p.params)
    if (b->kind == BufferKind::Output) out.push_back(runtime_shape(*b, env));
  return out;
}

std::vector<std::vector<int64_t>> param_shapes(
    const Program& p, const std::vector<std::optional<std::vector<int64_t>>>& input_shapes) {
  std::vector<const std::optional<std::vector<int64_t>>*> known(p.params.size(), nullptr);
  size_t k = 0;
  for (size_t i = 0; i < p.params.size(); ++i)
    if (p.params[i]->kind != BufferKind::Output) {
      if (k >= input_shapes.size()) throw Error("param_shapes: too few input shapes");
      known[i] = &input_shapes[k++];
      if (*known[i] && (*known[i])->size() != size_t(p.params[i]->rank()))
        throw Error("param_shapes: input '" + p.params[i]->name + "' has the wrong rank");
    }
  ScalarEnv env;
  for (const auto& s : p.scalars)
    if (s.is_dim_symbol()) {
      const auto* sh = known[size_t(s.param)];
      if (!sh || !*sh)
        throw Error("param_shapes: the shape of '" + p.params[size_t(s.param)]->name +
                    "', which binds the symbol %" + s.name + ", is not known");
      env[s.name] = ScalarValue{false, (**sh)[size_t(s.dim)], 0};
    }
  std::vector<std::vector<int64_t>> out;
  for (size_t i = 0; i < p.params.size(); ++i)
    out.push_back(known[i] && *known[i] ? **known[i] : runtime_shape(*p.params[i], env));
  return out;
}

VarBounds dim_symbol_bounds(const Program& p) {
  VarBounds vb;
  for (const auto& s : p.scalars)
    if (s.is_dim_symbol()) vb[s.name] = Interval{0, kDynamicBound};
  return vb;
}

std::vector<int64_t> runtime_shape(const Buffer& b, const ScalarEnv& env) {
  std::vector<int64_t> s = b.shape;
  for (int d = 0; d < b.rank(); ++d)
    if (b.is_dynamic(d)) {
      s[size_t(d)] = eval(b.dyn[size_t(d)], env).i;
      if (s[size_t(d)] < 0)  // (f32[100, -1] is a dynamic dim of a constant expression; make fuzz)
        throw Error("%" + b.name + ": dim " + std::to_string(d) + " (" + to_string(b.dyn[size_t(d)]) +
                    ") is " + std::to_string(s[size_t(d)]) + ", a negative extent");
    }
  return s;
}

View View::whole(const BufferRef& b) {
  View v;
  v.buf = b;
  int r = b ? b->rank() : 0;
  for (int d = 0; d < r; ++d) {
    v.offset.push_back(int_imm(0));
    v.size.push_back(b->shape[size_t(d)]);
    v.step.push_back(1);
    v.valid.push_back(b->extent(d));
    v.dims.push_back(d);
  }
  return v;
}

std::vector<int64_t> View::shape() const {
  std::vector<int64_t> s;
  for (int d : dims) s.push_back(size.at(size_t(d)));
  return s;
}

std::vector<Expr> View::valid_shape() const {
  std::vector<Expr> s;
  for (int d : dims) s.push_back(valid.at(size_t(d)));
  return s;
}

bool View::tiles_dim(int d, const std::string& v, int64_t extent) const {
  const size_t k = size_t(d);
  if (k >= offset.size() || !expr_equal(offset[k], var(v)) || step[k] != 1) return false;
  if (expr_equal(valid[k], min(int_imm(size[k]), int_imm(extent) - var(v)))) return true;
  auto c = as_int(valid[k]);
  return c && *c == size[k] && extent % size[k] == 0;
}

bool View::is_whole() const {
  if (!buf) return false;
  size_t r = buf->shape.size();
  if (offset.size() != r || size.size() != r || step.size() != r || valid.size() != r || dims.size() != r)
    return false;
  for (size_t d = 0; d < r; ++d) {
    auto off = as_int(offset[d]);
    auto val = as_int(valid[d]);
    bool full = buf->is_dynamic(int(d)) ? expr_equal(valid[d], buf->dyn[d]) : (val && *val == buf->shape[d]);
    if (!off || *off != 0 || size[d] != buf->shape[d] || step[d] != 1 || !full ||
        valid[d]->dtype != DType::I64 || offset[d]->dtype != DType::I64 || dims[d] != int(d))
      return false;
  }
  return true;
}

namespace {
Stmt make(StmtKind k) {
  auto s = std::make_shared<StmtNode>();
  s->kind = k;
  return s;
}
}  // namespace

Stmt seq(std::vector<Stmt> body) {
  auto s = make(StmtKind::Seq);
  s->body = std::move(body);
  return s;
}

Stmt for_loop(const std::string& var, Expr lo, Expr hi, Expr step, std::vector<Stmt> body, LoopKind kind) {
  auto s = make(StmtKind::For);
  s->var = var;
  s->lo = std::move(lo);
  s->hi = std::move(hi);
  s->step = step ? std::move(step) : int_imm(1);
  s->body = std::move(body);
  s->loop_kind = kind;
  return s;
}

Stmt if_then(Expr cond, std::vector<Stmt> then_body, std::vector<Stmt> else_body) {
  auto s = make(StmtKind::If);
  s->cond = std::move(cond);
  s->body = std::move(then_body);
  s->orelse = std::move(else_body);
  return s;
}

Stmt let(const std::string& var, Expr value) {
  auto s = make(StmtKind::Let);
  s->var = var;
  s->value = std::move(value);
  return s;
}

Stmt alloc(BufferRef buffer) {
  auto s = make(StmtKind::Alloc);
  s->buffer = std::move(buffer);
  return s;
}

Stmt op_stmt(Op op) {
  auto s = make(StmtKind::OpStmt);
  s->op = std::move(op);
  return s;
}

bool structural_equal(const Program& a, const Program& b) { return structural::equal(a, b); }
size_t structural_hash(const Program& p) { return structural::hash(p); }

}  // namespace pypto::ir
