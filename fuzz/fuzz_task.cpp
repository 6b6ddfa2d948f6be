// Fuzz target: evaluation tasks (a task TOML and its data files: JSONL, CSV,
// PIQA labels, plain text), as `strata eval --tasks <name> --task-dir <dir>`
// and [eval] tasks during training load them (src/cli/eval_cmd.cpp,
// src/eval/evaluate.cpp).
//
// Input: parts (fuzz_util.h) written into a task directory as task.toml and
// the data files d_1, d_2, d_3, d_4 (the seeds' TOML names them; "d_*" globs
// them, grouped by file as "d"). The task is loaded as `strata eval` does:
// listed (all_tasks, task_runs_code), then load_task with its default shots,
// again with 2 shots and a limit, and rendered with the chat template.
#include <cstdint>
#include <string>
#include <vector>

#include "eval/task.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace strata;
  using namespace strata::fuzz;
  static const char* const kNames[] = {"task.toml", "d_1", "d_2", "d_3", "d_4"};
  const std::vector<std::string> parts = split_parts(data, size, 5);
  const Scratch& scratch = Scratch::get();
  scratch.clear();
  for (size_t i = 0; i < parts.size(); ++i) scratch.write(kNames[i], parts[i]);
  const std::string& dir = scratch.dir();
  guarded([&] { (void)all_tasks(dir); });
  guarded([&] { (void)task_runs_code(dir, "task"); });
  guarded([&] {
    TaskData t = load_task(dir, "task", -1, 1234, 0);
    for (const EvalExample& ex : t.examples) {
      if (t.kind == TaskKind::MultipleChoice)
        check(ex.gold >= 0 && size_t(ex.gold) < ex.choices.size(), "gold out of range");
      for (const LlRequest& r : ex.requests)
        check(ex.prefix_size <= r.context.size(), "prefix longer than the context");
    }
    check(t.documents.size() == t.document_words.size() &&
              t.documents.size() == t.document_bytes.size(),
          "document counts disagree");
  });
  guarded([&] {
    TaskData t = load_task(dir, "task", 2, 7, 3);
    ChatOptions chat;
    chat.apply = true;
    chat.system_instruction = "Answer the question.";
    chat.fewshot_as_multiturn = true;
    apply_chat_template(t, chat);
  });
  return 0;
}
