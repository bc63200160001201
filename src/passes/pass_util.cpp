#include "passes/pass_util.h"

namespace pypto::passes {

NameGen::NameGen(const ir::Program& p) {
  for (auto& b : p.params) used_.insert(b->name);
  for (auto& s : p.scalars) used_.insert(s.name);
  walk(p.body, [&](const ir::Stmt& s) {
    if (!s->var.empty()) used_.insert(s->var);
    if (s->buffer) used_.insert(s->buffer->name);
  });
}

std::string NameGen::fresh(const std::string& hint) {
  std::string name = hint;
  for (int i = 1; used_.count(name); ++i) name = hint + "_" + std::to_string(i);
  used_.insert(name);
  return name;
}

}  // namespace pypto::passes
