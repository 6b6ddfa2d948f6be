// Safetensors writing (format and guarantees: see safetensors.h): tensors
// are converted chunk by chunk straight into "<path>.tmp", which is fsynced
// and renamed over <path>, so a reader sees the old file or the new one,
// never a torn one. Sharded models replace an earlier export in an order
// that keeps a consistent model readable.
#include "io/safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <set>
#include <utility>

#include "core/error.h"
#include "core/file.h"
#include "core/progress.h"
#include "core/text.h"
#include "io/safetensors_format.h"

namespace strata {

using namespace safetensors_internal;

namespace {

namespace fs = std::filesystem;

void write_full(int fd, const void* buf, size_t n, const std::string& tmp) {
  size_t done = 0;
  while (done < n) {
    const ssize_t r = ::write(fd, static_cast<const char*>(buf) + done, n - done);
    if (r < 0) {
      if (errno == EINTR) continue;
      fail(cat("write error on ", tmp, ": ", std::strerror(errno)));
    }
    done += size_t(r);
  }
}

std::string parent_dir(const std::string& path) {
  const fs::path p(path);
  return p.has_parent_path() ? p.parent_path().string() : std::string(".");
}

// Writes "<path>.tmp" through `fill(fd, tmp)`, fsyncs it and renames it over
// `path`; on any failure the temporary is removed.
template <typename Fill>
void write_atomic(const std::string& path, const std::string& where, Fill&& fill) {
  const std::string dir = parent_dir(path);
  std::error_code ec;
  fs::create_directories(dir, ec);
  STRATA_CHECK(!ec, where, ": cannot create directory ", dir, ": ", ec.message());
  const std::string tmp = path + ".tmp";
  FileDescriptor fd{::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)};
  STRATA_CHECK(fd.fd >= 0, where, ": cannot create ", tmp, ": ", std::strerror(errno));
  try {
    fill(fd.fd, tmp);
    STRATA_CHECK(::fsync(fd.fd) == 0, where, ": cannot sync ", tmp, ": ", std::strerror(errno));
    const int closed = ::close(fd.fd);
    fd.fd = -1;
    STRATA_CHECK(closed == 0, where, ": write error on ", tmp, ": ", std::strerror(errno));
    STRATA_CHECK(::rename(tmp.c_str(), path.c_str()) == 0, where, ": cannot rename ", tmp,
                 " into place: ", std::strerror(errno));
  } catch (...) {
    ::unlink(tmp.c_str());
    throw;
  }
  fsync_directory(dir);
}

uint64_t write_dtype_size(const std::string& dtype, const std::string& where) {
  if (dtype == "F32") return 4;
  if (dtype == "BF16" || dtype == "F16") return 2;
  fail(cat(where, ": cannot write dtype ", name_str(dtype), " (supported: F32, BF16, F16)"));
}

void check_write_metadata(const json& metadata, const std::string& where) {
  if (metadata.is_null()) return;
  STRATA_CHECK(metadata.is_object(), where, ": metadata is not a JSON object (", brief(metadata),
               ")");
  for (const auto& [k, v] : metadata.items())
    STRATA_CHECK(v.is_string(), where, ": metadata entry ", name_str(k), " is not a string (",
                 brief(v), ")");
}

// Checks names (non-empty, unique, not "__metadata__"), shapes and data
// pointers; returns each tensor's byte size in `dtype`.
std::vector<uint64_t> check_writes(const std::vector<SafeTensorWrite>& tensors, uint64_t es,
                                   const std::string& where) {
  std::set<std::string> seen;
  std::vector<uint64_t> bytes;
  for (const auto& t : tensors) {
    STRATA_CHECK(!t.name.empty(), where, ": a tensor has an empty name");
    STRATA_CHECK(t.name != "__metadata__", where, ": tensor name '__metadata__' is reserved");
    STRATA_CHECK(seen.insert(t.name).second, where, ": tensor ", name_str(t.name),
                 " is listed twice");
    uint64_t n = 1;
    bool over = false;
    for (const int64_t d : t.shape) {
      STRATA_CHECK(d >= 0, where, ": tensor ", name_str(t.name), " has a negative dimension in ",
                   shape_str(t.shape));
      over |= __builtin_mul_overflow(n, uint64_t(d), &n);
    }
    uint64_t b = 0;
    over |= __builtin_mul_overflow(n, es, &b);
    STRATA_CHECK(!over && n <= uint64_t(INT64_MAX), where, ": tensor ", name_str(t.name), " shape ",
                 shape_str(t.shape), " is too large");
    STRATA_CHECK(t.data || n == 0, where, ": tensor ", name_str(t.name), " has no data");
    bytes.push_back(b);
  }
  return bytes;
}

// The header JSON (tensors in the given order, offsets back to back), padded
// with spaces to a multiple of 8 bytes so the data area is 8-byte aligned.
std::string build_header(const std::vector<const SafeTensorWrite*>& tensors,
                         const std::vector<uint64_t>& bytes, const std::string& dtype,
                         const json& metadata, const std::string& where) {
  nlohmann::ordered_json h = nlohmann::ordered_json::object();
  if (metadata.is_object() && !metadata.empty()) {
    auto& md = h["__metadata__"] = nlohmann::ordered_json::object();
    for (const auto& [k, v] : metadata.items()) md[k] = v.get<std::string>();
  }
  uint64_t offset = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    auto& e = h[tensors[i]->name] = nlohmann::ordered_json::object();
    e["dtype"] = dtype;
    e["shape"] = tensors[i]->shape;
    e["data_offsets"] = nlohmann::ordered_json::array({offset, offset + bytes[i]});
    offset += bytes[i];
  }
  std::string s;
  try {
    s = h.dump();
  } catch (const nlohmann::ordered_json::exception& e) {
    fail(cat(where, ": cannot encode the header (names and metadata must be UTF-8): ",
             one_line(e.what())));
  }
  s.append((8 - s.size() % 8) % 8, ' ');
  return s;
}

// Streams one safetensors file (header, then each tensor converted chunk by
// chunk) into `path` atomically.
void write_file(const std::string& path, const std::vector<const SafeTensorWrite*>& tensors,
                const std::vector<uint64_t>& bytes, const std::string& dtype,
                const json& metadata) {
  const std::string where = cat("safetensors ", path);
  const std::string header = build_header(tensors, bytes, dtype, metadata, where);
  write_atomic(path, where, [&](int fd, const std::string& tmp) {
    unsigned char len[8];
    for (int i = 0; i < 8; ++i)
      len[i] = static_cast<unsigned char>(uint64_t(header.size()) >> (8 * i));
    write_full(fd, len, 8, tmp);
    write_full(fd, header.data(), header.size(), tmp);
    std::vector<uint16_t> buf;
    uint64_t total = 0;
    for (const uint64_t b : bytes) total += b;
    ProgressMeter progress(cat("safetensors: writing ", path), total);
    for (size_t i = 0; i < tensors.size(); ++i) {
      const float* src = tensors[i]->data;
      if (dtype == "F32") {
        write_full(fd, src, size_t(bytes[i]), tmp);
        progress.add(bytes[i]);
        continue;
      }
      const uint64_t n = bytes[i] / 2;
      buf.resize(size_t(std::min<uint64_t>(n, kChunkBytes / 2)));
      for (uint64_t j = 0; j < n;) {
        const size_t cnt = size_t(std::min<uint64_t>(buf.size(), n - j));
        if (dtype == "BF16") {
          for (size_t k = 0; k < cnt; ++k) buf[k] = f32_to_bf16(src[j + k]);
        } else {
          for (size_t k = 0; k < cnt; ++k) buf[k] = f32_to_f16(src[j + k]);
        }
        write_full(fd, buf.data(), cnt * 2, tmp);
        j += cnt;
      }
      progress.add(bytes[i]);
    }
  });
}

// "model-00001-of-00003.safetensors" and the like.
bool is_shard_name(const std::string& s) {
  static const std::string pre = "model-", mid = "-of-", suf = ".safetensors";
  if (s.size() != pre.size() + 5 + mid.size() + 5 + suf.size()) return false;
  const auto digits = [&](size_t at) {
    return std::all_of(s.begin() + long(at), s.begin() + long(at + 5),
                       [](char c) { return c >= '0' && c <= '9'; });
  };
  return s.compare(0, pre.size(), pre) == 0 && digits(pre.size()) &&
         s.compare(pre.size() + 5, mid.size(), mid) == 0 && digits(pre.size() + 5 + mid.size()) &&
         s.compare(s.size() - suf.size(), suf.size(), suf) == 0;
}

void remove_file(const fs::path& p, const std::string& where) {
  std::error_code ec;
  fs::remove(p, ec);
  STRATA_CHECK(!ec, where, ": cannot remove stale ", p.string(), ": ", ec.message());
}

// Removes the shard files of an earlier export that are not in `keep`.
void remove_stale_shards(const std::string& dir, const std::set<std::string>& keep,
                         const std::string& where) {
  std::error_code ec;
  std::vector<fs::path> stale;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (is_shard_name(name) && !keep.count(name)) stale.push_back(entry.path());
  }
  STRATA_CHECK(!ec, where, ": cannot list ", dir, ": ", ec.message());
  for (const auto& p : stale) remove_file(p, where);
}

}  // namespace

void write_safetensors(const std::string& path, const std::vector<SafeTensorWrite>& tensors,
                       const std::string& dtype, const nlohmann::json& metadata) {
  const std::string where = cat("safetensors ", path);
  STRATA_CHECK(!path.empty(), "safetensors: empty file name");
  const uint64_t es = write_dtype_size(dtype, where);
  check_write_metadata(metadata, where);
  const std::vector<uint64_t> bytes = check_writes(tensors, es, where);
  std::vector<const SafeTensorWrite*> refs;
  for (const auto& t : tensors) refs.push_back(&t);
  write_file(path, refs, bytes, dtype, metadata);
}

std::vector<std::string> write_safetensors_model(const std::string& dir,
                                                 const std::vector<SafeTensorWrite>& tensors,
                                                 const std::string& dtype, uint64_t max_shard_bytes,
                                                 const nlohmann::json& metadata) {
  const std::string where = cat("safetensors model ", dir);
  STRATA_CHECK(!dir.empty(), "safetensors model: empty directory name");
  STRATA_CHECK(max_shard_bytes > 0, where, ": max_shard_bytes must be positive");
  // Everything is checked before the directory is touched.
  const uint64_t es = write_dtype_size(dtype, where);
  check_write_metadata(metadata, where);
  const std::vector<uint64_t> bytes = check_writes(tensors, es, where);
  uint64_t total = 0;
  for (const uint64_t b : bytes)
    STRATA_CHECK(!__builtin_add_overflow(total, b, &total), where, ": total size overflows");
  std::error_code ec;
  fs::create_directories(dir, ec);
  STRATA_CHECK(!ec, where, ": cannot create directory: ", ec.message());
  const fs::path d(dir);

  if (total <= max_shard_bytes) {
    // The new model.safetensors takes effect at its rename (readers prefer it
    // to an index); then the index and shards of an earlier export go.
    const std::string single = (d / kSingleFile).string();
    std::vector<const SafeTensorWrite*> refs;
    for (const auto& t : tensors) refs.push_back(&t);
    write_file(single, refs, bytes, dtype, metadata);
    remove_file(d / kIndexFile, where);
    remove_stale_shards(dir, {}, where);
    fsync_directory(dir);
    return {single};
  }

  // Greedy in the given order: a shard takes tensors while they fit; a tensor
  // larger than the limit gets a shard of its own.
  std::vector<std::vector<size_t>> groups;
  uint64_t used = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (groups.empty() || (!groups.back().empty() && used + bytes[i] > max_shard_bytes)) {
      groups.emplace_back();
      used = 0;
    }
    groups.back().push_back(i);
    used += bytes[i];
  }
  const size_t count = groups.size();
  STRATA_CHECK(count <= 99999, where, ": ", count,
               " shards (at most 99999); raise max_shard_bytes");

  // The old index goes first, so no index ever names a mix of old and new
  // shards; an old model.safetensors (which readers prefer) stays readable
  // until the new index is in place.
  remove_file(d / kIndexFile, where);
  std::vector<std::string> written;
  std::set<std::string> shard_names;
  nlohmann::ordered_json weight_map = nlohmann::ordered_json::object();
  for (size_t s = 0; s < count; ++s) {
    char name[64];
    std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", s + 1, count);
    std::vector<const SafeTensorWrite*> refs;
    std::vector<uint64_t> shard_bytes;
    for (const size_t i : groups[s]) {
      refs.push_back(&tensors[i]);
      shard_bytes.push_back(bytes[i]);
      weight_map[tensors[i].name] = name;
    }
    const std::string path = (d / name).string();
    write_file(path, refs, shard_bytes, dtype, metadata);
    written.push_back(path);
    shard_names.insert(name);
  }
  nlohmann::ordered_json index = nlohmann::ordered_json::object();
  index["metadata"] = {{"total_size", total}};
  index["weight_map"] = std::move(weight_map);
  const std::string text = index.dump(2) + "\n";
  const std::string index_path = (d / kIndexFile).string();
  write_atomic(
      index_path, cat("safetensors index ", index_path),
      [&](int fd, const std::string& tmp) { write_full(fd, text.data(), text.size(), tmp); });
  written.push_back(index_path);
  remove_file(d / kSingleFile, where);
  remove_stale_shards(dir, shard_names, where);
  fsync_directory(dir);
  return written;
}

}  // namespace strata
