// The simulated NPU's description: the built-in values and the reader of the text format.
#include "target/npu_target.h"

#include <algorithm>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace pypto::target {
namespace {

// Modelled on public descriptions of DaVinci-class AI cores (Ascend 910): 32 cores at 1 GHz, a
// 16x16x16 fp16 cube (4096 MACs per cycle), a 256-byte-per-cycle vector unit, 1 MiB L1,
// 64 KiB L0A/L0B, 256 KiB L0C and a 256 KiB unified buffer. DMA figures are per core and are our
// assumption (HBM bandwidth shared by 32 cores, a few hundred cycles of latency).
const char* const kDefault = R"(# npu-sim: a DaVinci-class AI core (see docs/npu_sim.md)
[machine]
name = "npu-sim"
clock_ghz = 1.0
cores = 32
issue_cycles = 1

[matrix]
fractal = [16, 16, 16]          # M0, K0, N0 of one multiply-accumulate step
startup_cycles = 16
l1_to_l0_bytes_per_cycle = 256
# fractals per cycle by operand dtype (f16/bf16/i8 as published; the rest are assumptions: f32
# at a quarter rate, and wide types the cube lacks at an emulated 1/16 so such programs still run)
f16 = 1.0
bf16 = 1.0
i8 = 2.0
f32 = 0.25
i32 = 0.25
f64 = 0.0625
i64 = 0.0625

[vector]
bytes_per_cycle = 256
transcendental_factor = 4
startup_cycles = 8

[memory.l1]
bytes = 1048576
align = 32
[memory.ub]
bytes = 262144
align = 32
[memory.l0c]
bytes = 262144
align = 512

[spaces]                        # ISA tile space -> local memory
vec = "ub"
mat = "l1"
acc = "l0c"

[dma.gm_in]                     # MTE2: global -> local
latency_cycles = 200
bytes_per_cycle = 64
[dma.gm_out]                    # MTE3: local -> global
latency_cycles = 200
bytes_per_cycle = 64
)";

std::string trim(const std::string& s) {
  const size_t a = s.find_first_not_of(" \t\r");
  if (a == std::string::npos) return "";
  const size_t b = s.find_last_not_of(" \t\r");
  return s.substr(a, b - a + 1);
}

// Removes a `#` comment that is not inside a string.
std::string strip_comment(const std::string& s) {
  bool in_string = false;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '"') in_string = !in_string;
    if (s[i] == '#' && !in_string) return s.substr(0, i);
  }
  return s;
}

struct Line {
  int number;
  std::string key, value;
  [[noreturn]] void fail(const std::string& what) const {
    throw std::invalid_argument("NPU target description, line " + std::to_string(number) + " (" + key +
                                "): " + what);
  }
  double number_value() const {
    char* end = nullptr;
    const double v = std::strtod(value.c_str(), &end);
    if (value.empty() || trim(end) != "") fail("expected a number, got '" + value + "'");
    return v;
  }
  double positive() const {
    const double v = number_value();
    if (!(v > 0)) fail("must be positive, got '" + value + "'");
    return v;
  }
  int64_t positive_int() const {
    const double v = positive();
    if (v != double(int64_t(v))) fail("must be an integer, got '" + value + "'");
    return int64_t(v);
  }
  int64_t count() const {  // an integer >= 0
    const double v = number_value();
    if (v < 0 || v != double(int64_t(v))) fail("must be an integer >= 0, got '" + value + "'");
    return int64_t(v);
  }
  std::string string_value() const {
    if (value.size() < 2 || value.front() != '"' || value.back() != '"')
      fail("expected a quoted string, got '" + value + "'");
    return value.substr(1, value.size() - 2);
  }
};

void apply(NpuTarget& t, const std::string& section, const Line& l) {
  const std::string& k = l.key;
  auto unknown = [&]() { l.fail("unknown key in [" + section + "]"); };
  if (section == "machine") {
    if (k == "name")
      t.name = l.string_value();
    else if (k == "clock_ghz")
      t.clock_ghz = l.positive();
    else if (k == "cores")
      t.cores = int(l.positive_int());
    else if (k == "issue_cycles")
      t.issue_cycles = l.count();
    else
      unknown();
  } else if (section == "matrix") {
    if (k == "fractal") {
      std::string v = trim(l.value);
      if (v.size() < 2 || v.front() != '[' || v.back() != ']') l.fail("expected [M0, K0, N0]");
      std::stringstream in(v.substr(1, v.size() - 2));
      std::string part;
      int64_t dims[3];
      int n = 0;
      while (std::getline(in, part, ',')) {
        if (n == 3) l.fail("expected three numbers");
        Line one{l.number, k, trim(part)};
        dims[n++] = one.positive_int();
      }
      if (n != 3) l.fail("expected three numbers");
      t.fractal_m = dims[0];
      t.fractal_k = dims[1];
      t.fractal_n = dims[2];
    } else if (k == "startup_cycles") {
      t.matrix_startup_cycles = l.count();
    } else if (k == "l1_to_l0_bytes_per_cycle") {
      t.l1_to_l0_bytes_per_cycle = l.positive();
    } else {
      t.fractals_per_cycle[k] = l.positive();  // any other key: an operand dtype's rate
    }
  } else if (section == "vector") {
    if (k == "bytes_per_cycle")
      t.vector_bytes_per_cycle = l.positive();
    else if (k == "transcendental_factor")
      t.transcendental_factor = l.positive();
    else if (k == "startup_cycles")
      t.vector_startup_cycles = l.count();
    else
      unknown();
  } else if (section.rfind("memory.", 0) == 0) {
    LocalMemory& m = t.memories[section.substr(7)];
    m.name = section.substr(7);
    if (k == "bytes")
      m.bytes = l.positive_int();
    else if (k == "align")
      m.align = l.positive_int();
    else
      unknown();
  } else if (section == "spaces") {
    if (k != "vec" && k != "mat" && k != "acc") l.fail("ISA spaces are vec, mat and acc");
    t.space_memory[k] = l.string_value();
  } else if (section == "dma.gm_in" || section == "dma.gm_out") {
    DmaPipe& p = section == "dma.gm_in" ? t.gm_in : t.gm_out;
    if (k == "latency_cycles")
      p.latency_cycles = l.count();
    else if (k == "bytes_per_cycle")
      p.bytes_per_cycle = l.positive();
    else
      unknown();
  } else {
    l.fail("unknown section [" + section + "]");
  }
}

}  // namespace

const std::string& default_npu_target_text() {
  static const std::string text = kDefault;
  return text;
}

NpuTarget parse_npu_target(const std::string& text, const NpuTarget& base) {
  NpuTarget t = base;
  std::istringstream in(text);
  std::string raw, section;
  int number = 0;
  while (std::getline(in, raw)) {
    ++number;
    const std::string s = trim(strip_comment(raw));
    if (s.empty()) continue;
    if (s.front() == '[') {
      if (s.back() != ']')
        throw std::invalid_argument("NPU target description, line " + std::to_string(number) +
                                    ": malformed section header '" + s + "'");
      section = trim(s.substr(1, s.size() - 2));
      continue;
    }
    const size_t eq = s.find('=');
    if (eq == std::string::npos)
      throw std::invalid_argument("NPU target description, line " + std::to_string(number) +
                                  ": expected `key = value`, got '" + s + "'");
    Line l{number, trim(s.substr(0, eq)), trim(s.substr(eq + 1))};
    if (section.empty()) l.fail("a key before any [section]");
    apply(t, section, l);
  }
  for (const auto& [space, mem] : t.space_memory)
    if (!t.memories.count(mem))
      throw std::invalid_argument("NPU target description: space '" + space + "' is placed in memory '" +
                                  mem + "', which no [memory." + mem + "] section describes");
  return t;
}

NpuTarget parse_npu_target(const std::string& text) {
  static const NpuTarget builtin = parse_npu_target(default_npu_target_text(), NpuTarget{});
  return parse_npu_target(text, builtin);
}

NpuTarget npu_target_from_env() {
  const char* path = std::getenv("PYPTO_SIM_TARGET");
  if (!path || !*path) return parse_npu_target("");
  std::ifstream f(path);
  if (!f) throw std::invalid_argument(std::string("PYPTO_SIM_TARGET: cannot read '") + path + "'");
  std::stringstream buf;
  buf << f.rdbuf();
  return parse_npu_target(buf.str());
}

namespace {
int64_t memory_bytes(const NpuTarget& t, const std::string& space) {
  auto m = t.space_memory.find(space);
  if (m == t.space_memory.end()) return 0;
  auto mem = t.memories.find(m->second);
  return mem == t.memories.end() ? 0 : mem->second.bytes;
}
int64_t round_down(int64_t v, int64_t unit) { return std::max(unit, v / unit * unit); }
}  // namespace

NpuTileSizes npu_tile_sizes(const NpuTarget& t) {
  NpuTileSizes z;
  z.fractal_m = std::max<int64_t>(t.fractal_m, 1);
  z.fractal_n = std::max<int64_t>(t.fractal_n, 1);
  constexpr int64_t kElem = 4;
  // Accumulator: two m x n tiles in the smaller of the accumulator and vector memories (the
  // accumulator of a matmul whose result feeds the vector unit is a vector tile); operands: four
  // copies of m x k and k x n in the operand memory.
  int64_t acc = std::min(memory_bytes(t, "acc"), memory_bytes(t, "vec"));
  if (acc <= 0) acc = std::max(memory_bytes(t, "acc"), memory_bytes(t, "vec"));
  const int64_t mat = memory_bytes(t, "mat");
  z.m = z.fractal_m;
  z.n = z.fractal_n;
  while (z.m < 256 && 2 * (2 * z.m) * (2 * z.n) * kElem <= acc &&
         4 * (2 * z.m + 2 * z.n) * z.k * kElem <= mat) {
    z.m *= 2;
    z.n *= 2;
  }
  // Elementwise: 8 tiles of rows x cols in the vector memory.
  const int64_t per_tile = memory_bytes(t, "vec") / 8 / kElem;
  z.rows = 1;
  while (z.rows < 64 && 2 * z.rows * z.cols <= per_tile) z.rows *= 2;
  return z;
}

bool NpuTileSizes::halve() {
  if (rows > 1) {
    rows /= 2;
    return true;
  }
  if (m <= fractal_m && n <= fractal_n) return false;
  m = round_down(m / 2, fractal_m);
  n = round_down(n / 2, fractal_n);
  return true;
}

}  // namespace pypto::target
