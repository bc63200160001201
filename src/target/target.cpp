// Start-up analysis of the host: logical CPUs, cache sizes and SIMD features.
#include "target/target.h"

#include <sched.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#if defined(__aarch64__) && defined(__linux__)
#include <sys/auxv.h>
#endif

namespace pypto::runtime {
namespace {

std::string read_line(const std::string& path) {
  std::ifstream f(path);
  std::string s;
  std::getline(f, s);
  return s;
}

// "48K", "2048K", "32M" -> bytes; 0 when unreadable.
int64_t parse_size(const std::string& s) {
  if (s.empty()) return 0;
  size_t pos = 0;
  int64_t v = 0;
  try {
    v = std::stoll(s, &pos);
  } catch (...) {
    return 0;
  }
  char unit = pos < s.size() ? s[pos] : ' ';
  if (unit == 'K' || unit == 'k') v <<= 10;
  if (unit == 'M' || unit == 'm') v <<= 20;
  if (unit == 'G' || unit == 'g') v <<= 30;
  return v;
}

void read_caches(Target& t) {
  for (int i = 0; i < 8; ++i) {
    std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(i) + "/";
    std::string level = read_line(dir + "level");
    if (level.empty()) break;
    std::string type = read_line(dir + "type");
    int64_t size = parse_size(read_line(dir + "size"));
    if (size <= 0 || type == "Instruction") continue;
    if (level == "1") t.l1d_bytes = size;
    if (level == "2") t.l2_bytes = size;
    if (level == "3") t.l3_bytes = size;
  }
}

void read_simd(Target& t) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  struct Feature {
    const char* name;
    bool present;
  };
  const Feature features[] = {
      {"sse4.2", bool(__builtin_cpu_supports("sse4.2"))},
      {"avx", bool(__builtin_cpu_supports("avx"))},
      {"avx2", bool(__builtin_cpu_supports("avx2"))},
      {"fma", bool(__builtin_cpu_supports("fma"))},
      {"avx512f", bool(__builtin_cpu_supports("avx512f"))},
      {"avx512bw", bool(__builtin_cpu_supports("avx512bw"))},
      {"avx512vl", bool(__builtin_cpu_supports("avx512vl"))},
  };
  for (const auto& f : features)
    if (f.present) t.simd.push_back(f.name);
  // avx512_bf16 / avx512_vnni are not known to every compiler's __builtin_cpu_supports; read
  // /proc/cpuinfo.
  std::ifstream info("/proc/cpuinfo");
  std::string line;
  while (std::getline(info, line)) {
    if (line.rfind("flags", 0) != 0) continue;
    std::istringstream words(line);
    std::string w;
    while (words >> w)
      if (w == "avx512_bf16" || w == "avx512_vnni" || w == "amx_tile") t.simd.push_back(w);
    break;
  }
  bool has512 = std::find(t.simd.begin(), t.simd.end(), "avx512f") != t.simd.end();
  bool has256 = std::find(t.simd.begin(), t.simd.end(), "avx") != t.simd.end();
  t.vector_bytes = has512 ? 64 : has256 ? 32 : 16;
#elif defined(__aarch64__)
  t.simd.push_back("neon");  // Advanced SIMD is mandatory on AArch64
#if defined(__linux__) && defined(HWCAP_SVE)
  if (getauxval(AT_HWCAP) & HWCAP_SVE) t.simd.push_back("sve");
#endif
  t.vector_bytes = 16;
#endif
}

Target detect() {
  Target t;
#if defined(__x86_64__)
  t.arch = "x86_64";
#elif defined(__aarch64__)
  t.arch = "aarch64";
#elif defined(__i386__)
  t.arch = "x86";
#else
  t.arch = "unknown";
#endif
  t.cores = available_cores();
  read_caches(t);
  read_simd(t);
  return t;
}

}  // namespace

int available_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) {
    int n = CPU_COUNT(&set);
    if (n > 0) return n;
  }
  unsigned hc = std::thread::hardware_concurrency();
  return hc ? int(hc) : 1;
}

const Target& host_target() {
  static const Target t = detect();
  return t;
}

}  // namespace pypto::runtime
