// Runs a compiled kernel through the C ABI of include/pto/abi.h: marshals the arguments, hands
// its parallel loops to the runtime's pool, collects the errors it reports from any thread, and
// for a profiled run records each nest's span and each parallel chunk (compiler.h, RunProfile).
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <mutex>
#include <string>
#include <vector>

#include "backends/cpu/codegen.h"
#include "backends/cpu/compiler.h"
#include "backends/cpu/compiler_internal.h"
#include "exec/interrupt.h"
#include "exec/perf_counters.h"
#include "exec/thread_pool.h"
#include "ir/types.h"
#include "pto/abi.h"

namespace pypto::cpu {
namespace {

// Forwards the kernel's parallel loops to the runtime's pool.
void forward_parallel_for(int64_t n, pto_loop_body body, void* ctx) {
  runtime::parallel_for_costed(n, body, ctx);
}

// --- profiled runs: nest hooks and per-thread chunk spans ----------------------------------------
int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
int64_t this_thread_id() {
  thread_local const int64_t tid = int64_t(syscall(SYS_gettid));
  return tid;
}

struct Recorder {
  RunProfile* out;
  int64_t caller = this_thread_id();  // its counters cover the whole run, its chunks included
  std::mutex mu;                      // chunks end on any worker thread
  std::atomic<int32_t> nest{-1};
  int64_t nest_begin = 0;
};
thread_local Recorder* t_recorder = nullptr;  // set on the calling thread for a profiled run

void nest_hook(void* ctx, int32_t nest, int32_t phase) {
  auto* r = static_cast<Recorder*>(ctx);
  const int64_t t = now_ns();
  if (phase == 0) {
    r->nest.store(nest, std::memory_order_relaxed);
    r->nest_begin = t;
  } else {
    r->out->nests.push_back(ProfileSpan{nest, this_thread_id(), r->nest_begin, t});
  }
}

struct TimedLoop {
  pto_loop_body body;
  void* ctx;
  Recorder* rec;
  int32_t nest;
};
void timed_chunk(void* ctx, int64_t begin, int64_t end) {
  auto* l = static_cast<TimedLoop*>(ctx);
  const bool worker = this_thread_id() != l->rec->caller;
  exec::CounterReading c0;
  if (worker) c0 = exec::read_thread_counters();
  const int64_t t0 = now_ns();
  l->body(l->ctx, begin, end);
  const int64_t t1 = now_ns();
  exec::CounterReading c1;
  if (worker) c1 = exec::read_thread_counters();
  std::lock_guard<std::mutex> lock(l->rec->mu);
  l->rec->out->chunks.push_back(ProfileSpan{l->nest, this_thread_id(), t0, t1});
  if (worker) l->rec->out->counters.add(c0, c1);
}
// The profiled run's parallel_for: times each chunk. Nested loops (inside a chunk, on a worker)
// are not split further in the record.
void profiled_parallel_for(int64_t n, pto_loop_body body, void* ctx) {
  Recorder* rec = t_recorder;
  if (!rec) return runtime::parallel_for_costed(n, body, ctx);
  TimedLoop l{body, ctx, rec, rec->nest.load(std::memory_order_relaxed)};
  t_recorder = nullptr;  // worker-side nesting on the caller: plain
  try {
    runtime::parallel_for_costed(n, &timed_chunk, &l);
  } catch (...) {
    t_recorder = rec;
    throw;
  }
  t_recorder = rec;
}

// The first run-time error a kernel reports (from any worker thread); raised once it returns.
struct KernelErrors {
  std::mutex mu;
  std::string first;
};

void collect_error(void* ctx, const char* message) {
  auto* e = static_cast<KernelErrors*>(ctx);
  std::lock_guard<std::mutex> lock(e->mu);
  if (e->first.empty()) e->first = message ? message : "kernel error";
}

}  // namespace

void run(const CompiledKernel& k, const runtime::RunArgs& args, RunProfile* profile) {
  // Small fixed arrays keep a call allocation-free for the common case of few parameters.
  constexpr size_t kInline = 16;
  const size_t nt = args.tensors.size(), ns = args.scalars.size();
  void* data_inline[kInline];
  const int64_t* strides_inline[kInline];
  int64_t iscal_inline[kInline];
  double fscal_inline[kInline];
  std::vector<void*> data_heap;
  std::vector<const int64_t*> strides_heap;
  std::vector<int64_t> iscal_heap;
  std::vector<double> fscal_heap;
  void** data = data_inline;
  const int64_t** strides = strides_inline;
  int64_t* iscal = iscal_inline;
  double* fscal = fscal_inline;
  if (nt > kInline) {
    data_heap.resize(nt);
    strides_heap.resize(nt);
    data = data_heap.data();
    strides = strides_heap.data();
  }
  if (ns > kInline) {
    iscal_heap.resize(ns);
    fscal_heap.resize(ns);
    iscal = iscal_heap.data();
    fscal = fscal_heap.data();
  }
  for (size_t i = 0; i < nt; ++i) {
    data[i] = args.tensors[i].data;
    strides[i] = args.tensors[i].strides.data();
  }
  for (size_t j = 0; j < ns; ++j) {
    const ir::ScalarValue& v = args.scalars[j];
    // A float given for an integer parameter is rejected by Kernel::run; stay defined anyway.
    iscal[j] = !v.is_float ? v.i : (std::fabs(v.f) < 9.2e18 ? int64_t(v.f) : 0);
    fscal[j] = v.as_double();
  }
  pto_kernel_args a;
  a.data = data;
  a.strides = strides;
  a.iscalars = iscal;
  a.fscalars = fscal;
  a.parallel_for = &forward_parallel_for;
  static_assert(sizeof(std::atomic<int32_t>) == sizeof(int32_t), "the ABI reads the flag as an int32_t");
  a.stop = reinterpret_cast<const int32_t*>(&runtime::stop_flag());
  KernelErrors errors;
  a.report_error = &collect_error;
  a.error_ctx = &errors;
  a.nest_hook = nullptr;
  a.nest_ctx = nullptr;
  if (profile) {
    Recorder rec{profile};
    a.nest_hook = &nest_hook;
    a.nest_ctx = &rec;
    a.parallel_for = &profiled_parallel_for;
    t_recorder = &rec;
    const exec::CounterReading c0 = exec::read_thread_counters();
    try {
      k.fn(&a);
    } catch (...) {
      t_recorder = nullptr;
      throw;
    }
    const exec::CounterReading c1 = exec::read_thread_counters();
    t_recorder = nullptr;
    std::lock_guard<std::mutex> lock(rec.mu);
    profile->counters.add(c0, c1);
  } else {
    k.fn(&a);
  }
  if (runtime::stop_requested()) throw runtime::Interrupted();
  if (errors.first == kWideRowsMissing) throw WideRowsMissing();
  if (!errors.first.empty()) throw ir::Error(errors.first);
}

}  // namespace pypto::cpu
