// Internal to the reference interpreter: how it runs `parallel for` loops. Iterations run in the
// order PYPTO_INTERP_PARALLEL asks (in order, reversed or shuffled) and every element access made
// inside a parallel loop is recorded, so that two iterations touching the same element (one of
// them writing) is reported as a race naming the loop instead of passing by the luck of the order.
#pragma once
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

namespace pypto::interp {

enum class ParallelOrder : uint8_t { InOrder, Reverse, Shuffle };

struct ParallelSettings {
  ParallelOrder order = ParallelOrder::InOrder;
  uint64_t seed = 0;
};

// Parses PYPTO_INTERP_PARALLEL: unset/"in-order", "reverse", "shuffle" or "shuffle:SEED".
// An unknown value is an error (a typo must not silently test nothing).
ParallelSettings parallel_settings_from_env();

// The iteration values lo, lo+step, ... (hi exclusive) in the order the settings ask for.
std::vector<int64_t> parallel_iterations(int64_t lo, int64_t hi, int64_t step, const ParallelSettings& s,
                                         uint64_t salt);

class RaceChecker {
 public:
  // A parallel loop over `var` with these iteration values starts / runs its iteration
  // values[ordinal] / ends.
  void enter(const std::string& var, std::vector<int64_t> values);
  void iteration(size_t ordinal) { loops_.back().ordinal = int64_t(ordinal); }
  void leave() { loops_.pop_back(); }
  // Depth of the loop nest now: storage allocated at depth d is private to the iterations of the
  // d enclosing parallel loops and is only checked against loops entered after it.
  size_t depth() const { return loops_.size(); }
  bool active() const { return !loops_.empty(); }
  // Records an access to the element at `key` (its address) of storage allocated at `alloc_depth`.
  // Returns "" or the start of a race message ("race in parallel loop 'i': iteration i=4 writes
  // an element iteration i=0 wrote"); the caller appends which element.
  std::string access(const void* key, size_t alloc_depth, bool write);

 private:
  static constexpr int64_t kNone = -1, kMany = -2;
  struct Seen {
    int64_t writer = kNone;  // ordinal of the writing iteration
    int64_t reader = kNone;  // ordinal of the one reading iteration, or kMany
  };
  struct Loop {
    std::string var;
    int64_t ordinal = -1;
    std::vector<int64_t> values;  // iteration value by ordinal, for messages
    std::unordered_map<const void*, Seen> seen;
  };
  std::vector<Loop> loops_;
};

}  // namespace pypto::interp
