// `strata train`: what a run directory may already hold, checked before the
// run writes anything (run.h):
//   - a fresh start (checkpoint.resume = "none", or "auto" with no checkpoint)
//     on a directory that holds an earlier run moves that run's files into
//     run.dir/archive/<UTC time>/ first: nothing is deleted, and no old
//     checkpoint is left behind to be resumed later into the new run;
//   - model.init_from beside checkpoints that "auto" would resume from is an
//     error (the run would silently ignore init_from);
//   - a resume lists every recipe value that differs from the checkpoint's
//     recipe, and refuses those that change what the saved state means
//     (data, sequence length, seed) unless checkpoint.resume_changes names
//     them.
#include <algorithm>
#include <chrono>
#include <ctime>
#include <filesystem>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/log.h"
#include "core/text.h"
#include "train/run.h"
#include "train/trainer.h"

namespace strata::train_internal {
namespace fs = std::filesystem;

namespace {

// Keys whose change makes a resumed state mean something else: the data
// position (dataset, split, tokens per row, seed of the order).
const char* const kStateKeys[] = {
    "data.kind",         "data.tokenizer", "data.dataset", "data.inputs",      "data.doc_split",
    "data.val_fraction", "data.sft_train", "data.packing", "training.seq_len", "run.seed"};

// Keys that differ on a resume by their nature (where and how long it runs).
bool expected_to_change(const std::string& key) {
  return key == "training.steps" || key == "run.dir" || key == "run.threads" ||
         key == "run.device" || key == "checkpoint.resume" || key == "checkpoint.resume_changes" ||
         key == "model.init_from";
}

std::string value_text(const Recipe& r, const KeySpec& k) {
  if (!r.has(k.path)) return "(unset)";
  switch (k.type) {
    case KeyType::Int:
      return std::to_string(r.get_int(k.path));
    case KeyType::Float:
      return cat(r.get_float(k.path));
    case KeyType::Bool:
      return r.get_bool(k.path) ? "true" : "false";
    case KeyType::String:
      return "\"" + one_line(r.get_string(k.path)) + "\"";
    case KeyType::StringList:
      return "[" + join(r.get_strings(k.path), ", ") + "]";
  }
  return "";
}

// The files of an earlier run in `dir` (everything but the lock and the
// archive itself).
std::vector<fs::path> previous_run_files(const std::string& dir) {
  std::vector<fs::path> files;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return files;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name == ".lock" || name == "archive") continue;
    files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

bool holds_a_run(const std::vector<fs::path>& files) {
  for (const fs::path& f : files) {
    const std::string name = f.filename().string();
    if (name == "metrics.jsonl" || name == "checkpoints" || name == "tb") return true;
  }
  return false;
}

std::string utc_stamp() {
  const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y%m%d-%H%M%S", &tm);
  return buf;
}

}  // namespace

void check_run_dir(Run& run, const Source& src) {
  const TrainConfig& c = run.c;
  if (!c.model.init_from.empty() && c.checkpoint.resume == "auto") {
    const auto ckpts = list_checkpoints(run.dir());
    if (!ckpts.empty())
      c.fail("model.init_from",
             cat("is set, but run.dir ", run.dir(), " has checkpoints (newest: step ",
                 ckpts.back().first,
                 ") that a resume would continue instead; drop "
                 "model.init_from to resume, or set checkpoint.resume = \"none\" to start over "
                 "from init_from (the earlier run is archived)"));
  }
  if (src.resume.empty() || src.info.recipe.empty()) return;
  Recipe saved;
  try {
    saved = Recipe::from_string(src.info.recipe, src.resume + " [recipe]", train_recipe_schema());
  } catch (const Error& e) {
    log::warn("resume: the checkpoint's recipe cannot be read (", e.what(),
              "); its values are not compared");
    return;
  }
  const Recipe& now = *c.recipe;
  const std::vector<std::string> allowed = now.get_strings("checkpoint.resume_changes");
  std::vector<std::string> changed, refused;
  for (const KeySpec& k : train_recipe_schema()) {
    if (expected_to_change(k.path)) continue;
    const std::string was = value_text(saved, k), is = value_text(now, k);
    if (was == is) continue;
    changed.push_back(cat(k.path, " ", was, " -> ", is));
    const bool state_key =
        std::find_if(std::begin(kStateKeys), std::end(kStateKeys),
                     [&](const char* s) { return k.path == s; }) != std::end(kStateKeys);
    if (state_key && std::find(allowed.begin(), allowed.end(), k.path) == allowed.end())
      refused.push_back(k.path);
  }
  if (!refused.empty())
    fail_one_line(src.resume, ": resuming with another ", join(refused, ", "),
                  " than the checkpoint's changes what its saved data position means (",
                  join(changed, "; "),
                  "); put back the checkpoint's values, name the keys in "
                  "checkpoint.resume_changes to resume anyway, or set checkpoint.resume = "
                  "\"none\" to start over");
  if (!changed.empty())  // said once the run starts (a later refusal stays one line)
    run.resume_note =
        cat("resume: the recipe differs from ", src.resume, "'s: ", join(changed, "; "));
  // Allowed changes of the data: the saved position means nothing in the new data.
  for (const std::string& k : allowed)
    if (k.rfind("data.", 0) == 0 || k == "run.seed" || k == "training.seq_len")
      for (const std::string& line : changed)
        if (line.rfind(k + " ", 0) == 0) run.restart_data = true;
}

void archive_previous_run(const Run& run) {
  const std::vector<fs::path> files = previous_run_files(run.dir());
  if (!holds_a_run(files)) return;
  fs::path to = fs::path(run.dir()) / "archive" / utc_stamp();
  for (int n = 2; fs::exists(to); ++n)
    to = fs::path(run.dir()) / "archive" / cat(utc_stamp(), "-", n);
  std::error_code ec;
  fs::create_directories(to, ec);
  if (ec) fail_one_line("run.dir ", run.dir(), ": cannot create ", to.string(), ": ", ec.message());
  for (const fs::path& f : files) {
    fs::rename(f, to / f.filename(), ec);
    if (ec)
      fail_one_line("run.dir ", run.dir(), ": cannot move ", f.string(), " into ", to.string(),
                    ": ", ec.message());
  }
  log::info("run.dir ", run.dir(), " held an earlier run: its files are now in ", to.string(),
            " (a fresh start deletes nothing)");
}

}  // namespace strata::train_internal
