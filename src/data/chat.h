// Chat formats, for SFT data and chat generation: strata's own template
// (fixed text before and after each role's message) or a model's Hugging
// Face chat template (the Jinja "chat_template" of its tokenizer_config.json),
// rendered by core/jinja.h as transformers renders it (trim_blocks,
// lstrip_blocks, raise_exception, strftime_now; the variables messages,
// bos_token, eos_token, add_generation_prompt).
//
// A Jinja-rendered conversation is tokenized as Hugging Face's
// apply_chat_template(tokenize=True) does: the whole text at once, special
// tokens written in it (the template's bos_token and eos_token, a
// tokenizer.json's added tokens) becoming their ids, and no BOS added beyond
// what the template writes. The assistant's tokens (trained on in SFT) are
// found by rendering the conversation up to each assistant message twice:
// with add_generation_prompt (the text before the answer) and with the answer
// (the text through its end-of-turn marker).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "data/tokenizer.h"

namespace strata {

namespace jinja {
class Template;
}

// (role, content) pairs: system, user, assistant.
using ChatMessages = std::vector<std::pair<std::string, std::string>>;

// strata's own template: BOS, then per message prefix + content + suffix;
// each assistant message is followed by EOS. Or, with `jinja` set, a Hugging
// Face chat template.
struct ChatTemplate {
  std::string system_prefix = "<|system|>\n", system_suffix = "\n";
  std::string user_prefix = "<|user|>\n", user_suffix = "\n";
  std::string assistant_prefix = "<|assistant|>\n", assistant_suffix = "";

  std::shared_ptr<const jinja::Template> jinja;
  std::string bos_token, eos_token;  // the strings bos_token and eos_token hold in it
  std::string source;                // the file it was read from ("" for strata's own)
};

// Reads a Hugging Face chat template from `path`: a model directory (its
// tokenizer_config.json's chat_template, else its chat_template.jinja), a
// tokenizer_config.json or chat_template.json ("chat_template": a string, or
// a list of {"name", "template"} of which "default" is taken; bos_token and
// eos_token as strings or {"content": ...}), or a file holding the template
// itself (.jinja). BOS and EOS default to the tokenizer's pieces. Throws
// strata::Error naming the file (no template, not JSON, a syntax error with
// its line and column).
ChatTemplate load_chat_template(const std::string& path, const Tokenizer& tok);

// A Jinja template's text for the conversation.
std::string render_chat_text(const ChatTemplate& t, const ChatMessages& messages,
                             bool add_generation_prompt);

// Tokens with a flag each: 1 where the token is the assistant's (SFT's loss
// is taken on it), 0 elsewhere.
struct ChatTokens {
  std::vector<int32_t> tokens;
  std::vector<uint8_t> assistant;
};

// A whole conversation (for SFT). strata's own template encodes each prefix,
// content and suffix on its own; a Jinja template encodes the rendered text
// whole. Throws strata::Error when a Jinja template raises, or renders an
// earlier turn differently once later messages follow (then the assistant's
// tokens cannot be told apart).
ChatTokens encode_conversation(const ChatTemplate& t, const Tokenizer& tok,
                               const ChatMessages& messages);

// A prompt for generation: the conversation, then the opening of the
// assistant's turn.
std::vector<int32_t> encode_chat_prompt(const ChatTemplate& t, const Tokenizer& tok,
                                        const ChatMessages& messages);

// Rendered text to ids: the template's bos_token and eos_token strings (and a
// tokenizer.json's special tokens) become their ids, the text between is
// encoded as is.
std::vector<int32_t> encode_chat_text(const ChatTemplate& t, const Tokenizer& tok,
                                      const std::string& text);

}  // namespace strata
