// The cost model of parallel loops (small loops stay on the caller) and parallel loops on an
// OpenMP runtime already loaded in the process (here the system's libgomp, as torch's would be).
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

#include "exec/loop_cost.h"
#include "exec/openmp_bridge.h"
#include "exec/thread_pool.h"

namespace {

namespace rt = pypto::runtime;

struct Record {
  std::mutex mu;
  std::set<std::thread::id> threads;
  std::vector<int> hits;
  int sleep_us = 0;
  explicit Record(int64_t n, int sleep = 0) : hits(size_t(n), 0), sleep_us(sleep) {}
  static void body(void* p, int64_t b, int64_t e) {
    auto* r = static_cast<Record*>(p);
    for (int64_t i = b; i < e; ++i) {
      if (r->sleep_us) std::this_thread::sleep_for(std::chrono::microseconds(r->sleep_us));
      std::lock_guard<std::mutex> l(r->mu);
      r->threads.insert(std::this_thread::get_id());
      r->hits[size_t(i)]++;
    }
  }
  bool each_once() const {
    for (int h : hits)
      if (h != 1) return false;
    return true;
  }
};

TEST(LoopCost, SmallLoopsStayOnTheCaller) {
  rt::set_num_threads(2);
  // A preemption while a loop is measured (a loaded machine) makes it look big: a few attempts.
  bool stayed = false;
  for (int attempt = 0; attempt < 5 && !stayed; ++attempt) {
    rt::reset_loop_costs();
    stayed = true;
    for (int rep = 0; rep < 4; ++rep) {
      Record r(16);
      rt::parallel_for_costed(16, &Record::body, &r);
      EXPECT_TRUE(r.each_once());
      if (rep > 0)
        stayed = stayed && r.threads.size() == 1 && *r.threads.begin() == std::this_thread::get_id();
    }
  }
  EXPECT_TRUE(stayed);
  rt::set_num_threads(0);
}

TEST(LoopCost, BigLoopsGoParallelAfterTheFirstIteration) {
  rt::set_num_threads(2);
  rt::reset_loop_costs();
  for (int rep = 0; rep < 3; ++rep) {
    Record r(6, 2000);  // 2 ms per iteration: far above the threshold
    rt::parallel_for_costed(6, &Record::body, &r);
    EXPECT_TRUE(r.each_once());
    EXPECT_EQ(r.threads.size(), 2u) << "rep " << rep;
  }
  rt::set_num_threads(0);
}

TEST(LoopCost, AnExceptionInTheMeasuredIterationReachesTheCaller) {
  rt::set_num_threads(2);
  rt::reset_loop_costs();
  auto body = [](void*, int64_t b, int64_t) {
    if (b == 0) throw std::runtime_error("boom");
  };
  EXPECT_THROW(rt::parallel_for_costed(8, body, nullptr), std::runtime_error);
  rt::set_num_threads(0);
}

TEST(OpenMPBridge, LoopsRunOnALoadedRuntime) {
  void* gomp = dlopen("libgomp.so.1", RTLD_NOW | RTLD_GLOBAL);
  if (gomp == nullptr) GTEST_SKIP() << "no libgomp on this machine";
  // Two team threads whatever OMP_NUM_THREADS says.
  auto set_threads = reinterpret_cast<void (*)(int)>(dlsym(gomp, "omp_set_num_threads"));
  ASSERT_NE(set_threads, nullptr);
  set_threads(2);
  EXPECT_NE(rt::openmp::attach().find("libgomp"), std::string::npos);
  ASSERT_TRUE(rt::openmp::attached());
  rt::set_num_threads(2);
  Record r(100, 200);
  rt::parallel_for(100, &Record::body, &r);
  EXPECT_TRUE(r.each_once());
  EXPECT_EQ(r.threads.size(), 2u);
  // nested loops run inline on the team thread; exceptions come back to the caller
  std::atomic<int> inner_threads{0};
  rt::parallel_for(
      4,
      [](void* p, int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) {
          Record in(10);
          rt::parallel_for(10, &Record::body, &in);
          EXPECT_TRUE(in.each_once());
          static_cast<std::atomic<int>*>(p)->fetch_add(int(in.threads.size()));
        }
      },
      &inner_threads);
  EXPECT_EQ(inner_threads.load(), 4);
  auto thrower = [](void*, int64_t b, int64_t) {
    if (b != 0) throw std::runtime_error("team thread");
  };
  EXPECT_THROW(rt::parallel_for(8, thrower, nullptr), std::runtime_error);
  rt::openmp::detach();
  EXPECT_FALSE(rt::openmp::attached());
  rt::set_num_threads(0);
}

}  // namespace
