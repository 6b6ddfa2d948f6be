// What safetensors reading and writing share (io/safetensors.cpp,
// io/safetensors_write.cpp): the format's file names and chunk size, names
// and values quoted in one-line messages, the dtypes' element sizes, and the
// 16-bit float formats (IEEE binary16 and bfloat16) to and from float32.
// Internal to the io layer.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace strata::safetensors_internal {

using json = nlohmann::json;

static_assert(std::endian::native == std::endian::little,
              "safetensors I/O assumes a little-endian host");

constexpr size_t kChunkBytes = size_t(4) << 20;  // I/O and conversion granularity
constexpr const char* kSingleFile = "model.safetensors";
constexpr const char* kIndexFile = "model.safetensors.index.json";

// A name for a message: quoted, with control characters escaped so that the
// message stays on one line whatever the file contains.
std::string name_str(const std::string& s);
// A JSON value for a message, cut short when long.
std::string brief(const json& v);
// "[2, 3]".
std::string shape_str(const std::vector<int64_t>& shape);

// Bytes per element of the dtypes with a whole-byte element size (0: unknown
// here, or sub-byte, so no size check is possible).
uint64_t dtype_size(const std::string& dtype);

// IEEE binary16 -> binary32, exact for every input (subnormals, infinities,
// NaN payloads included).
float f16_to_f32(uint16_t h);
// binary32 -> binary16, round to nearest even; values from 65520 up overflow
// to infinity; NaN stays NaN (made quiet).
uint16_t f32_to_f16(float f);
float bf16_to_f32(uint16_t b);
// binary32 -> bfloat16, round to nearest even (overflow to infinity); NaN
// stays NaN (made quiet: plain rounding could carry a NaN into infinity).
uint16_t f32_to_bf16(float f);

}  // namespace strata::safetensors_internal
