// Runtime pieces: the thread pool, the kernel cache (memory, disk, corruption), compiler errors
// and the host target description.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>
#include <vector>

#include "backends/cpu/compiler.h"
#include "backends/cpu/compiler_internal.h"
#include "exec/thread_pool.h"
#include "ir/types.h"
#include "target/target.h"
#include "test_cpu_codegen_util.h"

namespace {

using pypto::ir::Error;
namespace rt = pypto::runtime;
namespace fs = std::filesystem;

// ---- thread pool ---------------------------------------------------------------------------------

struct SumCtx {
  std::atomic<int64_t> sum{0};
  std::atomic<int64_t> calls{0};
  std::vector<uint8_t>* hits = nullptr;
};

void sum_body(void* p, int64_t b, int64_t e) {
  auto* c = static_cast<SumCtx*>(p);
  int64_t s = 0;
  for (int64_t i = b; i < e; ++i) {
    s += i;
    if (c->hits) (*c->hits)[size_t(i)]++;
  }
  c->sum += s;
  c->calls++;
}

TEST(ThreadPool, SumsEveryIndexExactlyOnce) {
  const int64_t n = 1000000;
  std::vector<uint8_t> hits(size_t(n), 0);
  SumCtx ctx;
  ctx.hits = &hits;
  rt::parallel_for(n, &sum_body, &ctx);
  EXPECT_EQ(ctx.sum.load(), n * (n - 1) / 2);
  EXPECT_LE(ctx.calls.load(), rt::num_threads());
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[size_t(i)], 1) << i;
}

TEST(ThreadPool, ChunksAreContiguousAndNearEqual) {
  rt::set_num_threads(3);
  struct Ctx {
    std::mutex mu;
    std::vector<std::pair<int64_t, int64_t>> ranges;
  } ctx;
  rt::parallel_for(
      100,
      [](void* p, int64_t b, int64_t e) {
        auto* c = static_cast<Ctx*>(p);
        std::lock_guard<std::mutex> l(c->mu);
        c->ranges.push_back({b, e});
      },
      &ctx);
  std::sort(ctx.ranges.begin(), ctx.ranges.end());
  ASSERT_EQ(ctx.ranges.size(), 3u);
  EXPECT_EQ(ctx.ranges[0], (std::pair<int64_t, int64_t>{0, 34}));
  EXPECT_EQ(ctx.ranges[1], (std::pair<int64_t, int64_t>{34, 67}));
  EXPECT_EQ(ctx.ranges[2], (std::pair<int64_t, int64_t>{67, 100}));
  rt::set_num_threads(0);  // back to the default
}

TEST(ThreadPool, EmptyAndSingleIteration) {
  SumCtx ctx;
  rt::parallel_for(0, &sum_body, &ctx);
  rt::parallel_for(-5, &sum_body, &ctx);
  EXPECT_EQ(ctx.calls.load(), 0);
  rt::parallel_for(1, &sum_body, &ctx);
  EXPECT_EQ(ctx.calls.load(), 1);
}

TEST(ThreadPool, NestedCallsRunInline) {
  struct Ctx {
    std::atomic<int64_t> total{0};
  } ctx;
  rt::parallel_for(
      8,
      [](void* p, int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) {
          SumCtx inner;
          rt::parallel_for(1000, &sum_body, &inner);
          EXPECT_EQ(inner.calls.load(), 1);  // one inline call covering everything
          static_cast<Ctx*>(p)->total += inner.sum.load();
        }
      },
      &ctx);
  EXPECT_EQ(ctx.total.load(), 8 * (1000 * 999 / 2));
}

TEST(ThreadPool, SetNumThreads) {
  rt::set_num_threads(1);
  EXPECT_EQ(rt::num_threads(), 1);
  const auto me = std::this_thread::get_id();
  struct Ctx {
    std::thread::id me;
    std::atomic<int> foreign{0};
  } ctx{me};
  rt::parallel_for(
      64,
      [](void* p, int64_t, int64_t) {
        auto* c = static_cast<Ctx*>(p);
        if (std::this_thread::get_id() != c->me) c->foreign++;
      },
      &ctx);
  EXPECT_EQ(ctx.foreign.load(), 0);
  rt::set_num_threads(4);
  EXPECT_EQ(rt::num_threads(), 4);
  SumCtx s;
  rt::parallel_for(4, &sum_body, &s);
  EXPECT_EQ(s.calls.load(), 4);
  EXPECT_EQ(s.sum.load(), 6);
  rt::set_num_threads(0);
  EXPECT_GE(rt::num_threads(), 1);
}

TEST(ThreadPool, ManyHostThreadsAtOnce) {
  rt::set_num_threads(3);
  std::atomic<int> bad{0};
  std::vector<std::thread> hosts;
  for (int h = 0; h < 4; ++h)
    hosts.emplace_back([&] {
      for (int k = 0; k < 300; ++k) {
        SumCtx c;
        rt::parallel_for(1000 + k, &sum_body, &c);
        int64_t n = 1000 + k;
        if (c.sum.load() != n * (n - 1) / 2) bad++;
      }
    });
  for (auto& t : hosts) t.join();
  EXPECT_EQ(bad.load(), 0);
  rt::set_num_threads(0);
}

// Workers get big stacks, since a kernel's tiles live on the stack of the thread running it.
__attribute__((noinline)) bool use_12mib_of_stack() {
  constexpr size_t kBytes = 12 << 20;  // more than a default 8 MiB thread stack
  volatile char buf[kBytes];
  for (size_t i = 0; i < kBytes; i += 4096) buf[i] = char(i >> 12);
  return buf[kBytes / 2] == char((kBytes / 2) >> 12);
}

TEST(ThreadPool, WorkersHaveLargeStacks) {
  rt::set_num_threads(2);
  struct Ctx {
    std::thread::id caller;
    std::atomic<int> worker_runs{0};
  } ctx{std::this_thread::get_id(), {0}};
  rt::parallel_for(
      2,
      [](void* p, int64_t, int64_t) {
        auto* c = static_cast<Ctx*>(p);
        if (std::this_thread::get_id() == c->caller) return;  // the caller's stack is the host's
        if (use_12mib_of_stack()) c->worker_runs++;
      },
      &ctx);
  EXPECT_EQ(ctx.worker_runs.load(), 1);
  rt::set_num_threads(0);
}

// The pool is reused call after call: every call runs every iteration exactly once. (What a
// call costs is a benchmark's business: bench/system.py's dispatch case.)
TEST(ThreadPool, RepeatedCallsRunEveryIterationOnce) {
  const int64_t threads = rt::num_threads();
  for (int64_t n : {threads, threads + 1, 3 * threads + 2, int64_t(97)}) {
    for (int k = 0; k < 20; ++k) {
      std::vector<uint8_t> hits(size_t(n), 0);
      SumCtx c;
      c.hits = &hits;
      rt::parallel_for(n, &sum_body, &c);
      ASSERT_EQ(c.sum.load(), n * (n - 1) / 2) << n;
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[size_t(i)], 1) << n << " " << i;
    }
  }
}

// ---- kernel cache --------------------------------------------------------------------------------

// A hand-written kernel: x[0] = fscalars[0] + tag. Only needs pto/abi.h.
std::string tiny_kernel(const std::string& tag) {
  return "#include <pto/abi.h>\n"
         "extern \"C\" __attribute__((visibility(\"default\"))) void pypto_kernel(const pto_kernel_args* a) "
         "{\n"
         "  float* x = (float*)a->data[0];\n"
         "  x[0] = (float)(a->fscalars[0] + " +
         tag +
         ");\n"
         "}\n";
}

// A tag no earlier run of these tests has used, so the first compile really compiles.
std::string fresh_tag() {
  static int k = 0;
  auto t = std::chrono::system_clock::now().time_since_epoch().count();
  return std::to_string(t % 1000000) + "." + std::to_string(getpid() % 1000) + std::to_string(++k);
}

float call(const pypto::cpu::CompiledKernel& k, double s) {
  float x = NAN;
  std::vector<int64_t> shape = {1}, strides = {1};
  pypto::runtime::RunArgs a{{{&x, pypto::ir::DType::F32, shape, strides}}, {{true, 0, s}}};
  pypto::cpu::run(k, a);
  return x;
}

TEST(KernelCache, MemoryThenDisk) {
  const std::string tag = fresh_tag(), src = tiny_kernel(tag);
  auto r1 = pypto::cpu::compile_cpp(src);
  EXPECT_FALSE(r1.from_memory);
  EXPECT_FALSE(r1.from_disk);
  std::printf("[ measure  ] cold compile of a tiny kernel: %.1f ms\n", r1.compile_seconds * 1e3);
  EXPECT_FLOAT_EQ(call(*r1.kernel, 1.0), float(1.0 + std::stod(tag)));

  auto r2 = pypto::cpu::compile_cpp(src);
  EXPECT_TRUE(r2.from_memory);
  EXPECT_EQ(r2.kernel, r1.kernel);

  pypto::cpu::clear_memory_cache_for_testing();
  auto r3 = pypto::cpu::compile_cpp(src);
  EXPECT_FALSE(r3.from_memory);
  EXPECT_TRUE(r3.from_disk);
  std::printf("[ measure  ] warm load from the disk cache: %.2f ms\n", r3.compile_seconds * 1e3);
  EXPECT_FLOAT_EQ(call(*r3.kernel, 2.0), float(2.0 + std::stod(tag)));
  const std::string so = pypto::cpu::kernel_path(*r3.kernel);
  EXPECT_EQ(fs::path(so).parent_path(), fs::path(pypto::cpu::kernel_cache_dir()));
  EXPECT_TRUE(fs::exists(fs::path(so).replace_extension(".sum")));
  EXPECT_TRUE(fs::exists(fs::path(so).replace_extension(".cpp")));
}

TEST(KernelCache, TruncatedObjectIsDetectedAndRebuilt) {
  const std::string tag = fresh_tag(), src = tiny_kernel(tag);
  auto r1 = pypto::cpu::compile_cpp(src);
  const std::string so = pypto::cpu::kernel_path(*r1.kernel);
  // Replace (not truncate in place: this process has the object mapped) with a truncated copy.
  std::string data;
  {
    std::ifstream in(so, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    data = ss.str();
  }
  ASSERT_GT(data.size(), 100u);
  {
    std::ofstream out(so + ".trunc", std::ios::binary);
    out.write(data.data(), std::streamsize(data.size() / 2));
  }
  ASSERT_EQ(std::rename((so + ".trunc").c_str(), so.c_str()), 0);
  pypto::cpu::clear_memory_cache_for_testing();
  auto r2 = pypto::cpu::compile_cpp(src);
  EXPECT_FALSE(r2.from_memory);
  EXPECT_FALSE(r2.from_disk);  // the checksum caught it: rebuilt
  EXPECT_EQ(fs::file_size(so), data.size());
  EXPECT_FLOAT_EQ(call(*r2.kernel, 0.5), float(0.5 + std::stod(tag)));
  // And the rebuilt entry is good for the next process (here: a fresh memory cache).
  pypto::cpu::clear_memory_cache_for_testing();
  EXPECT_TRUE(pypto::cpu::compile_cpp(src).from_disk);
}

TEST(KernelCache, MissingChecksumIsRebuilt) {
  const std::string src = tiny_kernel(fresh_tag());
  auto r1 = pypto::cpu::compile_cpp(src);
  fs::remove(fs::path(pypto::cpu::kernel_path(*r1.kernel)).replace_extension(".sum"));
  pypto::cpu::clear_memory_cache_for_testing();
  auto r2 = pypto::cpu::compile_cpp(src);
  EXPECT_FALSE(r2.from_disk);
  EXPECT_FALSE(r2.from_memory);
}

TEST(KernelCache, ConcurrentCompilesOfOneKernel) {
  const std::string tag = fresh_tag(), src = tiny_kernel(tag);
  std::vector<std::thread> ts;
  std::atomic<int> ok{0}, compiled{0};
  for (int k = 0; k < 4; ++k)
    ts.emplace_back([&] {
      auto r = pypto::cpu::compile_cpp(src);
      if (!r.from_memory && !r.from_disk) compiled++;
      if (call(*r.kernel, 1.0) == float(1.0 + std::stod(tag))) ok++;
    });
  for (auto& t : ts) t.join();
  EXPECT_EQ(ok.load(), 4);
  EXPECT_EQ(compiled.load(), 1);  // the others waited for it
}

// Two processes compile the same new kernel at the same moment; both must succeed and leave one
// intact entry (the temporary-file-and-rename protocol).
TEST(KernelCache, TwoProcessesCompileOneKernelAtOnce) {
  const std::string tag = fresh_tag(), src = tiny_kernel(tag);
  std::vector<pid_t> kids;
  for (int k = 0; k < 2; ++k) {
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      int rc = 1;
      try {
        auto r = pypto::cpu::compile_cpp(src);
        rc = call(*r.kernel, 1.0) == float(1.0 + std::stod(tag)) ? 0 : 2;
      } catch (...) {
        rc = 3;
      }
      _exit(rc);
    }
    kids.push_back(pid);
  }
  for (pid_t pid : kids) {
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
  }
  auto r = pypto::cpu::compile_cpp(src);
  EXPECT_TRUE(r.from_disk);
  // The children's own temporaries (named by their pid): other processes share this directory,
  // and their compiles in flight have temporaries of their own.
  for (const auto& e : fs::directory_iterator(pypto::cpu::kernel_cache_dir()))
    for (pid_t pid : kids)
      EXPECT_EQ(e.path().filename().string().find(".tmp." + std::to_string(pid) + "."), std::string::npos)
          << e.path();
}

// A compile killed with its process leaves the compiler's temporary object in the cache; the next
// build of that entry removes it (it holds the entry's lock, so no live writer owns the file), and
// the first build in a directory removes other entries' temporaries older than any compile lasts.
TEST(KernelCache, KilledCompileLeavesNoTemporary) {
  const fs::path dir = fs::temp_directory_path() / ("pypto-cache-killed-" + fresh_tag());
  fs::create_directories(dir);
  fs::permissions(dir, fs::perms::owner_all, fs::perm_options::replace);
  const std::string hang = (dir / "hang").string(), pid_file = (dir / "compiler.pid").string();
  const std::string cxx = (dir / "cxx.sh").string();
  {
    // The real compiler, except that with `hang` present it writes part of its output and waits.
    std::ofstream f(cxx);
    f << "#!/bin/sh\nout=\nprev=\nfor a in \"$@\"; do [ \"$prev\" = -o ] && out=$a; prev=$a; done\n"
      << "if [ -e " << hang << " ] && [ -n \"$out\" ]; then echo partial > \"$out\"; echo $$ > " << pid_file
      << ".tmp; mv " << pid_file << ".tmp " << pid_file << "; exec sleep 600; fi\nexec c++ \"$@\"\n";
  }
  fs::permissions(cxx, fs::perms::owner_all, fs::perm_options::replace);
  std::ofstream(hang).put('1');
  auto temporaries = [&] {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(dir))
      if (e.path().filename().string().find(".tmp.") != std::string::npos)
        names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
  };
  cpu_test::ScopedEnv cache("PYPTO_CACHE_DIR", dir.string()), compiler("PYPTO_CXX", cxx);
  const std::string tag = fresh_tag(), src = tiny_kernel(tag);
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    try {
      pypto::cpu::compile_cpp(src);
    } catch (...) {
    }
    _exit(0);
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (!fs::exists(pid_file) && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_TRUE(fs::exists(pid_file)) << "the compiler never started";
  kill(child, SIGKILL);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  pid_t compiler_pid = 0;
  std::ifstream(pid_file) >> compiler_pid;
  ASSERT_GT(compiler_pid, 0);
  kill(compiler_pid, SIGKILL);  // the compiler runs in its own process group: it outlives its parent
  // (Planted now: the killed process swept the directory when it began.) Another entry's temporaries: one two
  // days old (garbage), one fresh (a writer may be alive).
  const fs::path old_tmp = dir / "0123abcd.tmp.1.0.1.so", fresh_tmp = dir / "4567abcd.cpp.tmp.1.0.1";
  std::ofstream(old_tmp).put('x');
  std::ofstream(fresh_tmp).put('x');
  fs::permissions(old_tmp, fs::perms::owner_read | fs::perms::owner_write, fs::perm_options::replace);
  fs::permissions(fresh_tmp, fs::perms::owner_read | fs::perms::owner_write, fs::perm_options::replace);
  fs::last_write_time(old_tmp, fs::file_time_type::clock::now() - std::chrono::hours(48));
  const size_t left = temporaries().size();
  ASSERT_EQ(left, 3u) << "the killed compile's object, and the two planted ones";
  fs::remove(hang);
  auto r = pypto::cpu::compile_cpp(src);
  EXPECT_FLOAT_EQ(call(*r.kernel, 1.0), float(1.0 + std::stod(tag)));
  EXPECT_EQ(temporaries(), std::vector<std::string>{fresh_tmp.filename().string()});
  fs::remove_all(dir);
}

TEST(KernelCache, CacheDirFromEnvironment) {
  const fs::path dir = fs::temp_directory_path() / ("pypto-cache-test-" + fresh_tag());
  {
    cpu_test::ScopedEnv env("PYPTO_CACHE_DIR", dir.string());
    EXPECT_EQ(pypto::cpu::kernel_cache_dir(), dir.string());
    auto r = pypto::cpu::compile_cpp(tiny_kernel(fresh_tag()));
    EXPECT_EQ(fs::path(pypto::cpu::kernel_path(*r.kernel)).parent_path(), dir);
  }
  fs::remove_all(dir);
}

TEST(CompilerErrors, MissingCompiler) {
  cpu_test::ScopedEnv env("PYPTO_CXX", "/nonexistent/bin/c++");
  try {
    pypto::cpu::compile_cpp(tiny_kernel(fresh_tag()));
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("no C++ compiler found"), std::string::npos) << m;
    EXPECT_NE(m.find("/nonexistent/bin/c++"), std::string::npos) << m;
    EXPECT_NE(m.find("PYPTO_CXX"), std::string::npos) << m;
    EXPECT_NE(m.find("backend='interp'"), std::string::npos) << m;
  }
}

TEST(CompilerErrors, CompileErrorKeepsSource) {
  const std::string src = "#include <pto/abi.h>\nthis is not C++; // " + fresh_tag() + "\n";
  try {
    pypto::cpu::compile_cpp(src);
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("compilation of a generated kernel failed"), std::string::npos) << m;
    EXPECT_NE(m.find("error"), std::string::npos) << m;
    auto pos = m.find("source kept at ");
    ASSERT_NE(pos, std::string::npos) << m;
    std::string path = m.substr(pos + 15);
    path = path.substr(0, path.find('\n'));
    std::ifstream in(path);
    std::stringstream ss;
    ss << in.rdbuf();
    EXPECT_EQ(ss.str(), src);
  }
}

TEST(Sha256, KnownVectors) {
  EXPECT_EQ(pypto::cpu::sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(pypto::cpu::sha256_hex("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(pypto::cpu::sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  std::string million(1000000, 'a');
  pypto::cpu::Sha256 h;  // fed in uneven pieces
  for (size_t i = 0; i < million.size(); i += 997)
    h.update(million.data() + i, std::min<size_t>(997, million.size() - i));
  EXPECT_EQ(h.hex(), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

// ---- target --------------------------------------------------------------------------------------

TEST(Target, DescribesTheHost) {
  const rt::Target& t = rt::host_target();
  EXPECT_FALSE(t.arch.empty());
  EXPECT_GE(t.cores, 1);
  EXPECT_GT(t.l1d_bytes, 0);
  EXPECT_GE(t.l2_bytes, t.l1d_bytes);
  EXPECT_TRUE(t.vector_bytes == 16 || t.vector_bytes == 32 || t.vector_bytes == 64);
#if defined(__x86_64__)
  EXPECT_EQ(t.arch, "x86_64");
  bool avx2 = std::find(t.simd.begin(), t.simd.end(), "avx2") != t.simd.end();
  if (avx2) {
    EXPECT_GE(t.vector_bytes, 32);
  }
#endif
  std::string simd;
  for (const auto& s : t.simd) simd += s + " ";
  std::printf(
      "[ measure  ] target: %s, %d cores, L1d %lld KiB, L2 %lld KiB, L3 %lld KiB, %d-byte vectors, %s\n",
      t.arch.c_str(), t.cores, (long long)(t.l1d_bytes >> 10), (long long)(t.l2_bytes >> 10),
      (long long)(t.l3_bytes >> 10), t.vector_bytes, simd.c_str());
}

}  // namespace
