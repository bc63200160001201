// See loop_cost.h. A loop is known by its body (one trampoline per loop of generated code) and
// its trip count. A stale entry (a kernel unloaded and another loaded at the same address) only
// costs speed, never correctness: both ways run the same iterations.
#include "exec/loop_cost.h"

#include <chrono>
#include <mutex>
#include <unordered_map>

namespace pypto::runtime {
namespace {

struct Key {
  LoopBody body;
  int64_t n;
  bool operator==(const Key& o) const { return body == o.body && n == o.n; }
};
struct KeyHash {
  size_t operator()(const Key& k) const {
    return std::hash<const void*>()(reinterpret_cast<const void*>(k.body)) ^ (std::hash<int64_t>()(k.n) * 31);
  }
};

std::mutex g_mu;
std::unordered_map<Key, bool, KeyHash> g_small;  // measured loops: true = runs serially

}  // namespace

int64_t run_serial_part(int64_t n, LoopBody body, void* ctx) {
  const Key key{body, n};
  {
    std::lock_guard<std::mutex> l(g_mu);
    auto it = g_small.find(key);
    if (it != g_small.end()) {
      if (!it->second) return 0;
      body(ctx, 0, n);
      return n;
    }
  }
  // Iterations one by one until the loop is done or has taken half the threshold: a small loop
  // is measured whole, a big one by the prefix that ran.
  const auto t0 = std::chrono::steady_clock::now();
  int64_t k = 0, ns = 0;
  while (k < n) {
    body(ctx, k, k + 1);
    ++k;
    ns = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count();
    if (ns > kSmallLoopNanos / 2) break;
  }
  const bool small = double(ns) / double(k) * double(n) < double(kSmallLoopNanos);
  {
    std::lock_guard<std::mutex> l(g_mu);
    g_small[key] = small;
  }
  if (!small) return k;
  if (k < n) body(ctx, k, n);
  return n;
}

void reset_loop_costs() {
  std::lock_guard<std::mutex> l(g_mu);
  g_small.clear();
}

}  // namespace pypto::runtime
