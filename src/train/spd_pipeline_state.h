// What the stages of `strata spd` (spd_pipeline.h) pass on to each other.
// Internal to src/train/: spd_pipeline.cpp (plan, load, sensitivity,
// classify, distill), spd_assemble.cpp (evaluate, checkpoint, the driver)
// and spd_report.cpp (report).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/tokenizer.h"
#include "io/model_io.h"
#include "parallel/comm.h"
#include "train/spd.h"
#include "train/spd_config.h"
#include "train/spd_pipeline.h"

namespace strata::spd_pipeline {

// The classes of Algorithm 1: insensitive (zero-shot), sensitive
// (block-to-block distillation), extremely sensitive (head grouping first).
enum class Cls { Isb, Sb, Esb };
inline const char* cls_name(Cls c) { return c == Cls::Isb ? "ISB" : c == Cls::Sb ? "SB" : "ESB"; }

// A distillation job: block `layer`, with head grouping first or not. Its
// tensors after distillation stay in <out_dir>/blocks/<name>.f32 (read back
// when a variant is assembled), not in memory; <name>.json holds its info.
struct Job {
  int layer;
  bool hg;
  std::string name() const { return "block_" + std::to_string(layer) + (hg ? "_hg" : "_b2b"); }
};

struct State {
  explicit State(const SpdConfig& config) : c(config) {}
  const SpdConfig& c;
  Communicator* world = nullptr;
  bool root = true, progress = true;
  void say(const std::string& line) const;  // a progress line on stderr

  // plan
  int L = 0, budget = 0;
  std::vector<int> task_budgets;
  spd::PipelineMemory memory;
  // load
  int64_t runtime_rss = 0;  // before the model
  std::unique_ptr<Model<float>> model;
  CheckpointInfo info;
  std::unique_ptr<Tokenizer> tok;
  std::vector<int32_t> windows;
  std::string eval_text;
  nlohmann::json report, stages = nlohmann::json::object();
  // sensitivity, classify
  std::vector<double> ppl_from, sens;
  std::vector<int> ranking;
  std::vector<Cls> cls;
  nlohmann::json blocks;
  std::vector<Job> jobs;
  // distill: per job, mse before/after, steps, seconds, head order
  std::vector<nlohmann::json> results;
  // evaluate
  std::vector<int> variants;
  nlohmann::json sweep = nlohmann::json::array();

  std::string weights_path(size_t job) const;
  int64_t layer_bytes(int layer);
};

// The variants: 0 zero-shot, 1 + B2B (SBs and ESBs), 2 + HG (ESBs grouped first).
extern const char* const kVariantNames[3];

// The stages, in order. plan() returns false for a dry run (done).
bool plan(State& s, const SpdRunOptions& o);
void load(State& s, const SpdRunOptions& o);
void sensitivity(State& s);
void classify(State& s);
void distill(State& s);
void evaluate(State& s);
void write_checkpoint(State& s);
void write_report(State& s);

}  // namespace strata::spd_pipeline
