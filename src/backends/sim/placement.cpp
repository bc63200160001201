// Tile placement: every local tile gets room in the local memory its ISA space maps to.
#include "backends/sim/simulator.h"
#include "ir/visitor.h"

namespace pypto::sim {
using namespace ir;

std::map<std::string, std::pair<int64_t, int64_t>> place_tiles(const Program& program,
                                                               const target::NpuTarget& t) {
  std::map<std::string, std::pair<int64_t, int64_t>> use;  // memory -> (peak, capacity)
  for (const auto& [name, m] : t.memories) use[name] = {0, m.bytes};
  std::map<std::string, int64_t> resident;  // top-level allocs: live for the whole program
  auto place = [&](const Buffer& b, std::map<std::string, int64_t>& live) {
    const std::string space(space_name(b.space));
    auto sm = t.space_memory.find(space);
    if (sm == t.space_memory.end())
      throw Error("the NPU target '" + t.name + "' places no memory for space '" + space + "' (tile '" +
                  b.name + "')");
    const target::LocalMemory& m = t.memories.at(sm->second);
    const int64_t bytes = (b.numel() * dtype_bytes(b.dtype) + m.align - 1) / m.align * m.align;
    int64_t& used = live[m.name];
    used += bytes;
    if (used > m.bytes)
      throw Error("tile '" + b.name + "' (" + std::to_string(bytes) + " bytes, space " + space +
                  ") does not fit the NPU's " + m.name + " (" + std::to_string(m.bytes) + " bytes): " +
                  std::to_string(used) + " bytes of tiles are live together; choose smaller tiles");
    use[m.name].first = std::max(use[m.name].first, used);
  };
  // A tile allocated in a loop body is one buffer reused by every iteration.
  auto walk = [&](const std::vector<Stmt>& body, std::map<std::string, int64_t>& live) {
    for_each_stmt(body, [&](const Stmt& s) {
      if (s->kind == StmtKind::Alloc && s->buffer && s->buffer->space != Space::Global)
        place(*s->buffer, live);
    });
  };
  for (const Stmt& s : program.body) {
    if (s->kind == StmtKind::Alloc) {
      if (s->buffer && s->buffer->space != Space::Global) place(*s->buffer, resident);
      continue;
    }
    std::map<std::string, int64_t> live = resident;
    walk(s->body, live);
    walk(s->orelse, live);
  }
  return use;
}

}  // namespace pypto::sim
