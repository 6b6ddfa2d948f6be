// The training loop: schedules, freezing, end-to-end runs from recipes, exact
// resume, continual pretraining and SFT from a checkpoint, generation.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "data/tokenizer.h"
#include "infer/generate.h"
#include "infer/sampler.h"
#include "io/checkpoint.h"
#include "io/model_io.h"
#include "model/model.h"
#include "tb_reader.h"
#include "testing.h"
#include "train/optimizer.h"
#include "train/schedule.h"
#include "train/trainer.h"

namespace strata {
namespace {

namespace fs = std::filesystem;

using testing::TempDir;

void write_file(const std::string& path, const std::string& text) {
  std::ofstream f(path);
  f << text;
}

std::string source(const std::string& rel) { return std::string(STRATA_SOURCE_DIR) + "/" + rel; }

// A tiny recipe over the first ~60 KB of tiny Shakespeare, with the shipped
// 512-token tokenizer, in `dir`, on the CPU (also where a GPU is visible).
std::string tiny_recipe(const TempDir& dir, const std::string& extra = "") {
  std::ifstream in(source("data/corpora/tinyshakespeare/input.txt"));
  std::string text(60000, '\0');
  in.read(text.data(), std::streamsize(text.size()));
  write_file(dir / "corpus.txt", text);
  const std::string recipe = R"([run]
name = "tiny"
dir = ")" + dir.path() + R"(/run"
seed = 7
device = "cpu"

[data]
tokenizer = ")" + source("data/tokenizers/tok512.model") +
                             R"("
dataset = ")" + dir.path() + R"(/data"
inputs = [")" + dir.path() + R"(/corpus.txt"]
val_fraction = 0.05

[model]
hidden_size = 32
intermediate_size = 64
num_hidden_layers = 2
num_attention_heads = 4
num_key_value_heads = 2
max_position_embeddings = 64

[training]
steps = 30
seq_len = 32
micro_batch_size = 4

[optimizer]
lr = 1e-2

[lr_scheduler]
warmup_steps = 3

[eval]
batches = 4

[log]
interval = 1
)" + extra;
  write_file(dir / "tiny.toml", recipe);
  return dir / "tiny.toml";
}

Recipe load(const std::string& path, const std::vector<std::string>& sets = {}) {
  return Recipe::load(path, sets, train_recipe_schema());
}

std::vector<nlohmann::json> read_metrics(const std::string& path) {
  std::vector<nlohmann::json> out;
  std::ifstream f(path);
  std::string line;
  while (std::getline(f, line)) out.push_back(nlohmann::json::parse(line));
  return out;
}

// ------------------------------------------------------------------ schedules

TEST(Schedule, WarmupCosineLinearConstant) {
  LrSchedule s;
  s.lr = 1.0;
  s.min_lr = 0.1;
  s.warmup_steps = 4;
  s.decay_steps = 14;
  EXPECT_DOUBLE_EQ(s.at(0), 0.25);
  EXPECT_DOUBLE_EQ(s.at(3), 1.0);
  EXPECT_DOUBLE_EQ(s.at(4), 1.0);                // decay starts at the peak
  EXPECT_NEAR(s.at(9), 0.1 + 0.9 * 0.5, 1e-12);  // half way: cosine midpoint
  EXPECT_DOUBLE_EQ(s.at(14), 0.1);               // floor
  EXPECT_DOUBLE_EQ(s.at(100), 0.1);
  s.kind = "linear";
  EXPECT_NEAR(s.at(9), 1.0 - 0.9 * 0.5, 1e-12);
  s.kind = "constant";
  EXPECT_DOUBLE_EQ(s.at(9), 1.0);
  s.kind = "exponential";
  EXPECT_THROW(s.validate(), Error);
}

// ------------------------------------------------------------------- freezing

TEST(Freezing, PatternsAndRanges) {
  const std::vector<std::string> names = {"model.embed_tokens.weight",
                                          "model.layers.0.mlp.up_proj.weight",
                                          "model.layers.1.mlp.up_proj.weight",
                                          "model.layers.1.self_attn.q_proj.weight",
                                          "model.norm.weight",
                                          "lm_head.weight"};
  auto m = resolve_trainable(names, {}, {}, "r");
  EXPECT_EQ(std::count(m.begin(), m.end(), true), 6);
  m = resolve_trainable(names, {"layers:1", "lm_head.weight"}, {}, "r");
  EXPECT_EQ(m, (std::vector<bool>{false, false, true, true, false, true}));
  m = resolve_trainable(names, {}, {"model.layers.*.mlp.*", "model.embed_tokens.weight"}, "r");
  EXPECT_EQ(m, (std::vector<bool>{false, false, false, true, true, true}));
  m = resolve_trainable(names, {"layers:0-1"}, {"model.layers.0.*"}, "r");
  EXPECT_EQ(m, (std::vector<bool>{false, false, true, true, false, false}));
  EXPECT_THROW(resolve_trainable(names, {"model.layers.9.*"}, {}, "r"), Error);
  EXPECT_THROW(resolve_trainable(names, {"layers:3-1"}, {}, "r"), Error);
}

TEST(Freezing, FrozenTensorsGetNoGradientNoStateNoUpdate) {
  LlamaConfig c;
  c.vocab_size = 40;
  c.hidden_size = 16;
  c.intermediate_size = 32;
  c.num_hidden_layers = 3;
  c.num_attention_heads = 2;
  c.max_position_embeddings = 16;
  c.finalize();
  Model<float> m(c, ops::make_backend<float>());
  m.init_weights(3);
  std::vector<std::string> names;
  for (const auto& t : m.layout().tensors()) names.push_back(t.name);
  const auto mask = resolve_trainable(names, {"layers:2", "model.norm.weight"}, {}, "test");
  m.set_trainable(mask);
  AdamW<float> opt(m.backend(), m.layout(), AdamWConfig{}, mask);
  const std::vector<float> before(m.params(), m.params() + m.num_params());
  auto tokens = testing::random_tokens(16, 40, 1), targets = testing::random_tokens(16, 40, 2);
  m.zero_grad();
  m.forward_backward(tokens.data(), targets.data(), 2, 8, 1.0 / 16);
  opt.step(m.params(), m.grads(), 1e-2);
  int64_t state = 0;
  for (size_t i = 0; i < mask.size(); ++i) {
    const ParamInfo& t = m.layout()[int(i)];
    double g = 0, moved = 0;
    for (int64_t k = 0; k < t.numel; ++k) {
      g += std::fabs(m.grads()[t.offset + k]);
      moved += std::fabs(m.params()[t.offset + k] - before[t.offset + k]);
    }
    EXPECT_EQ(opt.has_state(int(i)), bool(mask[i])) << t.name;
    if (mask[i]) {
      state += (t.numel + 15) / 16 * 16;
      EXPECT_GT(g, 0) << t.name;
      EXPECT_GT(moved, 0) << t.name;
    } else {
      EXPECT_EQ(g, 0) << t.name << " is frozen but got a gradient";
      EXPECT_EQ(moved, 0) << t.name << " is frozen but changed";
    }
  }
  EXPECT_EQ(opt.state_elements(), state);
}

// --------------------------------------------------------------- sampling

TEST(Sampler, GreedyTemperatureTopKTopP) {
  const std::vector<float> logits = {0.1f, 2.0f, 1.9f, -1.0f};
  SamplingOptions o;
  EXPECT_EQ(sample_token(logits.data(), 4, o, 0), 1);
  o.temperature = 1.0;
  o.seed = 9;
  o.top_k = 2;
  int counts[4] = {0, 0, 0, 0};
  for (uint64_t d = 0; d < 2000; ++d) ++counts[sample_token(logits.data(), 4, o, d)];
  EXPECT_EQ(counts[0] + counts[3], 0) << "top-k 2 only draws the two best";
  EXPECT_NEAR(double(counts[1]) / 2000, 1.0 / (1.0 + std::exp(-0.1)), 0.04);
  o.top_k = 0;
  o.top_p = 0.3;  // the best token alone has more than 30% of the mass
  for (uint64_t d = 0; d < 50; ++d) EXPECT_EQ(sample_token(logits.data(), 4, o, d), 1);
  o.top_p = 1.0;
  EXPECT_EQ(sample_token(logits.data(), 4, o, 5), sample_token(logits.data(), 4, o, 5));
}

// ----------------------------------------------------------------- end to end

TEST(Train, TinyRecipeLossFallsAndWritesRunDirectory) {
  TempDir dir;
  const TrainResult r = train(load(tiny_recipe(dir)));
  ASSERT_EQ(r.losses.size(), 30u);
  EXPECT_NEAR(r.losses.front(), std::log(512.0), 0.3);
  EXPECT_LT(r.losses.back(), r.losses.front() - 1.0) << "loss did not fall";
  EXPECT_GT(r.last_val_loss, 0);
  EXPECT_LT(r.last_val_loss, std::log(512.0) - 0.5);
  EXPECT_TRUE(fs::exists(dir / "run/recipe.toml"));
  ASSERT_FALSE(r.last_checkpoint.empty());
  EXPECT_EQ(r.last_checkpoint, checkpoint_path(dir / "run", 30));
  const auto metrics = read_metrics(dir / "run/metrics.jsonl");
  ASSERT_EQ(metrics.size(), 30u);
  for (const char* key : {"step", "loss", "lr", "tokens_per_s"})
    EXPECT_TRUE(metrics[0].contains(key)) << key;
  EXPECT_TRUE(metrics.back().contains("val_loss"));
  EXPECT_EQ(metrics.back()["step"], 30);
  // The checkpoint is self-contained: config, recipe, tokenizer, state.
  CheckpointInfo info;
  auto model = load_model(r.last_checkpoint, &info);
  EXPECT_EQ(info.config.hidden_size, 32);
  EXPECT_EQ(info.state["step"], 30);
  EXPECT_NE(info.recipe.find("[training]"), std::string::npos);
  EXPECT_EQ(Tokenizer::from_bytes(info.tokenizer, "ckpt").vocab_size(), 512);
}

// N steps straight == k steps, stop, resume, N-k steps: loss for loss, bit for bit.
TEST(Train, ResumeIsBitExact) {
  TempDir a, b;
  const std::vector<std::string> sets = {"lr_scheduler.decay_steps=12", "training.steps=12",
                                         "checkpoint.interval=4"};
  const TrainResult straight = train(load(tiny_recipe(a), sets));
  const std::string rb = tiny_recipe(b);
  const TrainResult first = train(load(rb, {"lr_scheduler.decay_steps=12", "training.steps=5"}));
  EXPECT_EQ(first.steps_done, 5);
  const TrainResult second = train(load(rb, {"lr_scheduler.decay_steps=12", "training.steps=12"}));
  ASSERT_EQ(second.losses.size(), 7u);
  for (size_t i = 0; i < 5; ++i) EXPECT_EQ(first.losses[i], straight.losses[i]) << "step " << i + 1;
  for (size_t i = 0; i < 7; ++i)
    EXPECT_EQ(second.losses[i], straight.losses[5 + i]) << "step " << 6 + i << " after resume";
  // Final weights are identical too, and metrics.jsonl has each step once.
  auto ma = load_model(checkpoint_path(a / "run", 12));
  auto mb = load_model(checkpoint_path(b / "run", 12));
  for (int64_t i = 0; i < ma->num_params(); ++i) ASSERT_EQ(ma->params()[i], mb->params()[i]) << i;
  const auto metrics = read_metrics(b / "run/metrics.jsonl");
  ASSERT_EQ(metrics.size(), 12u);
  for (size_t i = 0; i < 12; ++i) EXPECT_EQ(metrics[i]["step"], int(i + 1));
  // keep = 2 (default): only the newest two checkpoints of run a remain.
  EXPECT_EQ(list_checkpoints(a / "run").size(), 2u);
}

// log.tensorboard (default on): the numbers of metrics.jsonl as scalars in
// <run.dir>/tb/, grouped (train/, eval/, exit/<E>/), the console's loss (the
// mean over the log interval) as train/loss beside the step's own
// (train/step_loss = metrics.jsonl's loss), no chart of the counters
// (elapsed time, tokens), the recipe as text; a resumed run adds a file that
// starts a new session at its step (TensorBoard drops the older points from
// there).
TEST(Train, TensorBoardEventsMirrorTheMetrics) {
  TempDir dir;
  const std::string recipe = tiny_recipe(dir);
  train(load(recipe, {"training.steps=6", "lr_scheduler.decay_steps=9"}));
  train(load(recipe, {"training.steps=9", "lr_scheduler.decay_steps=9"}));
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(dir / "run/tb")) files.push_back(e.path().string());
  std::sort(files.begin(), files.end());
  ASSERT_EQ(files.size(), 2u);
  // The second file opens with a session start after the resumed step (6).
  const auto second = tb_reader::records(files[1]);
  ASSERT_GE(second.size(), 2u);
  const auto start = tb_reader::decode(second[1]);
  ASSERT_NE(tb_reader::find(start, 7), nullptr) << "no SessionLog";
  EXPECT_EQ(tb_reader::find(start, 2)->num, 7u);
  // Losses of steps 1-6 in the first file and 7-9 in the second, equal to
  // metrics.jsonl's (as floats).
  const auto metrics = read_metrics(dir / "run/metrics.jsonl");
  ASSERT_EQ(metrics.size(), 9u);
  std::map<int64_t, float> loss;
  for (const std::string& f : files)
    for (const auto& sc : tb_reader::scalars(f))
      if (sc.tag == "train/step_loss") loss[sc.step] = sc.value;
  ASSERT_EQ(loss.size(), 9u);
  for (const auto& m : metrics)
    EXPECT_EQ(loss[m["step"].get<int64_t>()], float(m["loss"].get<double>())) << m.dump();
  bool val = false, lr = false, window = false;
  for (const auto& sc : tb_reader::scalars(files[1])) {
    val |= sc.tag == "eval/val_loss" && sc.step == 9;
    lr |= sc.tag == "train/lr";
    window |= sc.tag == "train/loss";
    EXPECT_NE(sc.tag, "train/elapsed_s");
    EXPECT_NE(sc.tag, "train/tokens");
  }
  EXPECT_TRUE(val && lr && window);
  // With a log interval of 3 the console's loss is the mean of 3 steps.
  TempDir three;
  train(load(tiny_recipe(three), {"training.steps=6", "log.interval=3"}));
  std::map<int64_t, double> mean, step;
  for (const auto& e : fs::directory_iterator(three / "run/tb"))
    for (const auto& sc : tb_reader::scalars(e.path().string())) {
      if (sc.tag == "train/loss") mean[sc.step] = sc.value;
      if (sc.tag == "train/step_loss") step[sc.step] = sc.value;
    }
  ASSERT_EQ(mean.size(), 2u);
  EXPECT_NE(mean[3], step[3]);
  EXPECT_FALSE(read_metrics(three / "run/metrics.jsonl")[0].contains("loss_window"));
  // Off: no tb directory.
  TempDir off;
  train(load(tiny_recipe(off), {"training.steps=2", "log.tensorboard=false"}));
  EXPECT_FALSE(fs::exists(off / "run/tb"));
}

TEST(Train, ContinualPretrainingStartsFromTheCheckpoint) {
  TempDir dir;
  const TrainResult base = train(load(tiny_recipe(dir), {"training.steps=10"}));
  CheckpointInfo info;
  auto trained = load_model(base.last_checkpoint, &info);
  // A second run initialised from the checkpoint, with a new schedule and its own dir.
  const TrainResult cont =
      train(load(tiny_recipe(dir), {"model.init_from=\"" + base.last_checkpoint + "\"",
                                    "run.dir=\"" + (dir / "cont") + "\"", "data.tokenizer=\"\"",
                                    "training.steps=3", "model.hidden_size=999"}));
  // Shape keys are ignored with init_from: the checkpoint decides.
  ASSERT_EQ(cont.losses.size(), 3u);
  EXPECT_LT(cont.losses.front(), base.losses.front() - 0.5) << "did not start from trained weights";
  auto m = load_model(cont.last_checkpoint, &info);
  EXPECT_EQ(info.state["step"], 3);
  EXPECT_EQ(m->config().hidden_size, 32);
}

// Layer Parallelism's recovery fine-tuning: a standard checkpoint under a
// plan with an lp pair, only the pair's layers trainable. The other tensors
// stay bitwise those of the checkpoint; the pair's change; the plan is saved.
TEST(Train, LpRecoveryTrainsOnlyThePair) {
  TempDir dir;
  const TrainResult base =
      train(load(tiny_recipe(dir), {"training.steps=4", "model.num_hidden_layers=4"}));
  const TrainResult rec =
      train(load(tiny_recipe(dir),
                 {"model.init_from=\"" + base.last_checkpoint + "\"",
                  "run.dir=\"" + (dir / "lp") + "\"", "data.tokenizer=\"\"", "training.steps=3",
                  "model.plan=\"standard,lp*2,standard\"", "training.trainable=[\"layers:1-2\"]"}));
  ASSERT_EQ(rec.losses.size(), 3u);
  CheckpointInfo before_info, after_info;
  auto before = load_model(base.last_checkpoint, &before_info);
  auto after = load_model(rec.last_checkpoint, &after_info);
  EXPECT_EQ(after_info.plan.to_string(), "standard,lp*2,standard");
  int changed = 0, kept = 0;
  for (const auto& t : before->layout().tensors()) {
    const int i = int(&t - &before->layout().tensors()[0]);
    const bool same = std::equal(before->param(i), before->param(i) + t.numel, after->param(i));
    const bool pair = t.name.find("layers.1.") != std::string::npos ||
                      t.name.find("layers.2.") != std::string::npos;
    if (pair) {
      changed += !same;
    } else {
      EXPECT_TRUE(same) << t.name << " is frozen but changed";
      kept += same;
    }
  }
  EXPECT_EQ(changed, 2 * 9);  // every tensor of layers 1 and 2 (no biases)
  EXPECT_GT(kept, 0);
}

TEST(Train, SftFromCheckpointMasksPromptsAndLearns) {
  TempDir dir;
  const TrainResult base = train(load(tiny_recipe(dir), {"training.steps=5"}));
  std::string jsonl;
  for (int i = 0; i < 40; ++i)
    jsonl += "{\"prompt\": \"Say the word number " + std::to_string(i % 4) +
             ".\", \"response\": \"" +
             std::string(i % 4 == 0   ? "apple"
                         : i % 4 == 1 ? "river"
                         : i % 4 == 2 ? "stone"
                                      : "cloud") +
             "\"}\n";
  write_file(dir / "sft.jsonl", jsonl);
  const TrainResult sft = train(
      load(tiny_recipe(dir),
           {"model.init_from=\"" + base.last_checkpoint + "\"", "run.dir=\"" + (dir / "sft") + "\"",
            "data.kind=sft", "data.sft_train=\"" + (dir / "sft.jsonl") + "\"",
            "data.sft_val=\"" + (dir / "sft.jsonl") + "\"", "training.steps=40",
            "optimizer.lr=3e-3", "training.seq_len=64"}));
  EXPECT_LT(sft.losses.back(), sft.losses.front() - 2.0) << "SFT loss did not fall";
  EXPECT_GT(sft.last_val_loss, 0);
}

TEST(Train, BadInputGivesOneLineErrors) {
  TempDir dir;
  const std::string recipe = tiny_recipe(dir);
  auto expect_error = [&](const std::vector<std::string>& sets, const std::string& needle) {
    try {
      train(load(recipe, sets));
      ADD_FAILURE() << "expected an error mentioning " << needle;
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(needle), std::string::npos) << msg;
      EXPECT_EQ(msg.find('\n'), std::string::npos) << "multi-line: " << msg;
    }
  };
  expect_error({"data.tokenizer=\"/nonexistent/tok.model\""}, "/nonexistent/tok.model");
  expect_error({"data.dataset=\"" + (dir / "none") + "\"", "data.inputs=[]"}, "meta.json");
  expect_error({"training.seq_len=128"}, "training.seq_len");
  expect_error({"model.init_from=\"/nonexistent.h5\""}, "/nonexistent.h5");
  expect_error({"lr_scheduler.kind=\"exponential\""}, "exponential");
  expect_error({"training.micro_batch_size=0"}, "training.micro_batch_size");
  expect_error({"training.freeze=[\"model.layers.7.*\"]"}, "model.layers.7.*");
  expect_error({"data.kind=\"rl\""}, "data.kind");
  // Data prepared with one tokenizer cannot train with another.
  train(load(recipe, {"training.steps=1"}));
  expect_error({"data.tokenizer=\"" + source("data/tokenizers/austen-4k.model") + "\"",
                "run.dir=\"" + (dir / "other") + "\""},
               "tokenizer");
}

TEST(Generate, GreedyIsDeterministicAndStopsAtEos) {
  LlamaConfig c;
  c.vocab_size = 30;
  c.hidden_size = 16;
  c.intermediate_size = 32;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 2;
  c.max_position_embeddings = 12;
  c.initializer_range = 0.5;
  c.finalize();
  Model<float> m(c, ops::make_backend<float>());
  m.init_weights(4);
  GenerateOptions g;
  g.max_new_tokens = 20;  // more than the 12-position window allows
  const auto a = generate_simple(m, {1, 5, 7}, g), b = generate_simple(m, {1, 5, 7}, g);
  EXPECT_EQ(a, b);
  // Stops when the window is full, as the cached path does: 12 - 3 + 1 tokens
  // (the last one needs no further position).
  ASSERT_EQ(a.size(), 10u);
  // Greedy = argmax of the logits of the full sequence at each step.
  std::vector<float> logits(4 * 30);
  std::vector<int32_t> seq = {1, 5, 7, a[0]};
  m.forward_logits(seq.data(), 1, 4, logits.data());
  EXPECT_EQ(a[1],
            int32_t(std::max_element(logits.begin() + 90, logits.end()) - (logits.begin() + 90)));
  g.eos_id = a[2];
  const auto stopped = generate_simple(m, {1, 5, 7}, g);
  EXPECT_EQ(stopped.size(), size_t(std::find(a.begin(), a.end(), a[2]) - a.begin() + 1));
}

}  // namespace
}  // namespace strata
