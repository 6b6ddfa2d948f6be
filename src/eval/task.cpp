// Evaluation tasks: eval/<name>.toml -> rendered loglikelihood requests.
//
// Loading runs in three steps, each of which may throw a one-line
// strata::Error naming the task file and line or the data file and line:
//   1. the task file is parsed and every key checked (type, allowed values,
//      whether the task's kind uses it, data files present): task_file.cpp;
//   2. the data files are read through the task's format adapter into rows
//      (JSON objects: one per JSONL line or CSV record; task_formats.cpp) and
//      each row is turned into an Item through the task's templates
//      (task_rows.cpp): its text, choices or per-choice contexts, target, gold;
//   3. every example (the first `limit`) gets its few-shot preamble and its
//      requests (this file). Few-shot examples are Items of the few-shot split.
//
// Request layout (lm-evaluation-harness): context = description + shots +
// text, each shot being `text + target_delimiter + answer + fewshot_delimiter`;
// the continuation of choice c is `target_delimiter + choice_c`, so it carries
// the leading space and contexts never end with the delimiter.
#include "eval/task.h"

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <unordered_map>

#include "core/error.h"
#include "core/philox.h"
#include "core/text.h"
#include "eval/task_file.h"
#include "eval/task_formats.h"
#include "eval/task_rows.h"

namespace strata {

using namespace task_internal;

namespace {

namespace fs = std::filesystem;

// Philox purpose word of few-shot sampling ("EVFS").
constexpr uint32_t kFewshotStream = 0x45564653u;

// One rendered example before few-shot assembly.
struct Item {
  std::string text;                  // context text (empty with per-choice contexts)
  std::vector<std::string> options;  // choices, or per-choice contexts
  std::string target;                // LastWord / partial scoring continuation
  int gold = 0;
  std::string group, where, description;
};

Item make_item(const Config& c, const Row& row) {
  Item it;
  it.group = row.group;
  it.where = row.where;
  if (c.description) it.description = c.description->render(row);
  if (c.text) it.text = c.text->render(row);
  if (c.target) it.target = c.target->render(row);
  if (c.kind == TaskKind::MultipleChoice) {
    it.options = c.contexts ? c.contexts->eval(row) : c.choices->eval(row);
    if (it.options.empty()) fail_one_line(row.where, ": no choices");
    it.gold = c.gold.eval(row);
    if (it.gold < 0 || size_t(it.gold) >= it.options.size())
      fail_one_line(row.where, ": gold ", it.gold, " out of range for ", it.options.size(),
                    c.contexts ? " contexts" : " choices");
  }
  return it;
}

// The item as a few-shot example: (question, answer); the shot's text is
// question + target_delimiter + answer.
std::pair<std::string, std::string> solved(const Config& c, const Item& it) {
  if (c.kind != TaskKind::MultipleChoice) return {it.text, it.target};
  if (c.contexts) return {it.options[size_t(it.gold)], it.target};
  return {it.text, it.options[size_t(it.gold)]};
}

}  // namespace

namespace task_internal {

// k distinct entries of `pool` (sorted indices), never `self`: the first k
// (first_n), or a partial Fisher-Yates shuffle driven by `rng`.
std::vector<int> draw_shots(const std::vector<int>& pool, int self, int k, bool first_n,
                            const PhiloxStream& rng) {
  std::vector<int> out;
  if (first_n) {
    for (int p : pool) {
      if (int(out.size()) == k) break;
      if (p != self) out.push_back(p);
    }
    return out;
  }
  // Positions of a virtual copy of `pool`; only swapped ones are stored.
  int64_t n = int64_t(pool.size());
  std::unordered_map<int64_t, int64_t> moved;
  auto at = [&](int64_t j) {
    const auto it = moved.find(j);
    return it == moved.end() ? j : it->second;
  };
  const auto self_it = std::lower_bound(pool.begin(), pool.end(), self);
  if (self >= 0 && self_it != pool.end() && *self_it == self) {
    const int64_t p = self_it - pool.begin();  // move self to the end, out of reach
    moved[p] = n - 1;
    moved[n - 1] = p;
    --n;
  }
  for (int j = 0; j < k; ++j) {
    const int64_t r = std::min(n - 1, j + int64_t(rng.uniform(uint64_t(j)) * double(n - j)));
    const int64_t vj = at(j), vr = at(r);
    moved[j] = vr;
    moved[r] = vj;
    out.push_back(pool[size_t(vr)]);
  }
  return out;
}

}  // namespace task_internal

std::vector<std::string> list_tasks(const std::string& eval_dir) {
  std::error_code ec;
  if (!fs::is_directory(eval_dir, ec))
    fail_one_line("task directory '", eval_dir, "': no such directory");
  std::vector<std::string> names;
  for (fs::directory_iterator it(eval_dir, ec), end; !ec && it != end; it.increment(ec))
    if (it->path().extension() == ".toml" && it->is_regular_file())
      names.push_back(it->path().stem().string());
  std::sort(names.begin(), names.end());
  return names;
}

std::string resolve_task(const std::string& eval_dir, const std::string& name) {
  const std::vector<std::string> known = list_tasks(eval_dir);
  if (std::find(known.begin(), known.end(), name) != known.end()) return name;
  for (const std::string& k : known)
    if (read_config((fs::path(eval_dir) / (k + ".toml")).string()).harness_task == name) return k;
  return "";
}

std::vector<std::string> resolve_tasks(const std::string& eval_dir,
                                       const std::vector<std::string>& names) {
  std::vector<std::string> out;
  for (const std::string& n : names) {
    const std::string r = n == "all" ? n : resolve_task(eval_dir, n);
    out.push_back(r.empty() ? n : r);
  }
  return out;
}

bool task_runs_code(const std::string& eval_dir, const std::string& name) {
  const std::vector<std::string> known = list_tasks(eval_dir);
  if (std::find(known.begin(), known.end(), name) == known.end()) return false;
  return !read_config((fs::path(eval_dir) / (name + ".toml")).string()).execute.empty();
}

std::vector<std::string> all_tasks(const std::string& eval_dir) {
  std::vector<std::string> out;
  for (const std::string& name : list_tasks(eval_dir)) {
    const Config c = read_config((fs::path(eval_dir) / (name + ".toml")).string());
    if (c.comparable && c.execute.empty()) out.push_back(name);
  }
  return out;
}

TaskData load_task(const std::string& eval_dir, const std::string& given, int shots, uint64_t seed,
                   int64_t limit) {
  const std::vector<std::string> known = list_tasks(eval_dir);
  const std::string name = resolve_task(eval_dir, given);
  if (name.empty())
    fail_one_line("unknown task '", given, "' (", eval_dir, " has: ", join(known, ", "), ")");
  const Config c = read_config((fs::path(eval_dir) / (name + ".toml")).string());

  TaskData task;
  task.name = name;
  task.description = c.summary;
  task.file = c.file;
  task.kind = c.kind;
  task.metrics = c.metrics;
  task.comparable = c.comparable;
  task.not_comparable_because = c.comparable_note;
  task.harness_task = c.harness_task;
  task.version = c.version;
  task.categories = c.categories;
  task.target_delimiter = c.target_delimiter;
  task.fewshot_delimiter = c.fewshot_delimiter;
  task.generation = c.generation;
  task.filters = c.filters;
  task.exact_match = c.exact_match;
  task.execute = c.execute;
  auto keep = [&](size_t n) { return limit > 0 ? std::min(n, size_t(limit)) : n; };

  if (c.kind == TaskKind::Perplexity) {
    for (const std::string& f : c.data)
      for (std::string& d : split_documents(c, f)) {
        // The harness counts the words and bytes of the page as stored, before
        // its detokenizer runs (wikitext's process_results).
        task.document_words.push_back(python_split_count(d));
        task.document_bytes.push_back(int64_t(d.size()));
        task.documents.push_back(c.detokenize_wikitext ? wikitext_detokenize(std::move(d))
                                                       : std::move(d));
      }
    if (task.documents.empty())
      fail_one_line(c.data_at, ": no documents (the text is empty or only whitespace)");
    task.available = int64_t(task.documents.size());
    task.documents.resize(keep(task.documents.size()));
    task.document_words.resize(task.documents.size());
    task.document_bytes.resize(task.documents.size());
    return task;  // no few-shot examples
  }

  std::vector<Item> items;
  for (const Row& r : read_rows(c, c.data, c.labels)) items.push_back(make_item(c, r));
  if (items.empty()) fail_one_line(c.data_at, ": no examples in the data");
  if (!c.categories.empty()) {  // every categorised group must exist (typos)
    std::set<std::string> groups;
    for (const Item& it : items) groups.insert(it.group);
    for (const auto& [g, category] : c.categories)
      if (!groups.count(g))
        fail_one_line(c.file, ": categories.", category, ": no group '", g, "' in the data");
  }
  const bool own_pool = c.fewshot_data.empty();
  std::vector<Item> pool_items;
  if (!own_pool)
    for (const Row& r : read_rows(c, c.fewshot_data, c.fewshot_labels))
      pool_items.push_back(make_item(c, r));
  const std::vector<Item>& pool = own_pool ? items : pool_items;

  std::map<std::string, std::vector<int>> pool_by_group;  // "" when ungrouped
  for (size_t i = 0; i < pool.size(); ++i) pool_by_group[pool[i].group].push_back(int(i));
  const std::vector<int> no_candidates;
  auto candidates = [&](const Item& it) -> const std::vector<int>& {
    const auto g = pool_by_group.find(it.group);
    return g == pool_by_group.end() ? no_candidates : g->second;
  };
  const size_t n = keep(items.size());
  task.available = int64_t(items.size());

  // More shots than some example has candidates for: as many as all have.
  task.shots = shots < 0 ? c.shots : shots;
  for (size_t i = 0; i < n && task.shots > 0; ++i) {
    const size_t available = candidates(items[i]).size() - (own_pool ? 1 : 0);
    if (available == 0)
      fail_one_line(
          c.file, ": no few-shot examples for ", items[i].where,
          items[i].group.empty() ? std::string() : cat(" (group '", items[i].group, "')"));
    task.shots = std::min(task.shots, int(available));
  }

  std::vector<std::optional<std::pair<std::string, std::string>>> solved_cache(pool.size());
  task.examples.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    const Item& it = items[i];
    EvalExample ex;
    std::string prefix = it.description;
    ex.description = it.description;
    if (task.shots > 0) {
      const int self = own_pool ? int(i) : -1;
      const PhiloxStream rng(seed, kFewshotStream, uint32_t(i));
      for (int s : draw_shots(candidates(it), self, task.shots, c.first_n, rng)) {
        auto& shot = solved_cache[size_t(s)];
        if (!shot) shot = solved(c, pool[size_t(s)]);
        prefix += shot->first + c.target_delimiter + shot->second + c.fewshot_delimiter;
        ex.shots.push_back(*shot);
      }
    }
    ex.prefix_size = prefix.size();
    ex.gold = it.gold;
    ex.group = it.group;
    ex.where = it.where;
    if (c.kind == TaskKind::MultipleChoice) ex.choices = it.options;
    if (c.kind == TaskKind::Generate) {
      ex.requests.push_back({prefix + it.text, ""});
      ex.target = it.target;
      ex.prompt = it.text;
    } else if (c.kind == TaskKind::LastWord) {
      ex.requests.push_back({prefix + it.text, c.target_delimiter + it.target});
    } else if (c.contexts) {
      for (const std::string& ctx : it.options)
        ex.requests.push_back({prefix + ctx, c.target_delimiter + it.target});
    } else {
      const std::string context = prefix + it.text;
      for (const std::string& choice : it.options)
        ex.requests.push_back({context, c.target_delimiter + choice});
    }
    task.examples.push_back(std::move(ex));
  }
  return task;
}

void apply_chat_template(TaskData& task, const ChatOptions& chat) {
  if (!chat.apply) return;
  const ChatTemplate& t = chat.tmpl;
  for (EvalExample& ex : task.examples) {
    for (LlRequest& r : ex.requests) {
      const std::string question = r.context.substr(ex.prefix_size);
      std::vector<ContextPiece> pieces;
      auto add = [&](const std::string& text) {
        if (!text.empty()) pieces.push_back({text, false});
      };
      // The system message: the instruction, then the task's description.
      std::string system = chat.system_instruction;
      if (!ex.description.empty())
        system += (system.empty() ? "" : task.fewshot_delimiter) + ex.description;
      if (!system.empty()) {
        add(t.system_prefix);
        add(system);
        add(t.system_suffix);
      }
      if (chat.fewshot_as_multiturn) {
        for (const auto& [q, a] : ex.shots) {
          add(t.user_prefix);
          add(q);
          add(t.user_suffix);
          add(t.assistant_prefix);
          add(a);
          add(t.assistant_suffix);
          pieces.push_back({"", true});
        }
        add(t.user_prefix);
        add(question);
        add(t.user_suffix);
      } else {
        add(t.user_prefix);
        add(r.context.substr(ex.description.size()));  // the shots and the question
        add(t.user_suffix);
      }
      add(t.assistant_prefix);
      r.pieces = std::move(pieces);
      r.context.clear();
      for (const ContextPiece& p : r.pieces) r.context += p.eos ? "</s>" : p.text;
      // The answer starts the assistant's turn: no delimiter before it.
      if (r.continuation.starts_with(task.target_delimiter))
        r.continuation.erase(0, task.target_delimiter.size());
    }
    if (!ex.requests.empty()) ex.prefix_size = 0;
  }
}

}  // namespace strata
