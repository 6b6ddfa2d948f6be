// The run report (`strata report`): one self-contained HTML page comparing
// training runs (loss, validation, learning rate, throughput, gradient norm,
// LayerSkip's per-exit losses, task metrics logged in training), evaluation
// results written by `strata eval --out`, and the runs' recipes side by side.
// Charts are inline SVG drawn by core/svg_plot (the same code as the LP and
// SPD scan plots); there is no script and nothing is fetched.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/svg_plot.h"

namespace strata {

// A run directory's metrics.jsonl (and recipe.toml when present).
struct RunLog {
  std::string dir, name;  // name: the directory's last component
  std::string recipe;     // recipe.toml text ("" when absent)
  // step -> key -> value; nested objects flattened as "exit_loss/3".
  std::map<int64_t, std::map<std::string, double>> rows;
  std::vector<std::string> warnings;  // e.g. a torn last line of a live run
};

// Throws strata::Error (one line naming the file and line) when the directory
// or its metrics.jsonl is missing or a line is not a JSON object with a step.
// A last line without its newline (a run still writing) is skipped with a
// warning.
RunLog load_run_log(const std::string& dir);

// One metric of an evaluation: value and standard error (negative: none).
struct EvalValue {
  double value = 0, stderr_ = -1;
};

// A `strata eval --out` file (strata or lm-eval layout; tasks or perplexity).
struct EvalLog {
  std::string path, label;                 // label: LABEL= prefix of the spec, or the file's stem
  std::string checkpoint;                  // as recorded in the file ("" when absent)
  std::map<std::string, EvalValue> final;  // "task/metric" at the full model (or last exit)
  std::map<int, std::map<std::string, EvalValue>> per_exit;  // exit layer -> "task/metric"
};

// `spec` is FILE or LABEL=FILE. Throws strata::Error naming the file when it
// is missing, not JSON, or has no results strata recognises.
EvalLog load_eval_log(const std::string& spec);

struct ReportChart {
  std::string id;  // file-name friendly: "loss", "exit_loss_layerskip-pretrain", ...
  SvgChart chart;
};

struct Report {
  std::string html;
  std::vector<ReportChart> charts;
};

// `command` is shown in the page's header (how it was made).
Report build_report(const std::vector<RunLog>& runs, const std::vector<EvalLog>& evals,
                    const std::string& command);

}  // namespace strata
