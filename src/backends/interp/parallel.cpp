// How the reference interpreter runs parallel loops: iteration order and race detection.
#include "backends/interp/parallel.h"

#include <algorithm>
#include <cstdlib>
#include <random>

#include "ir/ir.h"
#include "ir/trip_count.h"

namespace pypto::interp {

ParallelSettings parallel_settings_from_env() {
  ParallelSettings s;
  const char* env = std::getenv("PYPTO_INTERP_PARALLEL");
  const std::string v = env ? env : "";
  if (v.empty() || v == "in-order") return s;
  if (v == "reverse") {
    s.order = ParallelOrder::Reverse;
    return s;
  }
  if (v.rfind("shuffle", 0) == 0) {
    s.order = ParallelOrder::Shuffle;
    if (v.size() == 7) return s;
    if (v[7] == ':' && v.size() > 8 && v.find_first_not_of("0123456789", 8) == std::string::npos) {
      s.seed = std::strtoull(v.c_str() + 8, nullptr, 10);
      return s;
    }
  }
  throw ir::Error("PYPTO_INTERP_PARALLEL='" + v + "': expected in-order, reverse, shuffle or shuffle:SEED");
}

std::vector<int64_t> parallel_iterations(int64_t lo, int64_t hi, int64_t step, const ParallelSettings& s,
                                         uint64_t salt) {
  std::vector<int64_t> values;
  for (__int128 t = 0, n = ir::trip_count(lo, hi, step); t < n; ++t) values.push_back(int64_t(lo + t * step));
  if (s.order == ParallelOrder::Reverse) {
    std::reverse(values.begin(), values.end());
  } else if (s.order == ParallelOrder::Shuffle) {
    // Deterministic for a given seed and loop, so a failure reproduces; std::shuffle's algorithm
    // is the library's, so spell out Fisher-Yates to get the same order everywhere.
    std::mt19937_64 rng(s.seed * 0x9E3779B97F4A7C15ull + salt);
    for (size_t k = values.size(); k > 1; --k) std::swap(values[k - 1], values[size_t(rng() % k)]);
  }
  return values;
}

void RaceChecker::enter(const std::string& var, std::vector<int64_t> values) {
  loops_.push_back(Loop{var, -1, std::move(values), {}});
}

std::string RaceChecker::access(const void* key, size_t alloc_depth, bool write) {
  for (size_t d = alloc_depth; d < loops_.size(); ++d) {
    Loop& l = loops_[d];
    Seen& s = l.seen[key];
    const int64_t me = l.ordinal;
    const auto it = [&](int64_t ord) {
      return "iteration " + l.var + "=" + std::to_string(l.values[size_t(ord)]);
    };
    const std::string head = "race in parallel loop '" + l.var + "': " + it(me);
    if (s.writer >= 0 && s.writer != me)
      return head + (write ? " writes" : " reads") + " an element that " + it(s.writer) + " wrote";
    if (write && s.reader >= 0 && s.reader != me)
      return head + " writes an element that " + it(s.reader) + " read";
    if (write && s.reader == kMany) return head + " writes an element that other iterations read";
    if (write)
      s.writer = me;
    else if (s.reader == kNone)
      s.reader = me;
    else if (s.reader != me)
      s.reader = kMany;
  }
  return "";
}

}  // namespace pypto::interp
