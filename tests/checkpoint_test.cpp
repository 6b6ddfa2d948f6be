// HDF5 checkpoints: bit-exact round trips, large texts, one-line errors for bad
// input, atomic writes (a writer killed mid-write leaves the previous
// checkpoint intact), run-directory listing and pruning, and `strata inspect`.
#include <gtest/gtest.h>

#include <cmath>

#include <fcntl.h>
#include <hdf5.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "io/checkpoint.h"
#include "model/config.h"
#include "model/params.h"
#include "testing.h"

namespace strata {
namespace {

namespace fs = std::filesystem;

using testing::TempDir;

struct Tensor {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<float> data;
};

int64_t numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// Random bit patterns over the whole float range (denormals, infinities,
// negative zero), except NaNs: every bit must survive the round trip.
Tensor random_tensor(const std::string& name, std::vector<int64_t> shape, uint32_t seed) {
  std::mt19937 rng(seed);
  Tensor t{name, std::move(shape), {}};
  t.data.resize(size_t(numel(t.shape)));
  for (float& x : t.data) {
    uint32_t bits;
    do bits = rng();
    while ((bits & 0x7f800000u) == 0x7f800000u && (bits & 0x007fffffu) != 0);
    std::memcpy(&x, &bits, 4);
  }
  return t;
}

std::vector<TensorRef> refs(std::vector<Tensor>& ts) {
  std::vector<TensorRef> out;
  for (auto& t : ts) out.push_back({t.name, t.shape, t.data.data()});
  return out;
}

// Buffers shaped like `ts`, filled with a sentinel, to read into.
std::vector<Tensor> empty_like(const std::vector<Tensor>& ts) {
  std::vector<Tensor> out = ts;
  for (auto& t : out) std::fill(t.data.begin(), t.data.end(), -12345.f);
  return out;
}

void expect_bits_equal(const std::vector<Tensor>& got, const std::vector<Tensor>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(got[i].data.size(), want[i].data.size()) << want[i].name;
    EXPECT_EQ(0, std::memcmp(got[i].data.data(), want[i].data.data(), want[i].data.size() * 4))
        << want[i].name << " differs bitwise";
  }
}

// Binary tokenizer bytes, with NULs and high bytes (a sentencepiece model is protobuf).
std::string tokenizer_bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (char& c : s) c = char(rng() & 0xff);
  s[0] = '\0';
  s[n - 1] = char(0xff);
  return s;
}

// The contents of one checkpoint, owning its tensors.
struct Contents {
  std::vector<Tensor> params, exp_avg, exp_avg_sq;
  nlohmann::json config, state;
  std::string plan = "standard*2", recipe, tokenizer;
  int64_t optimizer_step = 0;

  CheckpointData data() {
    CheckpointData d;
    d.config = config;
    d.plan = plan;
    d.recipe = recipe;
    d.state = state;
    d.tokenizer = tokenizer;
    d.params = refs(params);
    d.exp_avg = refs(exp_avg);
    d.exp_avg_sq = refs(exp_avg_sq);
    d.optimizer_step = optimizer_step;
    return d;
  }
};

Contents make_contents(uint32_t seed, bool optimizer = true) {
  Contents c;
  c.params = {random_tensor("model.embed_tokens.weight", {37, 16}, seed + 1),
              random_tensor("model.norm.weight", {16}, seed + 2),
              random_tensor("model.layers.0.self_attn.q_proj.weight", {16, 16}, seed + 3),
              random_tensor("model.layers.0.mlp.down_proj.weight", {16, 40}, seed + 4),
              random_tensor("one", {1}, seed + 5),
              random_tensor("cube", {2, 3, 5}, seed + 6)};
  if (optimizer) {
    for (const auto& p : c.params) {
      c.exp_avg.push_back(random_tensor(p.name, p.shape, seed + 100 + uint32_t(c.exp_avg.size())));
      c.exp_avg_sq.push_back(
          random_tensor(p.name, p.shape, seed + 200 + uint32_t(c.exp_avg_sq.size())));
    }
    c.optimizer_step = 1000 + seed;
  }
  LlamaConfig cfg;
  cfg.vocab_size = 37;
  cfg.hidden_size = 16;
  cfg.intermediate_size = 40;
  cfg.num_hidden_layers = 2;
  cfg.num_attention_heads = 4;
  cfg.num_key_value_heads = 2;
  cfg.finalize();
  c.config = cfg.to_json();
  c.state = {{"step", 1000 + seed},
             {"tokens_seen", int64_t(1) << 40},
             {"loader", {{"epoch", 2}, {"position", 1234}}},
             {"run_name", "unit-test"},
             {"rng", {{"seed", 42}}},
             {"lr", 3e-4}};
  c.recipe = "[model]\nlayers = 2\n# seed " + std::to_string(seed) + "\n";
  c.tokenizer = tokenizer_bytes(1000 + seed, seed);
  return c;
}

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), std::streamsize(bytes.size()));
}

// Reads every part of a checkpoint and compares it with `c`, bit for bit.
void expect_checkpoint_is(const std::string& path, Contents& c) {
  CheckpointReader r(path);
  EXPECT_EQ(r.path(), path);
  EXPECT_EQ(r.version(), 1);
  EXPECT_EQ(r.created().size(), 20u) << r.created();  // 2025-01-02T03:04:05Z
  EXPECT_EQ(r.config(), c.config);
  EXPECT_EQ(r.plan(), c.plan);
  EXPECT_EQ(r.recipe(), c.recipe);
  EXPECT_EQ(r.state(), c.state);
  EXPECT_EQ(r.tokenizer(), c.tokenizer);
  EXPECT_EQ(r.has_tokenizer(), !c.tokenizer.empty());
  EXPECT_EQ(r.tokenizer_size(), int64_t(c.tokenizer.size()));
  std::vector<Tensor> params = empty_like(c.params);
  r.read("params", refs(params));
  expect_bits_equal(params, c.params);
  EXPECT_EQ(r.has_optimizer(), !c.exp_avg.empty());
  if (!c.exp_avg.empty()) {
    EXPECT_EQ(r.optimizer_step(), c.optimizer_step);
    EXPECT_EQ(r.optimizer_kind(), "adamw");
    std::vector<Tensor> m = empty_like(c.exp_avg), v = empty_like(c.exp_avg_sq);
    r.read("optimizer/exp_avg", refs(m));
    r.read("optimizer/exp_avg_sq", refs(v));
    expect_bits_equal(m, c.exp_avg);
    expect_bits_equal(v, c.exp_avg_sq);
  }
}

TEST(Checkpoint, RoundTripIsBitExact) {
  TempDir dir;
  Contents c = make_contents(1);
  const std::string path = dir / "nested/deeper/ck.h5";  // parent directories are created
  write_checkpoint(path, c.data());
  EXPECT_TRUE(fs::exists(path));
  EXPECT_FALSE(fs::exists(path + ".tmp"));
  expect_checkpoint_is(path, c);
  CheckpointReader r(path);
  EXPECT_EQ(r.tokenizer_sha256().size(), 64u);
}

TEST(Checkpoint, ListGivesDatasetsSortedByNameWithShapes) {
  TempDir dir;
  Contents c = make_contents(2);
  write_checkpoint(dir / "ck.h5", c.data());
  CheckpointReader r(dir / "ck.h5");
  for (const char* group : {"params", "optimizer/exp_avg", "optimizer/exp_avg_sq"}) {
    const auto listed = r.list(group);
    std::vector<std::pair<std::string, std::vector<int64_t>>> want;
    for (const auto& t : c.params) want.emplace_back(t.name, t.shape);
    std::sort(want.begin(), want.end());
    EXPECT_EQ(listed, want) << group;
  }
  testing::expect_one_line(testing::thrown_message([&] { r.list("nope/deeper"); }),
                           {dir / "ck.h5", "nope/deeper"});
}

TEST(Checkpoint, WithoutOptimizerOrTokenizerOrRecipe) {
  TempDir dir;
  Contents c = make_contents(3, /*optimizer=*/false);
  c.tokenizer.clear();
  c.recipe.clear();
  write_checkpoint(dir / "ck.h5", c.data());
  expect_checkpoint_is(dir / "ck.h5", c);
  CheckpointReader r(dir / "ck.h5");
  EXPECT_FALSE(r.has_optimizer());
  EXPECT_EQ(r.optimizer_step(), 0);
  EXPECT_EQ(r.tokenizer(), "");
  EXPECT_EQ(r.tokenizer_sha256(), "");
  testing::expect_one_line(testing::thrown_message([&] { r.list("optimizer/exp_avg"); }),
                           {dir / "ck.h5", "optimizer/exp_avg"});
}

TEST(Checkpoint, OneMegabyteTexts) {
  TempDir dir;
  Contents c = make_contents(4);
  std::string recipe;
  for (int i = 0; recipe.size() < (size_t(1) << 20); ++i)
    recipe += "[section_" + std::to_string(i) + "]\nkey = \"value " + std::to_string(i) + "\"\n";
  recipe.resize(size_t(1) << 20);
  c.recipe = recipe;
  c.plan = std::string(300000, 'p');
  c.state["big"] = std::string(1 << 20, 's');
  write_checkpoint(dir / "ck.h5", c.data());
  expect_checkpoint_is(dir / "ck.h5", c);
  EXPECT_EQ(CheckpointReader(dir / "ck.h5").recipe().size(), size_t(1) << 20);
}

TEST(Checkpoint, OverwritesAnExistingCheckpoint) {
  TempDir dir;
  Contents a = make_contents(5), b = make_contents(6);
  write_checkpoint(dir / "ck.h5", a.data());
  write_checkpoint(dir / "ck.h5", b.data());
  expect_checkpoint_is(dir / "ck.h5", b);
}

TEST(Checkpoint, MissingTensorNamesFileAndTensor) {
  TempDir dir;
  Contents c = make_contents(7);
  write_checkpoint(dir / "ck.h5", c.data());
  CheckpointReader r(dir / "ck.h5");
  std::vector<float> buf(16);
  const std::string msg = testing::thrown_message([&] {
    r.read("params", {{"model.missing.weight", {16}, buf.data()}});
  });
  testing::expect_one_line(msg, {dir / "ck.h5", "params/model.missing.weight", "not found"});
  const std::string msg2 = testing::thrown_message([&] {
    r.read("optimizer/exp_avg", {{"model.missing.weight", {16}, buf.data()}});
  });
  testing::expect_one_line(msg2, {dir / "ck.h5", "optimizer/exp_avg/model.missing.weight"});
}

// A NaN or inf in a stored tensor (a checkpoint edited, or written by a run
// that diverged elsewhere) is refused on reading, naming file, tensor and
// index, instead of producing garbage without an error (issue 19, B7).
TEST(Checkpoint, NonFiniteValuesAreRefused) {
  TempDir dir;
  for (const float bad : {std::nanf(""), INFINITY, -INFINITY}) {
    Contents c = make_contents(9);
    c.params[3].data[5] = bad;  // model.layers.0.mlp.down_proj.weight
    c.exp_avg_sq[1].data[0] = bad;
    write_checkpoint(dir / "ck.h5", c.data());
    CheckpointReader r(dir / "ck.h5");
    std::vector<float> buf(16 * 40);
    testing::expect_one_line(
        testing::thrown_message([&] {
          r.read("params", {{"model.layers.0.mlp.down_proj.weight", {16, 40}, buf.data()}});
        }),
        {dir / "ck.h5", "params/model.layers.0.mlp.down_proj.weight", "non-finite", "index 5"});
    testing::expect_one_line(
        testing::thrown_message([&] {
          r.read("optimizer/exp_avg_sq", {{"model.norm.weight", {16}, buf.data()}});
        }),
        {"optimizer/exp_avg_sq/model.norm.weight", "index 0"});
    // The finite tensors still read.
    r.read("params", {{"model.norm.weight", {16}, buf.data()}});
  }
}

TEST(Checkpoint, ShapeMismatchNamesFileTensorAndShapes) {
  TempDir dir;
  Contents c = make_contents(8);
  write_checkpoint(dir / "ck.h5", c.data());
  CheckpointReader r(dir / "ck.h5");
  std::vector<float> buf(37 * 16, 7.f);
  // Same element count, transposed: must still be refused.
  testing::expect_one_line(
      testing::thrown_message([&] {
        r.read("params", {{"model.embed_tokens.weight", {16, 37}, buf.data()}});
      }),
      {dir / "ck.h5", "params/model.embed_tokens.weight", "[37, 16]", "[16, 37]"});
  // Wrong rank.
  testing::expect_one_line(testing::thrown_message([&] {
                             r.read("params", {{"model.norm.weight", {1, 16}, buf.data()}});
                           }),
                           {dir / "ck.h5", "params/model.norm.weight", "[16]", "[1, 16]"});
  EXPECT_EQ(buf[0], 7.f) << "a refused read must not touch the buffer";
}

// Writes a raw HDF5 file (not through strata) with `fn` given the file id.
void with_raw_file(const std::string& path, bool create, const std::function<void(hid_t)>& fn) {
  const hid_t f = create ? H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT)
                         : H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  ASSERT_GE(f, 0) << path;
  fn(f);
  ASSERT_GE(H5Fclose(f), 0);
}

TEST(Checkpoint, WrongDtypeNamesFileAndTensor) {
  TempDir dir;
  Contents c = make_contents(9);
  write_checkpoint(dir / "ck.h5", c.data());
  with_raw_file(dir / "ck.h5", false, [](hid_t f) {
    const hsize_t n = 4;
    const hid_t space = H5Screate_simple(1, &n, nullptr);
    const hid_t d = H5Dcreate2(f, "params/as_double", H5T_IEEE_F64LE, space, H5P_DEFAULT,
                               H5P_DEFAULT, H5P_DEFAULT);
    const double v[4] = {1, 2, 3, 4};
    EXPECT_GE(H5Dwrite(d, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, v), 0);
    H5Dclose(d);
    H5Sclose(space);
  });
  CheckpointReader r(dir / "ck.h5");
  std::vector<float> buf(4);
  testing::expect_one_line(testing::thrown_message([&] {
                             r.read("params", {{"as_double", {4}, buf.data()}});
                           }),
                           {dir / "ck.h5", "params/as_double", "float64", "expected float32"});
}

// bf16 parameters: each read value is the float32 rounded to nearest even
// bfloat16 (computed here from the bits); moments stay float32; a bf16
// tensor outside /params is refused.
TEST(Checkpoint, Bf16ParamsReadBackRounded) {
  TempDir dir;
  Contents c = make_contents(12);
  c.params[0].data[0] = 1.00390625f;  // 1 + 2^-8: a tie, rounds to even (1.0)
  c.params[0].data[1] = 1.01171875f;  // 1 + 3 * 2^-8: a tie, rounds up to 1 + 2^-6
  c.params[0].data[2] = -3.0e-39f;    // a float32 subnormal
  CheckpointData d = c.data();
  d.params_bf16 = true;
  write_checkpoint(dir / "ck.h5", d);
  {
    CheckpointReader r(dir / "ck.h5");
    EXPECT_EQ(r.params_dtype(), "bfloat16");
    std::vector<Tensor> params = empty_like(c.params);
    r.read("params", refs(params));
    int64_t changed = 0, total = 0;
    for (size_t t = 0; t < params.size(); ++t)
      for (size_t i = 0; i < params[t].data.size(); ++i) {
        uint32_t u;
        std::memcpy(&u, &c.params[t].data[i], 4);
        const uint32_t lsb = (u >> 16) & 1;
        u = (u + 0x7fff + lsb) & 0xffff0000u;
        float want;
        std::memcpy(&want, &u, 4);
        ASSERT_EQ(std::memcmp(&params[t].data[i], &want, 4), 0)
            << params[t].name << "[" << i << "]: " << c.params[t].data[i] << " read as "
            << params[t].data[i] << ", expected " << want;
        changed += params[t].data[i] != c.params[t].data[i];
        ++total;
      }
    EXPECT_GT(changed, total / 2);  // the weights really were rounded
    EXPECT_EQ(params[0].data[0], 1.0f);
    EXPECT_EQ(params[0].data[1], 1.015625f);
    std::vector<Tensor> m = empty_like(c.exp_avg);
    r.read("optimizer/exp_avg", refs(m));
    expect_bits_equal(m, c.exp_avg);
  }
  write_checkpoint(dir / "f32.h5", c.data());
  EXPECT_EQ(CheckpointReader(dir / "f32.h5").params_dtype(), "float32");
  // A bf16 dataset where float32 is required.
  with_raw_file(dir / "ck.h5", false, [](hid_t f) {
    H5Ldelete(f, "optimizer/exp_avg_sq", H5P_DEFAULT);
    H5Lcreate_hard(f, "params", f, "optimizer/exp_avg_sq", H5P_DEFAULT, H5P_DEFAULT);
  });
  CheckpointReader r2(dir / "ck.h5");
  std::vector<Tensor> v = empty_like(c.exp_avg_sq);
  testing::expect_one_line(
      testing::thrown_message([&] { r2.read("optimizer/exp_avg_sq", refs(v)); }),
      {dir / "ck.h5", "optimizer/exp_avg_sq", "float16", "expected float32"});
}

TEST(Checkpoint, CorruptTokenizerIsDetected) {
  TempDir dir;
  Contents c = make_contents(10);
  write_checkpoint(dir / "ck.h5", c.data());
  with_raw_file(dir / "ck.h5", false, [&](hid_t f) {
    const hid_t d = H5Dopen2(f, "tokenizer", H5P_DEFAULT);
    std::string bytes = c.tokenizer;
    bytes[10] ^= 1;
    EXPECT_GE(H5Dwrite(d, H5T_NATIVE_UCHAR, H5S_ALL, H5S_ALL, H5P_DEFAULT, bytes.data()), 0);
    H5Dclose(d);
  });
  CheckpointReader r(dir / "ck.h5");
  testing::expect_one_line(testing::thrown_message([&] { r.tokenizer(); }),
                           {dir / "ck.h5", "tokenizer", "sha256"});
}

TEST(Checkpoint, NotACheckpointHdf5File) {
  TempDir dir;
  const std::string path = dir / "plain.h5";
  with_raw_file(path, true, [](hid_t f) {
    const hsize_t n = 3;
    const hid_t space = H5Screate_simple(1, &n, nullptr);
    const hid_t d =
        H5Dcreate2(f, "data", H5T_IEEE_F32LE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    H5Dclose(d);
    H5Sclose(space);
  });
  testing::expect_one_line(testing::thrown_message([&] { CheckpointReader r(path); }),
                           {path, "not a strata checkpoint", "format"});
}

TEST(Checkpoint, NonHdf5AndMissingFiles) {
  TempDir dir;
  const std::string text = dir / "notes.h5";
  write_file(text, "this is not an HDF5 file\n");
  testing::expect_one_line(testing::thrown_message([&] { CheckpointReader r(text); }),
                           {text, "not an HDF5 file"});
  const std::string empty = dir / "empty.h5";
  write_file(empty, "");
  testing::expect_one_line(testing::thrown_message([&] { CheckpointReader r(empty); }), {empty});
  const std::string missing = dir / "missing.h5";
  testing::expect_one_line(testing::thrown_message([&] { CheckpointReader r(missing); }),
                           {missing, "no such file"});
  testing::expect_one_line(testing::thrown_message([&] { CheckpointReader r(dir.path()); }),
                           {dir.path(), "directory"});
}

TEST(Checkpoint, TruncatedFile) {
  TempDir dir;
  Contents c = make_contents(11);
  write_checkpoint(dir / "ck.h5", c.data());
  const std::string bytes = read_file(dir / "ck.h5");
  ASSERT_GT(bytes.size(), 10000u);
  for (size_t keep : {bytes.size() - 1, bytes.size() / 2, size_t(100), size_t(8)}) {
    const std::string path = dir / ("cut_" + std::to_string(keep) + ".h5");
    write_file(path, bytes.substr(0, keep));
    const std::string msg = testing::thrown_message([&] {
      CheckpointReader r(path);
      std::vector<Tensor> params = empty_like(c.params);
      r.read("params", refs(params));
    });
    testing::expect_one_line(msg, {path});
  }
}

TEST(Checkpoint, InvalidInputIsRefusedBeforeWriting) {
  TempDir dir;
  const std::string path = dir / "ck.h5";
  {
    Contents c = make_contents(12);
    c.params[1].name = "has/slash";
    testing::expect_one_line(testing::thrown_message([&] { write_checkpoint(path, c.data()); }),
                             {path, "has/slash"});
  }
  {
    Contents c = make_contents(12);
    CheckpointData d = c.data();
    d.params[2].data = nullptr;
    testing::expect_one_line(testing::thrown_message([&] { write_checkpoint(path, d); }),
                             {path, "params/model.layers.0.self_attn.q_proj.weight"});
  }
  {
    Contents c = make_contents(12);
    c.exp_avg_sq.pop_back();
    testing::expect_one_line(testing::thrown_message([&] { write_checkpoint(path, c.data()); }),
                             {path, "exp_avg_sq"});
  }
  EXPECT_FALSE(fs::exists(path));
  EXPECT_FALSE(fs::exists(path + ".tmp"));
}

TEST(Checkpoint, FailedWriteRemovesTemporaryFile) {
  TempDir dir;
  const std::string path = dir / "ck.h5";
  Contents c = make_contents(13);
  c.params.push_back(c.params[0]);  // duplicate name: HDF5 refuses the second dataset
  testing::expect_one_line(testing::thrown_message([&] { write_checkpoint(path, c.data()); }),
                           {path, "params/model.embed_tokens.weight"});
  EXPECT_FALSE(fs::exists(path));
  EXPECT_FALSE(fs::exists(path + ".tmp"));
}

TEST(Checkpoint, StaleTemporaryFileIsOverwritten) {
  TempDir dir;
  const std::string path = dir / "ck.h5";
  write_file(path + ".tmp", std::string(100000, 'x'));
  Contents c = make_contents(14);
  write_checkpoint(path, c.data());
  EXPECT_FALSE(fs::exists(path + ".tmp"));
  expect_checkpoint_is(path, c);
}

TEST(Checkpoint, SecondWriterIsRefused) {
  TempDir dir;
  const std::string path = dir / "ck.h5";
  // Another writer holds the lock on the temporary file.
  const int fd = ::open((path + ".tmp").c_str(), O_RDWR | O_CREAT, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::flock(fd, LOCK_EX | LOCK_NB), 0);
  Contents c = make_contents(15);
  testing::expect_one_line(testing::thrown_message([&] { write_checkpoint(path, c.data()); }),
                           {path, "another process is writing"});
  EXPECT_TRUE(fs::exists(path + ".tmp")) << "the other writer's file must not be removed";
  ::close(fd);
  write_checkpoint(path, c.data());
  expect_checkpoint_is(path, c);
}

TEST(Checkpoint, KilledWriterLeavesPreviousCheckpointIntact) {
  TempDir dir;
  const std::string path = checkpoint_path(dir.path(), 100);
  Contents before = make_contents(16), after = make_contents(17);
  write_checkpoint(path, before.data());
  const auto mtime = fs::last_write_time(path);
  const auto ino = [&] {
    struct stat st;
    ::stat(path.c_str(), &st);
    return st.st_ino;
  };
  const auto ino_before = ino();

  std::fflush(nullptr);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    // The child dies after writing two tensors of the new checkpoint.
    set_checkpoint_write_hook([](int written) {
      if (written == 2) ::_exit(1);
    });
    try {
      write_checkpoint(path, after.data());
    } catch (...) {
      ::_exit(3);
    }
    ::_exit(0);  // the hook did not fire: the test fails below
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  ASSERT_EQ(WEXITSTATUS(status), 1) << "the child should have been stopped by the hook";

  // The partial write is in the temporary file; the final name is untouched.
  EXPECT_TRUE(fs::exists(path + ".tmp"));
  EXPECT_EQ(ino(), ino_before) << "the final path was replaced";
  EXPECT_EQ(fs::last_write_time(path), mtime);
  expect_checkpoint_is(path, before);
  // The partial file is not a usable checkpoint, and it is not listed.
  EXPECT_ANY_THROW({
    CheckpointReader r(path + ".tmp");
    std::vector<Tensor> params = empty_like(after.params);
    r.read("params", refs(params));
    r.read("optimizer/exp_avg", refs(params));
  });
  const auto listed = list_checkpoints(dir.path());
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_EQ(listed[0].first, 100);

  // A complete write afterwards replaces the stale temporary file and the checkpoint.
  write_checkpoint(path, after.data());
  EXPECT_FALSE(fs::exists(path + ".tmp"));
  expect_checkpoint_is(path, after);
}

TEST(Checkpoint, WriteHookCountsEveryTensor) {
  TempDir dir;
  Contents c = make_contents(18);
  std::vector<int> seen;
  set_checkpoint_write_hook([&](int n) { seen.push_back(n); });
  write_checkpoint(dir / "ck.h5", c.data());
  set_checkpoint_write_hook(nullptr);
  ASSERT_EQ(seen.size(), 3 * c.params.size());
  for (size_t i = 0; i < seen.size(); ++i) EXPECT_EQ(seen[i], int(i + 1));
}

TEST(Checkpoint, PathsListAndPrune) {
  TempDir dir;
  EXPECT_EQ(checkpoint_path("runs/a", 1000), "runs/a/checkpoints/step_00001000.h5");
  EXPECT_EQ(checkpoint_path("r", 123456789), "r/checkpoints/step_123456789.h5");
  EXPECT_TRUE(list_checkpoints(dir / "no_such_run").empty());

  Contents c = make_contents(19, false);
  for (int64_t step : {300, 20, 1000, 5})
    write_checkpoint(checkpoint_path(dir.path(), step), c.data());
  const std::string cdir = dir / "checkpoints";
  for (const char* junk : {"step_00000400.h5.tmp", "notes.txt", "step_abc.h5", "step_.h5",
                           "step_00000001.h5.bak", "xstep_00000002.h5"})
    write_file(cdir + "/" + junk, "junk");
  fs::create_directory(cdir + "/step_00000007.h5");  // a directory is not a checkpoint

  auto steps = [&] {
    std::vector<int64_t> s;
    for (const auto& [step, path] : list_checkpoints(dir.path())) {
      EXPECT_EQ(path, checkpoint_path(dir.path(), step));
      s.push_back(step);
    }
    return s;
  };
  EXPECT_EQ(steps(), (std::vector<int64_t>{5, 20, 300, 1000}));
  prune_checkpoints(dir.path(), 0);  // keep all
  EXPECT_EQ(steps(), (std::vector<int64_t>{5, 20, 300, 1000}));
  prune_checkpoints(dir.path(), 10);
  EXPECT_EQ(steps(), (std::vector<int64_t>{5, 20, 300, 1000}));
  prune_checkpoints(dir.path(), 2);
  EXPECT_EQ(steps(), (std::vector<int64_t>{300, 1000}));
  prune_checkpoints(dir.path(), 1);
  EXPECT_EQ(steps(), (std::vector<int64_t>{1000}));
  expect_checkpoint_is(checkpoint_path(dir.path(), 1000), c);
  // Other files are left alone.
  EXPECT_TRUE(fs::exists(cdir + "/step_00000400.h5.tmp"));
  EXPECT_TRUE(fs::exists(cdir + "/notes.txt"));
}

// ---------------------------------------------------------------------------
// strata inspect, run as a user runs it
// ---------------------------------------------------------------------------

struct CmdResult {
  int status = -1;
  std::string out;
};

CmdResult run(const std::string& cmd) {
  CmdResult r;
  std::FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return r;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  const int st = ::pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

// A real model's tensors (names and shapes from the parameter layout).
struct ModelCheckpoint {
  LlamaConfig cfg;
  std::vector<float> arena, m, v;
  CheckpointData data;
};

ModelCheckpoint model_checkpoint() {
  ModelCheckpoint mc;
  mc.cfg.vocab_size = 300;
  mc.cfg.hidden_size = 64;
  mc.cfg.intermediate_size = 160;
  mc.cfg.num_hidden_layers = 3;
  mc.cfg.num_attention_heads = 4;
  mc.cfg.num_key_value_heads = 2;
  mc.cfg.rope_theta = 500000;
  mc.cfg.finalize();
  const ParamLayout layout(mc.cfg);
  mc.arena.assign(size_t(layout.total()), 0.5f);
  mc.m.assign(size_t(layout.total()), 0.f);
  mc.v.assign(size_t(layout.total()), 0.f);
  for (const auto& t : layout.tensors()) {
    mc.data.params.push_back({t.name, t.shape, mc.arena.data() + t.offset});
    mc.data.exp_avg.push_back({t.name, t.shape, mc.m.data() + t.offset});
    mc.data.exp_avg_sq.push_back({t.name, t.shape, mc.v.data() + t.offset});
  }
  mc.data.optimizer_step = 1000;
  mc.data.config = mc.cfg.to_json();
  mc.data.plan = "standard*3";
  mc.data.recipe = "[model]\nlayers = 3\n\n[train]\nlr = 3e-4\n";
  mc.data.state = {{"step", 1000},
                   {"tokens_seen", 4096000},
                   {"loader", {{"epoch", 0}, {"position", 1234}}},
                   {"run_name", "tiny-run"}};
  mc.data.tokenizer = tokenizer_bytes(2048, 5);
  return mc;
}

std::string quote(const std::string& s) { return "'" + s + "'"; }

TEST(Inspect, PrintsSummaryTensorsRecipeAndJson) {
  TempDir dir;
  const ModelCheckpoint mc = model_checkpoint();
  const std::string path = dir / "ck.h5";
  write_checkpoint(path, mc.data);
  const int64_t nparams = mc.cfg.num_parameters();
  char human[32];
  std::snprintf(human, sizeof human, "%.2fK", double(nparams) / 1e3);

  const CmdResult r = run(std::string(STRATA_BINARY) + " inspect " + quote(path));
  ASSERT_EQ(r.status, 0) << r.out;
  for (const std::string& want :
       {"checkpoint:    " + path, std::string("format:        strata-checkpoint v1"),
        std::string("run:           tiny-run"), std::string("step:          1000\n"),
        std::string("tokens seen:   4,096,000"),
        std::string("data:          epoch 0, position 1,234"),
        std::string(
            "3 layers, hidden 64, heads 4 (kv 2), head_dim 16, intermediate 160, vocab 300, "
            "untied embeddings, rope_theta 500000"),
        std::string("plan:          standard*3"), std::string("parameters:    ") + human,
        std::string("optimizer:     adamw, step 1000 ("),
        std::string("tokenizer:     2.0 KiB, sha256 "), std::string("created:       20")})
    EXPECT_NE(r.out.find(want), std::string::npos) << "missing '" << want << "' in:\n" << r.out;
  EXPECT_EQ(r.out.find("model.layers.0.mlp.down_proj.weight"), std::string::npos);
  EXPECT_EQ(r.out.find("lr = 3e-4"), std::string::npos);

  const CmdResult t =
      run(std::string(STRATA_BINARY) + " inspect " + quote(path) + " --tensors --recipe");
  ASSERT_EQ(t.status, 0) << t.out;
  EXPECT_NE(t.out.find("model.layers.0.mlp.down_proj.weight"), std::string::npos) << t.out;
  EXPECT_NE(t.out.find("[64, 160]"), std::string::npos) << t.out;
  EXPECT_NE(t.out.find("model.embed_tokens.weight"), std::string::npos) << t.out;
  EXPECT_NE(t.out.find("[300, 64]"), std::string::npos) << t.out;
  EXPECT_NE(t.out.find("[train]\nlr = 3e-4\n"), std::string::npos) << t.out;

  const CmdResult j = run(std::string(STRATA_BINARY) + " inspect --json " + quote(path));
  ASSERT_EQ(j.status, 0) << j.out;
  nlohmann::json js;
  ASSERT_NO_THROW(js = nlohmann::json::parse(j.out)) << j.out;
  EXPECT_EQ(js["file"], path);
  EXPECT_EQ(js["version"], 1);
  EXPECT_EQ(js["step"], 1000);
  EXPECT_EQ(js["tokens_seen"], 4096000);
  EXPECT_EQ(js["loader"]["position"], 1234);
  EXPECT_EQ(js["run_name"], "tiny-run");
  EXPECT_EQ(js["parameters"], nparams);
  EXPECT_EQ(js["parameters_human"], human);
  EXPECT_EQ(js["model"]["layers"], 3);
  EXPECT_EQ(js["model"]["num_key_value_heads"], 2);
  EXPECT_EQ(js["model"]["tie_word_embeddings"], false);
  EXPECT_EQ(js["config"], mc.data.config);
  EXPECT_EQ(js["plan"], "standard*3");
  EXPECT_EQ(js["recipe"], mc.data.recipe);
  EXPECT_EQ(js["optimizer"]["step"], 1000);
  EXPECT_EQ(js["tokenizer"]["bytes"], 2048);
  EXPECT_EQ(js["tokenizer"]["sha256"].get<std::string>().size(), 64u);
  EXPECT_EQ(js["tensors"].size(), ParamLayout(mc.cfg).tensors().size());
  int64_t sum = 0;
  for (const auto& t : js["tensors"]) {
    int64_t n = 1;
    for (const auto& d : t["shape"]) n *= d.get<int64_t>();
    sum += n;
  }
  EXPECT_EQ(sum, nparams);
}

TEST(Inspect, BadFilesGiveOneLineErrors) {
  TempDir dir;
  const std::string text = dir / "not_hdf5.h5";
  write_file(text, "hello\n");
  for (const std::string& path : {dir / "missing.h5", text}) {
    const CmdResult r =
        run(std::string(STRATA_BINARY) + " inspect " + quote(path) + " 2>&1 >/dev/null");
    EXPECT_EQ(r.status, 1) << r.out;
    ASSERT_FALSE(r.out.empty());
    EXPECT_EQ(r.out.find('\n'), r.out.size() - 1) << "expected one line: " << r.out;
    EXPECT_EQ(r.out.rfind("strata: error: ", 0), 0u) << r.out;
    EXPECT_NE(r.out.find(path), std::string::npos) << r.out;
  }
  const CmdResult usage = run(std::string(STRATA_BINARY) + " inspect 2>&1 >/dev/null");
  EXPECT_NE(usage.status, 0);
  EXPECT_NE(usage.out.find("missing argument <ckpt.h5> (or --checkpoint FILE;"), std::string::npos)
      << usage.out;
  const CmdResult help = run(std::string(STRATA_BINARY) + " inspect --help");
  EXPECT_EQ(help.status, 0);
  EXPECT_NE(help.out.find("--tensors"), std::string::npos) << help.out;
}

}  // namespace
}  // namespace strata
