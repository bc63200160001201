// The child's output is read through a close-on-exec pipe with poll(), and its end is detected by
// waitpid(), not by end-of-file: a process forked from ours (or a grandchild of the compiler) may
// hold the pipe's write end open long after the compiler exited.
#include "exec/subprocess.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "exec/interrupt.h"
#include "ir/types.h"

extern char** environ;

namespace pypto::runtime {
namespace {

constexpr double kDefaultCompileTimeout = 600;
constexpr int kPollMillis = 50;

void drain(int fd, std::string& out) {
  char buf[4096];
  for (;;) {
    ssize_t n = read(fd, buf, sizeof buf);
    if (n > 0) {
      out.append(buf, size_t(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    return;  // EOF, or EAGAIN: nothing more right now
  }
}

void kill_group(pid_t pid) {
  kill(-pid, SIGKILL);  // the child leads its own group: this reaches the compiler's children too
  kill(pid, SIGKILL);
}

int wait_status(pid_t pid) {
  int status = 0;
  int rc;
  while ((rc = waitpid(pid, &status, 0)) < 0 && errno == EINTR) {
  }
  if (rc < 0) return 0;  // already reaped (SIGCHLD ignored): status unknown
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

}  // namespace

double compile_timeout_seconds() {
  const char* env = std::getenv("PYPTO_COMPILE_TIMEOUT");
  if (!env || !*env) return kDefaultCompileTimeout;
  char* end = nullptr;
  double v = std::strtod(env, &end);
  if (end == env || *end != '\0' || !(v >= 0) || std::isinf(v))
    throw ir::Error("PYPTO_COMPILE_TIMEOUT='" + std::string(env) +
                    "' is not a number of seconds (use 0 for no limit)");
  return v;
}

ProcessResult run_process(const std::vector<std::string>& argv, double timeout_seconds) {
  ProcessResult r;
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    r.status = -1;
    r.spawn_error = errno;
    return r;
  }
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, fds[1], 1);  // dup2 clears close-on-exec on 1 and 2
  posix_spawn_file_actions_adddup2(&fa, fds[1], 2);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  posix_spawnattr_setpgroup(&attr, 0);
  sigset_t none, defaults;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&attr, &none);
  sigemptyset(&defaults);
  sigaddset(&defaults, SIGINT);
  sigaddset(&defaults, SIGPIPE);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  int rc = posix_spawnp(&pid, args[0], &fa, &attr, args.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  close(fds[1]);
  if (rc != 0) {
    close(fds[0]);
    r.status = -1;
    r.spawn_error = rc;
    return r;
  }
  fcntl(fds[0], F_SETFL, fcntl(fds[0], F_GETFL) | O_NONBLOCK);
  using clock = std::chrono::steady_clock;
  const auto deadline = clock::now() + std::chrono::duration_cast<clock::duration>(
                                           std::chrono::duration<double>(timeout_seconds));
  bool interrupted = false, hung_up = false;
  for (;;) {
    pollfd p{hung_up ? -1 : fds[0], POLLIN, 0};  // after a hang-up poll() only waits
    int n = poll(&p, 1, kPollMillis);
    if (n > 0) {
      drain(fds[0], r.output);
      hung_up = (p.revents & (POLLHUP | POLLERR)) != 0;
    }
    // Seen exited but not yet reaped, so that its process group id cannot be reused meanwhile.
    siginfo_t info = {};
    const int w = waitid(P_PID, id_t(pid), &info, WEXITED | WNOHANG | WNOWAIT);
    if ((w == 0 && info.si_pid == pid) || (w < 0 && errno == ECHILD)) {
      kill(-pid, SIGKILL);  // leftovers of the group (a daemonised grandchild) must not linger
      drain(fds[0], r.output);
      // With SIGCHLD ignored the child is reaped by the kernel and its status is lost: report
      // success and let the caller judge by what the program left behind.
      r.status = w < 0 ? 0 : wait_status(pid);
      break;
    }
    if (stop_requested()) {
      interrupted = true;
    } else if (timeout_seconds > 0 && clock::now() > deadline) {
      r.timed_out = true;
    } else {
      continue;
    }
    kill_group(pid);
    r.status = wait_status(pid);
    drain(fds[0], r.output);
    break;
  }
  close(fds[0]);
  if (interrupted) throw Interrupted();
  return r;
}

}  // namespace pypto::runtime
