#include "backends/cpu/row_fusion_chain.h"

#include <map>
#include <string>

#include "backends/cpu/row_match.h"

namespace pypto::cpu {
using namespace ir;
using namespace row_match;

namespace {

// At most this many intermediate tiles: each is a 1 KiB block of the call's stack frame.
constexpr size_t kMaxTemps = 8;

// A slot of the chain: source k (its TLOAD's index) or intermediate t.
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
  std::vector<int64_t> shape;
  auto full_tile = [&](const View* v) {
    if (!v || !is_f32_tile(*v)) return false;
    if (shape.empty()) shape = v->buf->shape;
    return v->buf->shape == shape && shape[1] >= 2;
  };
  std::vector<size_t> loads;                // the sources' TLOADs (offsets from i)
  std::map<const Buffer*, Slot> current;    // each tile's slot now
  std::map<const Buffer*, size_t> temp_of;  // each destination tile's intermediate
  std::vector<unsigned> temp_deps;          // the sources each intermediate depends on (bits)
  std::vector<const Buffer*> tiles;         // every tile of the run
  std::vector<Step> steps;
  std::vector<std::pair<size_t, size_t>> scalars;  // (offset, operand) of each scalar
  size_t n = 0;
  auto deps = [&](const Slot& s) { return s.temp ? temp_deps[s.index] : 1u << s.index; };
  for (;; ++n) {
    const Op* op = op_at(body, i + n);
    if (!op) return std::nullopt;
    if (op->code == Opcode::TLOAD) {
      const View* d = view_of(*op, 0);
      if (!full_tile(d) || !global_f32(*op, 1) || current.count(d->buf.get()) || loads.size() >= 16)
        return std::nullopt;
      current[d->buf.get()] = {false, loads.size()};
      tiles.push_back(d->buf.get());
      loads.push_back(n);
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
      if (!full_tile(v) || !current.count(v->buf.get())) return std::nullopt;
      reads.push_back(current.at(v->buf.get()));
      dep |= deps(reads.back());
    }
    const View* d = view_of(*op, 0);
    if (!full_tile(d) || reads.empty()) return std::nullopt;
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
      if (!current.count(db)) tiles.push_back(db);
    }
    st.dst = {true, temp_of.at(db)};
    temp_deps[st.dst.index] = dep;
    current[db] = st.dst;
    steps.push_back(st);
  }
  const Op* store = op_at(body, i + n);
  const View* y = view_of(*store, 1);
  if (steps.size() < 2 || loads.empty() || !global_f32(*store, 0) || !full_tile(y) ||
      !current.count(y->buf.get()))
    return std::nullopt;
  const Slot out = current.at(y->buf.get());
  // The last step's result, depending on every source (its valid region is theirs, intersected).
  if (!out.temp || out.index != steps.back().dst.index || deps(out) != (1u << loads.size()) - 1)
    return std::nullopt;
  for (const Buffer* b : tiles)
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
  for (size_t l : loads) {
    f.args.push_back({K::Global, l, 1});
    f.args.push_back({K::Tile, l, 0});
  }
  for (const auto& [stmt, k] : scalars) f.args.push_back({K::Scalar, stmt, k});
  return f;
}

}  // namespace pypto::cpu
