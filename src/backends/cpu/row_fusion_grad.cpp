#include "backends/cpu/row_fusion_grad.h"

#include <map>
#include <string>

namespace pypto::cpu {
using namespace ir;
using namespace row_match;

namespace {

// The run (rows_grad.hpp), one statement a line: the opcode and its operands. Letters name
// tiles: upper case R x C, lower case R x 1, 'W', 'P', 'C' 1 x C; '$': a scalar; 'g': a global
// view.
struct Line {
  Opcode code;
  const char* vars;
};
const Line kRun[] = {
    {Opcode::TLOAD, "Dg"},   {Opcode::TMUL, "ADZ"}, {Opcode::TMUL, "GDW"}, {Opcode::TMUL, "BGZ"},
    {Opcode::TROWSUM, "pB"}, {Opcode::TDIV, "pp$"}, {Opcode::TMUL, "ZZp"}, {Opcode::TROWSUM, "qG"},
    {Opcode::TDIV, "qq$"},   {Opcode::TSUB, "GGq"}, {Opcode::TSUB, "GGZ"}, {Opcode::TMUL, "GGr"},
};

// Binds the run's letters to buffers as the statements are read: one letter, one buffer, and
// distinct letters distinct buffers.
struct Binding {
  std::vector<int64_t> shape;  // R, C
  std::map<std::string, const Buffer*> tiles;

  bool operand(const Op& op, size_t k, const std::string& name) {
    const char c = name[0];
    if (c == '$') return k < op.args.size() && std::holds_alternative<Expr>(op.args[k]);
    if (c == 'g') return global_f32(op, k);
    const View* v = view_of(op, k);
    if (!v || !is_f32_tile(*v)) return false;
    const std::vector<int64_t>& s = v->buf->shape;
    if (shape.empty()) shape = s;  // D, the first tile, fixes R x C
    const bool row = c == 'W' || c == 'P' || c == 'C';
    const bool lower = c >= 'a' && c <= 'z';
    if (s != (row ? std::vector<int64_t>{1, shape[1]} : lower ? std::vector<int64_t>{shape[0], 1} : shape))
      return false;
    auto [it, fresh] = tiles.emplace(name, v->buf.get());
    if (!fresh) return it->second == v->buf.get();
    for (const auto& [other, b] : tiles)
      if (other != name && b == v->buf.get()) return false;
    return true;
  }
  bool line(const Op* op, Opcode code, const std::vector<std::string>& names) {
    if (!op || op->code != code || op->args.size() != names.size()) return false;
    for (size_t k = 0; k < names.size(); ++k)
      if (!operand(*op, k, names[k])) return false;
    return true;
  }
  const Buffer* at(const std::string& name) const { return tiles.at(name); }
};

}  // namespace

std::optional<RowFusion> match_layer_norm_grad(const std::vector<Stmt>& body, size_t i) {
  const Op* first = op_at(body, i);
  if (!first || first->code != Opcode::TLOAD) return std::nullopt;  // the cheap test first
  Binding m;
  size_t n = 0;
  auto line = [&](const Line& l) {
    std::vector<std::string> names;
    for (const char* c = l.vars; *c; ++c) names.emplace_back(1, *c);
    return m.line(op_at(body, i + n), l.code, names);
  };
  for (const Line& l : kRun)
    if (!line(l))
      return std::nullopt;
    else
      ++n;
  if (m.shape[1] < 2) return std::nullopt;  // W and G would be the same shape class
  // Optionally dx added to a gradient summed so far: TLOAD E, gadd; TADD G, E, G.
  const size_t add = n;
  const bool adds = line({Opcode::TLOAD, "Eg"}) && (++n, line({Opcode::TADD, "GEG"}));
  n = adds ? n + 1 : add;
  if (!adds) m.tiles.erase("E");
  if (!line({Opcode::TSTORE, "gG"})) return std::nullopt;
  const size_t store = n++;
  using K = RowFusion::Kind;
  RowFusion f;
  f.fn = "layer_norm_grad_rows";
  f.global = true;
  // gdx, gdy, D, Z, A, G, B, W, p, q, r, n, n2
  f.args = {{K::Global, store, 0}, {K::Global, 0, 1}, {K::Tile, 0, 0},  {K::Tile, 1, 2}, {K::Tile, 1, 0},
            {K::Tile, 2, 0},       {K::Tile, 3, 0},   {K::Tile, 2, 2},  {K::Tile, 4, 0}, {K::Tile, 7, 0},
            {K::Tile, 11, 2},      {K::Scalar, 5, 2}, {K::Scalar, 8, 2}};
  // The optional column sums: TCOLSUM P, A (then D); TADD C, C, P.
  for (const char* src : {"A", "D"}) {
    const std::string p = std::string("P") + src, c = std::string("C") + src;
    if (m.line(op_at(body, i + n), Opcode::TCOLSUM, {p, src}) &&
        m.line(op_at(body, i + n + 1), Opcode::TADD, {c, c, p})) {
      f.args.push_back({K::TileAddr, n, 0});
      f.args.push_back({K::TileAddr, n + 1, 0});
      n += 2;
    } else {
      m.tiles.erase(p), m.tiles.erase(c);  // a partial match bound them
      f.args.push_back({K::Null});
      f.args.push_back({K::Null});
    }
  }
  f.args.push_back(adds ? RowFusion::Arg{K::Global, add, 1}
                        : RowFusion::Arg{K::Text, 0, 0, "pto::GlobalView<float>{}"});
  f.args.push_back(adds ? RowFusion::Arg{K::TileAddr, add, 0} : RowFusion::Arg{K::Null});
  for (const char* t : {"D", "A", "G", "B", "Z", "E"})
    if ((t[0] != 'E' || adds) && !dead_from(body, i + n, m.at(t))) return std::nullopt;
  f.count = n;
  return f;
}

std::optional<RowFusion> match_layer_norm_x_grad(const std::vector<Stmt>& body, size_t i) {
  const Op *lx = op_at(body, i), *lc = op_at(body, i + 1), *first = op_at(body, i + 2);
  if (!lx || !lc || !first || lx->code != Opcode::TLOAD || lc->code != Opcode::TLOAD ||
      first->code != Opcode::TSUB)
    return std::nullopt;  // the cheap test first
  // The statistics: the plain layer_norm_rows run (no affine tail, no TLOAD inside it).
  constexpr size_t kStats = 10;
  auto ln = match_pattern("layer_norm_rows", body, i + 2);
  if (!ln || ln->count != kStats || !ln->hoisted.empty() || ln->args.size() != 10 ||
      ln->args[8].kind != RowFusion::Kind::Null || ln->args[9].kind != RowFusion::Kind::Null)
    return std::nullopt;
  auto buf = [&](size_t from, const RowFusion::Arg& a) {
    return view_of(*op_at(body, from + a.stmt), a.arg)->buf.get();
  };
  // ln->args: Z, X, c, u, r, n, n2, eps (w, b null); TLOAD X, gx and TLOAD c, gc before it.
  const View *x = view_of(*lx, 0), *c = view_of(*lc, 0);
  if (!x || !c || !global_f32(*lx, 1) || !global_f32(*lc, 1) || x->buf.get() != buf(i + 2, ln->args[1]) ||
      c->buf.get() != buf(i + 2, ln->args[2]))
    return std::nullopt;
  const size_t at = 2 + kStats;
  auto g = match_layer_norm_grad(body, i + at);
  // g->args: gdx, gdy, D, Z, A, G, B, W, p, q, r, ...: its xhat and rstd those of the statistics.
  if (!g || buf(i + at, g->args[3]) != buf(i + 2, ln->args[0]) ||
      buf(i + at, g->args[10]) != buf(i + 2, ln->args[4]) ||
      !dead_from(body, i + at + g->count, x->buf.get()))
    return std::nullopt;
  RowFusion f = *g;
  f.fn = "layer_norm_x_grad_rows";
  f.stream_by_traffic = true;  // x and dy read once, as big as dx
  f.count = at + g->count;
  for (RowFusion::Arg& a : f.args) a.stmt += at;
  for (size_t& h : f.hoisted) h += at;
  for (size_t& h : f.in_place) h += at;
  using K = RowFusion::Kind;
  f.args.push_back({K::Global, 0, 1});
  f.args.push_back({K::Global, 1, 1});
  f.args.push_back({K::Tile, 0, 0});
  f.args.push_back({K::Tile, 1, 0});
  for (size_t k : {3, 5, 6, 7}) {  // u, n, n2, eps
    RowFusion::Arg a = ln->args[k];
    a.stmt += 2;
    f.args.push_back(a);
  }
  return f;
}

}  // namespace pypto::cpu
