// The operand checks the row fusion matchers share (row_fusion.cpp defines them; row_fusion_grad.cpp
// and row_fusion_chain.cpp use them too).
#pragma once
#include <cstddef>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "backends/cpu/row_fusion.h"
#include "ir/ir.h"

namespace pypto::cpu::row_match {
const ir::Op* op_at(const std::vector<ir::Stmt>& body, size_t i);
const ir::View* view_of(const ir::Op& op, size_t k);
bool is_f32_tile(const ir::View& v);  // a whole local f32 rank-2 tile
bool global_f32(const ir::Op& op, size_t k);
// b is allocated in this body and nothing from body[from] on names it.
bool dead_from(const std::vector<ir::Stmt>& body, size_t from, const ir::Buffer* b);
// The fusion of row_fusion.cpp's pattern `fn` (say "layer_norm_rows") at body[i], if it matches.
std::optional<RowFusion> match_pattern(const std::string& fn, const std::vector<ir::Stmt>& body, size_t i);
// The float unary instructions, and the binary ones, the fused row calls compute element by
// element, with their functors (pto::detail:: in include/pto/cpu/elementwise.hpp).
const std::map<ir::Opcode, std::string>& unary_functors();
const std::map<ir::Opcode, std::string>& binary_functors();
}  // namespace pypto::cpu::row_match
