// SFT data: JSONL conversations -> (tokens, loss mask) examples -> batches.
//
// Rendering encodes each piece of text (prefix, content, suffix) separately and
// concatenates the ids, so the boundary between masked and trained tokens is
// always a token boundary. (With sentencepiece's dummy prefix each encoded
// piece starts with a word boundary; a prompt rendered for generation must be
// encoded the same way, piece by piece, to match training.)
#include "data/sft.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "core/targets.h"
#include "core/text.h"
#include "data/row_loader.h"

namespace strata {
namespace {

namespace fs = std::filesystem;

constexpr uint32_t kSftShuffle = 0x53465431u;  // "SFT1"

bool is_blank(std::string_view line) {
  return line.find_first_not_of(" \t\r\f\v") == std::string_view::npos;
}

// One JSONL line -> (role, content) messages. `where` is "<path>:<line>".
std::vector<std::pair<std::string, std::string>> parse_conversation(const nlohmann::json& j,
                                                                    const std::string& where) {
  STRATA_CHECK(j.is_object(), where, ": expected a JSON object");
  std::vector<std::pair<std::string, std::string>> msgs;
  const bool has_messages = j.contains("messages");
  const bool has_pr = j.contains("prompt") || j.contains("response");
  STRATA_CHECK(has_messages || has_pr, where,
               ": expected {\"prompt\": ..., \"response\": ...} or {\"messages\": [...]}");
  STRATA_CHECK(!(has_messages && has_pr), where,
               ": has both 'messages' and 'prompt'/'response'; use one form");
  if (has_pr) {
    for (const char* key : {"prompt", "response"}) {
      STRATA_CHECK(j.contains(key), where, ": missing field '", key, "'");
      STRATA_CHECK(j.at(key).is_string(), where, ": field '", key, "' must be a string");
    }
    msgs.emplace_back("user", j.at("prompt").get<std::string>());
    msgs.emplace_back("assistant", j.at("response").get<std::string>());
    return msgs;
  }
  const auto& m = j.at("messages");
  STRATA_CHECK(m.is_array(), where, ": field 'messages' must be a list");
  bool assistant = false;
  for (size_t i = 0; i < m.size(); ++i) {
    const auto& msg = m[i];
    STRATA_CHECK(msg.is_object(), where, ": message ", i + 1,
                 " must be an object {\"role\": ..., \"content\": ...}");
    STRATA_CHECK(msg.contains("role") && msg.at("role").is_string(), where, ": message ", i + 1,
                 ": 'role' must be a string");
    STRATA_CHECK(msg.contains("content") && msg.at("content").is_string(), where, ": message ",
                 i + 1, ": 'content' must be a string");
    const std::string role = msg.at("role").get<std::string>();
    STRATA_CHECK(role == "system" || role == "user" || role == "assistant", where, ": message ",
                 i + 1, ": unknown role '", one_line(role),
                 "' (expected system, user or assistant)");
    assistant |= role == "assistant";
    msgs.emplace_back(role, msg.at("content").get<std::string>());
  }
  STRATA_CHECK(assistant, where, ": the conversation has no assistant message");
  return msgs;
}

// Rows are whole examples: truncated to seq_len + 1 tokens, padded after.
class SftRowLoader final : public detail::RowLoader {
 public:
  SftRowLoader(std::shared_ptr<const SftDataset> data, int seq_len, uint64_t seed, int32_t pad)
      : RowLoader(seq_len),
        data_(std::move(data)),
        seed_(seed),
        pad_(pad),
        order_([this](int64_t epoch) {
          return detail::shuffled_order(int64_t(data_->examples().size()), seed_, kSftShuffle,
                                        epoch);
        }) {}

  int64_t rows_per_epoch() const override { return int64_t(data_->examples().size()); }
  std::string describe() const override {
    return cat("sft ", data_->path, ": ", data_->examples().size(),
               " examples, one per row (truncated to ", seq_len_, "+1 tokens), shuffled (seed ",
               seed_, ")");
  }

 protected:
  void fill_row(int64_t epoch, int64_t index, int32_t* tokens, int32_t* targets) override {
    const SftExample& ex = data_->examples()[size_t(order_.get(epoch)[size_t(index)])];
    const int64_t n = std::min<int64_t>(int64_t(ex.tokens.size()), int64_t(seq_len_) + 1);
    for (int t = 0; t < seq_len_; ++t) {
      tokens[t] = t < n ? ex.tokens[size_t(t)] : pad_;
      targets[t] = t + 1 < n && ex.loss[size_t(t) + 1] ? ex.tokens[size_t(t) + 1] : kIgnoreIndex;
    }
  }

 private:
  std::shared_ptr<const SftDataset> data_;
  uint64_t seed_;
  int32_t pad_;
  detail::EpochCache<std::vector<int64_t>> order_;
};

// The epoch's shuffled examples, concatenated: tokens and per-token loss flags.
struct PackedStream {
  std::vector<int32_t> tokens;
  std::vector<uint8_t> loss;
};

// Rows are windows of seq_len + 1 tokens (stride seq_len) over the packed stream.
class SftPackedLoader final : public detail::RowLoader {
 public:
  SftPackedLoader(std::shared_ptr<const SftDataset> data, int seq_len, uint64_t seed,
                  int64_t total_tokens)
      : RowLoader(seq_len),
        data_(std::move(data)),
        seed_(seed),
        total_(total_tokens),
        windows_((total_tokens - 1) / seq_len),
        stream_([this](int64_t epoch) {
          PackedStream s;
          s.tokens.reserve(size_t(total_));
          s.loss.reserve(size_t(total_));
          const auto& exs = data_->examples();
          for (const int64_t i :
               detail::shuffled_order(int64_t(exs.size()), seed_, kSftShuffle, epoch)) {
            const SftExample& ex = exs[size_t(i)];
            s.tokens.insert(s.tokens.end(), ex.tokens.begin(), ex.tokens.end());
            s.loss.insert(s.loss.end(), ex.loss.begin(), ex.loss.end());
          }
          return s;
        }) {}

  int64_t rows_per_epoch() const override { return windows_; }
  std::string describe() const override {
    return cat("sft ", data_->path, ": ", data_->examples().size(), " examples, ", total_,
               " tokens packed into ", windows_, " windows of ", seq_len_,
               "+1 tokens, shuffled (seed ", seed_, ")");
  }

 protected:
  void fill_row(int64_t epoch, int64_t index, int32_t* tokens, int32_t* targets) override {
    const PackedStream& s = stream_.get(epoch);
    const size_t start = size_t(index) * size_t(seq_len_);
    for (size_t t = 0; t < size_t(seq_len_); ++t) {
      tokens[t] = s.tokens[start + t];
      targets[t] = s.loss[start + t + 1] ? s.tokens[start + t + 1] : kIgnoreIndex;
    }
  }

 private:
  std::shared_ptr<const SftDataset> data_;
  uint64_t seed_;
  int64_t total_, windows_;
  detail::EpochCache<PackedStream> stream_;
};

}  // namespace

SftExample SftDataset::render(const std::vector<std::pair<std::string, std::string>>& messages,
                              const Tokenizer& tok, const ChatTemplate& tmpl) {
  ChatTokens c = encode_conversation(tmpl, tok, messages);
  SftExample ex;
  ex.tokens = std::move(c.tokens);
  ex.loss = std::move(c.assistant);
  return ex;
}

std::shared_ptr<const SftDataset> SftDataset::load_jsonl(const std::string& path,
                                                         const Tokenizer& tok,
                                                         const ChatTemplate& tmpl) {
  std::error_code ec;
  STRATA_CHECK(fs::is_regular_file(path, ec), "sft data ", path, ": no such file");
  std::ifstream in(path, std::ios::binary);
  STRATA_CHECK(in, "sft data ", path, ": cannot open for reading");
  auto ds = std::make_shared<SftDataset>();
  ds->path = path;
  std::string line;
  int64_t number = 0;
  while (std::getline(in, line)) {
    ++number;
    if (is_blank(line)) continue;
    const std::string where = cat(path, ":", number);
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& e) {
      fail(cat(where, ": not valid JSON (", e.what(), ")"));
    }
    const auto messages = parse_conversation(j, where);
    try {
      ds->examples_.push_back(render(messages, tok, tmpl));
    } catch (const Error& e) {
      fail(cat(where, ": ", e.what()));
    }
  }
  STRATA_CHECK(!in.bad(), "sft data ", path, ": read error");
  STRATA_CHECK(!ds->examples_.empty(), "sft data ", path, ": no examples");
  return ds;
}

std::unique_ptr<Loader> make_sft_loader(std::shared_ptr<const SftDataset> data, int seq_len,
                                        uint64_t seed, bool packing, int32_t pad_id) {
  STRATA_CHECK(data, "sft loader: no dataset");
  STRATA_CHECK(seq_len >= 1, "sft loader: sequence length must be positive, got ", seq_len);
  STRATA_CHECK(!data->examples().empty(), "sft loader: ", data->path, " has no examples");
  if (!packing) {
    // Padding tokens are never targets and sit after the example, so under
    // causal attention their value is irrelevant; a tokenizer without a PAD
    // piece (pad_id -1) pads with id 0.
    return std::make_unique<SftRowLoader>(std::move(data), seq_len, seed, std::max(pad_id, 0));
  }
  int64_t total = 0;
  for (const auto& ex : data->examples()) total += int64_t(ex.tokens.size());
  STRATA_CHECK(total >= int64_t(seq_len) + 1, "sft loader: ", data->path, " has ", total,
               " tokens, fewer than sequence length + 1 = ", int64_t(seq_len) + 1,
               " (needed for packing)");
  return std::make_unique<SftPackedLoader>(std::move(data), seq_len, seed, total);
}

}  // namespace strata
