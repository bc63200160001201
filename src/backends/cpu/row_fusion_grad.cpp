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

}  // namespace pypto::cpu
