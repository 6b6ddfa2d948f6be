// Byte-level BPE (tokenizer.json) against Hugging Face's tokenizers: two
// tokenizers trained here with tokenizers 0.23.3 (Llama 3's pre-tokenizer
// and GPT-2's) and their encodings of 2,841 texts (corpus lines and
// synthetic lines of mixed scripts, digits, whitespace runs, emoji and
// special tokens), made once by tests/fixtures/make_bpe_fixtures.py. strata's
// ids must equal them id for id, its decoding the package's. And PCRE2's
// regex wrapper, which the pre-tokenizer runs on.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <fstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/file.h"
#include "core/regex.h"
#include "data/bpe.h"
#include "data/tokenizer.h"

namespace strata {
namespace {

std::string fixture(const std::string& name) {
  return std::string(STRATA_SOURCE_DIR) + "/tests/fixtures/bpe/" + name;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(Regex, FindsUnicodeClassesLookaheadAndInlineFlags) {
  const Regex letters = Regex::compile(R"(\p{L}+)", "test");
  const auto m = letters.find_all("ab 東京 12 Ωμ");
  ASSERT_EQ(m.size(), 3u);
  EXPECT_EQ(m[1].first, 3u);  // byte offsets
  EXPECT_EQ(m[1].second, 9u);
  const Regex ws = Regex::compile(R"(\s+(?!\S))", "test");
  EXPECT_EQ(ws.find_all("a   b").size(), 1u);  // two spaces: the last one goes with b
  EXPECT_EQ(ws.find_all("a   b")[0], std::make_pair(size_t(1), size_t(3)));
  const Regex ci = Regex::compile(R"((?i:'ll))", "test");
  EXPECT_EQ(ci.find_all("I'LL you'll").size(), 2u);
  const Regex dot = Regex::compile(R"((?s)a.b)", "test");
  EXPECT_EQ(dot.find_all("a\nb").size(), 1u);
  const Regex behind = Regex::compile(R"((?<=The answer is )\d+)", "test");
  Regex::Match mm;
  ASSERT_TRUE(behind.search("The answer is 42.", 0, &mm));
  EXPECT_EQ(mm.begin, 14u);
  EXPECT_EQ(mm.end, 16u);
}

TEST(Regex, CapturesGroupsAndAdvancesPastEmptyMatches) {
  const Regex r = Regex::compile(R"((\d+)(x)?)", "test");
  Regex::Match m;
  ASSERT_TRUE(r.search("ab 123 c", 0, &m));
  ASSERT_EQ(m.groups.size(), 2u);
  EXPECT_EQ(m.groups[0], std::make_pair(size_t(3), size_t(6)));
  EXPECT_EQ(m.groups[1].first, Regex::npos);
  EXPECT_FALSE(r.search("ab 123 c", 7, &m));
  // Empty matches: one per position, as Python's finditer gives (4 for "abc").
  EXPECT_EQ(Regex::compile("x*", "test").find_all("abc").size(), 4u);
  EXPECT_EQ(Regex::compile("x*", "test").find_all("aéc").size(), 4u);  // by character
}

TEST(Regex, LongTextAndInvalidUtf8DoNotFail) {
  // The pattern the README once suggested for stop sequences, on 100k characters.
  const std::string text(100000, 'a');
  const Regex r = Regex::compile(R"((.|\n)*?The answer)", "test");
  Regex::Match m;
  EXPECT_FALSE(r.search(text + "\n", 0, &m));
  EXPECT_EQ(Regex::compile(R"(\p{L}+)", "test").find_all("ab\xff\xfe cd").size(), 2u);
}

TEST(Regex, ABadPatternIsOneLineNamingWhereAndOffset) {
  const std::string e = error_of([] { Regex::compile("(ab", "task.yaml: filter"); });
  EXPECT_NE(e.find("task.yaml: filter: bad regular expression '(ab'"), std::string::npos) << e;
  EXPECT_NE(e.find("offset 3"), std::string::npos) << e;
  EXPECT_EQ(e.find('\n'), std::string::npos);
}

struct Row {
  std::string text, llama3_decoded;
  std::vector<int32_t> llama3, gpt2;
};

std::vector<Row> rows() {
  std::ifstream f(fixture("encodings.jsonl"));
  std::vector<Row> out;
  std::string line;
  while (std::getline(f, line)) {
    const auto j = nlohmann::json::parse(line);
    out.push_back({j["text"], j["llama3_decoded"], j["llama3"], j["gpt2"]});
  }
  return out;
}

TEST(BpeTokenizer, Llama3PreTokenizerEncodesAsHuggingFaceIdForId) {
  const Tokenizer t = Tokenizer::load(fixture("llama3/tokenizer.json"));
  ASSERT_EQ(t.kind(), Tokenizer::Kind::Bpe);
  EXPECT_STREQ(t.file_name(), "tokenizer.json");
  const std::vector<Row> rs = rows();
  ASSERT_GE(rs.size(), 2800u);
  size_t same = 0, ids = 0, decoded = 0;
  for (const Row& r : rs) {
    const std::vector<int32_t> got = t.encode(r.text);
    ids += got.size();
    if (got == r.llama3)
      ++same;
    else
      ADD_FAILURE() << "text " << nlohmann::json(r.text).dump() << ": "
                    << nlohmann::json(got).dump() << " != " << nlohmann::json(r.llama3).dump();
    if (t.decode(r.llama3) == r.llama3_decoded) ++decoded;
  }
  EXPECT_EQ(same, rs.size());
  EXPECT_EQ(decoded, rs.size());
  EXPECT_GT(ids, 100000u);
}

TEST(BpeTokenizer, Gpt2ByteLevelWithPrefixSpaceEncodesAsHuggingFaceIdForId) {
  const Tokenizer t = Tokenizer::load(fixture("gpt2/tokenizer.json"));
  size_t same = 0;
  const std::vector<Row> rs = rows();
  for (const Row& r : rs) {
    const std::vector<int32_t> got = t.encode(r.text);
    if (got == r.gpt2)
      ++same;
    else
      ADD_FAILURE() << "text " << nlohmann::json(r.text).dump() << ": "
                    << nlohmann::json(got).dump() << " != " << nlohmann::json(r.gpt2).dump();
  }
  EXPECT_EQ(same, rs.size());
}

TEST(BpeTokenizer, SpecialTokensBosEosAndRoundTrip) {
  const Tokenizer t = Tokenizer::load(fixture("llama3/tokenizer.json"));
  EXPECT_EQ(t.bos_id(), 0);  // the post-processor's <|begin_of_text|>
  EXPECT_EQ(t.eos_id(), 1);  // <|end_of_text|>
  EXPECT_EQ(t.end_of_turn_ids(), (std::vector<int32_t>{4}));  // <|eot_id|>
  EXPECT_EQ(t.unk_id(), -1);
  EXPECT_EQ(t.vocab_size(), 3000);
  EXPECT_EQ(t.id_to_piece(4), "<|eot_id|>");
  EXPECT_EQ(t.encode("a<|eot_id|>b"),
            (std::vector<int32_t>{t.encode("a")[0], 4, t.encode("b")[0]}));
  EXPECT_EQ(t.decode({0, 4}), "");  // special tokens decode to nothing
  const std::string text = "Ünïcödé, 数字 12345 and  spaces\t\n🤖!";
  EXPECT_EQ(t.decode(t.encode(text)), text);
  const Tokenizer g = Tokenizer::load(fixture("gpt2/tokenizer.json"));
  EXPECT_EQ(g.bos_id(), -1);
  EXPECT_EQ(g.eos_id(), 0);  // <|endoftext|>
  EXPECT_TRUE(g.end_of_turn_ids().empty());
  // A character cut in two by the ids decodes to U+FFFD, as tokenizers does.
  const std::vector<int32_t> half = t.encode("\xC3");  // one byte of a two-byte character
  EXPECT_EQ(t.decode(half), "\xEF\xBF\xBD");
}

TEST(BpeTokenizer, SentencepieceModelsStillLoadAsTheirKind) {
  const Tokenizer t =
      Tokenizer::load(std::string(STRATA_SOURCE_DIR) + "/data/tokenizers/tok512.model");
  EXPECT_EQ(t.kind(), Tokenizer::Kind::SentencePiece);
  EXPECT_STREQ(t.file_name(), "tokenizer.model");
  EXPECT_EQ(t.vocab_size(), 512);
}

TEST(BpeTokenizer, BadFilesAreOneLineErrorsNamingTheFileAndField) {
  const std::string good = read_file(fixture("llama3/tokenizer.json"), "test");
  const auto bad = [&](const std::string& from, const std::string& to) {
    std::string s = good;
    const size_t at = s.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    s.replace(at, from.size(), to);
    return error_of([&] { Tokenizer::from_bytes(s, "my/tokenizer.json"); });
  };
  const std::vector<std::pair<std::string, std::string>> cases = {
      {bad("\"type\": \"BPE\"", "\"type\": \"Unigram\""), "model.type"},
      {bad("\"normalizer\": null", "\"normalizer\": {\"type\": \"NFC\"}"), "normalizer"},
      {bad("\"Isolated\"", "\"MergedWithNext\""), "behavior"},
      {bad("\\\\p{N}]?", "\\\\p{N}]?("), "bad regular expression"},
      {bad("\"ignore_merges\": true", "\"ignore_merges\": true, \"byte_fallback\": true"),
       "byte_fallback"},
      {error_of([] { Tokenizer::from_bytes("{\"model\": 3", "my/tokenizer.json"); }),
       "not valid JSON"},
      {error_of([] { Tokenizer::from_bytes("{\"version\": \"1.0\"}", "my/tokenizer.json"); }),
       "no \"model\""},
  };
  for (const auto& [e, what] : cases) {
    EXPECT_NE(e.find("tokenizer my/tokenizer.json: "), std::string::npos) << e;
    EXPECT_NE(e.find(what), std::string::npos) << e;
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  }
}

}  // namespace
}  // namespace strata
