// The `strata` command: dispatches to subcommands, prints one-line errors.
#include <cerrno>
#include <cstdio>
#include <cstring>

#include <malloc.h>
#include <exception>
#include <filesystem>
#include <new>
#include <string>

#include "cli/commands.h"
#include "core/error.h"
#include "core/signals.h"
#include "core/text.h"
#include "core/threads.h"
#include "parallel/grid.h"

namespace {

struct Command {
  const char* name;
  const char* subcommands;  // "" when it has none
  const char* summary;
  int (*run)(int, char**, int);
};

// Each command with its subcommands, as the top-level help lists them.
const Command kCommands[] = {
    {"train", "", "train a model from a TOML recipe (pretraining, continual pretraining, SFT)",
     strata::cli::cmd_train},
    {"generate", "",
     "generate text: KV cache, sampling, batches of prompts, early exit, self-speculative "
     "decoding",
     strata::cli::cmd_generate},
    {"eval", "", "benchmark tasks and perplexity, at the full model or every exit layer",
     strata::cli::cmd_eval},
    {"lp", "scan|merge", "Layer Parallelism: perplexity of every pairable range; averaged layers",
     strata::cli::cmd_lp},
    {"spd", "[scan]",
     "SPD (Sync-Point Drop): Algorithm 1 from a recipe; the block sensitivity scan alone",
     strata::cli::cmd_spd},
    {"plan", "search",
     "the fastest layer plan (Ladder, SPD, LP, skips combined) for a tp degree, link and "
     "workload within a perplexity budget: the Pareto front",
     strata::cli::cmd_plan},
    {"report", "",
     "an HTML page comparing runs: loss, validation, lr, throughput, per-exit curves, eval "
     "tables, recipes side by side (--png: the charts as pictures)",
     strata::cli::cmd_report},
    {"inspect", "", "a checkpoint's config, plan, parameter count, step and data position",
     strata::cli::cmd_inspect},
    {"tokenizer", "train|encode|decode",
     "sentencepiece training; encoding and decoding with a .model or tokenizer.json",
     strata::cli::cmd_tokenizer},
    {"data", "prepare", "tokenise text or JSONL into token shards", strata::cli::cmd_data},
    {"convert", "hf|llama2c|plan|weights",
     "Hugging Face or llama2.c models in; a new layer plan; the weights alone",
     strata::cli::cmd_convert},
    {"export", "hf", "a checkpoint as a Hugging Face Llama directory", strata::cli::cmd_export},
    {"bench", "peak|ops|model|train|generate|comm",
     "the machine's limits, per-op rates, training steps, generation, collectives",
     strata::cli::cmd_bench},
    {"info", "", "build configuration, threads, CPU features, GEMM library, CUDA devices",
     strata::cli::cmd_info},
};

void print_help() {
  std::printf(
      "usage: strata <command> [options]\n\n"
      "strata trains, evaluates and serves Llama-style models on CPU (and CUDA).\n\n"
      "commands:\n");
  // "  name subs" then the summary, wrapped at 100 columns under column 13.
  constexpr size_t kWidth = 100, kIndent = 13;
  for (const auto& c : kCommands) {
    std::string head = std::string("  ") + c.name;
    if (*c.subcommands) head += std::string(" ") + c.subcommands;
    std::string line = head.size() + 1 <= kIndent ? head + std::string(kIndent - head.size(), ' ')
                                                  : head + "\n" + std::string(kIndent, ' ');
    size_t col = line.size() - (line.rfind('\n') == std::string::npos ? 0 : line.rfind('\n') + 1);
    const std::string summary = c.summary;
    size_t i = 0;
    bool first_word = true;
    while (i < summary.size()) {
      size_t j = summary.find(' ', i);
      if (j == std::string::npos) j = summary.size();
      const std::string word = summary.substr(i, j - i);
      if (!first_word && col + 1 + word.size() > kWidth) {
        line += "\n" + std::string(kIndent, ' ');
        col = kIndent;
      } else if (!first_word) {
        line += ' ';
        ++col;
      }
      line += word;
      col += word.size();
      first_word = false;
      i = j + 1;
    }
    std::printf("%s\n", line.c_str());
  }
  std::printf(
      "\noptions:\n"
      "  --help     show this help (also: strata <command> --help)\n"
      "  --version  print the version\n");
}

// Runs a command and turns what it throws into one `strata: error:` line and
// the exit status: 2 for usage errors, 1 for the rest. In a multi-process job
// the other ranks may be waiting in a collective: the whole job is ended
// rather than left to hang.
int run_command(const Command& c, int argc, char** argv) {
  auto fail_with = [](const std::string& msg, int status) {
    strata::abort_job_if_distributed(msg);
    std::fprintf(stderr, "strata: error: %s\n", msg.c_str());
    return status;
  };
  try {
    const int rc = c.run(argc, argv, 2);
    strata::finalize_mpi();
    // What a command printed must have reached its destination: a full disk
    // or `> /dev/full` is a failure, not a silent loss of the output.
    if (std::fflush(stdout) != 0 || std::ferror(stdout))
      return fail_with(strata::cat("writing the output failed: ", std::strerror(errno)), 1);
    return rc;
  } catch (const strata::UsageError& e) {
    return fail_with(e.what(), 2);
  } catch (const strata::Error& e) {
    return fail_with(e.what(), 1);
  } catch (const std::filesystem::filesystem_error& e) {
    // A path that cannot be created or written (read-only, too long, a
    // file where a directory should be): the user's to fix, so not an
    // internal error. Paths are shortened: the message stays one line.
    std::string msg =
        strata::one_line(strata::shorten(e.path1().string()) + ": " + e.code().message());
    if (!e.path2().empty())
      msg += strata::one_line(" (and " + strata::shorten(e.path2().string()) + ")");
    return fail_with(msg, 1);
  } catch (const std::bad_alloc&) {
    // Name what grew when it is known (a file being read), not the model.
    if (const std::string doing = strata::Activity::unwound(); !doing.empty())
      return fail_with("out of memory while " + doing + ": an allocation failed", 1);
    return fail_with(
        "out of memory: an allocation failed (use a smaller model, micro-batch or sequence "
        "length, or a machine with more memory)",
        1);
  } catch (const std::exception& e) {
    strata::abort_job_if_distributed(std::string("internal error: ") + e.what());
    std::fprintf(stderr, "strata: internal error: %s\n", e.what());
    return 1;
  }
}

}  // namespace

int main(int argc, char** argv) {
  // First of all: on a busy machine, start again with passive OpenMP waiting
  // (core/threads.h); a launcher's processes share the node's CPUs.
  strata::settle_threads(argv);
  // Before OpenMP or MPI start threads: SIGINT / SIGTERM go to a
  // thread of their own (core/signals.h).
  strata::start_signal_thread();
  // Keep freed blocks of up to 32 MiB (GEMM packing buffers, per-call
  // scratch) in the heap instead of returning them to the kernel and taking
  // them back zero-filled on the next call: 3% of a 12L-768 training step was
  // the kernel clearing such pages. Larger blocks are strata's own long-lived
  // arenas and workspaces.
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 256 << 20);
  if (argc < 2) {
    std::fprintf(stderr, "strata: error: no command given (see strata --help)\n");
    return 2;
  }
  if (!std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h") ||
      !std::strcmp(argv[1], "help")) {
    print_help();
    return 0;
  }
  if (!std::strcmp(argv[1], "--version")) {
    std::printf("strata %s\n", STRATA_VERSION);
    return 0;
  }
  for (const auto& c : kCommands)
    if (std::strcmp(argv[1], c.name) == 0) return run_command(c, argc, argv);
  std::fprintf(stderr, "strata: error: unknown command '%s' (see strata --help)\n", argv[1]);
  return 2;
}
