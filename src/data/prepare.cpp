// `strata data prepare`: text or JSONL -> token shards + meta.json.
//
// Two passes over the inputs. The first reads and splits every file (checking
// JSONL lines, so bad input fails before anything is written) and counts the
// documents; that fixes the train/val assignment, which is a pure function of
// (seed, global document index), plus the guarantee of a non-empty val and
// train split. The second pass tokenises each file's documents in parallel
// (OpenMP, results kept in document order) and appends them to the split's
// current shard; a shard is closed before a document would take it past
// shard_tokens, so documents never straddle shards. meta.json is written last.
#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "core/file.h"
#include "core/log.h"
#include "core/philox.h"
#include "core/progress.h"
#include "core/sha256.h"
#include "core/text.h"
#include "core/timer.h"
#include "data/shards.h"
#include "data/tokenizer.h"

namespace strata {
namespace {

namespace fs = std::filesystem;

// Philox purpose word for the train/val assignment.
constexpr uint32_t kSplitPurpose = 0x56414c31u;  // "VAL1"

bool is_blank(std::string_view line) {
  return line.find_first_not_of(" \t\r\f\v") == std::string_view::npos;
}

bool is_jsonl(const std::string& path) {
  const std::string ext = fs::path(path).extension().string();
  return ext == ".jsonl" || ext == ".JSONL";
}

// Calls fn(line, line_number) for every line of text (without its '\n').
template <typename Fn>
void for_each_line(const std::string& text, Fn&& fn) {
  size_t pos = 0;
  int64_t number = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    fn(std::string_view(text).substr(pos, end - pos), ++number);
    pos = end + 1;
  }
}

// Splits one input file into documents (empty documents are dropped).
std::vector<std::string> split_documents(const std::string& path, const std::string& text,
                                         const PrepareOptions& o) {
  std::vector<std::string> docs;
  if (is_jsonl(path)) {
    for_each_line(text, [&](std::string_view line, int64_t n) {
      if (is_blank(line)) return;
      nlohmann::json j;
      try {
        j = nlohmann::json::parse(line);
      } catch (const nlohmann::json::exception& e) {
        fail(cat(path, ":", n, ": not valid JSON (", e.what(), ")"));
      }
      STRATA_CHECK(j.is_object(), path, ":", n, ": expected a JSON object");
      STRATA_CHECK(j.contains(o.jsonl_field), path, ":", n, ": no field '", o.jsonl_field, "'");
      STRATA_CHECK(j.at(o.jsonl_field).is_string(), path, ":", n, ": field '", o.jsonl_field,
                   "' is not a string");
      std::string s = j.at(o.jsonl_field).get<std::string>();
      if (!s.empty()) docs.push_back(std::move(s));
    });
  } else if (o.doc_split == "line") {
    for_each_line(text, [&](std::string_view line, int64_t) {
      if (!is_blank(line)) docs.emplace_back(line);
    });
  } else if (o.doc_split == "paragraph") {
    std::string cur;
    bool open = false;
    for_each_line(text, [&](std::string_view line, int64_t) {
      if (is_blank(line)) {
        if (open) docs.push_back(std::move(cur));
        cur.clear();
        open = false;
        return;
      }
      if (open) cur += '\n';
      cur += line;
      open = true;
    });
    if (open) docs.push_back(std::move(cur));
  } else {  // "file": the whole file, without its trailing newlines
    size_t end = text.size();
    while (end > 0 && (text[end - 1] == '\n' || text[end - 1] == '\r')) --end;
    if (!is_blank(std::string_view(text).substr(0, end))) docs.push_back(text.substr(0, end));
  }
  return docs;
}

// Accumulates one split's documents into shards of about shard_tokens tokens.
class ShardWriter {
 public:
  ShardWriter(std::string dir, std::string split, SplitMeta& meta, int token_bytes,
              int64_t shard_tokens)
      : dir_(std::move(dir)),
        split_(std::move(split)),
        meta_(meta),
        token_bytes_(token_bytes),
        shard_tokens_(shard_tokens) {}

  void add(const std::vector<int32_t>& doc) {
    if (!tokens_.empty() && int64_t(tokens_.size() + doc.size()) > shard_tokens_) flush();
    tokens_.insert(tokens_.end(), doc.begin(), doc.end());
    starts_.push_back(int64_t(tokens_.size()));
    meta_.tokens += int64_t(doc.size());
    meta_.documents += 1;
  }

  void flush() {
    if (tokens_.empty() && starts_.size() <= 1) return;
    char name[64];
    std::snprintf(name, sizeof name, "%s-%05zu.tokens", split_.c_str(), meta_.shards.size());
    write_shard((fs::path(dir_) / name).string(), tokens_, starts_, token_bytes_);
    meta_.shards.push_back(name);
    tokens_.clear();
    starts_.assign(1, 0);
  }

 private:
  std::string dir_, split_;
  SplitMeta& meta_;
  int token_bytes_;
  int64_t shard_tokens_;
  std::vector<int32_t> tokens_;
  std::vector<int64_t> starts_{0};
};

// Removes what a previous run may have left: meta.json first (so the directory
// no longer reads as a complete dataset), then old shards and temporaries.
void clear_previous(const std::string& dir) {
  std::error_code ec;
  fs::remove(fs::path(dir) / "meta.json", ec);
  STRATA_CHECK(!ec, "dataset ", dir, ": cannot remove the old meta.json: ", ec.message());
  // <split>-NNNNN.tokens, their .tmp, and meta.json.tmp.
  auto ours = [](const std::string& name) {
    if (name == "meta.json.tmp") return true;
    std::string_view n(name);
    if (n.size() > 4 && n.substr(n.size() - 4) == ".tmp") n.remove_suffix(4);
    if (n.rfind("train-", 0) == 0)
      n.remove_prefix(6);
    else if (n.rfind("val-", 0) == 0)
      n.remove_prefix(4);
    else
      return false;
    if (n.size() != 12 || n.substr(5) != ".tokens") return false;
    return std::all_of(n.begin(), n.begin() + 5, [](char c) { return c >= '0' && c <= '9'; });
  };
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.is_regular_file() && ours(e.path().filename().string())) fs::remove(e.path(), ec);
}

std::string with_commas(int64_t n) {
  std::string s = std::to_string(n);
  for (int i = int(s.size()) - 3; i > (n < 0 ? 1 : 0); i -= 3) s.insert(size_t(i), ",");
  return s;
}

}  // namespace

DatasetMeta prepare_dataset(const PrepareOptions& o) {
  STRATA_CHECK(!o.inputs.empty(), "data prepare: no input files");
  STRATA_CHECK(!o.out_dir.empty(), "data prepare: no output directory");
  STRATA_CHECK(o.doc_split == "paragraph" || o.doc_split == "line" || o.doc_split == "file",
               "data prepare: unknown document split '", o.doc_split,
               "' (choose paragraph, line or file)");
  STRATA_CHECK(!o.jsonl_field.empty(), "data prepare: empty JSONL field name");
  STRATA_CHECK(o.val_fraction >= 0 && o.val_fraction <= 1, "data prepare: val fraction ",
               o.val_fraction, " must be in [0, 1]");
  STRATA_CHECK(o.shard_tokens > 0, "data prepare: shard tokens must be positive");

  const Tokenizer tok = Tokenizer::load(o.tokenizer);
  STRATA_CHECK(!o.add_bos || tok.bos_id() >= 0, "tokenizer ", o.tokenizer,
               " has no BOS token (use --no-bos)");
  STRATA_CHECK(!o.add_eos || tok.eos_id() >= 0, "tokenizer ", o.tokenizer, " has no EOS token");

  // Pass 1: read, check and count; fix the train/val assignment.
  Timer timer;
  const PhiloxStream split_rng(o.seed, kSplitPurpose, 0);
  int64_t total_docs = 0, n_val = 0;
  int64_t min_u_doc = -1, max_u_doc = -1;
  double min_u = 2, max_u = -1;
  uint64_t total_bytes = 0;
  std::vector<std::string> hashes;
  std::vector<int64_t> doc_counts;
  for (const auto& path : o.inputs) {
    const std::string text = read_file(path, "input");
    require_text(text, cat("input ", path));  // binary data is not a corpus
    total_bytes += text.size();
    hashes.push_back(sha256_hex(text));
    const int64_t n = int64_t(split_documents(path, text, o).size());
    for (int64_t i = 0; i < n; ++i) {
      const double u = split_rng.uniform(uint64_t(total_docs + i));
      if (u < o.val_fraction) ++n_val;
      if (u < min_u) min_u = u, min_u_doc = total_docs + i;
      if (u > max_u) max_u = u, max_u_doc = total_docs + i;
    }
    doc_counts.push_back(n);
    total_docs += n;
  }
  STRATA_CHECK(total_docs > 0, "data prepare: the inputs hold no documents");
  // Guarantees: val is non-empty when asked for (and there is a document to
  // spare); train is never empty.
  int64_t force_val = -1, force_train = -1;
  if (o.val_fraction > 0 && n_val == 0 && total_docs >= 2) force_val = min_u_doc, n_val = 1;
  if (n_val == total_docs) force_train = max_u_doc, --n_val;
  auto is_val = [&](int64_t d) {
    if (d == force_val) return true;
    if (d == force_train) return false;
    return split_rng.uniform(uint64_t(d)) < o.val_fraction;
  };

  std::error_code ec;
  fs::create_directories(o.out_dir, ec);
  STRATA_CHECK(fs::is_directory(o.out_dir, ec), "data prepare: cannot create output directory ",
               o.out_dir);
  clear_previous(o.out_dir);

  DatasetMeta meta;
  meta.tokenizer_sha256 = tok.sha256();
  meta.vocab_size = tok.vocab_size();
  meta.bos_id = tok.bos_id();
  meta.eos_id = tok.eos_id();
  meta.add_bos = o.add_bos;
  meta.add_eos = o.add_eos;
  meta.token_bytes = meta.vocab_size <= 65536 ? 2 : 4;
  meta.sources = nlohmann::json::array();
  ShardWriter train(o.out_dir, "train", meta.train, meta.token_bytes, o.shard_tokens);
  ShardWriter val(o.out_dir, "val", meta.val, meta.token_bytes, o.shard_tokens);

  log::info("data: ", o.inputs.size(), " file(s), ", with_commas(total_docs), " documents (",
            with_commas(n_val), " for val), ", fixed(double(total_bytes) / 1e6, 1),
            " MB, tokenizer ", o.tokenizer, " (vocab ", meta.vocab_size, ")");

  // Pass 2: tokenise and write.
  int64_t doc_base = 0;
  std::string val_text;  // the held-out documents as text (val.txt)
  for (size_t f = 0; f < o.inputs.size(); ++f) {
    const std::string& path = o.inputs[f];
    Timer file_timer;
    const std::string text = read_file(path, "input");
    const std::vector<std::string> docs = split_documents(path, text, o);
    STRATA_CHECK(sha256_hex(text) == hashes[f] && int64_t(docs.size()) == doc_counts[f], "input ",
                 path, ": changed while it was being prepared");
    std::vector<std::vector<int32_t>> ids(docs.size());
    std::string error;
    ProgressMeter progress(cat("data: tokenising ", path), text.size());
#pragma omp parallel for schedule(dynamic, 16)
    for (int64_t i = 0; i < int64_t(docs.size()); ++i) {
      progress.add(docs[size_t(i)].size());
      try {
        std::vector<int32_t> v;
        std::vector<int32_t> body = tok.encode(docs[size_t(i)]);
        v.reserve(body.size() + 2);
        if (o.add_bos) v.push_back(tok.bos_id());
        v.insert(v.end(), body.begin(), body.end());
        if (o.add_eos) v.push_back(tok.eos_id());
        ids[size_t(i)] = std::move(v);
      } catch (const std::exception& e) {
#pragma omp critical(strata_prepare_error)
        if (error.empty()) error = e.what();
      }
    }
    STRATA_CHECK(error.empty(), "input ", path, ": ", error);
    progress.finish();
    int64_t file_tokens = 0;
    for (size_t i = 0; i < ids.size(); ++i) {
      if (ids[i].empty()) continue;  // only when a document encodes to nothing and no BOS/EOS
      const bool v = is_val(doc_base + int64_t(i));
      (v ? val : train).add(ids[i]);
      if (v) val_text += (val_text.empty() ? "" : "\n\n") + docs[i];
      file_tokens += int64_t(ids[i].size());
    }
    doc_base += int64_t(docs.size());
    meta.sources.push_back({{"path", path},
                            {"sha256", hashes[f]},
                            {"bytes", text.size()},
                            {"documents", docs.size()}});
    const double secs = std::max(file_timer.seconds(), 1e-9);
    log::info("data: [", f + 1, "/", o.inputs.size(), "] ", path, ": ",
              with_commas(int64_t(docs.size())), " documents, ", with_commas(file_tokens),
              " tokens, ", fixed(double(text.size()) / secs / 1e6, 2), " MB/s");
  }
  train.flush();
  val.flush();

  // The validation documents as text, blank-line separated: held-out text
  // for `strata eval --perplexity`.
  if (!val_text.empty())
    write_file_atomic((fs::path(o.out_dir) / "val.txt").string(), val_text + "\n");
  // meta.json last, atomically: a directory with meta.json is a complete dataset.
  const fs::path meta_path = fs::path(o.out_dir) / "meta.json";
  write_file_atomic(meta_path.string(), meta.to_json().dump(2) + "\n");
  const double secs = std::max(timer.seconds(), 1e-9);
  log::info("data: wrote ", o.out_dir, ": train ", with_commas(meta.train.tokens), " tokens / ",
            with_commas(meta.train.documents), " documents in ", meta.train.shards.size(),
            " shard(s); val ", with_commas(meta.val.tokens), " tokens / ",
            with_commas(meta.val.documents), " documents in ", meta.val.shards.size(),
            " shard(s); ", meta.token_bytes, "-byte ids; ", fixed(secs, 1), " s, ",
            fixed(double(total_bytes) / secs / 1e6, 2), " MB/s");
  return meta;
}

}  // namespace strata
