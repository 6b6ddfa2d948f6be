// Safetensors reading and writing (format and guarantees: see safetensors.h).
//
// Reading: the 8-byte header length and the JSON header are read with pread
// and validated in full before any tensor is trusted; tensor bytes stay on
// disk and are read on demand, in chunks, through the descriptor that was
// validated (kept open for the life of the SafetensorsFile).
//
// Writing: tensors are converted chunk by chunk straight into "<path>.tmp",
// which is fsynced and renamed over <path>, so a reader sees the old file or
// the new one, never a torn one.
#include "io/safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>
#include <utility>

#include "core/error.h"
#include "core/file.h"
#include "core/text.h"

namespace strata {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

static_assert(std::endian::native == std::endian::little,
              "safetensors I/O assumes a little-endian host");

constexpr uint64_t kMaxHeaderBytes = 100ull << 20;  // a sane header is far smaller
constexpr size_t kChunkBytes = size_t(4) << 20;     // I/O and conversion granularity
constexpr const char* kSingleFile = "model.safetensors";
constexpr const char* kIndexFile = "model.safetensors.index.json";
// JSON nested deeper is refused while it is parsed: nlohmann::json parses any
// depth, but prints and copies values recursively (a header nested 100,000
// deep overflowed the stack printing its error message).
constexpr int kMaxJsonDepth = 64;

// ---------------------------------------------------------------------------
// Messages
// ---------------------------------------------------------------------------

// A name for a message: quoted, with control characters escaped so that the
// message stays on one line whatever the file contains.
std::string name_str(const std::string& s) {
  std::string out = "'";
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7F) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", unsigned(c));
      out += buf;
    } else {
      out += ch;
    }
  }
  return out + "'";
}

// A JSON value for a message, cut short when long.
std::string brief(const json& v) {
  std::string s;
  try {
    s = v.dump(-1, ' ', false, json::error_handler_t::replace);
  } catch (const json::exception&) {
    s = v.type_name();
  }
  if (s.size() > 40) s = s.substr(0, 37) + "...";
  return one_line(s);
}

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// ---------------------------------------------------------------------------
// Number formats
// ---------------------------------------------------------------------------

// Bytes per element of the dtypes with a whole-byte element size (0: unknown
// here, or sub-byte, so no size check is possible).
uint64_t dtype_size(const std::string& dtype) {
  static const std::map<std::string, uint64_t> sizes = {
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1}, {"F8_E8M0", 1},
      {"I16", 2},  {"U16", 2}, {"F16", 2}, {"BF16", 2},    {"I32", 4},     {"U32", 4},
      {"F32", 4},  {"I64", 8}, {"U64", 8}, {"F64", 8},     {"C64", 8}};
  const auto it = sizes.find(dtype);
  return it == sizes.end() ? 0 : it->second;
}

// IEEE binary16 -> binary32, exact for every input (subnormals, infinities,
// NaN payloads included).
float f16_to_f32(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1Fu;
  const uint32_t mant = h & 0x3FFu;
  if (exp == 0) {  // zero or subnormal: mant * 2^-24, exact in float
    const float v = float(mant) * 0x1p-24f;
    return sign ? -v : v;
  }
  const uint32_t bits = exp == 31 ? sign | 0x7F800000u | (mant << 13)  // inf / NaN
                                  : sign | ((exp + 112) << 23) | (mant << 13);
  return std::bit_cast<float>(bits);
}

// binary32 -> binary16, round to nearest even; values from 65520 up overflow
// to infinity; NaN stays NaN (made quiet).
uint16_t f32_to_f16(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const auto sign = uint16_t((x >> 16) & 0x8000u);
  const uint32_t a = x & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return uint16_t(sign | 0x7E00u | ((a >> 13) & 0x3FFu));  // NaN
  if (a >= 0x477FF000u) return uint16_t(sign | 0x7C00u);  // >= 65520 (65504 + half an ulp)
  if (a >= 0x38800000u) {                                 // normal half: |f| >= 2^-14
    const uint32_t r = a - (112u << 23);                  // rebias the exponent
    return uint16_t(sign | ((r + 0xFFFu + ((r >> 13) & 1u)) >> 13));
  }
  if (a <= 0x33000000u) return sign;  // |f| <= 2^-25: rounds to zero (2^-25 is a tie, to even)
  // Subnormal half: round |f| * 2^24 to an integer (the result 0x400 is the
  // smallest normal, which the encoding gives correctly).
  const uint32_t e = a >> 23;  // 102..112
  const uint32_t m = (a & 0x7FFFFFu) | 0x800000u;
  const uint32_t shift = 126 - e;  // 14..24
  uint32_t q = m >> shift;
  const uint32_t rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
  if (rem > half || (rem == half && (q & 1u))) ++q;
  return uint16_t(sign | q);
}

float bf16_to_f32(uint16_t b) { return std::bit_cast<float>(uint32_t(b) << 16); }

// binary32 -> bfloat16, round to nearest even (overflow to infinity); NaN
// stays NaN (made quiet: plain rounding could carry a NaN into infinity).
uint16_t f32_to_bf16(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  if ((x & 0x7FFFFFFFu) > 0x7F800000u) return uint16_t((x >> 16) | 0x0040u);
  return uint16_t((x + 0x7FFFu + ((x >> 16) & 1u)) >> 16);
}

// ---------------------------------------------------------------------------
// Files
// ---------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------
// Reading
// ---------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------
// Writing
// ---------------------------------------------------------------------------

namespace {

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
    for (size_t i = 0; i < tensors.size(); ++i) {
      const float* src = tensors[i]->data;
      if (dtype == "F32") {
        write_full(fd, src, size_t(bytes[i]), tmp);
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
