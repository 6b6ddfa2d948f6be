// Text out of generation (`strata generate`): the new tokens as text that
// reads on from the prompt, streamed as it becomes final and cut at a stop
// string; a batch of prompts from a JSONL file; and the run's summary. The
// infer layer sees token ids only: the caller's tokenizer comes in as a
// Detokenizer (and an Encoder for prompts).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "infer/generate.h"
#include "model/model.h"

namespace strata {

using Detokenizer = std::function<std::string(const std::vector<int32_t>&)>;
// A prompt's ids; `where` ("<file>:<line>") names it in errors.
using Encoder =
    std::function<std::vector<int32_t>(const std::string& text, const std::string& where)>;

// The text of new tokens `toks` as it reads after `prompt` (whose text is
// prompt_text): decoded together with the prompt (a word's leading space
// belongs to its token, and a decoder drops it at the start of a text), minus
// the prompt's text.
std::string text_after(const Detokenizer& decode, const std::vector<int32_t>& prompt,
                       const std::string& prompt_text, const std::vector<int32_t>& toks);

// The generated text, piece by piece as it becomes final: the whole
// continuation is decoded after each token and what is new is released, so a
// character split over byte-fallback tokens comes out whole. With a stop
// string, what could be its start is held back, and generation stops when it
// appears (neither it nor what follows is shown).
class TextStream {
 public:
  // `eos` (-1: none) ends the text without being part of it.
  // `more_eos`: other tokens that end it the same way.
  TextStream(Detokenizer decode, std::vector<int32_t> prompt, std::string stop, int32_t eos,
             std::vector<int32_t> more_eos = {});
  // Takes a generated token; returns the text to show now (maybe "").
  std::string push(int32_t token);
  // After generation: the text held back for a stop string that never came.
  std::string finish();
  bool stopped() const { return stopped_; }
  const std::string& shown() const { return shown_; }
  const std::vector<int32_t>& tokens() const { return tokens_; }

 private:
  std::string continuation() const;
  Detokenizer decode_;
  std::vector<int32_t> prompt_, tokens_;
  std::string prompt_text_, stop_, shown_;
  int32_t eos_;
  std::vector<int32_t> more_eos_;
  bool stopped_ = false;
};

struct GeneratedText {
  std::string text;  // shown: up to the stop string, without EOS
  GenerateStats stats;
  double seconds = 0;  // the whole run, the last text released included
};

// Generates after `prompt` (KV cache; no_cache: the whole model over the
// whole sequence per token, generate_simple), passing the text to `on_text`
// as it becomes final (TextStream; EOS: options.eos_id).
GeneratedText generate_text(Model<float>& model, const std::vector<int32_t>& prompt,
                            GenerateOptions options, const Detokenizer& decode,
                            const std::string& stop, bool no_cache,
                            const std::function<void(const std::string&)>& on_text);

// A JSONL file of prompts, one {"prompt": TEXT} per line (blank lines
// skipped), each encoded with `encode` as it is read. Errors name file and
// line.
struct PromptFile {
  std::vector<std::string> texts;
  std::vector<std::vector<int32_t>> ids;
};
PromptFile read_prompt_file(const std::string& path, const Encoder& encode);

// Every prompt in one batch (generate_batch); each result's text as it reads
// after its prompt, without EOS (options.eos_id), cut at `stop`.
struct GeneratedBatch {
  std::vector<std::string> texts;
  std::vector<size_t> new_tokens;  // per prompt, EOS included
  GenerateStats stats;
  double seconds = 0;
};
GeneratedBatch generate_texts(Model<float>& model, const std::vector<std::vector<int32_t>>& prompts,
                              const GenerateOptions& options, const Detokenizer& decode,
                              const std::string& stop);

// The run as `strata generate --json` prints it: prompt, text, token counts,
// prefill and decode times and speeds, exit layer, hit_context, and for
// self-speculative decoding the acceptance rate and tokens per full pass.
nlohmann::json generation_json(const std::string& prompt, const GeneratedText& g,
                               const GenerateOptions& options);

// The summary lines `strata generate` prints on stderr (one prompt; a second
// line for self-speculative decoding).
std::string generation_summary(const GeneratedText& g, const GenerateOptions& options);
// The same for a batch of `prompts` prompts.
std::string batch_summary(const GeneratedBatch& b, size_t prompts);

}  // namespace strata
