// The sandbox's preparations in strata's own process: which python3 to run
// and what the program's file system holds (see sandbox_internal.h).
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "core/text.h"
#include "eval/sandbox_internal.h"

namespace strata::sandbox_detail {

namespace fs = std::filesystem;

namespace {

constexpr const char* kWho = "HumanEval sandbox: ";

constexpr const char* kProbe =
    "import os, sys\n"
    "for p in (sys.executable, sys.prefix, sys.base_prefix, sys.exec_prefix,\n"
    "          sys.base_exec_prefix):\n"
    "    print('strata-python:' + p)\n"
    "try:\n"
    "    for line in open('/proc/self/maps'):\n"
    "        f = line.split(None, 5)\n"
    "        if len(f) == 6 and f[5].startswith('/'):\n"
    "            print('strata-python:' + os.path.dirname(f[5].rstrip('\\n')))\n"
    "except OSError:\n"
    "    pass\n";
constexpr std::string_view kTag = "strata-python:";

Interpreter probe_python(const std::string& python, char* const* envp) {
  std::vector<std::string> args = {python, "-I", "-B", "-c", kProbe};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) fail_one_line(kWho, "pipe: ", std::strerror(errno));
  const pid_t pid = ::fork();
  if (pid < 0) {
    const int err = errno;
    ::close(fds[0]);
    ::close(fds[1]);
    fail_one_line(kWho, "fork: ", std::strerror(err));
  }
  if (pid == 0) {
    const int null_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    const int out = ::fcntl(fds[1], F_DUPFD_CLOEXEC, 3);
    if (null_fd < 0 || out < 0 || ::dup2(null_fd, 0) < 0 || ::dup2(out, 1) < 0 ||
        ::dup2(out, 2) < 0 || ::chdir("/") != 0)
      ::_exit(126);
    ::execve(python.c_str(), argv.data(), envp);
    ::_exit(127);
  }
  ::close(fds[1]);
  std::string text;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  bool killed = false;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    struct pollfd pfd {
      fds[0], POLLIN, 0
    };
    const int ready = ::poll(&pfd, 1, static_cast<int>(std::max<int64_t>(left.count(), 0)));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) {
      ::kill(pid, SIGKILL);
      killed = true;
      break;
    }
    char buf[4096];
    const ssize_t n = ::read(fds[0], buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    if (text.size() < (1 << 20)) text.append(buf, static_cast<size_t>(n));
  }
  ::close(fds[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }

  Interpreter found;
  std::istringstream lines(text);
  std::string line, last;  // last: the last other line (an error message)
  while (std::getline(lines, line)) {
    if (line.rfind(kTag, 0) != 0) {
      if (!trim(line).empty()) last = trim(line);
      continue;
    }
    const std::string path = line.substr(kTag.size());
    if (found.executable.empty())
      found.executable = path;
    else if (!path.empty() && path[0] == '/')
      found.dirs.push_back(path);
  }
  if (killed) fail_one_line(kWho, "cannot run ", python, ": no answer within 60 seconds");
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || found.executable.empty() ||
      found.executable[0] != '/')
    fail_one_line(kWho, "cannot run ", python, ": ",
                  WIFEXITED(status) ? cat("exit status ", WEXITSTATUS(status))
                                    : cat("killed by signal ", WTERMSIG(status)),
                  last.empty() ? "" : ": ", shorten(last));
  return found;
}

// True when `path` is `dir` or below it.
bool below(const std::string& path, const std::string& dir) {
  return path == dir || (path.size() > dir.size() && path.compare(0, dir.size(), dir) == 0 &&
                         (dir == "/" || path[dir.size()] == '/'));
}

}  // namespace

const Interpreter& resolve_python(const std::string& python, char* const* envp) {
  static std::mutex mutex;
  static std::map<std::string, Interpreter> known;
  std::lock_guard<std::mutex> lock(mutex);
  auto it = known.find(python);
  if (it == known.end()) it = known.emplace(python, probe_python(python, envp)).first;
  return it->second;
}

RootPlan::RootPlan(const std::string& new_root, const std::string& work_host,
                   const std::string& work_inside, const Interpreter& python)
    : root_(new_root) {
  for (const char* top : {"/usr", "/etc", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"})
    add_host_path(top);
  // The interpreter's directories, as named and resolved, shortest first (a
  // directory covers those below it); none from the places the sandbox
  // replaces.
  std::vector<std::string> dirs = python.dirs;
  dirs.push_back(fs::path(python.executable).parent_path().string());
  std::vector<std::string> all;
  for (const std::string& d : dirs) {
    std::error_code ec;
    all.push_back(fs::path(d).lexically_normal().string());
    const fs::path real = fs::canonical(d, ec);
    if (!ec) all.push_back(real.string());
  }
  std::sort(all.begin(), all.end(), [](const std::string& a, const std::string& b) {
    return a.size() != b.size() ? a.size() < b.size() : a < b;
  });
  for (std::string d : all) {
    while (d.size() > 1 && d.back() == '/') d.pop_back();
    if (d.size() > 1 && d[0] == '/' && !covered(d) && !below(d, "/tmp") && !below(d, "/dev") &&
        !below(d, "/proc") && !below(d, "/sys"))
      add_host_path(d);
  }
  for (const char* dev : {"null", "zero", "random", "urandom"}) {
    const std::string path = cat("/dev/", dev);
    struct stat st;
    if (::stat(path.c_str(), &st) == 0 && S_ISCHR(st.st_mode)) add(MountKind::Device, path, path);
  }
  add(MountKind::Symlink, "/proc/self/fd", "/dev/fd");
  add(MountKind::Symlink, "/proc/self/fd/0", "/dev/stdin");
  add(MountKind::Symlink, "/proc/self/fd/1", "/dev/stdout");
  add(MountKind::Symlink, "/proc/self/fd/2", "/dev/stderr");
  add(MountKind::Proc, "proc", "/proc");
  add(MountKind::Writable, work_host, work_inside);
  for (const Entry& e : entries_)
    ops_.push_back(MountOp{e.kind, e.source.c_str(), e.target.c_str(), e.dir.c_str()});
}

// A symlink stays a symlink (merged /usr; its target is added too when not
// covered), a directory is bound read-only, anything else is left out.
void RootPlan::add_host_path(const std::string& path) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) return;
  if (S_ISLNK(st.st_mode)) {
    std::error_code ec;
    const fs::path link = fs::read_symlink(path, ec);
    if (ec || ::stat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) return;
    add(MountKind::Symlink, link.string(), path);
    const fs::path real = fs::canonical(path, ec);
    if (!ec && !covered(real.string())) add_host_path(real.string());
    return;
  }
  if (S_ISDIR(st.st_mode)) add(MountKind::ReadOnly, path, path);
}

bool RootPlan::covered(const std::string& path) const {
  for (const Entry& e : entries_)
    if (below(path, e.inside)) return true;
  return false;
}

void RootPlan::add(MountKind kind, const std::string& source, const std::string& inside) {
  const std::string target = root_ + inside;
  const bool is_dir =
      kind == MountKind::ReadOnly || kind == MountKind::Writable || kind == MountKind::Proc;
  entries_.push_back(Entry{kind, source, inside, target,
                           is_dir ? target : fs::path(target).parent_path().string()});
}

}  // namespace strata::sandbox_detail
