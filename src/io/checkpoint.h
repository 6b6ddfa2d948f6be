// HDF5 checkpoints: self-contained (config, layer plan, resolved recipe,
// tokenizer bytes, parameters, optimizer moments, training state) and
// layout-independent (one dataset per tensor, unsharded). See README
// "Checkpoint format". Inspect with `strata inspect` or `h5dump`.
//
// File layout:
//   /                      attributes: format = "strata-checkpoint", version = 1,
//                          config (JSON, HF LlamaConfig names), plan, recipe (TOML),
//                          state (JSON: step, tokens, loader, ...), created (ISO time)
//   /params/<name>         float32 dataset per parameter, HF names and shapes
//                          (or bfloat16 where the writer asked: a 16-bit HDF5
//                          float type with bf16's fields, read back as float32)
//   /optimizer             attributes: step (int64), kind ("adamw")
//   /optimizer/exp_avg/<name>, /optimizer/exp_avg_sq/<name>
//                          float32, for the tensors that have optimizer state
//   /tokenizer             uint8 dataset: the sentencepiece model bytes;
//                          attribute sha256
//   every tensor dataset   attribute crc32c (int64): the CRC-32C (io/crc32c.h)
//                          of its values as little-endian float32, row-major
//                          (a bfloat16 tensor: of the float32 it reads back
//                          as); '/' then has attribute checksum = "crc32c"
//
// Reading verifies each tensor's checksum (and that its values are finite);
// files written before checksums (no 'checksum' on '/') load unverified.
// Before libhdf5 opens a file in this process, a child process opens it and
// reads its structure (io/checkpoint_precheck.h), so a corrupt file that
// crashes or hangs the library is an error line, not a crash.
//
// Writes go to "<path>.tmp" and are renamed into place only when complete, so a
// crash or kill mid-write leaves any previous checkpoint intact.
//
// Storage details:
// - Texts (config, plan, recipe, state, created, format, sha256, kind) are
//   scalar variable-length UTF-8 string attributes: the attribute holds a
//   reference and the text lives in the file's global heap, so there is no
//   64 KiB attribute limit (tested with a 1 MiB recipe). The reader also
//   accepts fixed-length string attributes. Texts must not contain NUL bytes.
//   version and /optimizer step are 64-bit integer attributes.
// - Tensors are contiguous, uncompressed little-endian float32 datasets (a
//   shape [] tensor is a scalar dataset); /tokenizer is 1-D uint8 and is absent
//   when there is no tokenizer; /optimizer is absent when exp_avg is empty.
// - Library format bounds 1.8 .. latest (readable by HDF5 >= 1.8, h5py).
// - Atomic write: "<path>.tmp" is created (parent directories too) and locked
//   with flock (so a second writer fails; ignored where the file system has
//   no locks), written, closed, fsync'ed, renamed to <path>, and the directory
//   is fsync'ed. A stale .tmp from a crash is overwritten; on an error the
//   .tmp is removed. HDF5's own file locking is off (it fails on file systems
//   without lock support; a renamed checkpoint is never written again).
// - Errors are one-line strata::Error messages "checkpoint <file>: <what>",
//   naming the tensor or attribute, with HDF5's innermost message appended.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace strata {

// A host tensor to write from or read into. For writing, `data` may be null
// when `fill` is set: the writer then calls fill(dst) with room for the
// tensor's values when it reaches it, so a checkpoint can be assembled tensor
// by tensor (gathered over tensor and data parallelism) instead of whole in
// memory.
struct TensorRef {
  std::string name;
  std::vector<int64_t> shape;
  float* data;
  std::function<void(float* dst)> fill = {};
};

struct CheckpointData {
  nlohmann::json config;  // LlamaConfig::to_json()
  std::string plan;       // LayerPlan::to_string()
  std::string recipe;     // resolved recipe TOML ("" when none)
  nlohmann::json state;   // training state: step, tokens_seen, loader state, ...
  std::string tokenizer;  // sentencepiece model bytes ("" when none)
  std::vector<TensorRef> params;
  // Store the parameters as bfloat16 (rounded to nearest even): half the
  // bytes, for shipped models; training checkpoints keep float32.
  bool params_bf16 = false;
  // Optimizer state (both empty when none): same names/shapes as params.
  std::vector<TensorRef> exp_avg, exp_avg_sq;
  int64_t optimizer_step = 0;
};

// Writes `data` to `path` atomically. Throws strata::Error naming the file.
void write_checkpoint(const std::string& path, const CheckpointData& data);
// What write_checkpoint does with the tensors' `fill`s, without a file: each
// called in the writer's order (params, exp_avg, exp_avg_sq). The processes
// of a job that do not write run it so that the collectives inside the fills
// pair with the writer's.
void drain_checkpoint(const CheckpointData& data);

// For the atomicity test: called after each tensor is written to the
// temporary file, with the number written so far. Empty by default.
void set_checkpoint_write_hook(std::function<void(int)> hook);

class CheckpointReader {
 public:
  // Pre-checks the file in a child process, then opens it and validates the
  // header (format, version); errors name the file.
  explicit CheckpointReader(const std::string& path);
  ~CheckpointReader();
  CheckpointReader(const CheckpointReader&) = delete;
  CheckpointReader& operator=(const CheckpointReader&) = delete;

  const std::string& path() const { return path_; }
  int64_t version() const;
  std::string created() const;  // ISO 8601 UTC time of writing ("" when absent)
  nlohmann::json config() const;
  std::string plan() const;
  std::string recipe() const;
  nlohmann::json state() const;
  // The tokenizer bytes, checked against their sha256 attribute; "" when absent.
  std::string tokenizer() const;
  bool has_tokenizer() const;
  int64_t tokenizer_size() const;        // bytes, without reading them (0 when absent)
  std::string tokenizer_sha256() const;  // the stored attribute ("" when absent)
  bool has_optimizer() const;
  int64_t optimizer_step() const;      // 0 when absent
  std::string optimizer_kind() const;  // "adamw"; "" when absent

  // "float32" or "bfloat16": how /params is stored (from its first tensor).
  std::string params_dtype() const;
  // Names and shapes of the datasets in a group ("params", "optimizer/exp_avg", ...).
  std::vector<std::pair<std::string, std::vector<int64_t>>> list(const std::string& group) const;
  // Fills each ref from <group>/<name>. Errors (naming file and tensor): missing
  // tensor, shape mismatch, wrong dtype, unreadable data, a failed checksum,
  // a non-finite value.
  void read(const std::string& group, const std::vector<TensorRef>& refs) const;
  // Whether the file was written with per-tensor checksums (every tensor
  // then has one; older files have none).
  bool has_checksums() const { return checksums_; }

 private:
  struct Unchecked {};
  // Opens without the pre-check (what the pre-check's child does).
  CheckpointReader(const std::string& path, Unchecked);
  void open();
  // Reads from the file everything the methods above ask libhdf5 for, except
  // tensor values and the tokenizer's bytes: the pre-check's walk.
  void walk_structure() const;

  std::string path_;
  long long file_ = -1;  // hid_t
  bool checksums_ = false;
};

// Checkpoint files of a run directory: <run_dir>/checkpoints/step_00001000.h5.
std::string checkpoint_path(const std::string& run_dir, int64_t step);
// Existing checkpoints of a run, sorted by step (ignores *.tmp leftovers).
std::vector<std::pair<int64_t, std::string>> list_checkpoints(const std::string& run_dir);
// Deletes all but the newest `keep` checkpoints (keep <= 0: keep all).
void prune_checkpoints(const std::string& run_dir, int keep);

}  // namespace strata
