// The values of a tensor read from a checkpoint (io/checkpoint.cpp): its
// CRC-32C against the stored one, and finiteness. Internal to the io layer.
#pragma once

#include <cstdint>
#include <string>

namespace strata {

// Throws one line "checkpoint <file>: <what> fails its checksum (...)" when
// `checked` and the CRC-32C of the n floats is not `stored`, else "<what>
// holds a non-finite value (... at index i)" for the first NaN or inf.
// One pass in L1-sized blocks; a tensor of 4 MiB and up is split over the
// OpenMP threads (the parts' CRCs joined with crc32c_combine).
void verify_values(const float* v, int64_t n, bool checked, uint32_t stored,
                   const std::string& file, const std::string& what);

}  // namespace strata
