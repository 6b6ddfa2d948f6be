// An evaluation task's file, eval/<name>.toml (keys: eval/README.md), read
// and checked into a Config: every key's type, allowed values and whether the
// task's kind uses it ("did you mean" for unknown keys), data files present,
// templates and regexes compiled. Errors are one line naming file:line.
// Internal to the eval layer (eval/task.cpp loads tasks from it).
#pragma once

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "eval/task.h"
#include "eval/task_rows.h"

namespace strata::task_internal {

// The data formats (format = ...) and how perplexity text splits into
// documents (split = ...): eval/task_formats.h reads them.
enum class Format { Jsonl, Csv, Piqa, HellaswagOriginal, Text };
enum class Split { File, Paragraph, Wikitext, Separator };

// A task file as read: every key, checked, with its default filled in.
struct Config {
  std::string file;  // the TOML file
  std::string summary;
  TaskKind kind = TaskKind::MultipleChoice;
  Format format = Format::Jsonl;
  std::vector<std::string> data, fewshot_data;
  std::string labels, fewshot_labels;
  std::string data_at;  // "<file>:<line>: data" for errors
  bool first_n = false;
  int shots = 0;
  std::optional<Template> description, text, target;
  std::optional<ListSpec> choices, contexts;
  GoldSpec gold;
  std::string target_delimiter = " ", fewshot_delimiter = "\n\n";
  std::string group_by;  // "", "file" or a field path
  std::vector<std::pair<std::string, std::string>> strip_prefix;
  // field -> (suffix, replacement) pairs; each row's field must end in one.
  std::vector<std::pair<std::string, std::vector<std::pair<std::string, std::string>>>>
      replace_suffix;
  std::vector<std::string> metrics;
  bool comparable = true;
  std::string comparable_note, harness_task;
  int version = 0;
  std::map<std::string, std::string> categories;  // group -> category
  GenerationSpec generation;
  std::vector<FilterStep> filters;
  ExactMatchSpec exact_match;
  std::string execute;
  Split split = Split::File;
  std::string separator;
  bool detokenize_wikitext = false;
};

// Reads and checks the task file at `path`.
Config read_config(const std::string& path);

}  // namespace strata::task_internal
