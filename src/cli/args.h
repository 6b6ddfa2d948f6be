// A small command-line parser for strata's subcommands: long options with a
// value (--name VALUE or --name=VALUE), flags, positionals, generated --help.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "train/recipe.h"

namespace strata::cli {

class Args {
 public:
  Args(std::string command, std::string summary)
      : command_(std::move(command)), summary_(std::move(summary)) {}

  Args& option(const std::string& name, const std::string& metavar, const std::string& help,
               const std::string& default_value = "");
  // An option that may be given several times (--input a --input b);
  // get_all() returns the values in order, get() the last one.
  Args& repeated(const std::string& name, const std::string& metavar, const std::string& help);
  Args& flag(const std::string& name, const std::string& help);
  Args& positional(const std::string& name, const std::string& help, bool required = true);
  // The last positional, taking every remaining argument (at least one);
  // get_all() returns them.
  Args& positionals(const std::string& name, const std::string& help);
  // Another name for option `name` (lm-evaluation-harness's spellings on
  // `eval`); help lists it beside the option. Underscores and dashes are the
  // same in every option name without one (--batch_size is --batch-size).
  Args& alias(const std::string& other, const std::string& name);
  // The checkpoint positional `name` may also be given as --checkpoint FILE,
  // as the commands that take no positional checkpoint name it.
  Args& checkpoint_option(const std::string& name);

  // Parses argv[first..argc). Returns false when --help was given (help has
  // been printed). Throws strata::Error on unknown options or missing values.
  bool parse(int argc, char** argv, int first);

  bool has(const std::string& name) const;  // flag set, or option given explicitly
  std::string get(const std::string& name) const;
  // Every value of a repeated option; for other options, the value when it is
  // non-empty (given or default), else nothing.
  std::vector<std::string> get_all(const std::string& name) const;
  int get_int(const std::string& name) const;
  double get_double(const std::string& name) const;
  std::string help() const;

 private:
  struct Opt {
    std::string name, metavar, help, value;
    bool is_flag = false, given = false;
    bool repeatable = false;
    std::vector<std::string> values;  // repeatable options: every value given
  };
  struct Pos {
    std::string name, help;
    bool required;
    std::string value;
    bool given = false;
    bool variadic = false;
    std::vector<std::string> values;  // variadic: every argument
  };
  const Opt& find(const std::string& name) const;
  Opt* lookup(const std::string& name);  // by name, alias or dash spelling
  std::string suggestion(const std::string& name) const;
  void assign_positionals(const std::vector<std::string>& plain);
  std::string command_, summary_;
  std::vector<Opt> opts_;
  std::vector<Pos> pos_;
  std::vector<std::pair<std::string, std::string>> aliases_;  // other -> name
  std::string checkpoint_pos_;  // the positional --checkpoint stands for
};

// --threads N (OpenMP threads; 0 keeps OMP_NUM_THREADS or all cores), the
// option of every command that computes; apply_threads (cli/commands.h)
// applies it.
Args& add_threads_option(Args& args);

// A command made of subcommands (`strata lp scan ...`): prints `usage` for
// --help / -h (status 0) or when no subcommand is given (status 2), runs the
// named one with the arguments after it, and fails with one line naming an
// unknown one.
struct Subcommand {
  const char* name;
  int (*run)(int argc, char** argv, int first);
};
int run_subcommand(const std::string& command, const std::string& usage,
                   const std::vector<Subcommand>& subs, int argc, char** argv, int first);

// A command that runs a recipe (`strata train`, `strata spd`):
//   strata <cmd> <recipe.toml> [--set section.key=value ...] [own options]
// --help prints `usage`, --help-recipe the schema's keys (both: false is
// returned, status 0). `own(arg, i)` takes the command's other options (it may
// advance i past a value) and returns false for an unknown one.
struct RecipeCommand {
  std::string recipe;
  std::vector<std::string> sets;
};
bool parse_recipe_command(const std::string& command, const char* usage,
                          const std::vector<KeySpec>& schema, int argc, char** argv, int first,
                          RecipeCommand& out,
                          const std::function<bool(const std::string&, int&)>& own);

}  // namespace strata::cli
