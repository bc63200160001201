// Hardware and software event counters of the calling thread, through Linux perf_event_open:
// what a profiled kernel call reports beside its times (pypto.Profile.counters).
//
// Each thread opens its counters on first use and keeps them open for its life; a read is one
// read() per counter. Counting is limited to user space (exclude_kernel), which the default
// perf_event_paranoid setting (2) allows. Where a counter cannot be opened (no PMU in a virtual
// machine: ENOENT; paranoid 3 or a seccomp filter: EACCES/EPERM; not Linux) it is reported as
// unavailable with the reason, never as a zero.
#pragma once
#include <array>
#include <cstdint>
#include <string>

namespace pypto::exec {

enum class Counter : int {
  Cycles,           // hardware: CPU cycles in user space
  Instructions,     // hardware: instructions retired
  CacheMisses,      // hardware: last-level cache misses (the kernel's "cache-misses" event)
  BranchMisses,     // hardware: mispredicted branches
  TaskClockNs,      // software: time on a CPU, nanoseconds
  PageFaults,       // software: page faults
  ContextSwitches,  // software: times the thread was switched out
  Count
};
constexpr int kNumCounters = static_cast<int>(Counter::Count);

// "cycles", "instructions", "cache_misses", "branch_misses", "task_clock_ns", "page_faults",
// "context_switches".
const char* counter_name(Counter c);

// One reading of the calling thread's counters; `ok[i]` false where counter i is unavailable.
struct CounterReading {
  std::array<uint64_t, kNumCounters> value{};
  std::array<bool, kNumCounters> ok{};
};
CounterReading read_thread_counters();

// Why counter c cannot be counted on the calling thread ("" when it can), e.g.
// "perf_event_open: No such file or directory (no hardware PMU: a virtual machine?)".
std::string counter_unavailable_reason(Counter c);

// Sums of (after - before) over several threads' spans, per counter; a counter is present only
// if every span read it.
struct CounterTotals {
  std::array<double, kNumCounters> value{};
  std::array<bool, kNumCounters> ok{};
  bool any = false;  // at least one span added
  void add(const CounterReading& before, const CounterReading& after);
};

}  // namespace pypto::exec
