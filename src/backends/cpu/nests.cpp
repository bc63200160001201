#include "backends/cpu/nests.h"

#include <algorithm>

#include "ir/visitor.h"

namespace pypto::cpu {

void global_writes(const ir::Stmt& s, std::vector<std::string>& out) {
  ir::for_each_stmt(std::vector<ir::Stmt>{s}, [&](const ir::Stmt& t) {
    if (t->kind != ir::StmtKind::OpStmt || t->op.args.empty()) return;
    if (t->op.code == ir::Opcode::TPREFETCH || ir::opcode_info(t->op.code).category == ir::OpCategory::Sync)
      return;
    const ir::View* dst = std::get_if<ir::View>(&t->op.args[0]);
    if (!dst || !dst->buf || dst->buf->space != ir::Space::Global) return;
    if (std::find(out.begin(), out.end(), dst->buf->name) == out.end()) out.push_back(dst->buf->name);
  });
}

std::vector<Nest> top_level_nests(const ir::Program& p) {
  std::vector<Nest> nests;
  Nest cur;
  for (size_t i = 0; i < p.body.size(); ++i) {
    std::vector<std::string> w;
    global_writes(p.body[i], w);
    for (std::string& n : w)
      if (std::find(cur.writes.begin(), cur.writes.end(), n) == cur.writes.end()) cur.writes.push_back(n);
    if (!w.empty() || i + 1 == p.body.size()) {
      cur.end = i + 1;
      nests.push_back(cur);
      cur = Nest{i + 1, i + 1, {}};
    }
  }
  // Statements after the last store (nothing to time) join the last nest.
  if (!nests.empty()) nests.back().end = p.body.size();
  return nests;
}

}  // namespace pypto::cpu
