// Small text helpers shared by the parsers: one-line error messages and joins.
#pragma once

#include <string>
#include <vector>

#include "core/error.h"

namespace strata {

// Error messages are one line by contract (the CLI prints "strata: error:
// <msg>"), but they quote user text (keys, paths, library messages) that may
// hold line breaks: these become the two characters "\n" / "\r".
std::string one_line(const std::string& s);

// fail() with the concatenated parts made one line.
template <typename... Parts>
[[noreturn]] void fail_one_line(const Parts&... parts) {
  fail(one_line(cat(parts...)));
}

// items joined with sep between them.
std::string join(const std::vector<std::string>& items, const std::string& sep);

// The non-empty comma-separated items of s ("a,,b" -> {"a", "b"}).
std::vector<std::string> split_commas(const std::string& s);

// v with `digits` digits after the point ("%.*f").
std::string fixed(double v, int digits);

// s as a whole decimal int (optional sign); false when it is anything else.
bool parse_int(const std::string& s, int* out);

}  // namespace strata
