// The description of a simulated NPU (an accelerator with a matrix unit, a vector unit, small
// local buffers and DMA engines), read from a small TOML-like text: `[section]` headers and
// `key = value` lines, `#` comments. The built-in description (default_npu_target_text) is
// modelled on public descriptions of DaVinci-class AI cores; a user's file or overrides are read
// on top of it, later keys winning. Format and meaning: docs/npu_sim.md.
#pragma once
#include <cstdint>
#include <map>
#include <string>

namespace pypto::target {

// One local memory of a core: capacity and the alignment every tile placed in it is rounded to.
struct LocalMemory {
  std::string name;  // "l1", "ub", "l0c"
  int64_t bytes = 0;
  int64_t align = 32;
};

// A DMA engine (pipe) between global memory and local memory: a fixed start-up latency per
// transfer plus bytes / bandwidth.
struct DmaPipe {
  int64_t latency_cycles = 0;
  double bytes_per_cycle = 1;
};

struct NpuTarget {
  std::string name = "npu-sim";
  double clock_ghz = 1.0;
  int cores = 1;
  // Scalar unit: every instruction is issued by it, in program order, this many cycles apart.
  int64_t issue_cycles = 1;
  // Matrix unit: one fractal M0 x K0 x N0 multiply-accumulate takes 1 / fractals_per_cycle[dtype]
  // cycles (dtype of the operands; a dtype not listed is refused), plus a start-up per instruction.
  int64_t fractal_m = 16, fractal_k = 16, fractal_n = 16;
  std::map<std::string, double> fractals_per_cycle;
  int64_t matrix_startup_cycles = 0;
  // Operands move from L1 into the matrix unit's input buffers (L0A/L0B) at this rate; charged on
  // the matrix pipe (the separate MTE1 engine of real cores is not modelled).
  double l1_to_l0_bytes_per_cycle = 256;
  // Vector unit: bytes of the widest operand per cycle; transcendental functions cost
  // transcendental_factor times more; a start-up per instruction.
  double vector_bytes_per_cycle = 256;
  double transcendental_factor = 4;
  int64_t vector_startup_cycles = 0;
  // Local memories: where each ISA space lives ("vec" -> ub, "mat" -> l1, "acc" -> l0c).
  std::map<std::string, LocalMemory> memories;      // by name
  std::map<std::string, std::string> space_memory;  // ISA space -> memory name
  DmaPipe gm_in, gm_out;                            // MTE2 (global -> local), MTE3 (local -> global)
};

// Tile shapes for a program compiled for the target without explicit tiles (the seed's
// "architecture analysis"). Only the shapes that do not change values are chosen: the rows of an
// elementwise tile and a matmul's m and n (multiples of the matrix unit's fractal); the columns
// of a reduction's tile and a matmul's k set the order of its sums, so they stay the pipeline's
// (`cols`, `k`: what the sizes assume), and the simulator's values stay the interpreter's. The
// accumulator (m x n) fits twice in its memory, the operands (m x k, k x n) four times in theirs
// (double buffering of the k loop and of the output tiles), and an elementwise tile 8 times in
// the vector memory (4 live tiles, double-buffered); 4-byte elements. `halve()` shrinks rows,
// then m and n toward one fractal (false: no smaller).
struct NpuTileSizes {
  int64_t rows = 16, m = 64, n = 64;
  int64_t cols = 512, k = 256;  // the pipeline's, assumed
  int64_t fractal_m = 16, fractal_n = 16;
  bool halve();
};
NpuTileSizes npu_tile_sizes(const NpuTarget& t);

// The built-in description, in the file format (docs/npu_sim.md shows it).
const std::string& default_npu_target_text();
// Parses `text` on top of `base` (keys it sets replace base's). Throws std::invalid_argument
// naming the line for a malformed line, an unknown section or key, or a bad value.
NpuTarget parse_npu_target(const std::string& text, const NpuTarget& base);
NpuTarget parse_npu_target(const std::string& text);  // on top of the built-in description
// The built-in description, then the file named by PYPTO_SIM_TARGET if set.
NpuTarget npu_target_from_env();

}  // namespace pypto::target
