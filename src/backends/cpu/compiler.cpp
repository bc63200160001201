// Compiles generated kernels with the system C++ compiler, caches the shared objects in memory and
// on disk, and loads them (kernel_run.cpp calls them through the C ABI of include/pto/abi.h).
//
// Disk cache layout (one entry per key): <key>.cpp (the source, kept for error messages and
// debugging), <key>.so, <key>.sum ("<size> <sha256>" of the .so) and <key>.lock. kernel_cache.cpp
// holds the trust rules (private directory, file owners and modes) and the cross-process lock.
// Every file is written under a unique temporary name and renamed into place, so a reader never
// sees a partial file. An entry whose .so does not match its .sum (truncated, half-copied) or fails
// the ownership checks is rebuilt. Within a process one thread builds a key while others wait.
#include "backends/cpu/compiler.h"

#include <dlfcn.h>
#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <vector>

#include "backends/cpu/codegen.h"
#include "backends/cpu/compiler_internal.h"
#include "backends/cpu/kernel_cache.h"
#include "exec/interrupt.h"
#include "exec/subprocess.h"
#include "ir/debug_log.h"
#include "pto/abi.h"

extern "C" const char* pypto_installed_headers_dir() __attribute__((weak));

namespace pypto::cpu {

namespace {

namespace fs = std::filesystem;
using ir::Error;

// -fno-math-errno lets libm calls vectorise; no -ffast-math, since NaN must propagate.
const std::vector<std::string> kFlags = {"-O3",     "-march=native",   "-std=c++17",          "-fPIC",
                                         "-shared", "-fno-math-errno", "-fvisibility=hidden", "-pipe"};

// Guards everything below. Never held while a compiler runs, and taken around fork() (see
// fork_prepare), so a child process never inherits it locked.
std::mutex g_mu;
std::condition_variable g_built;  // an entry finished building (or failed)
// The maps are never destroyed: a daemon thread may still compile while the process exits.
std::string& g_include_dir = *new std::string();
std::map<std::string, std::string>& g_compiler_ids =
    *new std::map<std::string, std::string>();  // cxx -> --version
std::map<std::string, std::string>& g_header_hashes =
    *new std::map<std::string, std::string>();  // dir -> hash
struct Entry {
  bool building = false;  // a thread of this process is compiling the key
  std::shared_ptr<CompiledKernel> kernel;
};
std::map<std::string, Entry>* g_memory = new std::map<std::string, Entry>();
// Precompiled headers (pch_include_dir): key -> 0 being built, 1 built, -1 failed.
std::map<std::string, int>& g_pch = *new std::map<std::string, int>();

void fork_prepare() { g_mu.lock(); }
void fork_parent() { g_mu.unlock(); }
// The child has only the forking thread: no build is in progress there any more.
void fork_child() {
  new (&g_built) std::condition_variable();
  for (auto& kv : *g_memory) kv.second.building = false;
  for (auto it = g_pch.begin(); it != g_pch.end();) it = it->second == 0 ? g_pch.erase(it) : std::next(it);
  g_mu.unlock();
}
[[maybe_unused]] const bool g_atfork = (pthread_atfork(&fork_prepare, &fork_parent, &fork_child), true);

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

[[noreturn]] void no_compiler(const std::string& cxx, const std::string& why) {
  throw Error("no C++ compiler found (looked for '" + cxx + "'" + (why.empty() ? "" : ": " + why) +
              "); install g++ or set PYPTO_CXX, or run with backend='interp' / PYPTO_INTERPRET=1");
}

[[noreturn]] void timed_out(const std::vector<std::string>& argv, double seconds) {
  std::ostringstream t;
  t << seconds;
  throw Error("the C++ compiler did not finish within " + t.str() +
              " s and was killed (PYPTO_COMPILE_TIMEOUT sets the limit in seconds, 0 for none); command: " +
              join(argv));
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
  const double timeout = runtime::compile_timeout_seconds();
  runtime::ProcessResult r = runtime::run_process(argv, timeout);
  if (r.status == -1) no_compiler(cxx, std::strerror(r.spawn_error));
  if (r.timed_out) timed_out(argv, timeout);
  if (r.status != 0) no_compiler(cxx, "`" + join(argv) + "` exited with status " + std::to_string(r.status));
  std::lock_guard<std::mutex> l(g_mu);
  g_compiler_ids[cxx] = r.output;
  return r.output;
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
  // PYPTO_NATIVE_DOT=0: the portable bf16/int8 dot products even where the CPU has
  // AVX512-BF16 / AVX512-VNNI (the headers test the macro; being a flag, it joins the cache key).
  if (const char* dot = std::getenv("PYPTO_NATIVE_DOT"); dot && std::string(dot) == "0")
    f.push_back("-DPTO_NO_NATIVE_DOT");
  // PYPTO_AMX=0: bf16/int8 whole-matrix products on the vector dot products (AVX512-BF16 / VNNI)
  // even where the CPU has AMX tiles (pto/cpu/amx.hpp; an A/B switch for the tiles alone).
  if (const char* amx = std::getenv("PYPTO_AMX"); amx && std::string(amx) == "0") f.push_back("-DPTO_NO_AMX");
  if (const char* extra = std::getenv("PYPTO_CXXFLAGS")) {
    for (auto& w : split_words(extra)) {
      if (std::string why = refused_flag_reason(w); !why.empty())
        throw Error("PYPTO_CXXFLAGS: refusing '" + w + "': " + why);
      f.push_back(w);
    }
  }
  f.push_back("-I" + inc);
  return f;
}

bool read_file(const std::string& path, std::string& out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::ostringstream ss;
  ss << in.rdbuf();
  out = ss.str();
  return true;
}

std::string checksum_line(const std::string& data) {
  return std::to_string(data.size()) + " " + sha256_hex(data) + "\n";
}

// The shared GEMM library (pto/cpu/matmul.hpp, PTO_SHARED_GEMM) and the symbol it defines; it
// is loaded into the global scope, where kernels built against it find the symbol.
constexpr const char* kSharedGemmSymbol = "pto_shared_gemm_f32";

// Whether generated code calls an f32 product that reaches the packed GEMM (gemm_share_f32 in
// pto/cpu/matmul.hpp): MMATMUL(_ACC), mmatmul_sum(_wrapped) and mmatmul_bias (a product with a
// fused bias/relu: missing here, a static fused linear compiled the GEMM inline, 10 s of g++).
bool calls_f32_gemm(const std::string& source) {
  for (const char* entry : {"pto::MMATMUL", "pto::mmatmul_sum", "pto::mmatmul_bias("})
    if (source.find(entry) != std::string::npos) return true;
  return false;
}

std::shared_ptr<CompiledKernel> load(const std::string& path, std::string* error,
                                     const char* symbol = "pypto_kernel") {
  const bool gemm = std::string(symbol) == kSharedGemmSymbol;
  void* h = dlopen(path.c_str(), RTLD_NOW | (gemm ? RTLD_GLOBAL : RTLD_LOCAL));
  if (!h) {
    if (error) *error = dlerror();
    return nullptr;
  }
  void* sym = dlsym(h, symbol);
  if (!sym) {
    if (error) *error = std::string("no symbol '") + symbol + "' in " + path;
    return nullptr;
  }
  if (gemm) sym = nullptr;  // not a kernel entry
  auto k = std::make_shared<CompiledKernel>();
  k->handle = h;
  k->fn = reinterpret_cast<pto_kernel_fn>(sym);
  k->path = path;
  return k;
}

// Runs before a kernel is loaded: a kernel compiled against the shared GEMM library needs the
// library in the process first (see compile_cpp). Empty: nothing to wait for.
using BeforeLoad = std::function<void()>;

// The cached object for `key`, if present, intact and ours (see kernel_cache.h).
std::shared_ptr<CompiledKernel> load_from_disk(const std::string& dir, const std::string& key,
                                               const char* symbol = "pypto_kernel",
                                               const BeforeLoad& before_load = {}) {
  const std::string so = dir + "/" + key + ".so", sum = dir + "/" + key + ".sum";
  if (!trusted_cache_file(so) || !trusted_cache_file(sum)) return nullptr;
  std::string expected, data;
  if (!read_file(sum, expected) || !read_file(so, data)) return nullptr;
  if (checksum_line(data) != expected) return nullptr;  // truncated or foreign: rebuild
  if (before_load) before_load();
  return load(so, nullptr, symbol);
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
                                      const std::vector<std::string>& flags, bool& found_on_disk,
                                      const char* symbol = "pypto_kernel",
                                      const BeforeLoad& before_load = {}) {
  const std::string src = dir + "/" + key + ".cpp", so = dir + "/" + key + ".so",
                    sum = dir + "/" + key + ".sum";
  const double timeout = runtime::compile_timeout_seconds();
  // One process at a time builds a key; whoever waited finds the finished entry on disk. The
  // wait is bounded by the compile timeout plus a margin.
  EntryLock lock(dir, key, timeout > 0 ? timeout + 60 : 0);
  if (auto k = load_from_disk(dir, key, symbol, before_load)) {
    found_on_disk = true;
    return k;
  }
  // A killed writer's temporaries go before this build starts its own; a compile never outlives
  // its timeout, so older ones of other entries are garbage too.
  remove_leftovers(dir, key, timeout > 0 ? std::max(timeout + 60, 3600.0) : 86400.0);
  // Compile from the fixed source path so that rebuilds produce identical objects.
  if (!write_file_atomic(src, source, 0600)) throw Error("cannot write kernel source to " + src);
  const std::string tmp = dir + "/" + key + ".tmp." + unique_suffix() + ".so";
  std::vector<std::string> argv = split_words(cxx);
  argv.insert(argv.end(), flags.begin(), flags.end());
  argv.insert(argv.end(), {"-o", tmp, src});
  if (ir::debug_logging()) ir::debug_log("kernel " + key + ": compiling: " + join(argv));
  const auto t0 = std::chrono::steady_clock::now();
  runtime::ProcessResult r;
  try {
    r = runtime::run_process(argv, timeout);
  } catch (...) {
    std::remove(tmp.c_str());
    throw;
  }
  if (ir::debug_logging())
    ir::debug_log(
        "kernel " + key + ": compiler exit status " + std::to_string(r.status) + " after " +
        std::to_string(
            std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count()) +
        " ms");
  if (r.status == -1) no_compiler(cxx, std::strerror(r.spawn_error));
  if (r.timed_out) {
    std::remove(tmp.c_str());
    timed_out(argv, timeout);
  }
  if (r.status != 0) {
    std::remove(tmp.c_str());
    throw Error("C++ compilation of a generated kernel failed (exit status " + std::to_string(r.status) +
                "):\n" + truncate_output(r.output) + "command: " + join(argv) + "\nsource kept at " + src);
  }
  std::string data;
  if (!read_file(tmp, data)) throw Error("compiler produced no object at " + tmp);
  // The compiler created the object with the umask's mode; a kernel is ours alone.
  if (chmod(tmp.c_str(), 0700) != 0 || std::rename(tmp.c_str(), so.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    std::remove(tmp.c_str());
    throw Error("cannot move the compiled kernel into the cache at " + so + ": " + why);
  }
  write_file_atomic(sum, checksum_line(data), 0600);  // best effort: without it the entry is rebuilt
  if (before_load) before_load();
  std::string why;
  auto k = load(so, &why, symbol);
  if (!k) throw Error("cannot load the compiled kernel " + so + ": " + why);
  return k;
}

// The headers next to the code that is running: an installed package ships them beside its module
// (<package>/include); in a source tree the module sits in python/pypto and a tool or test binary
// in build/, both below the tree's include/.
std::string headers_beside_this_library() {
  Dl_info info;
  if (!dladdr(reinterpret_cast<void*>(&compile_cpp), &info) || !info.dli_fname) return "";
  std::error_code ec;
  fs::path here = fs::canonical(fs::path(info.dli_fname), ec).parent_path();
  if (ec) return "";
  for (const fs::path& cand :
       {here / "include", here.parent_path() / "include", here.parent_path().parent_path() / "include"})
    if (fs::exists(cand / "pto" / "abi.h", ec)) return cand.string();
  return "";
}

}  // namespace

std::string refused_flag_reason(const std::string& flag) {
  static const char* const kFloatSemantics[] = {"-ffast-math",
                                                "-Ofast",
                                                "-funsafe-math-optimizations",
                                                "-ffinite-math-only",
                                                "-fno-honor-nans",
                                                "-fno-honor-infinities",
                                                "-fassociative-math",
                                                "-freciprocal-math",
                                                "-fno-signed-zeros",
                                                "-fcx-limited-range",
                                                "-fsingle-precision-constant",
                                                "-ffp-contract=fast",
                                                "-mdaz-ftz",
                                                "-fno-trapping-math"};
  for (const char* f : kFloatSemantics)
    if (flag == f)
      return "it changes floating-point semantics (NaN, inf, rounding), so kernels would no longer match "
             "the interpreter and docs/isa.md";
  static const char* const kAbiPrefixes[] = {"-m32",
                                             "-mx32",
                                             "-mabi=",
                                             "-fpack-struct",
                                             "-fshort-enums",
                                             "-fshort-wchar",
                                             "-mno-sse",
                                             "-mgeneral-regs-only",
                                             "-o",
                                             "-nostdlib",
                                             "-static"};
  for (const char* f : kAbiPrefixes)
    if (flag.rfind(f, 0) == 0) return "it changes the kernel's ABI or output, which the runtime relies on";
  if (flag.rfind("-fsanitize=", 0) == 0) {
    // A sanitized kernel needs the sanitizer's runtime already in the process (loaded first).
    const std::string list = flag.substr(11);
    std::istringstream parts(list);
    std::string s;
    while (std::getline(parts, s, ',')) {
      const char* probe = s == "address"  ? "__asan_init"
                          : s == "thread" ? "__tsan_init"
                          : s == "memory" ? "__msan_init"
                          : s == "leak"   ? "__lsan_do_leak_check"
                          : (s == "undefined" || s == "float-divide-by-zero" || s == "integer" ||
                             s == "signed-integer-overflow" || s == "bounds" || s == "alignment" ||
                             s == "null" || s == "shift" || s == "vla-bound" || s == "return")
                              ? "__ubsan_handle_add_overflow"
                              : nullptr;
      if (!probe) return "unknown sanitizer '" + s + "'";
      if (!dlsym(RTLD_DEFAULT, probe))
        return "this process does not run the '" + s +
               "' sanitizer runtime, so a kernel built with it cannot be loaded (build pypto with the "
               "sanitizer, as `make test-sanitize` does, or LD_PRELOAD the sanitizer's library)";
    }
  }
  return "";
}

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
  static const std::string beside = headers_beside_this_library();
  // A program built against an installed PyPTO (find_package(pypto)) compiles in a definition
  // of this function naming the install's include/ (cmake/installed_headers.cpp).
  if (beside.empty() && pypto_installed_headers_dir) return pypto_installed_headers_dir();
  return beside;
}

std::string kernel_path(const CompiledKernel& k) { return k.path; }

void compile_file(const std::string& source_path, const std::string& out_path, bool shared) {
  const std::string cxx = compiler_command();
  const std::string inc = include_dir();
  if (inc.empty()) throw Error("the PTO headers are missing (set PYPTO_INCLUDE_DIR)");
  std::vector<std::string> argv = split_words(cxx);
  if (argv.empty()) no_compiler(cxx, "empty PYPTO_CXX");
  for (const std::string& f : all_flags(inc))
    if (shared || (f != "-shared" && f != "-fvisibility=hidden")) argv.push_back(f);
  argv.insert(argv.end(), {"-o", out_path, source_path});
  if (!shared) argv.push_back("-pthread");
  const double timeout = runtime::compile_timeout_seconds();
  if (ir::debug_logging()) ir::debug_log("export: compiling: " + join(argv));
  const auto t0 = std::chrono::steady_clock::now();
  runtime::ProcessResult r = runtime::run_process(argv, timeout);
  if (ir::debug_logging())
    ir::debug_log(
        "export: compiler exit status " + std::to_string(r.status) + " after " +
        std::to_string(
            std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count()) +
        " ms");
  if (r.status == -1) no_compiler(cxx, std::strerror(r.spawn_error));
  if (r.timed_out) timed_out(argv, timeout);
  if (r.status != 0)
    throw Error("C++ compilation of an exported kernel failed (exit status " + std::to_string(r.status) +
                "):\n" + truncate_output(r.output) + "command: " + join(argv));
}

std::string host_cpu_key() { return sha256_hex(host_cpu_identity()).substr(0, 16); }
std::string cache_dir() { return kernel_cache_dir(); }

void clear_memory_cache_for_testing() {
  std::lock_guard<std::mutex> l(g_mu);
  for (auto it = g_memory->begin(); it != g_memory->end();)
    it = it->second.building ? std::next(it) : g_memory->erase(it);
}

std::string cache_key(const std::string& source, const std::string& cxx,
                      const std::vector<std::string>& flags, const std::string& inc) {
  const std::string id = compiler_identity(cxx);
  Sha256 h;
  for (const std::string& part : {source, id, cxx, join(flags), host_cpu_identity(),
                                  std::to_string(PTO_HEADERS_VERSION), header_tree_hash(inc)}) {
    h.update(std::to_string(part.size()) + ":");
    h.update(part);
  }
  return h.hex().substr(0, 32);
}

// The in-memory entry for `key` once no thread of this process is building it (polling the stop
// flag while waiting); `l` holds g_mu.
Entry& settled_entry(std::unique_lock<std::mutex>& l, const std::string& key) {
  Entry* e = &(*g_memory)[key];
  while (e->building) {
    g_built.wait_for(l, std::chrono::milliseconds(50));
    if (runtime::stop_requested()) throw runtime::Interrupted();
    e = &(*g_memory)[key];
  }
  return *e;
}

// Thrown (and caught in compile_cpp) when a kernel compiled against the shared GEMM library
// cannot be loaded because the library could not be had.
struct SharedGemmUnavailable {};

std::set<std::string>& g_gemm_failed = *new std::set<std::string>();  // library keys that could not be built
const char* const kSharedGemmSource = "#define PTO_SHARED_GEMM_DEFINE\n#include <pto/pto.hpp>\n";

bool shared_gemm_known_unavailable(const std::string& cxx, const std::vector<std::string>& flags,
                                   const std::string& inc) {
  const std::string key = cache_key(kSharedGemmSource, cxx, flags, inc);
  std::lock_guard<std::mutex> l(g_mu);
  return g_gemm_failed.count(key) > 0;
}

// Builds (once per machine, compiler, flags and header version: a disk-cache entry like a
// kernel's) or loads the shared GEMM library, kept loaded for the life of the process, under the
// in-memory map's rules (one thread builds, the others wait; the lock is not held across the
// compile). False when it cannot be had: kernels then keep the GEMM inline.
bool shared_gemm_loaded(const std::string& cxx, const std::vector<std::string>& flags,
                        const std::string& inc) {
  const std::string source = kSharedGemmSource;
  const std::string key = cache_key(source, cxx, flags, inc);
  {
    std::unique_lock<std::mutex> l(g_mu);
    Entry* e = &settled_entry(l, key);
    if (e->kernel) return true;
    if (g_gemm_failed.count(key)) return false;
    e->building = true;
  }
  std::shared_ptr<CompiledKernel> lib;
  bool interrupted = false;
  try {
    const std::string dir = kernel_cache_dir(), prebuilt = prebuilt_dir();
    lib = load_from_disk(dir, key, kSharedGemmSymbol);
    if (!lib && !prebuilt.empty()) lib = load_from_disk(prebuilt, key, kSharedGemmSymbol);
    if (lib && ir::debug_logging()) ir::debug_log("shared GEMM library: loaded " + kernel_path(*lib));
    bool found = false;
    if (!lib) lib = build(dir, key, source, cxx, flags, found, kSharedGemmSymbol);
  } catch (const runtime::Interrupted&) {
    interrupted = true;
  } catch (const std::exception& e) {
    if (ir::debug_logging()) ir::debug_log(std::string("shared GEMM library unavailable: ") + e.what());
  }
  {
    std::lock_guard<std::mutex> l(g_mu);
    Entry& e = (*g_memory)[key];
    e.building = false;
    e.kernel = lib;
    if (!lib && !interrupted) g_gemm_failed.insert(key);
    g_built.notify_all();
  }
  if (interrupted) throw runtime::Interrupted();
  return lib != nullptr;
}

std::string prebuild_shared_gemm() {
  const std::string cxx = compiler_command(), inc = include_dir(), dir = prebuilt_dir(/*create=*/true);
  if (dir.empty()) throw Error("no private prebuilt/ directory can be made beside the pypto library");
  const std::vector<std::string> flags = all_flags(inc);
  const std::string key = cache_key(kSharedGemmSource, cxx, flags, inc);
  bool found = false;
  const std::string path =
      kernel_path(*build(dir, key, kSharedGemmSource, cxx, flags, found, kSharedGemmSymbol));
  // Entries of older headers or another compiler: only the current one is ever looked up.
  std::error_code ec;
  for (const auto& f : fs::directory_iterator(dir, ec))
    if (f.path().filename().string().rfind(key, 0) != 0) fs::remove(f.path(), ec);
  return path;
}

// ---- the precompiled header ----------------------------------------------------------------------
// Parsing pto/pto.hpp is ~70% of a kernel's compile (the seed's matrix_multiply: 0.95 s, 0.35 s
// with it precompiled). GCC's precompiled header for a kernel's exact flags is built once (~1.8 s,
// ~60 MB) into ~/.cache/pypto/pch/<key>/pto/pto.hpp.gch, the key hashing the compiler's identity,
// its flags, the CPU and the header tree; the kernel's compile puts <key> first on its include
// path, where GCC finds the .gch before the header (and reads the header instead where the .gch
// does not apply). In the home cache even under PYPTO_CACHE_DIR: the header is no kernel's, and a
// fresh kernel cache needs no new one; without a usable home, none (a temporary cache would build
// it again in every process). Not for clang (its PCH is another mechanism); a build that fails is
// not tried again in the process, and the kernels compile without; PYPTO_PCH=0 turns it off.

// Keeps the newest few headers of the root (others are of older headers or flags).
void prune_pch(const fs::path& root, const std::string& keep) {
  std::error_code ec;
  std::vector<std::pair<fs::file_time_type, fs::path>> dirs;
  for (const auto& d : fs::directory_iterator(root, ec))
    if (d.path().filename() != keep) dirs.emplace_back(fs::last_write_time(d.path(), ec), d.path());
  std::sort(dirs.begin(), dirs.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  for (size_t i = 7; i < dirs.size(); ++i) fs::remove_all(dirs[i].second, ec);
}

bool build_pch(const std::string& cxx, const std::vector<std::string>& flags, const std::string& inc,
               const fs::path& dir) {
  std::error_code ec;
  fs::create_directories(dir / "pto", ec);
  if (ec || !private_dir_problem(dir.string()).empty()) return false;
  const std::string gch = (dir / "pto" / "pto.hpp.gch").string(), tmp = gch + ".tmp." + unique_suffix();
  std::vector<std::string> argv = split_words(cxx);
  for (const std::string& f : flags)
    if (f != "-shared") argv.push_back(f);
  argv.insert(argv.end(), {"-x", "c++-header", inc + "/pto/pto.hpp", "-o", tmp});
  const auto t0 = std::chrono::steady_clock::now();
  runtime::ProcessResult r = runtime::run_process(argv, runtime::compile_timeout_seconds());
  const bool ok = r.status == 0 && !r.timed_out && chmod(tmp.c_str(), 0600) == 0 &&
                  std::rename(tmp.c_str(), gch.c_str()) == 0;
  if (!ok) std::remove(tmp.c_str());
  if (ir::debug_logging())
    ir::debug_log(
        "precompiled header " + gch + (ok ? ": built in " : ": failed after ") +
        std::to_string(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()) + " s" +
        (ok ? "" : ":\n" + truncate_output(r.output)));
  return ok;
}

// The directory to put first on a kernel's include path for its flags, or "" for none.
std::string pch_include_dir(const std::string& cxx, const std::vector<std::string>& flags,
                            const std::string& inc) {
  if (const char* env = std::getenv("PYPTO_PCH"); env && std::string(env) == "0") return "";
  const std::string id = compiler_identity(cxx);
  if (id.find("clang") != std::string::npos || id.find("Free Software Foundation") == std::string::npos)
    return "";
  const std::string root = home_cache_dir();
  if (root.empty()) return "";
  // Keyed by what the compiler says it is, not its command (a wrapper script shares the header)
  // nor the headers' place (their contents count).
  std::string what = id + "\n" + host_cpu_identity() + "\n" + std::to_string(PTO_HEADERS_VERSION) + "\n" +
                     header_tree_hash(inc);
  for (const std::string& f : flags)
    if (f.rfind("-I", 0) != 0) what += "\n" + f;
  const std::string key = sha256_hex(what).substr(0, 24);
  const fs::path dir = fs::path(root) / "pch" / key;
  {
    std::unique_lock<std::mutex> l(g_mu);
    for (;;) {
      auto it = g_pch.find(key);
      if (it == g_pch.end()) break;
      if (it->second != 0) return it->second > 0 ? dir.string() : "";
      g_built.wait(l);  // another thread builds it
    }
    g_pch[key] = 0;
  }
  std::error_code ec;
  bool ok = fs::is_regular_file(dir / "pto" / "pto.hpp.gch", ec);
  if (!ok) {
    try {
      ok = build_pch(cxx, flags, inc, dir);
    } catch (...) {
      ok = false;
    }
    if (ok) prune_pch(fs::path(root) / "pch", key);
  }
  std::lock_guard<std::mutex> l(g_mu);
  g_pch[key] = ok ? 1 : -1;
  g_built.notify_all();
  return ok ? dir.string() : "";
}

CompileResult compile_cpp(const std::string& source, bool inline_gemm, bool lazy_wide_rows) {
  const auto t0 = std::chrono::steady_clock::now();
  const std::string cxx = compiler_command();
  const std::string inc = include_dir();
  if (inc.empty() || !fs::exists(fs::path(inc) / "pto" / "abi.h"))
    throw Error("the PTO headers are missing: no pto/abi.h " +
                (inc.empty() ? std::string("beside the pypto library") : "under '" + inc + "'") +
                " (set PYPTO_INCLUDE_DIR, or reinstall pypto)");
  std::vector<std::string> flags = all_flags(inc);
  const char* shared = std::getenv("PYPTO_SHARED_GEMM");
  const bool gemm = !inline_gemm && calls_f32_gemm(source) && !(shared && std::string(shared) == "0") &&
                    !shared_gemm_known_unavailable(cxx, flags, inc);
  // A kernel calling the shared GEMM library is compiled while the library is loaded or built
  // (on a cold cache the two compiles run side by side) and loaded once the library is in.
  // Should the library be unavailable, the kernel is compiled again with the GEMM inline.
  std::future<bool> gemm_library;
  int gemm_loaded = -1;  // the library's outcome once waited for (the hook may run twice)
  BeforeLoad wait_for_gemm;
  if (gemm) {
    const std::vector<std::string> lib_flags = flags;
    gemm_library = std::async(std::launch::async, [=] { return shared_gemm_loaded(cxx, lib_flags, inc); });
    wait_for_gemm = [&gemm_library, &gemm_loaded] {
      if (gemm_loaded < 0) gemm_loaded = gemm_library.get() ? 1 : 0;
      if (!gemm_loaded) throw SharedGemmUnavailable();
    };
    flags.insert(flags.end() - 1, "-DPTO_SHARED_GEMM");
  }
  if (lazy_wide_rows && has_lazy_wide_rows(source)) flags.insert(flags.end() - 1, "-DPTO_LAZY_WIDE_ROWS");
  const std::string key = cache_key(source, cxx, flags, inc);

  CompileResult r;
  {
    // Another thread building this key: wait for it (polling the stop flag) instead of building
    // the same kernel twice.
    std::unique_lock<std::mutex> l(g_mu);
    Entry* e = &settled_entry(l, key);
    if (e->kernel) {
      r.kernel = e->kernel;
      r.from_memory = true;
      if (ir::debug_logging()) ir::debug_log("kernel " + key + ": in-memory cache hit");
      return r;  // in memory: the library it calls is loaded (or the future's wait loads it)
    }
    e->building = true;
  }
  auto finish = [&](std::shared_ptr<CompiledKernel> k) {
    std::lock_guard<std::mutex> l(g_mu);
    Entry& e = (*g_memory)[key];
    e.building = false;
    if (k) e.kernel = std::move(k);
    g_built.notify_all();
  };
  try {
    const std::string dir = kernel_cache_dir();
    if (auto k = load_from_disk(dir, key, "pypto_kernel", wait_for_gemm)) {
      r.from_disk = true;
      r.kernel = k;
      if (ir::debug_logging())
        ir::debug_log("kernel " + key + ": disk cache hit (" + dir + "/" + key + ".so)");
    } else {
      if (ir::debug_logging()) ir::debug_log("kernel " + key + ": cache miss in " + dir);
      // The precompiled header changes how long the compile takes, not what it makes: not in the key.
      std::vector<std::string> with_pch = flags;
      if (std::string pch = pch_include_dir(cxx, flags, inc); !pch.empty())
        with_pch.insert(with_pch.end() - 1, "-I" + pch);
      r.kernel = build(dir, key, source, cxx, with_pch, r.from_disk, "pypto_kernel", wait_for_gemm);
      if (ir::debug_logging() && !r.from_disk)
        ir::debug_log("kernel " + key + ": built " + dir + "/" + key + ".so");
    }
  } catch (const SharedGemmUnavailable&) {
    finish(nullptr);
    return compile_cpp(source, /*inline_gemm=*/true, lazy_wide_rows);
  } catch (...) {
    finish(nullptr);
    throw;
  }
  finish(r.kernel);
  r.compile_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

}  // namespace pypto::cpu
