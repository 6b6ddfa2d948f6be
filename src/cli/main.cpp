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
  const char* summary;
  int (*run)(int, char**, int);
};

const Command kCommands[] = {
    {"train", "train a model from a TOML recipe (pretraining, continual pretraining, SFT)",
     strata::cli::cmd_train},
    {"generate",
     "generate text: KV cache, sampling, batches of prompts, early exit, self-speculative "
     "decoding",
     strata::cli::cmd_generate},
    {"eval", "benchmark tasks and perplexity, at the full model or every exit layer",
     strata::cli::cmd_eval},
    {"lp", "Layer Parallelism: where to pair layers (lp scan: perplexity of every range)",
     strata::cli::cmd_lp},
    {"spd", "SPD (Sync-Point Drop): block-wise sync sensitivity and the SPD budget (spd scan)",
     strata::cli::cmd_spd},
    {"report",
     "an HTML page comparing runs: loss, validation, lr, throughput, per-exit curves, eval "
     "tables, recipes side by side (--png: the charts as pictures)",
     strata::cli::cmd_report},
    {"inspect", "print a checkpoint's config, plan, parameter count, step and data position",
     strata::cli::cmd_inspect},
    {"tokenizer", "train, encode or decode with a tokenizer (.model, tokenizer.json)",
     strata::cli::cmd_tokenizer},
    {"data", "tokenise text or JSONL into token shards (data prepare)", strata::cli::cmd_data},
    {"convert", "import models: Hugging Face safetensors or llama2.c -> strata checkpoint",
     strata::cli::cmd_convert},
    {"export", "export a checkpoint as a Hugging Face Llama directory", strata::cli::cmd_export},
    {"bench",
     "benchmarks: per-op throughput (bench ops), training steps (bench model), generation "
     "(bench generate)",
     strata::cli::cmd_bench},
    {"info", "build configuration, threads, CPU features, GEMM library, CUDA devices",
     strata::cli::cmd_info},
};

void print_help() {
  std::printf(
      "usage: strata <command> [options]\n\n"
      "strata trains, evaluates and serves Llama-style models on CPU (and CUDA).\n\n"
      "commands:\n");
  for (const auto& c : kCommands) std::printf("  %-10s %s\n", c.name, c.summary);
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
