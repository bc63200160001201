// Trust checks, private creation and locking for the on-disk kernel cache (see kernel_cache.h).
#include "backends/cpu/kernel_cache.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <set>
#include <thread>

#include "exec/interrupt.h"
#include "ir/types.h"

namespace pypto::cpu {
namespace {

namespace fs = std::filesystem;
using ir::Error;

std::string mode_text(mode_t m) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%04o", unsigned(m & 07777));
  return buf;
}

bool others_can_write(mode_t m) { return (m & (S_IWGRP | S_IWOTH)) != 0; }

// A directory above the cache: another user must not be able to rename or replace its entries.
std::string ancestor_problem(const std::string& path, const struct stat& st) {
  if (st.st_uid != geteuid() && st.st_uid != 0)
    return "'" + path + "' above it belongs to another user (uid " + std::to_string(st.st_uid) +
           "), who could replace the cache directory";
  if (others_can_write(st.st_mode) && !(st.st_mode & S_ISVTX))
    return "'" + path + "' above it is writable by other users (mode " + mode_text(st.st_mode) +
           ") and not sticky, so they could replace the cache directory";
  return "";
}

// Creates the missing components of `dir` with mode 0700; "" on success, else the reason.
std::string make_private_dirs(const fs::path& dir) {
  fs::path cur;
  for (const auto& part : dir) {
    cur /= part;
    if (mkdir(cur.c_str(), 0700) != 0 && errno != EEXIST)
      return "cannot create '" + cur.string() + "': " + std::strerror(errno);
  }
  return "";
}

std::mutex g_temp_mu;
char* g_temp_dir = nullptr;  // this process's mkdtemp fallback (leaked: read by an atexit handler)
pid_t g_temp_owner = 0;

void remove_temp_dir() {
  if (g_temp_dir && getpid() == g_temp_owner) {
    std::error_code ec;
    fs::remove_all(g_temp_dir, ec);
  }
}

// A fresh private directory for this process when no lasting cache directory is usable.
std::string temp_cache_dir() {
  std::lock_guard<std::mutex> l(g_temp_mu);
  if (g_temp_dir) return g_temp_dir;
  const char* base = std::getenv("TMPDIR");
  std::string tmpl = std::string(base && *base ? base : "/tmp") + "/pypto-cache-XXXXXX";
  std::string buf = tmpl;
  if (!mkdtemp(buf.data()))
    throw Error("no usable kernel cache directory: HOME is unset or ~/.cache/pypto cannot be created, and " +
                tmpl + " failed (" + std::strerror(errno) + "); set PYPTO_CACHE_DIR to a private directory");
  if (std::string why = private_dir_problem(buf); !why.empty()) {
    rmdir(buf.c_str());
    throw Error("refusing the temporary kernel cache directory " + buf + ": " + why +
                "; set PYPTO_CACHE_DIR to a private directory");
  }
  g_temp_dir = strdup(buf.c_str());
  g_temp_owner = getpid();
  std::atexit(&remove_temp_dir);
  return g_temp_dir;
}

[[noreturn]] void refuse(const std::string& dir, const std::string& origin, const std::string& why) {
  throw Error("refusing the kernel cache directory '" + dir + "' (" + origin + "): " + why +
              ". Cached kernels are loaded into this process, so the directory must be private to you "
              "(chmod 700, owned by you) or point PYPTO_CACHE_DIR elsewhere");
}

}  // namespace

std::string private_dir_problem(const std::string& dir) {
  std::error_code ec;
  const fs::path abs = fs::absolute(dir, ec).lexically_normal();
  if (ec) return "cannot resolve the path: " + ec.message();
  const uid_t me = geteuid();
  // Symlinks along the path as written: only ours or root's (nobody else can then redirect it).
  fs::path cur;
  for (const auto& part : abs) {
    cur /= part;
    struct stat st;
    if (lstat(cur.c_str(), &st) != 0) return "cannot stat '" + cur.string() + "': " + std::strerror(errno);
    if (S_ISLNK(st.st_mode) && st.st_uid != me && st.st_uid != 0)
      return "'" + cur.string() + "' is a symlink owned by another user (uid " + std::to_string(st.st_uid) +
             ")";
  }
  char* resolved = realpath(abs.c_str(), nullptr);
  if (!resolved) return "cannot resolve '" + abs.string() + "': " + std::strerror(errno);
  const fs::path real = resolved;
  std::free(resolved);
  // Every directory above the real one.
  fs::path up;
  for (auto it = real.begin(); it != real.end(); ++it) {
    if (std::next(it) == real.end()) break;
    up /= *it;
    struct stat st;
    if (stat(up.c_str(), &st) != 0) return "cannot stat '" + up.string() + "': " + std::strerror(errno);
    if (std::string why = ancestor_problem(up.string(), st); !why.empty()) return why;
  }
  struct stat st;
  if (stat(real.c_str(), &st) != 0) return "cannot stat '" + real.string() + "': " + std::strerror(errno);
  if (!S_ISDIR(st.st_mode)) return "'" + real.string() + "' is not a directory";
  if (st.st_uid != me)
    return "it belongs to another user (uid " + std::to_string(st.st_uid) + "; you are uid " +
           std::to_string(me) + ")";
  if (others_can_write(st.st_mode)) return "other users can write to it (mode " + mode_text(st.st_mode) + ")";
  return "";
}

std::string kernel_cache_dir() {
  if (const char* env = std::getenv("PYPTO_CACHE_DIR"); env && *env) {
    const std::string dir = env;
    if (std::string why = make_private_dirs(fs::absolute(dir)); !why.empty())
      refuse(dir, "PYPTO_CACHE_DIR", why);
    if (std::string why = private_dir_problem(dir); !why.empty()) refuse(dir, "PYPTO_CACHE_DIR", why);
    if (access(dir.c_str(), W_OK | X_OK) != 0)
      refuse(dir, "PYPTO_CACHE_DIR", std::string("not writable: ") + std::strerror(errno));
    return dir;
  }
  if (std::string dir = home_cache_dir(); !dir.empty()) return dir;
  return temp_cache_dir();
}

std::string home_cache_dir() {
  const char* home = std::getenv("HOME");
  if (home && *home && home[0] == '/') {
    const std::string dir = std::string(home) + "/.cache/pypto";
    // A home we cannot write (read-only, missing) is not an attack: fall back to a temporary
    // directory. A cache directory that exists but is not private is refused.
    if (make_private_dirs(dir).empty() && access(dir.c_str(), W_OK | X_OK) == 0) {
      if (std::string why = private_dir_problem(dir); !why.empty())
        refuse(dir, "the default, ~/.cache/pypto", why);
      return dir;
    }
  }
  return "";
}

std::string prebuilt_dir(bool create) {
  Dl_info info;
  if (!dladdr(reinterpret_cast<void*>(&prebuilt_dir), &info) || !info.dli_fname) return "";
  std::error_code ec;
  const fs::path dir = fs::canonical(fs::path(info.dli_fname), ec).parent_path() / "prebuilt";
  if (ec || (create && !make_private_dirs(dir).empty()) || !fs::is_directory(dir, ec)) return "";
  return private_dir_problem(dir.string()).empty() ? dir.string() : "";
}

bool trusted_cache_file(const std::string& path) {
  struct stat st;
  return lstat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == geteuid() &&
         !others_can_write(st.st_mode);
}

std::string unique_suffix() {
  static std::atomic<uint64_t> counter{0};
  auto t = std::chrono::steady_clock::now().time_since_epoch().count();
  return std::to_string(getpid()) + "." + std::to_string(counter.fetch_add(1)) + "." +
         std::to_string(uint64_t(t) % 1000000007ULL);
}

bool write_file_atomic(const std::string& path, const std::string& data, mode_t mode) {
  const std::string tmp = path + ".tmp." + unique_suffix();
  int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, mode);
  if (fd < 0) return false;
  bool ok = fchmod(fd, mode) == 0;  // exactly `mode`, whatever the umask
  for (size_t done = 0; ok && done < data.size();) {
    ssize_t n = write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    ok = n > 0;
    if (ok) done += size_t(n);
  }
  ok = (close(fd) == 0) && ok;
  if (ok && std::rename(tmp.c_str(), path.c_str()) == 0) return true;
  std::remove(tmp.c_str());
  return false;
}

void remove_leftovers(const std::string& dir, const std::string& key, double stale_seconds) {
  static std::mutex mu;
  static std::set<std::string> swept;  // directories whose stale temporaries are gone
  bool sweep;
  {
    std::lock_guard<std::mutex> l(mu);
    sweep = swept.insert(dir).second;
  }
  const std::string own = key + ".";
  const auto now = fs::file_time_type::clock::now();
  std::error_code ec;
  for (auto it = fs::directory_iterator(dir, ec); !ec && it != fs::directory_iterator(); it.increment(ec)) {
    const std::string name = it->path().filename().string();
    struct stat st;  // ours (whatever its mode: the compiler's object takes the umask)
    if (name.find(".tmp.") == std::string::npos || lstat(it->path().c_str(), &st) != 0 ||
        st.st_uid != geteuid())
      continue;
    bool remove = name.compare(0, own.size(), own) == 0;
    if (!remove && sweep) {
      std::error_code tec;
      const auto t = fs::last_write_time(it->path(), tec);
      remove = !tec && std::chrono::duration<double>(now - t).count() > stale_seconds;
    }
    std::error_code rec;
    if (remove) fs::remove(it->path(), rec);
  }
}

EntryLock::EntryLock(const std::string& dir, const std::string& key, double wait_seconds) {
  const std::string path = dir + "/" + key + ".lock";
  fd_ = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd_ < 0) throw Error("cannot open the kernel cache lock " + path + ": " + std::strerror(errno));
  using clock = std::chrono::steady_clock;
  const auto deadline =
      clock::now() + std::chrono::duration_cast<clock::duration>(std::chrono::duration<double>(wait_seconds));
  struct flock fl = {};
  fl.l_type = F_WRLCK;
  fl.l_whence = SEEK_SET;
  while (fcntl(fd_, F_SETLK, &fl) != 0) {
    const int err = errno;
    if (err == ENOLCK) return;  // a file system without locks: atomic renames still keep entries whole
    const char* why = nullptr;
    if (err != EACCES && err != EAGAIN && err != EINTR) why = std::strerror(err);
    if (!why && runtime::stop_requested()) {
      close(fd_);
      throw runtime::Interrupted();
    }
    if (!why && wait_seconds > 0 && clock::now() > deadline) why = "another process held it too long";
    if (why) {
      close(fd_);
      throw Error(
          "cannot take the kernel cache lock " + path + " (" + why +
          "); another process may be compiling the same kernel (PYPTO_COMPILE_TIMEOUT bounds the wait)");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

EntryLock::~EntryLock() {
  if (fd_ < 0) return;
  struct flock fl = {};
  fl.l_type = F_UNLCK;
  fl.l_whence = SEEK_SET;
  fcntl(fd_, F_SETLK, &fl);
  close(fd_);
}

}  // namespace pypto::cpu
