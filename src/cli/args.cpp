#include "cli/args.h"

#include <algorithm>
#include <climits>
#include <cstdio>

#include "core/error.h"
#include "core/text.h"

namespace strata::cli {

Args& Args::option(const std::string& name, const std::string& metavar, const std::string& help,
                   const std::string& default_value) {
  opts_.push_back(Opt{name, metavar, help, default_value, false, false, false, {}});
  return *this;
}

Args& Args::repeated(const std::string& name, const std::string& metavar, const std::string& help) {
  opts_.push_back(Opt{name, metavar, help, "", false, false, true, {}});
  return *this;
}

Args& Args::flag(const std::string& name, const std::string& help) {
  opts_.push_back(Opt{name, "", help, "", true, false, false, {}});
  return *this;
}

Args& Args::positional(const std::string& name, const std::string& help, bool required) {
  pos_.push_back(Pos{name, help, required, "", false, false, {}});
  return *this;
}

Args& Args::positionals(const std::string& name, const std::string& help) {
  pos_.push_back(Pos{name, help, true, "", false, true, {}});
  return *this;
}

Args& Args::alias(const std::string& other, const std::string& name) {
  (void)find(name);
  aliases_.emplace_back(other, name);
  return *this;
}

Args& Args::checkpoint_option(const std::string& name) {
  checkpoint_pos_ = name;
  return option("checkpoint", "FILE", "the checkpoint, as <" + name + ">");
}

Args::Opt* Args::lookup(const std::string& name) {
  for (auto& o : opts_)
    if (o.name == name) return &o;
  for (const auto& [other, target] : aliases_)
    if (other == name)
      for (auto& o : opts_)
        if (o.name == target) return &o;
  std::string dashed = name;
  std::replace(dashed.begin(), dashed.end(), '_', '-');
  if (dashed != name)
    for (auto& o : opts_)
      if (o.name == dashed) return &o;
  return nullptr;
}

// " (did you mean --x?" for a name one or two edits from an option's, else "".
std::string Args::suggestion(const std::string& name) const {
  std::string best;
  size_t best_d = 3;
  const auto consider = [&](const std::string& n) {
    const size_t d = edit_distance(name, n);
    if (d < best_d && d * 3 <= std::max<size_t>(n.size(), 3)) {
      best_d = d;
      best = n;
    }
  };
  for (const auto& o : opts_) consider(o.name);
  for (const auto& a : aliases_) consider(a.first);
  if (name.size() > 2) consider("help");
  return best.empty() ? "" : "did you mean --" + best + "? ";
}

// --checkpoint fills its positional; the other arguments fill the rest.
void Args::assign_positionals(const std::vector<std::string>& plain) {
  const bool by_option = !checkpoint_pos_.empty() && find("checkpoint").given;
  size_t next_pos = 0;
  for (const std::string& a : plain) {
    while (next_pos < pos_.size() && by_option && pos_[next_pos].name == checkpoint_pos_)
      ++next_pos;
    STRATA_USAGE_CHECK(next_pos < pos_.size(), command_, ": unexpected argument '", a, "' (see ",
                       command_, " --help)");
    pos_[next_pos].value = a;
    pos_[next_pos].given = true;
    if (pos_[next_pos].variadic)
      pos_[next_pos].values.push_back(a);
    else
      ++next_pos;
  }
  if (by_option)
    for (auto& p : pos_)
      if (p.name == checkpoint_pos_) {
        p.value = find("checkpoint").value;
        p.given = true;
      }
}

bool Args::parse(int argc, char** argv, int first) {
  std::vector<std::string> plain;  // the positional arguments, in order
  for (int i = first; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      std::fputs(help().c_str(), stdout);
      return false;
    }
    if (a.rfind("--", 0) == 0) {
      std::string name = a.substr(2), value;
      bool inline_value = false;
      if (auto eq = name.find('='); eq != std::string::npos) {
        value = name.substr(eq + 1);
        name = name.substr(0, eq);
        inline_value = true;
      }
      Opt* opt = lookup(name);
      STRATA_USAGE_CHECK(opt, command_, ": unknown option '--", name, "' (", suggestion(name),
                         "see ", command_, " --help)");
      if (opt->is_flag) {
        STRATA_USAGE_CHECK(!inline_value, command_, ": option --", name, " takes no value");
        opt->given = true;
        continue;
      }
      if (!inline_value) {
        STRATA_USAGE_CHECK(i + 1 < argc, command_, ": option --", name, " needs a value (",
                           opt->metavar, ")");
        value = argv[++i];
      }
      opt->value = value;
      opt->given = true;
      if (opt->repeatable) opt->values.push_back(value);
      continue;
    }
    plain.push_back(a);
  }
  assign_positionals(plain);
  for (const auto& p : pos_)
    STRATA_USAGE_CHECK(!p.required || p.given, command_, ": missing argument <", p.name, "> (",
                       p.name == checkpoint_pos_ ? "or --checkpoint FILE; " : "", "see ", command_,
                       " --help)");
  return true;
}

const Args::Opt& Args::find(const std::string& name) const {
  for (const auto& o : opts_)
    if (o.name == name) return o;
  fail(cat(command_, ": internal error: no option --", name));
}

bool Args::has(const std::string& name) const {
  for (const auto& p : pos_)
    if (p.name == name) return p.given;
  return find(name).given;
}

std::string Args::get(const std::string& name) const {
  for (const auto& p : pos_)
    if (p.name == name) return p.value;
  return find(name).value;
}

std::vector<std::string> Args::get_all(const std::string& name) const {
  for (const auto& p : pos_)
    if (p.name == name)
      return p.variadic        ? p.values
             : p.value.empty() ? std::vector<std::string>{}
                               : std::vector{p.value};
  const Opt& o = find(name);
  if (o.repeatable) return o.values;
  return o.value.empty() ? std::vector<std::string>{} : std::vector{o.value};
}

int Args::get_int(const std::string& name) const {
  const std::string v = get(name);
  try {
    size_t used = 0;
    const long long x = std::stoll(v, &used);
    if (used == v.size()) {
      if (x < INT_MIN || x > INT_MAX)
        throw UsageError(
            cat(command_, ": --", name, " ", v, " is out of range (at most ", INT_MAX, ")"));
      return int(x);
    }
  } catch (const UsageError&) {
    throw;
  } catch (const std::out_of_range&) {
    throw UsageError(
        cat(command_, ": --", name, " ", v, " is out of range (at most ", INT_MAX, ")"));
  } catch (const std::exception&) {
  }
  throw UsageError(cat(command_, ": --", name, " expects an integer, got '", v, "'"));
}

double Args::get_double(const std::string& name) const {
  const std::string v = get(name);
  try {
    size_t used = 0;
    const double x = std::stod(v, &used);
    if (used == v.size()) return x;
  } catch (const std::exception&) {
  }
  throw UsageError(cat(command_, ": --", name, " expects a number, got '", v, "'"));
}

std::string Args::help() const {
  std::string out = "usage: " + command_;
  if (!opts_.empty()) out += " [options]";
  for (const auto& p : pos_)
    out += p.variadic   ? " <" + p.name + ">..."
           : p.required ? " <" + p.name + ">"
                        : " [" + p.name + "]";
  out += "\n\n" + summary_ + "\n";
  if (!pos_.empty()) {
    out += "\narguments:\n";
    for (const auto& p : pos_) {
      char line[256];
      std::snprintf(line, sizeof line, "  %-26s %s\n", p.name.c_str(), p.help.c_str());
      out += line;
    }
  }
  out += "\noptions:\n";
  for (const auto& o : opts_) {
    std::string lhs = "--" + o.name + (o.is_flag ? "" : " " + o.metavar);
    std::string rhs = o.help;
    for (const auto& [other, target] : aliases_)
      if (target == o.name) rhs += " (also --" + other + ")";
    if (o.repeatable) rhs += " (repeatable)";
    // One default per option: the help's own words where it gives one.
    if (!o.is_flag && !o.value.empty() && o.help.find("(default") == std::string::npos)
      rhs += " (default: " + o.value + ")";
    char line[512];
    std::snprintf(line, sizeof line, "  %-26s %s\n", lhs.c_str(), rhs.c_str());
    out += line;
  }
  out += "  --help                     show this help\n";
  return out;
}

int run_subcommand(const std::string& command, const std::string& usage,
                   const std::vector<Subcommand>& subs, int argc, char** argv, int first) {
  if (first >= argc || std::string(argv[first]) == "--help" || std::string(argv[first]) == "-h") {
    std::fputs(usage.c_str(), stdout);
    return first >= argc ? 2 : 0;
  }
  const std::string sub = argv[first];
  for (const Subcommand& s : subs)
    if (sub == s.name) return s.run(argc, argv, first + 1);
  throw UsageError(cat(command, ": unknown command '", sub, "' (see ", command, " --help)"));
}

bool parse_recipe_command(const std::string& command, const char* usage,
                          const std::vector<KeySpec>& schema, int argc, char** argv, int first,
                          RecipeCommand& out,
                          const std::function<bool(const std::string&, int&)>& own) {
  for (int i = first; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      std::fputs(usage, stdout);
      return false;
    }
    if (a == "--help-recipe") {
      std::fputs(schema_help(schema).c_str(), stdout);
      return false;
    }
    if (a == "--set") {
      STRATA_USAGE_CHECK(i + 1 < argc, command, ": --set needs section.key=value");
      out.sets.push_back(argv[++i]);
    } else if (a.rfind("--set=", 0) == 0) {
      out.sets.push_back(a.substr(6));
    } else if (a.rfind("--", 0) == 0 && a.find('.') != std::string::npos &&
               a.find('.') < a.find('=')) {
      // torchtitan's spelling: --section.key value, --section.key=value, or a
      // bare --section.key for true.
      const std::string key =
          a.substr(2, a.find('=') == std::string::npos ? std::string::npos : a.find('=') - 2);
      if (a.find('=') != std::string::npos)
        out.sets.push_back(a.substr(2));
      else if (i + 1 < argc && std::string(argv[i + 1]).rfind("--", 0) != 0)
        out.sets.push_back(key + "=" + argv[++i]);
      else
        out.sets.push_back(key + "=true");
    } else if (a.rfind("--", 0) == 0) {
      if (!own(a, i))
        throw UsageError(cat(command, ": unknown option '", a, "' (see ", command, " --help)"));
    } else {
      STRATA_USAGE_CHECK(out.recipe.empty(), command, ": more than one recipe given ('", out.recipe,
                         "', '", a, "')");
      out.recipe = a;
    }
  }
  STRATA_USAGE_CHECK(!out.recipe.empty(), command, ": missing <recipe.toml> (see ", command,
                     " --help)");
  return true;
}

Args& add_threads_option(Args& args) {
  return args.option("threads", "N", "OpenMP threads (0: OMP_NUM_THREADS or all cores)", "0");
}

}  // namespace strata::cli
