// An independent reader of TensorBoard event files for the tests, written
// from the format's description: a bit-by-bit CRC-32C (no table), the
// TFRecord framing and a generic protocol-buffer decoder.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <vector>

namespace strata::tb_reader {

inline uint32_t slow_crc32c(const std::string& s) {
  uint32_t c = 0xFFFFFFFFu;
  for (unsigned char byte : s) {
    c ^= byte;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
  }
  return ~c;
}
inline uint32_t slow_masked(const std::string& s) {
  const uint32_t c = slow_crc32c(s);
  return ((c >> 15) | (c << 17)) + 0xA282EAD8u;
}

// One decoded protocol-buffer field: varint, fixed64, bytes or fixed32.
struct Field {
  int number = 0, wire = 0;
  uint64_t num = 0;
  std::string bytes;
};
inline std::vector<Field> decode(const std::string& b) {
  std::vector<Field> out;
  size_t i = 0;
  auto varint = [&]() {
    uint64_t v = 0;
    for (int shift = 0;; shift += 7) {
      if (i >= b.size()) throw std::runtime_error("truncated varint");
      const uint8_t x = uint8_t(b[i++]);
      v |= uint64_t(x & 0x7F) << shift;
      if (!(x & 0x80)) return v;
    }
  };
  while (i < b.size()) {
    Field f;
    const uint64_t k = varint();
    f.number = int(k >> 3), f.wire = int(k & 7);
    if (f.wire == 0) {
      f.num = varint();
    } else if (f.wire == 1 || f.wire == 5) {
      const size_t n = f.wire == 1 ? 8 : 4;
      if (i + n > b.size()) throw std::runtime_error("truncated fixed");
      std::memcpy(&f.num, b.data() + i, n);
      i += n;
    } else if (f.wire == 2) {
      const uint64_t n = varint();
      if (i + n > b.size()) throw std::runtime_error("truncated bytes");
      f.bytes = b.substr(i, n);
      i += n;
    } else {
      throw std::runtime_error("wire type " + std::to_string(f.wire));
    }
    out.push_back(f);
  }
  return out;
}
inline const Field* find(const std::vector<Field>& fs, int number) {
  for (const Field& f : fs)
    if (f.number == number) return &f;
  return nullptr;
}

// Records of a file; every CRC checked.
inline std::vector<std::string> records(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  const std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::string> out;
  size_t i = 0;
  while (i < all.size()) {
    EXPECT_LE(i + 12, all.size());
    uint64_t n;
    uint32_t len_crc, data_crc;
    std::memcpy(&n, all.data() + i, 8);
    std::memcpy(&len_crc, all.data() + i + 8, 4);
    EXPECT_EQ(len_crc, slow_masked(all.substr(i, 8)));
    const std::string data = all.substr(i + 12, n);
    std::memcpy(&data_crc, all.data() + i + 12 + n, 4);
    EXPECT_EQ(data_crc, slow_masked(data));
    out.push_back(data);
    i += 12 + n + 4;
  }
  EXPECT_EQ(i, all.size());
  return out;
}

// The scalar events of a file: (tag, step, value).
struct Scalar {
  std::string tag;
  int64_t step;
  float value;
};
inline std::vector<Scalar> scalars(const std::string& path) {
  std::vector<Scalar> out;
  for (const std::string& r : records(path)) {
    const auto e = decode(r);
    const Field* summary = find(e, 5);
    if (!summary) continue;
    for (const Field& v : decode(summary->bytes)) {
      const auto value = decode(v.bytes);
      const Field* tag = find(value, 1);
      const Field* simple = find(value, 2);
      if (!tag || !simple) continue;
      float x;
      std::memcpy(&x, &simple->num, 4);
      out.push_back({tag->bytes, int64_t(find(e, 2) ? find(e, 2)->num : 0), x});
    }
  }
  return out;
}

}  // namespace strata::tb_reader
