// The pre-check of a checkpoint in a child process (checkpoint_precheck.h).
#include "io/checkpoint_precheck.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <set>
#include <tuple>

#include "core/error.h"
#include "core/log.h"
#include "core/text.h"

namespace strata {
namespace {

constexpr rlim_t kCpuSeconds = 5;  // a sound file's structure reads in milliseconds
constexpr int kWallSeconds = 120;  // a child blocked without using CPU
constexpr rlim_t kExtraBytes = rlim_t(1) << 30;

using FileId = std::tuple<dev_t, ino_t, off_t, time_t, long>;

std::mutex& passed_mutex() {
  static std::mutex m;
  return m;
}
std::set<FileId>& passed() {
  static std::set<FileId> s;
  return s;
}

bool enabled() {
  const char* e = std::getenv("STRATA_CHECKPOINT_CHECK");
  return !(e && std::string(e) == "0");
}

// The process's address space in bytes (/proc/self/statm), 0 when unknown.
rlim_t address_space() {
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  if (!f) return 0;
  unsigned long long pages = 0;
  const bool ok = std::fscanf(f, "%llu", &pages) == 1;
  std::fclose(f);
  return ok ? rlim_t(pages) * rlim_t(sysconf(_SC_PAGESIZE)) : 0;
}

void lower_limit(int resource, rlim_t soft, rlim_t hard) {
  rlimit cur{};
  if (getrlimit(resource, &cur) != 0) return;
  if (cur.rlim_max != RLIM_INFINITY && cur.rlim_max < hard) hard = cur.rlim_max;
  if (soft > hard) soft = hard;
  const rlimit lim{soft, hard};
  (void)setrlimit(resource, &lim);
}

void write_all(int fd, const std::string& s) {
  size_t done = 0;
  while (done < s.size()) {
    const ssize_t n = ::write(fd, s.data() + done, s.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    done += size_t(n);
  }
}

// The child: limits, the walk, and one report on `out`: "O" (sound), "E"
// and the error's text, or "M" (out of memory). Never returns.
[[noreturn]] void child(int out, pid_t parent, const std::function<void()>& walk) {
  (void)prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) _exit(3);
  // A crash must end the child by its signal: no handler of the parent's.
  for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGXCPU}) ::signal(sig, SIG_DFL);
  const int null = ::open("/dev/null", O_RDWR | O_CLOEXEC);
  if (null >= 0) {
    (void)dup2(null, STDOUT_FILENO);
    (void)dup2(null, STDERR_FILENO);
  }
  lower_limit(RLIMIT_CORE, 0, 0);
  lower_limit(RLIMIT_CPU, kCpuSeconds, kCpuSeconds + 1);
  if (const rlim_t as = address_space(); as > 0)
    lower_limit(RLIMIT_AS, as + kExtraBytes, as + kExtraBytes);
  std::string report = "O";
  try {
    walk();
  } catch (const std::bad_alloc&) {
    report = "M";
  } catch (const std::exception& e) {
    report = std::string("E") + e.what();
  } catch (...) {
    report = "Ean unknown error";
  }
  write_all(out, report);
  _exit(0);
}

const char* signal_name(int sig) {
  switch (sig) {
    case SIGSEGV: return "SIGSEGV";
    case SIGBUS: return "SIGBUS";
    case SIGFPE: return "SIGFPE";
    case SIGILL: return "SIGILL";
    case SIGABRT: return "SIGABRT";
    case SIGKILL: return "SIGKILL";
    case SIGXCPU: return "SIGXCPU";
    default: return "a signal";
  }
}

}  // namespace

void precheck_checkpoint(const std::string& path, const std::function<void()>& walk) {
  if (!enabled()) return;
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return;  // the reader names the problem
  const FileId id{st.st_dev, st.st_ino, st.st_size, st.st_mtim.tv_sec, st.st_mtim.tv_nsec};
  {
    std::lock_guard<std::mutex> lock(passed_mutex());
    if (passed().count(id)) return;
  }
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    log::warn("checkpoint ", path, ": opened without the pre-check (cannot create a pipe: ",
              std::strerror(errno), ")");
    return;
  }
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    const int err = errno;
    ::close(fds[0]);
    ::close(fds[1]);
    log::warn("checkpoint ", path, ": opened without the pre-check (cannot start a process: ",
              std::strerror(err), ")");
    return;
  }
  if (pid == 0) {
    ::close(fds[0]);
    child(fds[1], parent, walk);
  }
  ::close(fds[1]);
  std::string report;
  bool timed_out = false;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(kWallSeconds);
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                          deadline - std::chrono::steady_clock::now())
                          .count();
    if (left <= 0) {
      ::kill(pid, SIGKILL);
      timed_out = true;
      break;
    }
    pollfd p{fds[0], POLLIN, 0};
    const int r = ::poll(&p, 1, int(std::min<long long>(left, 1000)));
    if (r < 0 && errno != EINTR) {
      ::kill(pid, SIGKILL);
      break;
    }
    if (r <= 0) continue;
    char buf[4096];
    const ssize_t n = ::read(fds[0], buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    report.append(buf, size_t(n));
  }
  ::close(fds[0]);
  int status = 0;
  pid_t w;
  do w = ::waitpid(pid, &status, 0);
  while (w < 0 && errno == EINTR);
  const bool reaped = w == pid;  // not where SIGCHLD is ignored: the report decides alone

  const std::string head = cat("checkpoint ", path, ": corrupt file: ");
  if (report == "O") {
    std::lock_guard<std::mutex> lock(passed_mutex());
    passed().insert(id);
    return;
  }
  if (report == "M")
    fail_one_line(head, "reading its structure needs over 1 GiB of memory (a size in it is "
                        "wrong; nothing was loaded)");
  if (!report.empty() && report[0] == 'E') fail_one_line(report.substr(1));
  if (timed_out)
    fail_one_line(head, "the HDF5 library did not finish reading its structure in ",
                  kWallSeconds, " s (nothing was loaded)");
  if (reaped && WIFSIGNALED(status) && WTERMSIG(status) == SIGXCPU)
    fail_one_line(head, "the HDF5 library loops reading its structure (stopped after ",
                  kCpuSeconds, " s of CPU time; nothing was loaded)");
  if (reaped && WIFSIGNALED(status))
    fail_one_line(head, "the HDF5 library crashes reading its structure (",
                  signal_name(WTERMSIG(status)),
                  " in the separate process that checks a file first; nothing was loaded)");
  fail_one_line(head, "the HDF5 library failed reading its structure (the checking process ",
                reaped && WIFEXITED(status) ? cat("exited with status ", WEXITSTATUS(status))
                                            : std::string("ended without a report"),
                "; nothing was loaded)");
}

}  // namespace strata
