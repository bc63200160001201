// The persistent worker pool behind parallel loops.
//
// Each worker owns a cache-line-sized mailbox. The caller of parallel_for writes one contiguous
// chunk into the mailbox of each participating worker, publishes it by bumping the mailbox's
// sequence number, runs chunk 0 itself and waits until every participant has reported back.
// A mailbox is only rewritten after its worker finished the previous chunk, so no job data is ever
// read while it changes. Workers spin for a short while after each task (back-to-back parallel
// loops are the common case) and then sleep on a condition variable.
//
// A loop body may throw (std::bad_alloc from a big tile, Interrupted, ...). Every chunk catches
// what its body throws; the caller waits until all chunks have finished, whatever happened, and
// only then rethrows the first exception: the loop's context lives in the caller's frame, so
// nothing may unwind it while a worker still runs.
#include "exec/thread_pool.h"
#include "target/target.h"

#include <pthread.h>
#include <sched.h>

#include <cxxabi.h>
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "exec/loop_cost.h"
#include "exec/openmp_bridge.h"
#include "ir/types.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define PYPTO_CPU_RELAX() _mm_pause()
#elif defined(__aarch64__)
#define PYPTO_CPU_RELAX() asm volatile("yield" ::: "memory")
#else
#define PYPTO_CPU_RELAX() ((void)0)
#endif

namespace pypto::runtime {
namespace {

// Tiles live on the stack of whichever thread runs a loop body; give workers room for them.
constexpr size_t kWorkerStackBytes = size_t(16) << 20;
// How long an idle worker (and a waiting caller) spins before blocking.
constexpr auto kSpinTime = std::chrono::microseconds(200);
constexpr int kPauseSpins = 256;  // pause instructions (~5-40 ns each) before yielding
constexpr int kThreadsPerCore = 8;
constexpr int kMinThreadLimit = 64;

// True while this thread runs inside a parallel_for (as caller or worker): nested calls run inline.
thread_local bool t_in_parallel = false;

// More threads than this only cost memory (16 MiB of stack each) and scheduling.
int thread_limit() { return std::max(kMinThreadLimit, kThreadsPerCore * available_cores()); }

void check_thread_count(int64_t n, const std::string& what) {
  if (n < 1) throw ir::Error(what + ": need at least 1 thread, got " + std::to_string(n));
  if (n > thread_limit())
    throw ir::Error(what + ": " + std::to_string(n) + " threads is more than the limit of " +
                    std::to_string(thread_limit()) + " (" + std::to_string(kThreadsPerCore) +
                    " per available core, " + std::to_string(available_cores()) + " cores, at least " +
                    std::to_string(kMinThreadLimit) + ")");
}

// $PYPTO_NUM_THREADS, else all available cores. A malformed or out-of-range value is an error
// rather than silently replaced.
int default_threads() {
  if (const char* env = std::getenv("PYPTO_NUM_THREADS"); env && *env) {
    char* end = nullptr;
    errno = 0;
    long long v = std::strtoll(env, &end, 10);
    if (end == env || *end != '\0' || errno == ERANGE)
      throw ir::Error("PYPTO_NUM_THREADS='" + std::string(env) + "' is not a whole number of threads");
    check_thread_count(v, "PYPTO_NUM_THREADS=" + std::string(env));
    return int(v);
  }
  return available_cores();
}

struct alignas(64) Worker {
  std::atomic<uint64_t> seq{0};  // bumped by the caller to hand over a chunk
  std::atomic<bool> sleeping{false};
  std::atomic<bool> stop{false};
  LoopBody body = nullptr;
  void* ctx = nullptr;
  int64_t begin = 0, end = 0;
  std::mutex mu;
  std::condition_variable cv;
  pthread_t thread{};
  class Pool* pool = nullptr;
};

class Pool {
 public:
  explicit Pool(int threads) { start(threads); }

  int threads() const { return nthreads_.load(std::memory_order_relaxed); }

  void run(int64_t n, LoopBody body, void* ctx) {
    std::lock_guard<std::mutex> lock(submit_);  // one parallel loop at a time
    const int64_t chunks = std::min<int64_t>(n, int64_t(workers_.size()) + 1);
    if (chunks <= 1) {  // resized to one thread since the caller looked
      body(ctx, 0, n);
      return;
    }
    const int64_t base = n / chunks, rem = n % chunks;
    auto chunk_begin = [&](int64_t i) { return i * base + std::min(i, rem); };
    pending_.store(int(chunks - 1), std::memory_order_relaxed);
    for (int64_t i = 1; i < chunks; ++i) {
      Worker& w = *workers_[size_t(i - 1)];
      w.body = body;
      w.ctx = ctx;
      w.begin = chunk_begin(i);
      w.end = chunk_begin(i + 1);
      w.seq.fetch_add(1, std::memory_order_seq_cst);
      // Dekker pairing with the worker's `sleeping` store: one of the two sees the other.
      if (w.sleeping.load(std::memory_order_seq_cst)) {
        std::lock_guard<std::mutex> wl(w.mu);
        w.cv.notify_one();
      }
    }
    t_in_parallel = true;
    try {
      body(ctx, 0, chunk_begin(1));
    } catch (abi::__forced_unwind&) {
      wait_done();  // thread cancellation: let it proceed once the workers are off our frame
      t_in_parallel = false;
      throw;
    } catch (...) {
      record(std::current_exception());
    }
    t_in_parallel = false;
    wait_done();
    std::exception_ptr e;
    {
      std::lock_guard<std::mutex> l(error_mu_);
      std::swap(e, error_);
    }
    if (e) std::rethrow_exception(e);
  }

  // The first exception of this loop wins; the rest are dropped.
  void record(std::exception_ptr e) {
    std::lock_guard<std::mutex> l(error_mu_);
    if (!error_) error_ = std::move(e);
  }

  void resize(int threads) {
    std::lock_guard<std::mutex> lock(submit_);
    stop_all();
    start(threads);
  }

  // A task finished: the last one wakes the caller if it went to sleep.
  void task_done() {
    if (pending_.fetch_sub(1, std::memory_order_seq_cst) == 1) {
      if (caller_waiting_.load(std::memory_order_seq_cst)) {
        std::lock_guard<std::mutex> l(done_mu_);
        done_cv_.notify_one();
      }
    }
  }

 private:
  void start(int threads) {
    threads = std::max(1, threads);
    for (int i = 0; i + 1 < threads; ++i) {
      auto w = std::make_unique<Worker>();
      w->pool = this;
      pthread_attr_t attr;
      pthread_attr_init(&attr);
      pthread_attr_setstacksize(&attr, kWorkerStackBytes);
      int rc = pthread_create(&w->thread, &attr, &Pool::worker_main, w.get());
      pthread_attr_destroy(&attr);
      if (rc != 0) break;  // fewer threads than asked: still correct, just less parallel
      workers_.push_back(std::move(w));
    }
    nthreads_.store(int(workers_.size()) + 1);
  }

  void stop_all() {
    for (auto& w : workers_) {
      w->stop.store(true, std::memory_order_seq_cst);
      w->seq.fetch_add(1, std::memory_order_seq_cst);
      {
        std::lock_guard<std::mutex> wl(w->mu);
        w->cv.notify_one();
      }
      pthread_join(w->thread, nullptr);
    }
    workers_.clear();
    nthreads_.store(1);
  }

  void wait_done() {
    auto until = std::chrono::steady_clock::now() + kSpinTime;
    int spins = 0;
    while (pending_.load(std::memory_order_acquire) != 0) {
      backoff(spins);
      if ((spins % 256 == 0 || spins >= kPauseSpins) && std::chrono::steady_clock::now() > until) {
        std::unique_lock<std::mutex> l(done_mu_);
        caller_waiting_.store(true, std::memory_order_seq_cst);
        done_cv_.wait(l, [&] { return pending_.load(std::memory_order_acquire) == 0; });
        caller_waiting_.store(false, std::memory_order_relaxed);
        break;
      }
    }
  }

  // One step of a spin-wait: pause instructions first; after a short while yield the CPU on each
  // step, so that on an oversubscribed machine the thread we wait for can get a core.
  static void backoff(int& spins) {
    if (++spins < kPauseSpins) {
      PYPTO_CPU_RELAX();
    } else {
      sched_yield();
    }
  }

  static void* worker_main(void* arg) {
    Worker& w = *static_cast<Worker*>(arg);
    t_in_parallel = true;  // anything a loop body starts runs inline on this thread
    uint64_t seen = 0;
    for (;;) {
      uint64_t s = wait_for_task(w, seen);
      seen = s;
      if (w.stop.load(std::memory_order_acquire)) return nullptr;
      try {
        w.body(w.ctx, w.begin, w.end);
      } catch (...) {
        w.pool->record(std::current_exception());
      }
      w.pool->task_done();
    }
  }

  static uint64_t wait_for_task(Worker& w, uint64_t seen) {
    auto until = std::chrono::steady_clock::now() + kSpinTime;
    int spins = 0;
    for (;;) {
      uint64_t s = w.seq.load(std::memory_order_acquire);
      if (s != seen) return s;
      backoff(spins);
      if ((spins % 256 == 0 || spins >= kPauseSpins) && std::chrono::steady_clock::now() > until) break;
    }
    std::unique_lock<std::mutex> l(w.mu);
    w.sleeping.store(true, std::memory_order_seq_cst);
    w.cv.wait(l, [&] { return w.seq.load(std::memory_order_seq_cst) != seen; });
    w.sleeping.store(false, std::memory_order_relaxed);
    return w.seq.load(std::memory_order_acquire);
  }

  std::vector<std::unique_ptr<Worker>> workers_;
  std::atomic<int> nthreads_{1};  // read without the lock by parallel_for's fast path
  std::mutex submit_;
  alignas(64) std::atomic<int> pending_{0};
  std::atomic<bool> caller_waiting_{false};
  std::mutex done_mu_;
  std::condition_variable done_cv_;
  std::mutex error_mu_;
  std::exception_ptr error_;  // first exception thrown by a chunk of the current loop
};

// The pool is created on first use and never destroyed: worker threads may still be blocked in
// it when static destructors run at exit.
std::mutex g_pool_mu;
Pool* g_pool = nullptr;
std::atomic<int> g_requested{0};  // 0 = default
bool g_atfork_registered = false;

// After fork() only the forking thread exists in the child: forget the parent's pool there.
void forget_pool_in_child() {
  new (&g_pool_mu) std::mutex();
  g_pool = nullptr;
}

Pool& pool() {
  std::lock_guard<std::mutex> lock(g_pool_mu);
  if (!g_pool) {
    if (!g_atfork_registered) {
      pthread_atfork(nullptr, nullptr, &forget_pool_in_child);
      g_atfork_registered = true;
    }
    g_pool = new Pool(g_requested > 0 ? g_requested.load() : default_threads());
  }
  return *g_pool;
}

// Iterations [offset, offset + n) of a loop, renumbered from 0 (what the cost model left).
struct Shifted {
  LoopBody body;
  void* ctx;
  int64_t offset;
  static void run(void* c, int64_t begin, int64_t end) {
    auto* s = static_cast<Shifted*>(c);
    s->body(s->ctx, begin + s->offset, end + s->offset);
  }
};

// Threads a loop may use on a shared OpenMP runtime: what set_num_threads / $PYPTO_NUM_THREADS ask.
int wanted_threads() {
  int r = g_requested.load(std::memory_order_relaxed);
  if (r > 0) return r;
  static const int dflt = default_threads();
  return dflt;
}

}  // namespace

// Threads a loop runs on: the shared OpenMP runtime's or PyPTO's pool's.
static int loop_threads(bool omp) { return omp ? wanted_threads() : pool().threads(); }

void parallel_for(int64_t n, LoopBody body, void* ctx) {
  if (n <= 0) return;
  const bool omp = openmp::attached();
  if (n == 1 || t_in_parallel || (omp && openmp::in_region())) {
    body(ctx, 0, n);
    return;
  }
  const int threads = loop_threads(omp);
  if (threads == 1) {
    body(ctx, 0, n);
  } else if (omp) {
    openmp::parallel_for(n, body, ctx, threads);
  } else {
    pool().run(n, body, ctx);
  }
}

void parallel_for_costed(int64_t n, LoopBody body, void* ctx) {
  const bool omp = openmp::attached();
  if (n <= 1 || t_in_parallel || (omp && openmp::in_region()) || loop_threads(omp) == 1) {
    parallel_for(n, body, ctx);
    return;
  }
  const int64_t done = run_serial_part(n, body, ctx);  // the cost model (loop_cost.h)
  if (done == n) return;
  Shifted rest{body, ctx, done};
  parallel_for(n - done, &Shifted::run, &rest);
}

int num_threads() { return pool().threads(); }

int max_threads() { return thread_limit(); }

void set_num_threads(int64_t n) {
  if (t_in_parallel) return;  // resizing from inside a loop body would wait for itself
  if (n <= 0)
    n = default_threads();
  else
    check_thread_count(n, "set_num_threads(" + std::to_string(n) + ")");
  {
    std::lock_guard<std::mutex> lock(g_pool_mu);
    g_requested = int(n);
    if (!g_pool) return;
  }
  if (g_pool->threads() != n) g_pool->resize(n);
}

}  // namespace pypto::runtime
