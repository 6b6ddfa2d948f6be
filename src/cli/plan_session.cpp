#include "cli/plan_session.h"

#include <algorithm>
#include <chrono>
#include <filesystem>

#include "cli/commands.h"
#include "core/error.h"
#include "core/file.h"
#include "core/log.h"
#include "core/sha256.h"
#include "core/text.h"
#include "core/threads.h"
#include "core/timer.h"
#include "eval/evaluate.h"
#include "io/model_io.h"

namespace strata::cli {

namespace fs = std::filesystem;

std::string Workload::to_string() const { return cat(prompt, ",", generate, ",", batch); }

Workload parse_workload(const std::string& text, int context, const std::string& what) {
  const std::vector<std::string> parts = split_commas(text);
  Workload w;
  STRATA_USAGE_CHECK(parts.size() == 3 && parse_int(parts[0], &w.prompt) &&
                         parse_int(parts[1], &w.generate) && parse_int(parts[2], &w.batch) &&
                         w.prompt >= 1 && w.generate >= 2 && w.batch >= 1,
                     what, ": '", text,
                     "' is not PROMPT,GENERATE,BATCH (prompt tokens >= 1, new tokens >= 2, "
                     "prompts >= 1; e.g. 128,128,1)");
  STRATA_CHECK(w.prompt + w.generate <= context, what, ": ", w.prompt, " prompt + ", w.generate,
               " new tokens exceed the model's context of ", context);
  return w;
}

namespace {

// Seconds on every rank replaced by their mean (every rank then searches alike).
double agreed(const ProcessGrid& g, double seconds) {
  return g.world_size > 1 ? g.world->allreduce_sum(seconds) / g.world_size : seconds;
}

// Multiply-adds (x2) per row of a layer's attention and MLP at a mean context.
std::pair<double, double> module_flops(const LlamaConfig& c, double context) {
  const double H = c.hidden_size, q = c.q_dim(), kv = double(c.num_key_value_heads) * c.head_dim;
  const double attn = 2 * H * (q + 2 * kv) + 2 * q * H + 4 * context * q;
  return {attn, 2 * 3 * H * double(c.intermediate_size)};
}

}  // namespace

PlanSession::PlanSession(const Args& args, const std::string& command, int tp,
                         const Workload& workload)
    : args_(args),
      command_(command),
      out_(args.get("out")),
      calibration_(args.get("calibration")),
      tp_(tp),
      work_(workload) {
  const std::string text = read_file(calibration_, cat(command, ": --calibration"));
  require_text(text, calibration_);
  lm_ = load_model_from_args(args, command, true, args.get_int("link-delay-us"), {},
                             launched_by_mpi() ? tp : 1);
  STRATA_CHECK(lm_.info.plan.plain(), command, ": ", args.get("checkpoint"), " runs plan '",
               lm_.info.plan.to_string(), "'; the search starts from a standard model");
  tok_ = std::make_unique<Tokenizer>(checkpoint_tokenizer(lm_, args.get("checkpoint")));
  config_ = lm_.model->config();
  layers_ = config_.num_hidden_layers;
  // The workload's prompts: consecutive pieces of the calibration text.
  std::vector<int32_t> ids = tok_->encode(text);
  STRATA_CHECK(!ids.empty(), calibration_, ": encodes to no tokens");
  for (int b = 0; b < work_.batch; ++b) {
    std::vector<int32_t> p;
    if (tok_->bos_id() >= 0) p.push_back(tok_->bos_id());
    for (size_t k = 0; int(p.size()) < work_.prompt; ++k)
      p.push_back(ids[(size_t(b) * size_t(work_.prompt) + k) % ids.size()]);
    prompts_.push_back(p);
  }
  // The cache: results of the same checkpoint and text only.
  const auto mtime = fs::last_write_time(args.get("checkpoint")).time_since_epoch().count();
  fingerprint_ = sha256_hex(cat(fs::absolute(args.get("checkpoint")).string(), "|",
                                fs::file_size(args.get("checkpoint")), "|", mtime, "|",
                                sha256_hex(text), "|eval --perplexity defaults"))
                     .substr(0, 16);
  if (root()) fs::create_directories(out_);
  const std::string path = out_ + "/quality.json";
  cache_ = {{"fingerprint", fingerprint_},
            {"checkpoint", args.get("checkpoint")},
            {"calibration", calibration_},
            {"plans", nlohmann::json::object()}};
  if (fs::exists(path)) {
    nlohmann::json old = nlohmann::json::parse(read_file(path, command), nullptr, false);
    STRATA_CHECK(!old.is_discarded() && old.value("fingerprint", "") == fingerprint_, path,
                 ": holds results of another checkpoint or calibration text; remove it or give "
                 "another --out");
    cache_["plans"] = old["plans"];
    for (const char* key : {"acceptance", "tasks"})
      if (old.contains(key)) cache_[key] = old[key];
    cached_ = int(cache_["plans"].size());
  }
}

void PlanSession::save_cache() {
  if (root()) write_file_atomic(out_ + "/quality.json", cache_.dump(1) + "\n");
}

void PlanSession::use_plan(const std::string& text) {
  const LayerPlan plan = LayerPlan::parse(text, layers_);
  Model<float>& m = *lm_.model;
  if (m.plan().to_string() == plan.to_string()) return;
  if (plan.tp_shards(m.tp_size()) == m.plan().tp_shards(m.tp_size())) return m.set_plan(plan);
  // Another placement of the weights over the tp group (lp pairs): load again.
  LoadOptions o;
  o.plan = text;
  o.tp = m.tp_comm();
  o.device = ops::resolve_device(args_.get("device"));
  lm_.model.reset();
  lm_.model = load_model(args_.get("checkpoint"), &lm_.info, o);
  use_device_comms(lm_.grid, o.device, lm_.model->backend().stream(), ops::local_cuda_device());
}

double PlanSession::quality(const std::string& plan) {
  nlohmann::json& plans = cache_["plans"];
  if (plans.contains(plan)) return plans[plan]["nll"].get<double>();
  use_plan(plan);
  const PerplexityResult r = text_perplexity(*lm_.model, *tok_, read_file(calibration_, command_),
                                             calibration_, 0, 0, 8, {layers_}, false, true)
                                 .back();
  plans[plan] = {{"nll", r.mean_nll()}, {"ppl", r.ppl()}, {"tokens", r.tokens}};
  ++scored_;
  save_cache();
  return r.mean_nll();
}

double PlanSession::task_accuracy(const std::string& plan, const std::string& task) {
  const int64_t limit = args_.get_int("task-limit");
  nlohmann::json& seen = cache_["tasks"][cat(task, "|limit ", limit)];
  if (seen.is_object() && seen.contains(plan)) return seen[plan].get<double>();
  use_plan(plan);
  EvalOptions o;
  o.tasks = {task};
  o.limit = limit;
  o.eval_dir = default_eval_dir();
  o.progress = false;
  const TaskResult t = evaluate_tasks(*lm_.model, *tok_, o).front().front();
  const auto acc = std::find_if(t.metrics.begin(), t.metrics.end(),
                                [](const Metric& m) { return m.name == "acc"; });
  if (acc == t.metrics.end()) {
    std::vector<std::string> names;
    for (const Metric& m : t.metrics) names.push_back(m.name);
    fail(cat(command_, ": --budget ", task, "-P: task ", task, " reports no acc (",
             join(names, ", "), "); a task budget needs an accuracy"));
  }
  seen[plan] = acc->value;
  save_cache();
  return acc->value;
}

double PlanSession::workload_seconds(const std::string& plan, int repeat, int exit, int drafts) {
  use_plan(plan);
  GenerateOptions o;
  o.max_new_tokens = work_.generate;
  o.exit_layer = exit;
  o.speculations = exit > 0 ? drafts : 0;
  double best = 1e300;
  for (int r = -1; r < std::max(1, repeat); ++r) {  // r = -1: a warm-up run, untimed
    GenerateStats st;
    generate_batch(*lm_.model, prompts_, o, {}, &st);
    if (r >= 0) best = std::min(best, st.prefill_s + st.decode_s);
  }
  return agreed(lm_.grid, best);
}

double PlanSession::draft_acceptance(const std::string& plan, int exit) {
  const std::string key = cat(plan, "|exit ", exit, "|workload ", work_.to_string());
  nlohmann::json& seen = cache_["acceptance"];
  if (seen.is_object() && seen.contains(key)) return seen[key].get<double>();
  use_plan(plan);
  GenerateOptions o;
  o.max_new_tokens = work_.generate;
  o.exit_layer = exit;
  o.speculations = 1;
  GenerateStats st;
  generate_batch(*lm_.model, prompts_, o, {}, &st);
  seen[key] = st.acceptance();
  save_cache();
  return st.acceptance();
}

namespace {

// DIR/compute.json's phases when it was measured under `key` (this machine,
// processes, threads, workload); false when absent or measured otherwise.
bool read_compute(const std::string& path, const std::string& key, const std::string& command,
                  std::vector<PhaseCompute>& phases) {
  if (!fs::exists(path)) return false;
  const nlohmann::json j = nlohmann::json::parse(read_file(path, command), nullptr, false);
  if (j.is_discarded() || j.value("key", "") != key) return false;
  for (size_t i = 0; i < 2; ++i) {
    const nlohmann::json& p = j["phases"][i];
    phases[i] = {p["name"], p["attention"], p["mlp"], p["fixed"], p["rows"], p["passes"]};
  }
  log::info(command, ": compute per module from ", path, " (measured before)");
  return true;
}

nlohmann::json phase_json(const PhaseCompute& p) {
  return {{"name", p.name},   {"attention", p.attention}, {"mlp", p.mlp},
          {"fixed", p.fixed}, {"rows", p.rows},           {"passes", p.passes}};
}

}  // namespace

std::vector<PhaseCompute> PlanSession::profile(int repeat, const LinkModel& link) {
  const std::string key =
      cat(fingerprint_, "|", lm_.grid.world_size, "|", tp_, "|", work_.to_string(), "|",
          num_threads(), "|", args_.get("device"), "|", args_.get_int("link-delay-us"));
  const std::string path = out_ + "/compute.json";
  std::vector<PhaseCompute> phases(2);
  if (read_compute(path, key, command_, phases)) return phases;
  // Prefill and decode times of every layer without sums, and of none.
  auto times = [&](const std::string& plan) {
    use_plan(plan);
    GenerateOptions o;
    o.max_new_tokens = work_.generate;
    std::pair<double, double> best{1e300, 1e300};
    for (int r = -1; r < std::max(1, repeat); ++r) {  // r = -1: a warm-up run, untimed
      GenerateStats st;
      generate_batch(*lm_.model, prompts_, o, {}, &st);
      if (r >= 0) best = {std::min(best.first, st.prefill_s), std::min(best.second, st.decode_s)};
    }
    return std::pair<double, double>{agreed(lm_.grid, best.first), agreed(lm_.grid, best.second)};
  };
  const auto all = times(cat("nocomm*", layers_)), none = times(cat("skip*", layers_));
  const LlamaConfig& c = config();
  const double passes[2] = {double(work_.batch), double(work_.generate - 1)};
  const double rows[2] = {double(work_.prompt), double(work_.batch)};
  const double context[2] = {work_.prompt / 2.0, work_.prompt + work_.generate / 2.0};
  const double layer_s[2] = {std::max(0.0, all.first - none.first),
                             std::max(0.0, all.second - none.second)};
  const double fixed_s[2] = {none.first, none.second};
  const bool alone = !distributed();  // predict the tp degree's share
  nlohmann::json out = {{"key", key}, {"phases", nlohmann::json::array()}};
  for (int i = 0; i < 2; ++i) {
    const auto [fa, fm] = module_flops(c, context[i]);
    const double per_layer = layer_s[i] / passes[i] / layers_ / (alone ? tp_ : 1);
    PhaseCompute& p = phases[size_t(i)];
    p.name = i == 0 ? "prefill" : "decode";
    p.attention = per_layer * fa / (fa + fm);
    p.mlp = per_layer * fm / (fa + fm);
    // The head's logits (one row per prefill, B per decode step) gathered over the group.
    p.fixed =
        fixed_s[i] / passes[i] +
        (alone ? link.allgather(double(i == 0 ? 1 : work_.batch) * c.vocab_size * 4, tp_) : 0);
    p.rows = rows[i];
    p.passes = passes[i];
    out["phases"].push_back(phase_json(p));
  }
  if (root()) write_file_atomic(path, out.dump(1) + "\n");
  return phases;
}

LinkModel PlanSession::measure_link() {
  STRATA_CHECK(distributed(), command_,
               ": --link measured times the tp group's all-reduces: run under mpirun -np ", tp_,
               " (with --tp ", tp_, "), or give the link as BANDWIDTH,LATENCY (e.g. 10Gbit,20us)");
  Communicator& comm = lm_.link ? *lm_.link : *lm_.grid.tp_comm;
  const int64_t H = config().hidden_size;
  int64_t n1 = work_.batch * H, n2 = std::max<int64_t>(work_.prompt * H, 64 * n1);
  std::vector<float> buf(size_t(n2), 1.0f);
  auto time_of = [&](int64_t n) {
    for (int w = 0; w < 3; ++w) comm.allreduce_sum(buf.data(), n);
    std::vector<double> t;
    for (int k = 0; k < 15; ++k) {
      Timer timer;
      comm.allreduce_sum(buf.data(), n);
      t.push_back(timer.seconds());
    }
    std::nth_element(t.begin(), t.begin() + 7, t.end());
    return agreed(lm_.grid, t[7]);
  };
  const double t1 = time_of(n1), t2 = time_of(n2);
  const double k = 2.0 * (tp_ - 1) / tp_, b1 = 4.0 * n1, b2 = 4.0 * n2;
  LinkModel m;
  if (t2 > t1) {
    m.bandwidth = k * (b2 - b1) / (t2 - t1);
    m.latency = std::max(0.0, t1 - k * b1 / m.bandwidth);
  } else {
    m.latency = t1;  // no size dependence to see: latency alone
  }
  return m;
}

}  // namespace strata::cli
