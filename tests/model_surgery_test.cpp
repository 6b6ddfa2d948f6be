// Model surgery (io/model_surgery.h) called directly: the weights under
// another plan, the weights alone in f32 or bf16, and Layer Parallelism's
// merge of layers [s, e), in memory and from checkpoint to checkpoint.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "io/checkpoint.h"
#include "io/model_io.h"
#include "io/model_surgery.h"
#include "model/model.h"
#include "ops/backend.h"
#include "plan_reference.h"
#include "testing.h"

namespace strata {
namespace {

namespace fs = std::filesystem;

class ModelSurgery : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("strata_model_surgery_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    in_ = path("in.h5");
    model_ = std::make_unique<Model<float>>(testing::plan_test_config(4, false, true),
                                            ops::make_backend<float>());
    model_->init_weights(5);
    for (int64_t i = 0; i < model_->num_params(); ++i) model_->params()[i] += 0.001f * float(i % 7);
    save_model(in_, *model_, "tokenizer bytes", {{"step", 7}}, false, "[training]\nsteps = 7\n");
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  const float* param(Model<float>& m, const std::string& name) {
    return m.param(m.layout().find(name));
  }

  fs::path dir_;
  std::string in_;
  std::unique_ptr<Model<float>> model_;
};

// Every tensor of layers [1, 3) is the mean of theirs; the others keep their
// own, those above the range one layer lower.
void expect_merged(Model<float>& merged, Model<float>& src) {
  ASSERT_EQ(merged.config().num_hidden_layers, 3);
  EXPECT_TRUE(merged.plan().plain());
  for (const ParamInfo& t : merged.layout().tensors()) {
    const float* got = merged.param(merged.layout().find(t.name));
    auto from = [&](const std::string& name) { return src.param(src.layout().find(name)); };
    for (int64_t i = 0; i < t.numel; ++i) {
      float want = 0;
      if (t.name.rfind("model.layers.1.", 0) == 0) {
        const std::string rest = t.name.substr(15);
        want = (from("model.layers.1." + rest)[i] + from("model.layers.2." + rest)[i]) / 2;
      } else if (t.name.rfind("model.layers.2.", 0) == 0) {
        want = from("model.layers.3." + t.name.substr(15))[i];
      } else {
        want = from(t.name)[i];
      }
      ASSERT_EQ(got[i], want) << t.name << "[" << i << "]";
    }
  }
}

TEST_F(ModelSurgery, MergeLayersInMemory) {
  auto merged = merge_layers(*model_, 1, 3);
  expect_merged(*merged, *model_);
  EXPECT_ERROR(merge_layers(*model_, 2, 3), "must hold at least 2 of the model's layers 0..3");
  EXPECT_ERROR(merge_layers(*model_, 3, 5), "must hold at least 2");
  model_->set_plan(LayerPlan::parse("standard,skip,standard*2", 4));
  EXPECT_ERROR(merge_layers(*model_, 1, 3), "merging needs a standard model");
}

TEST_F(ModelSurgery, MergeLayersFromCheckpoint) {
  const std::string out = path("merged.h5");
  EXPECT_EQ(merge_layers(in_, out, 1, 3, "strata test"), 4);
  CheckpointInfo info;
  auto merged = load_model(out, &info);
  expect_merged(*merged, *model_);
  EXPECT_EQ(info.tokenizer, "tokenizer bytes");
  EXPECT_EQ(info.state.value("step", 0), 7);
  EXPECT_EQ(info.state.value("converted_from", ""), in_ + " (layers 1..2 merged)");
  EXPECT_ERROR(merge_layers(in_, in_, 1, 3, "strata test"),
               "strata test: the output " + in_ + " is the input " + in_ +
                   "; write it to another path");
  EXPECT_ERROR(merge_layers(in_, out, 0, 1, "strata test", "--range 0:1"),
               "strata test: --range 0:1 must hold at least 2 of the model's layers 0..3");
  EXPECT_ERROR(merge_layers(in_, out, 0, 9, "strata test"), "strata test: layers 0:9 must hold");
  const std::string skip = path("skip.h5");
  convert_plan(in_, skip, "standard,skip,standard*2", "strata test");
  EXPECT_ERROR(merge_layers(skip, out, 1, 3, "strata test"),
               "runs plan 'standard,skip,standard*2'; merging needs a standard model");
}

TEST_F(ModelSurgery, ConvertPlanKeepsTheWeights) {
  const std::string out = path("ladder.h5");
  const PlanConversion c = convert_plan(in_, out, "standard*2,ladder*2", "strata test");
  EXPECT_EQ(c.plan, "standard*2,ladder*2");
  EXPECT_EQ(c.saved_plan, "standard*4");
  CheckpointInfo info;
  auto converted = load_model(out, &info);
  EXPECT_EQ(info.saved_plan, "standard*2,ladder*2");
  EXPECT_EQ(info.tokenizer, "tokenizer bytes");
  EXPECT_EQ(info.state.value("step", 0), 7);
  EXPECT_EQ(info.state.value("converted_from", ""), in_ + " (plan standard*4)");
  EXPECT_EQ(info.recipe, "");  // a new plan: the recipe no longer describes the model
  ASSERT_EQ(converted->num_params(), model_->num_params());
  EXPECT_EQ(std::memcmp(converted->params(), model_->params(),
                        size_t(model_->num_params()) * sizeof(float)),
            0);
  EXPECT_ERROR(convert_plan(in_, in_, "standard*4", "strata test"), "is the input");
  EXPECT_ERROR(
      convert_plan(in_, out, "nocomm*4", "strata test"),
      "strata test: layer 0 of plan 'nocomm*4' is 'nocomm', which only benchmarks may run");
}

TEST_F(ModelSurgery, WriteWeightsInF32AndBf16) {
  const std::string f32 = path("f32.h5"), bf16 = path("bf16.h5");
  const uint64_t f32_bytes = write_weights(in_, f32, false, "strata test");
  const uint64_t bf16_bytes = write_weights(in_, bf16, true, "strata test");
  EXPECT_EQ(f32_bytes, uint64_t(fs::file_size(f32)));
  EXPECT_EQ(bf16_bytes, uint64_t(fs::file_size(bf16)));
  EXPECT_LT(bf16_bytes, f32_bytes);
  EXPECT_EQ(CheckpointReader(f32).params_dtype(), "float32");
  EXPECT_EQ(CheckpointReader(bf16).params_dtype(), "bfloat16");
  for (const auto& [file, dtype] : {std::pair{f32, "f32"}, std::pair{bf16, "bf16"}}) {
    CheckpointInfo info;
    auto m = load_model(file, &info);
    EXPECT_EQ(info.recipe, "[training]\nsteps = 7\n");
    EXPECT_EQ(info.tokenizer, "tokenizer bytes");
    EXPECT_EQ(info.state.value("converted_from", ""), in_ + " (weights only, " + dtype + ")");
    const float* got = m->params();
    for (int64_t i = 0; i < m->num_params(); ++i) {
      float want = model_->params()[i];
      if (file == bf16) {  // rounded to the nearest bfloat16, ties to even
        uint32_t u;
        std::memcpy(&u, &want, 4);
        u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
        std::memcpy(&want, &u, 4);
      }
      ASSERT_EQ(got[i], want) << file << " [" << i << "]";
    }
  }
  EXPECT_ERROR(write_weights(in_, in_, true, "strata test"), "strata test: ", "is the input");
}

}  // namespace
}  // namespace strata
