// Subcommands of the `strata` executable. Each takes the full argv and the
// index of its first own argument, and returns the process exit code.
#pragma once

namespace strata::cli {

int cmd_info(int argc, char** argv, int first);
int cmd_bench(int argc, char** argv, int first);
int bench_generate(int argc, char** argv, int first);  // cli/bench_generate.cpp
int bench_comm(int argc, char** argv, int first);      // cli/bench_comm.cpp
int cmd_train(int argc, char** argv, int first);       // cli/train.cpp
int cmd_generate(int argc, char** argv, int first);    // cli/generate.cpp
int cmd_inspect(int argc, char** argv, int first);     // cli/inspect.cpp
int cmd_tokenizer(int argc, char** argv, int first);   // cli/tokenizer_cmd.cpp
int cmd_data(int argc, char** argv, int first);        // cli/data_cmd.cpp
int cmd_convert(int argc, char** argv, int first);     // cli/convert.cpp
int cmd_export(int argc, char** argv, int first);      // cli/convert.cpp
int cmd_eval(int argc, char** argv, int first);        // cli/eval_cmd.cpp
int cmd_lp(int argc, char** argv, int first);          // cli/lp_cmd.cpp
int cmd_spd(int argc, char** argv, int first);         // cli/spd_cmd.cpp

// Applies --threads (0 = keep OMP_NUM_THREADS / all cores).
void apply_threads(int threads);

// Prints the machine a benchmark runs on: CPU model and instruction sets, the
// kernel level, the build's -march and the thread count (cli/info.cpp).
void print_bench_machine();

}  // namespace strata::cli
