// The SPD recipe's keys and their reading (spd_config.h).
#include "train/spd_config.h"

#include <algorithm>

#include <filesystem>

#include "core/error.h"
#include "core/memory_info.h"
#include "core/text.h"

namespace strata {

const std::vector<KeySpec>& spd_recipe_schema() {
  using K = KeyType;
  static const std::vector<KeySpec> schema = {
      {"spd.checkpoint", K::String, "", "standard checkpoint to convert", true},
      {"spd.config", K::String, "",
       "Hugging Face config.json of the checkpoint's model, for --dry-run --plan-memory where "
       "the checkpoint is not on this machine"},
      {"spd.degree", K::Int, "2", "tensor-parallel degree g whose attention sync is dropped"},
      {"spd.budget", K::Int, "-1", "N_spd: blocks in SPD (-1: spd.budget_percent of the layers)"},
      {"spd.budget_percent", K::Float, "100", "the budget as a share of the layers"},
      {"spd.blocks", K::StringList, "[]",
       "the blocks to put in SPD, by layer number (e.g. [\"3\", \"5\"]: strata plan search's "
       "choice) instead of the budget's least sensitive ones; the budget is their count"},
      {"spd.tau1", K::Float, "0.05", "ISB threshold: S <= tau1 runs zero-shot"},
      {"spd.tau2", K::Float, "10", "ESB threshold: S > tau2 gets head grouping"},
      {"spd.out_dir", K::String, "", "where the checkpoint, report and partial results go", true},
      {"spd.seed", K::Int, "1", "seed of the calibration draw, shuffles and grouping starts"},
      {"calibration.text", K::String, "", "calibration text file (the training corpus)", true},
      {"calibration.limit_bytes", K::Int, "0", "read at most this much of it (0: all)"},
      {"calibration.samples", K::Int, "128", "windows drawn at random offsets"},
      {"calibration.seq_len", K::Int, "256", "tokens per window"},
      {"calibration.batch_size", K::Int, "8", "windows per forward pass (scan, capture)"},
      {"calibration.capture_memory", K::String, "\"8GB\"",
       "host memory for the captured block inputs and outputs the distillations train on: "
       "blocks are captured as many at a time as fit (at least one)"},
      {"b2b.lr", K::Float, "5e-5", "AdamW learning rate (constant; no weight decay)"},
      {"b2b.epochs", K::Int, "10", "passes over the calibration windows"},
      {"b2b.batch_size", K::Int, "1", "windows per optimizer step"},
      {"hg.restarts", K::Int, "16", "random starts of the anticlustering"},
      {"report.text", K::String, "", "held-out text for perplexity (\"\": none)"},
      {"report.limit_bytes", K::Int, "20000", "read at most this much of it (0: all)"},
      {"report.tasks", K::StringList, "[]", "eval tasks (eval/<name>.toml) scored per stage"},
      {"report.task_limit", K::Int, "0", "examples per task (0: all)"},
      {"report.task_budgets", K::StringList, "[]",
       "budgets (block counts) whose tasks are scored as well ([]: 0 and N_spd)"},
      {"report.ablation", K::Bool, "true",
       "also distil ESBs without head grouping and sweep every budget for zero-shot, +B2B, +HG"},
  };
  return schema;
}

SpdConfig read_spd_config(const Recipe& r) {
  SpdConfig c;
  c.recipe = &r;
  c.checkpoint = r.get_string("spd.checkpoint");
  c.config_file = r.has("spd.config") ? r.get_string("spd.config") : "";
  c.degree = int(r.get_int("spd.degree"));
  if (c.degree < 2) r.fail("spd.degree", cat("must be at least 2, got ", c.degree));
  c.tau1 = r.get_float("spd.tau1");
  c.tau2 = r.get_float("spd.tau2");
  if (!(c.tau1 < c.tau2))
    r.fail("spd.tau2", cat("must exceed spd.tau1 (", c.tau1, "), got ", c.tau2));
  c.seed = uint64_t(r.get_int("spd.seed"));
  c.samples = int(r.get_int("calibration.samples"));
  c.seq_len = int(r.get_int("calibration.seq_len"));
  c.calibration_batch = int(r.get_int("calibration.batch_size"));
  if (c.samples < 1) r.fail("calibration.samples", "must be at least 1");
  if (c.calibration_batch < 1) r.fail("calibration.batch_size", "must be at least 1");
  c.distill.lr = r.get_float("b2b.lr");
  c.distill.epochs = int(r.get_int("b2b.epochs"));
  c.distill.batch = int(r.get_int("b2b.batch_size"));
  if (!(c.distill.lr > 0)) r.fail("b2b.lr", "must be positive");
  if (c.distill.epochs < 0) r.fail("b2b.epochs", "must be at least 0");
  if (c.distill.batch < 1) r.fail("b2b.batch_size", "must be at least 1");
  c.restarts = int(r.get_int("hg.restarts"));
  if (c.restarts < 1) r.fail("hg.restarts", "must be at least 1");
  c.ablation = r.get_bool("report.ablation");
  c.out_dir = r.get_string("spd.out_dir");
  c.tasks = r.get_strings("report.tasks");
  for (const std::string& t : c.tasks)
    if (t != "all" && !std::filesystem::exists("eval/" + t + ".toml"))
      r.fail("report.tasks", cat("no task '", t, "' (eval/", t, ".toml; run from the repository)"));
  try {
    c.capture_bytes =
        parse_bytes(r.get_string("calibration.capture_memory"), "calibration.capture_memory");
  } catch (const Error& e) {
    r.fail("calibration.capture_memory", e.what());
  }
  c.budget = int(r.get_int("spd.budget"));
  c.budget_percent = r.get_float("spd.budget_percent");
  if (c.budget < 0 && (c.budget_percent < 0 || c.budget_percent > 100))
    r.fail("spd.budget_percent", cat("must be 0..100, got ", c.budget_percent));
  for (const std::string& s : r.get_strings("spd.blocks")) {
    int b = 0;
    if (!parse_int(s, &b) || b < 0 ||
        std::find(c.blocks.begin(), c.blocks.end(), b) != c.blocks.end())
      r.fail("spd.blocks", cat("expected distinct layer numbers, got '", s, "'"));
    c.blocks.push_back(b);
  }
  if (!c.blocks.empty() && c.budget >= 0)
    r.fail("spd.budget", "give spd.blocks or spd.budget, not both");
  for (const std::string& s : r.get_strings("report.task_budgets")) {
    int b = 0;
    if (!parse_int(s, &b))
      r.fail("report.task_budgets", cat("expected block counts, got '", s, "'"));
    c.task_budgets.push_back(b);
  }
  c.calibration_text = r.get_string("calibration.text");
  c.calibration_limit_bytes = r.get_int("calibration.limit_bytes");
  c.report_text = r.get_string("report.text");
  c.report_limit_bytes = r.get_int("report.limit_bytes");
  c.task_limit = r.get_int("report.task_limit");
  return c;
}

}  // namespace strata
