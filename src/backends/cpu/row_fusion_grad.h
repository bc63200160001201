// Row fusion of the layer norm's backward (include/pto/cpu/rows_grad.hpp): the instruction run
// that autodiff derives for dx of layer_norm(x, w, b) after the forward's statistics, with the
// TLOAD of the cotangent before it, the TSTORE of dx and, optionally, the column sums of the
// weight's and the bias's gradients after it, becomes one call that reads each cotangent row in
// place twice and writes dx once. Part of match_row_fusion (row_fusion.h).
#pragma once
#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "backends/cpu/row_fusion.h"
#include "ir/ir.h"

namespace pypto::cpu {

std::optional<RowFusion> match_layer_norm_grad(const std::vector<ir::Stmt>& body, size_t i);
// The same run with the forward's statistics computed before it from x (TLOAD x, TLOAD of its
// first column, the layer norm's sequence into the xhat the run reads): one call that reads each
// row of x in place, without the copy of x or xhat written to a tile (layer_norm_x_grad_rows).
std::optional<RowFusion> match_layer_norm_x_grad(const std::vector<ir::Stmt>& body, size_t i);

// The operand checks of row_fusion.cpp that the matcher above shares (defined there).
namespace row_match {
const ir::Op* op_at(const std::vector<ir::Stmt>& body, size_t i);
const ir::View* view_of(const ir::Op& op, size_t k);
bool is_f32_tile(const ir::View& v);  // a whole local f32 rank-2 tile
bool global_f32(const ir::Op& op, size_t k);
// b is allocated in this body and nothing from body[from] on names it.
bool dead_from(const std::vector<ir::Stmt>& body, size_t from, const ir::Buffer* b);
// The fusion of row_fusion.cpp's pattern `fn` (say "layer_norm_rows") at body[i], if it matches.
std::optional<RowFusion> match_pattern(const std::string& fn, const std::vector<ir::Stmt>& body, size_t i);
}  // namespace row_match

}  // namespace pypto::cpu
