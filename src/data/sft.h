// Supervised fine-tuning data: JSONL conversations rendered with a chat
// template; the loss is taken only on assistant tokens.
//
// Accepted lines (one JSON object per line, blank lines skipped):
//   {"prompt": "...", "response": "..."}
//   {"messages": [{"role": "system"|"user"|"assistant", "content": "..."}, ...]}
// A conversation must contain at least one assistant message.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/chat.h"
#include "data/loader.h"
#include "data/tokenizer.h"

namespace strata {

// Rendering (data/chat.h): strata's own template (BOS, then per message
// prefix + content + suffix, EOS after each assistant message; loss on the
// assistant content, its suffix and the EOS) or a model's Hugging Face chat
// template (loss on the assistant's answer through its end-of-turn marker);
// never on prefixes, user or system text.
struct SftExample {
  std::vector<int32_t> tokens;
  std::vector<uint8_t> loss;  // loss[t] = 1: tokens[t] is a target (predicted from tokens[<t])
};

class SftDataset {
 public:
  // Throws strata::Error("<path>:<line>: ...") for malformed lines.
  static std::shared_ptr<const SftDataset> load_jsonl(const std::string& path, const Tokenizer& tok,
                                                      const ChatTemplate& tmpl);
  // Renders one conversation (used by load_jsonl, and by tests).
  static SftExample render(const std::vector<std::pair<std::string, std::string>>& messages,
                           const Tokenizer& tok, const ChatTemplate& tmpl);

  const std::vector<SftExample>& examples() const { return examples_; }
  std::string path;

 private:
  std::vector<SftExample> examples_;
};

// SFT batches. Without packing, each row is one example (truncated to
// seq_len + 1 tokens, padded with ignored targets). With packing, the epoch's
// shuffled examples are concatenated and cut like pretraining windows (the
// rows may then attend across example boundaries). Examples are shuffled per
// epoch with Philox(seed, epoch).
std::unique_ptr<Loader> make_sft_loader(std::shared_ptr<const SftDataset> data, int seq_len,
                                        uint64_t seed, bool packing, int32_t pad_id);

}  // namespace strata
