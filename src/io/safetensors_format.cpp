// Shared parts of safetensors reading and writing (safetensors_format.h).
#include "io/safetensors_format.h"

#include <bit>
#include <cstdio>
#include <map>

#include "core/text.h"

namespace strata::safetensors_internal {

std::string name_str(const std::string& s) {
  std::string out = "'";
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7F) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", unsigned(c));
      out += buf;
    } else {
      out += ch;
    }
  }
  return out + "'";
}

std::string brief(const json& v) {
  std::string s;
  try {
    s = v.dump(-1, ' ', false, json::error_handler_t::replace);
  } catch (const json::exception&) {
    s = v.type_name();
  }
  if (s.size() > 40) s = s.substr(0, 37) + "...";
  return one_line(s);
}

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

uint64_t dtype_size(const std::string& dtype) {
  static const std::map<std::string, uint64_t> sizes = {
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1}, {"F8_E8M0", 1},
      {"I16", 2},  {"U16", 2}, {"F16", 2}, {"BF16", 2},    {"I32", 4},     {"U32", 4},
      {"F32", 4},  {"I64", 8}, {"U64", 8}, {"F64", 8},     {"C64", 8}};
  const auto it = sizes.find(dtype);
  return it == sizes.end() ? 0 : it->second;
}

float f16_to_f32(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1Fu;
  const uint32_t mant = h & 0x3FFu;
  if (exp == 0) {  // zero or subnormal: mant * 2^-24, exact in float
    const float v = float(mant) * 0x1p-24f;
    return sign ? -v : v;
  }
  const uint32_t bits = exp == 31 ? sign | 0x7F800000u | (mant << 13)  // inf / NaN
                                  : sign | ((exp + 112) << 23) | (mant << 13);
  return std::bit_cast<float>(bits);
}

uint16_t f32_to_f16(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const auto sign = uint16_t((x >> 16) & 0x8000u);
  const uint32_t a = x & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return uint16_t(sign | 0x7E00u | ((a >> 13) & 0x3FFu));  // NaN
  if (a >= 0x477FF000u) return uint16_t(sign | 0x7C00u);  // >= 65520 (65504 + half an ulp)
  if (a >= 0x38800000u) {                                 // normal half: |f| >= 2^-14
    const uint32_t r = a - (112u << 23);                  // rebias the exponent
    return uint16_t(sign | ((r + 0xFFFu + ((r >> 13) & 1u)) >> 13));
  }
  if (a <= 0x33000000u) return sign;  // |f| <= 2^-25: rounds to zero (2^-25 is a tie, to even)
  // Subnormal half: round |f| * 2^24 to an integer (the result 0x400 is the
  // smallest normal, which the encoding gives correctly).
  const uint32_t e = a >> 23;  // 102..112
  const uint32_t m = (a & 0x7FFFFFu) | 0x800000u;
  const uint32_t shift = 126 - e;  // 14..24
  uint32_t q = m >> shift;
  const uint32_t rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
  if (rem > half || (rem == half && (q & 1u))) ++q;
  return uint16_t(sign | q);
}

float bf16_to_f32(uint16_t b) { return std::bit_cast<float>(uint32_t(b) << 16); }

uint16_t f32_to_bf16(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  if ((x & 0x7FFFFFFFu) > 0x7F800000u) return uint16_t((x >> 16) | 0x0040u);
  return uint16_t((x + 0x7FFFu + ((x >> 16) & 1u)) >> 16);
}

}  // namespace strata::safetensors_internal
