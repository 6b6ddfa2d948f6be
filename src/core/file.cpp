#include "core/file.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

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

void write_file_atomic(const std::string& path, const std::string& bytes) {
  const std::string tmp = path + ".tmp";
  std::error_code ec;
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    STRATA_CHECK(out, "cannot write ", tmp);
    out.write(bytes.data(), std::streamsize(bytes.size()));
    out.close();
    if (!out) {
      fs::remove(tmp, ec);
      fail(cat("write error on ", tmp, " (disk full?)"));
    }
  }
  fs::rename(tmp, path, ec);
  if (ec) {
    const std::string why = ec.message();
    fs::remove(tmp, ec);
    fail(cat("cannot rename ", tmp, " to ", path, ": ", why));
  }
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
