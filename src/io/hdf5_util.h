// HDF5 plumbing of strata checkpoints (io/checkpoint.cpp): identifiers that
// close themselves, one-line errors carrying HDF5's innermost message, file
// access without locking, links, string/integer/JSON attributes, dataset
// shapes and the bfloat16 float type. Internal to the io layer.
#pragma once

#include <hdf5.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace strata::hdf5 {

// Silences HDF5's automatic error printing (once per thread: Debian's HDF5
// is thread-safe, with an error stack per thread). Call before any HDF5 use.
void hdf5_init();

// Throws one line: "checkpoint <file>: <what> (HDF5: <innermost message>)",
// clearing HDF5's error stack.
[[noreturn]] void fail_h5(const std::string& file, const std::string& what);

// Owns one HDF5 identifier and closes it with the matching H5?close.
class H5Handle {
 public:
  using Closer = herr_t (*)(hid_t);
  H5Handle() = default;
  H5Handle(hid_t id, Closer close) : id_(id), close_(close) {}
  ~H5Handle() { reset(); }
  H5Handle(H5Handle&& o) noexcept : id_(std::exchange(o.id_, -1)), close_(o.close_) {}
  H5Handle& operator=(H5Handle&& o) noexcept {
    if (this != &o) {
      reset();
      id_ = std::exchange(o.id_, -1);
      close_ = o.close_;
    }
    return *this;
  }
  H5Handle(const H5Handle&) = delete;
  H5Handle& operator=(const H5Handle&) = delete;

  hid_t get() const { return id_; }
  bool valid() const { return id_ >= 0; }
  void reset() {
    if (id_ >= 0 && close_) close_(id_);
    id_ = -1;
  }
  // Closes now and reports whether the close (for a file: the final flush) worked.
  bool close_checked() {
    const herr_t r = id_ >= 0 && close_ ? close_(id_) : 0;
    id_ = -1;
    return r >= 0;
  }
  hid_t release() { return std::exchange(id_, -1); }

 private:
  hid_t id_ = -1;
  Closer close_ = nullptr;
};

// `id` in an H5Handle, or fail_h5(file, what) when it is invalid (< 0).
H5Handle wrap(hid_t id, H5Handle::Closer close, const std::string& file, const std::string& what);

// File access: no HDF5 file locking (it fails on file systems without lock
// support, and the atomic-rename protocol makes it unnecessary: a checkpoint
// is immutable once it has its final name; the writer locks the .tmp itself).
// Library format bounds 1.8 and up: compact/dense link and attribute storage.
H5Handle file_access(const std::string& file);

bool link_exists(hid_t loc, const std::string& name);
// The names of the links in a group, in HDF5's native order (see hdf5_util.cpp).
std::vector<std::string> link_names(hid_t group, const std::string& file, const std::string& what);
// Whether every component of a relative path ("optimizer/exp_avg") exists
// (H5Lexists needs the intermediate groups to exist).
bool path_exists(hid_t loc, const std::string& path);

// Attributes: a UTF-8 string (no NUL bytes) and a 64-bit integer, written;
// read back with a check of their class and size. `where` names the object
// for messages ("/" or "/tokenizer").
void write_text_attr(hid_t loc, const char* name, const std::string& text, const std::string& file);
void write_int_attr(hid_t loc, const char* name, int64_t v, const std::string& file);
bool has_attr(hid_t loc, const char* name);
// A scalar string attribute, variable- or fixed-length.
std::string read_text_attr(hid_t loc, const char* name, const std::string& file,
                           const std::string& where);
int64_t read_int_attr(hid_t loc, const char* name, const std::string& file,
                      const std::string& where);
// A string attribute of '/' holding JSON (nested at most 64 levels deep).
nlohmann::json parse_json_attr(hid_t loc, const char* name, const std::string& file);

// Datasets: "[2, 3]", the element count, and a dataset's shape.
std::string shape_str(const std::vector<int64_t>& s);
int64_t numel(const std::vector<int64_t>& s);
std::vector<int64_t> dataset_shape(hid_t dset, const std::string& file, const std::string& what);

// bfloat16 as an HDF5 float type: sign bit 15, 8 exponent bits at 7, 7
// mantissa bits at 0, bias 127 (float32's upper half). HDF5 converts it to
// float32 on read, exactly; h5dump shows its fields.
H5Handle bf16_type(const std::string& file);
bool is_bf16_type(hid_t t);

}  // namespace strata::hdf5
