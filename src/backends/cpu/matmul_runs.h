// Sums of whole-matrix products: an MMATMUL or MMATMUL_ACC followed by MMATMUL_ACCs into the same
// window (a convolution's taps, passes/lower_composites) is one sum of products, which code
// generation emits as one call of the sum GEMM (pto/cpu/matmul.hpp, pto::mmatmul_sum): one GEMM
// over the concatenated K, each output tile kept in registers across the terms. The destination
// is never an operand's buffer (passes/tile_ops), so the fused form reads what each one would.
#pragma once
#include <cstddef>
#include <functional>
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

}  // namespace pypto::cpu
