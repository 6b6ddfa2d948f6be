// Safetensors reading (format and guarantees: see safetensors.h; writing is
// in safetensors_write.cpp).
//
// Reading: the 8-byte header length and the JSON header are read with pread
// and validated in full before any tensor is trusted; tensor bytes stay on
// disk and are read on demand, in chunks, through the descriptor that was
// validated (kept open for the life of the SafetensorsFile).
//
#include "io/safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <set>
#include <utility>

#include "core/error.h"
#include "core/file.h"
#include "core/text.h"
#include "io/safetensors_format.h"

namespace strata {

using namespace safetensors_internal;

namespace {

namespace fs = std::filesystem;

constexpr uint64_t kMaxHeaderBytes = 100ull << 20;  // a sane header is far smaller
// JSON nested deeper is refused while it is parsed: nlohmann::json parses any
// depth, but prints and copies values recursively (a header nested 100,000
// deep overflowed the stack printing its error message).
constexpr int kMaxJsonDepth = 64;

// Reads up to n bytes at `offset`; returns the count (short only at end of
// file). Read errors fail with `where`.
size_t pread_full(int fd, void* buf, size_t n, uint64_t offset, const std::string& where) {
  size_t done = 0;
  while (done < n) {
    const size_t want = std::min(n - done, size_t(1) << 30);
    const ssize_t r = ::pread(fd, static_cast<char*>(buf) + done, want, off_t(offset + done));
    if (r < 0) {
      if (errno == EINTR) continue;
      fail(cat(where, ": read error: ", std::strerror(errno)));
    }
    if (r == 0) break;
    done += size_t(r);
  }
  return done;
}

// ---------------------------------------------------------------------------
// Header validation
// ---------------------------------------------------------------------------

// A JSON value as a non-negative integer (false for negative numbers,
// floats and anything else).
bool as_u64(const json& v, uint64_t& out) {
  if (v.is_number_unsigned()) {
    out = v.get<uint64_t>();
    return true;
  }
  if (v.is_number_integer() && v.get<int64_t>() >= 0) {
    out = uint64_t(v.get<int64_t>());
    return true;
  }
  return false;
}

// Parses one tensor entry of the header (everything but overlaps).
SafeTensorInfo parse_entry(const std::string& name, const json& v, uint64_t data_size,
                           const std::string& where) {
  const std::string at = cat(where, ": tensor ", name_str(name));
  STRATA_CHECK(v.is_object(), at, ": entry is not a JSON object (", v.type_name(), ")");
  SafeTensorInfo t;
  t.name = name;

  const auto dtype = v.find("dtype");
  STRATA_CHECK(dtype != v.end(), at, ": missing field 'dtype'");
  STRATA_CHECK(dtype->is_string(), at, ": field 'dtype' is not a string (", brief(*dtype), ")");
  t.dtype = dtype->get<std::string>();
  STRATA_CHECK(!t.dtype.empty(), at, ": field 'dtype' is empty");

  const auto shape = v.find("shape");
  STRATA_CHECK(shape != v.end(), at, ": missing field 'shape'");
  STRATA_CHECK(shape->is_array(), at, ": field 'shape' is not an array (", brief(*shape), ")");
  uint64_t numel = 1;
  bool numel_overflow = false;
  for (size_t i = 0; i < shape->size(); ++i) {
    uint64_t d = 0;
    STRATA_CHECK(as_u64((*shape)[i], d) && d <= uint64_t(INT64_MAX), at, ": field 'shape' element ",
                 i, " is not a non-negative integer (", brief((*shape)[i]), ")");
    t.shape.push_back(int64_t(d));
    numel_overflow |= __builtin_mul_overflow(numel, d, &numel);
  }
  STRATA_CHECK(!numel_overflow && numel <= uint64_t(INT64_MAX), at, ": field 'shape' ",
               shape_str(t.shape), " has too many elements");

  const auto offs = v.find("data_offsets");
  STRATA_CHECK(offs != v.end(), at, ": missing field 'data_offsets'");
  uint64_t b = 0, e = 0;
  STRATA_CHECK(
      offs->is_array() && offs->size() == 2 && as_u64((*offs)[0], b) && as_u64((*offs)[1], e), at,
      ": field 'data_offsets' is not two non-negative integers (", brief(*offs), ")");
  STRATA_CHECK(b <= e, at, ": field 'data_offsets' [", b, ", ", e, "] ends before it begins");
  STRATA_CHECK(e <= data_size, at, ": field 'data_offsets' [", b, ", ", e,
               "] ends beyond the data area (", data_size, " bytes; file truncated?)");
  t.begin = b;
  t.end = e;

  if (const uint64_t es = dtype_size(t.dtype)) {
    uint64_t need = 0;
    const bool over = __builtin_mul_overflow(numel, es, &need);
    STRATA_CHECK(!over && e - b == need, at, ": field 'data_offsets' [", b, ", ", e, "] spans ",
                 e - b, " bytes but ", t.dtype, " ", shape_str(t.shape), " needs ",
                 over ? std::string("more than 2^64") : std::to_string(need));
  }
  return t;
}

// The entry named `name` in a vector of (name, value) pairs sorted by name,
// or end().
template <typename Entries>
auto lookup(const Entries& entries, const std::string& name) {
  const auto it = std::lower_bound(entries.begin(), entries.end(), name,
                                   [](const auto& e, const std::string& n) { return e.first < n; });
  return it != entries.end() && it->first == name ? it : entries.end();
}

}  // namespace

int64_t SafeTensorInfo::numel() const {
  int64_t n = 1;
  for (const int64_t d : shape) n *= d;
  return n;
}

std::shared_ptr<const SafetensorsFile> SafetensorsFile::open(const std::string& path) {
  const std::string where = cat("safetensors ", path);
  std::error_code ec;
  STRATA_CHECK(fs::exists(path, ec), where, ": no such file");
  STRATA_CHECK(!fs::is_directory(path, ec), where, ": is a directory, not a file");
  STRATA_CHECK(fs::is_regular_file(path, ec), where, ": not a regular file");
  const int raw = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  STRATA_CHECK(raw >= 0, where, ": cannot open: ", std::strerror(errno));
  auto f = std::make_shared<SafetensorsFile>();
  f->fd_ = std::shared_ptr<const int>(new int(raw), [](const int* p) {
    ::close(*p);
    delete p;
  });
  f->path_ = path;

  struct stat st {};
  STRATA_CHECK(::fstat(raw, &st) == 0, where, ": cannot stat: ", std::strerror(errno));
  STRATA_CHECK(S_ISREG(st.st_mode), where, ": not a regular file");
  const auto size = uint64_t(st.st_size);
  STRATA_CHECK(size >= 8, where, ": file is ", size,
               " bytes, too short for the 8-byte header length (not a safetensors file)");

  unsigned char len[8];
  STRATA_CHECK(pread_full(raw, len, 8, 0, where) == 8, where, ": file is truncated");
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= uint64_t(len[i]) << (8 * i);
  STRATA_CHECK(n <= kMaxHeaderBytes, where, ": header length ", n,
               " bytes is over the 100 MB limit (not a safetensors file?)");
  STRATA_CHECK(n <= size - 8, where, ": header length ", n,
               " bytes runs past the end of the file (", size,
               " bytes; truncated or not a safetensors file)");
  std::string text(n, '\0');
  STRATA_CHECK(pread_full(raw, text.data(), n, 8, where) == n, where, ": file is truncated");

  // Duplicate top-level keys would silently shadow each other: note them
  // while parsing.
  std::set<std::string> keys;
  std::string duplicate;
  bool has_duplicate = false;
  const json::parser_callback_t note_keys = [&](int depth, json::parse_event_t event,
                                                json& parsed) {
    if (depth > kMaxJsonDepth)
      fail(cat(where, ": header nests JSON deeper than ", kMaxJsonDepth, " levels"));
    if (depth == 1 && event == json::parse_event_t::key && !has_duplicate) {
      const auto& k = parsed.get_ref<const std::string&>();
      if (!keys.insert(k).second) {
        has_duplicate = true;
        duplicate = k;
      }
    }
    return true;
  };
  json header;
  try {
    header = json::parse(text, note_keys);
  } catch (const json::exception& e) {
    fail(cat(where, ": header is not valid JSON: ", one_line(e.what())));
  }
  STRATA_CHECK(header.is_object(), where, ": header is not a JSON object (", header.type_name(),
               ")");
  STRATA_CHECK(!has_duplicate, where, ": header names ", name_str(duplicate), " twice");

  f->data_start_ = 8 + n;
  f->data_size_ = size - 8 - n;
  f->metadata_ = json::object();
  for (const auto& [key, value] : header.items()) {
    if (key == "__metadata__") {
      STRATA_CHECK(value.is_object(), where, ": field '__metadata__' is not a JSON object (",
                   brief(value), ")");
      for (const auto& [mk, mv] : value.items())
        STRATA_CHECK(mv.is_string(), where, ": field '__metadata__' entry ", name_str(mk),
                     " is not a string (", brief(mv), ")");
      f->metadata_ = value;
      continue;
    }
    f->tensors_.push_back(parse_entry(key, value, f->data_size_, where));
  }
  std::sort(f->tensors_.begin(), f->tensors_.end(),
            [](const SafeTensorInfo& a, const SafeTensorInfo& b) { return a.name < b.name; });

  // Overlaps: sorted by start, each non-empty tensor must start at or after
  // the furthest end so far. (Gaps are tolerated; empty tensors hold no bytes.)
  std::vector<const SafeTensorInfo*> by_start;
  for (const auto& t : f->tensors_)
    if (t.end > t.begin) by_start.push_back(&t);
  std::sort(by_start.begin(), by_start.end(), [](const auto* a, const auto* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
  });
  const SafeTensorInfo* furthest = nullptr;
  for (const auto* t : by_start) {
    if (furthest) {
      STRATA_CHECK(t->begin >= furthest->end, where, ": tensors ", name_str(furthest->name), " [",
                   furthest->begin, ", ", furthest->end, ") and ", name_str(t->name), " [",
                   t->begin, ", ", t->end, ") overlap");
    }
    if (!furthest || t->end > furthest->end) furthest = t;
  }
  return f;
}

const SafeTensorInfo* SafetensorsFile::find(const std::string& name) const {
  const auto it =
      std::lower_bound(tensors_.begin(), tensors_.end(), name,
                       [](const SafeTensorInfo& t, const std::string& n) { return t.name < n; });
  return it != tensors_.end() && it->name == name ? &*it : nullptr;
}

void SafetensorsFile::read_f32(const SafeTensorInfo& t, float* out) const {
  const std::string where = cat("safetensors ", path_);
  const std::string at = cat(where, ": tensor ", name_str(t.name));
  const bool f32 = t.dtype == "F32", f16 = t.dtype == "F16", bf16 = t.dtype == "BF16";
  STRATA_CHECK(f32 || f16 || bf16, at, ": dtype ", t.dtype,
               " cannot be read as float32 (supported: F32, F16, BF16)");
  const uint64_t es = f32 ? 4 : 2;
  const auto n = uint64_t(t.numel());
  // Guards against an entry of another file: `out` holds numel() floats.
  STRATA_CHECK(fd_ && t.begin <= t.end && t.end <= data_size_ && t.end - t.begin == n * es, at,
               ": data_offsets [", t.begin, ", ", t.end, "] do not fit this file");
  const uint64_t start = data_start_ + t.begin;
  const int fd = *fd_;
  if (f32) {
    auto* dst = reinterpret_cast<char*>(out);
    for (uint64_t done = 0; done < n * 4;) {
      const size_t len = size_t(std::min<uint64_t>(kChunkBytes, n * 4 - done));
      STRATA_CHECK(pread_full(fd, dst + done, len, start + done, at) == len, at,
                   ": file is truncated (it changed after it was opened?)");
      done += len;
    }
    return;
  }
  std::vector<uint16_t> buf(size_t(std::min<uint64_t>(n, kChunkBytes / 2)));
  for (uint64_t i = 0; i < n;) {
    const size_t cnt = size_t(std::min<uint64_t>(buf.size(), n - i));
    STRATA_CHECK(pread_full(fd, buf.data(), cnt * 2, start + i * 2, at) == cnt * 2, at,
                 ": file is truncated (it changed after it was opened?)");
    float* o = out + i;
    if (f16) {
      for (size_t k = 0; k < cnt; ++k) o[k] = f16_to_f32(buf[k]);
    } else {
      for (size_t k = 0; k < cnt; ++k) o[k] = bf16_to_f32(buf[k]);
    }
    i += cnt;
  }
}

SafetensorsModel SafetensorsModel::open_dir(const std::string& dir) {
  std::error_code ec;
  STRATA_CHECK(fs::exists(dir, ec), "safetensors model ", dir, ": no such directory");
  STRATA_CHECK(fs::is_directory(dir, ec), "safetensors model ", dir, ": not a directory");
  const std::string single = (fs::path(dir) / kSingleFile).string();
  const std::string index = (fs::path(dir) / kIndexFile).string();
  SafetensorsModel m;

  // model.safetensors first, as Hugging Face's loader does (and what
  // write_safetensors_model relies on for a consistent view while it replaces
  // an export).
  if (fs::exists(single, ec)) {
    const auto f = SafetensorsFile::open(single);
    m.source_ = single;
    for (const auto& t : f->tensors()) m.entries_.push_back({t.name, Entry{f, &t}});
    return m;  // tensors() is sorted by name
  }
  STRATA_CHECK(fs::exists(index, ec), "safetensors model ", dir, ": neither ", kSingleFile, " nor ",
               kIndexFile, " found");
  m.source_ = index;
  const std::string where = cat("safetensors index ", index);
  const std::string text = read_file(index, "safetensors index");
  json j;
  const json::parser_callback_t bounded = [&](int depth, json::parse_event_t, json&) {
    if (depth > kMaxJsonDepth)
      fail(cat(where, ": nests JSON deeper than ", kMaxJsonDepth, " levels"));
    return true;
  };
  try {
    j = json::parse(text, bounded);
  } catch (const json::exception& e) {
    fail(cat(where, ": not valid JSON: ", one_line(e.what())));
  }
  STRATA_CHECK(j.is_object(), where, ": not a JSON object (", j.type_name(), ")");
  if (const auto md = j.find("metadata"); md != j.end())
    STRATA_CHECK(md->is_object() || md->is_null(), where, ": field 'metadata' is not an object (",
                 brief(*md), ")");
  const auto wm = j.find("weight_map");
  STRATA_CHECK(wm != j.end(), where, ": missing field 'weight_map'");
  STRATA_CHECK(wm->is_object(), where, ": field 'weight_map' is not an object (", brief(*wm), ")");

  std::map<std::string, std::shared_ptr<const SafetensorsFile>> shards;
  for (const auto& [name, file] : wm->items()) {
    const std::string at = cat(where, ": weight_map[", name_str(name), "]");
    STRATA_CHECK(file.is_string(), at, " is not a string (", brief(file), ")");
    const std::string shard = file.get<std::string>();
    const fs::path rel(shard);
    bool inside = !shard.empty() && rel.is_relative();
    for (const auto& part : rel) inside = inside && part != "..";
    STRATA_CHECK(inside, at, " = ", name_str(shard), " is not a file name inside ", dir);
    auto it = shards.find(shard);
    if (it == shards.end()) {
      const std::string full = (fs::path(dir) / rel).string();
      STRATA_CHECK(fs::exists(full, ec), where, ": shard ", name_str(shard), " (holding tensor ",
                   name_str(name), ") does not exist: no such file ", full);
      it = shards.emplace(shard, SafetensorsFile::open(full)).first;
    }
    const SafeTensorInfo* info = it->second->find(name);
    STRATA_CHECK(info, where, ": tensor ", name_str(name), " is mapped to ", it->second->path(),
                 ", which has no such tensor");
    m.entries_.push_back({name, Entry{it->second, info}});
  }
  std::sort(m.entries_.begin(), m.entries_.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  return m;
}

std::vector<std::string> SafetensorsModel::names() const {
  std::vector<std::string> out;
  out.reserve(entries_.size());
  for (const auto& e : entries_) out.push_back(e.first);
  return out;
}

const SafeTensorInfo* SafetensorsModel::find(const std::string& name) const {
  const auto it = lookup(entries_, name);
  return it != entries_.end() ? it->second.info : nullptr;
}

void SafetensorsModel::read_f32(const std::string& name, const std::vector<int64_t>& shape,
                                float* out) const {
  const auto it = lookup(entries_, name);
  STRATA_CHECK(it != entries_.end(), "safetensors model ", source_, ": no tensor ", name_str(name));
  const Entry& e = it->second;
  STRATA_CHECK(e.info->shape == shape, "safetensors ", e.file->path(), ": tensor ", name_str(name),
               " has shape ", shape_str(e.info->shape), ", expected ", shape_str(shape));
  e.file->read_f32(*e.info, out);
  // Model weights are finite: refuse NaN and inf with the tensor named,
  // rather than convert them into a checkpoint that produces garbage.
  const int64_t n = e.info->numel();
  for (int64_t i = 0; i < n; ++i)
    if (!std::isfinite(out[i])) [[unlikely]]
      fail_one_line("safetensors ", e.file->path(), ": tensor ", name_str(name),
                    " holds a non-finite value (", out[i], " at index ", i, ")");
}

const std::string& SafetensorsModel::file_of(const std::string& name) const {
  const auto it = lookup(entries_, name);
  STRATA_CHECK(it != entries_.end(), "safetensors model ", source_, ": no tensor ", name_str(name));
  return it->second.file->path();
}

}  // namespace strata
