#include "core/file.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "core/memory_info.h"
#include "core/text.h"

namespace strata {
namespace fs = std::filesystem;

namespace {

// The most bytes read_file holds: STRATA_MAX_INPUT_BYTES, or half of the
// memory this process may still allocate (at least 64 MiB).
int64_t max_input_bytes(std::string* why) {
  if (const char* env = std::getenv("STRATA_MAX_INPUT_BYTES"); env && *env) {
    *why = "STRATA_MAX_INPUT_BYTES";
    return parse_bytes(env, "STRATA_MAX_INPUT_BYTES");
  }
  const MemoryLimit m = host_memory_available();
  *why = "half of the memory available, " + m.source + "; STRATA_MAX_INPUT_BYTES sets it";
  return m.bytes > 0 ? std::max<int64_t>(m.bytes / 2, int64_t(64) << 20) : int64_t(16) << 30;
}

[[noreturn]] void too_big(const std::string& what, const std::string& path, const char* size,
                          int64_t limit, const std::string& why) {
  fail_one_line(what, " ", shorten(path), ": ", size, " more than strata reads into memory (",
                human_bytes(double(limit)), ": ", why, "); split it into smaller files");
}

}  // namespace

std::string read_file(const std::string& path, const std::string& what) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT || errno == ENOTDIR) fail_one_line(what, " ", shorten(path), ": no such file");
    fail_one_line(what, " ", shorten(path), ": ", std::strerror(errno));
  }
  STRATA_CHECK(!S_ISDIR(st.st_mode), what, " ", shorten(path), ": is a directory, not a file");
  STRATA_CHECK(!S_ISCHR(st.st_mode) && !S_ISBLK(st.st_mode), what, " ", shorten(path),
               ": is a device, not a file");
  STRATA_CHECK(!S_ISSOCK(st.st_mode), what, " ", shorten(path), ": is a socket, not a file");
  const Activity activity(cat("reading ", what, " ", shorten(path)));
  std::string why;
  const char* env = std::getenv("STRATA_MAX_INPUT_BYTES");
  int64_t limit = -1;  // set when it can matter: a given limit, or past 64 MiB
  if (env && *env) limit = max_input_bytes(&why);
  if (S_ISREG(st.st_mode) && (limit >= 0 || st.st_size > (int64_t(64) << 20))) {
    if (limit < 0) limit = max_input_bytes(&why);
    if (st.st_size > limit)
      too_big(what, path, ("is " + human_bytes(double(st.st_size)) + ",").c_str(), limit, why);
  }
  FileDescriptor in{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (in.fd < 0)
    fail_one_line(what, " ", shorten(path), ": cannot open for reading: ", std::strerror(errno));
  std::string text;
  if (S_ISREG(st.st_mode)) text.reserve(size_t(st.st_size));
  char buf[1 << 16];
  while (true) {
    const ssize_t n = ::read(in.fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail_one_line(what, " ", shorten(path), ": read error: ", std::strerror(errno));
    if (n == 0) break;
    text.append(buf, size_t(n));
    // A pipe, or a file that grows, is bounded as it streams.
    if (limit < 0 && int64_t(text.size()) > (int64_t(64) << 20)) limit = max_input_bytes(&why);
    if (limit >= 0 && int64_t(text.size()) > limit) too_big(what, path, "gives", limit, why);
  }
  return text;
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
    // A cut inside a UTF-8 sequence: drop the sequence's first bytes too.
    const size_t end = text.size();
    size_t back = 0;  // continuation bytes at the end
    while (back < 3 && end > back && (uint8_t(text[end - 1 - back]) & 0xC0) == 0x80) ++back;
    if (end > back) {
      const uint8_t lead = uint8_t(text[end - 1 - back]);
      const size_t need = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
      if (lead >= 0xC0 && need > back + 1) text.resize(end - 1 - back);
    }
  }
  STRATA_CHECK(!text.empty(), path, ": is empty");
  require_text(text, path);  // a scan of binary data measures nothing
  return text;
}

namespace {

// A file's identity: the same file reached by any path has the same one.
struct FileId {
  dev_t dev = 0;
  ino_t ino = 0;
  bool operator==(const FileId&) const = default;
};

bool file_id(const fs::path& path, FileId* id) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return false;
  *id = {st.st_dev, st.st_ino};
  return true;
}

// The identities of `path` (when it exists) and of every existing folder
// above it, nearest first; `self` says whether the first one is path's own.
std::vector<FileId> id_chain(const std::string& path, bool* self) {
  std::error_code ec;
  fs::path p = fs::weakly_canonical(fs::absolute(path, ec), ec);
  if (ec) p = fs::absolute(path, ec).lexically_normal();
  std::vector<FileId> chain;
  *self = false;
  for (bool first = true;; first = false) {
    FileId id;
    if (file_id(p, &id)) {
      if (first) *self = true;
      chain.push_back(id);
    }
    if (!p.has_relative_path()) break;
    p = p.parent_path();
  }
  return chain;
}

// The nearest existing folder at or above `path`, or "" when none.
fs::path existing_ancestor(const std::string& path) {
  std::error_code ec;
  fs::path p = fs::absolute(path, ec).lexically_normal();
  while (!fs::exists(p, ec)) {
    if (!p.has_relative_path()) return {};
    p = p.parent_path();
  }
  return p;
}

// Creates and removes a file in `folder`: access() says yes to root on
// /proc and on some read-only mounts, an actual create does not.
void probe_write(const fs::path& folder, const std::string& what) {
  const fs::path probe = folder / cat(".strata-probe-", ::getpid());
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0 && errno == EEXIST) return;
  if (fd < 0)
    fail_one_line(what, ": cannot create files in ", shorten(folder.string()), ": ",
                  std::strerror(errno));
  ::close(fd);
  ::unlink(probe.c_str());
}

}  // namespace

void check_output_file(const std::string& path, const std::string& what, bool creates_folder) {
  STRATA_CHECK(!path.empty(), what, ": the output path is empty");
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  STRATA_CHECK(st.type() != fs::file_type::directory, what, ": ", shorten(path),
               ": is a directory (give a file name)");
  if (fs::exists(st))
    STRATA_CHECK(fs::is_regular_file(st), what, ": ", shorten(path),
                 ": exists and is not a regular file");
  fs::path folder = fs::absolute(path, ec).parent_path();
  if (creates_folder && !fs::exists(folder, ec)) {
    check_output_dir(folder.string(), what);
    return;
  }
  STRATA_CHECK(fs::is_directory(folder, ec), what, ": ", shorten(path), ": its folder ",
               shorten(folder.string()), " does not exist");
  STRATA_CHECK(::access(folder.c_str(), W_OK) == 0, what, ": ", shorten(path), ": its folder ",
               shorten(folder.string()), " is not writable: ", std::strerror(errno));
  if (fs::exists(st))
    STRATA_CHECK(::access(path.c_str(), W_OK) == 0, what, ": ", shorten(path),
                 ": is not writable: ", std::strerror(errno));
  probe_write(folder, what + ": " + shorten(path));
}

void check_output_dir(const std::string& path, const std::string& what) {
  STRATA_CHECK(!path.empty(), what, ": the output folder is empty");
  std::error_code ec;
  if (fs::exists(path, ec))
    STRATA_CHECK(fs::is_directory(path, ec), what, ": ", shorten(path),
                 ": exists and is not a directory");
  const fs::path base = existing_ancestor(path);
  STRATA_CHECK(!base.empty() && fs::is_directory(base, ec), what, ": ", shorten(path), ": ",
               shorten(base.string()), " is not a directory");
  STRATA_CHECK(::access(base.c_str(), W_OK) == 0, what, ": ", shorten(path), ": ",
               shorten(base.string()), " is not writable: ", std::strerror(errno));
  probe_write(base, what + ": " + shorten(path));
}

void check_output_not_input(const std::string& output, const std::vector<std::string>& inputs,
                            const std::string& what) {
  bool out_exists = false;
  const std::vector<FileId> out_chain = id_chain(output, &out_exists);
  for (const std::string& input : inputs) {
    if (input.empty()) continue;
    FileId in;
    if (!file_id(input, &in)) continue;
    const char* relation = nullptr;
    if (out_exists && out_chain.front() == in) {
      relation = "is the input";
    } else if (std::find(out_chain.begin() + (out_exists ? 1 : 0), out_chain.end(), in) !=
               out_chain.end()) {
      relation = "is inside the input";
    } else if (out_exists) {
      bool in_exists = false;
      const std::vector<FileId> in_chain = id_chain(input, &in_exists);
      if (std::find(in_chain.begin() + 1, in_chain.end(), out_chain.front()) != in_chain.end())
        relation = "contains the input";
    }
    if (relation)
      fail_one_line(what, ": the output ", shorten(output), " ", relation, " ", shorten(input),
                    "; write it to another path");
  }
}

}  // namespace strata
