// SHA-256 (FIPS 180-4), for tokenizer and data checksums.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace strata {

class Sha256 {
 public:
  Sha256();
  void update(const void* data, size_t n);
  // Lower-case hex digest; the object must not be updated afterwards.
  std::string hex_digest();

 private:
  void block(const uint8_t* p);
  uint32_t h_[8];
  uint8_t buf_[64];
  size_t buf_len_ = 0;
  uint64_t total_ = 0;
};

std::string sha256_hex(const std::string& bytes);

}  // namespace strata
