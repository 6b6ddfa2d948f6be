// Chat templates (data/chat.h): Hugging Face chat templates read from their
// files, conversations rendered and tokenized as transformers'
// apply_chat_template(tokenize=True) does, and the assistant's tokens (SFT's
// loss) exactly the answer and its end-of-turn marker. Llama 3's template with
// a byte-level BPE tokenizer.json, Llama 2's with a sentencepiece model.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "core/error.h"
#include "data/chat.h"
#include "data/sft.h"
#include "testing.h"

namespace strata {
namespace {

using testing::error_of;

using Ids = std::vector<int32_t>;

std::string source(const std::string& rel) { return std::string(STRATA_SOURCE_DIR) + "/" + rel; }

const Tokenizer& llama3_tokenizer() {
  static const Tokenizer t = Tokenizer::load(source("tests/fixtures/bpe/llama3/tokenizer.json"));
  return t;
}

const Tokenizer& sentencepiece() {
  static const Tokenizer t = Tokenizer::load(source("data/tokenizers/tok512.model"));
  return t;
}

Ids flagged(const ChatTokens& c) {
  Ids out;
  for (size_t i = 0; i < c.tokens.size(); ++i)
    if (c.assistant[i]) out.push_back(c.tokens[i]);
  return out;
}

Ids concat(std::initializer_list<Ids> parts) {
  Ids out;
  for (const Ids& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

const ChatMessages kConversation = {{"system", "Be brief."},
                                    {"user", "Who is Anne?"},
                                    {"assistant", " Sir Walter's daughter. "},
                                    {"user", "And Frederick?"},
                                    {"assistant", "A captain."}};

TEST(ChatTemplate, Llama3RendersAndMarksTheAnswersThroughEndOfTurn) {
  const Tokenizer& tok = llama3_tokenizer();
  const ChatTemplate t = load_chat_template(source("tests/fixtures/chat/llama3"), tok);
  EXPECT_EQ(t.bos_token, "<|begin_of_text|>");
  EXPECT_EQ(t.eos_token, "<|eot_id|>");
  const std::string text = render_chat_text(t, kConversation, false);
  EXPECT_EQ(text,
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nWho is Anne?<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\nSir Walter's daughter.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nAnd Frederick?<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\nA captain.<|eot_id|>");
  const ChatTokens c = encode_conversation(t, tok, kConversation);
  ASSERT_EQ(c.tokens.size(), c.assistant.size());
  EXPECT_EQ(c.tokens, tok.encode(text));  // the whole text at once, specials as ids
  const Ids eot = tok.encode("<|eot_id|>");
  ASSERT_EQ(eot.size(), 1u);
  EXPECT_EQ(flagged(c),
            concat({tok.encode("Sir Walter's daughter."), eot, tok.encode("A captain."), eot}));
  EXPECT_EQ(c.tokens.front(), tok.bos_id());  // from the template, not added again
  EXPECT_NE(std::count(c.tokens.begin(), c.tokens.end(), tok.bos_id()), 2);

  // A generation prompt ends with the assistant header.
  const Ids prompt = encode_chat_prompt(t, tok, {{"user", "Hi"}});
  EXPECT_EQ(prompt, tok.encode("<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi"
                               "<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"));
}

TEST(ChatTemplate, Llama2WithSentencepieceCutsBosAndEosOutOfTheText) {
  const Tokenizer& tok = sentencepiece();
  const ChatTemplate t =
      load_chat_template(source("tests/fixtures/chat/llama2/tokenizer_config.json"), tok);
  EXPECT_EQ(t.bos_token, "<s>");
  EXPECT_EQ(t.eos_token, "</s>");
  const std::string text = render_chat_text(t, kConversation, false);
  EXPECT_EQ(text,
            "<s>[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nWho is Anne? [/INST] Sir Walter's daughter. "
            "</s><s>[INST] And Frederick? [/INST] A captain. </s>");
  const ChatTokens c = encode_conversation(t, tok, kConversation);
  // As Hugging Face's legacy Llama tokenizer: each stretch between special
  // tokens encoded on its own, BOS and EOS as their ids.
  const Ids want = concat({{tok.bos_id()},
                           tok.encode("[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nWho is Anne? [/INST] "
                                      "Sir Walter's daughter. "),
                           {tok.eos_id(), tok.bos_id()},
                           tok.encode("[INST] And Frederick? [/INST] A captain. "),
                           {tok.eos_id()}});
  EXPECT_EQ(c.tokens, want);
  // The answers' tokens (through EOS) are flagged, decoding to the answers.
  const Ids f = flagged(c);
  ASSERT_GE(f.size(), 2u);
  EXPECT_EQ(f.back(), tok.eos_id());
  EXPECT_EQ(std::count(f.begin(), f.end(), tok.eos_id()), 2);
  EXPECT_EQ(std::count(f.begin(), f.end(), tok.bos_id()), 0);
  std::string answers = tok.decode(f);
  EXPECT_NE(answers.find("Sir Walter's daughter."), std::string::npos) << answers;
  EXPECT_NE(answers.find("A captain."), std::string::npos) << answers;
  EXPECT_EQ(answers.find("INST"), std::string::npos) << answers;
  // The template's role check raises, and SFT data names the line.
  EXPECT_EQ(error_of([&] {
              encode_conversation(t, tok, {{"assistant", "x"}});
            }),
            source("tests/fixtures/chat/llama2/tokenizer_config.json") +
                ":1:314: Conversation roles must alternate user/assistant/user/assistant/...");
  testing::TempDir dir;
  const std::string jsonl = dir.path() + "/bad.jsonl";
  std::ofstream(jsonl)
      << "{\"prompt\": \"a\", \"response\": \"b\"}\n"
      << R"({"messages": [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}, {"role": "assistant", "content": "c"}]})"
      << "\n";
  EXPECT_NE(error_of([&] { SftDataset::load_jsonl(jsonl, tok, t); }).find(jsonl + ":2: "),
            std::string::npos);
}

TEST(ChatTemplate, ReadsEveryFormAndNamesTheFileOnErrors) {
  const Tokenizer& tok = llama3_tokenizer();
  // A bare .jinja file: BOS and EOS are the tokenizer's pieces.
  const ChatTemplate j = load_chat_template(source("tests/fixtures/chat/llama3_2.jinja"), tok);
  EXPECT_EQ(j.bos_token, "<|begin_of_text|>");
  const std::string text = render_chat_text(j, {{"user", "Hi"}}, true);
  EXPECT_EQ(text.rfind("<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n", 0), 0u);
  EXPECT_NE(text.find("Cutting Knowledge Date: December 2023\nToday Date: "), std::string::npos);
  EXPECT_NE(text.find("<|start_header_id|>assistant<|end_header_id|>\n\n"), std::string::npos);

  testing::TempDir dir;
  auto write = [&](const std::string& name, const std::string& body) {
    std::ofstream(dir.path() + "/" + name) << body;
    return dir.path() + "/" + name;
  };
  const std::string none = write("none.json", R"({"bos_token": "<s>"})");
  EXPECT_EQ(error_of([&] { load_chat_template(none, tok); }),
            none + ": no 'chat_template' (the tokenizer has no chat template)");
  const std::string named = write(
      "named.json",
      R"({"chat_template": [{"name": "tool_use", "template": "x"}, {"name": "rag", "template": "y"}]})");
  EXPECT_EQ(error_of([&] { load_chat_template(named, tok); }),
            named + ": 'chat_template' has no template named 'default' (it has tool_use, rag)");
  const std::string with_default = write(
      "default.json",
      R"({"chat_template": [{"name": "default", "template": "{{ messages[0].content }}!"}]})");
  EXPECT_EQ(render_chat_text(load_chat_template(with_default, tok), {{"user", "hey"}}, true),
            "hey!");
  const std::string bad =
      write("bad.jinja", "{% for m in messages %}\n{{ m.content | nosuch }}{% endfor %}");
  EXPECT_EQ(error_of([&] {
              render_chat_text(load_chat_template(bad, tok), {{"user", "a"}}, true);
            }),
            bad + ":2:16: unknown filter 'nosuch'");
  const std::string unclosed = write("unclosed.jinja", "{% if x %}");
  EXPECT_EQ(error_of([&] { load_chat_template(unclosed, tok); }),
            unclosed + ":1:4: unclosed 'if': expected 'elif' before the end of the template");
  EXPECT_EQ(error_of([&] { load_chat_template(dir.path() + "/missing.json", tok); }),
            "chat template " + dir.path() + "/missing.json: no such file");
  const std::string notjson = write("broken.json", "{");
  EXPECT_EQ(error_of([&] { load_chat_template(notjson, tok); }), notjson + ": not valid JSON");
}

TEST(ChatTemplate, StrataOwnTemplateIsUnchanged) {
  const Tokenizer& tok = sentencepiece();
  const ChatTemplate own;
  const ChatTokens c = encode_conversation(own, tok, {{"user", "Hi"}, {"assistant", "Hello"}});
  const Ids want = concat({{tok.bos_id()},
                           tok.encode(own.user_prefix),
                           tok.encode("Hi"),
                           tok.encode(own.user_suffix),
                           tok.encode(own.assistant_prefix),
                           tok.encode("Hello"),
                           {tok.eos_id()}});
  EXPECT_EQ(c.tokens, want);
  EXPECT_EQ(flagged(c), concat({tok.encode("Hello"), {tok.eos_id()}}));
  EXPECT_EQ(encode_chat_prompt(own, tok, {{"user", "Hi"}}),
            concat({{tok.bos_id()},
                    tok.encode(own.user_prefix),
                    tok.encode("Hi"),
                    tok.encode(own.user_suffix),
                    tok.encode(own.assistant_prefix)}));
}

}  // namespace
}  // namespace strata
