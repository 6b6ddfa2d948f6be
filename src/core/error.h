// Errors: one exception type carrying a one-line message that names the file,
// field or line at fault. The CLI prints it as "strata: error: <message>" and
// exits non-zero.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace strata {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& msg) : std::runtime_error(msg) {}
};

// A command line that cannot be run as given (unknown option, missing or
// malformed argument): the CLI exits with status 2 instead of 1.
class UsageError : public Error {
 public:
  explicit UsageError(const std::string& msg) : Error(msg) {}
};

// Concatenates any streamable values into one string.
template <typename... Args>
std::string cat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}

[[noreturn]] void fail(const std::string& msg);

// What the process is doing while it may allocate a lot ("reading perplexity
// big.txt"), for the out-of-memory message. unwound(): the innermost one an
// exception left (the exception's own activity, for the handler in main), or
// "". Per thread.
class Activity {
 public:
  explicit Activity(std::string what);
  ~Activity();
  Activity(const Activity&) = delete;
  Activity& operator=(const Activity&) = delete;
  static std::string unwound();

 private:
  std::string what_;
  const Activity* outer_;
  int uncaught_;
};

}  // namespace strata

// STRATA_CHECK(cond, parts...): throws strata::Error(cat(parts...)) when cond is false.
#define STRATA_CHECK(cond, ...)                   \
  do {                                            \
    if (!(cond)) [[unlikely]]                     \
      ::strata::fail(::strata::cat(__VA_ARGS__)); \
  } while (0)

// STRATA_CHECK for the command line: a failed condition is a UsageError.
#define STRATA_USAGE_CHECK(cond, ...)                         \
  do {                                                        \
    if (!(cond)) [[unlikely]]                                 \
      throw ::strata::UsageError(::strata::cat(__VA_ARGS__)); \
  } while (0)
