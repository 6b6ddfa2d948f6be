// Token shards and dataset metadata (format in shards.h).
#include "data/shards.h"

#include <algorithm>
#include <bit>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include "core/error.h"
#include "core/text.h"

namespace strata {
namespace {

namespace fs = std::filesystem;

constexpr char kMagic[8] = {'S', 'T', 'R', 'A', 'T', 'O', 'K', '1'};
constexpr uint32_t kVersion = 1;
constexpr size_t kHeaderBytes = 64;

// Little-endian loads and stores (memcpy on little-endian hosts).
template <typename U>
void store_le(uint8_t* p, U v) {
  if constexpr (std::endian::native == std::endian::little) {
    std::memcpy(p, &v, sizeof v);
  } else {
    for (size_t i = 0; i < sizeof v; ++i) p[i] = uint8_t(v >> (8 * i));
  }
}
template <typename U>
U load_le(const uint8_t* p) {
  U v;
  if constexpr (std::endian::native == std::endian::little) {
    std::memcpy(&v, p, sizeof v);
  } else {
    v = 0;
    for (size_t i = 0; i < sizeof v; ++i) v |= U(p[i]) << (8 * i);
  }
  return v;
}

std::string read_all(const std::string& path, const std::string& what) {
  std::error_code ec;
  STRATA_CHECK(fs::is_regular_file(path, ec), what, " ", path, ": no such file");
  std::FILE* f = std::fopen(path.c_str(), "rb");
  STRATA_CHECK(f, what, " ", path, ": cannot open for reading");
  std::string data(fs::file_size(path, ec), '\0');
  const size_t got = data.empty() ? 0 : std::fread(data.data(), 1, data.size(), f);
  std::fclose(f);
  STRATA_CHECK(got == data.size(), what, " ", path, ": read error");
  return data;
}

// Reads and validates one shard. vocab_size > 0 also checks every id against
// it; expect_width > 0 checks the header's token width.
void read_shard_checked(const std::string& path, std::vector<int32_t>& tokens,
                        std::vector<int64_t>& doc_starts, int64_t vocab_size, int expect_width) {
  const std::string data = read_all(path, "shard");
  const auto* p = reinterpret_cast<const uint8_t*>(data.data());
  STRATA_CHECK(data.size() >= kHeaderBytes, "shard ", path, ": truncated (", data.size(),
               " bytes, shorter than the 64-byte header)");
  STRATA_CHECK(std::memcmp(p, kMagic, 8) == 0, "shard ", path,
               ": bad magic (not a strata token shard)");
  const uint32_t version = load_le<uint32_t>(p + 8);
  STRATA_CHECK(version == kVersion, "shard ", path, ": unsupported version ", version,
               " (expected ", kVersion, ")");
  const uint32_t width = load_le<uint32_t>(p + 12);
  STRATA_CHECK(width == 2 || width == 4, "shard ", path, ": bad token width ", width,
               " (expected 2 or 4)");
  STRATA_CHECK(expect_width <= 0 || int(width) == expect_width, "shard ", path, ": token width ",
               width, " differs from the dataset's token_bytes ", expect_width);
  const uint64_t count = load_le<uint64_t>(p + 16);
  const uint64_t docs = load_le<uint64_t>(p + 24);
  // Sizes that cannot fit in the file are rejected before any multiplication overflows.
  const uint64_t body = data.size() - kHeaderBytes;
  STRATA_CHECK(count <= body / width && docs < body / 8, "shard ", path,
               ": truncated (header says ", count, " tokens and ", docs, " documents, file has ",
               data.size(), " bytes)");
  const uint64_t expected = kHeaderBytes + count * width + (docs + 1) * 8;
  STRATA_CHECK(data.size() >= expected, "shard ", path, ": truncated (", data.size(),
               " bytes, expected ", expected, ")");
  STRATA_CHECK(data.size() == expected, "shard ", path, ": ", data.size() - expected,
               " unexpected bytes after the document index (expected ", expected, " bytes)");

  const size_t base = tokens.size();
  tokens.resize(base + count);
  const uint8_t* tp = p + kHeaderBytes;
  const uint64_t limit =
      vocab_size > 0 ? uint64_t(vocab_size) : uint64_t(std::numeric_limits<int32_t>::max()) + 1;
  uint64_t bad = 0, bad_at = 0;
  if (width == 2) {
    for (uint64_t i = 0; i < count; ++i) {
      const uint16_t v = load_le<uint16_t>(tp + 2 * i);
      if (v >= limit && !bad) bad = uint64_t(v) + 1, bad_at = i;
      tokens[base + i] = int32_t(v);
    }
  } else {
    for (uint64_t i = 0; i < count; ++i) {
      const uint32_t v = load_le<uint32_t>(tp + 4 * i);
      if (v >= limit && !bad) bad = uint64_t(v) + 1, bad_at = i;
      tokens[base + i] = int32_t(v);
    }
  }
  if (bad) {
    tokens.resize(base);
    fail(cat("shard ", path, ": token id ", bad - 1, " at position ", bad_at,
             vocab_size > 0 ? cat(" is out of range for vocab size ", vocab_size)
                            : std::string(" does not fit in int32")));
  }

  const uint8_t* dp = tp + count * width;
  std::vector<int64_t> starts(docs + 1);
  for (uint64_t d = 0; d <= docs; ++d) starts[d] = int64_t(load_le<uint64_t>(dp + 8 * d));
  bool ok = starts[0] == 0 && uint64_t(starts[docs]) == count;
  for (uint64_t d = 0; ok && d < docs; ++d) ok = starts[d] <= starts[d + 1];
  if (!ok) {
    tokens.resize(base);
    fail(cat("shard ", path,
             ": inconsistent document index (starts must rise from 0 to the "
             "token count ",
             count, ")"));
  }
  // Several shards read in turn give one index: the previous shard's closing
  // entry equals `base`, which is this shard's first start, so it is not repeated.
  if (!doc_starts.empty() && doc_starts.back() == int64_t(base)) doc_starts.pop_back();
  for (uint64_t d = 0; d <= docs; ++d) doc_starts.push_back(int64_t(base) + starts[d]);
}

template <typename T>
T get_field(const nlohmann::json& j, const char* key, const std::string& where) {
  STRATA_CHECK(j.contains(key), where, ": missing field '", key, "'");
  const auto& v = j.at(key);
  if constexpr (std::is_same_v<T, std::string>) {
    STRATA_CHECK(v.is_string(), where, ": field '", key, "' must be a string");
  } else if constexpr (std::is_same_v<T, bool>) {
    STRATA_CHECK(v.is_boolean(), where, ": field '", key, "' must be true or false");
  } else {
    STRATA_CHECK(v.is_number_integer(), where, ": field '", key, "' must be an integer");
    // Range-checked: get<int>() would wrap 4294967808 to 512.
    const bool fits = v.is_number_unsigned()
                          ? v.get<uint64_t>() <= uint64_t(std::numeric_limits<T>::max())
                          : v.get<int64_t>() >= int64_t(std::numeric_limits<T>::min()) &&
                                v.get<int64_t>() <= int64_t(std::numeric_limits<T>::max());
    STRATA_CHECK(fits, where, ": field '", key, "' is ", v.dump(), ", out of range");
  }
  return v.get<T>();
}

SplitMeta split_from_json(const nlohmann::json& j, const char* name, const std::string& where) {
  STRATA_CHECK(j.contains(name) && j.at(name).is_object(), where, ": missing split '", name,
               "' (an object)");
  const auto& s = j.at(name);
  const std::string w = cat(where, ": split '", name, "'");
  SplitMeta m;
  STRATA_CHECK(s.contains("shards") && s.at("shards").is_array(), w,
               ": field 'shards' must be a list of file names");
  for (const auto& f : s.at("shards")) {
    STRATA_CHECK(f.is_string(), w, ": field 'shards' must be a list of file names");
    const std::string name_s = f.get<std::string>();
    const bool control = std::any_of(name_s.begin(), name_s.end(),
                                     [](char ch) { return static_cast<unsigned char>(ch) < 0x20; });
    STRATA_CHECK(!name_s.empty() && name_s.find('/') == std::string::npos && name_s != "." &&
                     name_s != ".." && !control,
                 w, ": bad shard file name '", one_line(name_s), "'");
    m.shards.push_back(name_s);
  }
  m.tokens = get_field<int64_t>(s, "tokens", w);
  m.documents = get_field<int64_t>(s, "documents", w);
  STRATA_CHECK(m.tokens >= 0 && m.documents >= 0, w, ": negative token or document count");
  return m;
}

nlohmann::json split_to_json(const SplitMeta& s) {
  return {{"shards", s.shards}, {"tokens", s.tokens}, {"documents", s.documents}};
}

}  // namespace

nlohmann::json DatasetMeta::to_json() const {
  nlohmann::json j;
  j["format"] = format;
  j["tokenizer_sha256"] = tokenizer_sha256;
  j["vocab_size"] = vocab_size;
  j["bos_id"] = bos_id;
  j["eos_id"] = eos_id;
  j["add_bos"] = add_bos;
  j["add_eos"] = add_eos;
  j["token_bytes"] = token_bytes;
  j["train"] = split_to_json(train);
  j["val"] = split_to_json(val);
  j["sources"] = sources.is_null() ? nlohmann::json::array() : sources;
  return j;
}

DatasetMeta DatasetMeta::from_json(const nlohmann::json& j, const std::string& where) {
  STRATA_CHECK(j.is_object(), where, ": expected a JSON object");
  DatasetMeta m;
  m.format = get_field<std::string>(j, "format", where);
  STRATA_CHECK(m.format == "strata-tokens-v1", where, ": unknown format '", one_line(m.format),
               "' (expected strata-tokens-v1)");
  m.tokenizer_sha256 = get_field<std::string>(j, "tokenizer_sha256", where);
  m.vocab_size = get_field<int>(j, "vocab_size", where);
  STRATA_CHECK(m.vocab_size > 0, where, ": vocab_size must be positive");
  m.bos_id = get_field<int32_t>(j, "bos_id", where);
  m.eos_id = get_field<int32_t>(j, "eos_id", where);
  STRATA_CHECK(
      m.bos_id >= -1 && m.bos_id < m.vocab_size && m.eos_id >= -1 && m.eos_id < m.vocab_size, where,
      ": bos_id/eos_id out of range for vocab_size ", m.vocab_size);
  m.add_bos = get_field<bool>(j, "add_bos", where);
  m.add_eos = get_field<bool>(j, "add_eos", where);
  m.token_bytes = get_field<int>(j, "token_bytes", where);
  STRATA_CHECK(m.token_bytes == 2 || m.token_bytes == 4, where, ": token_bytes must be 2 or 4");
  STRATA_CHECK(m.token_bytes == 4 || m.vocab_size <= 65536, where,
               ": token_bytes 2 cannot hold vocab_size ", m.vocab_size);
  m.train = split_from_json(j, "train", where);
  m.val = split_from_json(j, "val", where);
  m.sources = j.contains("sources") ? j.at("sources") : nlohmann::json::array();
  return m;
}

TokenDataset TokenDataset::open(const std::string& dir, const std::string& split) {
  STRATA_CHECK(split == "train" || split == "val", "dataset ", dir, ": unknown split '", split,
               "' (choose train or val)");
  std::error_code ec;
  STRATA_CHECK(fs::is_directory(dir, ec), "dataset ", dir, ": no such directory");
  const std::string meta_path = (fs::path(dir) / "meta.json").string();
  STRATA_CHECK(fs::is_regular_file(meta_path, ec), "dataset ", dir,
               ": no meta.json (not a prepared dataset, or `strata data prepare` did not finish)");
  nlohmann::json j;
  // Nesting is bounded while parsing: "sources" is copied, recursively, and
  // a value nested 100,000 deep would overflow the stack.
  constexpr int kMaxDepth = 64;
  const nlohmann::json::parser_callback_t bounded = [&](int depth, nlohmann::json::parse_event_t,
                                                        nlohmann::json&) {
    STRATA_CHECK(depth <= kMaxDepth, meta_path, ": nests JSON deeper than ", kMaxDepth, " levels");
    return true;
  };
  try {
    j = nlohmann::json::parse(read_all(meta_path, "dataset metadata"), bounded);
  } catch (const nlohmann::json::exception& e) {
    fail(cat(meta_path, ": not valid JSON (", e.what(), ")"));
  }
  auto meta = std::make_shared<DatasetMeta>(DatasetMeta::from_json(j, meta_path));
  const SplitMeta& sm = split == "train" ? meta->train : meta->val;

  TokenDataset ds;
  // Room for what the shards can hold, not for what meta.json claims: a
  // wrong count must not allocate before the shards are checked against it.
  uint64_t shard_bytes = 0;
  for (const auto& name : sm.shards) {
    const uintmax_t n = fs::file_size(fs::path(dir) / name, ec);
    if (!ec) shard_bytes += n;  // a missing shard is reported when it is read
  }
  ds.tokens_.reserve(size_t(std::min<uint64_t>(uint64_t(sm.tokens), shard_bytes / 2)));
  ds.doc_starts_.reserve(size_t(std::min<uint64_t>(uint64_t(sm.documents), shard_bytes / 8)) + 1);
  for (const auto& name : sm.shards)
    read_shard_checked((fs::path(dir) / name).string(), ds.tokens_, ds.doc_starts_,
                       meta->vocab_size, meta->token_bytes);
  if (ds.doc_starts_.empty()) ds.doc_starts_.push_back(0);
  STRATA_CHECK(ds.num_tokens() == sm.tokens && ds.num_documents() == sm.documents, meta_path,
               ": split '", split, "' lists ", sm.tokens, " tokens and ", sm.documents,
               " documents, its shards hold ", ds.num_tokens(), " and ", ds.num_documents());
  ds.meta_ = std::move(meta);
  ds.dir_ = dir;
  ds.split_ = split;
  return ds;
}

void write_shard(const std::string& path, const std::vector<int32_t>& tokens,
                 const std::vector<int64_t>& doc_starts, int token_bytes) {
  STRATA_CHECK(token_bytes == 2 || token_bytes == 4, "shard ", path, ": token width ", token_bytes,
               " (expected 2 or 4)");
  STRATA_CHECK(
      !doc_starts.empty() && doc_starts.front() == 0 && doc_starts.back() == int64_t(tokens.size()),
      "shard ", path, ": document starts must begin at 0 and end at the token count ",
      tokens.size());
  for (size_t d = 0; d + 1 < doc_starts.size(); ++d)
    STRATA_CHECK(doc_starts[d] <= doc_starts[d + 1], "shard ", path,
                 ": document starts must not decrease");
  const uint64_t count = tokens.size(), docs = doc_starts.size() - 1;
  std::vector<uint8_t> buf(kHeaderBytes + count * token_bytes + (docs + 1) * 8, 0);
  std::memcpy(buf.data(), kMagic, 8);
  store_le<uint32_t>(buf.data() + 8, kVersion);
  store_le<uint32_t>(buf.data() + 12, uint32_t(token_bytes));
  store_le<uint64_t>(buf.data() + 16, count);
  store_le<uint64_t>(buf.data() + 24, docs);
  uint8_t* tp = buf.data() + kHeaderBytes;
  const int64_t limit = token_bytes == 2 ? 65536 : int64_t(1) << 31;
  for (uint64_t i = 0; i < count; ++i) {
    STRATA_CHECK(tokens[i] >= 0 && tokens[i] < limit, "shard ", path, ": token id ", tokens[i],
                 " does not fit in ", token_bytes, " bytes");
    if (token_bytes == 2)
      store_le<uint16_t>(tp + 2 * i, uint16_t(tokens[i]));
    else
      store_le<uint32_t>(tp + 4 * i, uint32_t(tokens[i]));
  }
  uint8_t* dp = tp + count * token_bytes;
  for (uint64_t d = 0; d <= docs; ++d) store_le<uint64_t>(dp + 8 * d, uint64_t(doc_starts[d]));

  const std::string tmp = path + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  STRATA_CHECK(f, "shard ", path, ": cannot open ", tmp, " for writing");
  const bool wrote = std::fwrite(buf.data(), 1, buf.size(), f) == buf.size();
  const bool closed = std::fclose(f) == 0;
  std::error_code ec;
  if (!wrote || !closed) {
    fs::remove(tmp, ec);
    fail(cat("shard ", path, ": write error (disk full?)"));
  }
  fs::rename(tmp, path, ec);
  STRATA_CHECK(!ec, "shard ", path, ": cannot rename ", tmp, " into place: ", ec.message());
}

void read_shard(const std::string& path, std::vector<int32_t>& tokens,
                std::vector<int64_t>& doc_starts) {
  read_shard_checked(path, tokens, doc_starts, 0, 0);
}

}  // namespace strata
