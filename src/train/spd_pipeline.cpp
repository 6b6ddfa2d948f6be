// SPD's Algorithm 1, stage by stage (spd_pipeline.h); the report is
// spd_report.cpp.
#include "train/spd_pipeline.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <numeric>

#include "core/error.h"
#include "core/file.h"
#include "core/memory_info.h"
#include "core/sha256.h"
#include "core/text.h"
#include "core/timer.h"
#include "data/tokenizer.h"
#include "eval/evaluate.h"
#include "io/model_io.h"
#include "model/kinds/kinds.h"
#include "parallel/grid.h"
#include "train/spd_pipeline_state.h"

namespace strata::spd_pipeline {
namespace fs = std::filesystem;

namespace {

std::string hex_of(const std::string& bytes) { return sha256_hex(bytes).substr(0, 16); }

std::string read_or_empty(const std::string& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) return "";
  return read_file(path, "strata spd:");
}

// A result file of an earlier run; one line naming it when it does not parse.
nlohmann::json parse_saved(const std::string& text, const std::string& path) {
  try {
    return nlohmann::json::parse(text);
  } catch (const std::exception&) {
    fail(cat(path, ": not a readable result of an earlier run (remove it to recompute)"));
  }
}

void write_floats(const std::string& path, const std::vector<float>& w) {
  write_file_atomic(path,
                    std::string(reinterpret_cast<const char*>(w.data()), w.size() * sizeof(float)));
}

}  // namespace

void State::say(const std::string& s) const {
  if (progress) std::fprintf(stderr, "spd: %s\n", s.c_str());
}

std::string State::weights_path(size_t j) const {
  return c.out_dir + "/blocks/" + jobs[j].name() + ".f32";
}

int64_t State::layer_bytes(int l) { return spd::layer_numel(*model, l) * int64_t(sizeof(float)); }

// ---------------------------------------------------------------- 0. plan

bool plan(State& s, const SpdRunOptions& o) {
  const SpdConfig& c = s.c;
  const bool planning = o.dry_run && o.device_bytes > 0;
  // The model's shape first (the checkpoint's header; spd.config when
  // planning without the checkpoint), checked before anything is allocated.
  LlamaConfig shape;
  if (fs::exists(c.checkpoint)) {
    const CheckpointReader reader(c.checkpoint);
    const CheckpointInfo head = read_checkpoint_info(reader);
    STRATA_CHECK(head.plan.plain(), c.checkpoint, ": runs plan '", head.plan.to_string(),
                 "'; strata spd needs a standard model");
    shape = head.config;
  } else {
    if (!planning || c.config_file.empty())
      c.fail("spd.checkpoint",
             cat("no such checkpoint: ", c.checkpoint,
                 planning ? " (to plan without it, give the model's shape in spd.config)" : ""));
    shape = read_model_config(*c.recipe, "spd.config", c.config_file);
    s.say(cat("plan: ", c.checkpoint, " is not on this machine; the model's shape comes from ",
              c.config_file));
  }
  shape.finalize(c.checkpoint);
  const int L = s.L = shape.num_hidden_layers;
  if (c.seq_len < 1 || c.seq_len > shape.max_position_embeddings)
    c.fail("calibration.seq_len", cat("must be 1..", shape.max_position_embeddings,
                                      " (the model's context), got ", c.seq_len));
  try {  // the degree against the heads and the MLP
    check_spd_degree(shape, c.degree, 1,
                     spd_plan_text(L, std::vector<bool>(size_t(L), true), c.degree));
  } catch (const Error& e) {
    c.fail("spd.degree", cat(e.what(), " of ", c.checkpoint));
  }
  s.budget = !c.blocks.empty() ? int(c.blocks.size())
             : c.budget >= 0   ? c.budget
                               : int(std::lround(c.budget_percent / 100.0 * L));
  for (int b : c.blocks)
    if (b >= L) c.fail("spd.blocks", cat("layer ", b, " is not one of the model's ", L));
  if (s.budget > L) c.fail("spd.budget", cat("must be at most the ", L, " layers, got ", s.budget));
  for (int b : c.task_budgets)
    if (b < 0 || b > s.budget)
      c.fail("report.task_budgets", cat("budget ", b, " is outside 0..", s.budget));
  s.task_budgets = c.task_budgets.empty() ? std::vector<int>{0, s.budget} : c.task_budgets;
  for (const auto& [key, path] :
       {std::pair<const char*, const std::string&>{"calibration.text", c.calibration_text},
        {"report.text", c.report_text}}) {
    if (path.empty() || fs::exists(path)) continue;
    if (!planning) c.fail(key, cat("no such file: ", path));
    s.say(cat("plan: ", key, " ", path, " is not on this machine"));
  }
  // Memory (strata spd runs on the CPU backend, load_model's default).
  s.memory = spd::pipeline_memory(shape, c.degree, c.samples, c.seq_len, c.calibration_batch,
                                  c.distill.batch, s.budget, c.capture_bytes);
  const MemoryEstimate& need = s.memory.memory;
  const std::string what = cat(o.recipe, ": strata spd on ", c.checkpoint, " (",
                               fixed(double(shape.num_parameters()) / 1e9, 2), "B parameters)");
  const std::string hint =
      "lower calibration.capture_memory (blocks are then captured fewer at a time), "
      "calibration.batch_size or calibration.samples";
  if (o.dry_run) {
    std::fputs(c.recipe->to_toml().c_str(), stdout);
    std::printf(
        "# memory per process (estimate): %s (%d block%s captured per pass over the %d "
        "calibration windows)\n",
        need.to_string().c_str(), s.memory.capture_layers, s.memory.capture_layers == 1 ? "" : "s",
        c.samples);
    if (o.device_bytes > 0) {
      if (need.total() > o.device_bytes)
        fail_one_line(what, " needs ", human_bytes(double(need.total())),
                      " per process, more than ", human_bytes(double(o.device_bytes)), "; ", hint);
      std::printf("# fits %s per process: %s to spare\n",
                  human_bytes(double(o.device_bytes)).c_str(),
                  human_bytes(double(o.device_bytes - need.total())).c_str());
    } else {
      const MemoryLimit limit = ops::memory_available("cpu");
      check_memory(need, limit, 1, what, hint);
      if (limit.bytes >= 0)
        std::printf("# memory available: %s (%s)\n", human_bytes(double(limit.bytes)).c_str(),
                    limit.source.c_str());
    }
    return false;
  }
  check_memory(need, ops::memory_available("cpu"), processes_on_this_node(), what, hint);
  s.say(cat("memory: ", need.to_string(), " per process"));
  return true;
}

// ------------------------------------------- the model and its calibration

void load(State& s, const SpdRunOptions& o) {
  const SpdConfig& c = s.c;
  s.runtime_rss = process_rss_bytes();  // the program's own, before the model
  s.model = load_model(c.checkpoint, &s.info);
  Model<float>& m = *s.model;
  STRATA_CHECK(!s.info.tokenizer.empty(), c.checkpoint, ": has no tokenizer");
  s.tok = std::make_unique<Tokenizer>(Tokenizer::from_bytes(s.info.tokenizer, c.checkpoint));
  STRATA_CHECK(m.config().num_hidden_layers == s.L, c.checkpoint, ": changed while it was read");
  // Forward passes keep only the residual streams (and norm statistics): the
  // scan, the capture and the evaluations need no backward, and the same
  // kernels give the same numbers.
  m.set_recompute(Recompute::Full);
  const std::string cal_text = read_text_sample(c.calibration_text, c.calibration_limit_bytes);
  if (!c.report_text.empty()) s.eval_text = read_text_sample(c.report_text, c.report_limit_bytes);
  std::vector<int32_t> ids = s.tok->encode(cal_text);
  if (s.tok->bos_id() >= 0) ids.insert(ids.begin(), s.tok->bos_id());
  STRATA_CHECK(ids.size() > size_t(c.seq_len), c.calibration_text, ": ", ids.size(),
               " tokens, fewer than one calibration window of ", c.seq_len + 1);
  s.windows = spd::calibration_windows(ids, c.samples, c.seq_len, c.seed);
  // Results of earlier runs are reused only for the same inputs and settings.
  const spd::DistillConfig& dc = c.distill;
  const std::string fingerprint =
      hex_of(cat(fs::absolute(c.checkpoint).string(), "|", fs::file_size(c.checkpoint), "|",
                 c.degree, "|", c.samples, "|", c.seq_len, "|", c.seed, "|", hex_of(cal_text), "|",
                 dc.lr, "|", dc.epochs, "|", dc.batch, "|", c.restarts));
  if (s.root) fs::create_directories(c.out_dir + "/blocks");
  s.world->barrier();
  const std::string stamp_path = c.out_dir + "/fingerprint";
  const std::string old_stamp = read_or_empty(stamp_path);
  if (!old_stamp.empty() && old_stamp != fingerprint + "\n")
    fail(cat(c.out_dir,
             ": holds results of other settings (checkpoint, degree, calibration or "
             "distillation); remove it or set spd.out_dir to a new directory"));
  if (s.root) write_file_atomic(stamp_path, fingerprint + "\n");
  s.report = {{"recipe", o.recipe},
              {"checkpoint", c.checkpoint},
              {"degree", c.degree},
              {"layers", s.L},
              {"tau1", c.tau1},
              {"tau2", c.tau2},
              {"budget", s.budget},
              {"calibration",
               {{"text", c.calibration_text}, {"samples", c.samples}, {"seq_len", c.seq_len}}}};
  s.say(cat(c.checkpoint, ": ", s.L, " layers; degree ", c.degree, ", budget ", s.budget,
            " blocks; ", c.samples, " calibration windows of ", c.seq_len, " tokens; results in ",
            c.out_dir));
}

// ----------------------------------------------------------- 1. sensitivity

// M^(k): blocks k..L-1 in SPD, zero-shot.
void sensitivity(State& s) {
  const SpdConfig& c = s.c;
  const int L = s.L;
  Model<float>& m = *s.model;
  Timer t;
  s.ppl_from.assign(size_t(L) + 1, 0.0);
  s.sens.assign(size_t(L), 0.0);
  const std::string path = c.out_dir + "/sensitivity.json";
  const std::string saved = read_or_empty(path);
  if (!saved.empty()) {
    const nlohmann::json j = parse_saved(saved, path);
    s.ppl_from = j.at("ppl_from").get<std::vector<double>>();
    s.sens = j.at("sensitivity").get<std::vector<double>>();
    s.say("sensitivity: reusing " + path);
  } else {
    for (int k = L; k >= 0; --k) {
      std::vector<bool> on(size_t(L), false);
      for (int l = k; l < L; ++l) on[size_t(l)] = true;
      m.set_plan(LayerPlan::parse(spd_plan_text(L, on, c.degree), L));
      s.ppl_from[size_t(k)] =
          spd::window_perplexity(m, s.windows, c.samples, c.seq_len, c.calibration_batch);
      if (k < L)
        s.sens[size_t(k)] =
            (s.ppl_from[size_t(k)] - s.ppl_from[size_t(k) + 1]) / s.ppl_from[size_t(k) + 1];
      s.say(cat("sensitivity: blocks ", k, "..", L - 1, " in SPD: ppl ",
                fixed(s.ppl_from[size_t(k)], 4),
                k < L ? cat(", S_", k, " = ", fixed(s.sens[size_t(k)], 5)) : "", " (",
                fixed(t.seconds(), 0), " s)"));
    }
    m.set_plan(s.info.plan);
    if (s.root)
      write_file_atomic(
          path, nlohmann::json({{"ppl_from", s.ppl_from}, {"sensitivity", s.sens}}).dump(2));
  }
  s.stages["sensitivity_seconds"] = t.seconds();
}

// ------------------------------------------------------------- 2. classify

void classify(State& s) {
  const int L = s.L;
  s.ranking.resize(size_t(L));
  std::iota(s.ranking.begin(), s.ranking.end(), 0);
  std::stable_sort(s.ranking.begin(), s.ranking.end(),
                   [&](int a, int b) { return s.sens[size_t(a)] < s.sens[size_t(b)]; });
  // spd.blocks: those blocks first (least sensitive first among them), so the
  // budget's blocks are exactly they.
  const std::vector<int>& chosen = s.c.blocks;
  if (!chosen.empty())
    std::stable_partition(s.ranking.begin(), s.ranking.end(), [&](int l) {
      return std::find(chosen.begin(), chosen.end(), l) != chosen.end();
    });
  s.cls.resize(size_t(L));
  for (int l = 0; l < L; ++l)
    s.cls[size_t(l)] = s.sens[size_t(l)] <= s.c.tau1   ? Cls::Isb
                       : s.sens[size_t(l)] <= s.c.tau2 ? Cls::Sb
                                                       : Cls::Esb;
  const std::vector<int> selected(s.ranking.begin(), s.ranking.begin() + s.budget);
  s.blocks = nlohmann::json::array();
  for (int l = 0; l < L; ++l)
    s.blocks.push_back(
        {{"layer", l},
         {"sensitivity", s.sens[size_t(l)]},
         {"ppl_blocks_from", s.ppl_from[size_t(l)]},
         {"class", cls_name(s.cls[size_t(l)])},
         {"rank", int(std::find(s.ranking.begin(), s.ranking.end(), l) - s.ranking.begin())},
         {"selected", std::find(selected.begin(), selected.end(), l) != selected.end()}});
  std::string line;
  for (int l : s.ranking) line += cat(" ", l, "(", cls_name(s.cls[size_t(l)]), ")");
  s.say("ranking, least sensitive first:" + line);
  // The distillation jobs: SB -> B2B; ESB -> HG + B2B (and B2B alone for the ablation).
  for (int l : selected) {
    if (s.cls[size_t(l)] == Cls::Isb) continue;
    if (s.cls[size_t(l)] == Cls::Sb || s.c.ablation) s.jobs.push_back({l, false});
    if (s.cls[size_t(l)] == Cls::Esb) s.jobs.push_back({l, true});
  }
}

// -------------------------------------------------------------- 3. distill

namespace {

// One job on its block, whose inputs and outputs `bio` holds: the block
// distilled (after head grouping for ESBs), written to its files, the
// model's block restored.
void distill_job(State& s, size_t j, const spd::BlockIO& bio) {
  const SpdConfig& c = s.c;
  Model<float>& m = *s.model;
  const Job& job = s.jobs[j];
  const std::vector<float> original = spd::layer_snapshot(m, job.layer);
  nlohmann::json& info = s.results[j];
  Timer t;
  if (job.hg) {
    spd::HeadGrouping hg = spd::group_heads(m, job.layer, c.degree, bio.x, c.samples, c.seq_len,
                                            c.seed + uint64_t(job.layer), c.restarts);
    spd::permute_heads(m, job.layer, hg.unit_order);
    info["head_order"] = hg.unit_order;
    info["head_groups"] = hg.groups;
    info["group_slice"] = hg.slice_of_group;
    info["head_distance"] = hg.distance;
    info["group_mlp_score"] = hg.score;
    info["spread_before"] = hg.spread_before;
    info["spread_after"] = hg.spread_after;
    s.say(cat("head grouping block ", job.layer, ": KV-head order ",
              nlohmann::json(hg.unit_order).dump(), ", within-group distance ",
              fixed(hg.spread_before, 3), " -> ", fixed(hg.spread_after, 3)));
  }
  std::vector<bool> on(size_t(s.L), false);
  on[size_t(job.layer)] = true;
  m.set_plan(LayerPlan::parse(spd_plan_text(s.L, on, c.degree), s.L));
  spd::DistillConfig dc = c.distill;
  dc.progress = s.progress;
  dc.seed = c.seed + 1000 + uint64_t(job.layer);
  s.say(cat("distilling block ", job.layer, job.hg ? " (after head grouping)" : "", " for ",
            dc.epochs, " epochs of ", c.samples, " windows"));
  const spd::DistillResult d = spd::distill_block(m, job.layer, bio, c.samples, c.seq_len, dc);
  info["mse_zero_shot"] = d.initial_mse;
  info["mse_distilled"] = d.final_mse;
  info["epoch_mse"] = d.epoch_mse;
  info["steps"] = d.steps;
  info["seconds"] = t.seconds();
  const std::vector<float> trained = spd::layer_snapshot(m, job.layer);
  spd::restore_layer(m, job.layer, original);
  m.set_plan(s.info.plan);
  s.say(cat("block ", job.layer, job.hg ? " hg+b2b" : " b2b", ": mse ", d.initial_mse, " -> ",
            d.final_mse, " (", fixed(t.seconds(), 0), " s)"));
  const std::string base = c.out_dir + "/blocks/" + job.name();
  write_floats(base + ".f32", trained);
  write_file_atomic(base + ".json", info.dump(2));
}

// Process 0 gets every job's result (its out_dir may be another machine's).
void gather_results(State& s) {
  Communicator& world = *s.world;
  for (size_t j = 0; j < s.jobs.size(); ++j) {
    const int owner = int(j) % world.size();
    std::vector<float> w(size_t(spd::layer_numel(*s.model, s.jobs[j].layer)), 0.f);
    if (world.rank() == owner) {
      const std::string bin = read_file(s.weights_path(j), "distilled block");
      STRATA_CHECK(bin.size() == w.size() * sizeof(float), s.weights_path(j), ": ", bin.size(),
                   " bytes, not the block's ", w.size() * sizeof(float));
      std::memcpy(w.data(), bin.data(), bin.size());
    }
    world.broadcast(w.data(), int64_t(w.size()), owner);
    std::string info = s.results[j].dump();
    world.broadcast_bytes(info, owner);
    s.results[j] = nlohmann::json::parse(info);
    if (s.root && world.rank() != owner && !fs::exists(s.weights_path(j)))
      write_floats(s.weights_path(j), w);
  }
  world.barrier();
}

}  // namespace

void distill(State& s) {
  const SpdConfig& c = s.c;
  Communicator& world = *s.world;
  Timer t;
  s.results.assign(s.jobs.size(), nlohmann::json());
  std::vector<bool> have(s.jobs.size(), false);
  for (size_t j = 0; j < s.jobs.size(); ++j) {
    const std::string base = c.out_dir + "/blocks/" + s.jobs[j].name();
    const std::string js = read_or_empty(base + ".json");
    std::error_code ec;
    const auto size = fs::file_size(s.weights_path(j), ec);
    if (js.empty() || ec) continue;
    s.results[j] = parse_saved(js, base + ".json");
    have[j] = int64_t(size) == s.layer_bytes(s.jobs[j].layer);
    if (have[j]) s.say("distillation: reusing " + base + ".json");
  }
  auto mine = [&](size_t j) { return !have[j] && int(j) % world.size() == world.rank(); };
  std::vector<int> todo;
  for (size_t j = 0; j < s.jobs.size(); ++j)
    if (mine(j)) todo.push_back(s.jobs[j].layer);
  std::sort(todo.begin(), todo.end());
  todo.erase(std::unique(todo.begin(), todo.end()), todo.end());
  // Teacher: the original model's block inputs and outputs, captured for as
  // many blocks at a time as calibration.capture_memory holds.
  const size_t per = size_t(s.memory.capture_layers);
  for (size_t g0 = 0; g0 < todo.size(); g0 += per) {
    const std::vector<int> group(todo.begin() + ptrdiff_t(g0),
                                 todo.begin() + ptrdiff_t(std::min(todo.size(), g0 + per)));
    s.model->set_plan(s.info.plan);
    if (todo.size() > group.size())
      s.say(cat("capturing blocks ", nlohmann::json(group).dump(), " (", g0 + group.size(), " of ",
                todo.size(), ")"));
    const std::vector<spd::BlockIO> io =
        spd::capture_blocks(*s.model, s.windows, c.samples, c.seq_len, c.calibration_batch, group);
    for (size_t j = 0; j < s.jobs.size(); ++j) {
      if (!mine(j)) continue;
      const auto at = std::find(group.begin(), group.end(), s.jobs[j].layer);
      if (at == group.end()) continue;  // in another group
      distill_job(s, j, io[size_t(at - group.begin())]);
      have[j] = true;
    }
  }
  if (world.size() > 1) gather_results(s);
  s.stages["distillation_seconds"] = t.seconds();
}

}  // namespace strata::spd_pipeline
