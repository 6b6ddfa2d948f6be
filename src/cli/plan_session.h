// What `strata plan search` measures on this machine (cli/plan_cmd.cpp): the
// calibration text's NLL under a plan, cached in the output directory; the
// compute of a workload's phases per layer module; the tp group's link; and
// the workload's time under a plan. Alone (one process) the model runs whole
// and the deployment's tp degree is predicted; under mpirun with --tp
// processes it runs split over them, as deployed, and the front is measured.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/args.h"
#include "cli/model_args.h"
#include "data/tokenizer.h"
#include "infer/generate.h"
#include "infer/plan_cost.h"

namespace strata::cli {

// --workload PROMPT,GENERATE,BATCH: prompts of PROMPT tokens, GENERATE new
// tokens each, BATCH prompts decoded together.
struct Workload {
  int prompt = 128, generate = 128, batch = 1;
  std::string to_string() const;
};
Workload parse_workload(const std::string& text, int context, const std::string& what);

class PlanSession {
 public:
  // Loads the checkpoint (over the job's processes: one, or --tp), the
  // tokenizer and the calibration text; opens or creates the cache in
  // --out. `link_delay_us` models a link latency under mpirun.
  PlanSession(const Args& args, const std::string& command, int tp, const Workload& workload);

  bool root() const { return lm_.root(); }
  bool distributed() const { return lm_.grid.world_size > 1; }
  int layers() const { return layers_; }
  // The model's configuration (a copy: the model is loaded again for plans
  // that place its weights otherwise).
  const LlamaConfig& config() const { return config_; }
  int tp() const { return tp_; }
  const std::string& fingerprint() const { return fingerprint_; }
  int cached_plans() const { return cached_; }
  int scored_plans() const { return scored_; }

  // The calibration text's mean token NLL under `plan`, as `strata eval
  // --perplexity` scores it with its defaults (read from the cache when
  // there; written to it when not).
  double quality(const std::string& plan);
  // The compute of the workload's phases per layer module, from the times of
  // every layer without sums (nocomm) and of no layer (skip); alone, a tp
  // degree's share is 1/tp of the layers (ideal split). Cached.
  std::vector<PhaseCompute> profile(int repeat, const LinkModel& link);
  // Blocking all-reduces of the decode and prefill sizes on the tp group,
  // latency and bandwidth fitted (under mpirun only).
  LinkModel measure_link();
  // `acc` on eval/<task>.toml under `plan` (its first --task-limit examples),
  // as `strata eval --tasks TASK` scores it (cached).
  double task_accuracy(const std::string& plan, const std::string& task);
  // Seconds the workload takes under `plan` (the fastest of `repeat` runs),
  // self-speculative from `exit` with `drafts` where exit > 0.
  double workload_seconds(const std::string& plan, int repeat, int exit = 0, int drafts = 0);
  // The share of one-token drafts from layers [0, exit) that the full model
  // accepts when the workload's prompts are decoded greedily (cached).
  double draft_acceptance(const std::string& plan, int exit);

 private:
  void use_plan(const std::string& plan);
  void save_cache();

  const Args& args_;
  std::string command_, out_, calibration_, fingerprint_;
  int tp_ = 1, layers_ = 0, cached_ = 0, scored_ = 0;
  Workload work_;
  LoadedModel lm_;
  LlamaConfig config_;
  std::unique_ptr<Tokenizer> tok_;
  std::vector<std::vector<int32_t>> prompts_;
  nlohmann::json cache_;
};

}  // namespace strata::cli
