// SIGINT -> stop flag. The handler is installed only for the duration of a scope and chains to the
// handler it replaced, so the rest of the process (Python's signal module) sees every signal.
#include "exec/interrupt.h"

#include <pthread.h>
#include <signal.h>

namespace pypto::runtime {
namespace {

static_assert(std::atomic<int32_t>::is_always_lock_free, "the stop flag is written by a signal handler");

const std::atomic<int32_t> kNeverStop{0};
std::atomic<int32_t> g_sigint_flag{0};  // the flag of the thread holding the active scope
thread_local const std::atomic<int32_t>* t_flag = &kNeverStop;

std::atomic<bool> g_scope_taken{false};
struct sigaction g_previous;  // written before our handler is installed, read by it

void on_sigint(int sig, siginfo_t* info, void* uctx) {
  g_sigint_flag.store(1, std::memory_order_relaxed);
  if (g_previous.sa_flags & SA_SIGINFO) {
    if (g_previous.sa_sigaction) g_previous.sa_sigaction(sig, info, uctx);
  } else if (g_previous.sa_handler != SIG_DFL && g_previous.sa_handler != SIG_IGN) {
    g_previous.sa_handler(sig);
  }
}

bool is_ours(const struct sigaction& a) { return (a.sa_flags & SA_SIGINFO) && a.sa_sigaction == &on_sigint; }

// In a child of fork() the thread that held the scope does not exist: give the handler back.
void release_scope_in_child() {
  struct sigaction current;
  if (sigaction(SIGINT, nullptr, &current) == 0 && is_ours(current)) sigaction(SIGINT, &g_previous, nullptr);
  g_scope_taken.store(false);
}
[[maybe_unused]] const bool g_atfork_registered =
    (pthread_atfork(nullptr, nullptr, &release_scope_in_child), true);

}  // namespace

const std::atomic<int32_t>& stop_flag() { return *t_flag; }

SigintScope::SigintScope() {
  if (g_scope_taken.exchange(true)) return;
  struct sigaction current;
  if (sigaction(SIGINT, nullptr, &current) != 0 || is_ours(current) ||
      (!(current.sa_flags & SA_SIGINFO) &&
       (current.sa_handler == SIG_DFL || current.sa_handler == SIG_IGN))) {
    g_scope_taken.store(false);
    return;
  }
  g_previous = current;
  g_sigint_flag.store(0, std::memory_order_relaxed);
  struct sigaction mine = {};
  mine.sa_sigaction = &on_sigint;
  mine.sa_flags = SA_SIGINFO | SA_RESTART | (current.sa_flags & SA_ONSTACK);
  mine.sa_mask = current.sa_mask;
  if (sigaction(SIGINT, &mine, nullptr) != 0) {
    g_scope_taken.store(false);
    return;
  }
  t_flag = &g_sigint_flag;
  active_ = true;
}

SigintScope::~SigintScope() {
  if (!active_) return;
  // Put the previous handler back unless someone replaced ours in the meantime.
  struct sigaction current;
  if (sigaction(SIGINT, nullptr, &current) == 0 && is_ours(current)) sigaction(SIGINT, &g_previous, nullptr);
  t_flag = &kNeverStop;
  g_scope_taken.store(false);
}

}  // namespace pypto::runtime
