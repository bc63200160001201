// The interpreter's parallel loops: iterations run in the order PYPTO_INTERP_PARALLEL asks, and
// two iterations touching one element (one of them writing) is a race error naming the loop.
// The whole C++ suite runs with shuffled parallel loops (set here, before any test runs), so a
// pass test comparing a program before and after parallelize observes a wrong `parallel for`.
#include <cstdlib>

#include "backends/interp/parallel.h"
#include "test_pass_util.h"

namespace {
using namespace pass_test;
using pypto::interp::parallel_iterations;
using pypto::interp::parallel_settings_from_env;
using pypto::interp::ParallelOrder;
using pypto::interp::ParallelSettings;

const bool kShuffledByDefault = [] {
  setenv("PYPTO_INTERP_PARALLEL", "shuffle", 0);
  return true;
}();

// Sets PYPTO_INTERP_PARALLEL for one test and restores it after.
struct OrderEnv {
  std::string saved;
  explicit OrderEnv(const char* v) {
    const char* s = std::getenv("PYPTO_INTERP_PARALLEL");
    saved = s ? s : "";
    setenv("PYPTO_INTERP_PARALLEL", v, 1);
  }
  ~OrderEnv() { setenv("PYPTO_INTERP_PARALLEL", saved.c_str(), 1); }
};

void expect_run_error(const char* text, std::vector<std::string> fragments) {
  Program p = parse_program(text);
  try {
    run(p, 1);
    ADD_FAILURE() << "expected an error containing '" << fragments[0] << "'";
  } catch (const Error& e) {
    for (const auto& f : fragments)
      EXPECT_NE(std::string(e.what()).find(f), std::string::npos) << "message: " << e.what();
  }
}

TEST(InterpParallel, SettingsAndOrders) {
  ASSERT_TRUE(kShuffledByDefault);
  {
    OrderEnv env("in-order");
    EXPECT_EQ(parallel_iterations(0, 10, 3, parallel_settings_from_env(), 7),
              (std::vector<int64_t>{0, 3, 6, 9}));
  }
  {
    OrderEnv env("reverse");
    EXPECT_EQ(parallel_iterations(0, 10, 3, parallel_settings_from_env(), 7),
              (std::vector<int64_t>{9, 6, 3, 0}));
    EXPECT_EQ(parallel_iterations(5, -1, -2, parallel_settings_from_env(), 7),
              (std::vector<int64_t>{1, 3, 5}));
  }
  for (const char* bad : {"shufle", "shuffle:", "shuffle:x1", "1"}) {
    OrderEnv env(bad);
    EXPECT_THROW(parallel_settings_from_env(), Error) << bad;
  }
  ParallelSettings s;
  s.order = ParallelOrder::Shuffle;
  std::vector<int64_t> a = parallel_iterations(0, 64, 1, s, 3), b = parallel_iterations(0, 64, 1, s, 3);
  EXPECT_EQ(a, b);  // reproducible
  std::vector<int64_t> sorted = a;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted, parallel_iterations(0, 64, 1, ParallelSettings{}, 3));  // a permutation
  EXPECT_NE(a, sorted);
  s.seed = 1;
  EXPECT_NE(parallel_iterations(0, 64, 1, s, 3), a);
}

// Every iteration of a user-declared parallel loop writes all of C: a write/write race, in any order.
TEST(InterpParallel, WriteWriteRaceNamesTheLoop) {
  for (const char* order : {"in-order", "reverse", "shuffle"}) {
    OrderEnv env(order);
    expect_run_error(R"(
func @race(%A: f32[4, 16], %C: f32[4, 16] out) {
  parallel for %i = 0 to 4 {
    alloc %x: f32[4, 16] vec
    TLOAD %x, %A
    TSTORE %C, %x
  }
})",
                     {"race in parallel loop 'i'", "wrote", "of 'C'", "TSTORE"});
  }
}

// Windows overlapping by one row (step 4, 5 rows): the shared row is written twice.
TEST(InterpParallel, OverlapByOneIsARace) {
  expect_run_error(R"(
func @w(%A: f32[68, 8], %C: f32[68, 8] out) {
  parallel for %i = 0 to 64 step 4 {
    alloc %x: f32[5, 8] vec
    TLOAD %x, %A[%i:5, 0:8]
    TSTORE %C[%i:5, 0:8], %x
  }
})",
                   {"race in parallel loop 'i'", "of 'C'"});
}

// In place, iteration i reads the window iteration i+4 writes: a read/write race in any order.
TEST(InterpParallel, ReadOfAnotherIterationsWriteIsARace) {
  for (const char* order : {"in-order", "reverse"}) {
    OrderEnv env(order);
    expect_run_error(R"(
func @stencil(%X: f32[16, 8] out) {
  parallel for %i = 0 to 12 step 4 {
    alloc %x: f32[4, 8] vec
    alloc %y: f32[4, 8] vec
    TLOAD %x, %X[%i:4, 0:8]
    TLOAD %y, %X[(%i + 4):4, 0:8]
    TADD %x, %x, %y
    TSTORE %X[%i:4, 0:8], %x
  }
})",
                     {"race in parallel loop 'i'", "of 'X'"});
  }
}

// A tile allocated outside the loop and written by every iteration is shared state.
TEST(InterpParallel, SharedTileIsARace) {
  expect_run_error(R"(
func @copy(%A: f32[16, 16], %C: f32[16, 16] out) {
  alloc %t: f32[4, 16] vec
  parallel for %i = 0 to 16 step 4 {
    TLOAD %t, %A[%i:4, 0:16]
    TSTORE %C[%i:4, 0:16], %t
  }
})",
                   {"race in parallel loop 'i'", "of tile 't'", "TLOAD"});
}

// Nested parallel loops over disjoint windows, with tiles and scratch private to each iteration
// and reads of a shared input: no race, and every order computes what the in-order run does.
TEST(InterpParallel, DisjointIterationsAgreeInEveryOrder) {
  Program p = parse_program(R"(
func @nest(%A: f32[12, 16], %B: f32[4, 16], %C: f32[12, 16] out) {
  parallel for %i = 0 to 12 step 4 {
    parallel for %j = 0 to 16 step 8 {
      alloc %s: f32[4, 8] gm temp
      alloc %x: f32[4, 8] vec
      alloc %b: f32[4, 8] vec
      TLOAD %x, %A[%i:4, %j:8]
      TSTORE %s, %x
      TLOAD %x, %s
      TLOAD %b, %B[0:4, %j:8]
      TMUL %x, %x, %b
      TSTORE %C[%i:4, %j:8], %x
    }
  }
})");
  std::vector<std::vector<float>> want;
  {
    OrderEnv env("in-order");
    want = run(p, 5);
  }
  for (const char* order : {"reverse", "shuffle", "shuffle:9"}) {
    OrderEnv env(order);
    EXPECT_TRUE(close(run(p, 5), want, 0)) << order;
  }
}

}  // namespace
