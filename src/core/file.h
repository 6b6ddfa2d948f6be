// Whole-file reads and atomic whole-file writes with one-line errors.
#pragma once

#include <string>
#include <vector>

namespace strata {

// Reads a regular file. Errors read "<what> <path>: no such file" (or: is a
// directory / cannot open / read error).
std::string read_file(const std::string& path, const std::string& what);
// The first `limit_bytes` bytes of a text file (0: all), cut back to the last
// space or newline before the limit so no word is split; fails with one line
// naming the file if that leaves nothing.
std::string read_text_sample(const std::string& path, int64_t limit_bytes);

// Writes `bytes` to "<path>.tmp", closes it and renames it over `path`, so a
// reader sees the old file or the new one, never a torn one. Errors name the
// file; on failure the temporary is removed.
void write_file_atomic(const std::string& path, const std::string& bytes);

// Appends `bytes` (one record, e.g. a JSON line) to `path`, creating it if
// needed. A record that does not fit (a full disk) is taken out again, so the
// file never ends in a torn record, and the error reads "<what> <path>: cannot
// append a record: <reason>".
void append_record(const std::string& path, const std::string& bytes, const std::string& what);

// A POSIX file descriptor closed on scope exit.
struct FileDescriptor {
  int fd = -1;
  ~FileDescriptor();
};

// An exclusive advisory lock (flock) on "<dir>/.lock", held while the object
// lives and released by the kernel when the process ends (a lock file left
// behind is not a lock). The file holds the owner's PID. acquire() creates
// `dir` if needed; when another process holds the lock it throws
// "<what> <dir> is in use by another process (pid N) ...".
class DirLock {
 public:
  static DirLock acquire(const std::string& dir, const std::string& what);
  DirLock(DirLock&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  DirLock& operator=(DirLock&& o) noexcept;
  DirLock(const DirLock&) = delete;
  DirLock& operator=(const DirLock&) = delete;
  DirLock() = default;
  ~DirLock();
  bool held() const { return fd_ >= 0; }

 private:
  explicit DirLock(int fd) : fd_(fd) {}
  int fd_ = -1;
};

// fsyncs directory `dir` so a rename inside it is durable. Where the file
// system cannot sync directories (EINVAL, EROFS) or the directory cannot be
// opened, nothing happens; other failures throw "<prefix>cannot sync
// directory <dir>: <reason>".
void fsync_directory(const std::string& dir, const std::string& prefix = "");

// Output paths, checked before any work so a bad one costs nothing. Errors
// read "<what>: <path>: <problem>".
// `path` will be written as a file: not a directory, its folder exists and is
// a writable directory (with `creates_folder`, for commands that make missing
// folders: the nearest existing one is writable).
void check_output_file(const std::string& path, const std::string& what,
                       bool creates_folder = false);
// `path` will be a directory written into: an existing writable directory, or
// a path whose nearest existing ancestor is a writable directory (the
// command creates the rest).
void check_output_dir(const std::string& path, const std::string& what);
// Refuses an output that is, is inside or contains one of `inputs` (inputs
// that do not exist are skipped), judged by identity (device and inode), so
// links and other spellings of the same file or folder count:
//   "<what>: the output <out> is the input <in>; write it to another path".
void check_output_not_input(const std::string& output, const std::vector<std::string>& inputs,
                            const std::string& what);

}  // namespace strata
