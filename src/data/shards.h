// Token shards: the on-disk dataset format written by `strata data prepare`
// and read by the loaders. See docs/training.md, "Data format".
//
// A dataset directory holds meta.json and, per split ("train", "val"), shard
// files <split>-00000.tokens, <split>-00001.tokens, ... Each shard is
//   header (64 bytes, little-endian):
//     char[8]  magic "STRATOK1"
//     uint32   version (1)
//     uint32   token width in bytes (2: uint16 ids, vocab <= 65536; 4: uint32)
//     uint64   number of tokens
//     uint64   number of documents
//     uint8[32] reserved (zero)
//   tokens      (count x width bytes)
//   doc starts  (documents + 1) x uint64: offset of each document's first
//               token within the shard; the last entry equals the token count
// Documents never straddle shards. Every document starts with BOS when the
// dataset was prepared with add_bos (the default).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace strata {

struct SplitMeta {
  std::vector<std::string> shards;  // file names relative to the dataset directory
  int64_t tokens = 0;
  int64_t documents = 0;
};

struct DatasetMeta {
  std::string format = "strata-tokens-v1";
  std::string tokenizer_sha256;
  int vocab_size = 0;
  int32_t bos_id = -1, eos_id = -1;
  bool add_bos = true, add_eos = false;
  int token_bytes = 2;
  SplitMeta train, val;
  nlohmann::json sources;  // input files with their sha256 and document counts

  nlohmann::json to_json() const;
  static DatasetMeta from_json(const nlohmann::json& j, const std::string& where);
};

// One split of a prepared dataset, loaded into memory (ids widened to int32).
class TokenDataset {
 public:
  // Opens <dir>/meta.json and the split's shards, checking magic, version,
  // sizes and that token ids are below vocab_size. Errors name the file.
  static TokenDataset open(const std::string& dir, const std::string& split);

  const DatasetMeta& meta() const { return *meta_; }
  int64_t num_tokens() const { return int64_t(tokens_.size()); }
  int64_t num_documents() const { return int64_t(doc_starts_.size()) - 1; }
  const int32_t* tokens() const { return tokens_.data(); }
  // Offset of document d's first token in tokens(); doc_start(num_documents()) == num_tokens().
  int64_t doc_start(int64_t d) const { return doc_starts_[d]; }
  // Where it was opened from (for messages): the dataset directory and split name.
  const std::string& dir() const { return dir_; }
  const std::string& split() const { return split_; }

 private:
  std::shared_ptr<const DatasetMeta> meta_;
  std::string dir_, split_;
  std::vector<int32_t> tokens_;
  std::vector<int64_t> doc_starts_;
};

// Writes one shard file atomically (temporary name, then rename).
void write_shard(const std::string& path, const std::vector<int32_t>& tokens,
                 const std::vector<int64_t>& doc_starts, int token_bytes);
// Reads one shard file; appends its tokens and document starts (rebased to
// `tokens.size()` at entry) to the vectors. When doc_starts ends with that
// offset (the closing entry of a previously read shard) it is not repeated, so
// reading shards in turn gives the document index of their concatenation.
void read_shard(const std::string& path, std::vector<int32_t>& tokens,
                std::vector<int64_t>& doc_starts);

struct PrepareOptions {
  std::string tokenizer;            // .model path
  std::vector<std::string> inputs;  // plain-text files, or .jsonl files
  std::string out_dir;
  // How plain-text files split into documents: "paragraph" (blank lines),
  // "line", or "file" (each file is one document). JSONL: one document per
  // line, text taken from `jsonl_field`.
  std::string doc_split = "paragraph";
  std::string jsonl_field = "text";
  double val_fraction = 0.01;  // share of documents held out, chosen by a seeded hash
  uint64_t seed = 1234;
  bool add_bos = true, add_eos = false;
  int64_t shard_tokens = int64_t(1) << 26;  // tokens per shard before starting a new one
};

// Tokenises the inputs and writes the dataset (meta.json last, so a dataset
// directory with meta.json is complete). Prints progress to stderr. Bad input
// (missing file, bad JSONL line, missing field) throws strata::Error naming
// file and line.
DatasetMeta prepare_dataset(const PrepareOptions& options);

}  // namespace strata
