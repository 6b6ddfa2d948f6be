// CRC-32C (Castagnoli polynomial 0x1EDC6F41, reflected; the checksum of
// iSCSI, ext4 and SSE 4.2's crc32 instruction): the per-tensor checksum of
// strata checkpoints (io/checkpoint.cpp) and TensorBoard's record framing
// (core/tensorboard.cpp). Standard parameters: initial value
// and final xor 0xFFFFFFFF, so crc32c("123456789") = 0xE3069283.
//
// With SSE 4.2 (every x86-64-v2 CPU and up: the default -march=x86-64-v3
// build) it runs three independent instruction streams over each 24 KiB
// block and joins them with precomputed shift tables (about 3 instructions'
// latency hidden per 8 bytes: over 10 GB/s on one core); elsewhere a
// slicing-by-8 table (about 1 to 2 GB/s).
#pragma once

#include <cstddef>
#include <cstdint>

namespace strata {

// Continues a CRC-32C: crc32c(crc32c(0, a, n), b, m) is the CRC of a
// followed by b. Start with 0.
uint32_t crc32c(uint32_t crc, const void* data, size_t n);
// The CRC-32C of data[0, n).
inline uint32_t crc32c(const void* data, size_t n) { return crc32c(0, data, n); }

// The CRC-32C of a followed by b from the CRCs of a and b and b's length
// (parts computed on several threads; about 30 us, whatever the length).
uint32_t crc32c_combine(uint32_t crc_a, uint32_t crc_b, size_t len_b);

}  // namespace strata
