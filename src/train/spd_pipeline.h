// `strata spd <recipe.toml>`: the SPD paper's Algorithm 1 on a standard
// checkpoint, one function per stage over the recipe's SpdConfig:
//   1. sensitivity   S_k of every block at the degree on calibration windows
//   2. classify      the budget's least sensitive blocks as ISB / SB / ESB
//   3. distill       zero-shot for ISBs, block-to-block distillation for SBs,
//                    head grouping then distillation for ESBs (each block alone
//                    on the original model's block inputs; spread over the
//                    processes under mpirun)
//   4. evaluate      perplexity and tasks against the budget for zero-shot,
//                    +B2B and +HG
//   5. checkpoint    the SPD model at the budget (the full algorithm)
//   6. report        report.json, report.md, sensitivity.svg, budget.svg
// Every result lands in the output directory as it is made, so a rerun
// resumes where the last one stopped (per block for the distillations).
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "train/spd_config.h"

namespace strata {

struct SpdRunOptions {
  std::string recipe;        // the recipe's path, as named (the report cites it)
  bool quiet = false;        // no progress lines
  bool dry_run = false;      // check the recipe and the checkpoint's shape, print the memory plan
  int64_t device_bytes = 0;  // with dry_run: plan for devices of this size, not this machine
};

// Runs the pipeline (or, with dry_run, prints the resolved recipe and the
// memory each stage needs, running nothing and writing nothing). Throws
// strata::Error with one line on bad input, before the work starts.
void run_spd_pipeline(const SpdConfig& config, const SpdRunOptions& options);

// The pipeline's report.json as Markdown tables (report.md, stdout).
std::string spd_report_markdown(const nlohmann::json& report);

}  // namespace strata
