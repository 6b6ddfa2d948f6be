// Shared pieces of the libFuzzer harnesses (fuzz/fuzz_*.cpp; see fuzz/README.md).
//
// A harness hands the fuzzer's bytes to a parser the way a strata command
// does: written to a file in a per-process scratch directory, then opened
// through the same entry point. Inputs that describe several files (a dataset
// directory, a task with its data) are split at kPartSeparator lines.
//
// What counts as a finding (the harness aborts, so libFuzzer keeps the input):
// - any exception other than strata::Error (std::out_of_range, nlohmann::json
//   or toml++ exceptions, std::bad_alloc, std::length_error, filesystem
//   errors, ...): the parser let an internal error escape;
// - a strata::Error whose message is empty or spans more than one line (the
//   CLI prints "strata: error: <message>" and promises one line);
// - a broken promise a harness checks itself (check(), e.g. a round trip);
// - and whatever the sanitizers and libFuzzer's limits catch (memory errors,
//   undefined behaviour, an allocation over -malloc_limit_mb, a timeout).
#pragma once

#include <cxxabi.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <string_view>
#include <typeinfo>
#include <vector>

#include "core/error.h"

namespace strata::fuzz {

// Separates the files of a multi-file input (seeds use it; libFuzzer picks it
// up from them and from the comparisons in split_parts).
constexpr std::string_view kPartSeparator = "\n==part==\n";

// The input cut at kPartSeparator into at most `max_parts` parts (the last
// part keeps any further separators).
inline std::vector<std::string> split_parts(const uint8_t* data, size_t size, size_t max_parts) {
  const std::string_view all(reinterpret_cast<const char*>(data), size);
  std::vector<std::string> parts;
  size_t pos = 0;
  while (parts.size() + 1 < max_parts) {
    const size_t hit = all.find(kPartSeparator, pos);
    if (hit == std::string_view::npos) break;
    parts.emplace_back(all.substr(pos, hit - pos));
    pos = hit + kPartSeparator.size();
  }
  parts.emplace_back(all.substr(pos));
  return parts;
}

// Reports a finding and aborts (libFuzzer then saves the input as crash-*).
[[noreturn]] inline void finding(const std::string& what) {
  std::fprintf(stderr, "\n==strata-fuzz== FINDING: %s\n", what.c_str());
  std::fflush(stderr);
  std::abort();
}

// A promise the harness checks on top of "no crash".
inline void check(bool ok, const std::string& what) {
  if (!ok) finding(what);
}

// The per-process scratch directory: $STRATA_FUZZ_TMP (fuzz/run.sh sets it),
// else /dev/shm (no disk I/O), else /tmp. Emptied by clear() before each
// input; removed at exit (a crash leaves it for run.sh to remove).
class Scratch {
 public:
  static Scratch& get() {
    static Scratch* s = [] {
      auto* p = new Scratch();
      std::atexit([] { get().remove(); });
      return p;
    }();
    return *s;
  }

  const std::string& dir() const { return dir_; }
  std::string path(const std::string& name) const { return dir_ + "/" + name; }

  // Writes `bytes` to <dir>/<name> and returns the path.
  std::string write(const std::string& name, std::string_view bytes) const {
    const std::string p = path(name);
    std::ofstream out(p, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), std::streamsize(bytes.size()));
    out.close();
    if (!out) finding("harness: cannot write " + p);
    return p;
  }

  // Removes everything inside the directory.
  void clear() const {
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(dir_, ec))
      std::filesystem::remove_all(e.path(), ec);
  }

  void remove() {
    if (dir_.empty()) return;
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
    dir_.clear();
  }

 private:
  Scratch() {
    std::string base;
    if (const char* env = std::getenv("STRATA_FUZZ_TMP"); env && *env)
      base = env;
    else if (std::filesystem::is_directory("/dev/shm"))
      base = "/dev/shm";
    else
      base = "/tmp";
    std::string templ = base + "/strata-fuzz-XXXXXX";
    if (!mkdtemp(templ.data())) finding("harness: cannot create a directory in " + base);
    dir_ = templ;
  }
  std::string dir_;
};

inline std::string type_name(const std::type_info& t) {
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> name(
      abi::__cxa_demangle(t.name(), nullptr, nullptr, &status), std::free);
  return status == 0 && name ? name.get() : t.name();
}

// Runs one input through `body`: a strata::Error with a one-line message is an
// expected refusal; anything else escaping is a finding. With
// STRATA_FUZZ_VERBOSE set, refusals are printed (to see how far seeds get).
template <typename Body>
int guarded(Body&& body) {
  static const bool verbose = std::getenv("STRATA_FUZZ_VERBOSE") != nullptr;
  try {
    body();
    if (verbose) std::fprintf(stderr, "strata-fuzz: accepted\n");
  } catch (const strata::Error& e) {
    const std::string msg = e.what();
    if (verbose) std::fprintf(stderr, "strata-fuzz: refused: %s\n", msg.c_str());
    check(!msg.empty(), "strata::Error with an empty message");
    check(msg.find_first_of("\r\n") == std::string::npos,
          "strata::Error message is not one line: " + msg);
  } catch (const std::exception& e) {
    finding("uncaught " + type_name(typeid(e)) + ": " + e.what());
  } catch (...) {
    finding("uncaught exception of an unknown type");
  }
  return 0;
}

}  // namespace strata::fuzz
