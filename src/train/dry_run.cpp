// `strata train --dry-run` (trainer.h): the set-up a run would do, up to its
// memory check, and with --plan-memory the layouts of the job on other devices.
#include <algorithm>
#include <cstdio>

#include "core/error.h"
#include "core/memory_info.h"
#include "core/text.h"
#include "model/memory.h"
#include "train/run.h"
#include "train/trainer.h"

namespace strata {
using namespace train_internal;

std::string train_dry_run(const Recipe& recipe, int64_t device_bytes, int world, RecipeLayout own,
                          std::string* refusal) {
  const TrainConfig config = read_train_config(recipe);
  Run run(config);
  run.dry_run = true;
  run.plan_memory = device_bytes > 0;
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
  if (world <= 0) world = run.world();
  const std::string file = config.file();
  if (own.pp > 1)
    fail_one_line(file, ": parallelism.pp = ", own.pp,
                  ": --plan-memory does not plan pipeline layouts yet (it searches tp, dp, ZeRO, "
                  "recomputation and the micro-batch); `mpirun -np <world> strata train ",
                  file, " --dry-run` prints the estimate of each stage's rank");
  // The recipe's layout on `world` devices, and its global batch (kept by
  // every layout).
  STRATA_CHECK(own.tp >= 1 && world % own.tp == 0, file, ": parallelism.tp = ", own.tp,
               " does not divide --world ", world);
  const int own_dp = own.dp > 0 ? own.dp : world / own.tp;
  STRATA_CHECK(own.tp * own_dp == world, file, ": parallelism.tp = ", own.tp,
               " x parallelism.dp = ", own_dp, " is not --world ", world);
  const int64_t global = int64_t(config.training.micro_batch) * config.training.accum * own_dp;
  const auto layouts = plan_layouts(
      run.planned_cfg, run.planned_plan, world, config.training.seq_len, global,
      std::max(config.training.micro_batch, 16), device_bytes, run.trained_share,
      bf16_activations(config.training, run.device, config.training.precision != "fp32"),
      bf16_weight_copies(config.training, run.device));
  int fit = 0;
  for (const LayoutOption& o : layouts) fit += o.fits;
  auto flags = [](const LayoutOption& o) {
    return cat("--set parallelism.tp=", o.tp, " --set parallelism.zero=", o.zero,
               " --set training.recompute='\"", recompute_name(o.recompute),
               "\"' --set training.micro_batch_size=", o.micro_batch,
               " --set training.grad_accum_steps=", o.grad_accum);
  };
  if (fit == 0) {
    const auto smallest = std::min_element(layouts.begin(), layouts.end(),
                                           [](const LayoutOption& a, const LayoutOption& b) {
                                             return a.memory.total() < b.memory.total();
                                           });
    STRATA_CHECK(smallest != layouts.end(), file, ": no tensor-parallel degree divides both ",
                 world, " devices and the model's heads, with a data-parallel degree dividing the ",
                 global, " sequences of a step");
    fail_one_line(file, ": no layout on ", world, " devices of ", human_bytes(double(device_bytes)),
                  " fits: the smallest (tp ", smallest->tp, ", ZeRO-", smallest->zero,
                  ", recompute ", recompute_name(smallest->recompute), ", micro-batch ",
                  smallest->micro_batch, ") needs ", human_bytes(double(smallest->memory.total())),
                  " per rank; use more devices or a smaller training.seq_len");
  }
  out += cat("# layouts on ", world, " devices of ", human_bytes(double(device_bytes)), " keeping ",
             global, " sequences per step: ", fit, " of ", layouts.size(),
             " fit (estimate per rank; cost = relative step time, docs/distributed.md, "
             "\"Scaling\"); the best "
             "first:\n");
  char line[256];
  std::snprintf(line, sizeof line, "#  %4s %4s %4s  %-9s %11s %5s %11s %11s %6s\n", "tp", "dp",
                "zero", "recompute", "micro-batch", "accum", "per rank", "room", "cost");
  out += line;
  int shown = 0;
  for (const LayoutOption& o : layouts) {
    if (!o.fits || shown++ == 12) break;
    std::snprintf(line, sizeof line, "#  %4d %4d %4d  %-9s %11d %5d %11s %11s %6.3f\n", o.tp, o.dp,
                  o.zero, recompute_name(o.recompute), o.micro_batch, o.grad_accum,
                  human_bytes(double(o.memory.total())).c_str(),
                  human_bytes(double(device_bytes - o.memory.total())).c_str(), o.cost);
    out += line;
  }
  const LayoutOption& best = layouts.front();
  out += cat("# best: ", flags(best), " (", best.memory.to_string(), ")\n");
  // The recipe's own layout: it must be among those that fit.
  const int own_zero = own_dp > 1 ? own.zero : 0;
  const auto mine = std::find_if(layouts.begin(), layouts.end(), [&](const LayoutOption& o) {
    return o.tp == own.tp && o.zero == own_zero && o.recompute == config.training.recompute &&
           o.micro_batch == config.training.micro_batch;
  });
  STRATA_CHECK(mine != layouts.end(), file, ": the recipe's layout (tp ", own.tp, ", dp ", own_dp,
               ", micro-batch ", config.training.micro_batch, ") is not one the planner considers");
  const std::string what =
      cat("the recipe's layout (tp ", mine->tp, " x dp ", mine->dp, ", ZeRO-", mine->zero,
          ", recompute ", recompute_name(mine->recompute), ", micro-batch ", mine->micro_batch,
          " x ", mine->grad_accum, " accumulated)");
  if (!mine->fits) {
    const std::string why =
        cat(file, ": ", what, " needs ", human_bytes(double(mine->memory.total())),
            " per rank, more than the ", human_bytes(double(device_bytes)),
            " of a device; the best that fits: ", flags(best));
    if (!refusal) fail_one_line(why);
    *refusal = why;
    return out;
  }
  out += cat("# ", what, ": ", human_bytes(double(mine->memory.total())), " per rank, ",
             human_bytes(double(device_bytes - mine->memory.total())), " to spare (",
             mine->memory.to_string(), ")\n");
  return out;
}

}  // namespace strata
