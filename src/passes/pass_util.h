// Small helpers shared by passes.
#pragma once
#include <set>
#include <string>

#include "ir/ir.h"
#include "ir/names.h"
#include "ir/visitor.h"

namespace pypto::passes {

// Hands out names not yet used anywhere in a program (buffers, loop variables, scalars).
using NameGen = ir::FreshNames;

// Calls f on every statement (pre-order), descending into loops, ifs and sequences.
template <class F>
void walk(const std::vector<ir::Stmt>& body, F&& f) {
  ir::for_each_stmt(body, f);
}

// The whole buffer in its own dimension order (its valid extents may be smaller): offsets 0,
// full sizes, unit steps, identity dims.
bool covers_buffer(const ir::View& v);

// Whether a view's offsets (and, with valid = true, its valid extents) name variable `var`.
bool mentions(const ir::View& v, const std::string& var, bool valid = false);

}  // namespace pypto::passes
