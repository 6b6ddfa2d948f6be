// `strata spd <recipe.toml>`: the SPD paper's Algorithm 1 on a standard
// checkpoint. Sensitivity of every block at the degree on calibration
// windows; the N_spd least sensitive blocks classified ISB / SB / ESB by the
// thresholds; zero-shot for ISBs, block-to-block distillation for SBs, head
// grouping then distillation for ESBs; the SPD checkpoint and a report
// (perplexity and tasks against the budget for zero-shot, +B2B and +HG).
// Every result lands in the output directory as it is made, so a rerun
// resumes where the last one stopped (per block for the distillations).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <numeric>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/spd.h"
#include "core/error.h"
#include "core/file.h"
#include "core/log.h"
#include "core/sha256.h"
#include "core/svg_plot.h"
#include "core/text.h"
#include "core/threads.h"
#include "core/timer.h"
#include "data/tokenizer.h"
#include "eval/evaluate.h"
#include "io/model_io.h"
#include "parallel/grid.h"
#include "train/recipe.h"
#include "train/spd.h"

namespace strata::cli {

namespace fs = std::filesystem;

namespace {

const char* kUsage =
    "usage: strata spd <recipe.toml> [--set section.key=value ...] [--threads N] [--quiet]\n"
    "       strata spd --help-recipe\n\n"
    "Runs the SPD paper's Algorithm 1 on the standard checkpoint the recipe names:\n"
    "  1. sensitivity S_k of every block at spd.degree on calibration windows\n"
    "  2. the spd.budget least sensitive blocks, classified by S: ISB (S <= tau1),\n"
    "     SB (tau1 < S <= tau2), ESB (S > tau2)\n"
    "  3. ISB: zero-shot; SB: block-to-block distillation; ESB: head grouping, then\n"
    "     distillation (each block alone, on the original model's block inputs)\n"
    "  4. <out_dir>/spd.h5 (the SPD checkpoint), report.md, report.json, sensitivity.svg,\n"
    "     budget.svg: perplexity and tasks against the budget for zero-shot, +B2B, +HG\n"
    "Results are kept in <out_dir> as they are made: a rerun resumes (per block).\n"
    "Under mpirun -np N the distillations are spread over the N processes.\n\n"
    "options:\n"
    "  --set section.key=value  override a recipe key (repeatable)\n"
    "  --threads N              compute threads per process (0: all cores)\n"
    "  --quiet                  no progress lines\n"
    "  --help-recipe            list every recipe key with its default\n";

std::vector<KeySpec> spd_schema() {
  using K = KeyType;
  return {
      {"spd.checkpoint", K::String, "", "standard checkpoint to convert", true},
      {"spd.degree", K::Int, "2", "tensor-parallel degree g whose attention sync is dropped"},
      {"spd.budget", K::Int, "-1", "N_spd: blocks in SPD (-1: spd.budget_percent of the layers)"},
      {"spd.budget_percent", K::Float, "100", "the budget as a share of the layers"},
      {"spd.tau1", K::Float, "0.05", "ISB threshold: S <= tau1 runs zero-shot"},
      {"spd.tau2", K::Float, "10", "ESB threshold: S > tau2 gets head grouping"},
      {"spd.out_dir", K::String, "", "where the checkpoint, report and partial results go", true},
      {"spd.seed", K::Int, "1", "seed of the calibration draw, shuffles and grouping starts"},
      {"calibration.text", K::String, "", "calibration text file (the training corpus)", true},
      {"calibration.limit_bytes", K::Int, "0", "read at most this much of it (0: all)"},
      {"calibration.samples", K::Int, "128", "windows drawn at random offsets"},
      {"calibration.seq_len", K::Int, "256", "tokens per window"},
      {"calibration.batch_size", K::Int, "8", "windows per forward pass (scan, capture)"},
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
}

enum class Cls { Isb, Sb, Esb };
const char* cls_name(Cls c) { return c == Cls::Isb ? "ISB" : c == Cls::Sb ? "SB" : "ESB"; }

// A distillation job: block `layer`, with head grouping first or not.
struct Job {
  int layer;
  bool hg;
  std::string name() const { return cat("block_", layer, hg ? "_hg" : "_b2b"); }
};
struct JobResult {
  std::vector<float> weights;  // the block's tensors after distillation
  nlohmann::json info;         // mse before/after, steps, seconds, head order
};

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

int int_arg(const std::string& s, const char* what) {
  int v = 0;
  STRATA_CHECK(parse_int(s, &v), "strata spd: ", what, ": expected an integer, got '", s, "'");
  return v;
}

}  // namespace

std::string spd_report_markdown(const nlohmann::json& rep) {
  std::string o;
  const int L = rep.at("layers").get<int>();
  o += cat("# SPD report: ", rep.at("checkpoint").get<std::string>(), ", degree ",
           rep.at("degree").get<int>(), ", budget ", rep.at("budget").get<int>(), " of ", L,
           " blocks\n\n");
  o += cat("Calibration: ", rep["calibration"]["samples"].get<int>(), " windows of ",
           rep["calibration"]["seq_len"].get<int>(), " tokens from ",
           rep["calibration"]["text"].get<std::string>(), "; tau1 = ", rep["tau1"].get<double>(),
           ", tau2 = ", rep["tau2"].get<double>(), ".\n\n## Sensitivity\n\n");
  o += "| block | ppl, blocks k..L-1 in SPD | S_k | class | rank | in SPD "
       "|\n|---|---|---|---|---|---|\n";
  for (const auto& b : rep.at("blocks"))
    o += cat("| ", b["layer"].get<int>(), " | ", fixed(b["ppl_blocks_from"].get<double>(), 4),
             " | ", fixed(b["sensitivity"].get<double>(), 5), " | ", b["class"].get<std::string>(),
             " | ", b["rank"].get<int>(), " | ", b["selected"].get<bool>() ? "yes" : "no", " |\n");
  o += "\n## Distillations\n\n| block | head grouping | MSE zero-shot | MSE distilled | steps | "
       "seconds | KV-head order |\n|---|---|---|---|---|---|---|\n";
  for (const auto& j : rep.at("jobs"))
    o += cat("| ", j["layer"].get<int>(), " | ", j["head_grouping"].get<bool>() ? "yes" : "no",
             " | ", j["mse_zero_shot"].get<double>(), " | ", j["mse_distilled"].get<double>(),
             " | ", j["steps"].get<int64_t>(), " | ", fixed(j["seconds"].get<double>(), 1), " | ",
             j.contains("head_order") ? j["head_order"].dump() : "-", " |\n");
  // Perplexity against the budget, one column per variant.
  std::vector<std::string> variants;
  for (const auto& row : rep.at("sweep")) {
    const std::string v = row["variant"].get<std::string>();
    if (std::find(variants.begin(), variants.end(), v) == variants.end()) variants.push_back(v);
  }
  const bool text = !rep.at("sweep").empty() && rep["sweep"][0].contains("ppl");
  o += cat("\n## Perplexity against the budget (", text ? "held-out text" : "calibration windows",
           ")\n\n| blocks in SPD | % |");
  for (const auto& v : variants) o += " " + v + " |";
  o += "\n|---|---|";
  for (size_t k = 0; k < variants.size(); ++k) o += "---|";
  o += "\n";
  for (int n = 0; n <= rep.at("budget").get<int>(); ++n) {
    std::string line = cat("| ", n, " | ", fixed(100.0 * n / L, 0), " |");
    bool any = false;
    for (const auto& v : variants) {
      std::string cell = " |";
      for (const auto& row : rep["sweep"])
        if (row["n"].get<int>() == n && (row["variant"] == v || n == 0)) {
          cell = " " + fixed(row[text ? "ppl" : "calibration_ppl"].get<double>(), 4) + " |";
          any = true;
        }
      line += cell;
    }
    if (any) o += line + "\n";
  }
  // Tasks where they were scored.
  bool header = false;
  for (const auto& row : rep.at("sweep")) {
    if (!row.contains("tasks")) continue;
    if (!header) {
      o += "\n## Tasks\n\n| blocks in SPD | variant |";
      for (auto it = row["tasks"].begin(); it != row["tasks"].end(); ++it)
        o += cat(" ", it.key(), " (", it.value()["metric"].get<std::string>(), ") |");
      o += "\n|---|---|";
      for (size_t k = 0; k < row["tasks"].size(); ++k) o += "---|";
      o += "\n";
      header = true;
    }
    o += cat("| ", row["n"].get<int>(), " | ",
             row["n"].get<int>() == 0 ? "standard" : row["variant"].get<std::string>(), " |");
    for (auto it = row["tasks"].begin(); it != row["tasks"].end(); ++it)
      o += " " + fixed(it.value()["value"].get<double>(), 4) + " |";
    o += "\n";
  }
  const auto& st = rep.at("stages");
  o += cat("\n## Time\n\nsensitivity ", fixed(st["sensitivity_seconds"].get<double>(), 0),
           " s, distillation ", fixed(st["distillation_seconds"].get<double>(), 0),
           " s, evaluation ", fixed(st["evaluation_seconds"].get<double>(), 0),
           " s\n\nSPD checkpoint: ", rep["spd_checkpoint"].get<std::string>(), " (plan ",
           rep["plan"].get<std::string>(), ")\n");
  return o;
}

int spd_pipeline(int argc, char** argv, int first) {
  RecipeCommand rc;
  bool quiet = false;
  int threads = 0;
  auto own = [&](const std::string& a, int& i) {
    if (a == "--quiet") return quiet = true;
    if (a != "--threads") return false;
    STRATA_CHECK(i + 1 < argc, "strata spd: --threads needs a value");
    threads = int_arg(argv[++i], "--threads");
    return true;
  };
  if (!parse_recipe_command("strata spd", kUsage, spd_schema(), argc, argv, first, rc, own))
    return 0;
  const Recipe r = Recipe::load(rc.recipe, rc.sets, spd_schema());
  apply_threads(threads);
  ProcessGrid grid = make_grid(1, 0);
  Communicator& world = *grid.world;
  const bool root = grid.is_root(), progress = !quiet && root;
  auto say = [&](const std::string& s) {
    if (progress) std::fprintf(stderr, "spd: %s\n", s.c_str());
  };

  // ---- settings, checked before any work
  const std::string ckpt = r.get_string("spd.checkpoint");
  const int g = int(r.get_int("spd.degree"));
  if (g < 2) r.fail("spd.degree", cat("must be at least 2, got ", g));
  const double tau1 = r.get_float("spd.tau1"), tau2 = r.get_float("spd.tau2");
  if (!(tau1 < tau2)) r.fail("spd.tau2", cat("must exceed spd.tau1 (", tau1, "), got ", tau2));
  const uint64_t seed = uint64_t(r.get_int("spd.seed"));
  const int n_cal = int(r.get_int("calibration.samples"));
  const int seq = int(r.get_int("calibration.seq_len"));
  const int cal_batch = int(r.get_int("calibration.batch_size"));
  if (n_cal < 1) r.fail("calibration.samples", "must be at least 1");
  if (cal_batch < 1) r.fail("calibration.batch_size", "must be at least 1");
  spd::DistillConfig dc;
  dc.lr = r.get_float("b2b.lr");
  dc.epochs = int(r.get_int("b2b.epochs"));
  dc.batch = int(r.get_int("b2b.batch_size"));
  dc.progress = progress;
  if (!(dc.lr > 0)) r.fail("b2b.lr", "must be positive");
  if (dc.epochs < 0) r.fail("b2b.epochs", "must be at least 0");
  if (dc.batch < 1) r.fail("b2b.batch_size", "must be at least 1");
  const int restarts = int(r.get_int("hg.restarts"));
  if (restarts < 1) r.fail("hg.restarts", "must be at least 1");
  const bool ablation = r.get_bool("report.ablation");
  const std::string out_dir = r.get_string("spd.out_dir");
  for (const std::string& t : r.get_strings("report.tasks"))
    if (t != "all" && !fs::exists("eval/" + t + ".toml"))
      r.fail("report.tasks", cat("no task '", t, "' (eval/", t, ".toml; run from the repository)"));

  CheckpointInfo info;
  std::unique_ptr<Model<float>> model = load_model(ckpt, &info);
  Model<float>& m = *model;
  STRATA_CHECK(info.plan.plain(), ckpt, ": runs plan '", info.plan.to_string(),
               "'; strata spd needs a standard model");
  STRATA_CHECK(!info.tokenizer.empty(), ckpt, ": has no tokenizer");
  const Tokenizer tok = Tokenizer::from_bytes(info.tokenizer, ckpt);
  const LlamaConfig& cfg = m.config();
  const int L = cfg.num_hidden_layers;
  if (seq < 1 || seq > cfg.max_position_embeddings)
    r.fail("calibration.seq_len",
           cat("must be 1..", cfg.max_position_embeddings, " (the model's context), got ", seq));
  try {  // the plan checks the degree against the heads and the MLP
    m.set_plan(LayerPlan::parse(spd_plan(L, std::vector<bool>(size_t(L), true), g), L));
  } catch (const Error& e) {
    r.fail("spd.degree", cat(e.what(), " of ", ckpt));
  }
  m.set_plan(info.plan);
  int budget = int(r.get_int("spd.budget"));
  if (budget < 0) {
    const double pct = r.get_float("spd.budget_percent");
    if (pct < 0 || pct > 100) r.fail("spd.budget_percent", cat("must be 0..100, got ", pct));
    budget = int(std::lround(pct / 100.0 * L));
  }
  if (budget > L) r.fail("spd.budget", cat("must be at most the ", L, " layers, got ", budget));
  std::vector<int> task_budgets;
  for (const std::string& s : r.get_strings("report.task_budgets")) {
    int b = 0;
    if (!parse_int(s, &b))
      r.fail("report.task_budgets", cat("expected block counts, got '", s, "'"));
    if (b < 0 || b > budget)
      r.fail("report.task_budgets", cat("budget ", b, " is outside 0..", budget));
    task_budgets.push_back(b);
  }
  if (task_budgets.empty()) task_budgets = {0, budget};
  const std::string cal_text =
      read_text_sample(r.get_string("calibration.text"), r.get_int("calibration.limit_bytes"));
  std::string eval_text;
  if (!r.get_string("report.text").empty())
    eval_text = read_text_sample(r.get_string("report.text"), r.get_int("report.limit_bytes"));
  std::vector<int32_t> ids = tok.encode(cal_text);
  if (tok.bos_id() >= 0) ids.insert(ids.begin(), tok.bos_id());
  STRATA_CHECK(ids.size() > size_t(seq), r.get_string("calibration.text"), ": ", ids.size(),
               " tokens, fewer than one calibration window of ", seq + 1);
  const std::vector<int32_t> windows = spd::calibration_windows(ids, n_cal, seq, seed);

  // Results of earlier runs are reused only for the same inputs and settings.
  const std::string fingerprint = hex_of(
      cat(fs::absolute(ckpt).string(), "|", fs::file_size(ckpt), "|", g, "|", n_cal, "|", seq, "|",
          seed, "|", hex_of(cal_text), "|", dc.lr, "|", dc.epochs, "|", dc.batch, "|", restarts));
  if (root) fs::create_directories(out_dir + "/blocks");
  world.barrier();
  const std::string stamp_path = out_dir + "/fingerprint";
  const std::string old_stamp = read_or_empty(stamp_path);
  if (!old_stamp.empty() && old_stamp != fingerprint + "\n")
    fail(cat(out_dir,
             ": holds results of other settings (checkpoint, degree, calibration or "
             "distillation); remove it or set spd.out_dir to a new directory"));
  if (root) write_file_atomic(stamp_path, fingerprint + "\n");
  nlohmann::json report = {
      {"recipe", rc.recipe},
      {"checkpoint", ckpt},
      {"degree", g},
      {"layers", L},
      {"tau1", tau1},
      {"tau2", tau2},
      {"budget", budget},
      {"calibration",
       {{"text", r.get_string("calibration.text")}, {"samples", n_cal}, {"seq_len", seq}}}};
  nlohmann::json stages = nlohmann::json::object();
  say(cat(ckpt, ": ", L, " layers; degree ", g, ", budget ", budget, " blocks; ", n_cal,
          " calibration windows of ", seq, " tokens; results in ", out_dir));

  // ---- 1. sensitivity (M^(k): blocks k..L-1 in SPD, zero-shot)
  Timer t_stage;
  std::vector<double> ppl_from(size_t(L) + 1), sens(size_t(L), 0.0);
  const std::string sens_path = out_dir + "/sensitivity.json";
  const std::string sens_saved = read_or_empty(sens_path);
  if (!sens_saved.empty()) {
    const nlohmann::json j = parse_saved(sens_saved, sens_path);
    ppl_from = j.at("ppl_from").get<std::vector<double>>();
    sens = j.at("sensitivity").get<std::vector<double>>();
    say("sensitivity: reusing " + sens_path);
  } else {
    for (int k = L; k >= 0; --k) {
      std::vector<bool> on(size_t(L), false);
      for (int l = k; l < L; ++l) on[size_t(l)] = true;
      m.set_plan(LayerPlan::parse(spd_plan(L, on, g), L));
      ppl_from[size_t(k)] = spd::window_perplexity(m, windows, n_cal, seq, cal_batch);
      if (k < L)
        sens[size_t(k)] = (ppl_from[size_t(k)] - ppl_from[size_t(k) + 1]) / ppl_from[size_t(k) + 1];
      say(cat("sensitivity: blocks ", k, "..", L - 1, " in SPD: ppl ",
              fixed(ppl_from[size_t(k)], 4),
              k < L ? cat(", S_", k, " = ", fixed(sens[size_t(k)], 5)) : "", " (",
              fixed(t_stage.seconds(), 0), " s)"));
    }
    m.set_plan(info.plan);
    if (root)
      write_file_atomic(sens_path,
                        nlohmann::json({{"ppl_from", ppl_from}, {"sensitivity", sens}}).dump(2));
  }
  stages["sensitivity_seconds"] = t_stage.seconds();

  // ---- 2. ranking and classes
  std::vector<int> ranking(static_cast<size_t>(L));
  std::iota(ranking.begin(), ranking.end(), 0);
  std::stable_sort(ranking.begin(), ranking.end(),
                   [&](int a, int b) { return sens[size_t(a)] < sens[size_t(b)]; });
  std::vector<Cls> cls(static_cast<size_t>(L));
  for (int l = 0; l < L; ++l)
    cls[size_t(l)] = sens[size_t(l)] <= tau1   ? Cls::Isb
                     : sens[size_t(l)] <= tau2 ? Cls::Sb
                                               : Cls::Esb;
  std::vector<int> selected(ranking.begin(), ranking.begin() + budget);
  nlohmann::json blocks = nlohmann::json::array();
  for (int l = 0; l < L; ++l)
    blocks.push_back(
        {{"layer", l},
         {"sensitivity", sens[size_t(l)]},
         {"ppl_blocks_from", ppl_from[size_t(l)]},
         {"class", cls_name(cls[size_t(l)])},
         {"rank", int(std::find(ranking.begin(), ranking.end(), l) - ranking.begin())},
         {"selected", std::find(selected.begin(), selected.end(), l) != selected.end()}});
  {
    std::string line;
    for (int l : ranking) line += cat(" ", l, "(", cls_name(cls[size_t(l)]), ")");
    say("ranking, least sensitive first:" + line);
  }

  // ---- 3. distillation jobs: SB -> B2B; ESB -> HG + B2B (and B2B alone for the ablation)
  std::vector<Job> jobs;
  for (int l : selected) {
    if (cls[size_t(l)] == Cls::Isb) continue;
    if (cls[size_t(l)] == Cls::Sb || ablation) jobs.push_back({l, false});
    if (cls[size_t(l)] == Cls::Esb) jobs.push_back({l, true});
  }
  t_stage = Timer();
  std::vector<JobResult> results(jobs.size());
  std::vector<bool> have(jobs.size(), false);
  for (size_t j = 0; j < jobs.size(); ++j) {
    const std::string base = out_dir + "/blocks/" + jobs[j].name();
    const std::string js = read_or_empty(base + ".json");
    const std::string bin = read_or_empty(base + ".f32");
    if (js.empty() || bin.empty()) continue;
    results[j].info = parse_saved(js, base + ".json");
    results[j].weights.resize(bin.size() / sizeof(float));
    std::memcpy(results[j].weights.data(), bin.data(), bin.size());
    have[j] = int64_t(results[j].weights.size()) == spd::layer_numel(m, jobs[j].layer);
    if (have[j]) say("distillation: reusing " + base + ".json");
  }
  std::vector<int> todo_layers;
  for (size_t j = 0; j < jobs.size(); ++j)
    if (!have[j] && int(j) % world.size() == world.rank()) todo_layers.push_back(jobs[j].layer);
  std::sort(todo_layers.begin(), todo_layers.end());
  todo_layers.erase(std::unique(todo_layers.begin(), todo_layers.end()), todo_layers.end());
  if (!todo_layers.empty()) {
    // Teacher: the original model's block inputs and outputs.
    m.set_plan(info.plan);
    const std::vector<spd::BlockIO> io =
        spd::capture_blocks(m, windows, n_cal, seq, cal_batch, todo_layers);
    for (size_t j = 0; j < jobs.size(); ++j) {
      if (have[j] || int(j) % world.size() != world.rank()) continue;
      const Job& job = jobs[j];
      const spd::BlockIO& bio = io[size_t(
          std::find(todo_layers.begin(), todo_layers.end(), job.layer) - todo_layers.begin())];
      const std::vector<float> original = spd::layer_snapshot(m, job.layer);
      JobResult& res = results[j];
      Timer t_job;
      if (job.hg) {
        spd::HeadGrouping hg = spd::group_heads(m, job.layer, g, bio.x, n_cal, seq,
                                                seed + uint64_t(job.layer), restarts);
        spd::permute_heads(m, job.layer, hg.unit_order);
        res.info["head_order"] = hg.unit_order;
        res.info["head_groups"] = hg.groups;
        res.info["group_slice"] = hg.slice_of_group;
        res.info["head_distance"] = hg.distance;
        res.info["group_mlp_score"] = hg.score;
        res.info["spread_before"] = hg.spread_before;
        res.info["spread_after"] = hg.spread_after;
        say(cat("head grouping block ", job.layer, ": KV-head order ",
                nlohmann::json(hg.unit_order).dump(), ", within-group distance ",
                fixed(hg.spread_before, 3), " -> ", fixed(hg.spread_after, 3)));
      }
      std::vector<bool> on(size_t(L), false);
      on[size_t(job.layer)] = true;
      m.set_plan(LayerPlan::parse(spd_plan(L, on, g), L));
      dc.seed = seed + 1000 + uint64_t(job.layer);
      say(cat("distilling block ", job.layer, job.hg ? " (after head grouping)" : "", " for ",
              dc.epochs, " epochs of ", n_cal, " windows"));
      const spd::DistillResult d = spd::distill_block(m, job.layer, bio, n_cal, seq, dc);
      res.info["mse_zero_shot"] = d.initial_mse;
      res.info["mse_distilled"] = d.final_mse;
      res.info["epoch_mse"] = d.epoch_mse;
      res.info["steps"] = d.steps;
      res.info["seconds"] = t_job.seconds();
      res.weights = spd::layer_snapshot(m, job.layer);
      spd::restore_layer(m, job.layer, original);
      m.set_plan(info.plan);
      say(cat("block ", job.layer, job.hg ? " hg+b2b" : " b2b", ": mse ", d.initial_mse, " -> ",
              d.final_mse, " (", fixed(t_job.seconds(), 0), " s)"));
      const std::string base = out_dir + "/blocks/" + job.name();
      write_file_atomic(base + ".f32",
                        std::string(reinterpret_cast<const char*>(res.weights.data()),
                                    res.weights.size() * sizeof(float)));
      write_file_atomic(base + ".json", res.info.dump(2));
      have[j] = true;
    }
  }
  if (world.size() > 1) {
    // Every process gets every job's result (the others' entries are zero).
    for (size_t j = 0; j < jobs.size(); ++j) {
      const size_t n = size_t(spd::layer_numel(m, jobs[j].layer));
      if (results[j].weights.size() != n) results[j].weights.assign(n, 0.f);
      const int owner = int(j) % world.size();
      world.broadcast(results[j].weights.data(), int64_t(n), owner);
      std::string s = results[j].info.dump();
      world.broadcast_bytes(s, owner);
      results[j].info = nlohmann::json::parse(s);
    }
  }
  stages["distillation_seconds"] = t_stage.seconds();

  // ---- 4. models per variant and budget, evaluated
  // variant 0: zero-shot; 1: + B2B (SBs and ESBs); 2: + HG (ESBs grouped first).
  const char* variant_names[] = {"zero-shot", "+B2B", "+HG"};
  auto job_of = [&](int l, bool hg) {
    for (size_t j = 0; j < jobs.size(); ++j)
      if (jobs[j].layer == l && jobs[j].hg == hg) return int(j);
    return -1;
  };
  auto treatment = [&](int l, int variant) -> int {  // job index, or -1: original weights
    if (variant == 0 || cls[size_t(l)] == Cls::Isb) return -1;
    if (cls[size_t(l)] == Cls::Sb) return job_of(l, false);
    return variant == 2 ? job_of(l, true) : job_of(l, false);
  };
  std::vector<std::vector<float>> originals(static_cast<size_t>(L));
  for (int l = 0; l < L; ++l) originals[size_t(l)] = spd::layer_snapshot(m, l);
  auto assemble = [&](int n, int variant) {
    std::vector<bool> on(size_t(L), false);
    for (int l = 0; l < L; ++l) spd::restore_layer(m, l, originals[size_t(l)]);
    for (int k = 0; k < n; ++k) {
      const int l = ranking[size_t(k)];
      on[size_t(l)] = true;
      const int j = treatment(l, variant);
      if (j >= 0) spd::restore_layer(m, l, results[size_t(j)].weights);
    }
    m.set_plan(LayerPlan::parse(spd_plan(L, on, g), L));
  };
  EvalOptions eo;
  eo.tasks = r.get_strings("report.tasks");
  eo.limit = r.get_int("report.task_limit");
  eo.progress = false;
  t_stage = Timer();
  std::vector<int> variants = {0};
  if (ablation) {
    variants.push_back(1);
    variants.push_back(2);
  } else {
    variants.push_back(2);
  }
  nlohmann::json sweep = nlohmann::json::array();
  for (int v : variants) {
    for (int n = 0; n <= budget; ++n) {
      const bool tasks =
          std::find(task_budgets.begin(), task_budgets.end(), n) != task_budgets.end();
      if (!ablation && n != 0 && n != budget && !tasks) continue;
      if (v > 0 && n == 0) continue;  // the standard model is variant 0's n = 0
      assemble(n, v);
      nlohmann::json row = {{"variant", variant_names[v]},
                            {"n", n},
                            {"percent", 100.0 * n / L},
                            {"plan", m.plan().to_string()}};
      row["calibration_ppl"] = spd::window_perplexity(m, windows, n_cal, seq, cal_batch);
      if (!eval_text.empty())
        row["ppl"] =
            text_perplexity(m, tok, eval_text, r.get_string("report.text"), 0, 0, 8, {L}, false)
                .back()
                .ppl();
      if (tasks && !eo.tasks.empty()) {
        nlohmann::json tj = nlohmann::json::object();
        const std::vector<std::vector<TaskResult>> res = evaluate_tasks(m, tok, eo);
        for (const TaskResult& t : res.back()) {
          // Text tasks report bits per byte, choice tasks accuracy.
          const Metric* mt = &t.metrics.at(0);
          for (const Metric& x : t.metrics)
            if (x.name == "bits_per_byte" || (x.name == "acc" && mt->name != "bits_per_byte"))
              mt = &x;
          tj[t.task] = {
              {"metric", mt->name}, {"value", mt->value}, {"stderr", mt->stderr_}, {"n", t.n}};
        }
        row["tasks"] = tj;
      }
      say(cat("eval ", variant_names[v], " with ", n, " blocks in SPD: calibration ppl ",
              fixed(row["calibration_ppl"].get<double>(), 4),
              row.contains("ppl") ? cat(", text ppl ", fixed(row["ppl"].get<double>(), 4)) : "",
              " (", fixed(t_stage.seconds(), 0), " s)"));
      sweep.push_back(row);
    }
  }
  stages["evaluation_seconds"] = t_stage.seconds();

  // ---- 5. the SPD checkpoint: the full algorithm at the budget
  assemble(budget, 2);
  nlohmann::json spd_meta = {
      {"degree", g}, {"budget", budget}, {"tau1", tau1}, {"tau2", tau2}, {"source", ckpt}};
  nlohmann::json meta_blocks = nlohmann::json::array();
  for (int k = 0; k < budget; ++k) {
    const int l = ranking[size_t(k)];
    const int j = treatment(l, 2);
    nlohmann::json b = {{"layer", l},
                        {"class", cls_name(cls[size_t(l)])},
                        {"sensitivity", sens[size_t(l)]},
                        {"treatment", cls[size_t(l)] == Cls::Isb  ? "zero-shot"
                                      : cls[size_t(l)] == Cls::Sb ? "b2b"
                                                                  : "hg+b2b"}};
    if (j >= 0) {
      const nlohmann::json& ji = results[size_t(j)].info;
      b["mse_zero_shot"] = ji.at("mse_zero_shot");
      b["mse_distilled"] = ji.at("mse_distilled");
      if (ji.contains("head_order")) b["head_order"] = ji.at("head_order");
    }
    meta_blocks.push_back(b);
  }
  spd_meta["blocks"] = meta_blocks;
  const std::string ckpt_out = out_dir + "/spd.h5";
  if (root) {
    nlohmann::json state = info.state.is_object() ? info.state : nlohmann::json::object();
    state["spd"] = spd_meta;
    save_model(ckpt_out, m, info.tokenizer, state);
  }

  // ---- 6. report
  report["blocks"] = blocks;
  report["ranking"] = ranking;
  report["jobs"] = nlohmann::json::array();
  for (size_t j = 0; j < jobs.size(); ++j) {
    nlohmann::json ji = results[j].info;
    ji["layer"] = jobs[j].layer;
    ji["head_grouping"] = jobs[j].hg;
    report["jobs"].push_back(ji);
  }
  report["sweep"] = sweep;
  report["stages"] = stages;
  report["spd_checkpoint"] = ckpt_out;
  report["plan"] = m.plan().to_string();
  if (root) {
    write_file_atomic(out_dir + "/report.json", report.dump(2) + "\n");
    // Sensitivity plot and the budget curves.
    SvgChart sc;
    sc.title = cat("SPD sensitivity at degree ", g, " (", ckpt, ")");
    sc.x_label = "block";
    sc.y_label = "S_k (relative perplexity change)";
    SvgSeries ss;
    ss.label = "S_k";
    for (int l = 0; l < L; ++l) ss.points.push_back({double(l), sens[size_t(l)]});
    sc.series = {ss};
    sc.hlines = {{"tau1", tau1}};
    write_file_atomic(out_dir + "/sensitivity.svg", render_svg(sc));
    SvgChart bc;
    bc.title = cat("SPD at degree ", g, ": perplexity against the budget");
    bc.x_label = "blocks in SPD (least sensitive first)";
    bc.y_label = eval_text.empty() ? "calibration perplexity" : "perplexity";
    bc.log_y = true;
    for (int v : variants) {
      SvgSeries s;
      s.label = variant_names[v];
      for (const auto& row : sweep)
        if (row["variant"] == variant_names[v] || (row["n"] == 0 && v > 0))
          s.points.push_back({row["n"].get<double>(),
                              row[eval_text.empty() ? "calibration_ppl" : "ppl"].get<double>()});
      std::sort(s.points.begin(), s.points.end());
      bc.series.push_back(s);
    }
    write_file_atomic(out_dir + "/budget.svg", render_svg(bc));
    write_file_atomic(out_dir + "/report.md", spd_report_markdown(report));
  }
  world.barrier();
  if (root) std::fputs(spd_report_markdown(report).c_str(), stdout);
  return 0;
}

}  // namespace strata::cli
