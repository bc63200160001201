// Intel AMX (Advanced Matrix Extensions) for the CPU backend: whether the process may use the
// tile registers, and the one tile configuration the matmul families use.
//
// AMX needs three things: a compiler targeting a CPU that has it (-march=native on Sapphire
// Rapids and later defines __AMX_TILE__), a kernel that enables the 8 KiB tile state for the
// process (Linux >= 5.16: arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)), and no request
// to stay off the native dot products (PTO_NO_NATIVE_DOT, set by PYPTO_NATIVE_DOT=0; or
// PTO_NO_AMX, set by PYPTO_AMX=0, which keeps AVX512-BF16 / VNNI but not the tiles). The first
// two are asked at run time, once per process: where the kernel refuses, the families fall back
// to the vector paths of the same header.
//
// The tile configuration (palette 1) is per thread and other libraries in the process (oneDNN)
// load their own, so a matmul loads it at the start of each share of work (AmxScope) and
// releases the tiles at its end; nothing is assumed across calls.
#pragma once
#include <cstdint>
#include <cstring>

#if defined(__AMX_TILE__) && defined(__linux__) && defined(__GNUC__) && !defined(PTO_NO_NATIVE_DOT) && \
    !defined(PTO_NO_AMX) && !defined(__CUDACC__)
#define PTO_AMX_TILE 1
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>
#else
#define PTO_AMX_TILE 0
#endif

namespace pto {
namespace amx {

#if PTO_AMX_TILE
// Whether the kernel lets this process use the tile data (asked once; the answer is per process).
inline bool enabled() {
  static const bool ok = [] {
    constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
    return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
  }();
  return ok;
}

// Palette 1 with all eight tiles at their largest shape, 16 rows of 64 bytes: a bf16 A tile is
// 16 rows x 32 K, a B tile 16 K pairs (or int8 K quads) x 16 columns, an accumulator 16 x 16
// 32-bit values. Ragged shapes are padded with zeros by the packing, never by the configuration.
struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
  TileConfig() {
    for (int t = 0; t < 8; ++t) colsb[t] = 64, rows[t] = 16;
  }
};

// Loads the configuration for the lifetime of a share of work and releases the tiles after it.
struct Scope {
  Scope() {
    static const TileConfig cfg;
    _tile_loadconfig(&cfg);
  }
  ~Scope() { _tile_release(); }
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;
};
#else
inline bool enabled() { return false; }
#endif

}  // namespace amx
}  // namespace pto
