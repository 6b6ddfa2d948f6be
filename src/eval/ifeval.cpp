// IFEval's instruction checks (eval/ifeval.h), written from the harness's
// definitions of what each instruction asks.
#include "eval/ifeval.h"

#include <algorithm>
#include <cctype>
#include <functional>
#include <map>

#include "core/error.h"
#include "core/regex.h"
#include "core/text.h"

namespace strata::ifeval {

using json = nlohmann::ordered_json;

const char* const kApproximate[5] = {
    "language:response_language", "change_case:english_capital", "change_case:english_lowercase",
    "length_constraints:number_sentences", "change_case:capital_word_frequency"};

namespace {

const Regex& re(const std::string& pattern) {
  thread_local std::map<std::string, Regex> cache;
  auto it = cache.find(pattern);
  if (it == cache.end()) it = cache.emplace(pattern, Regex::compile(pattern, "ifeval")).first;
  return it->second;
}

bool search(const std::string& pattern, const std::string& text) {
  Regex::Match m;
  return re(pattern).search(text, 0, &m);
}

size_t count(const std::string& pattern, const std::string& text) {
  return re(pattern).find_all(text).size();
}

std::vector<std::string> find_all(const std::string& pattern, const std::string& text) {
  std::vector<std::string> out;
  for (const auto& [b, e] : re(pattern).find_all(text)) out.push_back(text.substr(b, e - b));
  return out;
}

// Python's re.split for patterns without groups.
std::vector<std::string> re_split(const std::string& pattern, const std::string& text) {
  std::vector<std::string> out;
  size_t last = 0;
  for (const auto& [b, e] : re(pattern).find_all(text)) {
    out.push_back(text.substr(last, b - last));
    last = e;
  }
  out.push_back(text.substr(last));
  return out;
}

// Python's re.sub with \1-style group references in the replacement.
std::string sub(const std::string& pattern, const std::string& repl, const std::string& text) {
  std::string out;
  size_t last = 0;
  for (const Regex::Match& m : re(pattern).matches(text)) {
    out += text.substr(last, m.begin - last);
    for (size_t i = 0; i < repl.size(); ++i) {
      if (repl[i] == '\\' && i + 1 < repl.size() && repl[i + 1] >= '1' && repl[i + 1] <= '9') {
        const auto [b, e] = m.groups.at(size_t(repl[++i] - '1'));
        if (b != Regex::npos) out += text.substr(b, e - b);
      } else {
        out += repl[i];
      }
    }
    last = m.end;
  }
  return out + text.substr(last);
}

std::string lower(std::string s) {
  for (char& c : s)
    if (c >= 'A' && c <= 'Z') c = char(c - 'A' + 'a');
  return s;
}

// Python's str.isupper / str.islower: some cased letter, none of the other case.
bool is_upper(const std::string& s) {
  return search(R"(\p{Lu})", s) && !search(R"([\p{Ll}\p{Lt}])", s);
}
bool is_lower(const std::string& s) {
  return search(R"(\p{Ll})", s) && !search(R"([\p{Lu}\p{Lt}])", s);
}

// The writing system a language is written in, by its letters' script.
const std::map<std::string, std::string>& language_scripts() {
  static const std::map<std::string, std::string> m = {
      {"en", "Latin"},      {"es", "Latin"},      {"pt", "Latin"},      {"fr", "Latin"},
      {"de", "Latin"},      {"it", "Latin"},      {"pl", "Latin"},      {"vi", "Latin"},
      {"sw", "Latin"},      {"fi", "Latin"},      {"ru", "Cyrillic"},   {"uk", "Cyrillic"},
      {"bg", "Cyrillic"},   {"ar", "Arabic"},     {"ur", "Arabic"},     {"fa", "Arabic"},
      {"hi", "Devanagari"}, {"ne", "Devanagari"}, {"mr", "Devanagari"}, {"bn", "Bengali"},
      {"th", "Thai"},       {"ta", "Tamil"},      {"te", "Telugu"},     {"ko", "Hangul"},
      {"he", "Hebrew"},     {"kn", "Kannada"},    {"gu", "Gujarati"},   {"pa", "Gurmukhi"},
      {"ml", "Malayalam"},  {"ja", "Japanese"}};
  return m;
}

// Most of the text's letters are in the language's script (no letters at
// all: true, as the harness when langdetect finds nothing to go on).
bool in_language(const std::string& text, const std::string& language) {
  const auto it = language_scripts().find(language);
  if (it == language_scripts().end()) return false;
  const size_t letters = count(R"(\p{L})", text);
  if (letters == 0) return true;
  const std::string script =
      it->second == "Japanese" ? R"([\p{Hiragana}\p{Katakana}\p{Han}])" : "\\p{" + it->second + "}";
  return 2 * count(script, text) > letters;
}

bool compare(int64_t actual, const std::string& relation, int64_t n) {
  return relation == "less than" ? actual < n : actual >= n;
}

int64_t count_words(const std::string& s) { return int64_t(count(R"(\w+)", s)); }

int64_t capital_words(const std::string& s) {
  int64_t n = 0;
  for (const std::string& tok : find_all(R"(\S+)", s)) {
    const std::string word = sub(R"(^[\p{P}\p{S}]+|[\p{P}\p{S}]+$)", "", tok);
    n += is_upper(word);
  }
  return n;
}

bool paragraphs_ok(const std::string& value, int64_t want) {
  const auto paragraphs = re_split(R"(\s?\*\*\*\s?)", value);
  int64_t n = int64_t(paragraphs.size());
  for (size_t i = 0; i < paragraphs.size(); ++i) {
    if (!python_strip(paragraphs[i]).empty()) continue;
    if (i == 0 || i + 1 == paragraphs.size())
      --n;
    else
      return false;
  }
  return n == want;
}

bool nth_paragraph_ok(const std::string& value, int64_t want, int64_t nth,
                      const std::string& first) {
  const auto paragraphs = python_split(value, "\n\n");
  int64_t n = int64_t(paragraphs.size());
  for (const std::string& p : paragraphs) n -= python_strip(p).empty();
  if (nth > n) return false;
  const std::string paragraph = python_strip(paragraphs[size_t(nth - 1)]);
  if (paragraph.empty()) return false;
  std::string word = find_all(R"(\S+)", paragraph).at(0);
  word.erase(0, word.find_first_not_of('\''));
  word.erase(0, word.find_first_not_of('"'));
  std::string got;
  for (char c : word) {
    if (std::string(".,?!'\"").find(c) != std::string::npos) break;
    got += c;
  }
  return n == want && lower(got) == lower(first);
}

bool highlights_ok(const std::string& value, int64_t want) {
  int64_t n = 0;
  for (const std::string& h : find_all(R"(\*[^\n\*]*\*)", value)) {
    const size_t b = h.find_first_not_of('*'), e = h.find_last_not_of('*');
    n += b != std::string::npos && !python_strip(h.substr(b, e - b + 1)).empty();
  }
  for (const std::string& h : find_all(R"(\*\*[^\n\*]*\*\*)", value))
    n += !python_strip(h.substr(2, h.size() - 4)).empty();
  return n >= want;
}

bool json_ok(std::string v) {
  v = python_strip(v);
  for (const char* p : {"```json", "```Json", "```JSON", "```"})
    if (v.starts_with(p)) v.erase(0, std::string(p).size());
  if (v.ends_with("```")) v.resize(v.size() - 3);
  v = python_strip(v);
  return json::accept(v);
}

bool two_responses_ok(const std::string& value) {
  const auto parts = python_split(value, "******");
  std::vector<std::string> valid;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (python_strip(parts[i]).empty()) {
      if (i != 0 && i + 1 != parts.size()) return false;
    } else {
      valid.push_back(parts[i]);
    }
  }
  return valid.size() == 2 && python_strip(valid[0]) != python_strip(valid[1]);
}

bool ends_with_phrase(const std::string& value, const std::string& phrase) {
  std::string v = python_strip(value);
  const size_t b = v.find_first_not_of('"'), e = v.find_last_not_of('"');
  v = b == std::string::npos ? "" : v.substr(b, e - b + 1);
  return lower(v).ends_with(lower(python_strip(phrase)));
}

bool postscript_ok(const std::string& value, const std::string& marker) {
  const std::string pattern = marker == "P.P.S"  ? R"((?m)\s*p\.\s?p\.\s?s.*$)"
                              : marker == "P.S." ? R"((?m)\s*p\.\s?s\..*$)"
                                                 : "(?m)\\s*" + lower(marker) + ".*$";
  return search(pattern, lower(value));
}

// The instruction's parameters, falsy ones dropped as the harness drops them.
struct Params {
  const json& kw;
  bool has(const char* k) const {
    if (!kw.is_object() || !kw.contains(k)) return false;
    const json& v = kw[k];
    return !(v.is_null() || (v.is_boolean() && !v.get<bool>()) ||
             (v.is_number() && v.get<double>() == 0) ||
             (v.is_string() && v.get<std::string>().empty()) || (v.is_array() && v.empty()));
  }
  int64_t num(const char* k) const { return kw[k].get<int64_t>(); }
  std::string str(const char* k) const { return kw[k].get<std::string>(); }
  std::vector<std::string> list(const char* k) const {
    return kw[k].get<std::vector<std::string>>();
  }
};

struct Check {
  std::vector<const char*> needs;  // parameters the check cannot do without
  std::function<bool(const Params&, const std::string&)> test;
};

const std::map<std::string, Check>& checks() {
  using P = const Params&;
  using S = const std::string&;
  static const std::map<std::string, Check> m = {
      {"keywords:existence",
       {{"keywords"},
        [](P p, S v) {
          for (const std::string& k : p.list("keywords"))
            if (!search("(?i)" + k, v)) return false;
          return true;
        }}},
      {"keywords:frequency",
       {{"keyword", "frequency", "relation"},
        [](P p, S v) {
          return compare(int64_t(count("(?i)" + python_strip(p.str("keyword")), v)),
                         p.str("relation"), p.num("frequency"));
        }}},
      {"keywords:forbidden_words",
       {{"forbidden_words"},
        [](P p, S v) {
          for (const std::string& w : p.list("forbidden_words"))
            if (search("(?i)\\b" + w + "\\b", v)) return false;
          return true;
        }}},
      {"keywords:letter_frequency",
       {{"letter", "let_frequency", "let_relation"},
        [](P p, S v) {
          const char letter = lower(python_strip(p.str("letter")))[0];
          const std::string l = lower(v);
          return compare(std::count(l.begin(), l.end(), letter), p.str("let_relation"),
                         p.num("let_frequency"));
        }}},
      {"language:response_language",
       {{"language"}, [](P p, S v) { return in_language(v, p.str("language")); }}},
      {"length_constraints:number_sentences",
       {{"num_sentences", "relation"},
        [](P p, S v) {
          return compare(int64_t(split_into_sentences(v).size()), p.str("relation"),
                         p.num("num_sentences"));
        }}},
      {"length_constraints:number_paragraphs",
       {{"num_paragraphs"}, [](P p, S v) { return paragraphs_ok(v, p.num("num_paragraphs")); }}},
      {"length_constraints:number_words",
       {{"num_words", "relation"},
        [](P p, S v) { return compare(count_words(v), p.str("relation"), p.num("num_words")); }}},
      {"length_constraints:nth_paragraph_first_word",
       {{"num_paragraphs", "nth_paragraph", "first_word"},
        [](P p, S v) {
          return nth_paragraph_ok(v, p.num("num_paragraphs"), p.num("nth_paragraph"),
                                  p.str("first_word"));
        }}},
      {"detectable_content:number_placeholders",
       {{"num_placeholders"},
        [](P p, S v) { return int64_t(count(R"(\[.*?\])", v)) >= p.num("num_placeholders"); }}},
      {"detectable_content:postscript",
       {{"postscript_marker"},
        [](P p, S v) { return postscript_ok(v, python_strip(p.str("postscript_marker"))); }}},
      {"detectable_format:number_bullet_lists",
       {{"num_bullets"},
        [](P p, S v) {
          return int64_t(count(R"((?m)^\s*\*[^\*].*$)", v) + count(R"((?m)^\s*-.*$)", v)) ==
                 p.num("num_bullets");
        }}},
      {"detectable_format:constrained_response",
       {{},
        [](P, S v) {
          const std::string s = python_strip(v);
          for (const char* o : {"My answer is yes.", "My answer is no.", "My answer is maybe."})
            if (s.find(o) != std::string::npos) return true;
          return false;
        }}},
      {"detectable_format:number_highlighted_sections",
       {{"num_highlights"}, [](P p, S v) { return highlights_ok(v, p.num("num_highlights")); }}},
      {"detectable_format:multiple_sections",
       {{"section_spliter", "num_sections"},
        [](P p, S v) {
          const std::string pattern =
              "\\s?" + python_strip(p.str("section_spliter")) + "\\s?\\d+\\s?";
          return int64_t(re_split(pattern, v).size()) - 1 >= p.num("num_sections");
        }}},
      {"detectable_format:json_format", {{}, [](P, S v) { return json_ok(v); }}},
      {"detectable_format:title",
       {{},
        [](P, S v) {
          for (const std::string& t : find_all(R"(<<[^\n]+>>)", v)) {
            const size_t b = t.find_first_not_of('<'), e = t.find_last_not_of('>');
            if (b != std::string::npos && e != std::string::npos && e >= b &&
                !python_strip(t.substr(b, e - b + 1)).empty())
              return true;
          }
          return false;
        }}},
      {"combination:two_responses", {{}, [](P, S v) { return two_responses_ok(v); }}},
      {"combination:repeat_prompt",
       {{"prompt_to_repeat"},
        [](P p, S v) {
          return lower(python_strip(v)).starts_with(lower(python_strip(p.str("prompt_to_repeat"))));
        }}},
      {"startend:end_checker",
       {{"end_phrase"}, [](P p, S v) { return ends_with_phrase(v, p.str("end_phrase")); }}},
      {"change_case:capital_word_frequency",
       {{"capital_frequency", "capital_relation"},
        [](P p, S v) {
          return compare(capital_words(v), p.str("capital_relation"), p.num("capital_frequency"));
        }}},
      {"change_case:english_capital",
       {{}, [](P, S v) { return is_upper(v) && in_language(v, "en"); }}},
      {"change_case:english_lowercase",
       {{}, [](P, S v) { return is_lower(v) && in_language(v, "en"); }}},
      {"punctuation:no_comma", {{}, [](P, S v) { return v.find(',') == std::string::npos; }}},
      {"startend:quotation",
       {{},
        [](P, S v) {
          const std::string s = python_strip(v);
          return utf8_length(s) > 1 && s.front() == '"' && s.back() == '"';
        }}},
  };
  return m;
}

const char* const kRelationParams[] = {"relation", "let_relation", "capital_relation"};

}  // namespace

bool Verdict::all_strict() const {
  return std::all_of(strict.begin(), strict.end(), [](bool b) { return b; });
}
bool Verdict::all_loose() const {
  return std::all_of(loose.begin(), loose.end(), [](bool b) { return b; });
}

void validate(const json& doc, const std::string& where) {
  STRATA_CHECK(doc.contains("instruction_id_list") && doc["instruction_id_list"].is_array() &&
                   doc.contains("kwargs") && doc["kwargs"].is_array() &&
                   doc["kwargs"].size() == doc["instruction_id_list"].size(),
               where, ": strata.ifeval needs instruction_id_list and kwargs of the same length");
  for (size_t i = 0; i < doc["instruction_id_list"].size(); ++i) {
    const std::string id = doc["instruction_id_list"][i].get<std::string>();
    const auto it = checks().find(id);
    STRATA_CHECK(it != checks().end(), where, ": unknown IFEval instruction '", one_line(id), "'");
    const Params p{doc["kwargs"][i]};
    for (const char* k : it->second.needs)
      STRATA_CHECK(p.has(k), where, ": instruction '", id, "' has no '", k,
                   "' (the harness would draw one at random)");
    for (const char* k : kRelationParams)
      if (p.has(k))
        STRATA_CHECK(p.str(k) == "less than" || p.str(k) == "at least", where, ": instruction '",
                     id, "': ", k, " must be 'less than' or 'at least', got '", one_line(p.str(k)),
                     "'");
    if (id == "keywords:letter_frequency") {
      const std::string l = p.str("letter");
      STRATA_CHECK(l.size() == 1 && std::isalpha(static_cast<unsigned char>(l[0])), where,
                   ": instruction '", id, "': letter must be one ASCII letter, got '", one_line(l),
                   "'");
    }
    if (id == "length_constraints:nth_paragraph_first_word")
      STRATA_CHECK(p.num("nth_paragraph") >= 1 && p.num("nth_paragraph") <= p.num("num_paragraphs"),
                   where, ": instruction '", id, "': nth_paragraph must be in 1..num_paragraphs");
    try {  // the parameters' types, by running the check once
      it->second.test(p, "x");
    } catch (const nlohmann::json::exception&) {
      fail(cat(where, ": instruction '", id, "': a parameter has the wrong type (", p.kw.dump(),
               ")"));
    }
    if (id == "language:response_language")
      STRATA_CHECK(language_scripts().count(p.str("language")), where, ": unknown language '",
                   one_line(p.str("language")), "'");
  }
}

bool follows(const std::string& id, const json& kwargs, const std::string& response) {
  const auto it = checks().find(id);
  STRATA_CHECK(it != checks().end(), "unknown IFEval instruction '", id, "'");
  return !python_strip(response).empty() && it->second.test(Params{kwargs}, response);
}

Verdict judge(const json& doc, const std::string& response) {
  const auto lines = python_split(response, "\n");
  auto join_lines = [&](size_t from, size_t to) {
    std::string out;
    for (size_t i = from; i < to; ++i) out += (i > from ? "\n" : "") + lines[i];
    return python_strip(out);
  };
  const std::string no_first = join_lines(1, lines.size());
  const std::string no_last = join_lines(0, lines.size() - 1);
  const std::string no_both = lines.size() >= 2 ? join_lines(1, lines.size() - 1) : "";
  const std::vector<std::string> variants = {response,
                                             python_replace(response, "*", ""),
                                             no_first,
                                             no_last,
                                             no_both,
                                             python_replace(no_first, "*", ""),
                                             python_replace(no_last, "*", ""),
                                             python_replace(no_both, "*", "")};
  Verdict v;
  for (size_t i = 0; i < doc["instruction_id_list"].size(); ++i) {
    const std::string id = doc["instruction_id_list"][i].get<std::string>();
    const json& kw = doc["kwargs"][i];
    v.strict.push_back(follows(id, kw, response));
    bool any = false;
    for (const std::string& r : variants) any = any || follows(id, kw, r);
    v.loose.push_back(any);
  }
  return v;
}

std::vector<std::string> split_into_sentences(const std::string& input) {
  const std::string
      alpha = "([A-Za-z])",
      prefixes = "(Mr|St|Mrs|Ms|Dr)[.]", suffixes = "(Inc|Ltd|Jr|Sr|Co)",
      starters =
          R"((Mr|Mrs|Ms|Dr|Prof|Capt|Cpt|Lt|He\s|She\s|It\s|They\s|Their\s|Our\s|We\s|But\s|However\s|That\s|This\s|Wherever))",
      acronyms = "([A-Z][.][A-Z][.](?:[A-Z][.])?)", websites = "[.](com|net|org|io|gov|edu|me)",
      digits = "([0-9])";
  std::string t = python_replace(" " + input + "  ", "\n", " ");
  t = sub(prefixes, "\\1<prd>", t);
  t = sub(websites, "<prd>\\1", t);
  t = sub(digits + "[.]" + digits, "\\1<prd>\\2", t);
  {  // runs of dots: one <prd> per dot, then a stop
    std::string out;
    size_t last = 0;
    for (const auto& [b, e] : re(R"(\.{2,})").find_all(t)) {
      out += t.substr(last, b - last);
      for (size_t k = b; k < e; ++k) out += "<prd>";
      out += "<stop>";
      last = e;
    }
    t = out + t.substr(last);
  }
  t = python_replace(t, "Ph.D.", "Ph<prd>D<prd>");
  t = sub("\\s" + alpha + "[.] ", " \\1<prd> ", t);
  t = sub(acronyms + " " + starters, "\\1<stop> \\2", t);
  t = sub(alpha + "[.]" + alpha + "[.]" + alpha + "[.]", "\\1<prd>\\2<prd>\\3<prd>", t);
  t = sub(alpha + "[.]" + alpha + "[.]", "\\1<prd>\\2<prd>", t);
  t = sub(" " + suffixes + "[.] " + starters, " \\1<stop> \\2", t);
  t = sub(" " + suffixes + "[.]", " \\1<prd>", t);
  t = sub(" " + alpha + "[.]", " \\1<prd>", t);
  t = python_replace(t, ".\u201d", "\u201d.");
  t = python_replace(t, ".\"", "\".");
  t = python_replace(t, "!\"", "\"!");
  t = python_replace(t, "?\"", "\"?");
  t = python_replace(t, ".", ".<stop>");
  t = python_replace(t, "?", "?<stop>");
  t = python_replace(t, "!", "!<stop>");
  t = python_replace(t, "<prd>", ".");
  std::vector<std::string> out;
  for (const std::string& s : python_split(t, "<stop>")) out.push_back(python_strip(s));
  if (!out.empty() && out.back().empty()) out.pop_back();
  return out;
}

}  // namespace strata::ifeval
