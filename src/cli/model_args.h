// The model that eval, generate and bench generate run: a checkpoint,
// optionally under another layer plan (--plan), alone or over a
// tensor-parallel group of processes started by mpirun (--tp N, with N
// processes). Every rank of the group computes the same results; rank 0
// prints them (the others' stdout goes nowhere and they log only errors).
#pragma once

#include <functional>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>
#include "cli/args.h"

#include "core/svg_plot.h"
#include "data/tokenizer.h"
#include "eval/evaluate.h"
#include "io/model_io.h"
#include "model/memory.h"
#include "parallel/grid.h"

namespace strata::cli {

// --checkpoint FILE, --plan TEXT, --tp N.
void add_model_options(Args& args);
// --kv-cache: fp32 (f32, float32) or bf16 (bfloat16); anything else is a
// usage error naming the command.
ops::Dtype kv_cache_option(const Args& args, const std::string& command);

struct LoadedModel {
  ProcessGrid grid;
  CheckpointInfo info;                 // info.plan: the plan the model runs
  std::unique_ptr<Communicator> link;  // the tp group seen through a modelled link (benchmarks)
  std::unique_ptr<Model<float>> model;
  bool root() const { return grid.is_root(); }
};

// What a command will hold besides the weights, from the checkpoint's
// configuration (model/memory.h), and the setting to lower when it does not fit.
struct MemoryPlan {
  std::function<MemoryUse(const CheckpointInfo&)> use;
  std::string hint;
};

// Loads the model the options name; `command` prefixes errors ("strata eval").
// Before allocating, prints the memory estimate (weights, plus `memory`'s
// buffers) and refuses in one line when it does not fit (check_memory).
// Plans with benchmark-only kinds (nocomm) are refused unless `benchmark`;
// `link_delay_us` > 0 (benchmarks) delays every tp collective's completion by
// that much (parallel/delayed_comm.h). `tp` > 0 replaces --tp (a command
// whose --tp names a deployment rather than this job's processes).
LoadedModel load_model_from_args(const Args& args, const std::string& command,
                                 bool benchmark = false, int link_delay_us = 0,
                                 const MemoryPlan& memory = {}, int tp = 0);

// The tokenizer stored in the checkpoint the model came from (`checkpoint`
// names it in errors); one line when there is none.
Tokenizer checkpoint_tokenizer(const LoadedModel& lm, const std::string& checkpoint);

// The plan scans (lp scan, spd scan). Their options besides the model's and
// their own: --text, --limit-bytes, --window, --batch-size, --out, --svg
// (what the SVG shows: `svg_help`), --threads, --quiet.
void add_scan_options(Args& args, const std::string& svg_help);

// What a scan starts from: the standard model the options name, its
// tokenizer and the text sample; --threads applied. One-line errors name
// `command` and what is missing.
struct ScanInput {
  LoadedModel lm;
  std::unique_ptr<Tokenizer> tok;
  std::string text, text_name;
  int layers = 0, window = 0, batch = 0;
  // Perplexity of the text with the model run under `plan`.
  PerplexityResult perplexity(const std::string& plan);
  // Back to the checkpoint's own plan.
  void restore() { lm.model->set_plan(lm.info.plan); }
};
ScanInput load_scan_input(const Args& args, const std::string& command);

// On the root rank: `out` (with the checkpoint and the text added) to --out
// and `chart` (perplexity on a log axis, the standard model's as a line) to
// --svg, where given.
void write_scan_outputs(const Args& args, nlohmann::json out, SvgChart chart, double standard_ppl,
                        const ScanInput& in);

}  // namespace strata::cli
