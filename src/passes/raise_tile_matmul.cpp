// Tile loops computing a whole matrix product become one TMATMUL (see raise_tile_matmul.h).
#include "passes/raise_tile_matmul.h"

#include <optional>

#include "ir/mutator.h"

namespace pypto::passes {
using namespace ir;

namespace {

// A loop `for var = 0 to hi step step` with constant bounds: (hi, step).
std::optional<std::pair<int64_t, int64_t>> counted_loop(const Stmt& s) {
  if (!s || s->kind != StmtKind::For) return std::nullopt;
  auto lo = as_int(s->lo), hi = as_int(s->hi), step = as_int(s->step);
  if (!lo || !hi || !step || *lo != 0 || *step <= 0) return std::nullopt;
  return std::make_pair(*hi, *step);
}

const Op* op_of(const Stmt& s, Opcode code) {
  return s && s->kind == StmtKind::OpStmt && s->op.code == code ? &s->op : nullptr;
}

const View* view_arg(const Op& op, size_t k) {
  return k < op.args.size() ? std::get_if<View>(&op.args[k]) : nullptr;
}

// The loop that walks one dimension of a window: its variable, extent and step.
struct Walk {
  std::string var;
  int64_t extent, step;
};

// A rank-2 f32 window of a static global buffer of shape rows x cols, in its own dimension order,
// walked by the loops r (rows) and c (columns).
bool tiled_window(const View& v, const Walk& r, const Walk& c) {
  const Buffer& b = *v.buf;
  if (b.space != Space::Global || b.dtype != DType::F32 || b.rank() != 2 || b.is_dynamic()) return false;
  if (v.dims != std::vector<int>{0, 1} || b.shape[0] != r.extent || b.shape[1] != c.extent) return false;
  return v.size[0] == r.step && v.size[1] == c.step && v.tiles_dim(0, r.var, r.extent) &&
         v.tiles_dim(1, c.var, c.extent);
}

class Raise : public StmtMutator {
 public:
  explicit Raise(const TileSizes& sizes) : sizes_(sizes) {}

 private:
  const TileSizes& sizes_;

  Stmt mutate_for(const Stmt& s) override {
    if (auto product = match(s)) return product;
    return StmtMutator::mutate_for(s);
  }

  // The single TMATMUL C, A, B that the nest at s computes, or null.
  Stmt match(const Stmt& outer) const {
    auto lo = counted_loop(outer);
    if (!lo || outer->body.size() != 1) return nullptr;
    const Stmt& inner = outer->body[0];
    auto li = counted_loop(inner);
    if (!li || inner->body.size() != 4 || inner->var == outer->var) return nullptr;
    const auto& b = inner->body;
    // alloc t; TEXPANDS t, 0; for k { TMATMUL_ACC t, A[..], B[..] }; TMOV C[..], t
    if (b[0]->kind != StmtKind::Alloc) return nullptr;
    const BufferRef& t = b[0]->buffer;
    if (t->kind != BufferKind::Temp || t->dtype != DType::F32 || t->rank() != 2 || t->is_dynamic())
      return nullptr;
    const Op* zero = op_of(b[1], Opcode::TEXPANDS);
    if (!zero || zero->args.size() != 2 || !view_arg(*zero, 0) || view_arg(*zero, 0)->buf != t ||
        !view_arg(*zero, 0)->is_whole())
      return nullptr;
    auto z = std::get_if<Expr>(&zero->args[1]);
    if (!z || !is_const(*z) || (as_int(*z) ? *as_int(*z) != 0 : (*z)->fval != 0.0)) return nullptr;
    auto lk = counted_loop(b[2]);
    if (!lk || b[2]->body.size() != 1 || b[2]->var == outer->var || b[2]->var == inner->var) return nullptr;
    const Op* mm = op_of(b[2]->body[0], Opcode::TMATMUL_ACC);
    const Op* store = op_of(b[3], Opcode::TMOV);
    if (!mm || !store || mm->args.size() != 3 || store->args.size() != 2) return nullptr;
    const View *acc = view_arg(*mm, 0), *a = view_arg(*mm, 1), *bm = view_arg(*mm, 2);
    const View *c = view_arg(*store, 0), *src = view_arg(*store, 1);
    if (!acc || !a || !bm || !c || !src || acc->buf != t || !acc->is_whole() || src->buf != t ||
        !src->is_whole())
      return nullptr;
    // Which outer loop walks the rows: the one A's row offset names.
    Walk wo{outer->var, lo->first, lo->second}, wi{inner->var, li->first, li->second};
    Walk wk{b[2]->var, lk->first, lk->second};
    const bool rows_outer = !a->offset.empty() && expr_equal(a->offset[0], var(outer->var));
    const Walk &wm = rows_outer ? wo : wi, &wn = rows_outer ? wi : wo;
    if (t->shape[0] != wm.step || t->shape[1] != wn.step) return nullptr;
    if (!tiled_window(*a, wm, wk) || !tiled_window(*bm, wk, wn) || !tiled_window(*c, wm, wn)) return nullptr;
    if (a->buf == t || bm->buf == t || c->buf == a->buf || c->buf == bm->buf) return nullptr;
    Op product{Opcode::TMATMUL, {View::whole(c->buf), View::whole(a->buf), View::whole(bm->buf)}};
    if (!memory_matmul(product, sizes_)) return nullptr;
    return op_stmt(std::move(product));
  }
};

}  // namespace

Program raise_tile_matmul(const Program& p, const TileSizes& sizes) {
  if (!sizes.memory_matmul) return p;
  return Raise(sizes).mutate_program(p);
}

}  // namespace pypto::passes
