// Byte-level BPE from a Hugging Face tokenizer.json (see data/bpe.h). The
// encoder follows tokenizers' order of work: added tokens are cut out of the
// text first; each remaining segment goes through the pre-tokenizer's steps
// (splits by regex, byte-level mapping); each pre-token is one BPE word,
// whose adjacent symbols are merged lowest rank first (leftmost among equal
// ranks) until no pair of the merge table is left.
#include "data/bpe.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <queue>

#include "core/error.h"
#include "core/text.h"

namespace strata {
namespace {

using json = nlohmann::json;

// Token ids of a file are below this (real vocabularies have up to ~260k):
// the id-indexed tables stay within a few hundred megabytes whatever a file says.
constexpr int32_t kMaxId = 1 << 22;

// GPT-2's pre-tokenization pattern (ByteLevel with use_regex).
constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

std::string utf8_of(uint32_t cp) {
  std::string s;
  append_utf8(s, cp);
  return s;
}

// Length of the UTF-8 character starting at s[i] (1 for a stray byte).
size_t char_len(const std::string& s, size_t i) {
  const uint8_t b = uint8_t(s[i]);
  size_t n = b < 0x80 ? 1 : b >= 0xF0 ? 4 : b >= 0xE0 ? 3 : b >= 0xC0 ? 2 : 1;
  n = std::min(n, s.size() - i);
  for (size_t k = 1; k < n; ++k)
    if ((uint8_t(s[i + k]) & 0xC0) != 0x80) return k;
  return n;
}

// Bytes to valid UTF-8: each maximal ill-formed subpart becomes U+FFFD (the
// Unicode recommendation, which Rust's from_utf8_lossy follows).
std::string utf8_lossy(const std::string& b) {
  std::string out;
  out.reserve(b.size());
  size_t i = 0;
  while (i < b.size()) {
    const uint8_t c = uint8_t(b[i]);
    if (c < 0x80) {
      out += char(c);
      ++i;
      continue;
    }
    size_t need = 0;
    uint8_t lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) {
      need = 1;
    } else if (c >= 0xE0 && c <= 0xEF) {
      need = 2;
      if (c == 0xE0) lo = 0xA0;
      if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      need = 3;
      if (c == 0xF0) lo = 0x90;
      if (c == 0xF4) hi = 0x8F;
    }
    size_t k = 1;
    bool ok = need > 0;
    for (; ok && k <= need; ++k) {
      if (i + k >= b.size()) {
        ok = false;
        break;
      }
      const uint8_t d = uint8_t(b[i + k]);
      const bool in = k == 1 ? (d >= lo && d <= hi) : (d >= 0x80 && d <= 0xBF);
      if (!in) {
        ok = false;
        break;
      }
    }
    if (ok) {
      out.append(b, i, need + 1);
      i += need + 1;
    } else {
      out += "\xEF\xBF\xBD";
      i += need > 0 ? k : 1;  // the valid prefix is one replacement
    }
  }
  return out;
}

// A literal string as a regex.
std::string escape_regex(const std::string& s) {
  std::string r;
  for (char c : s) {
    if (!std::isalnum(uint8_t(c)) && uint8_t(c) < 0x80) r += '\\';
    r += c;
  }
  return r;
}

// A pre-tokenizer or post-processor as its list of steps: a Sequence's
// members (under `list`), one step, or none.
std::vector<json> steps_of(const json& node, const char* list) {
  std::vector<json> steps;
  if (node.is_object() && node.value("type", "") == "Sequence")
    for (const json& s : node.at(list)) steps.push_back(s);
  else if (node.is_object())
    steps.push_back(node);
  return steps;
}

bool is_ws(uint8_t c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}
bool is_word_byte(uint8_t c) { return std::isalnum(c) || c == '_' || c >= 0x80; }

}  // namespace

const std::vector<std::string>& byte_level_chars() {
  static const std::vector<std::string> table = [] {
    std::vector<std::string> t(256);
    uint32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
      t[size_t(b)] = utf8_of(printable ? uint32_t(b) : next++);
    }
    return t;
  }();
  return table;
}

std::shared_ptr<const BpeTokenizer> BpeTokenizer::parse(const std::string& text,
                                                        const std::string& name) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::parse_error& e) {
    fail(cat("tokenizer ", name, ": not valid JSON (", one_line(e.what()), ")"));
  }
  const auto where = [&](const std::string& field) { return cat("tokenizer ", name, ": ", field); };
  STRATA_CHECK(j.is_object() && j.contains("model") && j["model"].is_object(),
               where("no \"model\" object: not a Hugging Face tokenizer.json"));
  auto t = std::make_shared<BpeTokenizer>();
  t->name_ = name;
  try {
    const json& m = j["model"];
    const std::string type = m.value("type", "BPE");
    STRATA_CHECK(type == "BPE", where("model.type"), " is \"", type,
                 "\"; only BPE tokenizer.json files are supported (sentencepiece models: "
                 "give the .model file)");
    STRATA_CHECK(m.contains("vocab") && m["vocab"].is_object(), where("model.vocab is missing"));
    STRATA_CHECK(m.value("continuing_subword_prefix", json()).is_null() ||
                     m["continuing_subword_prefix"].get<std::string>().empty(),
                 where("model.continuing_subword_prefix is not supported"));
    STRATA_CHECK(m.value("end_of_word_suffix", json()).is_null() ||
                     m["end_of_word_suffix"].get<std::string>().empty(),
                 where("model.end_of_word_suffix is not supported"));
    STRATA_CHECK(!m.value("byte_fallback", false),
                 where("model.byte_fallback is not supported (a sentencepiece-style BPE: give "
                       "its tokenizer.model)"));
    t->ignore_merges_ = m.value("ignore_merges", false);
    int32_t max_id = -1;
    for (const auto& [piece, id] : m["vocab"].items()) {
      STRATA_CHECK(id.is_number_integer() && id.get<int64_t>() >= 0 && id.get<int64_t>() < kMaxId,
                   where("model.vocab"), "[\"", piece, "\"] is not an id in [0, ", kMaxId, ")");
      t->vocab_[piece] = id.get<int32_t>();
      max_id = std::max(max_id, id.get<int32_t>());
    }
    std::vector<Added> added;
    if (j.contains("added_tokens") && j["added_tokens"].is_array()) {
      for (const json& a : j["added_tokens"]) {
        Added x;
        x.content = a.at("content").get<std::string>();
        x.id = a.at("id").get<int32_t>();
        x.special = a.value("special", false);
        x.lstrip = a.value("lstrip", false);
        x.rstrip = a.value("rstrip", false);
        x.single_word = a.value("single_word", false);
        STRATA_CHECK(!x.content.empty() && x.id >= 0 && x.id < kMaxId, where("added_tokens"),
                     ": token ", x.id, " is empty or has a bad id");
        t->vocab_[x.content] = x.id;
        max_id = std::max(max_id, x.id);
        added.push_back(x);
      }
    }
    STRATA_CHECK(max_id >= 0, where("model.vocab is empty"));
    t->pieces_.assign(size_t(max_id) + 1, std::string());
    t->special_.assign(size_t(max_id) + 1, 0);
    for (const auto& [piece, id] : t->vocab_) t->pieces_[size_t(id)] = piece;
    for (const Added& a : added) {
      t->pieces_[size_t(a.id)] = a.content;
      t->special_[size_t(a.id)] = a.special;
    }
    std::stable_sort(added.begin(), added.end(), [](const Added& a, const Added& b) {
      return a.content.size() > b.content.size();
    });
    t->added_ = std::move(added);

    // Merges: "left right" strings (tokenizers before 0.20) or [left, right].
    if (m.contains("merges")) {
      const json& ms = m["merges"];
      STRATA_CHECK(ms.is_array(), where("model.merges is not a list"));
      int32_t rank = 0;
      for (const json& e : ms) {
        std::string l, r;
        if (e.is_string()) {
          const std::string s = e.get<std::string>();
          const size_t sp = s.find(' ');
          STRATA_CHECK(sp != std::string::npos && s.find(' ', sp + 1) == std::string::npos,
                       where("model.merges"), "[", rank, "] \"", s, "\" is not \"left right\"");
          l = s.substr(0, sp);
          r = s.substr(sp + 1);
        } else {
          STRATA_CHECK(e.is_array() && e.size() == 2, where("model.merges"), "[", rank,
                       "] is not a pair");
          l = e[0].get<std::string>();
          r = e[1].get<std::string>();
        }
        const auto a = t->vocab_.find(l), b = t->vocab_.find(r), ab = t->vocab_.find(l + r);
        STRATA_CHECK(a != t->vocab_.end() && b != t->vocab_.end() && ab != t->vocab_.end(),
                     where("model.merges"), "[", rank, "] (\"", l, "\", \"", r,
                     "\") names a piece the vocabulary lacks");
        const uint64_t key = (uint64_t(uint32_t(a->second)) << 32) | uint32_t(b->second);
        t->merges_.emplace(key, std::make_pair(rank, ab->second));  // the first rank wins
        ++rank;
      }
    }
    const json unk = m.value("unk_token", json());
    if (unk.is_string()) {
      const auto u = t->vocab_.find(unk.get<std::string>());
      STRATA_CHECK(u != t->vocab_.end(), where("model.unk_token"), " \"", unk.get<std::string>(),
                   "\" is not in the vocabulary");
      t->unk_ = u->second;
    }

    // Normalizer: none (Llama 3, GPT-2); anything else would change the text.
    const json norm = j.value("normalizer", json());
    STRATA_CHECK(norm.is_null() || (norm.value("type", "") == "Sequence" &&
                                    norm.value("normalizers", json::array()).empty()),
                 where("normalizer"), " \"", norm.is_object() ? norm.value("type", "?") : "?",
                 "\" is not supported (byte-level BPE files without a normalizer are)");

    // Pre-tokenizer steps.
    const std::vector<json> steps = steps_of(j.value("pre_tokenizer", json()), "pretokenizers");
    bool byte_level = false;
    for (const json& s : steps) {
      const std::string ty = s.value("type", "");
      PreStep p;
      if (ty == "ByteLevel") {
        p.kind = PreStep::ByteLevel;
        p.add_prefix_space = s.value("add_prefix_space", true);
        if (s.value("use_regex", true)) {
          p.regex = Regex::compile(kGpt2Pattern, where("pre_tokenizer ByteLevel"));
          p.has_regex = true;
        }
        byte_level = true;
      } else if (ty == "Split" || ty == "Digits") {
        p.kind = PreStep::Split;
        std::string pattern;
        if (ty == "Digits") {
          pattern = s.value("individual_digits", false) ? R"(\p{N})" : R"(\p{N}+)";
        } else {
          const json& pat = s.at("pattern");
          if (pat.contains("Regex"))
            pattern = pat["Regex"].get<std::string>();
          else if (pat.contains("String"))
            pattern = escape_regex(pat["String"].get<std::string>());
          else
            fail(where("pre_tokenizer Split has no Regex or String pattern"));
          const std::string behavior = s.value("behavior", "Isolated");
          STRATA_CHECK(behavior == "Isolated" || behavior == "Removed",
                       where("pre_tokenizer Split"), " behavior \"", behavior,
                       "\" is not supported (Isolated, Removed)");
          p.isolated = behavior == "Isolated";
          p.invert = s.value("invert", false);
        }
        p.regex = Regex::compile(pattern, where("pre_tokenizer " + ty));
        p.has_regex = true;
      } else {
        fail(cat(where("pre_tokenizer"), " \"", ty,
                 "\" is not supported (Split, Digits, ByteLevel and their Sequence are)"));
      }
      t->pre_.push_back(std::move(p));
    }
    STRATA_CHECK(byte_level, where("pre_tokenizer"),
                 " has no ByteLevel step: not a byte-level BPE (sentencepiece-style files: give "
                 "the tokenizer.model)");
    const json dec = j.value("decoder", json());
    STRATA_CHECK(dec.is_object() && dec.value("type", "") == "ByteLevel", where("decoder"),
                 " is not ByteLevel: not a byte-level BPE");

    // BOS: the first token of the post-processor's single-sequence template.
    for (const json& p : steps_of(j.value("post_processor", json()), "processors")) {
      if (p.value("type", "") != "TemplateProcessing") continue;
      const json& single = p.at("single");
      if (single.empty() || !single[0].contains("SpecialToken")) continue;
      const std::string tok = single[0]["SpecialToken"].at("id").get<std::string>();
      const json& st = p.at("special_tokens").at(tok);
      STRATA_CHECK(st.at("ids").size() == 1, where("post_processor"), " BOS \"", tok,
                   "\" is not one token");
      t->bos_ = st["ids"][0].get<int32_t>();
    }
  } catch (const json::exception& e) {
    fail(cat("tokenizer ", name, ": unexpected tokenizer.json layout (", one_line(e.what()), ")"));
  }
  // EOS and PAD: the usual names of the special tokens (tokenizer_config.json
  // names them; a tokenizer.json alone does not).
  const auto named = [&](std::initializer_list<const char*> names) {
    for (const char* n : names)
      if (const auto it = t->vocab_.find(n); it != t->vocab_.end()) return it->second;
    return int32_t(-1);
  };
  t->eos_ = named({"<|end_of_text|>", "<|endoftext|>", "</s>", "<|im_end|>", "<eos>"});
  t->pad_ = named({"<pad>", "<|pad|>", "[PAD]", "<|finetune_right_pad_id|>"});

  const std::vector<std::string>& chars = byte_level_chars();
  t->byte_ids_.assign(256, -1);
  for (int b = 0; b < 256; ++b) {
    const auto it = t->vocab_.find(chars[size_t(b)]);
    if (it != t->vocab_.end()) t->byte_ids_[size_t(b)] = it->second;
  }
  return t;
}

bool BpeTokenizer::is_special(int32_t id) const {
  return id >= 0 && size_t(id) < special_.size() && special_[size_t(id)];
}

std::vector<int32_t> BpeTokenizer::end_of_turn_ids() const {
  std::vector<int32_t> ids;
  for (const char* n : {"<|eot_id|>", "<|eom_id|>", "<|im_end|>", "<end_of_turn>", "<|end|>"}) {
    const int32_t id = piece_to_id(n);
    if (id >= 0 && id != eos_ && is_special(id)) ids.push_back(id);
  }
  return ids;
}

std::string BpeTokenizer::id_to_piece(int32_t id) const {
  STRATA_CHECK(id >= 0 && id < vocab_size(), "tokenizer ", name_, ": token id ", id,
               " out of range [0, ", vocab_size(), ")");
  return pieces_[size_t(id)];
}

int32_t BpeTokenizer::piece_to_id(const std::string& piece) const {
  const auto it = vocab_.find(piece);
  return it == vocab_.end() ? -1 : it->second;
}

std::vector<std::string> BpeTokenizer::pre_tokenize(const std::string& segment) const {
  std::vector<std::string> pieces{segment};
  for (const PreStep& p : pre_) {
    std::vector<std::string> next;
    for (const std::string& s : pieces) {
      std::string src = s;
      if (p.kind == PreStep::ByteLevel && p.add_prefix_space && !src.empty() && src[0] != ' ')
        src.insert(src.begin(), ' ');
      std::vector<std::string> parts;
      if (!p.has_regex) {
        parts.push_back(src);
      } else {
        // Isolated keeps the gaps and the matches as pieces; Removed keeps
        // the gaps, or with invert the matches.
        const bool keep_gaps = p.isolated || !p.invert, keep_matches = p.isolated || p.invert;
        size_t prev = 0;
        for (const auto& [b, e] : p.regex.find_all(src)) {
          if (b == e) continue;
          if (b > prev && keep_gaps) parts.push_back(src.substr(prev, b - prev));
          if (keep_matches) parts.push_back(src.substr(b, e - b));
          prev = e;
        }
        if (prev < src.size() && keep_gaps) parts.push_back(src.substr(prev));
      }
      if (p.kind == PreStep::ByteLevel) {
        const std::vector<std::string>& chars = byte_level_chars();
        for (std::string& part : parts) {
          std::string mapped;
          for (char c : part) mapped += chars[uint8_t(c)];
          part = std::move(mapped);
        }
      }
      for (std::string& part : parts)
        if (!part.empty()) next.push_back(std::move(part));
    }
    pieces = std::move(next);
  }
  return pieces;
}

void BpeTokenizer::encode_word(const std::string& w, std::vector<int32_t>* out) const {
  if (ignore_merges_) {
    if (const auto it = vocab_.find(w); it != vocab_.end()) {
      out->push_back(it->second);
      return;
    }
  }
  struct Sym {
    int32_t id;
    int prev, next;
    bool alive;
  };
  std::vector<Sym> s;
  for (size_t i = 0; i < w.size();) {
    const size_t n = char_len(w, i);
    const auto it = vocab_.find(w.substr(i, n));
    if (it != vocab_.end())
      s.push_back({it->second, int(s.size()) - 1, int(s.size()) + 1, true});
    else if (unk_ >= 0)  // without an unk token an unknown character is dropped, as in tokenizers
      s.push_back({unk_, int(s.size()) - 1, int(s.size()) + 1, true});
    i += n;
  }
  if (s.empty()) return;
  s.back().next = -1;
  struct Cand {
    int32_t rank;
    int pos;
    int32_t left, right, merged;
    bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Cand, std::vector<Cand>, std::greater<Cand>> q;
  const auto push = [&](int pos) {
    const int nx = s[size_t(pos)].next;
    if (nx < 0) return;
    const uint64_t key = (uint64_t(uint32_t(s[size_t(pos)].id)) << 32) | uint32_t(s[size_t(nx)].id);
    const auto it = merges_.find(key);
    if (it != merges_.end())
      q.push({it->second.first, pos, s[size_t(pos)].id, s[size_t(nx)].id, it->second.second});
  };
  for (int i = 0; i + 1 < int(s.size()); ++i) push(i);
  while (!q.empty()) {
    const Cand c = q.top();
    q.pop();
    Sym& a = s[size_t(c.pos)];
    if (!a.alive || a.id != c.left || a.next < 0) continue;
    Sym& b = s[size_t(a.next)];
    if (b.id != c.right) continue;
    a.id = c.merged;
    b.alive = false;
    a.next = b.next;
    if (b.next >= 0) s[size_t(b.next)].prev = c.pos;
    if (a.prev >= 0) push(a.prev);
    push(c.pos);
  }
  for (const Sym& x : s)
    if (x.alive) out->push_back(x.id);
}

void BpeTokenizer::encode_segment(const std::string& segment, std::vector<int32_t>* out) const {
  if (segment.empty()) return;
  for (const std::string& w : pre_tokenize(segment)) encode_word(w, out);
}

std::vector<int32_t> BpeTokenizer::encode(const std::string& text) const {
  std::vector<int32_t> ids;
  size_t seg = 0;  // start of the text not yet encoded
  size_t i = 0;
  while (i < text.size()) {
    const Added* hit = nullptr;
    for (const Added& a : added_) {  // longest first: leftmost-longest
      if (a.content[0] != text[i] || text.compare(i, a.content.size(), a.content) != 0) continue;
      if (a.single_word) {
        const bool before = i == 0 || !is_word_byte(uint8_t(text[i - 1]));
        const size_t e = i + a.content.size();
        const bool after = e == text.size() || !is_word_byte(uint8_t(text[e]));
        if (!before || !after) continue;
      }
      hit = &a;
      break;
    }
    if (!hit) {
      ++i;
      continue;
    }
    size_t b = i, e = i + hit->content.size();
    if (hit->lstrip)
      while (b > seg && is_ws(uint8_t(text[b - 1]))) --b;
    if (hit->rstrip)
      while (e < text.size() && is_ws(uint8_t(text[e]))) ++e;
    encode_segment(text.substr(seg, b - seg), &ids);
    ids.push_back(hit->id);
    seg = i = e;
  }
  encode_segment(text.substr(seg), &ids);
  return ids;
}

std::string BpeTokenizer::decode_bytes(const std::vector<int32_t>& ids) const {
  static const std::unordered_map<std::string, uint8_t> inverse = [] {
    std::unordered_map<std::string, uint8_t> m;
    const std::vector<std::string>& chars = byte_level_chars();
    for (int b = 0; b < 256; ++b) m[chars[size_t(b)]] = uint8_t(b);
    return m;
  }();
  std::string out;
  for (int32_t id : ids) {
    STRATA_CHECK(id >= 0 && id < vocab_size(), "tokenizer ", name_, ": token id ", id,
                 " out of range [0, ", vocab_size(), ")");
    if (special_[size_t(id)]) continue;
    const std::string& p = pieces_[size_t(id)];
    std::string bytes;
    bool all = true;
    for (size_t i = 0; i < p.size() && all;) {
      const size_t n = char_len(p, i);
      const auto it = inverse.find(p.substr(i, n));
      if (it == inverse.end())
        all = false;
      else
        bytes += char(it->second);
      i += n;
    }
    out += all ? bytes : p;  // a token outside the byte alphabet decodes as itself
  }
  return out;
}

std::string BpeTokenizer::decode(const std::vector<int32_t>& ids) const {
  return utf8_lossy(decode_bytes(ids));
}

}  // namespace strata
