#include "passes/promote.h"

#include <map>

#include "ir/mutator.h"
#include "passes/fusion_group.h"
#include "passes/nest.h"
#include "passes/pass_util.h"

namespace pypto::passes {
using namespace ir;

namespace {

// Gives promoted temporaries their tile buffers: at their allocations and in every operand.
class Promote : public StmtMutator {
 public:
  explicit Promote(const std::map<const Buffer*, BufferRef>& repl) : repl_(repl) {}

 private:
  const std::map<const Buffer*, BufferRef>& repl_;

  Stmt mutate_alloc(const Stmt& s) override {
    auto it = repl_.find(s->buffer.get());
    if (it == repl_.end()) return s;
    auto n = std::make_shared<StmtNode>(*s);
    n->buffer = it->second;
    return n;
  }
  // A promoted temporary is referenced whole (promote_small_temps admits only such views). As a
  // tile its valid region is run-time state that each instruction sets, so the view's valid
  // extents are dropped: a tile-level instruction takes whole tiles, and a valid extent left on
  // it would turn an all-local instruction into one that no backend accepts.
  View mutate_view(const View& v) override {
    auto it = repl_.find(v.buf.get());
    return it == repl_.end() ? v : View::whole(it->second);
  }
};

}  // namespace

Program promote_small_temps(const Program& p, const TileSizes& ts) {
  std::map<const Buffer*, BufferRef> candidates;
  walk(p.body, [&](const Stmt& s) {
    if (s->kind != StmtKind::Alloc) return;
    const Buffer& b = *s->buffer;
    if (b.kind != BufferKind::Temp || b.space != Space::Global || b.rank() != 2) return;
    int64_t rows = b.shape[0], cols = b.shape[1];
    // One tile of every nest the tiling pass may build over it.
    int64_t max_cols = std::min(ts.mm_n, ts.elem_cols);
    int64_t max_rows = std::min(ts.mm_m, ts.elem_rows * ts.elem_cols / std::max<int64_t>(cols, 1));
    if (rows > max_rows || cols > max_cols) return;
    auto clone = std::make_shared<Buffer>(b);
    clone->space = Space::Vec;
    candidates[s->buffer.get()] = clone;
  });
  // Every instruction touching a candidate must tile to a single tile, so the tiling pass can use
  // the promoted tile as is.
  auto one_tile = [&](const Op& op) {
    if (opcode_info(op.code).category == OpCategory::Gather || is_arg_reduction(op.code) ||
        op.code == Opcode::TDWCONV)
      return false;  // rows move through memory; TDWCONV's planes are loaded whole
    for (auto& a : op.args) {
      auto v = std::get_if<View>(&a);
      if (!v) continue;
      auto s = v->shape();
      int64_t cols = s.empty() ? 1 : s.back(), rows = s.size() >= 2 ? s[s.size() - 2] : 1;
      for (size_t i = 0; i + 2 < s.size(); ++i)
        if (s[i] != 1) return false;
      bool mm = opcode_info(op.code).category == OpCategory::Matrix;
      if (mm ? (rows > ts.mm_m || cols > std::min(ts.mm_n, ts.mm_k))
             : (cols > ts.elem_cols || rows * cols > ts.elem_rows * ts.elem_cols))
        return false;
    }
    return true;
  };
  walk(p.body, [&](const Stmt& s) {
    // A fusion group's nest reads and writes its operands' windows in memory.
    if (fusion::is_group(s))
      for_each_view(s->body, [&](const View& v, bool) { candidates.erase(v.buf.get()); });
    if (s->kind != StmtKind::OpStmt) return;
    for (auto& a : s->op.args)
      if (auto v = std::get_if<View>(&a))
        if (candidates.count(v->buf.get()) &&
            (!covers_buffer(*v) || !one_tile(s->op) || !is_tensor_level(s->op)))
          candidates.erase(v->buf.get());  // (already-tiled code, e.g. a fused nest, reads it from memory)
  });
  if (candidates.empty()) return p;
  return Promote(candidates).mutate_program(p);
}

}  // namespace pypto::passes
