// Nothing silently wrong in a checkpoint: the per-tensor CRC-32C written with
// every tensor and verified on load (a flipped bit in the values is an error
// naming the file and the tensor; files without checksums still load), and
// `strata inspect` reporting the checksums and metadata no loadable
// checkpoint has (a config of more layers than the file's tensors, a
// negative step). The pre-check of corrupt files that crash libhdf5 is
// tested by cli.checkpoint_library_crashes and fuzz.replay.checkpoint.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <hdf5.h>
#include <omp.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/error.h"
#include "io/checkpoint.h"
#include "core/crc32c.h"
#include "io/model_io.h"
#include "model/config.h"
#include "model/params.h"
#include "testing.h"

namespace strata {
namespace {

using testing::TempDir;

// ---------------------------------------------------------------------------
// CRC-32C
// ---------------------------------------------------------------------------

uint32_t crc_of(const std::string& s) { return crc32c(0, s.data(), s.size()); }

TEST(Crc32c, StandardCheckValues) {
  EXPECT_EQ(crc_of("123456789"), 0xE3069283u);  // the catalogue's check value
  EXPECT_EQ(crc_of(""), 0u);
  // RFC 3720 (iSCSI), appendix B.4.
  EXPECT_EQ(crc_of(std::string(32, '\0')), 0x8A9136AAu);
  EXPECT_EQ(crc_of(std::string(32, '\xff')), 0x62A8AB43u);
  std::string up(32, '\0');
  for (int i = 0; i < 32; ++i) up[size_t(i)] = char(i);
  EXPECT_EQ(crc_of(up), 0x46DD794Eu);
}

// Long inputs take the three-stream path with its joining tables: the same
// CRC as byte by byte, and any split of the input continues it.
TEST(Crc32c, LongInputsAndContinuation) {
  std::string s(3 * 24576 + 12345, '\0');
  uint32_t x = 12345;
  for (char& c : s) c = char((x = x * 1103515245u + 12345u) >> 24);
  uint32_t bytewise = 0;
  for (char c : s) bytewise = crc32c(bytewise, &c, 1);
  EXPECT_EQ(crc_of(s), bytewise);
  for (size_t cut : {size_t(1), size_t(7), size_t(24576), size_t(50001), s.size() - 3}) {
    const uint32_t head = crc32c(0, s.data(), cut);
    EXPECT_EQ(crc32c(head, s.data() + cut, s.size() - cut), bytewise) << "cut at " << cut;
  }
  s[40000] ^= 0x10;
  EXPECT_NE(crc_of(s), bytewise);
  s[40000] ^= 0x10;
  // Joining the CRCs of two parts (the threads of a large tensor's check).
  for (size_t cut : {size_t(0), size_t(1), size_t(8), size_t(30000), s.size()}) {
    const uint32_t a = crc32c(0, s.data(), cut), b = crc32c(0, s.data() + cut, s.size() - cut);
    EXPECT_EQ(crc32c_combine(a, b, s.size() - cut), bytewise) << "cut at " << cut;
  }
}

// ---------------------------------------------------------------------------
// A debug-sized model checkpoint with the shipped 512-piece tokenizer
// ---------------------------------------------------------------------------

std::string read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

struct ModelFile {
  LlamaConfig cfg;
  std::vector<float> params, m, v;
  CheckpointData data;
};

ModelFile model_file() {
  ModelFile mf;
  mf.cfg.vocab_size = 512;
  mf.cfg.hidden_size = 64;
  mf.cfg.intermediate_size = 160;
  mf.cfg.num_hidden_layers = 2;
  mf.cfg.num_attention_heads = 4;
  mf.cfg.num_key_value_heads = 2;
  mf.cfg.finalize();
  const ParamLayout layout(mf.cfg);
  mf.params.resize(size_t(layout.total()));
  mf.m.resize(mf.params.size());
  mf.v.resize(mf.params.size());
  uint32_t x = 7;
  for (size_t i = 0; i < mf.params.size(); ++i) {
    x = x * 1664525u + 1013904223u;
    const float u = float(x >> 8) / float(1 << 24) - 0.5f;  // [-0.5, 0.5)
    mf.params[i] = 0.1f * u;
    mf.m[i] = 1e-3f * u;
    mf.v[i] = 1e-6f * (u + 0.5f);
  }
  for (const auto& t : layout.tensors()) {
    mf.data.params.push_back({t.name, t.shape, mf.params.data() + t.offset});
    mf.data.exp_avg.push_back({t.name, t.shape, mf.m.data() + t.offset});
    mf.data.exp_avg_sq.push_back({t.name, t.shape, mf.v.data() + t.offset});
  }
  mf.data.optimizer_step = 4;
  mf.data.config = mf.cfg.to_json();
  mf.data.plan = "standard*2";
  mf.data.state = {{"step", 4}, {"tokens_seen", 2048}, {"run_name", "integrity"}};
  mf.data.tokenizer = read_bytes(std::string(STRATA_SOURCE_DIR) + "/data/tokenizers/tok512.model");
  return mf;
}

// Flips bit `bit` of byte `byte` of the values of `dataset` in the file
// (strata writes contiguous datasets: H5Dget_offset finds them).
void flip_bit(const std::string& path, const std::string& dataset, int64_t byte, int bit) {
  const hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  ASSERT_GE(f, 0) << path;
  const hid_t d = H5Dopen2(f, dataset.c_str(), H5P_DEFAULT);
  ASSERT_GE(d, 0) << dataset;
  const haddr_t offset = H5Dget_offset(d);
  H5Dclose(d);
  H5Fclose(f);
  ASSERT_NE(offset, HADDR_UNDEF) << dataset;
  const int fd = ::open(path.c_str(), O_RDWR);
  ASSERT_GE(fd, 0) << path;
  unsigned char c = 0;
  ASSERT_EQ(::pread(fd, &c, 1, off_t(offset + haddr_t(byte))), 1);
  c ^= static_cast<unsigned char>(1u << bit);
  ASSERT_EQ(::pwrite(fd, &c, 1, off_t(offset + haddr_t(byte))), 1);
  ::close(fd);
}

// Deletes the checksums (the root's "checksum" and every tensor's "crc32c"):
// a checkpoint as strata wrote it before checksums. `only`: one tensor's.
void delete_checksums(const std::string& path, const std::string& only = "") {
  const hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  ASSERT_GE(f, 0) << path;
  if (only.empty()) {
    ASSERT_GE(H5Adelete(f, "checksum"), 0);
    for (const char* group : {"params", "optimizer/exp_avg", "optimizer/exp_avg_sq"}) {
      const hid_t g = H5Gopen2(f, group, H5P_DEFAULT);
      hsize_t n = 0;
      H5Gget_num_objs(g, &n);
      for (hsize_t i = 0; i < n; ++i) {
        char name[256];
        H5Gget_objname_by_idx(g, i, name, sizeof name);
        ASSERT_GE(H5Adelete_by_name(g, name, "crc32c", H5P_DEFAULT), 0) << name;
      }
      H5Gclose(g);
    }
  } else {
    ASSERT_GE(H5Adelete_by_name(f, only.c_str(), "crc32c", H5P_DEFAULT), 0) << only;
  }
  ASSERT_GE(H5Fclose(f), 0);
}

// Reads all of a checkpoint's tensors as a resume does.
void read_all(const std::string& path, ModelFile& mf) {
  const CheckpointReader r(path);
  std::vector<float> p(mf.params.size()), m(p.size()), v(p.size());
  const ParamLayout layout(mf.cfg);
  std::vector<TensorRef> rp, rm, rv;
  for (const auto& t : layout.tensors()) {
    rp.push_back({t.name, t.shape, p.data() + t.offset});
    rm.push_back({t.name, t.shape, m.data() + t.offset});
    rv.push_back({t.name, t.shape, v.data() + t.offset});
  }
  r.read("params", rp);
  r.read("optimizer/exp_avg", rm);
  r.read("optimizer/exp_avg_sq", rv);
  EXPECT_EQ(std::memcmp(p.data(), mf.params.data(), p.size() * 4), 0);
  EXPECT_EQ(std::memcmp(v.data(), mf.v.data(), v.size() * 4), 0);
}

// ---------------------------------------------------------------------------
// Checksums on load
// ---------------------------------------------------------------------------

// The reliability probe's case: one exponent bit of mlp.up_proj.weight
// flipped (a finite value 2^128 times larger) loaded silently, generate
// printed garbage and a resume trained on it.
TEST(CheckpointChecksum, FlippedBitIsAnErrorNamingFileAndTensor) {
  TempDir dir;
  ModelFile mf = model_file();
  const std::string good = dir / "good.h5";
  write_checkpoint(good, mf.data);
  EXPECT_TRUE(CheckpointReader(good).has_checksums());
  read_all(good, mf);  // an unmodified file loads

  struct Case {
    std::string group, tensor;
    int64_t byte;
    int bit;
  };
  for (const Case& c : {Case{"params", "model.layers.0.mlp.up_proj.weight", 4 * 100 + 3, 6},
                        Case{"params", "model.norm.weight", 4 * 5 + 1, 0},
                        Case{"optimizer/exp_avg_sq", "model.layers.1.self_attn.q_proj.weight",
                             4 * 77 + 3, 6}}) {
    const std::string bad = dir / "bad.h5";
    std::filesystem::copy_file(good, bad, std::filesystem::copy_options::overwrite_existing);
    flip_bit(bad, c.group + "/" + c.tensor, c.byte, c.bit);
    const std::string msg = testing::thrown_message([&] { read_all(bad, mf); });
    testing::expect_one_line(msg, {bad, "'" + c.group + "/" + c.tensor + "'",
                                   "fails its checksum", "the file is corrupt"});
  }
  // The model loaders (generate, eval, export, init_from) refuse it too.
  const std::string bad = dir / "bad.h5";
  std::filesystem::copy_file(good, bad, std::filesystem::copy_options::overwrite_existing);
  flip_bit(bad, "params/model.layers.0.mlp.up_proj.weight", 4 * 100 + 3, 6);
  testing::expect_one_line(testing::thrown_message([&] { (void)load_model(bad); }),
                           {bad, "model.layers.0.mlp.up_proj.weight", "fails its checksum"});
  EXPECT_NO_THROW((void)load_model(good));
}

// bfloat16 parameters: the checksum covers the float32 values they read back as.
TEST(CheckpointChecksum, Bf16ParamsAreVerified) {
  TempDir dir;
  ModelFile mf = model_file();
  mf.data.params_bf16 = true;
  mf.data.exp_avg.clear();
  mf.data.exp_avg_sq.clear();
  const std::string path = dir / "bf16.h5";
  write_checkpoint(path, mf.data);
  EXPECT_NO_THROW((void)load_model(path));
  flip_bit(path, "params/model.embed_tokens.weight", 2 * 1000 + 1, 6);  // bf16 exponent bit
  testing::expect_one_line(testing::thrown_message([&] { (void)load_model(path); }),
                           {path, "'params/model.embed_tokens.weight'", "fails its checksum"});
}

// A tensor of 4 MiB and more is checked in parts on several threads: the
// same verdicts, a flipped bit in any part found.
TEST(CheckpointChecksum, LargeTensorsCheckedOnThreads) {
  TempDir dir;
  std::vector<float> big(size_t(3) << 19);  // 1.5M floats, 6 MiB
  for (size_t i = 0; i < big.size(); ++i) big[i] = float(i % 1000) * 1e-3f;
  CheckpointData d;
  d.config = nlohmann::json::object();
  d.params = {TensorRef{"big", {int64_t(big.size())}, big.data()}};
  const std::string path = dir / "big.h5";
  write_checkpoint(path, d);
  const int threads = omp_get_max_threads();
  omp_set_num_threads(3);
  std::vector<float> back(big.size());
  {
    const CheckpointReader r(path);
    r.read("params", {TensorRef{"big", {int64_t(big.size())}, back.data()}});
    EXPECT_EQ(std::memcmp(back.data(), big.data(), big.size() * 4), 0);
  }
  for (const int64_t index : {int64_t(10), int64_t(big.size()) / 2, int64_t(big.size()) - 1}) {
    const std::string bad = dir / "bad.h5";
    std::filesystem::copy_file(path, bad, std::filesystem::copy_options::overwrite_existing);
    flip_bit(bad, "params/big", 4 * index + 2, 3);
    const CheckpointReader r(bad);
    testing::expect_one_line(testing::thrown_message([&] {
                               r.read("params", {TensorRef{"big", {int64_t(big.size())},
                                                           back.data()}});
                             }),
                             {bad, "'params/big' fails its checksum"});
  }
  omp_set_num_threads(threads);
}

// A checkpoint written before checksums (no 'checksum' on '/', no tensor
// attribute) loads as before; a tensor that lost its checksum in a file that
// has them is refused.
TEST(CheckpointChecksum, OlderFilesLoadAndAMissingChecksumIsRefused) {
  TempDir dir;
  ModelFile mf = model_file();
  const std::string old = dir / "old.h5";
  write_checkpoint(old, mf.data);
  delete_checksums(old);
  EXPECT_FALSE(CheckpointReader(old).has_checksums());
  read_all(old, mf);

  const std::string one = dir / "one.h5";
  write_checkpoint(one, mf.data);
  delete_checksums(one, "optimizer/exp_avg/model.norm.weight");
  testing::expect_one_line(testing::thrown_message([&] { read_all(one, mf); }),
                           {one, "'optimizer/exp_avg/model.norm.weight'", "has no checksum"});
}

// ---------------------------------------------------------------------------
// The commands: generate, inspect
// ---------------------------------------------------------------------------

struct CmdResult {
  int status = -1;
  std::string out, err;
};

// A shell command line; its standard error is captured through a file.
CmdResult run_shell(const std::string& command, const TempDir& dir) {
  CmdResult r;
  const std::string err = dir / "stderr.txt";
  const std::string cmd = "(" + command + ") 2>'" + err + "'";
  std::FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return r;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  const int st = ::pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  r.err = read_bytes(err);
  return r;
}

// `strata ARGS`.
CmdResult run(const std::string& args, const TempDir& dir) {
  return run_shell(std::string(STRATA_BINARY) + " " + args, dir);
}

// One "strata: error:" line holding every part.
void expect_error_line(const CmdResult& r, std::initializer_list<std::string> parts) {
  EXPECT_EQ(r.status, 1) << r.out << r.err;
  ASSERT_FALSE(r.err.empty());
  EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << "expected one line: " << r.err;
  EXPECT_EQ(r.err.rfind("strata: error: ", 0), 0u) << r.err;
  for (const std::string& p : parts)
    EXPECT_NE(r.err.find(p), std::string::npos) << "'" << p << "' missing from: " << r.err;
}

TEST(CheckpointChecksum, GenerateRefusesAFlippedBit) {
  TempDir dir;
  ModelFile mf = model_file();
  const std::string path = dir / "ck.h5";
  write_checkpoint(path, mf.data);
  const std::string args =
      "generate --checkpoint '" + path + "' --prompt ROMEO: --max-new-tokens 4 --device cpu";
  const CmdResult ok = run(args, dir);
  EXPECT_EQ(ok.status, 0) << ok.err;
  flip_bit(path, "params/model.layers.0.mlp.up_proj.weight", 4 * 100 + 3, 6);
  expect_error_line(run(args, dir),
                    {path, "model.layers.0.mlp.up_proj.weight", "fails its checksum"});
}

// A resume reads the weights and the AdamW moments: a flipped bit in a
// moment stops it before it trains (the probe's resume trained on the file).
TEST(CheckpointChecksum, ResumeRefusesAFlippedBit) {
  TempDir dir;
  const std::string train = "cd '" + std::string(STRATA_SOURCE_DIR) +
                            "' && OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive " +
                            std::string(STRATA_BINARY) +
                            " train recipes/debug.toml --set run.dir='\"" + dir.path() +
                            "/run\"' --set data.dataset='\"" + dir.path() +
                            "/data\"' --set log.sample_tokens=0 --set training.steps=";
  const CmdResult first = run_shell(train + "2 > /dev/null", dir);
  ASSERT_EQ(first.status, 0) << first.err;
  const std::string ck = dir / "run/checkpoints/step_00000002.h5";
  flip_bit(ck, "optimizer/exp_avg/model.layers.1.mlp.gate_proj.weight", 4 * 33 + 3, 5);
  // train logs its progress on standard error: the error is its last line.
  CmdResult resume = run_shell(train + "4 > /dev/null", dir);
  const size_t last = resume.err.rfind('\n', resume.err.size() >= 2 ? resume.err.size() - 2 : 0);
  if (last != std::string::npos) resume.err = resume.err.substr(last + 1);
  expect_error_line(resume, {ck, "'optimizer/exp_avg/model.layers.1.mlp.gate_proj.weight'",
                             "fails its checksum"});
  EXPECT_FALSE(std::filesystem::exists(dir / "run/checkpoints/step_00000004.h5"));
}

TEST(InspectChecks, ReportsTheChecksumVerdict) {
  TempDir dir;
  ModelFile mf = model_file();
  const std::string path = dir / "ck.h5";
  write_checkpoint(path, mf.data);
  const CmdResult ok = run("inspect '" + path + "'", dir);
  EXPECT_EQ(ok.status, 0) << ok.err;
  EXPECT_NE(ok.out.find("checksums:     CRC-32C, all 63 tensors match (values finite)"),
            std::string::npos)
      << ok.out;
  EXPECT_EQ(ok.out.find("problems"), std::string::npos) << ok.out;
  const CmdResult quick = run("inspect --no-verify '" + path + "'", dir);
  EXPECT_EQ(quick.status, 0) << quick.err;
  EXPECT_NE(quick.out.find("checksums:     not verified"), std::string::npos) << quick.out;

  flip_bit(path, "params/model.layers.0.mlp.up_proj.weight", 4 * 100 + 3, 6);
  const CmdResult bad = run("inspect '" + path + "'", dir);
  expect_error_line(bad, {path, "'params/model.layers.0.mlp.up_proj.weight' fails its checksum"});
  // The summary is still printed, the problem listed after it.
  EXPECT_NE(bad.out.find("model:         2 layers"), std::string::npos) << bad.out;
  EXPECT_NE(bad.out.find("checksums:     CRC-32C; 1 of 63 tensors fails"), std::string::npos)
      << bad.out;
  EXPECT_NE(bad.out.find("problems:\n  tensor 'params/model.layers.0.mlp.up_proj.weight' fails"),
            std::string::npos)
      << bad.out;
  const CmdResult js = run("inspect --json '" + path + "'", dir);
  EXPECT_EQ(js.status, 1);
  nlohmann::json j;
  ASSERT_NO_THROW(j = nlohmann::json::parse(js.out)) << js.out;
  EXPECT_EQ(j["checksums"]["tensors"], 63);
  EXPECT_EQ(j["checksums"]["sound"], 62);
  ASSERT_EQ(j["problems"].size(), 1u);

  delete_checksums(path);
  const CmdResult old = run("inspect '" + path + "'", dir);
  EXPECT_EQ(old.status, 0) << old.err;
  EXPECT_NE(old.out.find("checksums:     none stored"), std::string::npos) << old.out;
}

// The probe's cases: a config of 1,000,000 layers beside a 2-layer model's
// tensors, and `step: -5` in the state. inspect showed both without a word;
// loading refuses both (no model can be built; a resume refuses the step).
TEST(InspectChecks, FlagsImpossibleMetadata) {
  TempDir dir;
  ModelFile mf = model_file();
  const std::string layers = dir / "layers.h5";
  CheckpointData d = mf.data;
  d.config["num_hidden_layers"] = 1000000;
  d.plan = "standard*1000000";
  write_checkpoint(layers, d);
  const CmdResult a = run("inspect '" + layers + "'", dir);
  expect_error_line(a, {layers, "1000000 layers, but /params holds 21 tensors for 2 layers"});
  EXPECT_NE(a.out.find("model:         1000000 layers"), std::string::npos) << a.out;
  EXPECT_NE(a.out.find("problems:"), std::string::npos) << a.out;

  // A config of three layers over two layers' tensors: the missing ones named.
  const std::string three = dir / "three.h5";
  d.config["num_hidden_layers"] = 3;
  d.plan = "standard*3";
  write_checkpoint(three, d);
  expect_error_line(run("inspect '" + three + "'", dir),
                    {three, "9 of the 30 tensors it implies are not in /params",
                     "model.layers.2.input_layernorm.weight"});

  const std::string step = dir / "step.h5";
  d = mf.data;
  d.state["step"] = -5;
  write_checkpoint(step, d);
  const CmdResult b = run("inspect '" + step + "'", dir);
  expect_error_line(b, {step, "'step' must be a non-negative integer, got -5"});
  EXPECT_NE(b.out.find("step:          -5"), std::string::npos) << b.out;
  const CmdResult bj = run("inspect --json '" + step + "'", dir);
  EXPECT_EQ(bj.status, 1);
  nlohmann::json j;
  ASSERT_NO_THROW(j = nlohmann::json::parse(bj.out)) << bj.out;
  ASSERT_EQ(j["problems"].size(), 1u) << bj.out;
  EXPECT_NE(j["problems"][0].get<std::string>().find("'step'"), std::string::npos);
}

}  // namespace
}  // namespace strata
