// Row fusion of elementwise chains (include/pto/cpu/chain_rows.hpp): TLOADs of f32 sources into
// whole R x C tiles (or rows, columns), elementwise f32 instructions on them (unary, tile-tile
// binary, binary with a scalar operand), and the TSTORE of the last one's result, with every tile
// of the run dead afterwards, become one call that reads the sources' rows in place and writes the
// result once. Part of match_row_fusion (row_fusion.h), tried after the single-instruction forms
// (binary_rows, unary_rows, scalar_rows), so a run of one instruction takes it only where those do
// not apply (a broadcast operand: a bias added to a product).
#pragma once
#include <cstddef>
#include <optional>
#include <vector>

#include "backends/cpu/row_fusion.h"
#include "ir/ir.h"

namespace pypto::cpu {

std::optional<RowFusion> match_chain(const std::vector<ir::Stmt>& body, size_t i);

}  // namespace pypto::cpu
