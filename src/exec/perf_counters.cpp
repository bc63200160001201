#include "exec/perf_counters.h"

#include <cerrno>
#include <cstring>

#if defined(__linux__)
#include <linux/perf_event.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace pypto::exec {
namespace {

#if defined(__linux__)
struct EventSpec {
  uint32_t type;
  uint64_t config;
};
constexpr EventSpec kEvents[kNumCounters] = {
    {PERF_TYPE_HARDWARE, PERF_COUNT_HW_CPU_CYCLES},       {PERF_TYPE_HARDWARE, PERF_COUNT_HW_INSTRUCTIONS},
    {PERF_TYPE_HARDWARE, PERF_COUNT_HW_CACHE_MISSES},     {PERF_TYPE_HARDWARE, PERF_COUNT_HW_BRANCH_MISSES},
    {PERF_TYPE_SOFTWARE, PERF_COUNT_SW_TASK_CLOCK},       {PERF_TYPE_SOFTWARE, PERF_COUNT_SW_PAGE_FAULTS},
    {PERF_TYPE_SOFTWARE, PERF_COUNT_SW_CONTEXT_SWITCHES},
};

// The calling thread's counters, opened on first use, closed when the thread ends.
struct ThreadCounters {
  std::array<int, kNumCounters> fd;
  std::array<int, kNumCounters> err{};  // errno of a failed open
  ThreadCounters() {
    for (int i = 0; i < kNumCounters; ++i) {
      perf_event_attr a;
      std::memset(&a, 0, sizeof a);
      a.size = sizeof a;
      a.type = kEvents[i].type;
      a.config = kEvents[i].config;
      a.exclude_kernel = 1;  // allowed at perf_event_paranoid 2, the usual default
      a.exclude_hv = 1;
      // pid 0, cpu -1: this thread, on whatever CPU it runs; counting starts now (readings are
      // only ever subtracted).
      fd[i] = int(syscall(SYS_perf_event_open, &a, 0, -1, -1, PERF_FLAG_FD_CLOEXEC));
      err[i] = fd[i] < 0 ? errno : 0;
    }
  }
  ~ThreadCounters() {
    for (int f : fd)
      if (f >= 0) close(f);
  }
  ThreadCounters(const ThreadCounters&) = delete;
  ThreadCounters& operator=(const ThreadCounters&) = delete;
};

ThreadCounters& this_thread() {
  thread_local ThreadCounters counters;
  return counters;
}
#endif

}  // namespace

const char* counter_name(Counter c) {
  switch (c) {
    case Counter::Cycles:
      return "cycles";
    case Counter::Instructions:
      return "instructions";
    case Counter::CacheMisses:
      return "cache_misses";
    case Counter::BranchMisses:
      return "branch_misses";
    case Counter::TaskClockNs:
      return "task_clock_ns";
    case Counter::PageFaults:
      return "page_faults";
    case Counter::ContextSwitches:
      return "context_switches";
    case Counter::Count:
      break;
  }
  return "?";
}

CounterReading read_thread_counters() {
  CounterReading r;
#if defined(__linux__)
  ThreadCounters& t = this_thread();
  for (int i = 0; i < kNumCounters; ++i) {
    uint64_t v = 0;
    r.ok[i] = t.fd[i] >= 0 && read(t.fd[i], &v, sizeof v) == ssize_t(sizeof v);
    r.value[i] = v;
  }
#endif
  return r;
}

std::string counter_unavailable_reason(Counter c) {
#if defined(__linux__)
  const int e = this_thread().err[static_cast<int>(c)];
  if (e == 0) return "";
  std::string why = std::string("perf_event_open: ") + std::strerror(e);
  if (e == ENOENT || e == EOPNOTSUPP)
    why += " (the kernel exposes no such event: no hardware PMU, as in most virtual machines)";
  else if (e == EACCES || e == EPERM)
    why += " (not permitted: /proc/sys/kernel/perf_event_paranoid above 2, or a seccomp filter)";
  return why;
#else
  (void)c;
  return "perf_event_open exists on Linux only";
#endif
}

void CounterTotals::add(const CounterReading& before, const CounterReading& after) {
  for (int i = 0; i < kNumCounters; ++i) {
    const bool both = before.ok[i] && after.ok[i];
    ok[i] = (any ? ok[i] : true) && both;
    if (both) value[i] += double(after.value[i] - before.value[i]);
  }
  any = true;
}

}  // namespace pypto::exec
