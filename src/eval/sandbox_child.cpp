// The sandbox's forked processes (see sandbox_child.h): only async-signal-safe
// calls, no allocation.
#include "eval/sandbox_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <linux/capability.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>  // the ST_* flags of statfs().f_flags
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

namespace strata::sandbox_detail {

namespace {

// mount_setattr(2) (Linux 5.12), declared here: glibc 2.36's <sys/mount.h>
// and <linux/mount.h> do not mix.
#ifndef SYS_mount_setattr
#define SYS_mount_setattr 442
#endif
struct MountAttr {
  uint64_t attr_set, attr_clr, propagation, userns_fd;
};
constexpr uint64_t kAttrReadOnly = 0x1, kAttrNoSuid = 0x2, kAttrNoDev = 0x4, kAttrNoExec = 0x8;
constexpr unsigned kAtRecursive = 0x8000;

[[noreturn]] void fail(const ChildPlan& p, Step step, int err, int err2 = 0, int index = -1) {
  const Report r{Report::Failed, step, err, err2, index, 0};
  [[maybe_unused]] ssize_t n = ::write(p.status_fd, &r, sizeof r);
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

// Closes every descriptor from 3 up except the (up to) three in keep.
void close_all_but(int a, int b, int c) {
  int keep[3] = {a, b, c};
  std::sort(keep, keep + 3);
  unsigned from = 3;
  bool ok = true;
  for (int k : keep) {
    if (k < static_cast<int>(from)) continue;
    if (static_cast<unsigned>(k) > from) ok = ok && ::close_range(from, k - 1U, 0) == 0;
    from = static_cast<unsigned>(k) + 1;
  }
  ok = ok && ::close_range(from, ~0U, 0) == 0;
  if (ok) return;
  // No close_range (Linux < 5.9): close-on-exec for all; the program still
  // gets none of them.
  struct rlimit nofile;
  const rlim_t top =
      ::getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur < 65536 ? nofile.rlim_cur : 65536;
  for (rlim_t fd = 3; fd < top; ++fd) ::fcntl(static_cast<int>(fd), F_SETFD, FD_CLOEXEC);
}

// Creates the missing directories of the absolute path `path`, leaving its
// first `skip` bytes (the new root, which exists) alone.
bool make_dirs(const char* path, size_t skip) {
  char buf[PATH_MAX];
  const size_t n = std::strlen(path);
  if (n >= sizeof buf) {
    errno = ENAMETOOLONG;
    return false;
  }
  std::memcpy(buf, path, n + 1);
  for (size_t i = skip + 1; i <= n; ++i) {
    if (buf[i] != '/' && buf[i] != '\0') continue;
    const char c = buf[i];
    buf[i] = '\0';
    if (::mkdir(buf, 0755) != 0 && errno != EEXIST) return false;
    buf[i] = c;
  }
  return true;
}

// Sets mount attributes on the mount at `path` and every mount below it.
// Without mount_setattr, a remount of the top mount only, keeping the flags
// the kernel locks in a user namespace.
bool set_attrs(const char* path, uint64_t attrs) {
  MountAttr attr{attrs, 0, 0, 0};
  if (::syscall(SYS_mount_setattr, AT_FDCWD, path, kAtRecursive, &attr, sizeof attr) == 0)
    return true;
  if (errno != ENOSYS && errno != EPERM) return false;
  struct statfs st;
  if (::statfs(path, &st) != 0) return false;
  unsigned long flags = MS_REMOUNT | MS_BIND;
  if (attrs & kAttrReadOnly) flags |= MS_RDONLY;
  if ((attrs & kAttrNoSuid) || (st.f_flags & ST_NOSUID)) flags |= MS_NOSUID;
  if ((attrs & kAttrNoDev) || (st.f_flags & ST_NODEV)) flags |= MS_NODEV;
  if ((attrs & kAttrNoExec) || (st.f_flags & ST_NOEXEC)) flags |= MS_NOEXEC;
  if (st.f_flags & ST_NOATIME) flags |= MS_NOATIME;
  if (st.f_flags & ST_NODIRATIME) flags |= MS_NODIRATIME;
  if (st.f_flags & ST_RELATIME) flags |= MS_RELATIME;
  return ::mount(nullptr, path, nullptr, flags, nullptr) == 0;
}

bool do_mount(const MountOp& m, size_t skip) {
  if (!make_dirs(m.dir, skip)) return false;
  switch (m.kind) {
    case MountKind::ReadOnly:
    case MountKind::Writable:
      return ::mount(m.source, m.target, nullptr, MS_BIND | MS_REC, nullptr) == 0 &&
             set_attrs(m.target, m.kind == MountKind::ReadOnly
                                     ? kAttrReadOnly | kAttrNoSuid | kAttrNoDev
                                     : kAttrNoSuid | kAttrNoDev);
    case MountKind::Device: {
      const int fd = ::open(m.target, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
      if (fd < 0) return false;
      ::close(fd);
      return ::mount(m.source, m.target, nullptr, MS_BIND, nullptr) == 0 &&
             set_attrs(m.target, kAttrNoSuid | kAttrNoExec);
    }
    case MountKind::Symlink:
      return ::symlink(m.source, m.target) == 0;
    case MountKind::Proc:
      // Not allowed in some containers' user namespaces; the program then has no /proc.
      ::mount("proc", m.target, "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr);
      return true;
  }
  return false;
}

// The new root: a tmpfs holding the mounts, made the root, then read-only.
void build_root(const ChildPlan& p) {
  // Nothing done here propagates back to the host's mounts.
  if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0)
    fail(p, Step::Root, errno, 0, kPropagation);
  if (::mount("tmpfs", p.new_root, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=1m") != 0)
    fail(p, Step::Root, errno, 0, kTmpfs);
  const size_t skip = std::strlen(p.new_root);
  for (int i = 0; i < p.mount_count; ++i)
    if (!do_mount(p.mounts[i], skip)) fail(p, Step::Mount, errno, 0, i);

  // pivot_root(".", "."): the old root ends up on top of the new one, and is
  // detached from it. Where the root cannot be pivoted (an initramfs), move
  // the new root over it and chroot.
  if (::chdir(p.new_root) != 0) fail(p, Step::Root, errno, 0, kPivot);
  if (::syscall(SYS_pivot_root, ".", ".") == 0) {
    if (::umount2(".", MNT_DETACH) != 0) fail(p, Step::Root, errno, 0, kPivot);
  } else {
    const int err = errno;
    if (::mount(".", "/", nullptr, MS_MOVE, nullptr) != 0 || ::chroot(".") != 0)
      fail(p, Step::Root, err, errno, kPivot);
  }
  if (::chdir("/") != 0) fail(p, Step::Root, errno, 0, kPivot);
  if (::mount(nullptr, "/", nullptr, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV,
              nullptr) != 0)
    fail(p, Step::Root, errno, 0, kReadOnly);
}

bool leave_root(const ChildPlan& p) {
  const uid_t u = p.sandbox_uid;
  const gid_t g = p.sandbox_gid;
  return ::setgroups(0, nullptr) == 0 && ::setresgid(g, g, g) == 0 && ::setresuid(u, u, u) == 0;
}

[[noreturn]] void run_program(const ChildPlan& p) {
  // No capability can come back: empty the bounding set (needs CAP_SETPCAP,
  // which root and a user namespace's creator have), leave root, clear the
  // remaining sets, and no_new_privs (setuid files and file capabilities do
  // nothing at exec).
  for (int cap = 0; cap < 64; ++cap) {
    if (::prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) == 0) continue;
    if (errno == EINVAL) break;  // past the last capability
    fail(p, Step::Privileges, errno, 0, kBounding);
  }
  if ((::getuid() == 0 || ::geteuid() == 0) && !leave_root(p))
    fail(p, Step::Privileges, errno, 0, kUser);
  if (::getuid() == 0 || ::geteuid() == 0) fail(p, Step::Privileges, EPERM, 0, kUser);
  ::prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);  // EINVAL before Linux 4.3
  struct __user_cap_header_struct header {
    _LINUX_CAPABILITY_VERSION_3, 0
  };
  struct __user_cap_data_struct data[2];
  std::memset(data, 0, sizeof data);
  if (::syscall(SYS_capset, &header, data) != 0) fail(p, Step::Privileges, errno, 0, kCapabilities);
  if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
    fail(p, Step::Privileges, errno, 0, kNoNewPrivs);

  // RLIMIT_NPROC after the uid change: it counts the processes of the new uid.
  if (!set_limit(RLIMIT_AS, p.memory, p.memory) || !set_limit(RLIMIT_CPU, p.cpu, p.cpu + 1) ||
      !set_limit(RLIMIT_FSIZE, p.file_size, p.file_size) || !set_limit(RLIMIT_CORE, 0, 0) ||
      !set_limit(RLIMIT_NOFILE, 64, 64) || !set_limit(RLIMIT_NPROC, p.processes, p.processes))
    fail(p, Step::Limits, errno);

  if (::chdir(p.work_dir) != 0) fail(p, Step::Chdir, errno);
  ::execve(p.python, p.argv, p.envp);
  fail(p, Step::Exec, errno);
}

// pid 1 of the new PID namespace. `lifeline`: the read end of a pipe whose
// write end only the keeper holds.
[[noreturn]] void run_init(const ChildPlan& p, int null_fd, int lifeline) {
  // The keeper gone: the namespace goes too. (Already gone before the prctl:
  // the lifeline has hung up.)
  ::prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
  struct pollfd keeper {
    lifeline, POLLIN, 0
  };
  if (::poll(&keeper, 1, 0) != 0) ::_exit(127);
  ::close(lifeline);
  // Its own session: the program's kill(0, ...) reaches only this group
  // (where pid 1 ignores it), never the keeper's.
  ::setsid();
  build_root(p);

  const pid_t program = ::fork();
  if (program < 0) fail(p, Step::Fork, errno);
  if (program == 0) run_program(p);
  ::close(p.status_fd);
  ::dup2(null_fd, 1);
  ::dup2(null_fd, 2);
  for (;;) {
    int status = 0;
    struct rusage usage;
    std::memset(&usage, 0, sizeof usage);
    const pid_t w = ::wait4(-1, &status, __WALL, &usage);
    if (w == program) {
      const Finished f{status, usage};
      [[maybe_unused]] ssize_t n = ::write(p.result_fd, &f, sizeof f);
      ::_exit(0);  // the kernel kills the rest of the namespace
    }
    if (w < 0 && errno != EINTR) ::_exit(127);
  }
}

}  // namespace

[[noreturn]] void run_keeper(const ChildPlan& p) {
  // Signals: nothing blocked or ignored (strata blocks SIGINT/SIGTERM in all threads).
  sigset_t none;
  ::sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  struct sigaction dfl;
  std::memset(&dfl, 0, sizeof dfl);
  dfl.sa_handler = SIG_DFL;
  for (int s = 1; s < NSIG; ++s) ::sigaction(s, &dfl, nullptr);  // fails harmlessly for some

  // Strata gone (killed): the keeper goes, then the init, then the namespace.
  ::prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
  if (::getppid() != p.parent) ::_exit(127);
  if (::setpgid(0, 0) != 0) fail(p, Step::ProcessGroup, errno);

  // stdin from /dev/null, stdout and stderr into the pipe. Duplicates above 2
  // first, so that dup2() never finds source == target (which would keep
  // close-on-exec set).
  const int null_fd = ::open("/dev/null", O_RDWR | O_CLOEXEC);
  if (null_fd < 0) fail(p, Step::Stdio, errno);
  const int in = ::fcntl(null_fd, F_DUPFD_CLOEXEC, 3);
  const int out = ::fcntl(p.out_fd, F_DUPFD_CLOEXEC, 3);
  if (in < 0 || out < 0 || ::dup2(in, 0) < 0 || ::dup2(out, 1) < 0 || ::dup2(out, 2) < 0)
    fail(p, Step::Stdio, errno);
  // Nothing else strata has open stays open here or reaches the program.
  const int keep_null = ::fcntl(null_fd, F_DUPFD_CLOEXEC, 3);
  if (keep_null < 0) fail(p, Step::Stdio, errno);
  close_all_but(p.status_fd, p.result_fd, keep_null);

  // The namespaces. Root (or CAP_SYS_ADMIN) may unshare them directly;
  // others through a new user namespace that maps their own uid and gid
  // (unprivileged user namespaces). Root without CAP_SYS_ADMIN becomes
  // the sandbox user first, so that root is never mapped into a user namespace.
  constexpr int kNamespaces =
      CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS;
  if (::unshare(kNamespaces) != 0) {
    const int err = errno;
    const bool was_root = ::geteuid() == 0;
    if (was_root && !leave_root(p)) fail(p, Step::Namespaces, err, errno);
    if (::unshare(CLONE_NEWUSER | kNamespaces) != 0) fail(p, Step::Namespaces, err, errno);
    // The uid change made the process undumpable, which makes /proc/self
    // root's: dumpable while writing the maps. setgroups must be denied
    // before gid_map is written.
    if (was_root) ::prctl(PR_SET_DUMPABLE, 1, 0, 0, 0);
    if (!write_proc_file("/proc/self/uid_map", was_root ? p.sandbox_uid_map : p.own_uid_map) ||
        !write_proc_file("/proc/self/setgroups", "deny") ||
        !write_proc_file("/proc/self/gid_map", was_root ? p.sandbox_gid_map : p.own_gid_map))
      fail(p, Step::UserMap, errno);
    if (was_root) ::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
  }

  // The credentials may have changed (which clears the parent-death signal).
  ::prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
  if (::getppid() != p.parent) ::_exit(127);

  int lifeline[2];
  if (::pipe2(lifeline, O_CLOEXEC) != 0) fail(p, Step::Fork, errno);
  const pid_t init = ::fork();
  if (init < 0) fail(p, Step::Fork, errno);
  if (init == 0) {
    ::close(lifeline[1]);
    run_init(p, keep_null, lifeline[0]);
  }
  ::close(lifeline[0]);
  const Report started{Report::Started, Step::Fork, 0, 0, -1, init};
  [[maybe_unused]] ssize_t n = ::write(p.status_fd, &started, sizeof started);
  ::close(p.status_fd);
  ::close(p.result_fd);
  ::dup2(keep_null, 1);
  ::dup2(keep_null, 2);

  // Ends after the init, which ends after everything in its namespace.
  int status = 0;
  while (::waitpid(init, &status, __WALL) < 0)
    if (errno != EINTR) ::_exit(127);
  if (WIFSIGNALED(status)) ::kill(::getpid(), WTERMSIG(status));
  ::_exit(WIFEXITED(status) ? WEXITSTATUS(status) : 127);
}

}  // namespace strata::sandbox_detail
