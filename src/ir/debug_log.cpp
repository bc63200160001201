#include "ir/debug_log.h"

#include <strings.h>

#include <cstdlib>
#include <iostream>
#include <mutex>

namespace pypto::ir {

bool debug_logging() {
  for (const char* name : {"PYPTO_LOG_LEVEL", "PYTO_LOG_LEVEL"}) {
    const char* v = std::getenv(name);
    if (v && strcasecmp(v, "DEBUG") == 0) return true;
  }
  return false;
}

void debug_log(const std::string& line) {
  if (!debug_logging()) return;
  static std::mutex mu;  // whole lines, also from several threads
  std::lock_guard<std::mutex> lock(mu);
  std::cerr << "[pypto] " << line << "\n" << std::flush;
}

}  // namespace pypto::ir
