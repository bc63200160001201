// The opcode table, generated from the PYPTO_OPCODES and PYPTO_COMPOSITES X-macros so it cannot drift from
// the enum.
#include "ir/opcodes.h"

#include <iterator>

namespace pypto::ir {

namespace {
constexpr OpcodeInfo kOpcodes[] = {
#define PYPTO_X(name, cat, n) {#name, OpCategory::cat, n},
    PYPTO_OPCODES(PYPTO_X) PYPTO_COMPOSITES(PYPTO_X)
#undef PYPTO_X
};
}  // namespace

const OpcodeInfo& opcode_info(Opcode op) { return kOpcodes[size_t(op)]; }

std::optional<Opcode> parse_opcode(std::string_view name) {
  for (size_t i = 0; i < std::size(kOpcodes); ++i)
    if (kOpcodes[i].name == name) return Opcode(i);
  return std::nullopt;
}

const char* pipe_name(int64_t pipe) {
  static const char* const names[] = {"MTE2", "MTE3", "V", "M", "S", "ALL"};
  static_assert(std::size(names) == size_t(Pipe::ALL) + 1);
  return (pipe >= 0 && pipe <= int64_t(Pipe::ALL)) ? names[pipe] : "?";
}

}  // namespace pypto::ir
