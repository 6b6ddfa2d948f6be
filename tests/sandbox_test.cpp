// The Python sandbox for HumanEval: a canonical solution passes, a wrong one
// fails, endless loops and runaway allocations are stopped by the limits, the
// network is unreachable (while the same connect works outside), the
// temporary directory disappears, the environment is empty, floods of output
// are cut off, and a missing python3 is a one-line error.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

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
  // The program gets stdin, stdout and stderr only (3 is listdir's own).
  const SandboxResult r = run_python_sandboxed(
      "import os\nprint(sorted(os.listdir('/proc/self/fd')))\n", small_limits());
  EXPECT_EQ(r.status, SandboxStatus::Passed) << r.output;
  EXPECT_EQ(r.output, "['0', '1', '2', '3']\n");
  EXPECT_EQ(run_python_sandboxed("raise SystemExit(2)\n", small_limits()).status,
            SandboxStatus::Failed);
  SandboxLimits limits = small_limits();
  limits.wall_seconds = 0.5;
  EXPECT_EQ(run_python_sandboxed("while True:\n    pass\n", limits).status, SandboxStatus::Timeout);
  EXPECT_EQ(open_descriptors(), before);
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
