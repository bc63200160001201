// Compiles generated kernels with the system C++ compiler, caches the shared objects in memory and
// on disk, and calls them through the C ABI of include/pto/abi.h.
//
// Disk cache layout (one entry per key): <key>.cpp (the source, kept for error messages and
// debugging), <key>.so, and <key>.sum ("<size> <sha256>" of the .so). Every file is written under
// a unique temporary name and renamed into place, so a reader never sees a partial file and two
// processes compiling the same kernel both succeed. An entry whose .so does not match its .sum
// (truncated, overwritten, half-copied) is rebuilt.
#include "backends/cpu/compiler.h"

#include <dlfcn.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>
#include <vector>

#include "backends/cpu/compiler_internal.h"
#include "pto/abi.h"
#include "runtime/thread_pool.h"

extern char** environ;

namespace pypto::cpu {

struct CompiledKernel {
  void* handle = nullptr;  // never dlclose'd: a kernel may still be referenced by callers
  pto_kernel_fn fn = nullptr;
  std::string path;
};

namespace {

namespace fs = std::filesystem;
using ir::Error;

// -fno-math-errno lets libm calls vectorise; no -ffast-math, since NaN must propagate.
const std::vector<std::string> kFlags = {"-O3",     "-march=native",   "-std=c++17",          "-fPIC",
                                         "-shared", "-fno-math-errno", "-fvisibility=hidden", "-pipe"};

std::mutex g_mu;  // guards the maps below
std::string g_include_dir;
std::map<std::string, std::string> g_compiler_ids;   // compiler command -> `--version` output
std::map<std::string, std::string> g_header_hashes;  // include dir -> hash of its pto/ tree
struct Entry {
  std::mutex mu;  // held while this key compiles, so one process builds a kernel once
  std::shared_ptr<CompiledKernel> kernel;
};
std::map<std::string, std::shared_ptr<Entry>> g_memory;

std::vector<std::string> split_words(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream in(s);
  std::string w;
  while (in >> w) out.push_back(w);
  return out;
}

std::string compiler_command() {
  const char* env = std::getenv("PYPTO_CXX");
  std::string cxx = env && *env ? env : "c++";
  return cxx;
}

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& w : v) s += (s.empty() ? "" : " ") + w;
  return s;
}

// Runs argv (PATH lookup for argv[0]) with stdout+stderr captured. Returns the exit status, or -1
// with `spawn_error` set when the program could not be started.
int run_process(const std::vector<std::string>& argv, std::string& output, int& spawn_error) {
  int fds[2];
  if (pipe(fds) != 0) {
    spawn_error = errno;
    return -1;
  }
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addclose(&fa, fds[0]);
  posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
  posix_spawn_file_actions_adddup2(&fa, fds[1], 2);
  posix_spawn_file_actions_addclose(&fa, fds[1]);
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  int rc = posix_spawnp(&pid, args[0], &fa, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  close(fds[1]);
  if (rc != 0) {
    close(fds[0]);
    spawn_error = rc;
    return -1;
  }
  char buf[4096];
  ssize_t n;
  while ((n = read(fds[0], buf, sizeof buf)) > 0 || (n < 0 && errno == EINTR))
    if (n > 0) output.append(buf, size_t(n));
  close(fds[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  spawn_error = 0;
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

[[noreturn]] void no_compiler(const std::string& cxx, const std::string& why) {
  throw Error("no C++ compiler found (looked for '" + cxx + "'" + (why.empty() ? "" : ": " + why) +
              "); install g++ or set PYPTO_CXX, or run with backend='interp' / PYPTO_INTERPRET=1");
}

// `<cxx> --version`, once per compiler command per process; throws when it cannot run.
std::string compiler_identity(const std::string& cxx) {
  {
    std::lock_guard<std::mutex> l(g_mu);
    auto it = g_compiler_ids.find(cxx);
    if (it != g_compiler_ids.end()) return it->second;
  }
  std::vector<std::string> argv = split_words(cxx);
  if (argv.empty()) no_compiler(cxx, "empty PYPTO_CXX");
  argv.push_back("--version");
  std::string out;
  int err = 0;
  int rc = run_process(argv, out, err);
  if (rc == -1) no_compiler(cxx, std::strerror(err));
  if (rc != 0) no_compiler(cxx, "`" + join(argv) + "` exited with status " + std::to_string(rc));
  std::lock_guard<std::mutex> l(g_mu);
  g_compiler_ids[cxx] = out;
  return out;
}

// A hash over every file of the header tree, so editing a header invalidates cached kernels.
std::string header_tree_hash(const std::string& inc) {
  {
    std::lock_guard<std::mutex> l(g_mu);
    auto it = g_header_hashes.find(inc);
    if (it != g_header_hashes.end()) return it->second;
  }
  std::vector<fs::path> files;
  std::error_code ec;
  fs::path root = fs::path(inc) / "pto";
  for (auto it = fs::recursive_directory_iterator(root, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec))
    if (it->is_regular_file(ec)) files.push_back(it->path());
  std::sort(files.begin(), files.end());
  Sha256 h;
  for (const auto& f : files) {
    std::ifstream in(f, std::ios::binary);
    std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    h.update(fs::relative(f, root, ec).generic_string());
    h.update(std::string(1, '\0'));
    h.update(std::to_string(data.size()) + ":");
    h.update(data);
  }
  std::string hex = h.hex();
  std::lock_guard<std::mutex> l(g_mu);
  g_header_hashes[inc] = hex;
  return hex;
}

// -march=native makes an object specific to this CPU: a cache shared between machines (an NFS
// home) must not hand one machine's AVX-512 kernel to another. The CPU model and its feature
// flags join the key.
const std::string& host_cpu_identity() {
  static const std::string id = [] {
    std::ifstream in("/proc/cpuinfo");
    std::string line, model, flags;
    while (std::getline(in, line) && (model.empty() || flags.empty())) {
      auto key = line.substr(0, line.find(':'));
      while (!key.empty() && (key.back() == ' ' || key.back() == '\t')) key.pop_back();
      if (model.empty() && (key == "model name" || key == "CPU part")) model = line;
      if (flags.empty() && (key == "flags" || key == "Features")) flags = line;
    }
    return model + "\n" + flags;
  }();
  return id;
}

std::vector<std::string> all_flags(const std::string& inc) {
  std::vector<std::string> f = kFlags;
  if (const char* extra = std::getenv("PYPTO_CXXFLAGS"))
    for (auto& w : split_words(extra)) f.push_back(w);
  f.push_back("-I" + inc);
  return f;
}

bool ensure_dir(const std::string& d) {
  std::error_code ec;
  fs::create_directories(d, ec);
  return fs::is_directory(d, ec) && access(d.c_str(), W_OK) == 0;
}

// A name no other thread or process uses: pid, a per-process counter and the time.
std::string unique_suffix() {
  static std::atomic<uint64_t> counter{0};
  auto t = std::chrono::steady_clock::now().time_since_epoch().count();
  return std::to_string(getpid()) + "." + std::to_string(counter.fetch_add(1)) + "." +
         std::to_string(uint64_t(t) % 1000000007ULL);
}

bool read_file(const std::string& path, std::string& out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::ostringstream ss;
  ss << in.rdbuf();
  out = ss.str();
  return true;
}

// Writes `data` to `path` atomically (temporary file in the same directory, then rename).
bool write_atomic(const std::string& path, const std::string& data) {
  std::string tmp = path + ".tmp." + unique_suffix();
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return false;
    out.write(data.data(), std::streamsize(data.size()));
    out.flush();
    if (!out) {
      std::remove(tmp.c_str());
      return false;
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return false;
  }
  return true;
}

std::string checksum_line(const std::string& data) {
  return std::to_string(data.size()) + " " + sha256_hex(data) + "\n";
}

std::shared_ptr<CompiledKernel> load(const std::string& path, std::string* error) {
  void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    if (error) *error = dlerror();
    return nullptr;
  }
  void* sym = dlsym(h, "pypto_kernel");
  if (!sym) {
    if (error) *error = "no symbol 'pypto_kernel' in " + path;
    return nullptr;
  }
  auto k = std::make_shared<CompiledKernel>();
  k->handle = h;
  k->fn = reinterpret_cast<pto_kernel_fn>(sym);
  k->path = path;
  return k;
}

// The cached object for `key`, if present and intact.
std::shared_ptr<CompiledKernel> load_from_disk(const std::string& dir, const std::string& key) {
  const std::string so = dir + "/" + key + ".so", sum = dir + "/" + key + ".sum";
  std::string expected, data;
  if (!read_file(sum, expected) || !read_file(so, data)) return nullptr;
  if (checksum_line(data) != expected) return nullptr;  // truncated or foreign: rebuild
  return load(so, nullptr);
}

std::string truncate_output(const std::string& s) {
  constexpr size_t kMaxLines = 40, kMaxChars = 6000;
  std::string out;
  size_t lines = 0, pos = 0;
  while (pos < s.size() && lines < kMaxLines && out.size() < kMaxChars) {
    size_t nl = s.find('\n', pos);
    size_t end = nl == std::string::npos ? s.size() : nl + 1;
    out.append(s, pos, std::min(end - pos, kMaxChars - out.size()));
    pos = end;
    ++lines;
  }
  if (pos < s.size()) {
    size_t rest = size_t(std::count(s.begin() + long(pos), s.end(), '\n'));
    out += "... (" + std::to_string(rest) + " more lines of compiler output)\n";
  }
  return out;
}

std::shared_ptr<CompiledKernel> build(const std::string& dir, const std::string& key,
                                      const std::string& source, const std::string& cxx,
                                      const std::vector<std::string>& flags) {
  const std::string src = dir + "/" + key + ".cpp", so = dir + "/" + key + ".so",
                    sum = dir + "/" + key + ".sum";
  // Compile from the fixed source path so that concurrent builds produce identical objects.
  if (!write_atomic(src, source)) throw Error("cannot write kernel source to " + src);
  const std::string tmp = dir + "/" + key + ".tmp." + unique_suffix() + ".so";
  std::vector<std::string> argv = split_words(cxx);
  argv.insert(argv.end(), flags.begin(), flags.end());
  argv.insert(argv.end(), {"-o", tmp, src});
  std::string out;
  int err = 0;
  int rc = run_process(argv, out, err);
  if (rc == -1) no_compiler(cxx, std::strerror(err));
  if (rc != 0) {
    std::remove(tmp.c_str());
    throw Error("C++ compilation of a generated kernel failed (exit status " + std::to_string(rc) + "):\n" +
                truncate_output(out) + "command: " + join(argv) + "\nsource kept at " + src);
  }
  std::string data;
  if (!read_file(tmp, data)) throw Error("compiler produced no object at " + tmp);
  if (std::rename(tmp.c_str(), so.c_str()) != 0) {
    std::remove(tmp.c_str());
    throw Error("cannot move the compiled kernel into the cache at " + so + ": " + std::strerror(errno));
  }
  write_atomic(sum, checksum_line(data));  // best effort: without it the entry is simply rebuilt
  std::string why;
  auto k = load(so, &why);
  if (!k) throw Error("cannot load the compiled kernel " + so + ": " + why);
  return k;
}

// Forwards the kernel's parallel loops to the runtime's pool.
void forward_parallel_for(int64_t n, pto_loop_body body, void* ctx) { runtime::parallel_for(n, body, ctx); }

// The first run-time error a kernel reports (from any worker thread); raised once it returns.
struct KernelErrors {
  std::mutex mu;
  std::string first;
};

void collect_error(void* ctx, const char* message) {
  auto* e = static_cast<KernelErrors*>(ctx);
  std::lock_guard<std::mutex> lock(e->mu);
  if (e->first.empty()) e->first = message ? message : "kernel error";
}

}  // namespace

void set_include_dir(const std::string& dir) {
  std::lock_guard<std::mutex> l(g_mu);
  g_include_dir = dir;
}

std::string include_dir() {
  {
    std::lock_guard<std::mutex> l(g_mu);
    if (!g_include_dir.empty()) return g_include_dir;
  }
  if (const char* env = std::getenv("PYPTO_INCLUDE_DIR"); env && *env) return env;
  // An installed package ships the headers next to its module: <dir of the module>/include.
  Dl_info info;
  if (dladdr(reinterpret_cast<void*>(&compile_cpp), &info) && info.dli_fname) {
    fs::path inc = fs::path(info.dli_fname).parent_path() / "include";
    std::error_code ec;
    if (fs::exists(inc / "pto" / "abi.h", ec)) return inc.string();
  }
#ifdef PYPTO_SOURCE_INCLUDE_DIR
  return PYPTO_SOURCE_INCLUDE_DIR;
#else
  return "include";
#endif
}

std::string kernel_cache_dir() {
  std::string dir;
  if (const char* env = std::getenv("PYPTO_CACHE_DIR"); env && *env) {
    dir = env;
  } else if (const char* home = std::getenv("HOME"); home && *home) {
    dir = std::string(home) + "/.cache/pypto";
  }
  if (!dir.empty() && ensure_dir(dir)) return dir;
  // Unwritable or unknown: a private directory under /tmp still caches within this machine.
  std::string fallback = "/tmp/pypto-cache-" + std::to_string(getuid());
  if (ensure_dir(fallback)) return fallback;
  throw Error("cannot create a kernel cache directory (tried '" + dir + "' and '" + fallback +
              "'); set PYPTO_CACHE_DIR to a writable directory");
}

std::string kernel_path(const CompiledKernel& k) { return k.path; }

void clear_memory_cache_for_testing() {
  std::lock_guard<std::mutex> l(g_mu);
  g_memory.clear();
}

CompileResult compile_cpp(const std::string& source) {
  const auto t0 = std::chrono::steady_clock::now();
  const std::string cxx = compiler_command();
  const std::string id = compiler_identity(cxx);
  const std::string inc = include_dir();
  if (!fs::exists(fs::path(inc) / "pto" / "abi.h"))
    throw Error("the PTO headers are missing: no pto/abi.h under '" + inc +
                "' (set PYPTO_INCLUDE_DIR, or reinstall pypto)");
  const std::vector<std::string> flags = all_flags(inc);
  Sha256 h;
  for (const std::string& part : {source, id, cxx, join(flags), host_cpu_identity(),
                                  std::to_string(PTO_HEADERS_VERSION), header_tree_hash(inc)}) {
    h.update(std::to_string(part.size()) + ":");
    h.update(part);
  }
  const std::string key = h.hex().substr(0, 32);

  std::shared_ptr<Entry> e;
  {
    std::lock_guard<std::mutex> l(g_mu);
    auto& slot = g_memory[key];
    if (!slot) slot = std::make_shared<Entry>();
    e = slot;
  }
  std::lock_guard<std::mutex> l(e->mu);
  CompileResult r;
  if (e->kernel) {
    r.kernel = e->kernel;
    r.from_memory = true;
  } else {
    const std::string dir = kernel_cache_dir();
    if (auto k = load_from_disk(dir, key)) {
      r.from_disk = true;
      e->kernel = k;
    } else {
      e->kernel = build(dir, key, source, cxx, flags);
    }
    r.kernel = e->kernel;
  }
  r.compile_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

void run(const CompiledKernel& k, const runtime::RunArgs& args) {
  // Small fixed arrays keep a call allocation-free for the common case of few parameters.
  constexpr size_t kInline = 16;
  const size_t nt = args.tensors.size(), ns = args.scalars.size();
  void* data_inline[kInline];
  const int64_t* strides_inline[kInline];
  int64_t iscal_inline[kInline];
  double fscal_inline[kInline];
  std::vector<void*> data_heap;
  std::vector<const int64_t*> strides_heap;
  std::vector<int64_t> iscal_heap;
  std::vector<double> fscal_heap;
  void** data = data_inline;
  const int64_t** strides = strides_inline;
  int64_t* iscal = iscal_inline;
  double* fscal = fscal_inline;
  if (nt > kInline) {
    data_heap.resize(nt);
    strides_heap.resize(nt);
    data = data_heap.data();
    strides = strides_heap.data();
  }
  if (ns > kInline) {
    iscal_heap.resize(ns);
    fscal_heap.resize(ns);
    iscal = iscal_heap.data();
    fscal = fscal_heap.data();
  }
  for (size_t i = 0; i < nt; ++i) {
    data[i] = args.tensors[i].data;
    strides[i] = args.tensors[i].strides.data();
  }
  for (size_t j = 0; j < ns; ++j) {
    const ir::ScalarValue& v = args.scalars[j];
    // A float given for an integer parameter is rejected by Kernel::run; stay defined anyway.
    iscal[j] = !v.is_float ? v.i : (std::fabs(v.f) < 9.2e18 ? int64_t(v.f) : 0);
    fscal[j] = v.as_double();
  }
  pto_kernel_args a;
  a.data = data;
  a.strides = strides;
  a.iscalars = iscal;
  a.fscalars = fscal;
  a.parallel_for = &forward_parallel_for;
  KernelErrors errors;
  a.report_error = &collect_error;
  a.error_ctx = &errors;
  k.fn(&a);
  if (!errors.first.empty()) throw ir::Error(errors.first);
}

}  // namespace pypto::cpu
