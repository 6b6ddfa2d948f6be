#include "core/signals.h"

#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <mutex>
#include <thread>

namespace strata {
namespace {

std::atomic<bool> g_in_scope{false};
std::atomic<int> g_requested{0};

sigset_t stop_signals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  // The hang-up of a closed terminal or ssh session, and SLURM's warning
  // before preemption (sbatch --signal=USR1@...): a checkpoint, not a loss.
  sigaddset(&set, SIGHUP);
  sigaddset(&set, SIGUSR1);
  return set;
}

// Ends the process by `sig` with its default action.
[[noreturn]] void die_by(int sig) {
  struct sigaction sa {};
  sa.sa_handler = SIG_DFL;
  sigemptyset(&sa.sa_mask);
  sigaction(sig, &sa, nullptr);
  sigset_t one;
  sigemptyset(&one);
  sigaddset(&one, sig);
  pthread_sigmask(SIG_UNBLOCK, &one, nullptr);
  pthread_kill(pthread_self(), sig);
  for (;;) pause();  // not reached: the default action of each stop signal ends the process
}

void watch() {
  const sigset_t set = stop_signals();
  for (;;) {
    int sig = 0;
    if (sigwait(&set, &sig) != 0) continue;
    if (!g_in_scope.load() || g_requested.load() != 0) die_by(sig);
    g_requested.store(sig);
  }
}

}  // namespace

void start_signal_thread() {
  static std::once_flag once;
  std::call_once(once, [] {
    const sigset_t set = stop_signals();
    pthread_sigmask(SIG_BLOCK, &set, nullptr);
    std::thread(watch).detach();
  });
}

StopScope::StopScope() {
  g_requested.store(0);
  g_in_scope.store(true);
}

StopScope::~StopScope() { g_in_scope.store(false); }

int StopScope::signal() { return g_requested.load(); }

}  // namespace strata
