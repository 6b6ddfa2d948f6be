// Internal to the sandbox: sandbox.cpp runs it, sandbox_host.cpp prepares it
// (the interpreter, the mounts), sandbox_child.cpp is what runs in the forked
// processes between fork() and the program's exec; everything there is
// async-signal-safe (no allocation): the caller may have threads.
//
// The processes, in order:
//   strata
//    └ keeper   (fork) leads its own process group, unshares the namespaces
//               (mount, PID, network, IPC, UTS; with a user namespace when
//               plain unshare is not allowed), forks the init below, reports
//               its pid and waits for it: it ends only after the init and so
//               everything in the PID namespace is gone.
//       └ init  pid 1 of the new PID namespace, its own session: builds the
//               file system (a tmpfs root with read-only binds, pivot_root),
//               forks the program and reaps orphans; when the program ends it
//               reports the program's wait status and rusage and exits, and
//               the kernel kills whatever else is left in the namespace.
//          └ program  leaves root (for the sandbox user below) and drops
//               every capability, sets no_new_privs and the limits, and execs
//               python3.
#pragma once

#include <sys/resource.h>
#include <sys/types.h>
#include <unistd.h>

#include <cstdint>

#include <string>
#include <vector>

namespace strata::sandbox_detail {

// The program's user and group when strata runs as root: an id of its own
// per strata process, kSandboxIds + strata's pid (pids are below 2^22), used
// by nothing else, so that RLIMIT_NPROC (counted per user) counts only this
// sandbox's processes; not nobody, whose count every process of nobody on the
// host and every other sandbox would share. No file outside the program's
// directory belongs to it. Where that id does not exist (root of a user
// namespace that maps only some ids, as in rootless containers): nobody.
constexpr uint32_t kSandboxIds = 0x7fc00000;  // 2^31 - 2^22
constexpr uid_t kNobody = 65534;

// Where the setup failed (the Failed report).
enum class Step : int {
  Stdio = 1,     // redirecting stdin/stdout/stderr
  ProcessGroup,  // setpgid
  Namespaces,    // unshare (err: without, err2: with a user namespace)
  UserMap,       // writing uid_map / setgroups / gid_map
  Mount,         // mounting mounts[index]
  Root,          // building or entering the new root (index: a RootStage)
  Fork,          // fork of the init or the program
  Privileges,    // dropping privileges (index: a PrivilegeStage)
  Limits,        // setrlimit
  Chdir,         // entering the program's directory
  Exec,          // execve of python3
};

enum RootStage : int { kPropagation = 0, kTmpfs, kPivot, kReadOnly };
enum PrivilegeStage : int { kBounding = 0, kUser, kCapabilities, kNoNewPrivs };

// A record on the status pipe, which closes when the program execs.
struct Report {
  enum Kind : int { Started = 1, Failed = 2 };
  Kind kind;
  Step step;
  int err;
  int err2;
  int index;
  pid_t pid;  // Started: the init's pid (in strata's PID namespace)
};

// The init's record on the result pipe when the program has ended.
struct Finished {
  int wait_status;
  struct rusage usage;
};

enum class MountKind : int {
  ReadOnly,  // bind source (recursively), read-only, nosuid, nodev
  Writable,  // bind source (recursively), nosuid, nodev
  Device,    // bind the device node source onto an empty file, nosuid, noexec
  Symlink,   // a symbolic link to `source`
  Proc,      // a proc file system of the new PID namespace (skipped when not allowed)
};

struct MountOp {
  MountKind kind;
  const char* source;
  const char* target;  // the host path below the new root
  const char* dir;     // the directory to create first (target, or its parent)
};

struct ChildPlan {
  pid_t parent;          // strata's pid
  int out_fd;            // write end of the output pipe
  int status_fd;         // write end of the status pipe (close-on-exec)
  int result_fd;         // write end of the result pipe (close-on-exec)
  const char* new_root;  // an empty host directory: the tmpfs root is mounted here
  const MountOp* mounts;
  int mount_count;
  const char* work_dir;  // the program's directory, inside the new root
  const char* python;
  char* const* argv;
  char* const* envp;
  const char* own_uid_map;  // "<uid> <uid> 1\n": the caller's ids, mapped to themselves
  const char* own_gid_map;
  uid_t sandbox_uid;  // root leaves root for these
  gid_t sandbox_gid;
  const char* sandbox_uid_map;  // "<id> <id> 1\n" (root that may not unshare leaves root first)
  const char* sandbox_gid_map;
  rlim_t memory, cpu, file_size, processes;
};

// The keeper: never returns (exits, or execs in the grandchild).
[[noreturn]] void run_keeper(const ChildPlan& plan);

// ------------------------------------------------------------------ sandbox_host.cpp

// The interpreter found on PATH, resolved by asking it once (outside the
// sandbox, with the sandbox's environment): the executable to run inside
// (not a wrapper such as a pyenv shim) and the directories it needs besides
// /usr and /etc (its prefixes, the directories of the files it maps).
struct Interpreter {
  std::string executable;
  std::vector<std::string> dirs;
};

// Resolved once per path (throws strata::Error with one line when it cannot
// be run); `envp` is the environment it runs with.
const Interpreter& resolve_python(const std::string& python, char* const* envp);

// The program's file system, built by the init inside its mount namespace:
// read-only binds of /usr, /etc and the interpreter's directories, the
// merged-/usr symlinks (/bin, /lib, ...), /dev with null, zero, random and
// urandom, /proc of the new PID namespace, and the program's directory (the
// only writable place) at `work_inside`.
class RootPlan {
 public:
  RootPlan(const std::string& new_root, const std::string& work_host,
           const std::string& work_inside, const Interpreter& python);
  RootPlan(const RootPlan&) = delete;
  RootPlan& operator=(const RootPlan&) = delete;

  const MountOp* ops() const { return ops_.data(); }
  int size() const { return static_cast<int>(ops_.size()); }
  // The source of ops()[i] and its path inside the sandbox.
  const std::string& source(int i) const { return entries_.at(static_cast<size_t>(i)).source; }
  const std::string& inside(int i) const { return entries_.at(static_cast<size_t>(i)).inside; }

 private:
  struct Entry {
    MountKind kind;
    std::string source, inside, target, dir;
  };
  void add_host_path(const std::string& path);
  bool covered(const std::string& path) const;
  void add(MountKind kind, const std::string& source, const std::string& inside);

  std::string root_;
  std::vector<Entry> entries_;
  std::vector<MountOp> ops_;
};

}  // namespace strata::sandbox_detail
