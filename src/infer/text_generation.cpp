// Text out of generation (text_generation.h).
#include "infer/text_generation.h"

#include <algorithm>

#include "core/error.h"
#include "core/file.h"
#include "core/text.h"
#include "core/timer.h"

namespace strata {

std::string text_after(const Detokenizer& decode, const std::vector<int32_t>& prompt,
                       const std::string& prompt_text, const std::vector<int32_t>& toks) {
  std::vector<int32_t> all = prompt;
  all.insert(all.end(), toks.begin(), toks.end());
  const std::string full = decode(all);
  return full.compare(0, prompt_text.size(), prompt_text) == 0 ? full.substr(prompt_text.size())
                                                               : decode(toks);
}

TextStream::TextStream(Detokenizer decode, std::vector<int32_t> prompt, std::string stop,
                       int32_t eos, std::vector<int32_t> more_eos)
    : decode_(std::move(decode)),
      prompt_(std::move(prompt)),
      stop_(std::move(stop)),
      eos_(eos),
      more_eos_(std::move(more_eos)) {
  prompt_text_ = decode_(prompt_);
}

std::string TextStream::continuation() const {
  return text_after(decode_, prompt_, prompt_text_, tokens_);
}

std::string TextStream::push(int32_t token) {
  if (stopped_ || token == eos_ ||
      std::find(more_eos_.begin(), more_eos_.end(), token) != more_eos_.end())
    return "";
  tokens_.push_back(token);
  const std::string text = continuation();
  size_t limit = text.size();
  if (!stop_.empty()) {
    const size_t at = text.find(stop_);
    if (at != std::string::npos) {
      limit = at;
      stopped_ = true;
    } else {
      limit = text.size() >= stop_.size() - 1 ? text.size() - (stop_.size() - 1) : 0;
    }
  }
  // A character whose bytes are split between tokens decodes as U+FFFD
  // until its last byte comes: hold trailing replacement characters back.
  static const std::string kReplacement = "\xEF\xBF\xBD";
  while (limit >= kReplacement.size() && text.compare(limit - 3, 3, kReplacement) == 0) limit -= 3;
  if (limit <= shown_.size() || text.compare(0, shown_.size(), shown_) != 0) return "";
  std::string piece = text.substr(shown_.size(), limit - shown_.size());
  shown_ = text.substr(0, limit);
  return piece;
}

std::string TextStream::finish() {
  if (stopped_ || stop_.empty()) return "";
  const std::string text = continuation();
  if (shown_.size() >= text.size()) return "";
  std::string tail = text.substr(shown_.size());
  shown_ = text;
  return tail;
}

GeneratedText generate_text(Model<float>& model, const std::vector<int32_t>& prompt,
                            GenerateOptions options, const Detokenizer& decode,
                            const std::string& stop, bool no_cache,
                            const std::function<void(const std::string&)>& on_text) {
  TextStream stream(decode, prompt, stop, options.eos_id, options.more_eos);
  auto on_token = [&](int32_t t) {
    const std::string piece = stream.push(t);
    if (!piece.empty()) on_text(piece);
  };
  options.stop_requested = [&] { return stream.stopped(); };
  GeneratedText out;
  Timer timer;
  if (no_cache) {
    generate_simple(model, prompt, options, on_token);
    out.stats.prompt_tokens = int(prompt.size());
    out.stats.new_tokens = int(stream.tokens().size());
    out.stats.decode_s = timer.seconds();
  } else {
    generate(model, prompt, options, on_token, &out.stats);
  }
  const std::string tail = stream.finish();
  if (!tail.empty()) on_text(tail);
  out.seconds = timer.seconds();
  out.text = stream.shown();
  return out;
}

PromptFile read_prompt_file(const std::string& path, const Encoder& encode) {
  const std::string body = read_file(path, "prompts");
  PromptFile out;
  size_t at = 0;
  int line_no = 0;
  while (at < body.size()) {
    const size_t nl = body.find('\n', at);
    const std::string line = body.substr(at, nl == std::string::npos ? std::string::npos : nl - at);
    at = nl == std::string::npos ? body.size() : nl + 1;
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const std::exception&) {
      fail(cat(path, ":", line_no, ": not valid JSON"));
    }
    STRATA_CHECK(j.is_object() && j.contains("prompt") && j["prompt"].is_string(), path, ":",
                 line_no, ": expected an object with a string \"prompt\"");
    out.texts.push_back(j["prompt"].get<std::string>());
    out.ids.push_back(encode(out.texts.back(), cat(path, ":", line_no)));
  }
  STRATA_CHECK(!out.ids.empty(), path, ": no prompts");
  return out;
}

GeneratedBatch generate_texts(Model<float>& model, const std::vector<std::vector<int32_t>>& prompts,
                              const GenerateOptions& options, const Detokenizer& decode,
                              const std::string& stop) {
  GeneratedBatch out;
  Timer timer;
  const auto outs = generate_batch(model, prompts, options, {}, &out.stats);
  out.seconds = timer.seconds();
  for (size_t i = 0; i < outs.size(); ++i) {
    std::vector<int32_t> toks = outs[i];
    if (!toks.empty() && options.is_eos(toks.back())) toks.pop_back();
    std::string text = text_after(decode, prompts[i], decode(prompts[i]), toks);
    if (!stop.empty() && text.find(stop) != std::string::npos) text.resize(text.find(stop));
    out.texts.push_back(std::move(text));
    out.new_tokens.push_back(outs[i].size());
  }
  return out;
}

namespace {

double per_second(double n, double seconds) { return seconds > 0 ? n / seconds : 0.0; }

}  // namespace

nlohmann::json generation_json(const std::string& prompt, const GeneratedText& g,
                               const GenerateOptions& options) {
  const GenerateStats& st = g.stats;
  nlohmann::json j = {{"prompt", prompt},
                      {"text", g.text},
                      {"prompt_tokens", st.prompt_tokens},
                      {"new_tokens", st.new_tokens},
                      {"prefill_s", st.prefill_s},
                      {"decode_s", st.decode_s},
                      {"prefill_tokens_per_s", per_second(double(st.prompt_tokens), st.prefill_s)},
                      {"decode_tokens_per_s", per_second(double(st.new_tokens), st.decode_s)},
                      {"exit_layer", options.exit_layer},
                      {"hit_context", st.hit_context}};
  if (options.speculations) {
    j["speculations"] = options.speculations;
    j["acceptance_rate"] = st.acceptance();
    j["tokens_per_full_pass"] = st.tokens_per_round();
  }
  return j;
}

std::string generation_summary(const GeneratedText& g, const GenerateOptions& options) {
  const GenerateStats& st = g.stats;
  std::string out = strprintf(
      "generated %d tokens in %.2f s: prefill %d tokens at %.0f tokens/s, decode %.1f tokens/s%s\n",
      st.new_tokens, g.seconds, st.prompt_tokens,
      per_second(double(st.prompt_tokens), st.prefill_s),
      per_second(double(st.new_tokens), st.decode_s),
      st.hit_context ? " (stopped at the model's context length)" : "");
  if (options.speculations)
    out += strprintf(
        "self-speculative: exit layer %d, %d drafts per round: acceptance %.1f%%, %.2f tokens per "
        "full-model pass\n",
        options.exit_layer, options.speculations, 100 * st.acceptance(), st.tokens_per_round());
  return out;
}

std::string batch_summary(const GeneratedBatch& b, size_t prompts) {
  const GenerateStats& st = b.stats;
  return strprintf(
      "generated %d tokens for %zu prompts in %.2f s: prefill %d tokens at %.0f tokens/s, decode "
      "%.1f tokens/s\n",
      st.new_tokens, prompts, b.seconds, st.prompt_tokens,
      per_second(double(st.prompt_tokens), st.prefill_s),
      per_second(double(st.new_tokens), st.decode_s));
}

}  // namespace strata
