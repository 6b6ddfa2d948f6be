#include "eval/sandbox.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "core/text.h"

namespace strata {

namespace fs = std::filesystem;

namespace {

constexpr const char* kWho = "HumanEval sandbox: ";
constexpr size_t kTailBytes = 4096;  // also searched for "MemoryError" when output is truncated

// ------------------------------------------------------------------ helpers

// The first executable regular file `name` in the directories of $PATH, as an
// absolute path; "" when there is none.
std::string find_on_path(const std::string& name) {
  const char* path = ::getenv("PATH");
  if (path == nullptr) return "";
  std::string_view rest(path);
  for (;;) {
    const size_t colon = rest.find(':');
    std::string dir(rest.substr(0, colon));
    if (dir.empty()) dir = ".";
    const std::string candidate = dir + "/" + name;
    struct stat st;
    if (::stat(candidate.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
        ::access(candidate.c_str(), X_OK) == 0) {
      std::error_code ec;
      const fs::path absolute = fs::absolute(candidate, ec);
      return ec ? candidate : absolute.string();
    }
    if (colon == std::string_view::npos) return "";
    rest.remove_prefix(colon + 1);
  }
}

// The program may have taken permissions away from what it created: give the
// owner full access to every directory again (not following symlinks).
void make_removable(const fs::path& dir) {
  std::error_code ec;
  fs::permissions(dir, fs::perms::owner_all, fs::perm_options::add, ec);
  fs::directory_iterator it(dir, ec), end;
  for (; !ec && it != end; it.increment(ec)) {
    std::error_code ec2;
    if (it->symlink_status(ec2).type() == fs::file_type::directory) make_removable(it->path());
  }
}

// A mkdtemp directory that is removed (recursively) when this goes out of scope.
class TempDir {
 public:
  TempDir() {
    const char* tmp = ::getenv("TMPDIR");
    const std::string base = tmp != nullptr && *tmp != '\0' ? tmp : "/tmp";
    std::string templ = base + "/strata-sandbox-XXXXXX";
    if (::mkdtemp(templ.data()) == nullptr)
      fail_one_line(kWho, "cannot create a temporary directory in ", base, ": ",
                    std::strerror(errno));
    path_ = templ;
  }
  ~TempDir() { remove(); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }

  // True when the directory is gone.
  bool remove() {
    if (path_.empty()) return true;
    std::error_code ec;
    make_removable(path_);
    fs::remove_all(path_, ec);
    if (fs::exists(fs::symlink_status(path_, ec))) return false;
    path_.clear();
    return true;
  }

 private:
  std::string path_;
};

// A file descriptor closed when this goes out of scope.
struct Fd {
  int fd = -1;
  Fd() = default;
  explicit Fd(int f) : fd(f) {}
  ~Fd() { reset(); }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  void reset() {
    if (fd >= 0) ::close(fd);
    fd = -1;
  }
};

void make_pipe(Fd& read_end, Fd& write_end) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) fail_one_line(kWho, "pipe: ", std::strerror(errno));
  read_end.fd = fds[0];
  write_end.fd = fds[1];
}

// ------------------------------------------------------------------ the child

// Why the child did not get to run the program, written to the status pipe.
enum class Step : int { Stdio = 1, ProcessGroup, Chdir, Unshare, UserMap, Limits, Exec };
struct ChildError {
  Step step;
  int err;
  int err2;  // Unshare: the errno of the user-namespace attempt (err: plain CLONE_NEWNET)
};

// Everything the child needs, prepared before fork(): between fork() and exec
// only async-signal-safe calls are made (no allocation), since the caller may
// have other threads.
struct ChildPlan {
  int out_fd;     // write end of the output pipe
  int status_fd;  // write end of the status pipe (close-on-exec)
  const char* dir;
  const char* python;
  char* const* argv;
  char* const* envp;
  const char* uid_map;  // "<uid> <uid> 1\n": the caller's ids, mapped to themselves
  const char* gid_map;
  rlim_t memory, cpu, file_size;
};

[[noreturn]] void child_fail(const ChildPlan& p, Step step, int err, int err2 = 0) {
  const ChildError e{step, err, err2};
  [[maybe_unused]] ssize_t n = ::write(p.status_fd, &e, sizeof e);
  ::_exit(127);
}

bool write_proc_file(const char* path, const char* text) {
  const int fd = ::open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const size_t len = std::strlen(text);
  const bool ok = ::write(fd, text, len) == static_cast<ssize_t>(len);
  ::close(fd);
  return ok;
}

// Sets a limit, clamped to the hard limit already in force (only root may raise that).
bool set_limit(int resource, rlim_t soft, rlim_t hard) {
  struct rlimit cur;
  if (::getrlimit(resource, &cur) != 0) return false;
  if (cur.rlim_max != RLIM_INFINITY) {
    hard = std::min(hard, cur.rlim_max);
    soft = std::min(soft, cur.rlim_max);
  }
  const struct rlimit lim { soft, hard };
  return ::setrlimit(resource, &lim) == 0;
}

[[noreturn]] void run_child(const ChildPlan& p) {
  // Signals: nothing blocked or ignored (strata blocks SIGINT/SIGTERM in all threads).
  sigset_t none;
  ::sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  struct sigaction dfl;
  std::memset(&dfl, 0, sizeof dfl);
  dfl.sa_handler = SIG_DFL;
  for (int s = 1; s < NSIG; ++s) ::sigaction(s, &dfl, nullptr);  // fails harmlessly for some

  if (::setpgid(0, 0) != 0) child_fail(p, Step::ProcessGroup, errno);

  // stdin from /dev/null, stdout and stderr into the pipe. Duplicates above 2
  // first, so that dup2() never finds source == target (which would keep
  // close-on-exec set).
  const int null_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (null_fd < 0) child_fail(p, Step::Stdio, errno);
  const int in = ::fcntl(null_fd, F_DUPFD_CLOEXEC, 3);
  const int out = ::fcntl(p.out_fd, F_DUPFD_CLOEXEC, 3);
  if (in < 0 || out < 0 || ::dup2(in, 0) < 0 || ::dup2(out, 1) < 0 || ::dup2(out, 2) < 0)
    child_fail(p, Step::Stdio, errno);
  // Nothing else the caller has open reaches the program.
  if (::close_range(3, ~0U, CLOSE_RANGE_CLOEXEC) != 0) {
    struct rlimit nofile;
    const rlim_t top = ::getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur < 65536
                           ? nofile.rlim_cur
                           : 65536;
    for (rlim_t fd = 3; fd < top; ++fd) ::fcntl(static_cast<int>(fd), F_SETFD, FD_CLOEXEC);
  }

  if (::chdir(p.dir) != 0) child_fail(p, Step::Chdir, errno);

  // No network: a new network namespace has only a loopback interface, down.
  if (::unshare(CLONE_NEWNET) != 0) {
    const int err = errno;
    if (::unshare(CLONE_NEWUSER | CLONE_NEWNET) != 0) child_fail(p, Step::Unshare, err, errno);
    // Inside the new user namespace: keep our own uid/gid (so the temporary
    // directory stays ours); setgroups must be denied before gid_map is written.
    if (!write_proc_file("/proc/self/uid_map", p.uid_map) ||
        !write_proc_file("/proc/self/setgroups", "deny") ||
        !write_proc_file("/proc/self/gid_map", p.gid_map))
      child_fail(p, Step::UserMap, errno);
  }

  if (!set_limit(RLIMIT_AS, p.memory, p.memory) || !set_limit(RLIMIT_CPU, p.cpu, p.cpu + 1) ||
      !set_limit(RLIMIT_FSIZE, p.file_size, p.file_size) || !set_limit(RLIMIT_CORE, 0, 0) ||
      !set_limit(RLIMIT_NOFILE, 64, 64))
    child_fail(p, Step::Limits, errno);

  ::execve(p.python, p.argv, p.envp);
  child_fail(p, Step::Exec, errno);
}

[[noreturn]] void report_child_error(const ChildError& e, const std::string& python) {
  const char* what = std::strerror(e.err);
  switch (e.step) {
    case Step::Unshare:
      fail_one_line(kWho, "cannot isolate the network (unshare(CLONE_NEWNET): ", what,
                    "; unshare(CLONE_NEWUSER | CLONE_NEWNET): ", std::strerror(e.err2),
                    "); run as root or allow unprivileged user namespaces "
                    "(sysctl kernel.unprivileged_userns_clone=1, user.max_user_namespaces > 0)");
    case Step::UserMap:
      fail_one_line(kWho,
                    "cannot set up the user namespace (writing /proc/self/uid_map, "
                    "setgroups, gid_map): ",
                    what);
    case Step::Exec:
      if (e.err == ENOENT && ::access(python.c_str(), F_OK) != 0)
        fail_one_line(kWho, "python3 not found on PATH (install python3)");
      fail_one_line(kWho, "cannot run ", python, ": ", what);
    case Step::Stdio:
      fail_one_line(kWho, "cannot redirect the program's stdio: ", what);
    case Step::ProcessGroup:
      fail_one_line(kWho, "setpgid: ", what);
    case Step::Chdir:
      fail_one_line(kWho, "cannot enter the temporary directory: ", what);
    case Step::Limits:
      fail_one_line(kWho, "cannot set the resource limits: ", what);
  }
  fail_one_line(kWho, "the child failed before running the program: ", what);
}

bool contains(const std::string& s, std::string_view what) {
  return s.find(what) != std::string::npos;
}

}  // namespace

const char* sandbox_status_name(SandboxStatus status) {
  switch (status) {
    case SandboxStatus::Passed:
      return "passed";
    case SandboxStatus::Failed:
      return "failed";
    case SandboxStatus::Timeout:
      return "timeout";
    case SandboxStatus::OutOfMemory:
      return "out of memory";
    case SandboxStatus::Crashed:
      return "crashed";
  }
  return "?";
}

std::string humaneval_program(const std::string& prompt, const std::string& completion,
                              const std::string& test, const std::string& entry_point) {
  return prompt + completion + "\n" + test + "\n" + "check(" + entry_point + ")\n";
}

SandboxResult run_python_sandboxed(const std::string& program, const SandboxLimits& limits) {
  using Clock = std::chrono::steady_clock;
  STRATA_CHECK(limits.wall_seconds > 0 && limits.cpu_seconds > 0 && limits.memory_bytes > 0 &&
                   limits.output_bytes >= 0,
               kWho, "limits must be positive");
  const std::string python = find_on_path("python3");
  if (python.empty()) fail_one_line(kWho, "python3 not found on PATH (install python3)");

  TempDir dir;
  {
    std::ofstream out(dir.path() + "/main.py", std::ios::binary | std::ios::trunc);
    out << program;
    out.close();
    if (!out) fail_one_line(kWho, "cannot write ", dir.path(), "/main.py");
  }

  // Everything the child needs, built before fork().
  const std::string python_dir = fs::path(python).parent_path().string();
  std::vector<std::string> args = {python, "-I", "-B", "main.py"};
  std::vector<std::string> env = {"PATH=" + python_dir + ":/usr/local/bin:/usr/bin:/bin",
                                  "LANG=C.UTF-8"};
  std::vector<char*> argv, envp;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  for (std::string& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  const std::string uid_map = cat(::getuid(), " ", ::getuid(), " 1\n");
  const std::string gid_map = cat(::getgid(), " ", ::getgid(), " 1\n");
  const double cpu = std::max(1.0, std::ceil(limits.cpu_seconds));

  Fd out_r, out_w, status_r, status_w;
  make_pipe(out_r, out_w);
  make_pipe(status_r, status_w);
  const ChildPlan plan{out_w.fd,
                       status_w.fd,
                       dir.path().c_str(),
                       python.c_str(),
                       argv.data(),
                       envp.data(),
                       uid_map.c_str(),
                       gid_map.c_str(),
                       static_cast<rlim_t>(limits.memory_bytes),
                       static_cast<rlim_t>(cpu),
                       static_cast<rlim_t>(limits.output_bytes)};

  const Clock::time_point start = Clock::now();
  const Clock::time_point deadline =
      start + std::chrono::duration_cast<Clock::duration>(
                  std::chrono::duration<double>(limits.wall_seconds));
  const pid_t pid = ::fork();
  if (pid < 0) fail_one_line(kWho, "fork: ", std::strerror(errno));
  if (pid == 0) run_child(plan);
  out_w.reset();
  status_w.reset();

  int wait_status = 0;
  struct rusage usage;
  std::memset(&usage, 0, sizeof usage);
  auto reap = [&] {
    for (;;) {
      if (::wait4(pid, &wait_status, 0, &usage) == pid) return;
      if (errno != EINTR)
        fail_one_line(kWho,
                      "cannot wait for the program (is SIGCHLD ignored?): ", std::strerror(errno));
    }
  };

  // The status pipe closes at exec (success) or carries a ChildError.
  ChildError child_error{};
  size_t got = 0;
  while (got < sizeof child_error) {
    const ssize_t n =
        ::read(status_r.fd, reinterpret_cast<char*>(&child_error) + got, sizeof child_error - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  status_r.reset();
  if (got > 0) {
    reap();
    report_child_error(child_error, python);  // the TempDir and Fds clean up
  }

  // Read the output (keeping at most output_bytes) until the child exits or
  // the deadline passes.
  ::fcntl(out_r.fd, F_SETFL, ::fcntl(out_r.fd, F_GETFL) | O_NONBLOCK);
  const size_t keep = static_cast<size_t>(limits.output_bytes);
  SandboxResult result;
  std::string tail;  // the last bytes of the whole stream
  bool pipe_open = true;
  auto drain = [&] {
    char buf[65536];
    for (;;) {
      const ssize_t n = ::read(out_r.fd, buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n == 0) pipe_open = false;
      if (n <= 0) return;
      const size_t len = static_cast<size_t>(n);
      if (result.output.size() < keep)
        result.output.append(buf, std::min(len, keep - result.output.size()));
      tail.append(buf, len);
      if (tail.size() > 2 * kTailBytes) tail.erase(0, tail.size() - kTailBytes);
    }
  };
  bool timed_out = false;
  for (;;) {
    // Exited? (WNOWAIT: the zombie keeps its pid, so the process group id
    // cannot be reused before the kill below.)
    siginfo_t info;
    std::memset(&info, 0, sizeof info);
    const int w = ::waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOHANG | WNOWAIT);
    if (w == 0 && info.si_pid == pid) break;
    if (w < 0 && errno != EINTR) break;  // reap() below reports it
    const Clock::time_point now = Clock::now();
    if (now >= deadline) {
      timed_out = true;
      break;
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now);
    const int slice = static_cast<int>(std::clamp<int64_t>(left.count() + 1, 1, 20));
    if (pipe_open) {
      struct pollfd pfd {
        out_r.fd, POLLIN, 0
      };
      if (::poll(&pfd, 1, slice) > 0) drain();
    } else {
      ::usleep(static_cast<useconds_t>(std::min(slice, 2)) * 1000);
    }
  }
  // The whole group goes: the program on timeout, anything it left behind otherwise.
  ::kill(-pid, SIGKILL);
  reap();
  result.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  drain();
  out_r.reset();

  const bool memory_error = contains(result.output, "MemoryError") || contains(tail, "MemoryError");
  const double cpu_used =
      static_cast<double>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
      1e-6 * static_cast<double>(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec);
  if (WIFEXITED(wait_status)) {
    result.exit_code = WEXITSTATUS(wait_status);
    result.status = result.exit_code == 0 ? SandboxStatus::Passed
                    : memory_error        ? SandboxStatus::OutOfMemory
                                          : SandboxStatus::Failed;
  } else if (WIFSIGNALED(wait_status)) {
    result.signal = WTERMSIG(wait_status);
    const int sig = result.signal;
    const bool big = static_cast<double>(usage.ru_maxrss) * 1024.0 >=
                     0.5 * static_cast<double>(limits.memory_bytes);
    if (sig == SIGXCPU || (sig == SIGKILL && cpu_used >= cpu)) {
      result.status = SandboxStatus::Timeout;  // the CPU limit (soft, then hard)
    } else if (memory_error || sig == SIGKILL) {
      // A SIGKILL nobody here sent: most likely the kernel's OOM killer.
      result.status = SandboxStatus::OutOfMemory;
    } else if ((sig == SIGSEGV || sig == SIGBUS || sig == SIGABRT) && big) {
      // Native code that hit RLIMIT_AS (a failed mmap or stack growth).
      result.status = SandboxStatus::OutOfMemory;
    } else {
      result.status = SandboxStatus::Crashed;
    }
  }
  if (timed_out) result.status = SandboxStatus::Timeout;

  if (!dir.remove()) {
    const std::string path = dir.path();
    fail_one_line(kWho, "cannot remove the temporary directory ", path);
  }
  return result;
}

}  // namespace strata
