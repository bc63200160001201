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
#include "backends/cpu/row_match.h"
#include "ir/ir.h"

namespace pypto::cpu {

std::optional<RowFusion> match_layer_norm_grad(const std::vector<ir::Stmt>& body, size_t i);
// The same run with the forward's statistics computed before it from x (TLOAD x, TLOAD of its
// first column, the layer norm's sequence into the xhat the run reads): one call that reads each
// row of x in place, without the copy of x or xhat written to a tile (layer_norm_x_grad_rows).
std::optional<RowFusion> match_layer_norm_x_grad(const std::vector<ir::Stmt>& body, size_t i);

}  // namespace pypto::cpu
