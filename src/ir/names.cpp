#include "ir/names.h"

#include "ir/visitor.h"

namespace pypto::ir {

FreshNames::FreshNames(const Program& p) {
  for (auto& b : p.params) take(b->name);
  for (auto& s : p.scalars) take(s.name);
  for_each_stmt(p.body, [&](const Stmt& s) {
    if (!s->var.empty()) take(s->var);
    if (s->buffer) take(s->buffer->name);
  });
}

std::string FreshNames::fresh(const std::string& hint) {
  int& i = last_[hint];
  std::string name = i == 0 ? hint : hint + "_" + std::to_string(i);
  while (taken_.count(name)) name = hint + "_" + std::to_string(++i);
  taken_.insert(name);
  return name;
}

}  // namespace pypto::ir
