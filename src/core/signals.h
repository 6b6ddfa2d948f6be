// SIGINT, SIGTERM, SIGHUP and SIGUSR1 (SLURM's preemption warning), handled by
// one thread of their own.
//
// A signal handler runs on the stack of whichever thread the signal
// interrupts, below its stack pointer. oneDNN's JIT GEMM kernels keep data
// there, so a handler that fires inside one corrupts it (seen as heap
// corruption a few calls later). So strata blocks the two signals in every
// thread and receives them with sigwait() in a watcher thread that runs no
// kernels: nothing is ever interrupted.
//
// Outside a StopScope a signal ends the process as it normally would (the
// default action, so the exit status says "killed by signal N"). Inside one
// (the training loop) the first signal only records itself, and the loop
// finishes its step, saves a checkpoint and returns; a second signal ends the
// process at once.
#pragma once

namespace strata {

// Call at the start of main(), before any other thread exists (OpenMP, MPI),
// so that every thread inherits the blocked mask. Idempotent. Processes that
// never call it (the test binaries) keep the default signal behaviour and
// StopScope::signal() stays 0.
void start_signal_thread();

class StopScope {
 public:
  StopScope();   // from here, a stop signal requests a stop instead of ending the process
  ~StopScope();  // back to the default action
  StopScope(const StopScope&) = delete;
  StopScope& operator=(const StopScope&) = delete;
  // The signal that requested a stop since the scope began (0: none).
  static int signal();
};

}  // namespace strata
