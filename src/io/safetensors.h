// Safetensors files (Hugging Face): an 8-byte little-endian header length, a
// JSON header {"<name>": {"dtype": "F32", "shape": [..], "data_offsets": [b, e]},
// ..., "__metadata__": {...}}, then the raw little-endian tensor bytes
// (offsets relative to the end of the header). Written and read here without
// the safetensors library.
//
// Reading validates everything before trusting it: header length within the
// file, valid JSON, every entry's dtype/shape/offsets well-formed, offsets
// inside the data area, end - begin == numel * dtype size, no overlaps, no
// name twice, __metadata__ an object of strings, a header of at most 100 MB.
// Any violation is a one-line strata::Error naming the file and the tensor or
// field. Accepted: gaps between tensors, extra entry fields, and dtypes not
// known here (listed as stored; read_f32 refuses them).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace strata {

struct SafeTensorInfo {
  std::string name;
  std::string dtype;  // "F32", "F16", "BF16", ... as stored
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  // byte offsets within the data area
  int64_t numel() const;
};

class SafetensorsFile {
 public:
  // Opens and validates (the data stays on disk, read on demand).
  static std::shared_ptr<const SafetensorsFile> open(const std::string& path);

  const std::string& path() const { return path_; }
  const std::vector<SafeTensorInfo>& tensors() const { return tensors_; }  // sorted by name
  const SafeTensorInfo* find(const std::string& name) const;               // nullptr if absent
  const nlohmann::json& metadata() const { return metadata_; }             // {} if absent

  // Reads a tensor converted to float32 (from F32, F16 or BF16; other dtypes
  // are an error naming the tensor and dtype). `out` holds numel() floats.
  void read_f32(const SafeTensorInfo& t, float* out) const;

 private:
  std::string path_;
  // The open file, closed when the last copy goes: reads come from the file
  // that was validated, even if the path is replaced or removed afterwards.
  std::shared_ptr<const int> fd_;
  uint64_t data_start_ = 0;  // file offset of the data area
  uint64_t data_size_ = 0;   // bytes in the data area
  std::vector<SafeTensorInfo> tensors_;
  nlohmann::json metadata_;
};

// A Hugging Face model directory's weights: model.safetensors, or the shards
// listed by model.safetensors.index.json ("weight_map": name -> file). Errors
// name the directory/file; a name mapped to a file that lacks it is an error.
// When both exist, model.safetensors wins (as in Hugging Face's loader). With
// an index, the weight_map is authoritative: tensors a shard holds but the map
// does not name are not listed; shard names must stay inside `dir`.
class SafetensorsModel {
 public:
  static SafetensorsModel open_dir(const std::string& dir);
  std::vector<std::string> names() const;  // every tensor, sorted
  const SafeTensorInfo* find(const std::string& name) const;
  // Reads `name` as float32 after checking its shape equals `shape`; errors
  // name the tensor, the expected and the found shape.
  // (A NaN or inf value is an error naming the tensor.)
  void read_f32(const std::string& name, const std::vector<int64_t>& shape, float* out) const;
  // The file holding a tensor (for messages).
  const std::string& file_of(const std::string& name) const;

 private:
  struct Entry {
    std::shared_ptr<const SafetensorsFile> file;
    const SafeTensorInfo* info;
  };
  std::string source_;  // model.safetensors or the index (for messages)
  std::vector<std::pair<std::string, Entry>> entries_;  // sorted by name
};

struct SafeTensorWrite {
  std::string name;
  std::vector<int64_t> shape;
  const float* data;
};

// Writes one safetensors file atomically (temporary name, then rename),
// converting from float32 to `dtype` ("F32", "BF16" round-to-nearest-even, or
// "F16"). Tensors are laid out in the given order, 8-byte aligned header.
// F16 rounds to nearest even and overflows to infinity from 65520 up; NaN
// stays NaN in both 16-bit formats. Names must be unique, non-empty and not
// "__metadata__"; `metadata` is null or an object of strings (written as
// "__metadata__" when not empty). Everything is checked before the disk is
// touched; parent directories are created.
void write_safetensors(const std::string& path, const std::vector<SafeTensorWrite>& tensors,
                       const std::string& dtype, const nlohmann::json& metadata = {});

// Writes model.safetensors, or, when the total exceeds max_shard_bytes,
// model-00001-of-0000N.safetensors ... plus model.safetensors.index.json
// ({"metadata": {"total_size": bytes}, "weight_map": {...}}) in `dir`.
// Shards fill greedily in the given order; a tensor larger than the limit
// gets a shard of its own. `metadata` goes into every file. Returns the paths
// written (shards first, then the index).
//
// Replacing an earlier export: files of other shapes are removed (model.
// safetensors, the index, model-NNNNN-of-NNNNN.safetensors not rewritten;
// nothing else in `dir` is touched), in an order that keeps a consistent model
// readable: a single file takes effect at its rename, then the old index and
// shards go; for shards, the old index goes first (so no index ever names
// shards that were not rewritten), then the shards, the new index, and last
// the old model.safetensors (which readers prefer until then).
std::vector<std::string> write_safetensors_model(const std::string& dir,
                                                 const std::vector<SafeTensorWrite>& tensors,
                                                 const std::string& dtype, uint64_t max_shard_bytes,
                                                 const nlohmann::json& metadata = {});

}  // namespace strata
