// `strata inspect <checkpoint.h5>`: what a checkpoint holds — run state (step,
// tokens seen, data position), model config, layer plan, parameter count,
// optimizer and tokenizer — as text or as one JSON object; and whether it
// loads: every tensor's checksum and values, and metadata no loadable
// checkpoint has. A problem is listed after the summary, and the command then
// ends with one error line and exit status 1.
#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/args.h"
#include "cli/commands.h"
#include "core/error.h"
#include "core/text.h"
#include "io/checkpoint.h"
#include "io/checkpoint_check.h"
#include "model/config.h"

namespace strata::cli {
namespace {

// 8339488 -> "8.34M".
std::string human_count(int64_t n) {
  char buf[32];
  if (n >= 1'000'000'000)
    std::snprintf(buf, sizeof buf, "%.2fB", double(n) / 1e9);
  else if (n >= 1'000'000)
    std::snprintf(buf, sizeof buf, "%.2fM", double(n) / 1e6);
  else if (n >= 1'000)
    std::snprintf(buf, sizeof buf, "%.2fK", double(n) / 1e3);
  else
    std::snprintf(buf, sizeof buf, "%" PRId64, n);
  return buf;
}

// 4096000 -> "4,096,000".
std::string grouped(int64_t n) {
  std::string digits = std::to_string(n < 0 ? -n : n), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return n < 0 ? "-" + out : out;
}

std::string human_bytes(int64_t n) {
  char buf[48];
  if (n >= (int64_t(1) << 20))
    std::snprintf(buf, sizeof buf, "%.2f MiB", double(n) / double(1 << 20));
  else if (n >= 1024)
    std::snprintf(buf, sizeof buf, "%.1f KiB", double(n) / 1024.0);
  else
    std::snprintf(buf, sizeof buf, "%" PRId64 " bytes", n);
  return buf;
}

// 10000 -> "10000", 1e6 -> "1000000", 0.5 -> "0.5".
std::string number_str(double x) {
  char buf[48];
  if (std::fabs(x) < 1e15 && x == std::floor(x))
    std::snprintf(buf, sizeof buf, "%.0f", x);
  else
    std::snprintf(buf, sizeof buf, "%g", x);
  return buf;
}

std::string shape_str(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

// A JSON value as it reads on a line: strings without quotes, numbers grouped.
std::string value_str(const nlohmann::json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_number_integer()) return grouped(v.get<int64_t>());
  return v.dump();
}

// {"epoch":0,"position":1234} -> "epoch 0, position 1,234".
std::string object_str(const nlohmann::json& v) {
  if (!v.is_object()) return value_str(v);
  std::string out;
  for (const auto& [k, x] : v.items()) out += (out.empty() ? "" : ", ") + k + " " + value_str(x);
  return out.empty() ? "{}" : out;
}

struct Summary {
  std::string file;
  int64_t version = 0;
  std::string created, plan, recipe;
  nlohmann::json config, state;
  LlamaConfig cfg;
  std::vector<std::pair<std::string, std::vector<int64_t>>> tensors;
  int64_t parameters = 0;
  std::string params_dtype;
  bool has_optimizer = false;
  int64_t optimizer_step = 0;
  std::string optimizer_kind;
  int64_t optimizer_tensors = 0;
  bool has_tokenizer = false;
  int64_t tokenizer_bytes = 0;
  std::string tokenizer_sha256;
  bool has_checksums = false, verified = false;
  TensorVerdict tensor_verdict;
  std::vector<std::string> problems;  // tensors', then the metadata's
};

Summary load(const std::string& path, bool verify) {
  CheckpointReader r(path);
  Summary s;
  s.file = path;
  s.version = r.version();
  s.created = r.created();
  s.config = r.config();
  s.cfg = LlamaConfig::from_json(s.config, "checkpoint " + path + ": config");
  s.plan = r.plan();
  s.recipe = r.recipe();
  s.state = r.state();
  s.tensors = r.list("params");
  s.params_dtype = r.params_dtype();
  for (const auto& [name, shape] : s.tensors) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    s.parameters += n;
  }
  s.has_optimizer = r.has_optimizer();
  if (s.has_optimizer) {
    s.optimizer_step = r.optimizer_step();
    s.optimizer_kind = r.optimizer_kind();
    s.optimizer_tensors = int64_t(r.list("optimizer/exp_avg").size());
  }
  s.has_tokenizer = r.has_tokenizer();
  if (s.has_tokenizer) {
    s.tokenizer_bytes = r.tokenizer_size();
    s.tokenizer_sha256 = r.tokenizer_sha256();
  }
  s.has_checksums = r.has_checksums();
  s.verified = verify;
  if (verify) s.tensor_verdict = verify_tensors(r);
  s.problems = s.tensor_verdict.problems;
  for (std::string& p :
       metadata_problems(s.cfg, s.plan, s.state, s.tensors, s.has_optimizer, s.optimizer_step))
    s.problems.push_back(std::move(p));
  return s;
}

// "CRC-32C, all 63 tensors match (values finite)" and the like.
std::string checksums_str(const Summary& s) {
  if (!s.verified) return "not verified (--no-verify)";
  const TensorVerdict& v = s.tensor_verdict;
  const std::string stored =
      s.has_checksums ? "CRC-32C" : "none stored (written before strata stored them)";
  if (v.verified == v.tensors)
    return cat(stored, s.has_checksums ? ", all " : "; all ", v.tensors,
               s.has_checksums ? " tensors match (values finite)" : " tensors read, values finite");
  return cat(stored, "; ", v.tensors - v.verified, " of ", v.tensors, " tensors ",
             v.tensors - v.verified == 1 ? "fails" : "fail", " (see problems)");
}

nlohmann::json to_json(const Summary& s) {
  const LlamaConfig& c = s.cfg;
  nlohmann::json j;
  j["file"] = s.file;
  j["format"] = "strata-checkpoint";
  j["version"] = s.version;
  j["created"] = s.created;
  for (const char* key : {"run_name", "step", "tokens_seen", "loader"})
    if (s.state.is_object() && s.state.contains(key)) j[key] = s.state[key];
  j["state"] = s.state;
  j["model"] = {{"layers", c.num_hidden_layers},
                {"hidden_size", c.hidden_size},
                {"num_attention_heads", c.num_attention_heads},
                {"num_key_value_heads", c.num_key_value_heads},
                {"head_dim", c.head_dim},
                {"intermediate_size", c.intermediate_size},
                {"vocab_size", c.vocab_size},
                {"tie_word_embeddings", c.tie_word_embeddings},
                {"rope_theta", c.rope_theta}};
  j["config"] = s.config;
  j["plan"] = s.plan;
  j["parameters"] = s.parameters;
  j["params_dtype"] = s.params_dtype;
  j["parameters_human"] = human_count(s.parameters);
  j["num_tensors"] = s.tensors.size();
  nlohmann::json tensors = nlohmann::json::array();
  for (const auto& [name, shape] : s.tensors) tensors.push_back({{"name", name}, {"shape", shape}});
  j["tensors"] = tensors;
  j["optimizer"] = s.has_optimizer ? nlohmann::json{{"kind", s.optimizer_kind},
                                                    {"step", s.optimizer_step},
                                                    {"tensors", s.optimizer_tensors}}
                                   : nlohmann::json(nullptr);
  j["tokenizer"] =
      s.has_tokenizer ? nlohmann::json{{"bytes", s.tokenizer_bytes}, {"sha256", s.tokenizer_sha256}}
                      : nlohmann::json(nullptr);
  j["recipe"] = s.recipe;
  j["checksums"] = s.verified ? nlohmann::json{{"stored", s.has_checksums ? "crc32c" : ""},
                                               {"tensors", s.tensor_verdict.tensors},
                                               {"sound", s.tensor_verdict.verified}}
                              : nlohmann::json(nullptr);
  j["problems"] = s.problems;
  return j;
}

void print_text(const Summary& s, bool tensors, bool recipe) {
  const LlamaConfig& c = s.cfg;
  auto line = [](const char* key, const std::string& value) {
    std::printf("%-14s %s\n", key, value.c_str());
  };
  line("checkpoint:", s.file);
  line("format:", cat("strata-checkpoint v", s.version));
  if (!s.created.empty()) line("created:", s.created);
  const nlohmann::json& st = s.state;
  if (st.is_object()) {
    if (st.contains("run_name")) line("run:", value_str(st["run_name"]));
    if (st.contains("step"))
      line("step:", st["step"].is_string() ? st["step"].get<std::string>() : st["step"].dump());
    if (st.contains("tokens_seen")) line("tokens seen:", value_str(st["tokens_seen"]));
    if (st.contains("loader")) line("data:", object_str(st["loader"]));
    std::string other;
    for (const auto& [k, v] : st.items()) {
      if (k == "run_name" || k == "step" || k == "tokens_seen" || k == "loader") continue;
      std::string text = v.is_object() || v.is_array() ? v.dump() : value_str(v);
      if (text.size() > 60) text = text.substr(0, 57) + "...";
      other += (other.empty() ? "" : "; ") + k + " " + text;
    }
    if (!other.empty()) line("state:", other);
  } else {
    line("state:", st.dump());
  }
  line("model:", cat(c.num_hidden_layers, c.num_hidden_layers == 1 ? " layer" : " layers",
                     ", hidden ", c.hidden_size, ", heads ", c.num_attention_heads, " (kv ",
                     c.num_key_value_heads, "), head_dim ", c.head_dim, ", intermediate ",
                     c.intermediate_size, ", vocab ", c.vocab_size, ", ",
                     c.tie_word_embeddings ? "tied" : "untied", " embeddings, rope_theta ",
                     number_str(c.rope_theta), c.attention_bias ? ", attention bias" : ""));
  line("plan:", s.plan.empty() ? "(none)" : s.plan);
  line("parameters:", cat(human_count(s.parameters), " (", grouped(s.parameters), " in ",
                          s.tensors.size(), " tensors, ", s.params_dtype, ")"));
  line("optimizer:", s.has_optimizer
                         ? cat(s.optimizer_kind.empty() ? "present" : s.optimizer_kind, ", step ",
                               s.optimizer_step, " (", s.optimizer_tensors, " tensors)")
                         : "none");
  line("tokenizer:", s.has_tokenizer
                         ? cat(human_bytes(s.tokenizer_bytes), ", sha256 ", s.tokenizer_sha256)
                         : "none");
  line("recipe:", s.recipe.empty() ? "(none)"
                                   : cat(human_bytes(int64_t(s.recipe.size())),
                                         recipe ? "" : " (--recipe prints it)"));
  line("checksums:", checksums_str(s));
  if (tensors) {
    std::printf("\ntensors:\n");
    size_t width = 0;
    for (const auto& t : s.tensors) width = std::max(width, t.first.size());
    for (const auto& [name, shape] : s.tensors)
      std::printf("  %-*s %s\n", int(width), name.c_str(), shape_str(shape).c_str());
  }
  if (recipe && !s.recipe.empty()) {
    std::printf("\nrecipe (resolved):\n%s", s.recipe.c_str());
    if (s.recipe.back() != '\n') std::printf("\n");
  }
}

// The problems after the summary, then one error line (exit status 1).
void report_problems(const Summary& s, bool json) {
  if (s.problems.empty()) return;
  if (!json) {
    std::printf("\nproblems:\n");
    for (const std::string& p : s.problems) std::printf("  %s\n", p.c_str());
  }
  fail_one_line("checkpoint ", s.file, ": ", s.problems.front(),
                s.problems.size() > 1
                    ? cat(" (and ", s.problems.size() - 1, " more problems: see the output)")
                    : std::string());
}

// --compare: every tensor of /params and of the optimizer moments in both
// files, as float32. A tensor's difference is ||a - b|| / ||a|| (the L2
// norms over its elements: the relative error of the tensor as a whole); the
// largest elementwise |a - b| is shown beside it. Prints the largest per
// group and the tensors over `rtol`; returns whether every one is within it.
bool compare(const std::string& a_path, const std::string& b_path, double rtol,
             double moments_rtol) {
  const CheckpointReader a(a_path), b(b_path);
  bool ok = true;
  for (const char* group : {"params", "optimizer/exp_avg", "optimizer/exp_avg_sq"}) {
    const double tol = std::string(group) == "params" ? rtol : moments_rtol;
    const bool in_a = std::string(group) == "params" || a.has_optimizer();
    const bool in_b = std::string(group) == "params" || b.has_optimizer();
    if (!in_a && !in_b) continue;
    STRATA_CHECK(in_a && in_b, (in_a ? b_path : a_path), ": has no optimizer state (",
                 (in_a ? a_path : b_path), " has)");
    const auto ta = a.list(group), tb = b.list(group);
    std::map<std::string, std::vector<int64_t>> shapes_b(tb.begin(), tb.end());
    STRATA_CHECK(ta.size() == tb.size(), a_path, " has ", ta.size(), " tensors in /", group, ", ",
                 b_path, " ", tb.size());
    double worst = 0;
    std::string worst_name;
    int over = 0;
    for (const auto& [name, shape] : ta) {
      const auto it = shapes_b.find(name);
      STRATA_CHECK(it != shapes_b.end(), b_path, ": no tensor /", group, "/", name);
      STRATA_CHECK(it->second == shape, b_path, ": /", group, "/", name, " has shape ",
                   shape_str(it->second), ", ", a_path, " ", shape_str(shape));
      int64_t n = 1;
      for (int64_t d : shape) n *= d;
      std::vector<float> x(static_cast<size_t>(n)), y(static_cast<size_t>(n));
      a.read(group, {TensorRef{name, shape, x.data()}});
      b.read(group, {TensorRef{name, shape, y.data()}});
      double diff2 = 0, norm2 = 0, most = 0;
      for (int64_t i = 0; i < n; ++i) {
        const double d = double(x[size_t(i)]) - double(y[size_t(i)]);
        diff2 += d * d;
        norm2 += double(x[size_t(i)]) * double(x[size_t(i)]);
        most = std::max(most, std::fabs(d));
      }
      double rel = diff2 == 0 ? 0 : norm2 > 0 ? std::sqrt(diff2 / norm2) : INFINITY;
      if (std::isnan(rel)) rel = INFINITY;
      if (rel > tol) {
        std::printf("  /%s/%s: ||a - b|| / ||a|| = %.3g (largest |a - b| %.3g)\n", group,
                    name.c_str(), rel, most);
        ++over;
      }
      if (rel > worst || worst_name.empty()) worst = rel, worst_name = name;
    }
    std::printf("/%s: %zu tensors, largest relative difference %.3g (%s)%s\n", group, ta.size(),
                worst, worst_name.c_str(),
                over ? cat("; ", over, " over ", tol).c_str() : cat(", within ", tol).c_str());
    ok = ok && over == 0;
  }
  return ok;
}

}  // namespace

int cmd_inspect(int argc, char** argv, int first) {
  Args args("strata inspect",
            "Prints what a checkpoint holds: step, tokens seen and data position, the model "
            "config, layer plan, parameter count, optimizer state and tokenizer; and checks "
            "that it loads: every tensor against its checksum, and metadata no loadable "
            "checkpoint has (a problem is listed after the summary, and the exit status is 1).");
  args.positional("ckpt.h5", "an HDF5 checkpoint (.h5)").checkpoint_option("ckpt.h5");
  args.flag("tensors", "list every parameter tensor with its shape");
  args.flag("recipe", "print the stored resolved recipe");
  args.flag("json", "print one JSON object (everything, including tensors and recipe)");
  args.flag("no-verify",
            "do not read the tensors (by default each is checked against its checksum and for "
            "non-finite values, which reads the whole file)");
  args.option("compare", "OTHER",
              "compare every weight and optimizer moment with checkpoint OTHER (e.g. the same run "
              "at another parallel layout): exits 1 when a tensor a and its counterpart b have "
              "||a - b|| > rtol ||a|| (L2 norms over the tensor)");
  args.option("rtol", "R", "tolerance of --compare, relative to each tensor's norm", "1e-6");
  args.option("moments-rtol", "R",
              "the same for the optimizer moments (gradient statistics, which carry summation "
              "order more than the weights do; default: --rtol)");
  if (!args.parse(argc, argv, first)) return 0;
  if (args.has("compare")) {
    const double rtol = args.get_double("rtol");
    STRATA_CHECK(std::isfinite(rtol) && rtol >= 0, "strata inspect: --rtol must be >= 0, got ",
                 args.get("rtol"));
    const double mtol = args.has("moments-rtol") ? args.get_double("moments-rtol") : rtol;
    STRATA_CHECK(std::isfinite(mtol) && mtol >= 0,
                 "strata inspect: --moments-rtol must be >= 0, got ", args.get("moments-rtol"));
    return compare(args.get("ckpt.h5"), args.get("compare"), rtol, mtol) ? 0 : 1;
  }
  const Summary s = load(args.get("ckpt.h5"), !args.has("no-verify"));
  if (args.has("json")) {
    std::printf("%s\n",
                to_json(s).dump(2, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  } else {
    print_text(s, args.has("tensors"), args.has("recipe"));
  }
  report_problems(s, args.has("json"));
  return 0;
}

}  // namespace strata::cli
