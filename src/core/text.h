// Small text helpers shared by the parsers: one-line error messages, joins,
// trimming, edit distances (did-you-mean), counts for people and printf into
// strings.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
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

// s itself when it has at most `max` bytes, else its head and tail around
// "..." (paths and names quoted in one-line messages).
std::string shorten(const std::string& s, size_t max = 160);

// items joined with sep between them.
std::string join(const std::vector<std::string>& items, const std::string& sep);

// The non-empty comma-separated items of s ("a,,b" -> {"a", "b"}).
std::vector<std::string> split_commas(const std::string& s);

// ASCII whitespace: space, \t, \n, \r, \f, \v (C's isspace in the "C" locale).
inline constexpr std::string_view kAsciiSpace = " \t\n\r\f\v";

// s without its leading and trailing characters from `chars` (ASCII
// whitespace unless told: trim(s, " \t") keeps line breaks).
std::string trim(std::string_view s, std::string_view chars = kAsciiSpace);

// Edit distance with transpositions (optimal string alignment): insertions,
// deletions, substitutions and swaps of two adjacent characters cost one each,
// so "stpes" is one edit from "steps", as a typist would count it. For
// "did you mean" suggestions.
size_t edit_distance(std::string_view a, std::string_view b);

// The one spelling of a dtype name: "fp32" for fp32, float32, f32; "bf16"
// for bf16, bfloat16; "fp16" for fp16, float16, f16 (any case). Anything else
// comes back as it was, for the caller's error.
std::string canonical_dtype(const std::string& name);

// A count for people, in decimal units: "1.23B", "4.56M", "7.8k", "42".
std::string human_count(double n);

// printf into a string: the bytes std::printf would write (tables that a
// library builds and a command prints).
std::string strprintf(const char* format, ...) __attribute__((format(printf, 1, 2)));

// v with `digits` digits after the point ("%.*f").
std::string fixed(double v, int digits);

// s as a whole decimal int (optional sign); false when it is anything else.
bool parse_int(const std::string& s, int* out);

// Appends the UTF-8 bytes of code point `cp`.
void append_utf8(std::string& out, uint32_t cp);

// ---- UTF-8 text measured the way Python measures str (the evaluation
// harness's rules). A byte that does not start a valid UTF-8 sequence counts
// as one character of its own.

// The next code point of s at byte offset *at (advanced past it).
uint32_t next_code_point(std::string_view s, size_t* at);

// len(s) in Python: code points.
int64_t utf8_length(std::string_view s);

// Python's str.isspace() for one code point (what re's \s and str.strip()
// treat as whitespace: ASCII spaces, \x1c-\x1f, U+0085, U+00A0, U+1680,
// U+2000-U+200A, U+2028, U+2029, U+202F, U+205F, U+3000).
bool is_python_space(uint32_t cp);

// Python's s.strip(): leading and trailing Unicode whitespace removed.
std::string python_strip(std::string_view s);

// Throws "<what>: not a text file (a NUL byte at offset N)" or "<what>: not
// UTF-8 text (byte 0xXX at offset N)" unless `s` is NUL-free UTF-8.
void require_text(std::string_view s, const std::string& what);

// len(s.rstrip()) in bytes: where s's trailing Unicode whitespace starts.
size_t python_strip_end(std::string_view s);

// Python's s.split(sep) (sep not empty): the pieces between occurrences.
std::vector<std::string> python_split(std::string_view s, std::string_view sep);

// Python's s.replace(old, new) (old not empty): every occurrence replaced.
std::string python_replace(std::string_view s, std::string_view old, std::string_view with);

// len(re.split(r"\s+", s)): runs of whitespace split s, and a leading or
// trailing run still yields an (empty) piece.
int64_t python_split_count(std::string_view s);

}  // namespace strata
