// The names a program uses and fresh ones beside them, for the builder and the passes that add
// buffers and loop variables.
#pragma once
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "ir/ir.h"

namespace pypto::ir {

// Hands out names not yet taken: the hint itself, else hint_1, hint_2... the first one free.
class FreshNames {
 public:
  FreshNames() = default;
  // Every name `p` uses: its parameters, scalars, loop variables and buffers.
  explicit FreshNames(const Program& p);
  void take(const std::string& name) { taken_.insert(name); }
  std::string fresh(const std::string& hint);

 private:
  std::unordered_set<std::string> taken_;
  // Per hint, the suffix it last got: names are never given back, so every smaller suffix is
  // still taken and the search resumes there. Probing from 1 each time made building and
  // tiling quadratic in a program's temporaries (MobileNetV2's tile_ops pass: 151 s -> 1 s).
  std::unordered_map<std::string, int> last_;
};

}  // namespace pypto::ir
