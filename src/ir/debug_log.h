// PYPTO_LOG_LEVEL=DEBUG (or the seed's spelling PYTO_LOG_LEVEL): the passes log their times and
// IR, the CPU backend its compile commands, times and cache hits. One switch for every layer.
#pragma once
#include <string>

namespace pypto::ir {

bool debug_logging();                     // reads the environment (not on a hot path)
void debug_log(const std::string& line);  // "[pypto] " + line + "\n" to stderr, when on

}  // namespace pypto::ir
