// The runtime surviving its own failures: exceptions in parallel loops, the thread cap, the
// compiler driver's time limit, refused compiler flags, the kernel cache's trust rules and its
// cross-process build lock.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <new>
#include <thread>

#include "backends/cpu/compiler.h"
#include "backends/cpu/compiler_internal.h"
#include "backends/cpu/kernel_cache.h"
#include "exec/subprocess.h"
#include "exec/thread_pool.h"
#include "ir/types.h"
#include "test_cpu_codegen_util.h"

namespace {

namespace rt = pypto::runtime;
namespace fs = std::filesystem;
using pypto::ir::Error;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// ---- exceptions in parallel loops ---------------------------------------------------------------

struct ThrowCtx {
  int64_t thrower;               // the iteration whose chunk throws
  std::atomic<int> finished{0};  // chunks that ran to their end
};

// Every chunk but the throwing one sleeps first: if the caller unwound before they finished, the
// count seen at the catch would be short (and ctx, on the caller's stack, would be gone).
void throwing_body(void* p, int64_t b, int64_t e) {
  auto* c = static_cast<ThrowCtx*>(p);
  if (c->thrower >= b && c->thrower < e) throw std::bad_alloc();
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  c->finished++;
}

void expect_rethrown_after_all_chunks(int64_t thrower) {
  rt::set_num_threads(4);
  ThrowCtx ctx{thrower};
  bool caught = false;
  try {
    rt::parallel_for(4, &throwing_body, &ctx);
  } catch (const std::bad_alloc&) {
    caught = true;
    EXPECT_EQ(ctx.finished.load(), 3) << "the exception reached the caller while chunks still ran";
  }
  EXPECT_TRUE(caught);
  // The pool is still whole: the next loop covers every index once.
  std::atomic<int64_t> sum{0};
  rt::parallel_for(
      1000,
      [](void* p, int64_t b, int64_t e) {
        int64_t s = 0;
        for (int64_t i = b; i < e; ++i) s += i;
        *static_cast<std::atomic<int64_t>*>(p) += s;
      },
      &sum);
  EXPECT_EQ(sum.load(), 1000 * 999 / 2);
  rt::set_num_threads(0);
}

TEST(RuntimeRobustness, WorkerExceptionReachesCallerAfterAllChunks) { expect_rethrown_after_all_chunks(3); }
TEST(RuntimeRobustness, CallerChunkExceptionWaitsForWorkers) { expect_rethrown_after_all_chunks(0); }

TEST(RuntimeRobustness, EveryChunkThrowingGivesOneException) {
  rt::set_num_threads(3);
  int caught = 0;
  try {
    rt::parallel_for(3, [](void*, int64_t, int64_t) { throw Error("chunk failed"); }, nullptr);
  } catch (const Error& e) {
    caught++;
    EXPECT_STREQ(e.what(), "chunk failed");
  }
  EXPECT_EQ(caught, 1);
  rt::set_num_threads(0);
}

// ---- thread cap -----------------------------------------------------------------------------------

TEST(RuntimeRobustness, ThreadCountIsCapped) {
  const int before = rt::num_threads();
  try {
    rt::set_num_threads(1000000);
    FAIL() << "a million threads were accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("limit of " + std::to_string(rt::max_threads())), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(rt::num_threads(), before);
  EXPECT_GE(rt::max_threads(), 64);
  rt::set_num_threads(rt::max_threads());  // the limit itself is allowed
  EXPECT_EQ(rt::num_threads(), rt::max_threads());
  rt::set_num_threads(0);
}

// ---- the compiler driver -------------------------------------------------------------------------

TEST(RuntimeRobustness, ProcessThatNeverExitsIsKilledAtTheTimeout) {
  const auto t0 = Clock::now();
  rt::ProcessResult r = rt::run_process({"sh", "-c", "echo started; sleep 1000"}, 0.5);
  EXPECT_TRUE(r.timed_out);
  EXPECT_LT(seconds_since(t0), 10.0);
  EXPECT_NE(r.output.find("started"), std::string::npos) << r.output;
}

// A grandchild keeping the output pipe open (as a fork()ed copy of this process would) must not
// keep the caller waiting once the program itself has exited.
TEST(RuntimeRobustness, ProcessEndIsSeenWhileItsPipeStaysOpen) {
  const auto t0 = Clock::now();
  rt::ProcessResult r = rt::run_process({"sh", "-c", "(sleep 30 &) ; echo done; exit 3"}, 20);
  EXPECT_FALSE(r.timed_out);
  EXPECT_EQ(r.status, 3);
  EXPECT_NE(r.output.find("done"), std::string::npos);
  EXPECT_LT(seconds_since(t0), 10.0);
}

// With SIGCHLD ignored the kernel reaps children itself: the wait must still end at once.
TEST(RuntimeRobustness, ProcessEndIsSeenWithSigchldIgnored) {
  struct sigaction ignore = {}, old = {};
  ignore.sa_handler = SIG_IGN;
  sigaction(SIGCHLD, &ignore, &old);
  const auto t0 = Clock::now();
  rt::ProcessResult r = rt::run_process({"sh", "-c", "echo hi"}, 20);
  sigaction(SIGCHLD, &old, nullptr);
  EXPECT_FALSE(r.timed_out);
  EXPECT_EQ(r.status, 0);
  EXPECT_NE(r.output.find("hi"), std::string::npos);
  EXPECT_LT(seconds_since(t0), 10.0);
}

TEST(RuntimeRobustness, CompileTimeoutFromEnvironment) {
  {
    cpu_test::ScopedEnv env("PYPTO_COMPILE_TIMEOUT", "2.5");
    EXPECT_EQ(rt::compile_timeout_seconds(), 2.5);
  }
  {
    cpu_test::ScopedEnv env("PYPTO_COMPILE_TIMEOUT", "soon");
    EXPECT_THROW(rt::compile_timeout_seconds(), Error);
  }
  EXPECT_GE(rt::compile_timeout_seconds(), 60.0);  // the default is generous
}

TEST(RuntimeRobustness, CompilerThatHangsFailsWithTheCommand) {
  const fs::path dir = fs::temp_directory_path() / ("pypto-hang-" + std::to_string(getpid()));
  fs::create_directories(dir);
  const fs::path cxx = dir / "hanging-cxx";
  std::ofstream(cxx)
      << "#!/bin/sh\ncase \"$*\" in *--version*) echo hanging-cxx 1.0; exit 0;; esac\nsleep 1000\n";
  fs::permissions(cxx, fs::perms::owner_all);
  cpu_test::ScopedEnv c("PYPTO_CXX", cxx.string());
  cpu_test::ScopedEnv t("PYPTO_COMPILE_TIMEOUT", "1");
  const auto t0 = Clock::now();
  try {
    pypto::cpu::compile_cpp("// never compiled " + std::to_string(getpid()) + "\n");
    FAIL() << "a hanging compiler returned";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("PYPTO_COMPILE_TIMEOUT"), std::string::npos) << m;
    EXPECT_NE(m.find(cxx.string()), std::string::npos) << m;
  }
  EXPECT_LT(seconds_since(t0), 15.0);
  fs::remove_all(dir);
}

TEST(RuntimeRobustness, FlagsThatChangeSemanticsAreRefused) {
  for (const char* f : {"-ffast-math", "-Ofast", "-funsafe-math-optimizations", "-ffinite-math-only", "-m32",
                        "-fshort-enums", "-ffp-contract=fast"})
    EXPECT_NE(pypto::cpu::refused_flag_reason(f), "") << f;
  for (const char* f : {"-O2", "-g", "-march=x86-64-v3", "-DNDEBUG", "-fno-omit-frame-pointer"})
    EXPECT_EQ(pypto::cpu::refused_flag_reason(f), "") << f;
  EXPECT_NE(pypto::cpu::refused_flag_reason("-fsanitize=bogus"), "");
  // A sanitizer is accepted exactly when this process runs its runtime (the sanitizer build).
  const bool asan = dlsym(RTLD_DEFAULT, "__asan_init") != nullptr;
  EXPECT_EQ(pypto::cpu::refused_flag_reason("-fsanitize=address").empty(), asan);
  cpu_test::ScopedEnv env("PYPTO_CXXFLAGS", "-O2 -ffast-math");
  try {
    pypto::cpu::compile_cpp("// not compiled\n");
    FAIL() << "-ffast-math was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("-ffast-math"), std::string::npos) << e.what();
  }
}

// ---- the cache's trust rules ---------------------------------------------------------------------

struct TempDir {
  fs::path path;
  TempDir() {
    std::string t = (fs::temp_directory_path() / "pypto-trust-XXXXXX").string();
    path = mkdtemp(t.data());
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

TEST(RuntimeRobustness, CacheDirectoryMustBePrivate) {
  TempDir t;
  const fs::path good = t.path / "good";
  ASSERT_EQ(mkdir(good.c_str(), 0700), 0);
  EXPECT_EQ(pypto::cpu::private_dir_problem(good.string()), "");

  const fs::path open_dir = t.path / "open";
  ASSERT_EQ(mkdir(open_dir.c_str(), 0700), 0);
  ASSERT_EQ(chmod(open_dir.c_str(), 0777), 0);
  EXPECT_NE(pypto::cpu::private_dir_problem(open_dir.string()).find("other users can write"),
            std::string::npos);

  // A private directory below one that others may write (and is not sticky) can be swapped.
  const fs::path inner = open_dir / "cache";
  ASSERT_EQ(mkdir(inner.c_str(), 0700), 0);
  EXPECT_NE(pypto::cpu::private_dir_problem(inner.string()).find("above it"), std::string::npos);

  cpu_test::ScopedEnv env("PYPTO_CACHE_DIR", open_dir.string());
  try {
    pypto::cpu::kernel_cache_dir();
    FAIL() << "a world-writable cache directory was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(open_dir.string()), std::string::npos) << e.what();
  }
}

TEST(RuntimeRobustness, CacheDirectoryOfAnotherUserIsRefused) {
  if (geteuid() != 0) {
    // Without root we cannot give a directory away; a root-owned one is someone else's.
    EXPECT_NE(pypto::cpu::private_dir_problem("/usr"), "");
    return;
  }
  TempDir t;
  const fs::path theirs = t.path / "theirs", mine = t.path / "mine", link = t.path / "link";
  ASSERT_EQ(mkdir(theirs.c_str(), 0700), 0);
  ASSERT_EQ(chown(theirs.c_str(), 65534, 65534), 0);
  EXPECT_NE(pypto::cpu::private_dir_problem(theirs.string()).find("another user"), std::string::npos);
  // A symlink planted by another user, even to a good directory of ours.
  ASSERT_EQ(mkdir(mine.c_str(), 0700), 0);
  ASSERT_EQ(symlink(mine.c_str(), link.c_str()), 0);
  EXPECT_EQ(pypto::cpu::private_dir_problem(link.string()), "");
  ASSERT_EQ(lchown(link.c_str(), 65534, 65534), 0);
  EXPECT_NE(pypto::cpu::private_dir_problem(link.string()).find("symlink"), std::string::npos);
}

TEST(RuntimeRobustness, NoSharedTmpFallback) {
  TempDir t;
  cpu_test::ScopedEnv cache("PYPTO_CACHE_DIR", "");
  cpu_test::ScopedEnv home("HOME", "");  // no home: no lasting cache
  cpu_test::ScopedEnv tmp("TMPDIR", t.path.string());
  const std::string dir = pypto::cpu::kernel_cache_dir();
  EXPECT_NE(dir, "/tmp/pypto-cache-" + std::to_string(getuid()));
  EXPECT_EQ(fs::path(dir).parent_path(), t.path);
  EXPECT_EQ(fs::path(dir).filename().string().rfind("pypto-cache-", 0), 0u) << dir;
  EXPECT_EQ(pypto::cpu::private_dir_problem(dir), "");
  struct stat st;
  ASSERT_EQ(stat(dir.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  EXPECT_EQ(pypto::cpu::kernel_cache_dir(), dir);  // one per process
}

std::string tiny_kernel(const std::string& tag) {
  return "#include <pto/abi.h>\nextern \"C\" __attribute__((visibility(\"default\"))) void "
         "pypto_kernel(const pto_kernel_args* a) { ((float*)a->data[0])[0] = (float)(a->fscalars[0] + " +
         tag + "); }\n";
}

std::string unique_tag() {
  return std::to_string(getpid()) + "." + std::to_string(Clock::now().time_since_epoch().count() % 1000000);
}

mode_t mode_of(const fs::path& p) {
  struct stat st;
  return stat(p.c_str(), &st) == 0 ? (st.st_mode & 0777) : 0;
}

TEST(RuntimeRobustness, CacheFilesArePrivateWhateverTheUmask) {
  TempDir t;
  const fs::path dir = t.path / "a" / "cache";
  cpu_test::ScopedEnv env("PYPTO_CACHE_DIR", dir.string());
  const mode_t old = umask(0);
  pypto::cpu::CompileResult r;
  try {
    r = pypto::cpu::compile_cpp(tiny_kernel(unique_tag()));
  } catch (...) {
    umask(old);
    throw;
  }
  umask(old);
  const fs::path so = pypto::cpu::kernel_path(*r.kernel);
  EXPECT_EQ(mode_of(t.path / "a"), 0700u);
  EXPECT_EQ(mode_of(dir), 0700u);
  EXPECT_EQ(mode_of(so), 0700u);
  for (const char* ext : {".cpp", ".sum", ".lock"})
    EXPECT_EQ(mode_of(fs::path(so).replace_extension(ext)), 0600u) << ext;
}

TEST(RuntimeRobustness, EntryOthersCouldWriteIsNotLoaded) {
  TempDir t;
  cpu_test::ScopedEnv env("PYPTO_CACHE_DIR", t.path.string());
  const std::string src = tiny_kernel(unique_tag());
  const fs::path so = pypto::cpu::kernel_path(*pypto::cpu::compile_cpp(src).kernel);
  pypto::cpu::clear_memory_cache_for_testing();
  ASSERT_TRUE(pypto::cpu::compile_cpp(src).from_disk);
  ASSERT_EQ(chmod(so.c_str(), 0777), 0);
  pypto::cpu::clear_memory_cache_for_testing();
  auto r = pypto::cpu::compile_cpp(src);
  EXPECT_FALSE(r.from_disk);  // rebuilt, not loaded
  EXPECT_EQ(mode_of(so), 0700u);
}

// The build lock: a second process waits while the first holds it, and gives up with an error
// naming the lock after its time limit.
TEST(RuntimeRobustness, EntryLockExcludesOtherProcesses) {
  TempDir t;
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    close(ready[0]);
    {
      pypto::cpu::EntryLock lock(t.path.string(), "k", 10);
      (void)!write(ready[1], "x", 1);
      std::this_thread::sleep_for(std::chrono::milliseconds(600));
    }
    _exit(0);
  }
  close(ready[1]);
  char c;
  ASSERT_EQ(read(ready[0], &c, 1), 1);
  const auto t0 = Clock::now();
  {
    pypto::cpu::EntryLock lock(t.path.string(), "k", 10);
  }
  EXPECT_GT(seconds_since(t0), 0.3);
  int status = 0;
  waitpid(pid, &status, 0);
  close(ready[0]);
  // Held here, a forked child's own attempt must wait for us, not find it already "taken".
  pypto::cpu::EntryLock held(t.path.string(), "k2", 10);
  pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    try {
      pypto::cpu::EntryLock lock(t.path.string(), "k2", 0.3);
      _exit(1);  // got a lock its parent holds
    } catch (const Error&) {
      _exit(0);
    }
  }
  waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

}  // namespace
