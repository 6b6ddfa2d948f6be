// A sandbox for running untrusted Python programs, such as model-written
// HumanEval completions, and telling whether they pass.
//
// run_python_sandboxed() runs `<python3> -I -B main.py` (isolated mode, no
// .pyc files; python3 is the first one on the caller's PATH, resolved once to
// the interpreter it runs, past wrappers such as pyenv's shims) so that:
//   - it has no network: a new network namespace, whose only interface
//     (loopback) is down; abstract AF_UNIX sockets belong to it too;
//   - it sees its own file system: a new mount namespace whose root is a
//     read-only tmpfs holding read-only binds of /usr, /etc and the
//     interpreter's directories (the merged-/usr links /bin, /lib, ...), a
//     /dev with null, zero, random and urandom only, /proc of its own PID
//     namespace, and its directory /tmp/strata-sandbox-XXXXXX, the only
//     writable place: a fresh mkdtemp directory under $TMPDIR or /tmp holding
//     only main.py, removed afterwards whatever happened. Nothing else of the
//     host (no /tmp, /run, /var, /home, no file-system sockets) is there;
//   - it cannot outlive the call: it runs under pid 1 of a new PID namespace
//     (an init of the sandbox's own) that ends when the program does, and the
//     kernel then kills everything left in the namespace (daemons that
//     setsid()), before the call returns; a timeout kills that init. Nor can
//     it signal the caller: no process outside the namespace is visible to
//     it (its parent is that init, which ignores it);
//   - it has no privileges: as root it runs as a user of its own
//     (kSandboxIds + the caller's pid, no groups; see sandbox_internal.h), so
//     root-only files such as /etc/shadow are unreadable; it has no
//     capabilities (bounding, permitted, effective, ambient sets empty) and
//     no_new_privs (setuid files do nothing); other callers keep their uid;
//   - it gets an empty environment except PATH and LANG, stdin from
//     /dev/null, stdout and stderr into one pipe, no other descriptors, all
//     signals unblocked and at their default action, and the limits below
//     (rlimits; RLIMIT_NPROC 32, RLIMIT_CORE 0, RLIMIT_NOFILE 64).
// The namespaces come from unshare() as root (CAP_SYS_ADMIN); other users get
// them through a new user namespace that maps their own uid/gid (unprivileged
// user namespaces); root without CAP_SYS_ADMIN leaves root first, then does
// the same (the interpreter must then be readable by that user). When none of
// this works the program is not run and the call throws strata::Error.
//
// What holds: the escapes above fail (tests/sandbox_test.cpp tries each). What
// does not: the kernel is shared (a kernel exploit escapes any namespace), the
// program reads what /usr, /etc and the interpreter's directories hold, may
// create user namespaces of its own (where the mounts above stay locked), and
// may fill the disk under its directory with files of at most output_bytes
// each. Run models you do not trust on machines you can lose.
//
// Errors of the sandbox itself (no python3, no isolation, no temporary
// directory) throw strata::Error with a one-line message; the program's own
// failures are results.
#pragma once

#include <cstdint>
#include <string>

namespace strata {

struct SandboxLimits {
  double wall_seconds = 10.0;               // then the sandbox's init and all in it get SIGKILL
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
