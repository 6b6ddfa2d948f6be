// The data formats of evaluation tasks: JSONL, CSV (RFC 4180), PIQA (JSONL
// plus a labels file), original HellaSwag (the harness's derived fields and
// clean-up) and text (documents for perplexity tasks, split by file,
// paragraph, WikiText article or a separator; the harness's WikiText
// detokenizer). Errors are one line naming the data file and line.
// Internal to the eval layer (eval/task.cpp).
#pragma once

#include <string>
#include <vector>

#include "eval/task_file.h"
#include "eval/task_rows.h"

namespace strata::task_internal {

// A JSONL file's objects, one row per non-blank line; a CSV file's records
// (RFC 4180, first record the header) as objects of strings; another
// delimiter (a tab), or quotes read as plain characters (quoting = false).
std::vector<Row> read_jsonl(const std::string& path);
std::vector<Row> read_csv(const std::string& path, char delimiter = ',', bool quoting = true);

// All rows of one split (`files`, and PIQA's `labels` file) through the
// task's format adapter, with strip_prefix, replace_suffix and group_by
// applied.
std::vector<Row> read_rows(const Config& c, const std::vector<std::string>& files,
                           const std::string& labels);

// The documents of a perplexity task's text file, as its split key says
// (blank documents dropped, CRLF read as LF).
std::vector<std::string> split_documents(const Config& c, const std::string& path);

// The harness's wikitext_detokenizer, rule for rule.
std::string wikitext_detokenize(std::string s);

}  // namespace strata::task_internal
