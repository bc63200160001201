// The on-disk kernel cache's trust rules. A shared object in the cache runs inside the process,
// so the cache directory must be as private as the process itself: owned by the effective user,
// writable by nobody else, reached through no directory another user could rename or replace
// (sticky /tmp-like directories excepted) and through no symlink another user planted. Directories
// are created 0700, files 0600 (0700 for shared objects). Entries are written under a unique name
// and renamed into place, and one process at a time builds a given entry (an fcntl lock on
// <key>.lock, which a fork()ed child does not inherit).
#pragma once
#include <sys/types.h>

#include <string>

namespace pypto::cpu {

// The cache directory in use: $PYPTO_CACHE_DIR (created if missing), else ~/.cache/pypto, else a
// private directory made with mkdtemp under $TMPDIR or /tmp for this process (removed at exit).
// Throws ir::Error naming the directory and the problem when the chosen directory is not private.
std::string kernel_cache_dir();
// ~/.cache/pypto (created if missing), or "" where HOME is unset or not writable; throws as
// kernel_cache_dir does when it exists but is not private.
std::string home_cache_dir();

// The package's prebuilt directory: `prebuilt/` beside the library holding this code (for the
// Python package, python/pypto/prebuilt). `make build` puts the shared GEMM library there
// (compiler.h, prebuild_shared_gemm), a read-only second place to find it, so a fresh kernel
// cache does not wait for its compile. With `create`, made (0700) if missing. "" when it cannot
// be had or is not private (private_dir_problem): then nothing in it is trusted.
std::string prebuilt_dir(bool create = false);

// Checks a path before it is trusted as a private directory; "" when fine, else the reason.
std::string private_dir_problem(const std::string& dir);

// True when `path` is a regular file (not a symlink) owned by us and writable by nobody else.
bool trusted_cache_file(const std::string& path);

// Writes `data` to `path` atomically (unique temporary in the same directory, then rename).
bool write_file_atomic(const std::string& path, const std::string& data, mode_t mode);

// A name no other thread or process uses: pid, a per-process counter and the time.
std::string unique_suffix();

// Removes the temporaries (`.tmp.` in the name) that writers killed mid-write left in `dir`: every
// one of entry `key` (call with that entry's lock held: any such file belongs to a writer that no
// longer holds it), and, once per process and directory, any other untouched for `stale_seconds`
// (longer than a compile may take, so its writer is gone).
void remove_leftovers(const std::string& dir, const std::string& key, double stale_seconds);

// Holds the cross-process build lock of one cache entry while alive. Waits (polling the calling
// thread's stop flag, then throwing Interrupted) up to `wait_seconds` (<= 0: no limit), then
// throws ir::Error naming the lock file.
class EntryLock {
 public:
  EntryLock(const std::string& dir, const std::string& key, double wait_seconds);
  ~EntryLock();
  EntryLock(const EntryLock&) = delete;
  EntryLock& operator=(const EntryLock&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace pypto::cpu
