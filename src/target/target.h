// What the start-up analysis found about the host: cores, caches, SIMD. Feeds tile choices.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace pypto::runtime {
struct Target {
  std::string arch;  // "x86_64", "aarch64"
  int cores = 1;     // logical CPUs available to this process
  int64_t l1d_bytes = 32 << 10, l2_bytes = 1 << 20, l3_bytes = 8 << 20;
  std::vector<std::string> simd;  // e.g. {"avx2", "fma", "avx512f"}
  int vector_bytes = 16;          // widest usable SIMD register
};
const Target& host_target();
// Logical CPUs this process may run on now (its affinity mask; read afresh at each call).
int available_cores();
}  // namespace pypto::runtime
