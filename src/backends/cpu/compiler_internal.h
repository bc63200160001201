// Pieces of the CPU compiler shared with its tests (private to src/backends/cpu and tests/cpp).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

struct pto_kernel_args;  // pto/abi.h: a header of the headers target, private to this one

namespace pypto::cpu {

// A loaded kernel object (compiler.cpp loads it, kernel_run.cpp calls it).
struct CompiledKernel {
  void* handle = nullptr;  // never dlclose'd: a kernel may still be referenced by callers
  void (*fn)(const struct pto_kernel_args*) = nullptr;  // pto_kernel_fn (pto/abi.h)
  std::string path;
};

// SHA-256 (FIPS 180-4) of `data`, as 64 lowercase hex digits. Cache keys and the checksums that
// guard on-disk objects against truncation both use it.
class Sha256 {
 public:
  Sha256();
  void update(const void* data, size_t n);
  void update(std::string_view s) { update(s.data(), s.size()); }
  std::string hex();  // finishes the hash; call once
 private:
  void block(const unsigned char* p);
  uint32_t h_[8];
  unsigned char buf_[64];
  size_t used_ = 0;
  uint64_t total_ = 0;
};
std::string sha256_hex(std::string_view data);

// The cache directory in use (kernel_cache.h), created if missing; throws when it is not private.
std::string kernel_cache_dir();
// Why a word of $PYPTO_CXXFLAGS is refused ("" when accepted): flags that change floating-point
// semantics or the kernel ABI, and sanitizers whose runtime this process does not run.
std::string refused_flag_reason(const std::string& flag);
// The shared object a compiled kernel was loaded from.
std::string kernel_path(const CompiledKernel& k);
// Forgets the in-memory cache, so the next compile_cpp consults the disk cache (tests only).
void clear_memory_cache_for_testing();

}  // namespace pypto::cpu
