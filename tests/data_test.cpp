// Data pipeline: SHA-256, the shipped data's checksums, sentencepiece
// tokenizers (load, train, round trips), token shards, dataset preparation,
// the pretraining and SFT loaders, the repeatable CLI option and the
// `strata tokenizer` / `strata data` commands.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "cli/args.h"
#include "core/error.h"
#include "core/sha256.h"
#include "data/loader.h"
#include "data/sft.h"
#include "data/shards.h"
#include "data/tokenizer.h"
#include "manifest.h"
#include "testing.h"

namespace strata {
namespace {

namespace fs = std::filesystem;
using Ids = std::vector<int32_t>;

const std::string kSource = STRATA_SOURCE_DIR;
const std::string kTok512 = kSource + "/data/tokenizers/tok512.model";

// A scratch directory per test binary run, removed at exit.
const fs::path& scratch() {
  static const fs::path dir = [] {
    fs::path d = fs::temp_directory_path() / ("strata_data_test_" + std::to_string(::getpid()));
    fs::remove_all(d);
    fs::create_directories(d);
    return d;
  }();
  return dir;
}
struct ScratchCleanup : ::testing::Environment {
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(scratch(), ec);
  }
};
const auto* const kCleanup = ::testing::AddGlobalTestEnvironment(new ScratchCleanup);

std::string path_in(const std::string& name) { return (scratch() / name).string(); }

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write_bytes(const std::string& path, const std::string& bytes) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
}

// ~150 KB of Jane Austen: training text for the small tokenizers.
const std::string& training_text_path() {
  static const std::string path = [] {
    std::string text = read_bytes(kSource + "/data/corpora/janeausten/persuasion.txt");
    text.resize(150000);
    const std::string p = path_in("corpus/persuasion-150k.txt");
    write_bytes(p, text);
    return p;
  }();
  return path;
}

// A small BPE tokenizer with byte fallback, trained once and shared.
const Tokenizer& small_tokenizer() {
  static const Tokenizer tok = [] {
    TokenizerTrainOptions o;
    o.inputs = {training_text_path()};
    o.out = path_in("tok/bpe400.model");
    o.vocab_size = 400;
    return train_tokenizer(o);
  }();
  return tok;
}

// ---------------------------------------------------------------- sha256

TEST(Sha256, StandardVectors) {
  EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  const std::string million(1000000, 'a');
  EXPECT_EQ(sha256_hex(million),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  // The same million bytes fed in uneven pieces (exercises the block buffer).
  Sha256 h;
  size_t done = 0, step = 1;
  while (done < million.size()) {
    const size_t n = std::min(step, million.size() - done);
    h.update(million.data() + done, n);
    done += n;
    step = step * 7 % 131 + 1;
  }
  EXPECT_EQ(h.hex_digest(), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  // Lengths around the padding boundary (55, 56, 63, 64 bytes) differ from each other.
  std::set<std::string> digests;
  for (size_t n : {55, 56, 63, 64, 65}) digests.insert(sha256_hex(std::string(n, 'x')));
  EXPECT_EQ(digests.size(), 5u);
  EXPECT_EQ(sha256_hex(std::string(56, 'a')),
            "b35439a4ac6f0948b6d6f9e3c6af0f5f590ce20f1bde7090ef7970686ec6738a");
}

// Every file in data/MANIFEST.md's first table has the recorded sha256.
TEST(ShippedData, ManifestChecksums) {
  const auto rows =
      testing::manifest_checksums(kSource + "/data/MANIFEST.md", "file (relative to data/)");
  for (const auto& [name, sha] : rows) {
    const std::string file = kSource + "/data/" + name;
    ASSERT_TRUE(fs::is_regular_file(file)) << file;
    EXPECT_EQ(sha256_hex(read_bytes(file)), sha) << file;
  }
  EXPECT_GE(rows.size(), 9u);
}

// ---------------------------------------------------------------- tokenizer

TEST(Tokenizer, ShippedTok512) {
  const Tokenizer tok = Tokenizer::load(kTok512);
  EXPECT_EQ(tok.vocab_size(), 512);
  EXPECT_EQ(tok.bos_id(), 1);
  EXPECT_EQ(tok.eos_id(), 2);
  EXPECT_EQ(tok.unk_id(), 0);
  EXPECT_EQ(tok.encode("Once upon a time"), (Ids{403, 407, 261, 378}));
  EXPECT_EQ(tok.decode({403, 407, 261, 378}), "Once upon a time");
  EXPECT_EQ(tok.id_to_piece(403), "\xe2\x96\x81Once");
  EXPECT_EQ(tok.sha256(), "fec6aa960a1fb3ebf71d26f9b0e486afcbd76c34cf0fbfb93e21126ca9f778d3");
  EXPECT_EQ(tok.model_bytes(), read_bytes(kTok512));
  // The same model from its bytes (as a checkpoint stores it).
  const Tokenizer again = Tokenizer::from_bytes(tok.model_bytes(), "checkpoint");
  EXPECT_EQ(again.encode("Once upon a time"), tok.encode("Once upon a time"));
  EXPECT_EQ(again.name(), "checkpoint");
  EXPECT_ERROR(tok.decode({1, 600}), "600", kTok512);
  EXPECT_ERROR(tok.id_to_piece(-1), "-1");
}

TEST(Tokenizer, LoadErrorsNameTheFile) {
  const std::string missing = path_in("no/such/tok.model");
  EXPECT_ERROR(Tokenizer::load(missing), missing, "no such file");
  const std::string garbage = path_in("garbage.model");
  write_bytes(garbage, std::string("\xff\xfe this is not a sentencepiece model \x01\x02\x03", 40));
  EXPECT_ERROR(Tokenizer::load(garbage), garbage, "not a sentencepiece model");
  const std::string empty = path_in("empty.model");
  write_bytes(empty, "");
  EXPECT_ERROR(Tokenizer::load(empty), empty);
  EXPECT_ERROR(Tokenizer::from_bytes("garbage", "ckpt.h5:tokenizer"), "ckpt.h5:tokenizer");
}

TEST(Tokenizer, TrainBpeRoundTripsAndFallsBackToBytes) {
  const Tokenizer& tok = small_tokenizer();
  EXPECT_EQ(tok.vocab_size(), 400);
  EXPECT_EQ(tok.unk_id(), 0);
  EXPECT_EQ(tok.bos_id(), 1);
  EXPECT_EQ(tok.eos_id(), 2);
  EXPECT_EQ(tok.pad_id(), -1);
  EXPECT_EQ(tok.model_bytes(), read_bytes(path_in("tok/bpe400.model")));
  EXPECT_TRUE(fs::is_regular_file(path_in("tok/bpe400.vocab")));
  // Identity normalization: ordinary text, repeated spaces, tabs, newlines and a
  // leading space come back unchanged.
  for (const std::string text :
       {"Anne Elliot walked to Uppercross, and found the Musgroves at home.",
        "  two  spaces,\ta tab,\nand a new line; numbers 1817 and 3.14.", " leading",
        "Sir Walter Elliot, of Kellynch-hall, in Somersetshire"}) {
    EXPECT_EQ(tok.decode(tok.encode(text)), text);
  }
  // Unseen characters become <0xNN> pieces and round-trip.
  for (const std::string text : {"M\xc3\xbcller", "smile \xf0\x9f\x98\x80!"}) {
    const Ids ids = tok.encode(text);
    EXPECT_EQ(tok.decode(ids), text);
    int bytes = 0;
    for (int32_t id : ids) bytes += tok.id_to_piece(id).rfind("<0x", 0) == 0;
    EXPECT_GE(bytes, 2) << text;
    for (int32_t id : ids) EXPECT_NE(id, tok.unk_id());
  }
  // split_digits: no piece holds two digits.
  for (int32_t id : tok.encode("in 1814 and 20250")) {
    const std::string p = tok.id_to_piece(id);
    EXPECT_LE(std::count_if(p.begin(), p.end(), [](char c) { return c >= '0' && c <= '9'; }), 1)
        << p;
  }
}

TEST(Tokenizer, TrainingIsDeterministic) {
  for (const std::string type : {"bpe", "unigram"}) {
    TokenizerTrainOptions o;
    o.inputs = {training_text_path()};
    o.vocab_size = 360;
    o.model_type = type;
    o.input_sentence_size = 1500;  // sampled and shuffled with sentencepiece's seeded generator
    o.out = path_in("det/" + type + "-a.model");
    const Tokenizer a = train_tokenizer(o);
    o.out = path_in("det/" + type + "-b.model");
    const Tokenizer b = train_tokenizer(o);
    EXPECT_EQ(a.vocab_size(), 360);
    EXPECT_EQ(a.sha256(), b.sha256()) << type;
    EXPECT_EQ(read_bytes(path_in("det/" + type + "-a.model")),
              read_bytes(path_in("det/" + type + "-b.model")));
    const std::string text = "Captain Wentworth wrote a letter, \xc3\xa9t\xc3\xa9 \xe2\x82\xac 42.";
    EXPECT_EQ(a.decode(a.encode(text)), text) << type;
    // No temporary file left behind.
    for (const auto& e : fs::directory_iterator(path_in("det")))
      EXPECT_EQ(e.path().string().find(".tmp"), std::string::npos) << e.path();
  }
}

TEST(Tokenizer, TrainWithoutByteFallbackAndErrors) {
  TokenizerTrainOptions o;
  o.inputs = {training_text_path()};
  o.vocab_size = 300;
  o.byte_fallback = false;
  o.out = path_in("tok/nofallback.model");
  const Tokenizer tok = train_tokenizer(o);
  const Ids ids = tok.encode("\xc3\xbc");
  EXPECT_NE(std::find(ids.begin(), ids.end(), tok.unk_id()), ids.end());
  for (int id = 0; id < tok.vocab_size(); ++id)
    EXPECT_NE(tok.id_to_piece(id).rfind("<0x", 0), 0u) << tok.id_to_piece(id);

  o.inputs = {path_in("missing-corpus.txt")};
  EXPECT_ERROR(train_tokenizer(o), "missing-corpus.txt");
  o.inputs = {training_text_path()};
  o.model_type = "wordpiece";
  EXPECT_ERROR(train_tokenizer(o), "wordpiece");
  o.model_type = "bpe";
  o.vocab_size = 1000000;  // far more pieces than the text allows
  o.out = path_in("tok/toobig.model");
  EXPECT_ERROR(train_tokenizer(o), "sentencepiece");
  EXPECT_FALSE(fs::exists(path_in("tok/toobig.model")));
}

// ---------------------------------------------------------------- shards

// Writes a dataset directory by hand: one train shard per entry of `shards`
// (each a list of documents), no val.
void write_dataset(const std::string& dir, const std::vector<std::vector<Ids>>& shards, int vocab,
                   int token_bytes = 2) {
  fs::remove_all(dir);
  fs::create_directories(dir);
  DatasetMeta meta;
  meta.tokenizer_sha256 = "test";
  meta.vocab_size = vocab;
  meta.bos_id = 1;
  meta.eos_id = 2;
  meta.token_bytes = token_bytes;
  for (size_t s = 0; s < shards.size(); ++s) {
    Ids tokens;
    std::vector<int64_t> starts{0};
    for (const Ids& doc : shards[s]) {
      tokens.insert(tokens.end(), doc.begin(), doc.end());
      starts.push_back(int64_t(tokens.size()));
    }
    const std::string name = "train-0000" + std::to_string(s) + ".tokens";
    write_shard(dir + "/" + name, tokens, starts, token_bytes);
    meta.train.shards.push_back(name);
    meta.train.tokens += int64_t(tokens.size());
    meta.train.documents += int64_t(shards[s].size());
  }
  write_bytes(dir + "/meta.json", meta.to_json().dump(2));
}

TEST(Shards, RoundTripTwoAndFourByteIds) {
  for (int width : {2, 4}) {
    const int32_t big = width == 2 ? 65535 : 1000000;
    const Ids tokens = {1, 5, 7, big, 1, 9, 1, 3, 4, 0};
    const std::vector<int64_t> starts = {0, 4, 6, 10};
    const std::string p = path_in("shards/w" + std::to_string(width) + ".tokens");
    fs::create_directories(fs::path(p).parent_path());
    write_shard(p, tokens, starts, width);
    EXPECT_EQ(fs::file_size(p), 64u + tokens.size() * width + starts.size() * 8);
    EXPECT_EQ(read_bytes(p).substr(0, 8), "STRATOK1");
    Ids t;
    std::vector<int64_t> s;
    read_shard(p, t, s);
    EXPECT_EQ(t, tokens);
    EXPECT_EQ(s, starts);
    // A second read appends, rebased, with one shared boundary entry.
    read_shard(p, t, s);
    EXPECT_EQ(t.size(), 2 * tokens.size());
    EXPECT_EQ(s, (std::vector<int64_t>{0, 4, 6, 10, 14, 16, 20}));
  }
  EXPECT_ERROR(write_shard(path_in("shards/x.tokens"), {70000}, {0, 1}, 2), "70000");
  EXPECT_ERROR(write_shard(path_in("shards/x.tokens"), {1, 2}, {0, 1}, 2), "x.tokens");
}

TEST(Shards, CorruptShardsGiveOneLineErrors) {
  const std::string dir = path_in("corrupt");
  write_dataset(dir, {{{1, 10, 11, 12}, {1, 13, 14}}}, 100);
  const std::string shard = dir + "/train-00000.tokens";
  const std::string good = read_bytes(shard);
  EXPECT_EQ(TokenDataset::open(dir, "train").num_tokens(), 7);

  auto expect_bad = [&](std::string bytes, const std::string& what) {
    write_bytes(shard, bytes);
    EXPECT_ERROR(TokenDataset::open(dir, "train"), shard, what);
    Ids t;
    std::vector<int64_t> s;
    if (what != "out of range") EXPECT_ERROR(read_shard(shard, t, s), shard, what);
  };
  std::string b = good;
  b[0] = 'X';
  expect_bad(b, "bad magic");
  b = good;
  b[8] = 2;
  expect_bad(b, "version");
  expect_bad(good.substr(0, good.size() - 3), "truncated");
  expect_bad(good.substr(0, 40), "truncated");
  expect_bad(good + "xx", "unexpected bytes");
  b = good;
  b[64 + 2 * 7 + 8] = 9;  // second document start beyond the token count
  expect_bad(b, "document index");
  b = good;
  b[64 + 2 * 2] = char(200);  // token id 200 >= vocab 100
  expect_bad(b, "out of range");
  // Shards disagreeing with meta.json, and a missing meta.json.
  write_bytes(shard, good);
  write_dataset(path_in("corrupt2"), {{{1, 2, 3}}}, 100);
  fs::copy_file(shard, path_in("corrupt2/train-00000.tokens"),
                fs::copy_options::overwrite_existing);
  EXPECT_ERROR(TokenDataset::open(path_in("corrupt2"), "train"), "meta.json", "tokens");
  fs::remove(dir + "/meta.json");
  EXPECT_ERROR(TokenDataset::open(dir, "train"), dir, "meta.json");
  EXPECT_ERROR(TokenDataset::open(dir, "test"), "test");
  write_bytes(dir + "/meta.json", "{\"format\": \"strata-tokens-v1\", \"vocab_size\": \"big\"");
  EXPECT_ERROR(TokenDataset::open(dir, "train"), "meta.json", "JSON");
  write_bytes(dir + "/meta.json", "{\"format\": \"strata-tokens-v1\", \"vocab_size\": 12}");
  EXPECT_ERROR(TokenDataset::open(dir, "train"), "meta.json", "tokenizer_sha256");
}

// ---------------------------------------------------------------- prepare

// Decodes each document of a split (without its BOS/EOS).
std::vector<std::string> split_documents(const TokenDataset& ds, const Tokenizer& tok) {
  std::vector<std::string> out;
  for (int64_t d = 0; d < ds.num_documents(); ++d) {
    const int32_t* p = ds.tokens() + ds.doc_start(d);
    const int32_t* e = ds.tokens() + ds.doc_start(d + 1);
    EXPECT_EQ(p[0], tok.bos_id()) << "document " << d << " does not start with BOS";
    out.push_back(tok.decode(Ids(p + 1, e)));
  }
  return out;
}

TEST(Prepare, ParagraphsSplitIntoDisjointTrainAndVal) {
  const Tokenizer& tok = small_tokenizer();
  std::vector<std::string> paragraphs;
  std::string text;
  for (int i = 0; i < 60; ++i) {
    paragraphs.push_back("Paragraph " + std::to_string(i) + " begins here,\nand its second line " +
                         std::string(size_t(i % 5), '!') + "\nends it.");
    text += paragraphs.back() + (i % 3 == 0 ? "\n\n\n" : i % 3 == 1 ? "\n  \n" : "\n\n");
  }
  const std::string input = path_in("prep/paragraphs.txt");
  write_bytes(input, "\n\n" + text);
  PrepareOptions o;
  o.tokenizer = path_in("tok/bpe400.model");
  o.inputs = {input};
  o.out_dir = path_in("prep/ds-paragraph");
  o.val_fraction = 0.2;
  o.shard_tokens = 300;  // several shards
  const DatasetMeta meta = prepare_dataset(o);

  const TokenDataset train = TokenDataset::open(o.out_dir, "train");
  const TokenDataset val = TokenDataset::open(o.out_dir, "val");
  EXPECT_GT(val.num_documents(), 0);
  EXPECT_GT(train.num_documents(), val.num_documents());
  EXPECT_EQ(train.num_documents() + val.num_documents(), 60);
  EXPECT_GT(meta.train.shards.size(), 2u);
  std::vector<std::string> docs = split_documents(train, tok);
  const std::vector<std::string> val_docs = split_documents(val, tok);
  std::set<std::string> train_set(docs.begin(), docs.end());
  for (const auto& d : val_docs) EXPECT_EQ(train_set.count(d), 0u) << "in both splits: " << d;
  docs.insert(docs.end(), val_docs.begin(), val_docs.end());
  std::sort(docs.begin(), docs.end());
  std::sort(paragraphs.begin(), paragraphs.end());
  EXPECT_EQ(docs, paragraphs);
  // BOS only at document starts; documents never straddle shards.
  int64_t bos = 0;
  for (int64_t i = 0; i < train.num_tokens(); ++i) bos += train.tokens()[i] == tok.bos_id();
  EXPECT_EQ(bos, train.num_documents());
  int64_t docs_in_shards = 0;
  for (const auto& name : meta.train.shards) {
    Ids t;
    std::vector<int64_t> s;
    read_shard(o.out_dir + "/" + name, t, s);
    EXPECT_EQ(t.front(), tok.bos_id()) << name;
    docs_in_shards += int64_t(s.size()) - 1;
  }
  EXPECT_EQ(docs_in_shards, train.num_documents());

  // meta.json, as written.
  const auto j = nlohmann::json::parse(read_bytes(o.out_dir + "/meta.json"));
  EXPECT_EQ(j.at("format"), "strata-tokens-v1");
  EXPECT_EQ(j.at("tokenizer_sha256"), tok.sha256());
  EXPECT_EQ(j.at("vocab_size"), 400);
  EXPECT_EQ(j.at("bos_id"), 1);
  EXPECT_EQ(j.at("eos_id"), 2);
  EXPECT_EQ(j.at("token_bytes"), 2);
  EXPECT_EQ(j.at("add_bos"), true);
  EXPECT_EQ(j.at("train").at("tokens"), train.num_tokens());
  EXPECT_EQ(j.at("val").at("documents"), val.num_documents());
  ASSERT_EQ(j.at("sources").size(), 1u);
  EXPECT_EQ(j.at("sources")[0].at("path"), input);
  EXPECT_EQ(j.at("sources")[0].at("sha256"), sha256_hex(read_bytes(input)));
  EXPECT_EQ(j.at("sources")[0].at("documents"), 60);
  EXPECT_FALSE(fs::exists(o.out_dir + "/meta.json.tmp"));
  // val.txt: the validation documents as text, in order, blank-line separated.
  {
    std::string want;
    for (const auto& d : val_docs) want += (want.empty() ? "" : "\n\n") + d;
    EXPECT_EQ(read_bytes(o.out_dir + "/val.txt"), want + "\n");
  }

  // Preparing again into the same directory replaces the old shards.
  const std::string first_dir = o.out_dir;
  o.shard_tokens = int64_t(1) << 20;
  const DatasetMeta one_shard = prepare_dataset(o);
  EXPECT_EQ(one_shard.train.shards, std::vector<std::string>{"train-00000.tokens"});
  EXPECT_FALSE(fs::exists(first_dir + "/train-00001.tokens"));
  EXPECT_EQ(TokenDataset::open(first_dir, "train").num_tokens(), train.num_tokens());
  o.shard_tokens = 300;

  // Same seed: the same dataset; another seed: another val split.
  o.out_dir = path_in("prep/ds-paragraph-again");
  EXPECT_EQ(prepare_dataset(o).to_json(), meta.to_json());
  o.seed = 99;
  o.out_dir = path_in("prep/ds-paragraph-seed99");
  prepare_dataset(o);
  EXPECT_NE(split_documents(TokenDataset::open(o.out_dir, "val"), tok), val_docs);
}

TEST(Prepare, LineAndFileSplitsEosAndSmallVal) {
  const Tokenizer& tok = small_tokenizer();
  const std::string a = path_in("prep/a.txt"), b = path_in("prep/b.txt");
  write_bytes(a, "first line\nsecond line\n\n   \nthird line\n");
  write_bytes(b, "only one\nfile here\n\n");
  PrepareOptions o;
  o.tokenizer = path_in("tok/bpe400.model");
  o.inputs = {a, b};
  o.doc_split = "line";
  o.add_eos = true;
  o.val_fraction = 0.001;  // too small to pick a document by chance: one is forced into val
  o.out_dir = path_in("prep/ds-line");
  DatasetMeta meta = prepare_dataset(o);
  EXPECT_EQ(meta.train.documents + meta.val.documents, 5);
  EXPECT_EQ(meta.val.documents, 1);
  std::set<std::string> all;
  for (const char* split : {"train", "val"}) {
    const TokenDataset ds = TokenDataset::open(o.out_dir, split);
    for (int64_t d = 0; d < ds.num_documents(); ++d) {
      const Ids doc(ds.tokens() + ds.doc_start(d), ds.tokens() + ds.doc_start(d + 1));
      EXPECT_EQ(doc.front(), tok.bos_id());
      EXPECT_EQ(doc.back(), tok.eos_id());
      all.insert(tok.decode(Ids(doc.begin() + 1, doc.end() - 1)));
    }
  }
  EXPECT_EQ(all, (std::set<std::string>{"first line", "second line", "third line", "only one",
                                        "file here"}));
  EXPECT_EQ(meta.sources.size(), 2u);
  EXPECT_EQ(meta.sources[1].at("documents"), 2);

  o.doc_split = "file";
  o.add_eos = false;
  o.val_fraction = 0.5;
  o.out_dir = path_in("prep/ds-file");
  meta = prepare_dataset(o);
  EXPECT_EQ(meta.train.documents, 1);
  EXPECT_EQ(meta.val.documents, 1);
  std::set<std::string> files;
  for (const char* split : {"train", "val"})
    for (const auto& d : split_documents(TokenDataset::open(o.out_dir, split), tok))
      files.insert(d);
  EXPECT_EQ(files, (std::set<std::string>{"first line\nsecond line\n\n   \nthird line",
                                          "only one\nfile here"}));

  o.val_fraction = 0;  // no val at all
  o.out_dir = path_in("prep/ds-noval");
  meta = prepare_dataset(o);
  EXPECT_EQ(meta.val.documents, 0);
  EXPECT_EQ(TokenDataset::open(o.out_dir, "val").num_tokens(), 0);
}

TEST(Prepare, JsonlDocumentsAndErrors) {
  const Tokenizer& tok = small_tokenizer();
  const std::string good = path_in("prep/docs.jsonl");
  write_bytes(good,
              "{\"text\": \"The first story.\", \"id\": 1}\n"
              "\n"
              "{\"text\": \"A second one,\\nwith two lines.\"}\n"
              "{\"body\": \"elsewhere\", \"text\": \"Third.\"}\n");
  PrepareOptions o;
  o.tokenizer = path_in("tok/bpe400.model");
  o.inputs = {good};
  o.val_fraction = 0.3;
  o.out_dir = path_in("prep/ds-jsonl");
  const DatasetMeta meta = prepare_dataset(o);
  EXPECT_EQ(meta.train.documents + meta.val.documents, 3);
  EXPECT_GE(meta.val.documents, 1);
  EXPECT_GE(meta.train.documents, 1);
  std::set<std::string> docs;
  for (const char* split : {"train", "val"})
    for (const auto& d : split_documents(TokenDataset::open(o.out_dir, split), tok)) docs.insert(d);
  EXPECT_EQ(docs, (std::set<std::string>{"The first story.", "A second one,\nwith two lines.",
                                         "Third."}));
  o.jsonl_field = "body";
  o.out_dir = path_in("prep/ds-jsonl-body");
  EXPECT_ERROR(prepare_dataset(o), good + ":1:", "body");

  const std::string bad = path_in("prep/bad.jsonl");
  o.jsonl_field = "text";
  o.inputs = {good, bad};
  o.out_dir = path_in("prep/ds-bad");
  write_bytes(bad, "{\"text\": \"ok\"}\n{\"text\": \"ok\"}\n{not json}\n");
  EXPECT_ERROR(prepare_dataset(o), bad + ":3:", "JSON");
  write_bytes(bad, "{\"text\": \"ok\"}\n{\"title\": \"no text\"}\n");
  EXPECT_ERROR(prepare_dataset(o), bad + ":2:", "'text'");
  write_bytes(bad, "{\"text\": 17}\n");
  EXPECT_ERROR(prepare_dataset(o), bad + ":1:", "not a string");
  write_bytes(bad, "[\"text\"]\n");
  EXPECT_ERROR(prepare_dataset(o), bad + ":1:", "object");
  EXPECT_FALSE(fs::exists(o.out_dir + "/meta.json"));
  o.inputs = {good, path_in("prep/absent.txt")};
  EXPECT_ERROR(prepare_dataset(o), "absent.txt");
  o.inputs = {good};
  o.tokenizer = path_in("prep/absent.model");
  EXPECT_ERROR(prepare_dataset(o), "absent.model");
}

// ---------------------------------------------------------------- pretrain loader

// A train split whose token i is i (documents of 50 tokens): a window's
// position in the stream can be read off its first token.
std::shared_ptr<const TokenDataset> counting_dataset(int64_t n) {
  const std::string dir = path_in("loader/count" + std::to_string(n));
  std::vector<Ids> docs;
  for (int64_t i = 0; i < n; i += 50) {
    Ids d;
    for (int64_t k = i; k < std::min(n, i + 50); ++k) d.push_back(int32_t(k));
    docs.push_back(d);
  }
  write_dataset(dir, {docs}, 65536);
  return std::make_shared<const TokenDataset>(TokenDataset::open(dir, "train"));
}

// The stream offsets of the rows of a batch (from their first tokens).
std::vector<int64_t> row_starts(const Batch& b) {
  std::vector<int64_t> out;
  for (int r = 0; r < b.B; ++r) out.push_back(b.tokens[size_t(r) * b.T]);
  return out;
}

TEST(PretrainLoader, WindowsMatchTheStreamOncePerEpoch) {
  const int T = 10;
  auto data = counting_dataset(1001);  // (1001 - 1) / 10 = 100 windows
  for (bool shuffle : {false, true}) {
    auto loader = make_pretrain_loader(data, T, 7, shuffle);
    EXPECT_EQ(loader->rows_per_epoch(), 100);
    std::vector<int64_t> seen;
    Batch b;
    for (int step = 0; step < 10; ++step) {
      loader->next(10, b);
      ASSERT_EQ(b.B, 10);
      ASSERT_EQ(b.T, T);
      ASSERT_EQ(b.tokens.size(), 100u);
      EXPECT_EQ(b.count_targets(), 100);
      for (int r = 0; r < b.B; ++r)
        for (int t = 0; t < T; ++t) {
          const int64_t s = b.tokens[size_t(r) * T];
          EXPECT_EQ(b.tokens[size_t(r) * T + t], s + t);
          EXPECT_EQ(b.targets[size_t(r) * T + t], s + t + 1);
        }
      for (int64_t s : row_starts(b)) seen.push_back(s);
    }
    std::vector<int64_t> expect(100);
    for (int w = 0; w < 100; ++w) expect[size_t(w)] = int64_t(w) * T;
    if (shuffle) {
      EXPECT_NE(seen, expect);
    } else {
      EXPECT_EQ(seen, expect);
    }
    std::sort(seen.begin(), seen.end());
    EXPECT_EQ(seen, expect) << "every window exactly once per epoch";
    EXPECT_EQ(loader->state(), (nlohmann::json{{"epoch", 1}, {"position", 0}}));
    EXPECT_NE(loader->describe().find("100 windows"), std::string::npos) << loader->describe();
  }
  EXPECT_ERROR(make_pretrain_loader(counting_dataset(10), 10, 1, true), "fewer", "11");
}

std::vector<int64_t> epoch_order(Loader& l, int rows) {
  Batch b;
  l.next(rows, b);
  return row_starts(b);
}

TEST(PretrainLoader, SeedsEpochsAndWrap) {
  auto data = counting_dataset(1001);
  auto a = make_pretrain_loader(data, 10, 1, true), b = make_pretrain_loader(data, 10, 1, true),
       c = make_pretrain_loader(data, 10, 2, true);
  const auto a0 = epoch_order(*a, 100), a1 = epoch_order(*a, 100);
  EXPECT_EQ(epoch_order(*b, 100), a0) << "same seed, same order";
  EXPECT_NE(epoch_order(*c, 100), a0) << "another seed, another order";
  EXPECT_NE(a1, a0) << "each epoch has its own order";

  // Batches of 7 over 100 windows: the 15th batch ends epoch 0 and starts epoch 1.
  auto w = make_pretrain_loader(data, 10, 1, true);
  Batch batch;
  for (int i = 0; i < 14; ++i) w->next(7, batch);
  EXPECT_EQ(w->state(), (nlohmann::json{{"epoch", 0}, {"position", 98}}));
  w->next(7, batch);
  const auto rows = row_starts(batch);
  EXPECT_EQ(std::vector<int64_t>(rows.begin(), rows.begin() + 2),
            std::vector<int64_t>(a0.begin() + 98, a0.end()));
  EXPECT_EQ(std::vector<int64_t>(rows.begin() + 2, rows.end()),
            std::vector<int64_t>(a1.begin(), a1.begin() + 5));
  EXPECT_EQ(w->state(), (nlohmann::json{{"epoch", 1}, {"position", 5}}));
}

TEST(PretrainLoader, RankSlicesCoverTheGlobalBatch) {
  auto data = counting_dataset(1001);
  const int world = 3, per_rank = 4;
  auto global = make_pretrain_loader(data, 10, 5, true);
  std::vector<std::unique_ptr<Loader>> ranks;
  for (int r = 0; r < world; ++r) ranks.push_back(make_pretrain_loader(data, 10, 5, true));
  for (int step = 0; step < 12; ++step) {  // 12 x 12 rows: crosses an epoch boundary
    Batch g;
    global->next(per_rank * world, g);
    std::vector<int32_t> joined_tokens, joined_targets;
    for (int r = 0; r < world; ++r) {
      Batch b;
      ranks[size_t(r)]->next(per_rank, b, r, world);
      EXPECT_EQ(b.B, per_rank);
      joined_tokens.insert(joined_tokens.end(), b.tokens.begin(), b.tokens.end());
      joined_targets.insert(joined_targets.end(), b.targets.begin(), b.targets.end());
      EXPECT_EQ(ranks[size_t(r)]->state(), global->state());
    }
    EXPECT_EQ(joined_tokens, g.tokens) << "step " << step;
    EXPECT_EQ(joined_targets, g.targets) << "step " << step;
  }
  Batch b;
  EXPECT_ERROR(global->next(4, b, 3, 3), "rank");
  EXPECT_ERROR(global->next(0, b), "batch");
}

TEST(PretrainLoader, ResumeFromSavedState) {
  auto data = counting_dataset(1001);
  auto l = make_pretrain_loader(data, 10, 3, true);
  Batch b;
  for (int i = 0; i < 23; ++i) l->next(6, b);  // into the second epoch
  const nlohmann::json saved = l->state();
  EXPECT_EQ(saved.at("epoch"), 1);
  std::vector<Ids> after;
  for (int i = 0; i < 30; ++i) {
    l->next(6, b);
    after.push_back(b.tokens);
  }
  auto resumed = make_pretrain_loader(data, 10, 3, true);
  resumed->set_state(nlohmann::json::parse(saved.dump()));  // through text, as a checkpoint does
  for (int i = 0; i < 30; ++i) {
    resumed->next(6, b);
    EXPECT_EQ(b.tokens, after[size_t(i)]) << "batch " << i << " after resume";
  }
  EXPECT_EQ(resumed->state(), l->state());

  for (const char* bad : {"\"garbage\"", "{}", "{\"epoch\": 1}", "{\"epoch\": -1, \"position\": 0}",
                          "{\"epoch\": 0, \"position\": 100}", "{\"epoch\": 0, \"position\": 1.5}",
                          "{\"epoch\": \"0\", \"position\": 0}",
                          "{\"epoch\": 0, \"position\": 0, \"extra\": 1}", "[0, 0]"})
    EXPECT_ERROR(resumed->set_state(nlohmann::json::parse(bad)), "loader state");
  EXPECT_EQ(resumed->state(), l->state()) << "a rejected state changes nothing";
}

TEST(Batch, CountTargets) {
  Batch b;
  b.targets = {5, -100, 0, -100, 7};
  EXPECT_EQ(b.count_targets(), 3);
}

// ---------------------------------------------------------------- SFT

TEST(Sft, RenderMasksEverythingButTheAssistant) {
  const Tokenizer& tok = small_tokenizer();
  const ChatTemplate tmpl;
  const std::vector<std::pair<std::string, std::string>> msgs = {
      {"system", "Be brief."},
      {"user", "Who is Anne?"},
      {"assistant", "Sir Walter's daughter."},
      {"user", "And Frederick?"},
      {"assistant", "A captain."}};
  const SftExample ex = SftDataset::render(msgs, tok, tmpl);
  ASSERT_EQ(ex.tokens.size(), ex.loss.size());
  // Expected: every piece encoded on its own, concatenated.
  Ids expect{tok.bos_id()};
  std::vector<uint8_t> mask{0};
  auto add = [&](const std::string& s, uint8_t m) {
    const Ids ids = tok.encode(s);
    expect.insert(expect.end(), ids.begin(), ids.end());
    mask.insert(mask.end(), ids.size(), m);
  };
  add(tmpl.system_prefix, 0), add("Be brief.", 0), add(tmpl.system_suffix, 0);
  add(tmpl.user_prefix, 0), add("Who is Anne?", 0), add(tmpl.user_suffix, 0);
  add(tmpl.assistant_prefix, 0), add("Sir Walter's daughter.", 1);
  expect.push_back(tok.eos_id()), mask.push_back(1);
  add(tmpl.user_prefix, 0), add("And Frederick?", 0), add(tmpl.user_suffix, 0);
  add(tmpl.assistant_prefix, 0), add("A captain.", 1);
  expect.push_back(tok.eos_id()), mask.push_back(1);
  EXPECT_EQ(ex.tokens, expect);
  EXPECT_EQ(ex.loss, mask);
  // The trained tokens decode to exactly the assistant text (plus EOS).
  Ids trained;
  for (size_t i = 0; i < ex.tokens.size(); ++i)
    if (ex.loss[i] && ex.tokens[i] != tok.eos_id()) trained.push_back(ex.tokens[i]);
  EXPECT_EQ(tok.decode(trained), "Sir Walter's daughter. A captain.");
  EXPECT_EQ(ex.loss.back(), 1);
  EXPECT_EQ(ex.tokens.back(), tok.eos_id());

  // An assistant suffix is trained too.
  ChatTemplate with_suffix;
  with_suffix.assistant_suffix = "\n<|end|>";
  const SftExample ex2 =
      SftDataset::render({{"user", "Hi"}, {"assistant", "Hello"}}, tok, with_suffix);
  const size_t suffix_len = tok.encode("\n<|end|>").size();
  const size_t content_len = tok.encode("Hello").size();
  EXPECT_EQ(std::count(ex2.loss.begin(), ex2.loss.end(), 1), int64_t(content_len + suffix_len + 1));
  EXPECT_ERROR(SftDataset::render({{"robot", "beep"}}, tok, tmpl), "robot");
}

TEST(Sft, LoadJsonlFormsAndErrors) {
  const Tokenizer& tok = small_tokenizer();
  const ChatTemplate tmpl;
  const std::string path = path_in("sft/good.jsonl");
  write_bytes(path,
              "{\"prompt\": \"Name a sister.\", \"response\": \"Mary.\"}\n"
              "\n"
              "{\"messages\": [{\"role\": \"system\", \"content\": \"Answer.\"}, {\"role\": "
              "\"user\", \"content\": \"Where?\"}, {\"role\": \"assistant\", \"content\": "
              "\"Bath.\"}]}\n");
  const auto ds = SftDataset::load_jsonl(path, tok, tmpl);
  ASSERT_EQ(ds->examples().size(), 2u);
  EXPECT_EQ(ds->path, path);
  const SftExample pr =
      SftDataset::render({{"user", "Name a sister."}, {"assistant", "Mary."}}, tok, tmpl);
  EXPECT_EQ(ds->examples()[0].tokens, pr.tokens);
  EXPECT_EQ(ds->examples()[0].loss, pr.loss);
  const SftExample chat = SftDataset::render(
      {{"system", "Answer."}, {"user", "Where?"}, {"assistant", "Bath."}}, tok, tmpl);
  EXPECT_EQ(ds->examples()[1].tokens, chat.tokens);

  const std::string bad = path_in("sft/bad.jsonl");
  const std::string ok = "{\"prompt\": \"a\", \"response\": \"b\"}\n";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"this is not json", "JSON"},
      {"{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]}", "no assistant"},
      {"{\"messages\": [{\"role\": \"wizard\", \"content\": \"hi\"}, {\"role\": \"assistant\", "
       "\"content\": \"x\"}]}",
       "wizard"},
      {"{\"messages\": [{\"role\": \"assistant\", \"content\": 5}]}", "content"},
      {"{\"messages\": [{\"content\": \"x\"}]}", "role"},
      {"{\"messages\": \"hello\"}", "messages"},
      {"{\"prompt\": \"only a prompt\"}", "response"},
      {"{\"prompt\": \"p\", \"response\": [1]}", "response"},
      {"{\"question\": \"?\"}", "prompt"},
      {"[1, 2]", "object"}};
  for (const auto& [line, what] : cases) {
    write_bytes(bad, ok + "\n" + line + "\n");
    EXPECT_ERROR(SftDataset::load_jsonl(bad, tok, tmpl), bad + ":3:", what);
  }
  write_bytes(bad, "\n\n");
  EXPECT_ERROR(SftDataset::load_jsonl(bad, tok, tmpl), bad, "no examples");
  EXPECT_ERROR(SftDataset::load_jsonl(path_in("sft/none.jsonl"), tok, tmpl), "none.jsonl");
}

std::shared_ptr<const SftDataset> sft_fixture() {
  static std::shared_ptr<const SftDataset> ds = [] {
    std::string text;
    for (int i = 0; i < 9; ++i)
      text += "{\"prompt\": \"" + std::to_string(i) + " asks" + std::string(size_t(i), '?') +
              "\", \"response\": \"Answer " + std::string(size_t(i * 3), 'a') + ".\"}\n";
    write_bytes(path_in("sft/nine.jsonl"), text);
    return SftDataset::load_jsonl(path_in("sft/nine.jsonl"), small_tokenizer(), ChatTemplate{});
  }();
  return ds;
}

// Checks row r of a batch against example ex: padded tokens, ignored padding
// targets, targets where the example has loss.
void expect_row_is_example(const Batch& b, int r, const SftExample& ex, int32_t pad) {
  const int T = b.T;
  const size_t n = std::min(ex.tokens.size(), size_t(T) + 1);
  for (int t = 0; t < T; ++t) {
    const int32_t tok = b.tokens[size_t(r) * T + t], tgt = b.targets[size_t(r) * T + t];
    EXPECT_EQ(tok, size_t(t) < n ? ex.tokens[size_t(t)] : pad) << "t=" << t;
    if (size_t(t) + 1 < n && ex.loss[size_t(t) + 1])
      EXPECT_EQ(tgt, ex.tokens[size_t(t) + 1]) << "t=" << t;
    else
      EXPECT_EQ(tgt, -100) << "t=" << t;
  }
}

TEST(SftLoader, RowsArePaddedExamplesOncePerEpoch) {
  const auto ds = sft_fixture();
  const auto& exs = ds->examples();
  size_t longest = 0;
  for (const auto& ex : exs) longest = std::max(longest, ex.tokens.size());
  for (int T : {int(longest) + 5, 12}) {  // padded, then truncated
    auto loader = make_sft_loader(ds, T, 11, false, 3);
    EXPECT_EQ(loader->rows_per_epoch(), 9);
    std::vector<int> used(exs.size(), 0);
    Batch b;
    for (int step = 0; step < 3; ++step) {
      loader->next(3, b);
      for (int r = 0; r < b.B; ++r) {
        // Identify the example by its tokens.
        int found = -1;
        for (size_t e = 0; e < exs.size(); ++e) {
          const size_t n = std::min(exs[e].tokens.size(), size_t(T));
          if (std::equal(exs[e].tokens.begin(), exs[e].tokens.begin() + long(n),
                         b.tokens.begin() + long(size_t(r) * T)) &&
              (n == size_t(T) || b.tokens[size_t(r) * T + n] == 3))
            found = int(e);
        }
        ASSERT_GE(found, 0) << "row is no example";
        ++used[size_t(found)];
        expect_row_is_example(b, r, exs[size_t(found)], 3);
      }
    }
    EXPECT_EQ(used, std::vector<int>(exs.size(), 1)) << "T=" << T;
    EXPECT_EQ(loader->state(), (nlohmann::json{{"epoch", 1}, {"position", 0}}));
  }
  // Without a PAD piece (pad_id -1) rows pad with 0, still ignored.
  auto loader = make_sft_loader(ds, int(longest) + 2, 11, false, -1);
  Batch b;
  loader->next(9, b);
  for (int r = 0; r < 9; ++r) EXPECT_EQ(b.tokens[size_t(r) * b.T + b.T - 1], 0);
}

TEST(SftLoader, PackingConcatenatesExamples) {
  const auto ds = sft_fixture();
  const auto& exs = ds->examples();
  int64_t total = 0;
  for (const auto& ex : exs) total += int64_t(ex.tokens.size());
  const int T = 16;
  auto loader = make_sft_loader(ds, T, 4, true, 0);
  const int64_t rows = loader->rows_per_epoch();
  EXPECT_EQ(rows, (total - 1) / T);
  Batch b;
  loader->next(int(rows), b);
  EXPECT_EQ(loader->state(), (nlohmann::json{{"epoch", 1}, {"position", 0}}));
  // Rebuild the stream; it must be the examples, each once, in some order.
  Ids stream(b.tokens.begin(), b.tokens.end());
  stream.push_back(b.targets.back() == -100 ? -1 : b.targets.back());
  std::vector<int> used(exs.size(), 0);
  size_t pos = 0;
  std::vector<uint8_t> loss;
  while (pos < stream.size()) {
    int found = -1;
    for (size_t e = 0; e < exs.size() && found < 0; ++e) {
      const size_t n = std::min(exs[e].tokens.size(), stream.size() - pos);
      if (!used[e] && std::equal(exs[e].tokens.begin(), exs[e].tokens.begin() + long(n),
                                 stream.begin() + long(pos),
                                 [](int32_t a, int32_t s) { return s == -1 || a == s; }))
        found = int(e);
    }
    ASSERT_GE(found, 0) << "stream position " << pos << " starts no unused example";
    used[size_t(found)] = 1;
    const auto& ex = exs[size_t(found)];
    loss.insert(loss.end(), ex.loss.begin(), ex.loss.end());
    pos += ex.tokens.size();
  }
  // Targets follow the loss mask of the packed stream, across row boundaries.
  for (int64_t r = 0; r < rows; ++r)
    for (int t = 0; t < T; ++t) {
      const size_t i = size_t(r) * T + t;
      const int32_t want =
          loss[i + 1] ? (i + 1 < b.tokens.size() ? b.tokens[i + 1] : b.targets[i]) : -100;
      EXPECT_EQ(b.targets[i], want) << "row " << r << " t " << t;
    }
  EXPECT_GT(b.count_targets(), 0);
  // Deterministic in the seed; resumable.
  auto again = make_sft_loader(ds, T, 4, true, 0);
  Batch c;
  again->next(int(rows), c);
  EXPECT_EQ(c.tokens, b.tokens);
  auto other = make_sft_loader(ds, T, 5, true, 0);
  other->next(int(rows), c);
  EXPECT_NE(c.tokens, b.tokens);
  loader->next(2, b);
  const auto saved = loader->state();
  loader->next(3, b);
  again->set_state(saved);
  again->next(3, c);
  EXPECT_EQ(c.tokens, b.tokens);
  EXPECT_EQ(c.targets, b.targets);
  EXPECT_ERROR(make_sft_loader(ds, int(total), 4, true, 0), "fewer");
}

// ---------------------------------------------------------------- CLI

TEST(Args, RepeatableOption) {
  cli::Args a("strata x", "test");
  a.repeated("input", "FILE", "inputs").option("out", "DIR", "out", "o");
  const char* argv[] = {"strata",        "x",       "--input", "a.txt", "--out=d",
                        "--input=b.txt", "--input", "c.txt"};
  ASSERT_TRUE(a.parse(8, const_cast<char**>(argv), 2));
  EXPECT_EQ(a.get_all("input"), (std::vector<std::string>{"a.txt", "b.txt", "c.txt"}));
  EXPECT_EQ(a.get("input"), "c.txt");
  EXPECT_EQ(a.get_all("out"), (std::vector<std::string>{"d"}));
  EXPECT_TRUE(a.has("input"));
  EXPECT_NE(a.help().find("(repeatable)"), std::string::npos);
  cli::Args b("strata x", "test");
  b.repeated("input", "FILE", "inputs");
  const char* none[] = {"strata", "x"};
  ASSERT_TRUE(b.parse(2, const_cast<char**>(none), 2));
  EXPECT_TRUE(b.get_all("input").empty());
  EXPECT_FALSE(b.has("input"));
}

// Runs the strata binary; returns (exit status, stdout + stderr).
std::pair<int, std::string> run_strata(const std::string& args) {
  const std::string cmd = std::string(STRATA_BINARY) + " " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return {-1, ""};
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int status = pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

std::string quoted(const std::string& s) { return "'" + s + "'"; }

TEST(Cli, TokenizerEncodeDecode) {
  auto [rc, out] =
      run_strata("tokenizer encode --tokenizer " + quoted(kTok512) + " --text 'Once upon a time'");
  EXPECT_EQ(rc, 0) << out;
  EXPECT_EQ(out, "403 407 261 378\n");
  std::tie(rc, out) =
      run_strata("tokenizer decode --tokenizer " + quoted(kTok512) + " --ids '403 407 261 378'");
  EXPECT_EQ(rc, 0) << out;
  EXPECT_EQ(out, "Once upon a time\n");
  std::tie(rc, out) =
      run_strata("tokenizer decode --tokenizer " + quoted(kTok512) + " --ids '403 x'");
  EXPECT_EQ(rc, 1);
  EXPECT_NE(out.find("'x' is not a token id"), std::string::npos) << out;
  std::tie(rc, out) = run_strata("tokenizer encode --tokenizer /nonexistent/t.model --text hi");
  EXPECT_EQ(rc, 1);
  EXPECT_EQ(out, "strata: error: tokenizer /nonexistent/t.model: no such file\n");
  std::tie(rc, out) = run_strata("tokenizer train --help");
  EXPECT_EQ(rc, 0);
  EXPECT_NE(out.find("--input FILE"), std::string::npos) << out;
  std::tie(rc, out) = run_strata("tokenizer frobnicate");
  EXPECT_EQ(rc, 1);
  EXPECT_NE(out.find("unknown action 'frobnicate'"), std::string::npos) << out;
}

TEST(Cli, TokenizerTrainTwoInputs) {
  const std::string a = path_in("cli/a.txt"), b = path_in("cli/b.txt");
  const std::string text = read_bytes(training_text_path());
  write_bytes(a, text.substr(0, 60000));
  write_bytes(b, text.substr(60000, 60000));
  const std::string out = path_in("cli/tok.model");
  auto [rc, log] = run_strata("tokenizer train --input " + quoted(a) + " --input " + quoted(b) +
                              " --vocab-size 400 --out " + quoted(out));
  ASSERT_EQ(rc, 0) << log;
  const Tokenizer tok = Tokenizer::load(out);
  EXPECT_EQ(tok.vocab_size(), 400);
  EXPECT_NE(log.find(tok.sha256()), std::string::npos) << log;
  std::tie(rc, log) = run_strata("tokenizer train --input " + quoted(a) + " --out " + quoted(out));
  EXPECT_EQ(rc, 2);  // a missing required option is a usage error
  EXPECT_NE(log.find("--vocab-size"), std::string::npos) << log;
}

TEST(Cli, DataPrepare) {
  const std::string input = path_in("cli/story.txt");
  std::string text;
  for (int i = 0; i < 30; ++i)
    text += "Once upon a time there was story " + std::to_string(i) + ".\nThe end.\n\n";
  write_bytes(input, text);
  const std::string out = path_in("cli/ds");
  auto [rc, log] =
      run_strata("data prepare --tokenizer " + quoted(kTok512) + " --input " + quoted(input) +
                 " --out " + quoted(out) + " --val-fraction 0.2 --seed 3 --eos --shard-tokens 100");
  ASSERT_EQ(rc, 0) << log;
  const TokenDataset train = TokenDataset::open(out, "train");
  const TokenDataset val = TokenDataset::open(out, "val");
  EXPECT_EQ(train.num_documents() + val.num_documents(), 30);
  EXPECT_GT(val.num_documents(), 0);
  EXPECT_TRUE(train.meta().add_eos);
  EXPECT_EQ(train.meta().vocab_size, 512);
  EXPECT_EQ(train.tokens()[0], 1);
  EXPECT_EQ(train.tokens()[train.doc_start(1) - 1], 2);
  EXPECT_GT(train.meta().train.shards.size(), 1u);
  std::tie(rc, log) = run_strata("data prepare --tokenizer " + quoted(kTok512) + " --input " +
                                 quoted(input) + " --input " + quoted(path_in("cli/gone.txt")) +
                                 " --out " + quoted(path_in("cli/ds2")));
  EXPECT_EQ(rc, 1);
  EXPECT_NE(log.find("strata: error: input " + path_in("cli/gone.txt") + ": no such file"),
            std::string::npos)
      << log;
  std::tie(rc, log) = run_strata("data prepare --help");
  EXPECT_EQ(rc, 0);
  EXPECT_NE(log.find("--doc-split MODE"), std::string::npos) << log;
  std::tie(rc, log) = run_strata("data prepare --tokenizer x --input y --out z --doc-split words");
  EXPECT_EQ(rc, 1);
  EXPECT_NE(log.find("unknown --doc-split 'words'"), std::string::npos) << log;
}

}  // namespace
}  // namespace strata
