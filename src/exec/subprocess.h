// Runs a helper program (the C++ compiler) with its output captured, a time limit, and the
// calling thread's stop flag honoured. The child gets a process group of its own so that a
// timeout or Ctrl-C kills the compiler driver and everything it started (cc1plus, as, ld).
#pragma once
#include <string>
#include <vector>

namespace pypto::runtime {

struct ProcessResult {
  int status = 0;          // exit status; 128 + signal when killed by a signal
  int spawn_error = 0;     // errno when the program could not be started (status is then -1)
  bool timed_out = false;  // killed after timeout_seconds
  std::string output;      // stdout and stderr, interleaved
};

// argv[0] is looked up in PATH. timeout_seconds <= 0: no limit. Throws Interrupted (after killing
// the child) when the calling thread's stop flag is set while it waits.
ProcessResult run_process(const std::vector<std::string>& argv, double timeout_seconds);

// $PYPTO_COMPILE_TIMEOUT in seconds (default 600; 0 = no limit). Throws ir::Error when malformed.
double compile_timeout_seconds();

}  // namespace pypto::runtime
