#include "data/chat.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <ctime>
#include <filesystem>

#include "core/error.h"
#include "core/file.h"
#include "core/jinja.h"
#include "core/text.h"

namespace strata {
namespace {

namespace fs = std::filesystem;

// A special token's text in tokenizer_config.json: "<s>" or {"content": "<s>", ...}.
std::string token_text(const nlohmann::json& cfg, const char* key, const std::string& where) {
  if (!cfg.contains(key) || cfg[key].is_null()) return "";
  const auto& v = cfg[key];
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string())
    return v["content"].get<std::string>();
  fail(cat(where, ": '", key, "' must be a string or {\"content\": ...}"));
}

// The template text of a tokenizer_config.json or chat_template.json.
std::string template_of_config(const nlohmann::json& cfg, const std::string& where) {
  STRATA_CHECK(cfg.is_object() && cfg.contains("chat_template"), where,
               ": no 'chat_template' (the tokenizer has no chat template)");
  const auto& t = cfg["chat_template"];
  if (t.is_string()) return t.get<std::string>();
  STRATA_CHECK(t.is_array(), where, ": 'chat_template' must be a string or a list of templates");
  std::vector<std::string> names;
  for (const auto& e : t) {
    STRATA_CHECK(e.is_object() && e.contains("name") && e.contains("template") &&
                     e["name"].is_string() && e["template"].is_string(),
                 where,
                 ": 'chat_template' list entries must be {\"name\": ..., \"template\": ...}");
    if (e["name"] == "default") return e["template"].get<std::string>();
    names.push_back(e["name"].get<std::string>());
  }
  fail(cat(where, ": 'chat_template' has no template named 'default' (it has ",
           names.empty() ? std::string("none") : join(names, ", "), ")"));
}

jinja::Value messages_value(const ChatMessages& messages) {
  jinja::List list;
  for (const auto& [role, content] : messages)
    list.push_back(
        jinja::Value::dict({{"role", jinja::Value(role)}, {"content", jinja::Value(content)}}));
  return jinja::Value::list(std::move(list));
}

// transformers' strftime_now(format): the local time now.
jinja::Value strftime_now() {
  return jinja::Value::function([](jinja::Args& a) {
    const std::time_t now = std::time(nullptr);
    std::tm t{};
    localtime_r(&now, &t);
    char buf[256];
    const std::string f = a.positional.empty() ? "%d %b %Y" : a.positional[0].str();
    return jinja::Value(std::string(buf, std::strftime(buf, sizeof buf, f.c_str(), &t)));
  });
}

size_t common_prefix(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  size_t n = 0;
  while (n < a.size() && n < b.size() && a[n] == b[n]) ++n;
  return n;
}

// strata's own template, piece by piece (prompt: stop after the assistant
// prefix that follows the messages).
ChatTokens encode_own(const ChatTemplate& t, const Tokenizer& tok, const ChatMessages& messages,
                      bool prompt) {
  ChatTokens out;
  auto push = [&](const std::string& text, uint8_t flag) {
    if (text.empty()) return;
    const std::vector<int32_t> ids = tok.encode(text);
    out.tokens.insert(out.tokens.end(), ids.begin(), ids.end());
    out.assistant.insert(out.assistant.end(), ids.size(), flag);
  };
  if (tok.bos_id() >= 0) {
    out.tokens.push_back(tok.bos_id());
    out.assistant.push_back(0);
  }
  for (size_t i = 0; i < messages.size(); ++i) {
    const auto& [role, content] = messages[i];
    if (role == "system") {
      push(t.system_prefix, 0);
      push(content, 0);
      push(t.system_suffix, 0);
    } else if (role == "user") {
      push(t.user_prefix, 0);
      push(content, 0);
      push(t.user_suffix, 0);
    } else if (role == "assistant") {
      push(t.assistant_prefix, 0);
      push(content, 1);
      push(t.assistant_suffix, 1);
      if (tok.eos_id() >= 0) {
        out.tokens.push_back(tok.eos_id());
        out.assistant.push_back(1);
      }
    } else {
      fail(cat("message ", i + 1, ": unknown role '", one_line(role),
               "' (expected system, user or assistant)"));
    }
  }
  if (prompt) push(t.assistant_prefix, 0);
  return out;
}

}  // namespace

ChatTemplate load_chat_template(const std::string& path, const Tokenizer& tok) {
  std::error_code ec;
  std::string file = path, text;
  nlohmann::json cfg;
  if (fs::is_directory(path, ec)) {
    const std::string config = path + "/tokenizer_config.json",
                      jinja = path + "/chat_template.jinja";
    if (fs::exists(config, ec))
      cfg = nlohmann::json::parse(read_file(config, "chat template"), nullptr, false);
    if (!cfg.is_discarded() && cfg.is_object() && cfg.contains("chat_template")) {
      file = config;
    } else {
      STRATA_CHECK(
          fs::exists(jinja, ec), "chat template ", path,
          ": neither a tokenizer_config.json with a 'chat_template' nor a chat_template.jinja");
      file = jinja;
      text = read_file(jinja, "chat template");
    }
  } else {
    STRATA_CHECK(fs::is_regular_file(path, ec), "chat template ", path, ": no such file");
    const std::string bytes = read_file(path, "chat template");
    if (path.size() >= 5 && path.compare(path.size() - 5, 5, ".json") == 0) {
      cfg = nlohmann::json::parse(bytes, nullptr, false);
      STRATA_CHECK(!cfg.is_discarded(), path, ": not valid JSON");
    } else {
      text = bytes;
    }
  }
  if (text.empty()) text = template_of_config(cfg, file);
  ChatTemplate t;
  t.source = file;
  t.bos_token = cfg.is_object() ? token_text(cfg, "bos_token", file) : "";
  t.eos_token = cfg.is_object() ? token_text(cfg, "eos_token", file) : "";
  if (t.bos_token.empty() && tok.bos_id() >= 0) t.bos_token = tok.id_to_piece(tok.bos_id());
  if (t.eos_token.empty() && tok.eos_id() >= 0) t.eos_token = tok.id_to_piece(tok.eos_id());
  t.jinja = std::make_shared<jinja::Template>(text, file, jinja::chat_options());
  return t;
}

std::string render_chat_text(const ChatTemplate& t, const ChatMessages& messages,
                             bool add_generation_prompt) {
  STRATA_CHECK(t.jinja, "render_chat_text: strata's own template has no Jinja text");
  jinja::Value vars = jinja::Value::dict();
  vars.set("messages", messages_value(messages));
  vars.set("bos_token", jinja::Value(t.bos_token));
  vars.set("eos_token", jinja::Value(t.eos_token));
  vars.set("add_generation_prompt", jinja::Value(add_generation_prompt));
  vars.set("raise_exception", jinja::raise_exception_function());
  vars.set("strftime_now", strftime_now());
  return t.jinja->render(vars);
}

std::vector<int32_t> encode_chat_text(const ChatTemplate& t, const Tokenizer& tok,
                                      const std::string& text) {
  // A sentencepiece model does not read its control tokens from text: the
  // template's BOS and EOS strings are cut out here when they are the
  // tokenizer's BOS and EOS pieces. A tokenizer.json's encode finds its
  // special tokens itself (<|eot_id|>, which Llama 3 names its EOS string,
  // is not its EOS id).
  std::vector<std::pair<std::string, int32_t>> specials;
  for (const int32_t id : {tok.bos_id(), tok.eos_id()})
    for (const std::string* s : {&t.bos_token, &t.eos_token})
      if (id >= 0 && !s->empty() && *s == tok.id_to_piece(id)) specials.emplace_back(*s, id);
  std::vector<int32_t> ids;
  size_t at = 0;
  auto encode_plain = [&](size_t end) {
    if (end <= at) return;
    const std::vector<int32_t> e = tok.encode(text.substr(at, end - at));
    ids.insert(ids.end(), e.begin(), e.end());
  };
  for (;;) {
    size_t best = std::string::npos, len = 0;
    int32_t id = -1;
    for (const auto& [s, i] : specials) {
      const size_t p = text.find(s, at);
      if (p < best || (p == best && s.size() > len)) best = p, len = s.size(), id = i;
    }
    if (best == std::string::npos) break;
    encode_plain(best);
    ids.push_back(id);
    at = best + len;
  }
  encode_plain(text.size());
  return ids;
}

ChatTokens encode_conversation(const ChatTemplate& t, const Tokenizer& tok,
                               const ChatMessages& messages) {
  if (!t.jinja) return encode_own(t, tok, messages, false);
  const std::string full = render_chat_text(t, messages, false);
  ChatTokens out;
  out.tokens = encode_chat_text(t, tok, full);
  out.assistant.assign(out.tokens.size(), 0);
  for (size_t i = 0; i < messages.size(); ++i) {
    if (messages[i].first != "assistant") continue;
    const ChatMessages before(messages.begin(), messages.begin() + long(i));
    const ChatMessages through(messages.begin(), messages.begin() + long(i) + 1);
    const std::string opened = render_chat_text(t, before, true);
    const std::string answered = render_chat_text(t, through, false);
    STRATA_CHECK(full.compare(0, answered.size(), answered) == 0 &&
                     answered.compare(0, opened.size(), opened) == 0,
                 "the chat template ", t.source, " renders the conversation before message ", i + 2,
                 " differently once more messages follow, so the assistant's tokens "
                 "cannot be told apart");
    const size_t b = common_prefix(encode_chat_text(t, tok, opened), out.tokens);
    const size_t e = common_prefix(encode_chat_text(t, tok, answered), out.tokens);
    std::fill(out.assistant.begin() + long(b), out.assistant.begin() + long(std::max(b, e)), 1);
  }
  return out;
}

std::vector<int32_t> encode_chat_prompt(const ChatTemplate& t, const Tokenizer& tok,
                                        const ChatMessages& messages) {
  if (!t.jinja) return encode_own(t, tok, messages, true).tokens;
  return encode_chat_text(t, tok, render_chat_text(t, messages, true));
}

}  // namespace strata
