#include "io/hf_tokenizer.h"

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>
#include <optional>
#include <string_view>
#include <unordered_map>

#include "core/error.h"
#include "data/tokenizer.h"

namespace strata {
namespace {

// A protobuf reader for the few fields the export needs: it walks a message,
// returning (field number, wire type, value) until the end.
class ProtoReader {
 public:
  ProtoReader(std::string_view bytes, const std::string& name) : b_(bytes), name_(name) {}

  bool done() const { return pos_ >= b_.size(); }

  struct Field {
    uint32_t number = 0, wire = 0;
    uint64_t varint = 0;     // wire 0, and the raw bits of wire 1 and 5
    std::string_view bytes;  // wire 2
  };

  Field next() {
    Field f;
    const uint64_t key = varint();
    f.number = uint32_t(key >> 3), f.wire = uint32_t(key & 7);
    switch (f.wire) {
      case 0:
        f.varint = varint();
        break;
      case 1:
        f.varint = fixed(8);
        break;
      case 5:
        f.varint = fixed(4);
        break;
      case 2: {
        const uint64_t n = varint();
        need(n);
        f.bytes = b_.substr(pos_, n);
        pos_ += n;
        break;
      }
      default:
        fail("unsupported protobuf wire type " + std::to_string(f.wire));
    }
    return f;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw Error(
        cat("tokenizer ", name_, ": not a sentencepiece model (", what, " at byte ", pos_, ")"));
  }
  void need(uint64_t n) const {
    if (n > b_.size() - pos_) fail("truncated field");
  }
  uint64_t varint() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      need(1);
      const uint8_t c = uint8_t(b_[pos_++]);
      v |= uint64_t(c & 0x7f) << shift;
      if (!(c & 0x80)) return v;
    }
    fail("overlong varint");
  }
  uint64_t fixed(int n) {
    need(uint64_t(n));
    uint64_t v = 0;
    for (int i = 0; i < n; ++i) v |= uint64_t(uint8_t(b_[pos_ + i])) << (8 * i);
    pos_ += size_t(n);
    return v;
  }

  std::string_view b_;
  std::string name_;
  size_t pos_ = 0;
};

float float_of(uint64_t bits) {
  const uint32_t u = uint32_t(bits);
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

bool utf8_boundary(const std::string& s, size_t i) { return (uint8_t(s[i]) & 0xc0) != 0x80; }

std::string base64(const std::string& in) {
  static const char* const kAlphabet =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((in.size() + 2) / 3 * 4);
  for (size_t i = 0; i < in.size(); i += 3) {
    const size_t n = std::min<size_t>(3, in.size() - i);
    uint32_t v = uint32_t(uint8_t(in[i])) << 16;
    if (n > 1) v |= uint32_t(uint8_t(in[i + 1])) << 8;
    if (n > 2) v |= uint32_t(uint8_t(in[i + 2]));
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += n > 1 ? kAlphabet[(v >> 6) & 63] : '=';
    out += n > 2 ? kAlphabet[v & 63] : '=';
  }
  return out;
}

// A Jinja string literal holding `s`.
std::string jinja_literal(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\n')
      out += "\\n";
    else if (c == '\'' || c == '\\')
      out += std::string("\\") + c;
    else
      out += c;
  }
  return out + "'";
}

// sentencepiece's precompiled character map: the size of a darts-clone
// double-array trie of the strings it replaces, the trie, then the
// NUL-terminated replacements.
class CharsMap {
 public:
  explicit CharsMap(const std::string& blob) : b_(blob) {
    if (b_.size() < 4) return;
    const uint32_t n = u32(0);
    if (n % 4 == 0 && n <= b_.size() - 4) units_ = n / 4;
  }

  // What the map replaces exactly `key` with; nullopt when it leaves it be.
  std::optional<std::string> entry(std::string_view key) const {
    size_t id = 0;
    uint32_t u = 0;
    if (!walk(key, &id, &u) || !((u >> 8) & 1)) return std::nullopt;  // no value here
    id ^= offset(u);
    if (id >= units_) return std::nullopt;
    const size_t at = 4 + 4 * units_ + (unit(id) & ((1u << 31) - 1));
    if (at >= b_.size()) return std::nullopt;
    return std::string(b_.c_str() + at);
  }

  // Whether some string the map replaces starts with `prefix`.
  bool has_prefix(std::string_view prefix) const {
    size_t id = 0;
    uint32_t u = 0;
    return walk(prefix, &id, &u);
  }

 private:
  uint32_t u32(size_t at) const {
    uint32_t v = 0;
    for (size_t i = 0; i < 4; ++i) v |= uint32_t(uint8_t(b_[at + i])) << (8 * i);
    return v;
  }
  uint32_t unit(size_t id) const { return u32(4 + 4 * id); }
  static uint32_t offset(uint32_t u) { return (u >> 10) << ((u & (1u << 9)) >> 6); }
  bool walk(std::string_view key, size_t* id, uint32_t* u) const {
    if (units_ == 0) return false;
    *id = 0, *u = unit(0);
    for (char c : key) {
      *id ^= offset(*u) ^ uint8_t(c);
      if (*id >= units_) return false;
      *u = unit(*id);
      if ((*u & ((1u << 31) | 0xff)) != uint8_t(c)) return false;
    }
    return true;
  }

  const std::string& b_;
  size_t units_ = 0;
};

nlohmann::json replace(const nlohmann::json& pattern, const std::string& content) {
  return {{"type", "Replace"}, {"pattern", pattern}, {"content", content}};
}

}  // namespace

int SpModelInfo::find(PieceType t) const {
  for (size_t i = 0; i < pieces.size(); ++i)
    if (pieces[i].type == t) return int(i);
  return -1;
}

SpModelInfo parse_sp_model(const std::string& bytes, const std::string& name) {
  SpModelInfo m;
  ProtoReader top(bytes, name);
  while (!top.done()) {
    const ProtoReader::Field f = top.next();
    if (f.number == 1 && f.wire == 2) {
      SpModelInfo::Piece p;
      ProtoReader r(f.bytes, name);
      while (!r.done()) {
        const ProtoReader::Field g = r.next();
        if (g.number == 1 && g.wire == 2) p.text = std::string(g.bytes);
        if (g.number == 2 && g.wire == 5) p.score = float_of(g.varint);
        if (g.number == 3 && g.wire == 0) {
          STRATA_CHECK(g.varint >= 1 && g.varint <= 6, "tokenizer ", name, ": piece ",
                       m.pieces.size(), " has unknown type ", g.varint);
          p.type = SpModelInfo::PieceType(g.varint);
        }
      }
      m.pieces.push_back(std::move(p));
    } else if (f.number == 2 && f.wire == 2) {  // TrainerSpec
      ProtoReader r(f.bytes, name);
      while (!r.done()) {
        const ProtoReader::Field g = r.next();
        if (g.number == 3 && g.wire == 0) m.model_type = int(g.varint);
        if (g.number == 35 && g.wire == 0) m.byte_fallback = g.varint != 0;
      }
    } else if (f.number == 3 && f.wire == 2) {  // NormalizerSpec
      ProtoReader r(f.bytes, name);
      while (!r.done()) {
        const ProtoReader::Field g = r.next();
        if (g.number == 2 && g.wire == 2) m.precompiled_charsmap = std::string(g.bytes);
        if (g.number == 3 && g.wire == 0) m.add_dummy_prefix = g.varint != 0;
        if (g.number == 4 && g.wire == 0) m.remove_extra_whitespaces = g.varint != 0;
        if (g.number == 5 && g.wire == 0) m.escape_whitespaces = g.varint != 0;
      }
    }
  }
  STRATA_CHECK(!m.pieces.empty(), "tokenizer ", name, ": not a sentencepiece model (no pieces)");
  return m;
}

std::vector<std::pair<std::string, std::string>> bpe_merges(const SpModelInfo& m) {
  std::unordered_map<std::string, int> normal;
  for (size_t i = 0; i < m.pieces.size(); ++i)
    if (m.pieces[i].type == SpModelInfo::PieceType::Normal)
      normal.emplace(m.pieces[i].text, int(i));
  struct Merge {
    float score;
    int merged, left, right;
  };
  std::vector<Merge> merges;
  for (const auto& [text, id] : normal)
    for (size_t cut = 1; cut < text.size(); ++cut) {
      if (!utf8_boundary(text, cut)) continue;
      auto l = normal.find(text.substr(0, cut)), r = normal.find(text.substr(cut));
      if (l != normal.end() && r != normal.end())
        merges.push_back({m.pieces[size_t(id)].score, id, l->second, r->second});
    }
  std::sort(merges.begin(), merges.end(), [](const Merge& a, const Merge& b) {
    if (a.score != b.score) return a.score > b.score;
    if (a.merged != b.merged) return a.merged < b.merged;
    return a.left < b.left;
  });
  std::vector<std::pair<std::string, std::string>> out;
  out.reserve(merges.size());
  for (const Merge& g : merges)
    out.emplace_back(m.pieces[size_t(g.left)].text, m.pieces[size_t(g.right)].text);
  return out;
}

std::string hf_chat_template(const ChatTemplate& t) {
  // BOS, then each message as prefix + content + suffix; an assistant message
  // ends with EOS. add_generation_prompt opens an assistant message.
  return "{{ bos_token }}{% for message in messages %}"
         "{% if message['role'] == 'system' %}{{ " +
         jinja_literal(t.system_prefix) + " + message['content'] + " +
         jinja_literal(t.system_suffix) +
         " }}"
         "{% elif message['role'] == 'user' %}{{ " +
         jinja_literal(t.user_prefix) + " + message['content'] + " + jinja_literal(t.user_suffix) +
         " }}"
         "{% elif message['role'] == 'assistant' %}{{ " +
         jinja_literal(t.assistant_prefix) + " + message['content'] + " +
         jinja_literal(t.assistant_suffix) +
         " + eos_token }}"
         "{% else %}{{ raise_exception('unknown role ' + message['role'] + "
         "' (expected system, user or assistant)') }}{% endif %}{% endfor %}"
         "{% if add_generation_prompt %}{{ " +
         jinja_literal(t.assistant_prefix) + " }}{% endif %}";
}

namespace {

// The tokenizer_config.json and special_tokens_map.json of a tokenizer whose
// tokenizer.json is given.
void add_config_files(HfTokenizerFiles* files, const Tokenizer& tok, int64_t max_length,
                      bool add_bos_token) {
  using json = nlohmann::json;
  const auto piece = [&](int32_t id) {
    return id >= 0 ? json(tok.id_to_piece(id)) : json(nullptr);
  };
  const int32_t bos = tok.bos_id(), eos = tok.eos_id(), unk = tok.unk_id(), pad = tok.pad_id();
  json special = json::object();
  if (bos >= 0) special["bos_token"] = piece(bos);
  if (eos >= 0) special["eos_token"] = piece(eos);
  if (unk >= 0) special["unk_token"] = piece(unk);
  if (pad >= 0) special["pad_token"] = piece(pad);
  json cfg = special;
  cfg["tokenizer_class"] = "PreTrainedTokenizerFast";
  if (add_bos_token) {
    cfg["add_bos_token"] = bos >= 0;
    cfg["add_eos_token"] = false;
  }
  if (pad < 0) cfg["pad_token"] = nullptr;
  cfg["model_max_length"] = max_length;
  cfg["clean_up_tokenization_spaces"] = false;
  cfg["chat_template"] = hf_chat_template(ChatTemplate{});
  files->tokenizer_config_json = cfg.dump(2) + "\n";
  files->special_tokens_map_json = special.dump(2) + "\n";
  files->pad_token_id = pad;
}

}  // namespace

HfTokenizerFiles make_hf_tokenizer_files(const std::string& sp_model_bytes, int64_t max_length,
                                         const std::string& name) {
  using PT = SpModelInfo::PieceType;
  using json = nlohmann::json;
  {
    const Tokenizer t = Tokenizer::from_bytes(sp_model_bytes, name);
    if (t.kind() == Tokenizer::Kind::Bpe) {
      // A tokenizer.json is exported as it came (its post-processor adds the
      // BOS, so tokenizer_config.json says nothing of add_bos_token).
      HfTokenizerFiles files;
      files.tokenizer_json = sp_model_bytes;
      add_config_files(&files, t, max_length, false);
      return files;
    }
  }
  const SpModelInfo m = parse_sp_model(sp_model_bytes, name);
  const Tokenizer tok = Tokenizer::from_bytes(sp_model_bytes, name);
  STRATA_CHECK(m.model_type == 1 || m.model_type == 2, "tokenizer ", name, ": a ",
               m.model_type == 3 ? "word" : "char",
               " sentencepiece model has no Hugging Face tokenizer.json form (unigram and BPE do)");
  STRATA_CHECK(m.escape_whitespaces, "tokenizer ", name,
               ": the model does not escape whitespace with U+2581, which the exported "
               "tokenizer.json cannot reproduce");
  auto piece = [&](int32_t id) {
    return id >= 0 ? json(m.pieces[size_t(id)].text) : json(nullptr);
  };
  const int32_t bos = tok.bos_id(), unk = tok.unk_id();

  json added = json::array();
  for (size_t i = 0; i < m.pieces.size(); ++i) {
    const PT t = m.pieces[i].type;
    if (t != PT::Control && t != PT::Unknown && t != PT::UserDefined) continue;
    added.push_back({{"id", i},
                     {"content", m.pieces[i].text},
                     {"single_word", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"normalized", false},
                     {"special", t != PT::UserDefined}});
  }
  // The normalizer is sentencepiece's normalisation step by step, and no
  // pre-tokenizer splits its output (the legacy Llama form), so the model sees
  // what sentencepiece's model sees. A Metaspace pre-tokenizer would not do:
  // it leaves out the dummy prefix when the text already starts with a space
  // (or U+2581), which sentencepiece never does.
  //  - The precompiled character map (NFKC and the like) comes first.
  //  - remove_extra_whitespaces: leading spaces go, runs of spaces become one,
  //    and trailing spaces and U+2581s go (sentencepiece strips trailing U+2581
  //    after escaping, literal ones included). Before the dummy prefix, so a
  //    text that is only spaces stays empty.
  //  - add_dummy_prefix: one U+2581 before any non-empty text. Without
  //    remove_extra_whitespaces sentencepiece adds it to any non-empty input,
  //    even one the character map empties, so it goes before the map: as a
  //    U+2581, or a space (made a U+2581 below) where the map has strings that
  //    start with U+2581 (nmt_nfkc has), as Hugging Face's Precompiled maps
  //    whole graphemes and the prefix and a combining mark after it are one.
  //  - every space becomes U+2581.
  const std::string kSpace = "\u2581";
  const std::string& map = m.precompiled_charsmap;
  const CharsMap chars(map);
  json normalizers = json::array();
  const auto prepend = [](const std::string& s) {
    return json{{"type", "Prepend"}, {"prepend", s}};
  };
  const bool prefix_before_map = m.add_dummy_prefix && !m.remove_extra_whitespaces;
  const std::string first_prefix = !prefix_before_map          ? ""
                                   : !chars.has_prefix(kSpace) ? kSpace
                                   : !chars.has_prefix(" ")    ? " "
                                                               : "";
  if (!first_prefix.empty()) normalizers.push_back(prepend(first_prefix));
  if (!map.empty()) {
    // CR LF is one grapheme too: where the map has CR but not CR LF,
    // Precompiled would replace the pair with CR's replacement alone, so the
    // pair is first replaced by what sentencepiece makes of it, CR's and LF's
    // replacements (where the map leaves those be).
    const auto cr = chars.entry("\r"), lf = chars.entry("\n");
    if (cr && !chars.entry("\r\n")) {
      const std::string pair = *cr + lf.value_or("\n");
      bool fixed = true;
      for (size_t i = 0; i < pair.size(); ++i)
        if (utf8_boundary(pair, i)) {
          size_t n = 1;
          while (i + n < pair.size() && !utf8_boundary(pair, i + n)) ++n;
          fixed = fixed && !chars.entry(std::string_view(pair).substr(i, n));
        }
      if (fixed) normalizers.push_back(replace({{"String", "\r\n"}}, pair));
    }
    normalizers.push_back({{"type", "Precompiled"}, {"precompiled_charsmap", base64(map)}});
  }
  if (prefix_before_map && first_prefix.empty())  // the map has strings starting with both
    normalizers.push_back(prepend(kSpace));
  if (m.remove_extra_whitespaces) {
    normalizers.push_back(replace({{"Regex", "\\A +|[ " + kSpace + "]+\\z"}}, ""));
    normalizers.push_back(replace({{"Regex", " {2,}"}}, " "));
    if (m.add_dummy_prefix) normalizers.push_back(prepend(kSpace));
  }
  normalizers.push_back(replace({{"String", " "}}, kSpace));
  json model;
  if (m.model_type == 2) {
    json vocab = json::object();
    for (size_t i = 0; i < m.pieces.size(); ++i) vocab[m.pieces[i].text] = i;
    json merges = json::array();
    for (const auto& [l, r] : bpe_merges(m)) merges.push_back({l, r});
    model = {{"type", "BPE"},
             {"dropout", nullptr},
             {"unk_token", piece(unk)},
             {"continuing_subword_prefix", nullptr},
             {"end_of_word_suffix", nullptr},
             {"fuse_unk", true},
             {"byte_fallback", m.byte_fallback},
             {"ignore_merges", false},
             {"vocab", vocab},
             {"merges", merges}};
  } else {
    json vocab = json::array();
    for (const auto& p : m.pieces) vocab.push_back({p.text, p.score});
    model = {{"type", "Unigram"},
             {"unk_id", unk >= 0 ? json(unk) : json(nullptr)},
             {"vocab", vocab},
             {"byte_fallback", m.byte_fallback}};
  }
  json post = nullptr;
  if (bos >= 0) {
    const json b = {{"SpecialToken", {{"id", piece(bos)}, {"type_id", 0}}}};
    post = {{"type", "TemplateProcessing"},
            {"single", {b, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
            {"pair",
             {b,
              {{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
              {{"SpecialToken", {{"id", piece(bos)}, {"type_id", 1}}}},
              {{"Sequence", {{"id", "B"}, {"type_id", 1}}}}}},
            {"special_tokens",
             {{piece(bos).get<std::string>(),
               {{"id", piece(bos)}, {"ids", {bos}}, {"tokens", {piece(bos)}}}}}}};
  }
  // Decoding: U+2581 back to spaces, <0xNN> pieces to bytes, then the leading
  // spaces sentencepiece drops: with remove_extra_whitespaces one U+2581 of each
  // piece until the text is not empty (all the leading spaces, as no piece of
  // such a model has two U+2581s in a row), else with add_dummy_prefix the
  // first one.
  json decoders = json::array();
  decoders.push_back(replace({{"String", kSpace}}, " "));
  if (m.byte_fallback) decoders.push_back({{"type", "ByteFallback"}});
  decoders.push_back({{"type", "Fuse"}});
  if (m.remove_extra_whitespaces)
    decoders.push_back(replace({{"Regex", "\\A +"}}, ""));
  else if (m.add_dummy_prefix)
    decoders.push_back({{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}});
  const json tj = {{"version", "1.0"},
                   {"truncation", nullptr},
                   {"padding", nullptr},
                   {"added_tokens", added},
                   {"normalizer", {{"type", "Sequence"}, {"normalizers", normalizers}}},
                   {"pre_tokenizer", nullptr},
                   {"post_processor", post},
                   {"decoder", {{"type", "Sequence"}, {"decoders", decoders}}},
                   {"model", model}};

  HfTokenizerFiles files;
  files.tokenizer_json = tj.dump(1, ' ', false) + "\n";
  add_config_files(&files, tok, max_length, true);
  return files;
}

}  // namespace strata
