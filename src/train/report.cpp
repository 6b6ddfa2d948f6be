#include "train/report.h"

#include <toml++/toml.h>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "core/error.h"
#include "core/file.h"
#include "core/text.h"
#include "train/run.h"

namespace strata {
namespace {

namespace fs = std::filesystem;

std::string html_escape(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '&':
        out += "&amp;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string fmt(double v, int digits = 4) {
  if (!std::isfinite(v)) return "-";
  char b[48];
  if (std::abs(v) >= 1e5 || (v != 0 && std::abs(v) < 1e-3))
    std::snprintf(b, sizeof b, "%.*g", digits, v);
  else
    std::snprintf(b, sizeof b, "%.*f", std::abs(v) >= 100 ? 1 : digits, v);
  return b;
}

std::string duration(double s) {
  char b[48];
  if (s >= 3600)
    std::snprintf(b, sizeof b, "%dh%02dm", int(s / 3600), int(std::fmod(s, 3600) / 60));
  else
    std::snprintf(b, sizeof b, "%dm%02ds", int(s / 60), int(std::fmod(s, 60)));
  return b;
}

void flatten(const nlohmann::json& j, const std::string& prefix,
             std::map<std::string, double>& out) {
  for (const auto& [k, v] : j.items()) {
    const std::string key = prefix.empty() ? k : prefix + "/" + k;
    if (v.is_number())
      out[key] = v.get<double>();
    else if (v.is_object())
      flatten(v, key, out);
  }
}

std::string id_of(const std::string& s) {
  std::string out;
  for (char c : s) out += std::isalnum(uint8_t(c)) || c == '-' || c == '.' ? c : '_';
  return out;
}

// Every "section.key = value" of a recipe, values in TOML syntax.
std::map<std::string, std::string> flatten_recipe(const std::string& text,
                                                  const std::string& where) {
  std::map<std::string, std::string> out;
  if (text.empty()) return out;
  toml::table t;
  try {
    t = toml::parse(text, where);
  } catch (const toml::parse_error& e) {
    throw Error(cat(where, ": not valid TOML (", one_line(std::string(e.description())), ")"));
  }
  std::function<void(const toml::table&, const std::string&)> walk =
      [&](const toml::table& tab, const std::string& prefix) {
        for (const auto& [k, v] : tab) {
          const std::string key =
              prefix.empty() ? std::string(k.str()) : prefix + "." + std::string(k.str());
          if (const toml::table* sub = v.as_table()) {
            walk(*sub, key);
          } else {
            std::ostringstream os;
            v.visit([&](const auto& node) { os << node; });
            out[key] = os.str();
          }
        }
      };
  walk(t, "");
  return out;
}

// The series of one metric over steps.
std::vector<std::pair<double, double>> series_of(const RunLog& r, const std::string& key) {
  std::vector<std::pair<double, double>> pts;
  for (const auto& [step, row] : r.rows) {
    auto it = row.find(key);
    if (it != row.end() && std::isfinite(it->second)) pts.emplace_back(double(step), it->second);
  }
  return pts;
}

std::vector<int> exits_of(const RunLog& r) {
  std::set<int> exits;
  for (const auto& [step, row] : r.rows)
    for (const auto& [k, v] : row)
      if (k.rfind("exit_loss/", 0) == 0) exits.insert(std::atoi(k.c_str() + 10));
  return {exits.begin(), exits.end()};
}

const char* kCss = R"(body{font-family:sans-serif;margin:24px;color:#222;max-width:1560px}
h1{font-size:22px;margin-bottom:4px}h2{font-size:18px;margin-top:32px;border-bottom:1px solid #ccc}
.meta{color:#555;font-size:13px}code,pre{font-family:monospace;font-size:12px}
table{border-collapse:collapse;font-size:13px;margin:8px 0}
th,td{border:1px solid #ccc;padding:3px 8px;text-align:right;vertical-align:top}
th{background:#f3f3f3}td.l,th.l{text-align:left}tr.diff td{background:#fff6d6}
.charts{display:flex;flex-wrap:wrap;gap:12px}.chart{border:1px solid #e3e3e3}
.swatch{display:inline-block;width:12px;height:12px;margin-right:6px;vertical-align:middle}
.recipes{display:flex;flex-wrap:wrap;gap:12px}.recipes pre{background:#f7f7f7;padding:8px;
border:1px solid #e3e3e3;max-height:420px;overflow:auto;min-width:320px})";

}  // namespace

RunLog load_run_log(const std::string& dir) {
  RunLog r;
  r.dir = dir;
  STRATA_CHECK(fs::is_directory(dir), "report: ", dir, ": not a directory");
  r.name = fs::path(dir).lexically_normal().filename().string();
  if (r.name.empty() || r.name == ".")
    r.name = fs::absolute(dir).lexically_normal().parent_path().filename().string();
  const std::string path = (fs::path(dir) / "metrics.jsonl").string();
  STRATA_CHECK(fs::exists(path), "report: ", dir,
               ": no metrics.jsonl (not a strata run directory, or the run has not logged yet)");
  const std::string text = read_file(path, "metrics");
  size_t pos = 0;
  int line_no = 0;
  while (pos < text.size()) {
    const size_t end = text.find('\n', pos);
    const bool torn = end == std::string::npos;
    const std::string line = text.substr(pos, torn ? std::string::npos : end - pos);
    pos = torn ? text.size() : end + 1;
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& e) {
      if (torn) {  // a run still writing its last line
        r.warnings.push_back(cat(path, ":", line_no, ": incomplete last line skipped"));
        break;
      }
      throw Error(cat(path, ":", line_no, ": not JSON (", one_line(e.what()), ")"));
    }
    STRATA_CHECK(j.is_object() && j.contains("step") && j["step"].is_number_integer(), path, ":",
                 line_no, ": expected a JSON object with an integer \"step\"");
    std::map<std::string, double>& row = r.rows[j["step"].get<int64_t>()];
    std::map<std::string, double> flat;
    flatten(j, "", flat);
    flat.erase("step");
    for (auto& [k, v] : flat) row[k] = v;
  }
  const fs::path recipe = fs::path(dir) / "recipe.toml";
  if (fs::exists(recipe)) r.recipe = read_file(recipe.string(), "recipe");
  return r;
}

EvalLog load_eval_log(const std::string& spec) {
  EvalLog e;
  const size_t eq = spec.find('=');
  e.path = eq == std::string::npos ? spec : spec.substr(eq + 1);
  e.label = eq == std::string::npos ? fs::path(e.path).stem().string() : spec.substr(0, eq);
  STRATA_CHECK(fs::exists(e.path), "report: ", e.path, ": no such evaluation file");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(read_file(e.path, "evaluation results"));
  } catch (const nlohmann::json::exception& x) {
    throw Error(cat(e.path, ": not JSON (", one_line(x.what()), ")"));
  }
  STRATA_CHECK(j.is_object(), e.path, ": expected a JSON object (strata eval --out)");
  e.checkpoint = j.value("checkpoint", std::string());
  if (e.checkpoint.empty() && j.contains("config") && j["config"].is_object())
    e.checkpoint = j["config"].value("model_args", std::string());
  // strata layout, tasks: results[task].metrics[name] = {value, stderr}.
  auto tasks = [&](const nlohmann::json& res, std::map<std::string, EvalValue>& out) {
    for (const auto& [task, t] : res.items()) {
      if (!t.is_object() || !t.contains("metrics")) continue;
      for (const auto& [m, v] : t["metrics"].items())
        if (v.is_object() && v.contains("value") && v["value"].is_number())
          out[task + "/" + m] = {
              v["value"].get<double>(),
              v.contains("stderr") && v["stderr"].is_number() ? v["stderr"].get<double>() : -1};
    }
  };
  // strata layout, perplexity of a file: ppl, nll, word_perplexity, bits_per_byte.
  auto ppl = [&](const nlohmann::json& r, std::map<std::string, EvalValue>& out) {
    const std::string task =
        "perplexity:" + fs::path(j.value("perplexity_file", "")).filename().string();
    for (const char* m : {"ppl", "nll", "word_perplexity", "bits_per_byte"})
      if (r.contains(m) && r[m].is_number()) out[task + "/" + m] = {r[m].get<double>(), -1};
  };
  const bool lm_eval = j.contains("results") && j.contains("versions");
  if (lm_eval) {
    // lm-evaluation-harness layout: results[task]["acc,none"], ["acc_stderr,none"];
    // strata writes exit E's results under "task_exitE".
    for (const auto& [key, t] : j["results"].items()) {
      if (!t.is_object()) continue;
      std::string task = key;
      int exit = 0;
      const size_t at = key.rfind("_exit");
      if (at != std::string::npos && at + 5 < key.size() &&
          key.find_first_not_of("0123456789", at + 5) == std::string::npos)
        task = key.substr(0, at), exit = std::atoi(key.c_str() + at + 5);
      std::map<std::string, EvalValue>& out = exit ? e.per_exit[exit] : e.final;
      for (const auto& [mk, v] : t.items()) {
        if (!v.is_number()) continue;
        const std::string m = mk.substr(0, mk.find(','));
        if (m.size() > 7 && m.compare(m.size() - 7, 7, "_stderr") == 0)
          out[task + "/" + m.substr(0, m.size() - 7)].stderr_ = v.get<double>();
        else
          out[task + "/" + m].value = v.get<double>();
      }
    }
    if (e.final.empty() && !e.per_exit.empty()) e.final = e.per_exit.rbegin()->second;
  } else if (j.contains("results")) {
    tasks(j["results"], e.final);
    if (j.contains("per_exit"))
      for (const auto& [ex, r] : j["per_exit"].items()) tasks(r, e.per_exit[std::atoi(ex.c_str())]);
  } else if (j.contains("perplexity_file")) {
    ppl(j, e.final);
    if (j.contains("per_exit"))
      for (const auto& [ex, r] : j["per_exit"].items()) ppl(r, e.per_exit[std::atoi(ex.c_str())]);
  }
  STRATA_CHECK(!e.final.empty(), e.path,
               ": no results found (expected the output of strata eval --out: \"results\" or "
               "\"perplexity_file\")");
  return e;
}

Report build_report(const std::vector<RunLog>& runs, const std::vector<EvalLog>& evals,
                    const std::string& command) {
  Report rep;
  auto run_color = [](size_t i) { return palette_color(i); };
  // One chart of a metric over steps, a series per run that logged it.
  auto metric_chart = [&](const std::string& id, const std::string& key, const std::string& title,
                          const std::string& y_label, bool log_y = false) {
    SvgChart c;
    c.title = title, c.x_label = "step", c.y_label = y_label, c.log_y = log_y;
    for (size_t i = 0; i < runs.size(); ++i) {
      auto pts = series_of(runs[i], key);
      if (pts.empty()) continue;
      if (log_y)
        pts.erase(std::remove_if(pts.begin(), pts.end(), [](auto& p) { return p.second <= 0; }),
                  pts.end());
      c.series.push_back({runs[i].name, std::move(pts)});
      c.colors.push_back(run_color(i));
    }
    if (!c.series.empty()) rep.charts.push_back({id, std::move(c)});
  };
  metric_chart("loss", "loss", "Training loss", "loss");
  metric_chart("val_loss", "val_loss", "Validation loss", "val_loss");
  metric_chart("lr", "lr", "Learning rate", "lr");
  metric_chart("tokens_per_s", "tokens_per_s", "Throughput", "tokens/s");
  metric_chart("grad_norm", "grad_norm", "Gradient norm (before clipping)", "grad norm", true);
  // LayerSkip: each run's per-exit training losses, and the last values by exit.
  SvgChart by_exit;
  by_exit.title = "Per-exit training loss at the last logged step";
  by_exit.x_label = "exit layer";
  by_exit.y_label = "loss";
  for (size_t i = 0; i < runs.size(); ++i) {
    const std::vector<int> exits = exits_of(runs[i]);
    if (exits.empty()) continue;
    SvgChart c;
    c.title = "Per-exit training loss: " + runs[i].name;
    c.x_label = "step", c.y_label = "loss at the exit";
    SvgSeries last{runs[i].name, {}};
    for (int e : exits) {
      auto pts = series_of(runs[i], "exit_loss/" + std::to_string(e));
      if (pts.empty()) continue;
      last.points.emplace_back(e, pts.back().second);
      c.series.push_back({"exit " + std::to_string(e), std::move(pts)});
    }
    rep.charts.push_back({"exit_loss_" + id_of(runs[i].name), std::move(c)});
    by_exit.series.push_back(std::move(last));
    by_exit.colors.push_back(run_color(i));
  }
  if (!by_exit.series.empty()) rep.charts.push_back({"exit_loss_last", std::move(by_exit)});
  // Task metrics logged during training (eval.tasks): "eval/<task>/<metric>".
  std::set<std::string> eval_keys;
  for (const RunLog& r : runs)
    for (const auto& [step, row] : r.rows)
      for (const auto& [k, v] : row)
        if (k.rfind("eval/", 0) == 0 && k.find("stderr") == std::string::npos) eval_keys.insert(k);
  for (const std::string& k : eval_keys)
    metric_chart(id_of(k), k, "In-training evaluation: " + k.substr(5), k.substr(5));
  // Evaluation files: a metric by exit layer, a series per file.
  std::set<std::string> exit_metrics;
  for (const EvalLog& e : evals)
    for (const auto& [exit, ms] : e.per_exit)
      for (const auto& [m, v] : ms) exit_metrics.insert(m);
  // Perplexity and accuracy first: the figures a by-exit study is read by.
  std::vector<std::string> ordered(exit_metrics.begin(), exit_metrics.end());
  auto rank = [](const std::string& m) {
    const std::string leaf = m.substr(m.rfind('/') + 1);
    return leaf == "ppl" ? 0 : leaf == "acc" ? 1 : leaf == "acc_norm" ? 2 : 3;
  };
  std::stable_sort(ordered.begin(), ordered.end(),
                   [&](const std::string& a, const std::string& b) { return rank(a) < rank(b); });
  for (const std::string& m : ordered) {
    SvgChart c;
    c.title = "By exit layer: " + m;
    c.x_label = "exit layer", c.y_label = m.substr(m.rfind('/') + 1);
    c.log_y = m.find("ppl") != std::string::npos || m.find("perplexity") != std::string::npos;
    for (size_t i = 0; i < evals.size(); ++i) {
      SvgSeries s{evals[i].label, {}};
      for (const auto& [exit, ms] : evals[i].per_exit) {
        auto it = ms.find(m);
        if (it != ms.end()) s.points.emplace_back(exit, it->second.value);
      }
      if (s.points.empty()) continue;
      c.series.push_back(std::move(s));
      c.colors.push_back(palette_color(i));
    }
    rep.charts.push_back({"eval_by_exit_" + id_of(m), std::move(c)});
  }

  // Two charts side by side on a 1500-pixel-wide window.
  for (ReportChart& c : rep.charts) c.chart.width = 700, c.chart.height = 400;

  // ---- the page
  std::string h = "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n<title>";
  std::string names;
  for (const RunLog& r : runs) names += (names.empty() ? "" : ", ") + r.name;
  h += html_escape("strata report: " + (names.empty() ? std::string("evaluations") : names));
  h += "</title>\n<style>" + std::string(kCss) + "</style></head><body>\n";
  h += "<h1>strata report</h1>\n<p class=\"meta\">" +
       html_escape(
           cat(runs.size(), " run(s), ", evals.size(), " evaluation file(s); made by ", command)) +
       "</p>\n";
  if (!runs.empty()) {
    h += "<h2 id=\"summary\">Runs</h2>\n<table><tr><th class=\"l\">run</th><th class=\"l\">"
         "directory</th><th>last step</th><th>tokens</th><th>last loss</th><th>last val_loss</th>"
         "<th>best val_loss (step)</th><th>mean tokens/s</th><th>wall time</th></tr>\n";
    for (size_t i = 0; i < runs.size(); ++i) {
      const RunLog& r = runs[i];
      const auto loss = series_of(r, "loss"), val = series_of(r, "val_loss"),
                 tps = series_of(r, "tokens_per_s"), tokens = series_of(r, "tokens"),
                 wall = series_of(r, "elapsed_s");
      double best = NAN, best_step = 0, mean_tps = 0;
      for (const auto& [s, v] : val)
        if (!(v >= best)) best = v, best_step = s;
      for (const auto& [s, v] : tps) mean_tps += v / double(tps.size());
      h += "<tr><td class=\"l\"><span class=\"swatch\" style=\"background:" + run_color(i) +
           "\"></span>" + html_escape(r.name) + "</td><td class=\"l\"><code>" + html_escape(r.dir) +
           "</code></td><td>" + (r.rows.empty() ? "-" : std::to_string(r.rows.rbegin()->first)) +
           "</td><td>" + (tokens.empty() ? "-" : human_count(tokens.back().second)) + "</td><td>" +
           (loss.empty() ? "-" : fmt(loss.back().second)) + "</td><td>" +
           (val.empty() ? "-" : fmt(val.back().second)) + "</td><td>" +
           (val.empty() ? "-" : fmt(best) + " (" + std::to_string(int64_t(best_step)) + ")") +
           "</td><td>" + (tps.empty() ? "-" : fmt(mean_tps, 0)) + "</td><td>" +
           (wall.empty() ? "-" : duration(wall.back().second)) + "</td></tr>\n";
    }
    h += "</table>\n";
    for (const RunLog& r : runs)
      for (const std::string& w : r.warnings) h += "<p class=\"meta\">" + html_escape(w) + "</p>\n";
  }
  if (!rep.charts.empty()) {
    h += "<h2 id=\"charts\">Charts</h2>\n<div class=\"charts\">\n";
    for (const ReportChart& c : rep.charts)
      h += "<figure class=\"chart\" id=\"chart-" + c.id + "\" style=\"margin:0\">" +
           render_svg(c.chart) + "</figure>\n";
    h += "</div>\n";
  }
  if (!evals.empty()) {
    h += "<h2 id=\"evaluations\">Evaluations</h2>\n<table><tr><th class=\"l\">file</th>"
         "<th class=\"l\">checkpoint</th></tr>\n";
    for (size_t i = 0; i < evals.size(); ++i)
      h += "<tr><td class=\"l\"><span class=\"swatch\" style=\"background:" + palette_color(i) +
           "\"></span>" + html_escape(evals[i].label) + " <code>" + html_escape(evals[i].path) +
           "</code></td><td class=\"l\"><code>" + html_escape(evals[i].checkpoint) +
           "</code></td></tr>\n";
    h += "</table>\n";
    auto value_cell = [](const std::map<std::string, EvalValue>& ms, const std::string& m) {
      auto it = ms.find(m);
      if (it == ms.end()) return std::string("<td>-</td>");
      return "<td>" + fmt(it->second.value) +
             (it->second.stderr_ >= 0 ? " &plusmn; " + fmt(it->second.stderr_) : "") + "</td>";
    };
    std::set<std::string> metrics;
    for (const EvalLog& e : evals)
      for (const auto& [m, v] : e.final) metrics.insert(m);
    h += "<table><tr><th class=\"l\">task / metric</th>";
    for (const EvalLog& e : evals) h += "<th>" + html_escape(e.label) + "</th>";
    h += "</tr>\n";
    for (const std::string& m : metrics) {
      h += "<tr><td class=\"l\">" + html_escape(m) + "</td>";
      for (const EvalLog& e : evals) h += value_cell(e.final, m);
      h += "</tr>\n";
    }
    h += "</table>\n";
    for (const EvalLog& e : evals) {
      if (e.per_exit.empty()) continue;
      std::set<std::string> ms;
      for (const auto& [exit, vals] : e.per_exit)
        for (const auto& [m, v] : vals) ms.insert(m);
      h += "<p>" + html_escape(e.label) + " by exit layer:</p>\n<table><tr><th>exit</th>";
      for (const std::string& m : ms) h += "<th>" + html_escape(m) + "</th>";
      h += "</tr>\n";
      for (const auto& [exit, vals] : e.per_exit) {
        h += "<tr><td>" + std::to_string(exit) + "</td>";
        for (const std::string& m : ms) h += value_cell(vals, m);
        h += "</tr>\n";
      }
      h += "</table>\n";
    }
  }
  if (!runs.empty()) {
    std::vector<std::map<std::string, std::string>> flat;
    std::set<std::string> keys;
    for (const RunLog& r : runs) {
      flat.push_back(flatten_recipe(r.recipe, r.dir + "/recipe.toml"));
      for (const auto& [k, v] : flat.back()) keys.insert(k);
    }
    h += "<h2 id=\"recipes\">Recipes</h2>\n";
    if (runs.size() > 1) {
      std::string rows_diff, rows_same;
      for (const std::string& k : keys) {
        const auto first = flat[0].find(k);
        bool same = first != flat[0].end();
        for (const auto& f : flat) {
          const auto it = f.find(k);
          same = same && it != f.end() && it->second == first->second;
        }
        std::string row = "<tr" + std::string(same ? "" : " class=\"diff\"") +
                          "><td class=\"l\"><code>" + html_escape(k) + "</code></td>";
        for (const auto& f : flat)
          row +=
              "<td class=\"l\"><code>" + (f.count(k) ? html_escape(f.at(k)) : "") + "</code></td>";
        row += "</tr>\n";
        (same ? rows_same : rows_diff) += row;
      }
      h += "<p>Settings that differ first (highlighted), then those the runs share.</p>\n"
           "<table><tr><th class=\"l\">setting</th>";
      for (const RunLog& r : runs) h += "<th class=\"l\">" + html_escape(r.name) + "</th>";
      h += "</tr>\n" + rows_diff + rows_same + "</table>\n";
    }
    h += "<div class=\"recipes\">\n";
    for (const RunLog& r : runs)
      h += "<div><p><b>" + html_escape(r.name) + "</b> <code>recipe.toml</code></p><pre>" +
           (r.recipe.empty() ? "(no recipe.toml)" : html_escape(r.recipe)) + "</pre></div>\n";
    h += "</div>\n";
  }
  h += "</body></html>\n";
  rep.html = std::move(h);
  return rep;
}

}  // namespace strata
