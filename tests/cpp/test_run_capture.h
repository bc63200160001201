// Runs a shell command and captures its output: for the C++ tests that compile and run a
// self-checking program (test_cpu_isa_native.cpp, test_cpu_isa_dot.cpp).
#pragma once
#include <cstdio>
#include <string>

// stdout and stderr of `cmd`; *status is pclose's status (-1 when the command could not start).
inline std::string run_capture(const std::string& cmd, int* status) {
  std::string out;
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  if (!p) {
    *status = -1;
    return out;
  }
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  *status = pclose(p);
  return out;
}
