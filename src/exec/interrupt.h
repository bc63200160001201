// Stopping a running kernel early (Ctrl-C). Each thread has a stop flag that kernels poll between
// loop iterations and the compiler driver polls while it waits; a SigintScope makes SIGINT set the
// flag of the thread that holds it (the bindings hold one around kernel calls of Python's main
// thread, where KeyboardInterrupt belongs). A stopped kernel throws Interrupted.
#pragma once
#include <atomic>
#include <cstdint>
#include <stdexcept>

namespace pypto::runtime {

// Thrown when a run or a compile stopped because its stop flag was set: outputs are incomplete.
struct Interrupted : std::runtime_error {
  Interrupted() : std::runtime_error("interrupted (SIGINT)") {}
};

// The calling thread's stop flag (never set unless a SigintScope on this thread is active).
const std::atomic<int32_t>& stop_flag();
inline bool stop_requested() { return stop_flag().load(std::memory_order_relaxed) != 0; }

// While alive: SIGINT sets this thread's stop flag, then runs the handler that was installed
// before (Python's, which records the signal for the interpreter), so the signal is never lost.
// Does nothing when SIGINT is ignored or has its default action (the process would die anyway).
// One active scope per process (the main thread); a second one nested or on another thread is inert.
class SigintScope {
 public:
  SigintScope();
  ~SigintScope();
  SigintScope(const SigintScope&) = delete;
  SigintScope& operator=(const SigintScope&) = delete;
  bool active() const { return active_; }

 private:
  bool active_ = false;
};

}  // namespace pypto::runtime
