// The model that eval, generate and bench generate run: a checkpoint,
// optionally under another layer plan (--plan), alone or over a
// tensor-parallel group of processes started by mpirun (--tp N, with N
// processes). Every rank of the group computes the same results; rank 0
// prints them (the others' stdout goes nowhere and they log only errors).
#pragma once

#include <memory>
#include <string>

#include "cli/args.h"
#include "data/tokenizer.h"
#include "io/model_io.h"
#include "parallel/grid.h"

namespace strata::cli {

// --checkpoint FILE, --plan TEXT, --tp N.
void add_model_options(Args& args);

struct LoadedModel {
  ProcessGrid grid;
  CheckpointInfo info;                 // info.plan: the plan the model runs
  std::unique_ptr<Communicator> link;  // the tp group seen through a modelled link (benchmarks)
  std::unique_ptr<Model<float>> model;
  bool root() const { return grid.is_root(); }
};

// Loads the model the options name; `command` prefixes errors ("strata eval").
// Plans with benchmark-only kinds (nocomm) are refused unless `benchmark`;
// `link_delay_us` > 0 (benchmarks) delays every tp collective's completion by
// that much (parallel/delayed_comm.h).
LoadedModel load_model_from_args(const Args& args, const std::string& command,
                                 bool benchmark = false, int link_delay_us = 0);

// What the plan scans (lp scan, spd scan) start from: the standard model the
// options name, its tokenizer, and the text sample (--text, --limit-bytes);
// --threads applied. One-line errors name `command` and what is missing.
struct ScanInput {
  LoadedModel lm;
  std::unique_ptr<Tokenizer> tok;
  std::string text;
  int layers = 0;
};
ScanInput load_scan_input(const Args& args, const std::string& command);

}  // namespace strata::cli
