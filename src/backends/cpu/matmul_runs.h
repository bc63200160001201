// Sums of whole-matrix products: an MMATMUL or MMATMUL_ACC followed by MMATMUL_ACCs into the same
// window (a convolution's taps, passes/lower_composites) is one sum of products, which code
// generation emits as one call of the sum GEMM (pto/cpu/matmul.hpp, pto::mmatmul_sum): one GEMM
// over the concatenated K, each output tile kept in registers across the terms. The destination
// is never an operand's buffer (passes/tile_ops), so the fused form reads what each one would.
#pragma once
#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "ir/ir.h"

namespace pypto::cpu {

constexpr size_t kMaxMatmulTerms = 64;  // products per call (pto::gemm::kMaxTerms)

// How many statements from body[i] form one sum (1: none).
size_t memory_matmul_run(const std::vector<ir::Stmt>& body, size_t i);

// The C++ calls (without the final ';') running the sum body[i .. i + n): pool is the
// parallel_for argument, gview(op, k) the C++ global view of operand k of op.
std::vector<std::string> memory_matmul_sum_calls(
    const std::vector<ir::Stmt>& body, size_t i, size_t n, const std::string& pool,
    const std::function<std::string(const ir::Op&, size_t)>& gview);

// An MMATMUL into a scratch matrix T whose only reader is the next statement, a nest computing
// out = relu(T + bias) tile by tile (relu optional; bias a row of T's columns): the shape that
// fusion leaves for `relu(matmul(x, w) + b)` when the product is one packed GEMM. Code generation
// runs both as one pto::mmatmul_bias into `out`, each element finished at its final store, so T
// is neither written nor read back (the second pass over memory was ~4% of a 1024^3 linear).
struct MatmulEpilogue {
  ir::View out, bias;  // out whole; bias the row of out's width
  bool relu = false;
};
std::optional<MatmulEpilogue> memory_matmul_epilogue(const std::vector<ir::Stmt>& body, size_t i);

// A sum of products (memory_matmul_run: body[i, i + n)) into a scratch matrix T (rows x N) whose
// only reader is the next statement, a nest copying each image row y: out[.., :, y, 0:keep] =
// T[.., :, y*wrap : y*wrap + keep] (a stride-1 convolution's wide result, passes/lower_composites).
// Code generation runs the sum with a wrapped destination (pto::mmatmul_sum_wrapped,
// pto/cpu/gemm_wrapped.hpp): out is written at each tile's store, T neither written nor read.
struct WrappedStore {
  ir::View out;                   // out's rows x keep matrix at image row 0 (channels and columns)
  int image_row_dim = 0;          // out's dimension indexed by y
  int64_t wrap = 0, columns = 0;  // T's columns per image row, and in all
};
std::optional<WrappedStore> memory_matmul_wrapped_store(const std::vector<ir::Stmt>& body, size_t i,
                                                        size_t n);

// An MMATMUL of int8 operands into an int32 scratch matrix T whose only reader is the next
// statement, a nest computing out = f32(T), then multiplied or added, one instruction at a time, by
// per-row values (an M x 1 operand), per-column ones (1 x N) or single values (a 1 x 1 operand or an
// immediate): scaled_mm's epilogue. Code generation runs both as one pto::mmatmul_epilogue into
// `out` (pto/cpu/matmul_int8.hpp), whose kernels apply the steps to each block of int32 sums at
// its store; T is neither written nor read back.
struct ScaleStep {
  bool add = false;           // TADD, else TMUL
  int axis = 0;               // 0: per row, 1: per column, 2: one value
  ir::View operand;           // the whole row / column (or the element) of the operand
  std::optional<double> imm;  // an immediate instead of an operand
};
struct ScaleEpilogue {
  ir::View out;
  std::vector<ScaleStep> steps;
};
constexpr size_t kMaxScaleSteps = 8;  // pto::i8mm::kMaxEpiSteps
std::optional<ScaleEpilogue> memory_matmul_scale_epilogue(const std::vector<ir::Stmt>& body, size_t i);

}  // namespace pypto::cpu
