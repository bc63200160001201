// See openmp_bridge.h. Only the stable GOMP entry points are used (Intel's runtime exports them
// too); the library is looked up with RTLD_NOLOAD, so PyPTO never brings in an OpenMP runtime.
#include "exec/openmp_bridge.h"

#include <dlfcn.h>
#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <exception>
#include <fstream>
#include <mutex>

namespace pypto::runtime::openmp {
namespace {

using GompParallel = void (*)(void (*)(void*), void*, unsigned, unsigned);
using OmpInt = int (*)();

struct Runtime {
  GompParallel parallel = nullptr;
  OmpInt thread_num = nullptr;
  OmpInt num_threads = nullptr;
  OmpInt max_threads = nullptr;
  OmpInt in_parallel = nullptr;
};

std::mutex g_mu;
Runtime g_rt;
std::atomic<const Runtime*> g_active{nullptr};

struct Region {
  int64_t n;
  LoopBody body;
  void* ctx;
  const Runtime* rt;
  std::mutex mu;
  std::exception_ptr error;
};

void region_main(void* arg) {
  Region& r = *static_cast<Region*>(arg);
  const int64_t t = r.rt->thread_num(), nt = std::max(1, r.rt->num_threads());
  const int64_t base = r.n / nt, rem = r.n % nt;
  const int64_t begin = t * base + std::min(t, rem), end = begin + base + (t < rem ? 1 : 0);
  if (begin >= end) return;
  try {  // nothing may leave an OpenMP region by an exception
    r.body(r.ctx, begin, end);
  } catch (...) {
    std::lock_guard<std::mutex> l(r.mu);
    if (!r.error) r.error = std::current_exception();
  }
}

bool is_openmp_library(const std::string& path) {
  auto slash = path.rfind('/');
  std::string file = slash == std::string::npos ? path : path.substr(slash + 1);
  return file.rfind("libgomp", 0) == 0 || file.rfind("libiomp", 0) == 0;
}

}  // namespace

std::string g_path;  // the runtime found before: attaching again is a flag, not a search

// libgomp is not fork-safe: a child whose parent ran OpenMP teams hangs in its next
// GOMP_parallel. A forked child runs its parallel loops on PyPTO's own pool (which restarts there).
namespace {
std::atomic<bool> g_forked{false};
void after_fork_in_child() {
  g_forked.store(true);
  g_active.store(nullptr);
  new (&g_mu) std::mutex();
}
[[maybe_unused]] const bool g_atfork = (pthread_atfork(nullptr, nullptr, &after_fork_in_child), true);
}  // namespace

std::string attach() {
  if (g_forked.load()) return "";
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_rt.parallel != nullptr) {
    g_active.store(&g_rt, std::memory_order_release);
    return g_path;
  }
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    auto p = line.find('/');
    if (p == std::string::npos) continue;
    std::string path = line.substr(p);
    if (!is_openmp_library(path)) continue;
    void* h = dlopen(path.c_str(), RTLD_LAZY | RTLD_NOLOAD);
    if (!h) continue;
    Runtime rt;
    rt.parallel = reinterpret_cast<GompParallel>(dlsym(h, "GOMP_parallel"));
    rt.thread_num = reinterpret_cast<OmpInt>(dlsym(h, "omp_get_thread_num"));
    rt.num_threads = reinterpret_cast<OmpInt>(dlsym(h, "omp_get_num_threads"));
    rt.max_threads = reinterpret_cast<OmpInt>(dlsym(h, "omp_get_max_threads"));
    rt.in_parallel = reinterpret_cast<OmpInt>(dlsym(h, "omp_in_parallel"));
    // The handle stays open: the runtime must outlive every region we start on it.
    if (rt.parallel && rt.thread_num && rt.num_threads && rt.max_threads && rt.in_parallel) {
      g_rt = rt;
      g_path = path;
      g_active.store(&g_rt, std::memory_order_release);
      return path;
    }
    dlclose(h);
  }
  return "";
}

void detach() { g_active.store(nullptr, std::memory_order_release); }

bool attached() { return g_active.load(std::memory_order_acquire) != nullptr; }

bool in_region() {
  const Runtime* rt = g_active.load(std::memory_order_acquire);
  return rt != nullptr && rt->in_parallel();
}

void parallel_for(int64_t n, LoopBody body, void* ctx, int threads) {
  const Runtime* rt = g_active.load(std::memory_order_acquire);
  if (rt == nullptr || rt->in_parallel()) {  // nested in a region: its thread runs it
    body(ctx, 0, n);
    return;
  }
  int64_t team = std::min<int64_t>({int64_t(threads), int64_t(rt->max_threads()), n});
  if (team <= 1) {
    body(ctx, 0, n);
    return;
  }
  Region r{n, body, ctx, rt, {}, nullptr};
  rt->parallel(&region_main, &r, unsigned(team), 0);
  if (r.error) std::rethrow_exception(r.error);
}

}  // namespace pypto::runtime::openmp
