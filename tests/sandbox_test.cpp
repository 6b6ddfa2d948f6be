// The Python sandbox for HumanEval: a canonical solution passes, a wrong one
// fails, endless loops and runaway allocations are stopped by the limits, the
// network is unreachable (while the same connect works outside), the
// temporary directory disappears, the environment is empty, floods of output
// are cut off, and a missing python3 is a one-line error. And the escapes the
// reliability probe found fail: a daemon (fork, setsid, fork) is dead when the
// call returns, host AF_UNIX sockets are unreachable, forks are limited, the
// program cannot signal the caller (its parent, kill(-1)), runs without root
// and capabilities (root-only files unreadable), and can write nowhere but its
// own directory.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "eval/sandbox.h"

namespace strata {
namespace {

namespace fs = std::filesystem;

SandboxLimits small_limits() {
  SandboxLimits limits;
  limits.wall_seconds = 3.0;
  limits.cpu_seconds = 3.0;
  limits.memory_bytes = int64_t{256} << 20;
  limits.output_bytes = 64 << 10;
  return limits;
}

// HumanEval/0 from the shipped benchmark file.
nlohmann::json first_humaneval_problem() {
  std::ifstream in(STRATA_SOURCE_DIR "/data/benchmarks/humaneval/HumanEval.jsonl");
  EXPECT_TRUE(in.good());
  std::string line;
  std::getline(in, line);
  nlohmann::json problem = nlohmann::json::parse(line);
  EXPECT_EQ(problem.at("task_id"), "HumanEval/0");
  return problem;
}

std::string program_with(const nlohmann::json& p, const std::string& completion) {
  return humaneval_program(p.at("prompt").get<std::string>(), completion,
                           p.at("test").get<std::string>(), p.at("entry_point").get<std::string>());
}

TEST(Sandbox, ProgramAndNames) {
  EXPECT_EQ(
      humaneval_program("def f():\n", "    return 1\n", "def check(c):\n    assert c() == 1", "f"),
      "def f():\n    return 1\n\ndef check(c):\n    assert c() == 1\ncheck(f)\n");
  EXPECT_STREQ(sandbox_status_name(SandboxStatus::Passed), "passed");
  EXPECT_STREQ(sandbox_status_name(SandboxStatus::Failed), "failed");
  EXPECT_STREQ(sandbox_status_name(SandboxStatus::Timeout), "timeout");
  EXPECT_STREQ(sandbox_status_name(SandboxStatus::OutOfMemory), "out of memory");
  EXPECT_STREQ(sandbox_status_name(SandboxStatus::Crashed), "crashed");
}

TEST(Sandbox, CanonicalSolutionPasses) {
  const nlohmann::json p = first_humaneval_problem();
  const SandboxResult r =
      run_python_sandboxed(program_with(p, p.at("canonical_solution")), small_limits());
  EXPECT_EQ(r.status, SandboxStatus::Passed) << r.output;
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.signal, 0);
  EXPECT_EQ(r.output, "");
  EXPECT_LT(r.seconds, 3.0);
}

TEST(Sandbox, WrongCompletionFails) {
  const nlohmann::json p = first_humaneval_problem();
  const SandboxResult r =
      run_python_sandboxed(program_with(p, "    return False\n"), small_limits());
  EXPECT_EQ(r.status, SandboxStatus::Failed);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.signal, 0);
  EXPECT_NE(r.output.find("AssertionError"), std::string::npos) << r.output;
}

TEST(Sandbox, EndlessLoopTimesOut) {
  const nlohmann::json p = first_humaneval_problem();
  SandboxLimits limits = small_limits();
  limits.wall_seconds = 1.5;
  limits.cpu_seconds = 10.0;  // the wall clock ends it
  const auto start = std::chrono::steady_clock::now();
  const SandboxResult r =
      run_python_sandboxed(program_with(p, "    while True:\n        pass\n"), limits);
  const double took =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(r.status, SandboxStatus::Timeout);
  EXPECT_EQ(r.signal, SIGKILL);
  EXPECT_GE(r.seconds, 1.5);
  EXPECT_LT(took, 1.5 + 2.0);
}

TEST(Sandbox, CpuLimitIsATimeout) {
  SandboxLimits limits = small_limits();
  limits.cpu_seconds = 1.0;    // SIGXCPU after one second of CPU,
  limits.wall_seconds = 20.0;  // long before the wall clock, even on a busy machine
  const SandboxResult r = run_python_sandboxed("while True:\n    pass\n", limits);
  EXPECT_EQ(r.status, SandboxStatus::Timeout);
  EXPECT_EQ(r.signal, SIGXCPU);
  EXPECT_LT(r.seconds, 20.0);
}

TEST(Sandbox, RunawayAllocationIsOutOfMemory) {
  const nlohmann::json p = first_humaneval_problem();
  const SandboxResult r = run_python_sandboxed(
      program_with(p, "    x = []\n    while True:\n        x.append(bytearray(10**7))\n"),
      small_limits());
  EXPECT_EQ(r.status, SandboxStatus::OutOfMemory) << r.output;
  EXPECT_NE(r.output.find("MemoryError"), std::string::npos) << r.output;
  EXPECT_LT(r.seconds, 3.0);  // well before the wall clock
}

TEST(Sandbox, NoNetwork) {
  // A listening socket in this process; connections complete in the kernel's
  // backlog without accept().
  const int listener = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(listener, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  ASSERT_EQ(::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(::listen(listener, 8), 0);
  socklen_t len = sizeof addr;
  ASSERT_EQ(::getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  const int port = ntohs(addr.sin_port);

  // Exit 0 only when the connection succeeds.
  const std::string program =
      "import socket, sys\n"
      "try:\n"
      "    socket.create_connection(('127.0.0.1', " +
      std::to_string(port) +
      "), timeout=1).close()\n"
      "except OSError as e:\n"
      "    print('no connection:', e)\n"
      "    sys.exit(5)\n"
      "print('connected')\n";

  // Control: the same program outside the sandbox connects, and so does this process.
  const fs::path script = fs::temp_directory_path() / ("strata_net_" + std::to_string(::getpid()));
  {
    std::ofstream out(script);
    out << program;
  }
  const int outside = std::system(("python3 " + script.string() + " > /dev/null").c_str());
  fs::remove(script);
  ASSERT_TRUE(WIFEXITED(outside));
  EXPECT_EQ(WEXITSTATUS(outside), 0) << "the control connection outside the sandbox failed";
  const int client = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(client, 0);
  EXPECT_EQ(::connect(client, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ::close(client);

  const SandboxResult r = run_python_sandboxed(program, small_limits());
  ::close(listener);
  EXPECT_EQ(r.status, SandboxStatus::Failed) << r.output;
  EXPECT_EQ(r.exit_code, 5) << r.output;
  EXPECT_NE(r.output.find("no connection:"), std::string::npos) << r.output;
}

TEST(Sandbox, TemporaryDirectoryIsRemoved) {
  const SandboxResult r = run_python_sandboxed(
      "import os\n"
      "open('leak.txt', 'w').write('secret')\n"
      "os.makedirs('sub/deeper')\n"
      "open('sub/deeper/f', 'w').write('x')\n"
      "os.chmod('sub', 0o500)\n"  // not writable: removal must still work
      "print(os.getcwd())\n"
      "print(os.path.abspath('leak.txt'))\n"
      "print(sorted(os.listdir('.')))\n",
      small_limits());
  ASSERT_EQ(r.status, SandboxStatus::Passed) << r.output;
  std::istringstream lines(r.output);
  std::string cwd, file, listing;
  std::getline(lines, cwd);
  std::getline(lines, file);
  std::getline(lines, listing);
  EXPECT_NE(cwd.find("strata-sandbox-"), std::string::npos) << cwd;
  EXPECT_NE(fs::path(cwd), fs::current_path());
  EXPECT_EQ(file, cwd + "/leak.txt");
  EXPECT_EQ(listing, "['leak.txt', 'main.py', 'sub']");
  EXPECT_FALSE(fs::exists(cwd)) << cwd;
  EXPECT_FALSE(fs::exists(file)) << file;
  EXPECT_FALSE(fs::exists(fs::current_path() / "leak.txt"));
}

TEST(Sandbox, EnvironmentIsEmpty) {
  const char* home = ::getenv("HOME");
  const std::string saved_home = home != nullptr ? home : "";
  ASSERT_EQ(::setenv("STRATA_SECRET", "hunter2", 1), 0);
  ASSERT_EQ(::setenv("HOME", "/home/somebody", 1), 0);
  const SandboxResult r = run_python_sandboxed(
      "import os, sys\n"
      "print(os.environ.get('STRATA_SECRET'), os.environ.get('HOME'), os.environ.get('LANG'))\n"
      "print(sys.stdin.read() == '')\n",
      small_limits());
  ::unsetenv("STRATA_SECRET");
  if (home != nullptr)
    ::setenv("HOME", saved_home.c_str(), 1);
  else
    ::unsetenv("HOME");
  EXPECT_EQ(r.status, SandboxStatus::Passed) << r.output;
  EXPECT_EQ(r.output, "None None C.UTF-8\nTrue\n");
}

TEST(Sandbox, HugeOutputIsTruncated) {
  SandboxLimits limits = small_limits();
  limits.output_bytes = 1000;
  const SandboxResult r = run_python_sandboxed(
      "import sys\n"
      "sys.stdout.write('x' * 10_000_000)\n"
      "sys.stdout.flush()\n"
      "sys.stderr.write('done')\n",
      limits);
  EXPECT_EQ(r.status, SandboxStatus::Passed);
  EXPECT_EQ(r.output, std::string(1000, 'x'));
  EXPECT_LT(r.seconds, 3.0);  // well before the wall clock
}

TEST(Sandbox, FilesAreLimitedToo) {
  SandboxLimits limits = small_limits();
  limits.output_bytes = 1000;  // also the largest file the program may write
  const SandboxResult r = run_python_sandboxed(
      "try:\n"
      "    with open('big', 'w') as f:\n"
      "        f.write('y' * 5000)\n"
      "except OSError as e:\n"
      "    print(e.strerror)\n"
      "    raise SystemExit(4)\n",
      limits);
  EXPECT_EQ(r.status, SandboxStatus::Failed) << r.output;
  EXPECT_EQ(r.exit_code, 4) << r.output;
  EXPECT_EQ(r.output, "File too large\n");
}

size_t open_descriptors() {
  size_t n = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator("/proc/self/fd")) ++n;
  return n;
}

TEST(Sandbox, NoDescriptorsLeak) {
  const size_t before = open_descriptors();
  // The program gets stdin, stdout and stderr only.
  const SandboxResult r = run_python_sandboxed(
      "import os\n"
      "fds = []\n"
      "for fd in range(1024):\n"
      "    try:\n"
      "        os.fstat(fd)\n"
      "        fds.append(fd)\n"
      "    except OSError:\n"
      "        pass\n"
      "print(fds)\n",
      small_limits());
  EXPECT_EQ(r.status, SandboxStatus::Passed) << r.output;
  EXPECT_EQ(r.output, "[0, 1, 2]\n");
  EXPECT_EQ(run_python_sandboxed("raise SystemExit(2)\n", small_limits()).status,
            SandboxStatus::Failed);
  SandboxLimits limits = small_limits();
  limits.wall_seconds = 0.5;
  EXPECT_EQ(run_python_sandboxed("while True:\n    pass\n", limits).status, SandboxStatus::Timeout);
  EXPECT_EQ(open_descriptors(), before);
}

// ------------------------------------------------------------------ escapes

// Runs `f` when it goes out of scope (cleanup that a thrown Error does not skip).
template <typename F>
struct AtExit {
  F f;
  ~AtExit() { f(); }
};
template <typename F>
AtExit(F) -> AtExit<F>;

// Python's repr of a string (for paths put into programs).
std::string py_str(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\\' || c == '\'') out += '\\';
    out += c;
  }
  return out + "'";
}

// The pids of the processes whose command line contains `marker`.
std::vector<int> processes_with(const std::string& marker) {
  std::vector<int> pids;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator("/proc", ec)) {
    const std::string name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream in(e.path() / "cmdline", std::ios::binary);
    const std::string cmdline((std::istreambuf_iterator<char>(in)),
                              std::istreambuf_iterator<char>());
    if (cmdline.find(marker) != std::string::npos) pids.push_back(std::stoi(name));
  }
  return pids;
}

TEST(Sandbox, DaemonDiesWithTheProgram) {
  // fork, setsid, fork: a daemon outside the program's process group, with a
  // marker on its command line, that touches a file every 50 ms.
  const std::string marker = "strata-sandbox-daemon-" + std::to_string(::getpid());
  const std::string program =
      "import os, sys, time\n"
      "pid = os.fork()\n"
      "if pid == 0:\n"
      "    os.setsid()\n"
      "    if os.fork() == 0:\n"
      "        os.execv(sys.executable, [sys.executable, '-c',\n"
      "            'import time\\nwhile True:\\n    open(\"up\", \"w\").close()\\n"
      "    time.sleep(0.05)\\n', " +
      py_str(marker) +
      "])\n"
      "    os._exit(0)\n"
      "os.waitpid(pid, 0)\n"
      "for _ in range(200):\n"
      "    if os.path.exists('up'):\n"
      "        break\n"
      "    time.sleep(0.01)\n"
      "print('daemon up' if os.path.exists('up') else 'no daemon')\n";
  const SandboxResult r = run_python_sandboxed(program, small_limits());
  const std::vector<int> left = processes_with(marker);
  for (int pid : left) ::kill(pid, SIGKILL);  // (only when the sandbox failed)
  EXPECT_EQ(r.status, SandboxStatus::Passed) << r.output;
  EXPECT_EQ(r.output, "daemon up\n");
  EXPECT_TRUE(left.empty()) << left.size() << " daemon(s) outlived the program";
}

// A listening AF_UNIX socket bound to `address` (the path, or with a leading
// NUL an abstract name); -1 on failure.
int unix_listener(const std::string& address) {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (fd < 0 || address.size() >= sizeof addr.sun_path) return -1;
  std::memcpy(addr.sun_path, address.data(), address.size());
  const socklen_t len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + address.size());
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), len) != 0 || ::listen(fd, 8) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

bool unix_connects(const std::string& address) {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, address.data(), address.size());
  const socklen_t len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + address.size());
  const bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), len) == 0;
  ::close(fd);
  return ok;
}

TEST(Sandbox, NoHostUnixSockets) {
  const std::string tag = "strata_sock_" + std::to_string(::getpid());
  std::vector<std::string> paths = {"/tmp/" + tag};
  if (fs::temp_directory_path() != "/tmp")
    paths.push_back((fs::temp_directory_path() / tag).string());
  std::vector<int> listeners;
  const AtExit cleanup{[&] {
    for (int fd : listeners) ::close(fd);
    for (const std::string& path : paths) fs::remove(path);
  }};
  for (const std::string& path : paths) {
    fs::remove(path);
    listeners.push_back(unix_listener(path));
    ASSERT_GE(listeners.back(), 0) << path;
    ::chmod(path.c_str(), 0777);  // anybody may connect (nobody too)
    EXPECT_TRUE(unix_connects(path)) << "the control connection to " << path << " failed";
  }
  const std::string abstract = std::string(1, '\0') + tag;
  listeners.push_back(unix_listener(abstract));
  ASSERT_GE(listeners.back(), 0);
  EXPECT_TRUE(unix_connects(abstract)) << "the control connection to @" << tag << " failed";

  std::string names;
  for (const std::string& path : paths) names += py_str(path) + ", ";
  const SandboxResult r = run_python_sandboxed(
      "import socket, sys\n"
      "connected = []\n"
      "for name in [" +
          names + "'\\x00' + " + py_str(tag) +
          "]:\n"
          "    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)\n"
          "    s.settimeout(1)\n"
          "    try:\n"
          "        s.connect(name)\n"
          "        connected.append(name)\n"
          "    except OSError:\n"
          "        pass\n"
          "print('connected:', connected)\n",
      small_limits());
  EXPECT_EQ(r.status, SandboxStatus::Passed) << r.output;
  EXPECT_EQ(r.output, "connected: []\n");
}

TEST(Sandbox, ProcessesAreLimited) {
  // 60 forks, each child sleeping: the process limit stops them well before.
  const SandboxResult r = run_python_sandboxed(
      "import os, time\n"
      "n = 0\n"
      "try:\n"
      "    for _ in range(60):\n"
      "        if os.fork() == 0:\n"
      "            time.sleep(3)\n"
      "            os._exit(0)\n"
      "        n += 1\n"
      "except OSError as e:\n"
      "    print('fork failed:', type(e).__name__)\n"
      "print('forks:', n)\n",
      small_limits());
  EXPECT_EQ(r.status, SandboxStatus::Passed) << r.output;
  EXPECT_NE(r.output.find("fork failed: BlockingIOError"), std::string::npos) << r.output;
  const size_t at = r.output.find("forks: ");
  ASSERT_NE(at, std::string::npos) << r.output;
  EXPECT_LT(std::stoi(r.output.substr(at + 7)), 40) << r.output;
  EXPECT_LT(r.seconds, 2.5);  // the sleeping children do not hold it up
}

// Runs `program` in the sandbox in a forked copy of this process (a gtest
// death test), which exits 0 when the program passed with `output`: a program
// that kills its caller fails the test without ending the test binary.
void expect_caller_survives(const std::string& program, const std::string& output) {
  EXPECT_EXIT(
      {
        const SandboxResult r = run_python_sandboxed(program, small_limits());
        std::fprintf(stderr, "%s: %s", sandbox_status_name(r.status), r.output.c_str());
        std::_Exit(r.status == SandboxStatus::Passed && r.output == output ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
}

TEST(Sandbox, CannotKillItsParent) {
  expect_caller_survives(
      "import os, signal\n"
      "try:\n"
      "    os.kill(os.getppid(), signal.SIGKILL)\n"
      "except OSError:\n"
      "    pass\n"
      "print('alive')\n",
      "alive\n");
}

TEST(Sandbox, KillAllReachesOnlyTheSandbox) {
  // kill(-1) signals every process the program may signal: here its own
  // child. Guarded: it runs only inside a PID namespace (pid 1 is the
  // sandbox's init), never where it could reach the whole machine.
  expect_caller_survives(
      "import os, signal, sys, time\n"
      "if os.getppid() != 1 or os.getpid() > 16:\n"
      "    print('not in a PID namespace')\n"
      "    sys.exit(3)\n"
      "child = os.fork()\n"
      "if child == 0:\n"
      "    time.sleep(10)\n"
      "    os._exit(0)\n"
      "os.kill(-1, signal.SIGKILL)\n"
      "_, status = os.waitpid(child, 0)\n"
      "print('alive, child killed by', os.WTERMSIG(status))\n",
      "alive, child killed by 9\n");
}

TEST(Sandbox, RunsWithoutPrivileges) {
  // A file only its owner may read, where the program could find it if it
  // could see the host; and /etc/shadow, which it sees.
  const fs::path dir = fs::temp_directory_path() / ("strata_secret_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const AtExit cleanup{[&] { fs::remove_all(dir); }};
  const fs::path secret = dir / "secret";
  {
    std::ofstream out(secret);
    out << "hunter2\n";
  }
  fs::permissions(secret, fs::perms::owner_read | fs::perms::owner_write);
  std::string reads = py_str(secret.string());
  if (::geteuid() == 0 && fs::exists("/etc/shadow")) reads += ", '/etc/shadow'";
  const SandboxResult r = run_python_sandboxed(
      "import os\n"
      "bad = []\n"
      "for path in [" +
          reads +
          "]:\n"
          "    try:\n"
          "        open(path).read()\n"
          "        bad.append('read ' + path)\n"
          "    except OSError:\n"
          "        pass\n"
          "for name, call in [('setuid', lambda: os.setuid(0)), ('chroot', lambda: "
          "os.chroot('.')),\n"
          "                   ('chown', lambda: os.chown('main.py', 0, 0))]:\n"
          "    try:\n"
          "        call()\n"
          "        bad.append(name)\n"
          "    except OSError:\n"
          "        pass\n"
          "if os.path.exists('/proc/self/status'):\n"
          "    for line in open('/proc/self/status'):\n"
          "        key, value = line.split(':', 1)\n"
          "        if key.startswith('Cap') and int(value, 16) != 0:\n"
          "            bad.append(line.strip())\n"
          "        if key == 'NoNewPrivs' and value.strip() != '1':\n"
          "            bad.append(line.strip())\n"
          "ids = [os.getuid(), os.geteuid(), os.getgid(), os.getegid()]\n"
          "print('root:', 0 in ids, 'groups:', os.getgroups())\n"
          "print('bad:', bad)\n",
      small_limits());
  EXPECT_EQ(r.status, SandboxStatus::Passed) << r.output;
  EXPECT_NE(r.output.find("bad: []\n"), std::string::npos) << r.output;
  // Root leaves root and its groups (others keep their own ids).
  if (::geteuid() == 0) {
    EXPECT_EQ(r.output.rfind("root: False groups: []\n", 0), 0u) << r.output;
  }
}

TEST(Sandbox, WritesOnlyItsOwnDirectory) {
  // A directory anybody may write to, and places only root may.
  const std::string tag = std::to_string(::getpid());
  const std::string name = "strata_outside_" + tag;
  const fs::path open_dir = fs::temp_directory_path() / ("strata_open_" + tag);
  fs::create_directories(open_dir);
  const AtExit cleanup{[&] { fs::remove_all(open_dir); }};
  fs::permissions(open_dir, fs::perms::all);
  const std::vector<std::string> targets = {(open_dir / name).string(),
                                            "/tmp/" + name,
                                            "/etc/" + name,
                                            "/usr/" + name,
                                            "/" + name,
                                            "/dev/" + name};
  std::string names;
  for (const std::string& t : targets) names += py_str(t) + ", ";
  const SandboxResult r = run_python_sandboxed(
      "import os\n"
      "written = []\n"
      "for path in [" +
          names + "os.path.dirname(os.getcwd()) + '/' + " + py_str(name) +
          "]:\n"
          "    try:\n"
          "        open(path, 'w').write('x')\n"
          "        written.append(path)\n"
          "    except OSError:\n"
          "        pass\n"
          "open('mine', 'w').write('x')\n"  // its own directory stays writable
          "print('written:', written)\n",
      small_limits());
  std::vector<std::string> left;
  for (const std::string& t : targets)
    if (fs::exists(t)) left.push_back(t);
  for (const std::string& t : targets) fs::remove(t);
  EXPECT_EQ(r.status, SandboxStatus::Passed) << r.output;
  EXPECT_EQ(r.output, "written: []\n");
  EXPECT_TRUE(left.empty()) << left.front();
}

TEST(Sandbox, SeesAMinimalFileSystem) {
  const SandboxResult r = run_python_sandboxed(
      "import os\n"
      "top = os.listdir('/')\n"
      "print([d for d in ('run', 'var', 'sys', 'home', 'mnt', 'srv') if d in top])\n"
      "print(os.listdir('/tmp') == [os.path.basename(os.getcwd())])\n"
      "print(sorted(os.listdir('/dev')))\n",
      small_limits());
  EXPECT_EQ(r.status, SandboxStatus::Passed) << r.output;
  EXPECT_EQ(r.output,
            "[]\nTrue\n['fd', 'null', 'random', 'stderr', 'stdin', 'stdout', 'urandom', 'zero']\n");
}

// A seccomp filter under which unshare() fails with EPERM (for this process
// and its children): neither kind of isolation is available.
bool forbid_unshare() {
  struct sock_filter filter[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_unshare, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  struct sock_fprog program = {static_cast<unsigned short>(sizeof filter / sizeof filter[0]),
                               filter};
  return ::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0 &&
         ::prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &program) == 0;
}

TEST(Sandbox, RefusesWithoutIsolation) {
  // In a forked copy of this process (the filter stays there).
  EXPECT_EXIT(
      {
        if (!forbid_unshare()) std::_Exit(2);
        std::string message;
        try {
          run_python_sandboxed("print(1)\n", small_limits());
        } catch (const Error& e) {
          message = e.what();
        }
        std::fprintf(stderr, "%s\n", message.c_str());
        std::_Exit(message.rfind("HumanEval sandbox: cannot isolate the program (", 0) == 0 &&
                           message.find('\n') == std::string::npos
                       ? 0
                       : 1);
      },
      ::testing::ExitedWithCode(0), "");
}

TEST(Sandbox, MissingPythonIsAOneLineError) {
  const char* old = ::getenv("PATH");
  const std::string saved = old != nullptr ? old : "";
  ::setenv("PATH", "/nonexistent-strata-dir", 1);
  std::string message;
  try {
    run_python_sandboxed("print(1)\n", small_limits());
  } catch (const Error& e) {
    message = e.what();
  }
  ::setenv("PATH", saved.c_str(), 1);
  EXPECT_EQ(message, "HumanEval sandbox: python3 not found on PATH (install python3)");
}

}  // namespace
}  // namespace strata
