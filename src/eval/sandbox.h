// A sandbox for running untrusted Python programs, such as model-written
// HumanEval completions, and telling whether they pass.
//
// run_python_sandboxed() forks a child that
//   - leads a process group of its own (the whole group is killed at the end),
//   - has no network: it moves into a new network namespace, whose only
//     interface (loopback) is down. unshare(CLONE_NEWNET) needs root; other
//     users get it through a new user namespace that maps their own uid/gid
//     (needs unprivileged user namespaces). When neither works the program is
//     not run and the call throws strata::Error,
//   - runs `<python3> -I -B main.py` (isolated mode, no .pyc files) in a fresh
//     mkdtemp directory under $TMPDIR or /tmp, holding only main.py, that is
//     removed afterwards whatever happened,
//   - gets an empty environment except PATH and LANG, stdin from /dev/null,
//     stdout and stderr into one pipe, all signals unblocked and at their
//     default action, and the limits below (rlimits; RLIMIT_CORE is 0 and
//     RLIMIT_NOFILE 64).
// python3 is the first one on the caller's PATH.
//
// This guards against accidents (endless loops, runaway memory, stray network
// or file access outside the directory), not against a determined attacker:
// the program runs as the caller's user (root stays root inside), sees the
// whole file system, and a process that leaves the group (setsid) escapes the
// final kill.
//
// Errors of the sandbox itself (no python3, no network isolation, no temporary
// directory) throw strata::Error with a one-line message; the program's own
// failures are results.
#pragma once

#include <cstdint>
#include <string>

namespace strata {

struct SandboxLimits {
  double wall_seconds = 10.0;               // then the process group gets SIGKILL
  double cpu_seconds = 10.0;                // RLIMIT_CPU (SIGXCPU, SIGKILL one second later)
  int64_t memory_bytes = int64_t{1} << 30;  // RLIMIT_AS
  int64_t output_bytes = 64 << 10;          // stdout+stderr kept (the rest is read and dropped);
                                            // also RLIMIT_FSIZE for files the program writes
};

enum class SandboxStatus {
  Passed,       // exit status 0
  Failed,       // a non-zero exit status (an exception, a failed assert, sys.exit(n))
  Timeout,      // past wall_seconds, or killed by the CPU limit
  OutOfMemory,  // a non-zero exit with "MemoryError" in the output; killed by a SIGKILL not
                // sent here (the kernel's OOM killer); or by SIGSEGV/SIGBUS/SIGABRT with a peak
                // resident size of at least half of memory_bytes (native code hitting RLIMIT_AS)
  Crashed,      // killed by any other signal
};

struct SandboxResult {
  SandboxStatus status = SandboxStatus::Crashed;
  int exit_code = -1;  // the exit status when it exited, else -1
  int signal = 0;      // the signal that killed it, else 0
  double seconds = 0;  // wall-clock time of the run
  std::string output;  // stdout and stderr interleaved, at most output_bytes
};

// "passed", "failed", "timeout", "out of memory", "crashed".
const char* sandbox_status_name(SandboxStatus status);

// Runs the Python source `program` as described at the top of this file.
// Call it from one thread at a time.
SandboxResult run_python_sandboxed(const std::string& program, const SandboxLimits& limits);

// The program that checks one HumanEval completion:
// prompt + completion + "\n" + test + "\n" + "check(" + entry_point + ")\n".
std::string humaneval_program(const std::string& prompt, const std::string& completion,
                              const std::string& test, const std::string& entry_point);

}  // namespace strata
