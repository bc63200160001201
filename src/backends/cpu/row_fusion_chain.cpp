#include "backends/cpu/row_fusion_chain.h"

#include <algorithm>
#include <map>
#include <string>

#include "backends/cpu/row_match.h"

namespace pypto::cpu {
using namespace ir;
using namespace row_match;

namespace {

// At most this many intermediate tiles: each is a 1 KiB block of the call's stack frame.
constexpr size_t kMaxTemps = 8;

// A slot of the chain: source k (in the order the run loads or first reads its sources) or
// intermediate t.
struct Slot {
  bool temp = false;
  size_t index = 0;
};

// One instruction of the chain, its operands as slots; scalar: the operand position of the
// instruction's scalar (0: none), left: the scalar comes first.
struct Step {
  std::string functor;
  bool unary = false;
  Slot dst, a, b;
  size_t scalar = 0, scalar_index = 0;
  bool left = false;
};

}  // namespace

std::optional<RowFusion> match_chain(const std::vector<Stmt>& body, size_t i) {
  const std::map<Opcode, std::string>& unary = unary_functors();
  const std::map<Opcode, std::string>& binary = binary_functors();
  // R x C: the first instruction's destination (each step's destination is a whole R x C tile).
  std::vector<int64_t> shape;
  for (size_t k = i; k < body.size() && shape.empty(); ++k) {
    const Op* op = op_at(body, k);
    if (!op || op->code != Opcode::TLOAD) {
      const View* d = op ? view_of(*op, 0) : nullptr;
      if (!d || !is_f32_tile(*d)) return std::nullopt;
      shape = d->buf->shape;
    }
  }
  if (shape.empty() || shape[1] < 2) return std::nullopt;
  auto full_tile = [&](const View* v) { return v && is_f32_tile(*v) && v->buf->shape == shape; };
  // A source: R x C, or 1 x C / R x 1 (broadcast down / across, as the instructions broadcast).
  auto source_tile = [&](const View* v) {
    if (!v || !is_f32_tile(*v)) return false;
    const std::vector<int64_t>& s = v->buf->shape;
    return (s[0] == shape[0] || s[0] == 1) && (s[1] == shape[1] || s[1] == 1);
  };
  // Sources: the run's TLOADs (offset from i) and the tiles filled before it (nullopt offset).
  std::vector<std::optional<size_t>> loads;
  std::vector<std::pair<size_t, size_t>> filled_at;  // (offset, operand) of a filled tile's first read
  std::map<const Buffer*, Slot> current;             // each tile's slot now
  std::map<const Buffer*, size_t> temp_of;           // each destination tile's intermediate
  std::vector<unsigned> temp_deps;                   // the sources each intermediate depends on (bits)
  std::vector<const Buffer*> written;                // the tiles the run writes
  std::vector<const Buffer*> filled;                 // the tiles filled before it
  std::vector<Step> steps;
  std::vector<std::pair<size_t, size_t>> scalars;  // (offset, operand) of each scalar
  size_t n = 0;
  auto deps = [&](const Slot& s) { return s.temp ? temp_deps[s.index] : 1u << s.index; };
  auto named = [&](const std::vector<const Buffer*>& v, const Buffer* b) {
    return std::find(v.begin(), v.end(), b) != v.end();
  };
  for (;; ++n) {
    const Op* op = op_at(body, i + n);
    if (!op) return std::nullopt;
    if (op->code == Opcode::TLOAD) {
      const View* d = view_of(*op, 0);
      if (!source_tile(d) || !global_f32(*op, 1) || current.count(d->buf.get()) || loads.size() >= 16)
        return std::nullopt;
      current[d->buf.get()] = {false, loads.size()};
      written.push_back(d->buf.get());
      loads.push_back(n);
      filled_at.push_back({0, 0});
      continue;
    }
    if (op->code == Opcode::TSTORE) break;
    const bool is_unary = unary.count(op->code) && op->args.size() == 2;
    const bool is_binary = binary.count(op->code) && op->args.size() == 3;
    if (!is_unary && !is_binary) return std::nullopt;
    Step st;
    st.unary = is_unary;
    st.functor = "pto::detail::" + (is_unary ? unary.at(op->code) : binary.at(op->code));
    unsigned dep = 0;
    std::vector<Slot> reads;
    for (size_t k = 1; k < op->args.size(); ++k) {
      if (std::holds_alternative<Expr>(op->args[k])) {
        if (is_unary || st.scalar) return std::nullopt;  // one scalar operand at most
        st.scalar = k;
        st.left = k == 1;
        continue;
      }
      const View* v = view_of(*op, k);
      if (!source_tile(v)) return std::nullopt;
      const Buffer* b = v->buf.get();
      if (!current.count(b)) {  // filled before the run: a source, if the run never writes it
        if (named(written, b) || loads.size() >= 16) return std::nullopt;
        current[b] = {false, loads.size()};
        filled.push_back(b);
        loads.push_back(std::nullopt);
        filled_at.push_back({n, k});
      }
      reads.push_back(current.at(b));
      dep |= deps(reads.back());
    }
    const View* d = view_of(*op, 0);
    if (!full_tile(d) || reads.empty() || named(filled, d->buf.get())) return std::nullopt;
    st.a = reads[0];
    if (reads.size() > 1) st.b = reads[1];
    if (st.scalar) {
      st.scalar_index = scalars.size();
      scalars.push_back({n, st.scalar});
    }
    const Buffer* db = d->buf.get();
    if (!temp_of.count(db)) {
      if (temp_of.size() >= kMaxTemps) return std::nullopt;
      temp_of[db] = temp_of.size();
      temp_deps.push_back(0);
      if (!named(written, db)) written.push_back(db);
    }
    st.dst = {true, temp_of.at(db)};
    temp_deps[st.dst.index] = dep;
    current[db] = st.dst;
    steps.push_back(st);
  }
  const Op* store = op_at(body, i + n);
  const View* y = view_of(*store, 1);
  // At least one source read from memory in the run (where all are tiles already, the
  // instructions as written are as good).
  const bool loads_one = std::any_of(loads.begin(), loads.end(), [](const auto& l) { return l.has_value(); });
  if (steps.empty() || !loads_one || !global_f32(*store, 0) || !full_tile(y) || !current.count(y->buf.get()))
    return std::nullopt;
  const Slot out = current.at(y->buf.get());
  // The last step's result, depending on every source (its valid region is theirs, intersected).
  if (!out.temp || out.index != steps.back().dst.index || deps(out) != (1u << loads.size()) - 1)
    return std::nullopt;
  for (const Buffer* b : written)
    if (!dead_from(body, i + n + 1, b)) return std::nullopt;

  const size_t sources = loads.size();
  auto slot = [&](const Slot& s) { return std::to_string(s.temp ? sources + s.index : s.index); };
  std::string chain = "pto::fused::Chain<" + std::to_string(sources) + ", " + std::to_string(temp_of.size()) +
                      ", " + std::to_string(scalars.size()) + ", " + slot(out);
  for (const Step& st : steps) {
    if (st.unary)
      chain += ", pto::fused::Unary<" + st.functor + ", " + slot(st.dst) + ", " + slot(st.a) + ">";
    else if (st.scalar)
      chain += ", pto::fused::Scalar<" + st.functor + ", " + slot(st.dst) + ", " + slot(st.a) + ", " +
               std::to_string(st.scalar_index) + ", " + (st.left ? "true" : "false") + ">";
    else
      chain += ", pto::fused::Binary<" + st.functor + ", " + slot(st.dst) + ", " + slot(st.a) + ", " +
               slot(st.b) + ">";
  }
  chain += ">{}";
  using K = RowFusion::Kind;
  RowFusion f;
  f.fn = "chain_rows";
  f.global = true;
  f.count = n + 1;
  f.args = {{K::Global, n, 0}, {K::Tile, n, 1}, {K::Text, 0, 0, chain}};
  for (size_t k = 0; k < loads.size(); ++k) {
    if (loads[k]) {
      f.args.push_back({K::Global, *loads[k], 1});
      f.args.push_back({K::Tile, *loads[k], 0});
    } else {
      f.args.push_back({K::Text, 0, 0, "pto::fused::kFilled"});
      f.args.push_back({K::Tile, filled_at[k].first, filled_at[k].second});
    }
  }
  for (const auto& [stmt, k] : scalars) f.args.push_back({K::Scalar, stmt, k});
  return f;
}

}  // namespace pypto::cpu
