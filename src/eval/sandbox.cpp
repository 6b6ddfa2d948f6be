#include "eval/sandbox.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
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
#include "eval/sandbox_internal.h"

namespace strata {

namespace fs = std::filesystem;
using namespace sandbox_detail;

namespace {

constexpr const char* kWho = "HumanEval sandbox: ";
constexpr size_t kTailBytes = 4096;   // also searched for "MemoryError" when output is truncated
constexpr rlim_t kMaxProcesses = 32;  // RLIMIT_NPROC of the program's user

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

// ------------------------------------------------------------------ errors

[[noreturn]] void report_child_error(const Report& e, const std::string& python,
                                     const RootPlan& plan) {
  const char* what = std::strerror(e.err);
  switch (e.step) {
    case Step::Namespaces:
      fail_one_line(kWho,
                    "cannot isolate the program (unshare(CLONE_NEWNS | CLONE_NEWPID | "
                    "CLONE_NEWNET): ",
                    what, "; with CLONE_NEWUSER: ", std::strerror(e.err2),
                    "); run as root (with CAP_SYS_ADMIN) or allow unprivileged user namespaces "
                    "(sysctl kernel.unprivileged_userns_clone=1, user.max_user_namespaces > 0)");
    case Step::UserMap:
      fail_one_line(kWho,
                    "cannot set up the user namespace (writing /proc/self/uid_map, "
                    "setgroups, gid_map): ",
                    what);
    case Step::Mount:
      if (e.index >= 0 && e.index < plan.size())
        fail_one_line(kWho, "cannot set up the program's file system (", plan.source(e.index),
                      " on ", plan.inside(e.index), "): ", what);
      break;
    case Step::Root: {
      const char* stage = e.index == kPropagation ? "making the mounts private"
                          : e.index == kTmpfs     ? "mounting a tmpfs root"
                          : e.index == kPivot     ? "pivot_root"
                                                  : "making the root read-only";
      fail_one_line(kWho, "cannot set up the program's file system (", stage, "): ", what);
    }
    case Step::Privileges: {
      const char* stage = e.index == kBounding       ? "emptying the capability bounding set"
                          : e.index == kUser         ? "leaving root"
                          : e.index == kCapabilities ? "capset"
                                                     : "PR_SET_NO_NEW_PRIVS";
      fail_one_line(kWho, "cannot drop the program's privileges (", stage, "): ", what);
    }
    case Step::Exec:
      if (e.err == ENOENT && ::access(python.c_str(), F_OK) != 0)
        fail_one_line(kWho, "python3 not found on PATH (install python3)");
      fail_one_line(kWho, "cannot run ", python, ": ", what);
    case Step::Fork:
      fail_one_line(kWho, "fork: ", what);
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

  // The environment (PATH names the interpreter's directory once it is known).
  std::vector<std::string> env = {
      "PATH=" + fs::path(python).parent_path().string() + ":/usr/local/bin:/usr/bin:/bin",
      "LANG=C.UTF-8"};
  auto pointers = [](std::vector<std::string>& strings) {
    std::vector<char*> p;
    for (std::string& s : strings) p.push_back(s.data());
    p.push_back(nullptr);
    return p;
  };
  std::vector<char*> envp = pointers(env);
  const Interpreter& interpreter = resolve_python(python, envp.data());
  env[0] = "PATH=" + fs::path(interpreter.executable).parent_path().string() +
           ":/usr/local/bin:/usr/bin:/bin";
  envp = pointers(env);

  // <tmp>/strata-sandbox-XXXXXX/work holds main.py and is the program's
  // directory, /tmp/strata-sandbox-XXXXXX inside; <tmp>/.../root is where the
  // init mounts the new root. As root, the program runs as the sandbox user
  // (sandbox_internal.h): the work directory is its, and the outer one may be
  // passed through.
  TempDir dir;
  const std::string work = dir.path() + "/work", new_root = dir.path() + "/root";
  const bool root = ::geteuid() == 0;
  uid_t sandbox_id = kSandboxIds + static_cast<uint32_t>(::getpid());
  if (::mkdir(work.c_str(), 0700) != 0 || ::mkdir(new_root.c_str(), 0755) != 0 ||
      (root && ::chmod(dir.path().c_str(), 0711) != 0))
    fail_one_line(kWho, "cannot prepare ", dir.path(), ": ", std::strerror(errno));
  if (root && ::chown(work.c_str(), sandbox_id, sandbox_id) != 0) {
    // EINVAL: no such id here (root of a user namespace that maps few ids).
    if (errno == EINVAL) sandbox_id = kNobody;
    if (errno != EINVAL || ::chown(work.c_str(), sandbox_id, sandbox_id) != 0)
      fail_one_line(kWho, "cannot prepare ", work, ": ", std::strerror(errno));
  }
  {
    const std::string main_py = work + "/main.py";
    std::ofstream out(main_py, std::ios::binary | std::ios::trunc);
    out << program;
    out.close();
    if (!out || (root && ::chown(main_py.c_str(), sandbox_id, sandbox_id) != 0))
      fail_one_line(kWho, "cannot write ", main_py);
  }
  const std::string work_inside = "/tmp/" + fs::path(dir.path()).filename().string();
  const RootPlan mounts(new_root, work, work_inside, interpreter);

  // Everything the children need, built before fork().
  std::vector<std::string> args = {interpreter.executable, "-I", "-B", "main.py"};
  std::vector<char*> argv = pointers(args);
  const std::string uid_map = cat(::geteuid(), " ", ::geteuid(), " 1\n");
  const std::string gid_map = cat(::getegid(), " ", ::getegid(), " 1\n");
  const std::string sandbox_map = cat(sandbox_id, " ", sandbox_id, " 1\n");
  const double cpu = std::max(1.0, std::ceil(limits.cpu_seconds));

  Fd out_r, out_w, status_r, status_w, result_r, result_w;
  make_pipe(out_r, out_w);
  make_pipe(status_r, status_w);
  make_pipe(result_r, result_w);
  const ChildPlan plan{::getpid(),
                       out_w.fd,
                       status_w.fd,
                       result_w.fd,
                       new_root.c_str(),
                       mounts.ops(),
                       mounts.size(),
                       work_inside.c_str(),
                       interpreter.executable.c_str(),
                       argv.data(),
                       envp.data(),
                       uid_map.c_str(),
                       gid_map.c_str(),
                       sandbox_id,
                       sandbox_id,
                       sandbox_map.c_str(),
                       sandbox_map.c_str(),
                       static_cast<rlim_t>(limits.memory_bytes),
                       static_cast<rlim_t>(cpu),
                       static_cast<rlim_t>(limits.output_bytes),
                       kMaxProcesses};

  const Clock::time_point start = Clock::now();
  const Clock::time_point deadline =
      start + std::chrono::duration_cast<Clock::duration>(
                  std::chrono::duration<double>(limits.wall_seconds));
  const pid_t pid = ::fork();  // the keeper
  if (pid < 0) fail_one_line(kWho, "fork: ", std::strerror(errno));
  if (pid == 0) run_keeper(plan);
  out_w.reset();
  status_w.reset();
  result_w.reset();

  int keeper_status = 0;
  auto reap = [&] {
    for (;;) {
      if (::waitpid(pid, &keeper_status, 0) == pid) return;
      if (errno != EINTR)
        fail_one_line(kWho,
                      "cannot wait for the program (is SIGCHLD ignored?): ", std::strerror(errno));
    }
  };

  // The status pipe carries the init's pid and closes at the program's exec,
  // or carries where the setup failed.
  pid_t init = 0;
  for (;;) {
    Report report{};
    size_t got = 0;
    while (got < sizeof report) {
      const ssize_t n =
          ::read(status_r.fd, reinterpret_cast<char*>(&report) + got, sizeof report - got);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      got += static_cast<size_t>(n);
    }
    if (got < sizeof report) break;
    if (report.kind == Report::Started) {
      init = report.pid;
      continue;
    }
    // The keeper ends soon after (the init reaps the failed program, the
    // keeper the init); the TempDir and Fds clean up.
    reap();
    report_child_error(report, interpreter.executable, mounts);
  }
  status_r.reset();

  // Read the output (keeping at most output_bytes) until the keeper exits or
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
    // Exited? (WNOWAIT: the keeper's pid stays its own until reaped, and the
    // init's pid stays the init's while the keeper lives.)
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
  // On timeout the init goes, and with it everything in its PID namespace;
  // the keeper exits once the init is gone.
  if (timed_out && init > 0) ::kill(init, SIGKILL);
  if (timed_out && init <= 0) ::kill(-pid, SIGKILL);
  reap();
  result.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  drain();
  out_r.reset();

  // The program's wait status and rusage, from the init.
  Finished finished{};
  bool have_finished = false;
  {
    ::fcntl(result_r.fd, F_SETFL, ::fcntl(result_r.fd, F_GETFL) | O_NONBLOCK);
    ssize_t n;
    do {
      n = ::read(result_r.fd, &finished, sizeof finished);
    } while (n < 0 && errno == EINTR);
    have_finished = n == static_cast<ssize_t>(sizeof finished);
  }
  int wait_status = keeper_status;
  struct rusage usage;
  std::memset(&usage, 0, sizeof usage);
  if (have_finished) {
    wait_status = finished.wait_status;
    usage = finished.usage;
  } else if (timed_out) {
    wait_status = SIGKILL;  // WIFSIGNALED, WTERMSIG == SIGKILL
  }

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
