#include "train/plan_recovery.h"

#include <sys/stat.h>

#include <algorithm>

#include "core/file.h"
#include "core/text.h"

namespace strata {

namespace {

bool retrained(LayerKind k) { return kind_info(k).cost.recovery == KindCost::Recovery::FineTune; }
bool distilled(LayerKind k) { return kind_info(k).cost.recovery == KindCost::Recovery::Distill; }

// A TOML basic string.
std::string quoted(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

// A shell word in single quotes.
std::string sh(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

std::string spd_recipe(const RecoveryInputs& in, const std::vector<int>& blocks) {
  std::vector<std::string> names;
  for (int b : blocks) names.push_back(quoted(std::to_string(b)));
  return cat(
      "# Written by strata plan search: the SPD blocks of plan\n#   ", in.plan.to_string(),
      "\n# by SPD's Algorithm 1 on them alone: block-to-block distillation of every block\n"
      "# that moves perplexity at all (tau1 = 0), with head grouping where a block alone\n"
      "# moves it by more than 1% (tau2 = 0.01; the paper's thresholds are for 7B-70B models).\n"
      "#   strata spd ",
      in.dir, "/spd.toml\n\n[spd]\ncheckpoint = ", quoted(in.checkpoint), "\ndegree = ", in.tp,
      "\nblocks = [", join(names, ", "), "]\ntau1 = 0.0\ntau2 = 0.01\n",
      "out_dir = ", quoted(in.dir + "/spd"), "\n\n[calibration]\ntext = ", quoted(in.calibration),
      "\nsamples = 128\nseq_len = ", std::min(256, in.context),
      "\n\n[report]\ntext = ", quoted(in.calibration), "\nablation = false\n");
}

std::string train_recipe(const RecoveryInputs& in, const std::string& init) {
  std::vector<std::string> layers;
  for (const std::string& t : recovery_trainable(in.plan)) layers.push_back(quoted(t));
  return cat(
      "# Written by strata plan search: the ladder layers and Layer-Parallel pairs of "
      "plan\n#   ",
      in.plan.to_string(), "\n# retrained alone (everything else frozen) under the plan, from ",
      init, ".\n#   strata train ", in.dir, "/train.toml\nbase = ", quoted(in.base_recipe),
      "\n\n[run]\nname = \"plan-recover\"\ndir = ", quoted(in.dir + "/train"),
      "\n\n[model]\ninit_from = ", quoted(init), "\nplan = ", quoted(in.plan.to_string()),
      "\n\n[training]\nsteps = ", in.steps, "\ntrainable = [", join(layers, ", "),
      "]\n\n[optimizer]\nlr = ", in.lr,
      "\n\n[lr_scheduler]\nwarmup_steps = ", std::max(1, in.steps / 20), "\nmin_lr = ", in.lr,
      "\n\n[eval]\ninterval = ", std::max(1, in.steps / 4), "\n\n[checkpoint]\ninterval = 0\n");
}

}  // namespace

std::vector<std::string> recovery_trainable(const LayerPlan& plan) {
  std::vector<std::string> out;
  const int L = plan.num_layers();
  for (int l = 0; l < L;) {
    if (!retrained(plan.kinds[size_t(l)])) {
      ++l;
      continue;
    }
    int e = l;
    while (e < L && retrained(plan.kinds[size_t(e)])) ++e;
    out.push_back(cat("layers:", l, "-", e - 1));
    l = e;
  }
  return out;
}

RecoveryFiles write_recovery(const RecoveryInputs& in) {
  RecoveryFiles f;
  std::vector<int> blocks;
  for (int l = 0; l < in.plan.num_layers(); ++l)
    if (distilled(in.plan.kinds[size_t(l)])) blocks.push_back(l);
  f.spd = !blocks.empty();
  f.train = !recovery_trainable(in.plan).empty();
  const std::string plan = in.plan.to_string();
  const std::string spd_out = in.dir + "/spd/spd.h5";
  const std::string final_ckpt =
      f.train ? cat(in.dir, "/train/checkpoints/step_", strprintf("%08d", in.steps), ".h5")
      : f.spd ? spd_out
              : in.checkpoint;
  std::string script = cat(
      "#!/usr/bin/env bash\n# Written by strata plan search: retrains what plan\n#   ", plan,
      "\n# changed (", f.spd ? "SPD blocks by B2B distillation and head grouping" : "",
      f.spd && f.train ? "; " : "", f.train ? "ladder layers and LP pairs by fine-tuning" : "",
      f.spd || f.train ? "" : "nothing: skipped layers have no weights to retrain",
      ") and scores the calibration text before and after.\nset -euo pipefail\nstrata=${STRATA:-",
      sh(in.strata), "}\n\"$strata\" eval --checkpoint ", sh(in.checkpoint), " --plan ", sh(plan),
      " --perplexity ", sh(in.calibration), " --quiet --out ", sh(in.dir + "/before.json"),
      " >/dev/null\n");
  if (f.spd) {
    write_file_atomic(in.dir + "/spd.toml", spd_recipe(in, blocks));
    f.written.push_back(in.dir + "/spd.toml");
    script += cat("\"$strata\" spd ", sh(in.dir + "/spd.toml"), "\n");
  }
  if (f.train) {
    write_file_atomic(in.dir + "/train.toml", train_recipe(in, f.spd ? spd_out : in.checkpoint));
    f.written.push_back(in.dir + "/train.toml");
    script += cat("\"$strata\" train ", sh(in.dir + "/train.toml"), "\n");
  }
  script +=
      cat("\"$strata\" eval --checkpoint ", sh(final_ckpt), " --plan ", sh(plan), " --perplexity ",
          sh(in.calibration), " --quiet --out ", sh(in.dir + "/after.json"), " >/dev/null\n",
          "ppl() { grep -o '\"ppl\": *[0-9.e+-]*' \"$1\" | head -1 | sed 's/.*: *//'; }\n",
          "echo \"plan ", plan, ": calibration ppl before $(ppl ", sh(in.dir + "/before.json"),
          "), after $(ppl ", sh(in.dir + "/after.json"), ")\"\n");
  f.script = in.dir + "/recover.sh";
  write_file_atomic(f.script, script);
  ::chmod(f.script.c_str(), 0755);
  f.written.push_back(f.script);
  return f;
}

}  // namespace strata
