// Per-sample logs of evaluation tasks (--log-samples), in
// lm-evaluation-harness's sample fields, one JSONL file per task and exit;
// and --write-out's first rendered example.
#pragma once

#include <string>
#include <vector>

#include "eval/engine.h"
#include "eval/generate_until.h"
#include "eval/task.h"

namespace strata {

// DIR/samples_<task>.jsonl, or samples_<task>_exit<E>.jsonl with several exits.
std::string samples_path(const std::string& dir, const std::string& task, size_t exit_index,
                         const std::vector<int>& exits);

// Per-sample log of a multiple-choice or last-word task at one exit, in
// lm-evaluation-harness's sample fields: doc_id, doc (what strata keeps of
// the source row), target, arguments (the rendered context and continuation
// of each request), resps / filtered_resps ([loglikelihood, is_greedy] per
// request), filter, metrics, the sha256 doc/prompt/target hashes, and the
// example's metric values. One JSON object per line, written atomically.
void write_samples(const std::string& path, const TaskData& task,
                   const std::vector<LlResult>& results);

// Per-sample log of a perplexity task at one exit, in the harness's fields
// for loglikelihood_rolling: the document's loglikelihood in resps, and per
// metric the (loglikelihood, weight) pair the harness aggregates (words for
// word_perplexity, bytes for byte_perplexity and bits_per_byte), plus the
// token count strata's token_perplexity uses.
void write_rolling_samples(const std::string& path, const TaskData& task,
                           const std::vector<std::vector<RollingResult>>& per_doc, size_t exit);

// Per-sample log of a generate_until task: the request with its generation
// settings, the raw and filtered answer, the metric (and the sandbox's verdict).
void write_generate_samples(const std::string& path, const TaskData& task, const Generated& g);

// --write-out: the first example's requests as the model sees them, on stdout.
void write_out_first(const TaskData& task);

}  // namespace strata
