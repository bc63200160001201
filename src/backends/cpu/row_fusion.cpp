#include "backends/cpu/row_fusion.h"

#include "backends/cpu/row_fusion_chain.h"
#include "backends/cpu/row_fusion_grad.h"
#include "backends/cpu/row_match.h"
#include "ir/visitor.h"

#include <algorithm>
#include <cctype>
#include <map>

namespace pypto::cpu {
using namespace ir;

namespace {

// A pattern step: an opcode and its operands as variables. Upper case: an R x C tile; lower
// case: an R x 1 tile (one value per row); '%': a 1 x C tile (a row broadcast down the tile);
// '$': a scalar. Distinct tile variables must be distinct buffers.
struct Step {
  Opcode code;
  std::vector<std::string> vars;
};
struct Pattern {
  std::string fn;
  std::vector<Step> core;
  std::string src, dst;             // the row source and the result
  std::vector<std::string> dead;    // R x C temporaries the call does not write
  std::vector<std::string> params;  // per-row tiles and scalars after (dst, src), in call order
  bool affine = false;              // an optional `* %w` then `+ %b` tail on dst
  // Full tiles that may be one buffer (the run computed in place: its row function reads each
  // element of src before writing it to dst); any other two variables are distinct buffers.
  std::vector<std::string> in_place = {};
};

// The softmax sequence after a first step (the scores' scale), its result in E.
std::vector<Step> softmax_after(Step first) {
  return {first,
          {Opcode::TROWMAX, {"m", "E"}},
          {Opcode::TSUB, {"E", "E", "m"}},
          {Opcode::TEXP, {"E", "E"}},
          {Opcode::TROWSUM, {"s", "E"}},
          {Opcode::TRECIP, {"s", "s"}},
          {Opcode::TMUL, {"E", "E", "s"}}};
}

const std::vector<Pattern>& patterns() {
  static const std::vector<Pattern> p = {
      // attention's scores scaled by 1/sqrt(d) first: the scale applied as the passes read the row
      {"mul_softmax_rows",
       softmax_after({Opcode::TMUL, {"E", "X", "$f"}}),
       "X",
       "E",
       {},
       {"m", "s", "$f"},
       false,
       {"X", "E"}},
      {"div_softmax_rows",
       softmax_after({Opcode::TDIV, {"E", "X", "$d"}}),
       "X",
       "E",
       {},
       {"m", "s", "$d"},
       false,
       {"X", "E"}},
      {"softmax_rows",
       {{Opcode::TROWMAX, {"m", "X"}},
        {Opcode::TSUB, {"E", "X", "m"}},
        {Opcode::TEXP, {"E", "E"}},
        {Opcode::TROWSUM, {"s", "E"}},
        {Opcode::TRECIP, {"s", "s"}},
        {Opcode::TMUL, {"E", "E", "s"}}},
       "X",
       "E",
       {},
       {"m", "s"},
       false,
       {"X", "E"}},  // attention's scores: softmax_row's passes read x before writing d
      {"log_softmax_rows",
       {{Opcode::TROWMAX, {"m", "X"}},
        {Opcode::TSUB, {"Y", "X", "m"}},
        {Opcode::TEXP, {"E", "Y"}},
        {Opcode::TROWSUM, {"s", "E"}},
        {Opcode::TLOG, {"s", "s"}},
        {Opcode::TSUB, {"Y", "Y", "s"}}},
       "X",
       "Y",
       {"E"},
       {"m", "s"},
       false,
       {"X", "Y"}},  // the last pass reads x before writing y
      {"rms_norm_rows",
       {{Opcode::TMUL, {"Y", "X", "X"}},
        {Opcode::TROWSUM, {"r", "Y"}},
        {Opcode::TDIV, {"r", "r", "$n"}},
        {Opcode::TADD, {"r", "r", "$eps"}},
        {Opcode::TRSQRT, {"r", "r"}},
        {Opcode::TMUL, {"Z", "X", "r"}}},
       "X",
       "Z",
       {"Y"},
       {"r", "$n", "$eps"},
       true},
      {"layer_norm_rows",
       {{Opcode::TSUB, {"Z", "X", "c"}},  // the shift (lower_composites.cpp `centred`)
        {Opcode::TROWSUM, {"u", "Z"}},
        {Opcode::TDIV, {"u", "u", "$n"}},
        {Opcode::TSUB, {"Z", "Z", "u"}},
        {Opcode::TMUL, {"Y", "Z", "Z"}},
        {Opcode::TROWSUM, {"r", "Y"}},
        {Opcode::TDIV, {"r", "r", "$n2"}},
        {Opcode::TADD, {"r", "r", "$eps"}},
        {Opcode::TRSQRT, {"r", "r"}},
        {Opcode::TMUL, {"Z", "Z", "r"}}},
       "X",
       "Z",
       {"Y"},
       {"c", "u", "r", "$n", "$n2", "$eps"},
       true},
  };
  return p;
}

}  // namespace

// The operand checks row_fusion_grad.cpp shares (row_fusion.h).
namespace row_match {
const Op* op_at(const std::vector<Stmt>& body, size_t i) {
  if (i >= body.size() || !body[i] || body[i]->kind != StmtKind::OpStmt) return nullptr;
  return &body[i]->op;
}

const View* view_of(const Op& op, size_t k) {
  return k < op.args.size() ? std::get_if<View>(&op.args[k]) : nullptr;
}

bool is_f32_tile(const View& v) {
  return v.buf && v.buf->space != Space::Global && v.buf->dtype == DType::F32 && v.buf->shape.size() == 2 &&
         v.is_whole();
}

// Whether any statement of body[from..] (nested ones included) names buffer b.
bool mentions(const Stmt& s, const Buffer* b) {
  if (!s) return false;
  if (s->kind == StmtKind::OpStmt)
    for (const Operand& a : s->op.args)
      if (const View* v = std::get_if<View>(&a); v && v->buf.get() == b) return true;
  for (const Stmt& c : s->body)
    if (mentions(c, b)) return true;
  for (const Stmt& c : s->orelse)
    if (mentions(c, b)) return true;
  return false;
}
namespace {
// How statements first touch what tile b holds before them: not at all, by a TLOAD that replaces
// it (the whole tile its destination, no source naming it), or otherwise (a read, as far as this
// knows). A loop whose body replaces it first may run no times: the statements after it decide.
enum class FirstUse { None, Replace, Other };
FirstUse first_use(const std::vector<Stmt>& stmts, size_t from, const Buffer* b);
FirstUse first_use(const Stmt& s, const Buffer* b) {
  if (!s) return FirstUse::None;
  switch (s->kind) {
    case StmtKind::OpStmt: {  // (each operand looked at once: no walk of the statement beforehand)
      bool in_dst = false, in_sources = false;
      for (size_t k = 0; k < s->op.args.size(); ++k)
        if (const View* v = view_of(s->op, k); v && v->buf.get() == b) (k == 0 ? in_dst : in_sources) = true;
      if (!in_dst && !in_sources) return FirstUse::None;
      return s->op.code == Opcode::TLOAD && in_dst && !in_sources && view_of(s->op, 0)->is_whole()
                 ? FirstUse::Replace
                 : FirstUse::Other;
    }
    case StmtKind::For:
      return first_use(s->body, 0, b) == FirstUse::Other ? FirstUse::Other : FirstUse::None;
    case StmtKind::Seq:
    case StmtKind::Let:
      return first_use(s->body, 0, b);
    default:
      return mentions(s, b) ? FirstUse::Other : FirstUse::None;
  }
}
FirstUse first_use(const std::vector<Stmt>& stmts, size_t from, const Buffer* b) {
  for (size_t j = from; j < stmts.size(); ++j)
    if (FirstUse u = first_use(stmts[j], b); u != FirstUse::None) return u;
  return FirstUse::None;
}
}  // namespace

// b is allocated in this body (so it is not carried between iterations of an enclosing loop) and
// nothing from body[from] on reads what it holds there (a TLOAD may replace it first: a row
// reduction's tile, loaded again for each block of columns by the loop after it).
bool dead_from(const std::vector<Stmt>& body, size_t from, const Buffer* b) {
  bool here = LoopLocalScope::holds(body, b);
  for (const Stmt& s : body) here |= s && s->kind == StmtKind::Alloc && s->buffer.get() == b;
  return here && first_use(body, from, b) != FirstUse::Other;
}

bool global_f32(const Op& op, size_t k) {
  const View* v = view_of(op, k);
  return v && v->buf && v->buf->space == Space::Global && v->buf->dtype == DType::F32;
}

const std::map<Opcode, std::string>& unary_functors() {
  static const std::map<Opcode, std::string> ops = {
      {Opcode::TEXP, "OpExp"},         {Opcode::TLOG, "OpLog"},
      {Opcode::TSQRT, "OpSqrt"},       {Opcode::TRSQRT, "OpRsqrt"},
      {Opcode::TRECIP, "OpRecip"},     {Opcode::TTANH, "OpTanh"},
      {Opcode::TSIGMOID, "OpSigmoid"}, {Opcode::TERF, "OpErf"},
      {Opcode::TGELU, "OpGelu"},       {Opcode::TGELU_TANH, "OpGeluTanh"},
      {Opcode::TSILU, "OpSilu"},       {Opcode::TNEG, "OpNeg"},
      {Opcode::TABS, "OpAbs"},         {Opcode::TRELU, "OpRelu"}};
  return ops;
}
const std::map<Opcode, std::string>& binary_functors() {
  static const std::map<Opcode, std::string> ops = {{Opcode::TADD, "OpAdd"}, {Opcode::TSUB, "OpSub"},
                                                    {Opcode::TMUL, "OpMul"}, {Opcode::TDIV, "OpDiv"},
                                                    {Opcode::TMAX, "OpMax"}, {Opcode::TMIN, "OpMin"}};
  return ops;
}
}  // namespace row_match

namespace {
using namespace row_match;

struct Matcher {
  std::vector<std::string> in_place;  // Pattern::in_place
  std::map<std::string, const Buffer*> tiles;
  std::map<std::string, RowFusion::Arg> where;  // first occurrence of each variable
  std::vector<int64_t> shape;                   // R, C

  bool bind(const std::string& var, const Op& op, size_t k, size_t stmt) {
    if (var[0] == '$') {
      if (k >= op.args.size() || !std::holds_alternative<Expr>(op.args[k])) return false;
      if (!where.count(var)) where[var] = {RowFusion::Kind::Scalar, stmt, k};
      return true;
    }
    const View* v = view_of(op, k);
    if (!v || !is_f32_tile(*v)) return false;
    const std::vector<int64_t>& s = v->buf->shape;
    const bool full = var[0] >= 'A' && var[0] <= 'Z';
    if (full && shape.empty()) shape = s;
    if (shape.empty()) return false;  // the pattern names a full tile first
    const std::vector<int64_t> want = full            ? shape
                                      : var[0] == '%' ? std::vector<int64_t>{1, shape[1]}
                                                      : std::vector<int64_t>{shape[0], 1};
    if (s != want) return false;
    auto it = tiles.find(var);
    if (it != tiles.end()) return it->second == v->buf.get();
    auto shares = [&](const std::string& a) { return std::count(in_place.begin(), in_place.end(), a) > 0; };
    for (const auto& [name, b] : tiles)
      if (b == v->buf.get() && !(shares(name) && shares(var))) return false;
    tiles[var] = v->buf.get();
    where[var] = {var[0] == '%' ? RowFusion::Kind::RowData : RowFusion::Kind::Tile, stmt, k};
    return true;
  }
  std::vector<size_t> hoisted;  // TLOADs inside the run into tiles of no step so far

  // Matches st at body[i + n], first passing over TLOADs into tiles the run has not named yet:
  // the call comes after them (they read global memory that nothing in the run writes before
  // its final TSTORE, and write tiles that the steps before them do not use).
  bool step_at(const Step& st, const std::vector<Stmt>& body, size_t i, size_t& n) {
    size_t k = n;
    for (const Op* op = op_at(body, i + k); op && op->code == Opcode::TLOAD; op = op_at(body, i + ++k)) {
      const View* d = view_of(*op, 0);
      if (!d || !d->buf || d->buf->space == Space::Global) break;
      bool named = false;
      for (const auto& [var, b] : tiles) named |= b == d->buf.get();
      if (named) break;
    }
    if (!step(st, body, i, k)) return false;
    for (size_t j = n; j < k; ++j) hoisted.push_back(j);
    n = k + 1;
    return true;
  }
  bool step(const Step& st, const std::vector<Stmt>& body, size_t i, size_t stmt) {
    const Op* op = op_at(body, i + stmt);
    if (!op || op->code != st.code || op->args.size() != st.vars.size()) return false;
    for (int full = 1; full >= 0; --full)  // full tiles first: they fix R and C
      for (size_t k = 0; k < st.vars.size(); ++k)
        if (bool(std::isupper(static_cast<unsigned char>(st.vars[k][0]))) == bool(full) &&
            !bind(st.vars[k], *op, k, stmt))
          return false;
    return true;
  }
};

std::optional<RowFusion> match_at(const Pattern& p, const std::vector<Stmt>& body, size_t i) {
  // A TLOAD of the source first: the global form, if the result's TSTORE follows.
  const Op* load = op_at(body, i);
  const size_t first = load && load->code == Opcode::TLOAD ? 1 : 0;
  Matcher m;
  m.in_place = p.in_place;
  if (first) {
    const View* x = view_of(*load, 0);
    if (!x || !is_f32_tile(*x) || !global_f32(*load, 1)) return std::nullopt;
    m.shape = x->buf->shape;
    m.tiles[p.src] = x->buf.get();
    m.where[p.src] = {RowFusion::Kind::Tile, 0, 0};
  }
  size_t n = first;
  for (const Step& st : p.core)  // the plain form starts at its first step
    if (!(n == 0 ? m.step(st, body, i, n++) : m.step_at(st, body, i, n))) return std::nullopt;
  RowFusion f;
  f.fn = p.fn;
  auto arg = [&](const std::string& v) { return m.where.at(v); };
  std::optional<RowFusion::Arg> w, b;
  if (p.affine) {
    if (m.step_at({Opcode::TMUL, {p.dst, p.dst, "%w"}}, body, i, n)) w = arg("%w");
    if (m.step_at({Opcode::TADD, {p.dst, p.dst, "%b"}}, body, i, n)) b = arg("%b");
  }
  for (const std::string& d : p.dead)
    if (!dead_from(body, i + n, m.tiles.at(d))) return std::nullopt;
  const Op* store = op_at(body, i + n);
  f.global = first && store && store->code == Opcode::TSTORE && global_f32(*store, 0) && view_of(*store, 1) &&
             view_of(*store, 1)->buf.get() == m.tiles.at(p.dst) &&
             dead_from(body, i + n + 1, m.tiles.at(p.dst)) && dead_from(body, i + n + 1, m.tiles.at(p.src));
  if (first && !f.global) return std::nullopt;  // the plain form starts after the TLOAD
  if (f.global) {
    f.args = {{RowFusion::Kind::Global, n, 0}, {RowFusion::Kind::Global, 0, 1}, arg(p.src), arg(p.dst)};
    ++n;
  } else {
    f.args = {arg(p.dst), arg(p.src)};
  }
  for (const std::string& v : p.params) f.args.push_back(arg(v));
  if (p.affine) {
    f.args.push_back(w ? *w : RowFusion::Arg{RowFusion::Kind::Null});
    f.args.push_back(b ? *b : RowFusion::Arg{RowFusion::Kind::Null});
  }
  f.count = n;
  f.hoisted = m.hoisted;
  for (size_t h : m.hoisted) {
    const Buffer* t = view_of(*op_at(body, i + h), 0)->buf.get();
    bool row_only = false;  // the tile is %w or %b, and no other step of the run names it
    for (const char* v : {"%w", "%b"}) row_only |= m.tiles.count(v) && m.tiles.at(v) == t;
    for (const auto& [var, b] : m.tiles) row_only &= b != t || var[0] == '%';
    if (row_only && dead_from(body, i + n, t)) f.in_place.push_back(h);
  }
  return f;
}

// TLOAD a, ga; TLOAD b, gb; <binary> y, a, b; TSTORE gy, y, with a, b and y dead afterwards.
std::optional<RowFusion> match_binary(const std::vector<Stmt>& body, size_t i) {
  const std::map<Opcode, std::string>& ops = binary_functors();
  const Op *l0 = op_at(body, i), *l1 = op_at(body, i + 1), *op = op_at(body, i + 2), *st = op_at(body, i + 3);
  if (!l0 || !l1 || !op || !st || l0->code != Opcode::TLOAD || l1->code != Opcode::TLOAD ||
      st->code != Opcode::TSTORE || !ops.count(op->code) || op->args.size() != 3)
    return std::nullopt;
  if (!global_f32(*l0, 1) || !global_f32(*l1, 1) || !global_f32(*st, 0)) return std::nullopt;
  const View *t0 = view_of(*l0, 0), *t1 = view_of(*l1, 0), *y = view_of(*op, 0), *p = view_of(*op, 1),
             *q = view_of(*op, 2), *s = view_of(*st, 1);
  for (const View* v : {t0, t1, y, p, q, s})
    if (!v || !is_f32_tile(*v)) return std::nullopt;
  const auto shape = y->buf->shape;
  if (shape[1] < 2 || t0->buf->shape != shape || t1->buf->shape != shape) return std::nullopt;
  const Buffer *a = t0->buf.get(), *b = t1->buf.get(), *d = y->buf.get();
  if (a == b || a == d || b == d || s->buf.get() != d) return std::nullopt;
  if (!((p->buf.get() == a && q->buf.get() == b) || (p->buf.get() == b && q->buf.get() == a)))
    return std::nullopt;
  for (const Buffer* t : {a, b, d})
    if (!dead_from(body, i + 4, t)) return std::nullopt;
  const size_t pl = p->buf.get() == a ? 0 : 1;  // the TLOAD of the first operand
  RowFusion f;
  f.fn = "binary_rows";
  f.count = 4;
  f.global = true;
  using K = RowFusion::Kind;
  f.args = {{K::Global, 3, 0},
            {K::Global, pl, 1},
            {K::Global, 1 - pl, 1},
            {K::Tile, pl, 0},
            {K::Tile, 1 - pl, 0},
            {K::Tile, 2, 0},
            {K::Text, 0, 0, "pto::detail::" + ops.at(op->code) + "{}"}};
  return f;
}

// TLOAD a, ga; <op> y, a [, scalar]; TSTORE gy, y: a float unary instruction, or a binary one whose
// other operand is a scalar (either side), with a and y dead afterwards (y may be a).
std::optional<RowFusion> match_map(const std::vector<Stmt>& body, size_t i) {
  const std::map<Opcode, std::string>& unary = unary_functors();
  const std::map<Opcode, std::string>& binary = binary_functors();
  const Op *ld = op_at(body, i), *op = op_at(body, i + 1), *st = op_at(body, i + 2);
  if (!ld || !op || !st || ld->code != Opcode::TLOAD || st->code != Opcode::TSTORE) return std::nullopt;
  if (!global_f32(*ld, 1) || !global_f32(*st, 0)) return std::nullopt;
  const bool is_unary = unary.count(op->code) && op->args.size() == 2;
  const bool is_binary = binary.count(op->code) && op->args.size() == 3;
  if (!is_unary && !is_binary) return std::nullopt;
  size_t src = 1, scalar = 0;  // the tile operand's position, the scalar's
  if (is_binary) {
    const bool left = std::holds_alternative<Expr>(op->args[1]),
               right = std::holds_alternative<Expr>(op->args[2]);
    if (left == right) return std::nullopt;
    src = left ? 2 : 1;
    scalar = left ? 1 : 2;
  }
  const View *a = view_of(*ld, 0), *y = view_of(*op, 0), *x = view_of(*op, src), *s = view_of(*st, 1);
  for (const View* v : {a, y, x, s})
    if (!v || !is_f32_tile(*v)) return std::nullopt;
  if (y->buf->shape[1] < 2 || a->buf->shape != y->buf->shape || x->buf != a->buf || s->buf != y->buf)
    return std::nullopt;
  for (const Buffer* t : {a->buf.get(), y->buf.get()})
    if (!dead_from(body, i + 3, t)) return std::nullopt;
  RowFusion f;
  f.count = 3;
  f.global = true;
  using K = RowFusion::Kind;
  f.args = {{K::Global, 2, 0}, {K::Global, 0, 1}, {K::Tile, 0, 0}, {K::Tile, 1, 0}};
  if (is_unary) {
    f.fn = "unary_rows";
    f.args.push_back({K::Text, 0, 0, "pto::detail::" + unary.at(op->code) + "{}"});
  } else {
    f.fn = "scalar_rows";  // the scalar as the instruction converts it (to the tile's float)
    f.args.push_back({K::Text, 0, 0, "pto::detail::" + binary.at(op->code) + "{}"});
    f.args.push_back({K::Scalar, 1, scalar});
    f.args.push_back(
        {K::Text, 0, 0, scalar == 1 ? "pto::fused::ScalarFirst{}" : "pto::fused::ScalarSecond{}"});
  }
  return f;
}

// TLOAD x, gx; TROWSUM / TROWMAX / TROWMIN r, x (r an f32 tile) or TROWARGMAX / TROWARGMIN r, x
// (r an i32 / i64 tile; then maybe TROWMAX / TROWMIN e, x too: a block of a dynamic-width
// argmax), x dead afterwards: the rows reduced in place (rows.hpp, fused::reduce_rows,
// fused::arg_extreme_rows).
std::optional<RowFusion> match_reduce(const std::vector<Stmt>& body, size_t i) {
  static const std::map<Opcode, std::string> reductions = {
      {Opcode::TROWSUM, "reduce_rows<pto::detail::SumR>"},
      {Opcode::TROWMAX, "reduce_rows<pto::detail::MaxR>"},
      {Opcode::TROWMIN, "reduce_rows<pto::detail::MinR>"},
      {Opcode::TROWARGMAX, "arg_extreme_rows<true>"},
      {Opcode::TROWARGMIN, "arg_extreme_rows<false>"}};
  const Op *ld = op_at(body, i), *op = op_at(body, i + 1);
  if (!ld || !op || ld->code != Opcode::TLOAD || !reductions.count(op->code) || op->args.size() != 2 ||
      !global_f32(*ld, 1))
    return std::nullopt;
  const View *x = view_of(*ld, 0), *src = view_of(*op, 1), *r = view_of(*op, 0);
  const bool arg = is_arg_reduction(op->code);
  auto index_tile = [](const View& v) {
    return v.buf->space != Space::Global && v.is_whole() && v.buf->rank() == 2 &&
           (v.buf->dtype == DType::I32 || v.buf->dtype == DType::I64);
  };
  if (!x || !src || !r || !is_f32_tile(*x) || !(arg ? index_tile(*r) : is_f32_tile(*r)) ||
      src->buf != x->buf || r->buf == x->buf)
    return std::nullopt;
  using K = RowFusion::Kind;
  RowFusion f;
  f.fn = reductions.at(op->code);
  f.count = 2;
  f.args = {{K::Tile, 1, 0}, {K::Global, 0, 1}, {K::Tile, 0, 0}};
  if (const Op* ex = op_at(body, i + 2);
      arg && ex && ex->code == (op->code == Opcode::TROWARGMAX ? Opcode::TROWMAX : Opcode::TROWMIN)) {
    const View *e = view_of(*ex, 0), *es = view_of(*ex, 1);
    if (e && es && es->buf == x->buf && is_f32_tile(*e) && e->buf != x->buf && e->buf != r->buf) {
      f.count = 3;
      f.args.push_back({K::Tile, 2, 0});
    }
  }
  if (!dead_from(body, i + f.count, x->buf.get())) return std::nullopt;
  return f;
}

// TCVT y, a (a whole int32 tile); TMUL y, y, c (R x 1); TLOADs of other tiles; TMUL y, y, r (1 x C):
// an integer product's row and column scales (scaled_mm), one pass (pto/cpu/matmul_int8.hpp).
std::optional<RowFusion> match_scaled_cvt(const std::vector<Stmt>& body, size_t i) {
  const Op *cvt = op_at(body, i), *m1 = op_at(body, i + 1);
  if (!cvt || !m1 || cvt->code != Opcode::TCVT || m1->code != Opcode::TMUL || cvt->args.size() != 2 ||
      m1->args.size() != 3)
    return std::nullopt;
  const View *y = view_of(*cvt, 0), *a = view_of(*cvt, 1);
  if (!y || !a || !is_f32_tile(*y) || !a->buf || a->buf->space == Space::Global ||
      a->buf->dtype != DType::I32 || !a->is_whole() || a->buf->shape != y->buf->shape)
    return std::nullopt;
  const std::vector<int64_t>& shape = y->buf->shape;
  if (shape[0] < 2 || shape[1] < 2) return std::nullopt;
  // TMUL y, y, s with s a whole f32 tile of the given shape, not y or a.
  auto scales = [&](const Op* op, const std::vector<int64_t>& want) -> const Buffer* {
    if (!op || op->code != Opcode::TMUL || op->args.size() != 3) return nullptr;
    const View *d = view_of(*op, 0), *x = view_of(*op, 1), *s = view_of(*op, 2);
    if (!d || !x || !s || d->buf != y->buf || x->buf != y->buf || !is_f32_tile(*s) || s->buf->shape != want ||
        s->buf == y->buf)
      return nullptr;
    return s->buf.get();
  };
  const Buffer* c = scales(m1, {shape[0], 1});
  if (!c) return std::nullopt;
  RowFusion f;
  size_t k = 2;
  for (const Op* op = op_at(body, i + k); op && op->code == Opcode::TLOAD; op = op_at(body, i + ++k)) {
    const View* d = view_of(*op, 0);
    if (!d || !d->buf || d->buf->space == Space::Global || d->buf == y->buf || d->buf == a->buf ||
        d->buf.get() == c)
      return std::nullopt;
    f.hoisted.push_back(k);
  }
  if (!scales(op_at(body, i + k), {1, shape[1]})) return std::nullopt;
  using K = RowFusion::Kind;
  f.fn = "cvt_scale_rows_cols";
  f.count = k + 1;
  f.args = {{K::Tile, 0, 0}, {K::Tile, 0, 1}, {K::Tile, 1, 2}, {K::Tile, k, 2}};
  return f;
}

// MGATHER rows, table, idx; TSTORE out, rows, with a rank-2 table and rows dead afterwards: each
// indexed row is copied from the table straight into the output (gather.hpp, fused::gather_rows).
std::optional<RowFusion> match_gather(const std::vector<Stmt>& body, size_t i) {
  const Op *g = op_at(body, i), *st = op_at(body, i + 1);
  if (!g || !st || g->code != Opcode::MGATHER || st->code != Opcode::TSTORE || g->args.size() != 3)
    return std::nullopt;
  const View *rows = view_of(*g, 0), *table = view_of(*g, 1), *idx = view_of(*g, 2), *out = view_of(*st, 0),
             *src = view_of(*st, 1);
  if (!rows || !table || !idx || !out || !src || !rows->buf || !table->buf || !out->buf || !src->buf)
    return std::nullopt;
  if (rows->buf->space == Space::Global || table->buf->space != Space::Global ||
      out->buf->space != Space::Global || table->rank() != 2 || !rows->is_whole() || !src->is_whole() ||
      src->buf != rows->buf || !dead_from(body, i + 2, rows->buf.get()))
    return std::nullopt;
  RowFusion f;
  f.fn = "gather_rows";
  f.count = 2;
  f.global = true;
  f.reads_output_size = true;
  using K = RowFusion::Kind;
  f.args = {{K::Global, 1, 0}, {K::Global, 0, 1}, {K::Tile, 0, 2}, {K::Tile, 0, 0}, {K::Text, 0, 0, "args"}};
  return f;
}
}  // namespace

namespace {
thread_local LoopLocalScope* g_loop_scope = nullptr;  // the innermost; codegen runs per thread

// Whether s is an instruction writing b as its destination and reading no other part of it.
bool writes_only(const Stmt& s, const Buffer* b) {
  if (!s || s->kind != StmtKind::OpStmt || s->op.code == Opcode::TPREFETCH || s->op.args.empty())
    return false;
  const View* d = std::get_if<View>(&s->op.args[0]);
  if (!d || d->buf.get() != b) return false;
  for (size_t k = 1; k < s->op.args.size(); ++k)
    if (const View* v = std::get_if<View>(&s->op.args[k]); v && v->buf.get() == b) return false;
  return true;
}
}  // namespace

BlockTiles::BlockTiles(const std::vector<Stmt>& block) : last_(block.size()) {
  std::map<const Buffer*, size_t> named_by;  // buffer -> the last statement naming it
  std::vector<const Buffer*> tiles;
  for (size_t j = 0; j < block.size(); ++j) {
    const Stmt& s = block[j];
    if (s && s->kind == StmtKind::Alloc && s->buffer->space != Space::Global)
      tiles.push_back(s->buffer.get());
    for_each_stmt({s}, [&](const Stmt& t) {  // (what row_match::mentions reads: operand views)
      if (t->kind != StmtKind::OpStmt) return;
      for (const Operand& a : t->op.args)
        if (const View* v = std::get_if<View>(&a)) named_by[v->buf.get()] = j;
    });
  }
  for (const Buffer* b : tiles) {
    auto it = named_by.find(b);
    if (it != named_by.end()) last_[it->second].push_back(b);
  }
}

const std::vector<const Buffer*>& BlockTiles::last_named_by(size_t stmt) const { return last_.at(stmt); }

std::set<const Buffer*> loop_local_tiles(const std::vector<Stmt>& block, size_t loop,
                                         const BlockTiles& last_in) {
  std::set<const Buffer*> out;
  if (loop >= block.size() || !block[loop] || block[loop]->kind != StmtKind::For) return out;
  for (const Buffer* b : last_in.last_named_by(loop))
    for (const Stmt& s : block[loop]->body)
      if (row_match::mentions(s, b)) {
        if (writes_only(s, b)) out.insert(b);
        break;
      }
  return out;
}

LoopLocalScope::LoopLocalScope(const std::vector<Stmt>* body, std::set<const Buffer*> tiles)
    : body_(body), tiles_(std::move(tiles)), outer_(g_loop_scope) {
  g_loop_scope = this;
}
LoopLocalScope::~LoopLocalScope() { g_loop_scope = outer_; }
bool LoopLocalScope::holds(const std::vector<Stmt>& body, const Buffer* b) {
  for (const LoopLocalScope* s = g_loop_scope; s; s = s->outer_)
    if (s->body_ == &body && s->tiles_.count(b)) return true;
  return false;
}

namespace row_match {
std::optional<RowFusion> match_pattern(const std::string& fn, const std::vector<Stmt>& body, size_t i) {
  for (const Pattern& p : patterns())
    if (p.fn == fn) return match_at(p, body, i);
  return std::nullopt;
}
}  // namespace row_match

std::optional<RowFusion> match_row_fusion(const std::vector<Stmt>& body, size_t i) {
  if (auto f = match_layer_norm_x_grad(body, i)) return f;
  if (auto f = match_layer_norm_grad(body, i)) return f;
  for (const Pattern& p : patterns())
    if (auto f = match_at(p, body, i)) return f;
  if (auto f = match_scaled_cvt(body, i)) return f;
  if (auto f = match_binary(body, i)) return f;
  if (auto f = match_map(body, i)) return f;
  if (auto f = match_reduce(body, i)) return f;
  if (auto f = match_chain(body, i)) return f;
  return match_gather(body, i);
}

bool row_operand_in_place(const std::vector<Stmt>& body, size_t i) {
  const Op* load = op_at(body, i);
  if (!load || load->code != Opcode::TLOAD || !global_f32(*load, 1)) return false;
  const View* t = view_of(*load, 0);
  if (!t || !is_f32_tile(*t) || t->buf->shape[0] != 1) return false;
  const Buffer* b = t->buf.get();
  for (size_t j = i + 1; j < body.size() && j <= i + 8; ++j) {
    if (auto f = match_row_fusion(body, j)) {
      bool row = false, other = false;
      for (const RowFusion::Arg& a : f->args) {
        if (a.kind != RowFusion::Kind::Tile && a.kind != RowFusion::Kind::RowData) continue;
        const View* v = view_of(*op_at(body, j + a.stmt), a.arg);
        if (v && v->buf.get() == b) (a.kind == RowFusion::Kind::RowData ? row : other) = true;
      }
      for (size_t h : f->hoisted) other |= view_of(*op_at(body, j + h), 0)->buf.get() == b;
      return row && !other && dead_from(body, j + f->count, b);
    }
    if (mentions(body[j], b)) return false;
  }
  return false;
}

}  // namespace pypto::cpu
