// `strata train --dry-run` (trainer.h): the set-up a run would do, up to its
// memory check, and with --plan-memory the layouts of the job on other devices.
#include <algorithm>
#include <cstdio>

#include "core/error.h"
#include "core/memory_info.h"
#include "core/text.h"
#include "model/layouts.h"
#include "model/memory.h"
#include "train/run.h"
#include "train/trainer.h"

namespace strata {
using namespace train_internal;

namespace {

std::string layout_flags(const LayoutOption& o, bool pipelined_recipe) {
  std::string out = cat("--set parallelism.tp=", o.tp, " --set parallelism.pp=", o.pp);
  if (o.pp > 1 || pipelined_recipe)
    out += cat(" --set parallelism.schedule='\"", pipeline::schedule_name(o.schedule),
               "\"' --set parallelism.virtual_stages=", o.virtual_stages);
  return out + cat(" --set parallelism.zero=", o.zero, " --set training.recompute='\"",
                   recompute_name(o.recompute),
                   "\"' --set training.micro_batch_size=", o.micro_batch,
                   " --set training.grad_accum_steps=", o.grad_accum);
}

std::string schedule_column(const LayoutOption& o) {
  if (o.pp == 1) return "-";
  if (o.virtual_stages > 1) return cat("interl.x", o.virtual_stages);  // no space: one column
  return pipeline::schedule_name(o.schedule);
}

// The table of the layouts that fit (at most 12), the best's flags and,
// under pp, its stages.
std::string layout_table(const std::vector<LayoutOption>& layouts, const PlanRequest& plan,
                         int world, int64_t global) {
  int fit = 0;
  for (const LayoutOption& o : layouts) fit += o.fits;
  const double device = double(plan.device_bytes);
  std::string out =
      cat("# layouts on ", world, " devices of ", human_bytes(device), " (", plan.node_devices,
          " to a node) keeping ", global, " sequences per step: ", fit, " of ", layouts.size(),
          " fit (estimate per rank, the largest stage's under pp; cost = relative step time, "
          "docs/distributed.md, \"Scaling\"); the best first:\n");
  char line[256];
  std::snprintf(line, sizeof line, "#  %4s %4s %4s %4s  %-9s %-10s %11s %5s %6s %11s %11s %6s\n",
                "tp", "pp", "dp", "zero", "recompute", "schedule", "micro-batch", "accum", "bubble",
                "per rank", "room", "cost");
  out += line;
  int shown = 0;
  for (const LayoutOption& o : layouts) {
    if (!o.fits || shown++ == 12) break;
    const std::string bubble = o.pp > 1 ? cat(fixed(100 * o.bubble, 1), "%") : "-";
    std::snprintf(line, sizeof line,
                  "#  %4d %4d %4d %4d  %-9s %-10s %11d %5d %6s %11s %11s %6.3f\n", o.tp, o.pp, o.dp,
                  o.zero, recompute_name(o.recompute), schedule_column(o).c_str(), o.micro_batch,
                  o.grad_accum, bubble.c_str(), human_bytes(double(o.memory.total())).c_str(),
                  human_bytes(device - double(o.memory.total())).c_str(), o.cost);
    out += line;
  }
  const LayoutOption& best = layouts.front();
  out += cat("# best: ", layout_flags(best, plan.own.pp > 1), " (", best.memory.to_string(), ")\n");
  if (best.pp > 1) {
    std::string stages, ranks;
    for (size_t k = 0; k + 1 < best.stage_first.size(); ++k)
      stages += cat(k ? " " : "", "[", best.stage_first[k], ",", best.stage_first[k + 1], ")");
    for (int64_t b : best.stage_bytes)
      ranks += cat(ranks.empty() ? "" : ", ", human_bytes(double(b)));
    out += cat("# best's stages: layers ", stages, "; per pipeline rank ", ranks, "; bubble ",
               fixed(100 * best.bubble, 1), "% (", best.grad_accum, " micro-batches)\n");
  }
  return out;
}

std::string layout_name(const LayoutOption& o) {
  return o.pp > 1 ? cat("tp ", o.tp, " x pp ", o.pp, " x dp ", o.dp, ", ", schedule_column(o),
                        ", ZeRO-", o.zero)
                  : cat("tp ", o.tp, " x dp ", o.dp, ", ZeRO-", o.zero);
}

}  // namespace

std::string train_dry_run(const Recipe& recipe, const PlanRequest& plan, std::string* refusal) {
  const TrainConfig config = read_train_config(recipe);
  Run run(config);
  run.dry_run = true;
  run.plan_memory = plan.device_bytes > 0;
  setup(run);
  std::string out;
  if (!run.plan_memory) {
    std::string who = "per process";
    if (run.grid.pp > 1) {  // each stage's rank says its own
      const int S = int(run.stage_first.size()) - 1;
      std::string layers;
      for (int st = run.grid.pp_rank; st < S; st += run.grid.pp)
        layers += cat(layers.empty() ? "" : " ", "[", run.stage_first[size_t(st)], ",",
                      run.stage_first[size_t(st) + 1], ")");
      who = cat("of pipeline rank ", run.grid.pp_rank, " (layers ", layers, ")");
    }
    out = cat("# memory ", who, " (estimate): ", run.memory.to_string(), "\n");
    if (run.memory_limit.bytes >= 0)
      out += cat("# memory available: ", human_bytes(double(run.memory_limit.bytes)), " (",
                 run.memory_limit.source, ")\n");
    return out;
  }
  const int world = plan.world > 0 ? plan.world : run.world();
  const std::string file = config.file();
  const RecipeLayout& own = plan.own;
  // The recipe's layout on `world` devices, and its global batch (kept by
  // every layout).
  STRATA_CHECK(own.tp >= 1 && own.pp >= 1 && world % (own.tp * own.pp) == 0, file,
               ": parallelism.tp = ", own.tp, " x parallelism.pp = ", own.pp,
               " does not divide --world ", world);
  const int own_dp = own.dp > 0 ? own.dp : world / (own.tp * own.pp);
  STRATA_CHECK(own.tp * own.pp * own_dp == world, file, ": parallelism.tp = ", own.tp,
               " x parallelism.pp = ", own.pp, " x parallelism.dp = ", own_dp, " is not --world ",
               world);
  const int64_t global = int64_t(config.training.micro_batch) * config.training.accum * own_dp;
  LayoutSearch search;
  search.world = world, search.seq = config.training.seq_len, search.global_batch = global;
  search.max_micro_batch = std::max(config.training.micro_batch, 16);
  search.device_bytes = plan.device_bytes;
  search.trained_share = run.trained_share;
  search.bf16_activations =
      bf16_activations(config.training, run.device, config.training.precision != "fp32");
  search.bf16_weight_copies = bf16_weight_copies(config.training, run.device);
  search.exits_on_every_stage = config.layerskip.early_exit();
  search.node_devices = plan.node_devices;
  search.max_pp = plan.max_pp;
  if (own.virtual_stages > 2) search.interleave.push_back(own.virtual_stages);
  const auto layouts = plan_layouts(run.planned_cfg, run.planned_plan, search);
  STRATA_CHECK(!layouts.empty(), file, ": no tensor-parallel degree divides both ", world,
               " devices and the model's heads, with a data-parallel degree dividing the ", global,
               " sequences of a step");
  if (!layouts.front().fits) {
    const auto smallest = std::min_element(layouts.begin(), layouts.end(),
                                           [](const LayoutOption& a, const LayoutOption& b) {
                                             return a.memory.total() < b.memory.total();
                                           });
    fail_one_line(file, ": no layout on ", world, " devices of ",
                  human_bytes(double(plan.device_bytes)), " fits: the smallest (tp ", smallest->tp,
                  smallest->pp > 1 ? cat(", pp ", smallest->pp) : "", ", ZeRO-", smallest->zero,
                  ", recompute ", recompute_name(smallest->recompute), ", micro-batch ",
                  smallest->micro_batch, ") needs ", human_bytes(double(smallest->memory.total())),
                  " per rank; use more devices or a smaller training.seq_len");
  }
  out += layout_table(layouts, plan, world, global);
  // The recipe's own layout: it must be among those that fit.
  const int own_zero = own_dp > 1 ? own.zero : 0;
  const auto kind = pipeline::parse_schedule(own.schedule);
  const auto mine = std::find_if(layouts.begin(), layouts.end(), [&](const LayoutOption& o) {
    return o.tp == own.tp && o.pp == own.pp &&
           (o.pp == 1 || (o.schedule == kind && o.virtual_stages == own.virtual_stages)) &&
           o.zero == own_zero && o.recompute == config.training.recompute &&
           o.micro_batch == config.training.micro_batch;
  });
  STRATA_CHECK(mine != layouts.end(), file, ": the recipe's layout (tp ", own.tp,
               own.pp > 1 ? cat(" x pp ", own.pp) : "", " x dp ", own_dp, ", ZeRO-", own_zero,
               ", micro-batch ", config.training.micro_batch, ") is not one the planner considers",
               plan.max_pp > 0 && own.pp > plan.max_pp ? cat(" (--max-pp ", plan.max_pp, ")") : "");
  const std::string what = cat(
      "the recipe's layout (", layout_name(*mine), ", recompute ", recompute_name(mine->recompute),
      ", micro-batch ", mine->micro_batch, " x ", mine->grad_accum, " accumulated",
      mine->pp > 1 ? cat(", bubble ", fixed(100 * mine->bubble, 1), "%") : "", ")");
  const LayoutOption& best = layouts.front();
  if (!mine->fits) {
    const std::string why =
        cat(file, ": ", what, " needs ", human_bytes(double(mine->memory.total())),
            " per rank, more than the ", human_bytes(double(plan.device_bytes)),
            " of a device; the best that fits: ", layout_flags(best, own.pp > 1));
    if (!refusal) fail_one_line(why);
    *refusal = why;
    return out;
  }
  out += cat("# ", what, ": ", human_bytes(double(mine->memory.total())), " per rank, ",
             human_bytes(double(plan.device_bytes - mine->memory.total())), " to spare (",
             mine->memory.to_string(), ")\n");
  return out;
}

}  // namespace strata
