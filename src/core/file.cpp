#include "core/file.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "core/text.h"

namespace strata {
namespace fs = std::filesystem;

std::string read_file(const std::string& path, const std::string& what) {
  std::error_code ec;
  STRATA_CHECK(fs::exists(path, ec), what, " ", path, ": no such file");
  STRATA_CHECK(!fs::is_directory(path, ec), what, " ", path, ": is a directory, not a file");
  std::ifstream in(path, std::ios::binary);
  STRATA_CHECK(in, what, " ", path, ": cannot open for reading");
  std::ostringstream ss;
  ss << in.rdbuf();
  STRATA_CHECK(!in.bad(), what, " ", path, ": read error");
  return ss.str();
}

namespace {

// Writes all of `bytes` to `fd`; false (errno set) when the file system takes
// no more (a short write that makes no progress counts as ENOSPC).
bool write_all(int fd, const std::string& bytes) {
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      if (n == 0) errno = ENOSPC;
      return false;
    }
    done += size_t(n);
  }
  return true;
}

}  // namespace

void write_file_atomic(const std::string& path, const std::string& bytes) {
  const std::string tmp = path + ".tmp";
  {
    FileDescriptor out{::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)};
    if (out.fd < 0) fail_one_line("cannot write ", shorten(tmp), ": ", std::strerror(errno));
    const bool written = write_all(out.fd, bytes);
    const int err = errno;
    const int closed = ::close(out.fd);  // NFS and quotas report late, here
    const int close_err = errno;
    out.fd = -1;
    if (!written || closed != 0) {
      ::unlink(tmp.c_str());
      fail_one_line("cannot write ", shorten(tmp), ": ", std::strerror(written ? close_err : err));
    }
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) {
    const std::string why = ec.message();
    fs::remove(tmp, ec);
    fail_one_line("cannot rename ", shorten(tmp), " to ", shorten(path), ": ", why);
  }
}

void append_record(const std::string& path, const std::string& bytes, const std::string& what) {
  FileDescriptor out{::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644)};
  if (out.fd < 0) fail_one_line(what, " ", shorten(path), ": cannot open: ", std::strerror(errno));
  struct stat st {};
  if (::fstat(out.fd, &st) != 0)
    fail_one_line(what, " ", shorten(path), ": cannot stat: ", std::strerror(errno));
  if (!write_all(out.fd, bytes)) {
    const int err = errno;
    // Part of the record may be in: cut the file back to what it held.
    if (::ftruncate(out.fd, st.st_size) != 0) {
      // Nothing more to do; a reader skips a torn last line (resume does).
    }
    fail_one_line(what, " ", shorten(path), ": cannot append a record: ", std::strerror(err));
  }
}

DirLock DirLock::acquire(const std::string& dir, const std::string& what) {
  const std::string shown = shorten(dir);
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) fail_one_line(what, " ", shown, ": cannot create the directory: ", ec.message());
  const std::string path = dir + "/.lock";
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0)
    fail_one_line(what, " ", shown, ": cannot create ", shorten(path), ": ", std::strerror(errno));
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    char buf[32] = {};
    const ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
    ::close(fd);
    if (err == EWOULDBLOCK) {
      std::string pid = n > 0 ? std::string(buf, size_t(n)) : std::string("unknown");
      while (!pid.empty() && (pid.back() == '\n' || pid.back() == ' ')) pid.pop_back();
      fail_one_line(what, " ", shown, " is in use by another process (pid ", pid,
                    "): wait for it to end, or use another directory");
    }
    if (err != ENOLCK && err != ENOSYS && err != EOPNOTSUPP)
      fail_one_line(what, " ", shown, ": cannot lock ", shorten(path), ": ", std::strerror(err));
    return DirLock();  // a file system without locks: nothing to hold
  }
  const std::string pid = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, pid.data(), pid.size(), 0) < 0) {
    // The lock holds without the PID; the PID only helps the message.
  }
  return DirLock(fd);
}

DirLock& DirLock::operator=(DirLock&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = o.fd_;
    o.fd_ = -1;
  }
  return *this;
}

DirLock::~DirLock() {
  if (fd_ >= 0) ::close(fd_);  // the kernel drops the lock
}

FileDescriptor::~FileDescriptor() {
  if (fd >= 0) ::close(fd);
}

void fsync_directory(const std::string& dir, const std::string& prefix) {
  FileDescriptor d{::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC)};
  if (d.fd < 0) return;  // cannot open the directory for syncing: nothing more to do
  // EINVAL: the file system does not support syncing directories.
  if (::fsync(d.fd) != 0 && errno != EINVAL && errno != EROFS)
    fail(cat(prefix, "cannot sync directory ", dir, ": ", std::strerror(errno)));
}

std::string read_text_sample(const std::string& path, int64_t limit_bytes) {
  std::string text = read_file(path, "text");
  if (limit_bytes > 0 && int64_t(text.size()) > limit_bytes) {
    const size_t cut = text.find_last_of(" \n", size_t(limit_bytes));
    text.resize(cut == std::string::npos || cut == 0 ? size_t(limit_bytes) : cut);
  }
  STRATA_CHECK(!text.empty(), path, ": is empty");
  return text;
}

}  // namespace strata
