// Reverse-mode automatic differentiation of a tensor-level program.
//
// `autodiff(forward)` builds the tensor-level program of the forward's vector-Jacobian product;
// it is lowered and compiled like any kernel (fused, tiled, parallel, on any backend). Strategy:
//  * The backward's inputs are the forward inputs, the forward's results (outputs, and arguments
//    the forward writes into) as saved after the call, and one cotangent per result. Its outputs
//    are the gradients of the forward's floating-point tensor inputs. Parameters the backward
//    does not read are dropped, so a caller saves only what `args` lists (the least it needs).
//  * Values are recomputed rather than taped: the backward first replays the forward (writes into
//    results dropped: their saved values stand in; so are the temps forward_with_saves returns
//    when the caller runs it: values a matmul computes or reads, see products_to_save), then
//    sweeps the statements in reverse,
//    accumulating adjoints; a loop is swept by a loop (reversed when iterations depend on each
//    other) whose body first replays the forward body for that iteration. Dead code elimination
//    then removes every replayed value no derivative rule reads (cheap ones are recomputed;
//    a matmul whose result only feeds a ReLU is not: its saved output serves).
//  * Supported: elementwise math, broadcasting (gradients are summed over broadcast dims),
//    reductions, matmul (batched, transposed views, TMATMUL_ACC accumulators), casts, copies into
//    views and slices, select, and thus every composite the builder decomposes (softmax, norms,
//    concat, conv2d); loops over disjoint output tiles, accumulators updated linearly
//    (`acc += a @ b`, `acc -= x`), and values carried across iterations and updated non-linearly
//    (an online softmax): those are kept on a tape, one slot per iteration. Row gathers and
//    scatters by index tensors (embedding, gather, scatter, index_add): the rows move back. A
//    buffer the builder made with detach() gets no adjoint: no gradient flows through it.
//  * Refused, with ir::Error naming the statement (and its kernel line when the builder knew it):
//    a loop-carried value in a loop whose trip count is
//    not static (no tape to size), a derivative that needs a value the program has overwritten by
//    then (an argument read and then written). The message points to `defvjp`, the manual route.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "ir/ir.h"

namespace pypto::passes {

struct Backward {
  ir::Program program;  // tensor level
  // One entry per parameter of `program` of kind Param, in order: what the caller passes.
  enum class Role { Input, Saved, Cotangent };
  struct Arg {
    Role role;
    int param;  // index into the forward's params: the input, or the result saved / differentiated
  };
  std::vector<Arg> args;
  std::vector<int> grads;    // per Output of `program`: the forward param it is the gradient of
  std::vector<int> results;  // forward params that are results (outputs, then written arguments)
  // With `save_products`: the forward with the values the backward reads (instead of recomputing
  // them) that a matmul computes or reads as extra outputs, after its params; an Arg of role
  // Saved with a param index past the forward's is one of them. Empty (no params) when nothing is
  // saved.
  ir::Program forward_with_saves;
};

// Where a forward statement came from, for error messages ("" when unknown).
using Locate = std::function<std::string(const ir::StmtNode*)>;
// Buffers no gradient flows through (the builder's detach()); none when empty.
using IsDetached = std::function<bool(const ir::Buffer*)>;

// `wanted[i]`: whether the gradient of forward param i is asked for (empty: all of them); the
// backward computes (and reads what it needs for) only those.
// `save_products`: values the backward needs that a matmul computes (a product, a loop of
// attention heads) or reads (a layer norm's or activation's output feeding a linear layer) come
// from the forward's run (forward_with_saves) instead of being recomputed.
Backward autodiff(const ir::Program& forward, const Locate& locate = {}, const std::vector<bool>& wanted = {},
                  const IsDetached& detached = {}, bool save_products = false);

}  // namespace pypto::passes
