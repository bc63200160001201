#include "runtime/nest_profile.h"

#include <algorithm>

#include "backends/cpu/nests.h"
#include "ir/visitor.h"
#include "runtime/kernel_cost.h"

namespace pypto::runtime {
namespace {

// Distinct lines of a statement and of the statements inside it, in order.
void lines_of(const ir::Stmt& s, const std::function<std::string(const ir::StmtNode*)>& locate,
              std::vector<std::string>& out) {
  ir::for_each_stmt(std::vector<ir::Stmt>{s}, [&](const ir::Stmt& t) {
    std::string where = locate(t.get());
    if (!where.empty() && std::find(out.begin(), out.end(), where) == out.end()) out.push_back(where);
  });
}

// Buffers a tensor-level statement writes, global or not (operand 0 of its instructions).
void tensor_writes(const ir::Stmt& s, std::vector<std::string>& out) {
  ir::for_each_stmt(std::vector<ir::Stmt>{s}, [&](const ir::Stmt& t) {
    if (t->kind != ir::StmtKind::OpStmt || t->op.args.empty()) return;
    if (const ir::View* dst = std::get_if<ir::View>(&t->op.args[0]); dst && dst->buf)
      out.push_back(dst->buf->name);
  });
}

}  // namespace

std::vector<NestInfo> describe_nests(const passes::Lowered& l,
                                     const std::function<std::string(const ir::StmtNode*)>& locate,
                                     const ir::ScalarEnv* env) {
  std::vector<NestInfo> out;
  const std::vector<ir::Stmt>& tensor = l.tensor.body;
  std::vector<std::vector<std::string>> twrites(tensor.size());
  for (size_t j = 0; j < tensor.size(); ++j) tensor_writes(tensor[j], twrites[j]);
  size_t cursor = 0;
  for (const cpu::Nest& n : cpu::top_level_nests(l.isa)) {
    NestInfo info;
    info.writes = n.writes;
    std::vector<ir::Stmt> stmts(l.isa.body.begin() + n.begin, l.isa.body.begin() + n.end);
    KernelCost c = count_tile_cost(stmts, env);
    info.flops = c.flops;
    info.bytes = c.bytes;
    info.exact = c.exact;
    // Per buffer the nest writes, the first statement from the cursor on that writes it: a
    // buffer written again later (out += ...) belongs to a later nest.
    size_t last = tensor.size();
    for (const std::string& w : n.writes)
      for (size_t j = cursor; j < tensor.size(); ++j)
        if (std::find(twrites[j].begin(), twrites[j].end(), w) != twrites[j].end()) {
          last = last == tensor.size() ? j : std::max(last, j);
          break;
        }
    if (last < tensor.size()) {
      if (locate)
        for (size_t j = cursor; j <= last; ++j) lines_of(tensor[j], locate, info.lines);
      cursor = last + 1;
    }
    out.push_back(std::move(info));
  }
  return out;
}

}  // namespace pypto::runtime
