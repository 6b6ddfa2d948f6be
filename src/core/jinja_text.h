// Text helpers of the Jinja interpreter with Python's str semantics: strip,
// case mapping and case tests. Case maps ASCII and Latin-1 letters (é <-> É);
// other scripts' letters count as letters but keep their case.
#pragma once

#include <cstdint>
#include <string>

namespace strata::jinja {

std::string to_upper(const std::string& s);
std::string to_lower(const std::string& s);
std::string capitalize(const std::string& s);    // Python's str.capitalize()
std::string python_title(const std::string& s);  // Python's str.title()
std::string jinja_title(const std::string& s);   // Jinja's title filter
bool is_letter(uint32_t cp);
bool is_lower(const std::string& s);  // Python's str.islower()
bool is_upper(const std::string& s);  // Python's str.isupper()

}  // namespace strata::jinja
