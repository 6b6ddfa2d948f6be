// HDF5 checkpoints (layout and guarantees: see checkpoint.h).
//
// Every HDF5 handle lives in an H5Handle (closed on every path, including
// exceptions). HDF5's automatic error-stack printing is switched off; a failed
// call becomes one strata::Error line naming the file, the object, and the
// innermost HDF5 message (the plumbing: hdf5_util.h).
#include "io/checkpoint.h"

#include <errno.h>
#include <fcntl.h>
#include <hdf5.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <utility>

#include "core/crc32c.h"
#include "core/error.h"
#include "core/file.h"
#include "core/progress.h"
#include "core/sha256.h"
#include "core/text.h"
#include "io/checkpoint_format.h"
#include "io/checkpoint_precheck.h"
#include "io/checkpoint_verify.h"
#include "io/hdf5_util.h"

namespace strata {

using namespace hdf5;

namespace {

namespace fs = std::filesystem;

constexpr const char* kFormat = "strata-checkpoint";
constexpr int64_t kVersion = 1;
// The per-tensor checksum: attribute kChecksumAttr of every tensor dataset,
// and on '/' attribute "checksum" naming it (so a tensor without one is a
// fault, not an older file).
constexpr const char* kChecksumKind = "crc32c";
constexpr const char* kChecksumAttr = "crc32c";
// The bf16 writer computes the checksum block by block.
constexpr int64_t kBlock = 4096;

void check_tensor_name(const std::string& name, const std::string& file) {
  STRATA_CHECK(!name.empty() && name != "." && name.find('/') == std::string::npos, "checkpoint ",
               file, ": invalid tensor name '", name, "' (empty, '.' or containing '/')");
}

void check_ref(const TensorRef& t, const std::string& file, const char* group) {
  check_tensor_name(t.name, file);
  for (int64_t d : t.shape)
    STRATA_CHECK(d >= 0, "checkpoint ", file, ": tensor '", group, "/", t.name,
                 "' has a negative dimension in shape ", shape_str(t.shape));
  STRATA_CHECK(t.data || t.fill || numel(t.shape) == 0, "checkpoint ", file, ": tensor '", group,
               "/", t.name, "' has no data");
}

uint16_t to_bf16_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7fff + ((u >> 16) & 1);  // round to nearest even (weights are finite)
  return uint16_t(u >> 16);
}

void write_tensor(hid_t group, const char* group_name, const TensorRef& t, const std::string& file,
                  bool bf16 = false) {
  const std::string what = cat("tensor '", group_name, "/", t.name, "'");
  std::vector<hsize_t> dims(t.shape.begin(), t.shape.end());
  H5Handle space = wrap(dims.empty() ? H5Screate(H5S_SCALAR)
                                     : H5Screate_simple(int(dims.size()), dims.data(), nullptr),
                        H5Sclose, file, "cannot create the dataspace of " + what);
  H5Handle bf = bf16 ? bf16_type(file) : H5Handle{};
  H5Handle dset = wrap(H5Dcreate2(group, t.name.c_str(), bf16 ? bf.get() : H5T_IEEE_F32LE,
                                  space.get(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
                       H5Dclose, file, "cannot create " + what + " (duplicate name?)");
  const int64_t n = numel(t.shape);
  if (n == 0) {
    write_int_attr(dset.get(), kChecksumAttr, 0, file);  // the CRC of nothing
    return;
  }
  const float* src = t.data;
  std::vector<float> filled;  // the tensor produced now (TensorRef::fill)
  if (!src) {
    filled.resize(static_cast<size_t>(n));
    t.fill(filled.data());
    src = filled.data();
  }
  herr_t rc;
  uint32_t crc = 0;
  if (bf16) {
    // The checksum covers the float32 values the bf16 ones read back as.
    std::vector<uint16_t> bits(static_cast<size_t>(n));
    float block[kBlock];
    for (int64_t i = 0; i < n; i += kBlock) {
      const int64_t m = std::min(kBlock, n - i);
      for (int64_t j = 0; j < m; ++j) {
        bits[size_t(i + j)] = to_bf16_bits(src[i + j]);
        const uint32_t u = uint32_t(bits[size_t(i + j)]) << 16;
        std::memcpy(&block[j], &u, 4);
      }
      crc = crc32c(crc, block, size_t(m) * sizeof(float));
    }
    rc = H5Dwrite(dset.get(), bf.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, bits.data());
  } else {
    crc = crc32c(0, src, size_t(n) * sizeof(float));
    rc = H5Dwrite(dset.get(), H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, src);
  }
  if (rc < 0) fail_h5(file, "cannot write " + what);
  write_int_attr(dset.get(), kChecksumAttr, crc, file);
}

H5Handle create_group(hid_t loc, const char* name, const std::string& file) {
  return wrap(H5Gcreate2(loc, name, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Gclose, file,
              cat("cannot create group '", name, "'"));
}

std::function<void(int)>& write_hook() {
  static std::function<void(int)> hook;
  return hook;
}

std::string iso_time_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// Compact JSON; invalid UTF-8 in strings is replaced rather than thrown on.
std::string json_text(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// Writes the whole checkpoint into an already-created (truncated) file.
void write_contents(const std::string& tmp, const CheckpointData& d) {
  H5Handle fcpl = wrap(H5Pcreate(H5P_FILE_CREATE), H5Pclose, tmp, "cannot create property list");
  H5Handle fapl = file_access(tmp);
  H5Handle file = wrap(H5Fcreate(tmp.c_str(), H5F_ACC_TRUNC, fcpl.get(), fapl.get()), H5Fclose, tmp,
                       "cannot create file");
  {
    H5Handle root = wrap(H5Gopen2(file.get(), "/", H5P_DEFAULT), H5Gclose, tmp, "cannot open '/'");
    write_text_attr(root.get(), "format", kFormat, tmp);
    write_int_attr(root.get(), "version", kVersion, tmp);
    write_text_attr(root.get(), "created", iso_time_now(), tmp);
    write_text_attr(root.get(), "config", json_text(d.config), tmp);
    write_text_attr(root.get(), "plan", d.plan, tmp);
    write_text_attr(root.get(), "recipe", d.recipe, tmp);
    write_text_attr(root.get(), "state", d.state.is_null() ? "{}" : json_text(d.state), tmp);
    write_text_attr(root.get(), "checksum", kChecksumKind, tmp);

    if (!d.tokenizer.empty()) {
      const hsize_t n = d.tokenizer.size();
      H5Handle space = wrap(H5Screate_simple(1, &n, nullptr), H5Sclose, tmp,
                            "cannot create the dataspace of '/tokenizer'");
      H5Handle dset = wrap(H5Dcreate2(root.get(), "tokenizer", H5T_STD_U8LE, space.get(),
                                      H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
                           H5Dclose, tmp, "cannot create dataset '/tokenizer'");
      if (H5Dwrite(dset.get(), H5T_NATIVE_UCHAR, H5S_ALL, H5S_ALL, H5P_DEFAULT,
                   d.tokenizer.data()) < 0)
        fail_h5(tmp, "cannot write dataset '/tokenizer'");
      write_text_attr(dset.get(), "sha256", sha256_hex(d.tokenizer), tmp);
    }

    int written = 0;
    uint64_t total = 0;
    for (const auto* refs : {&d.params, &d.exp_avg, &d.exp_avg_sq})
      for (const auto& t : *refs) {
        uint64_t n = 1;
        for (const int64_t dim : t.shape) n *= uint64_t(dim);
        total += n * 4;
      }
    ProgressMeter progress(cat("checkpoint: writing ", tmp), total);
    auto tensor_done = [&](const TensorRef& t) {
      ++written;
      uint64_t n = 1;
      for (const int64_t dim : t.shape) n *= uint64_t(dim);
      progress.add(n * 4);
      if (write_hook()) write_hook()(written);
    };
    {
      H5Handle params = create_group(root.get(), "params", tmp);
      for (const auto& t : d.params) {
        write_tensor(params.get(), "params", t, tmp, d.params_bf16);
        tensor_done(t);
      }
    }
    if (!d.exp_avg.empty()) {
      H5Handle opt = create_group(root.get(), "optimizer", tmp);
      write_int_attr(opt.get(), "step", d.optimizer_step, tmp);
      write_text_attr(opt.get(), "kind", "adamw", tmp);
      const std::pair<const char*, const std::vector<TensorRef>*> moments[] = {
          {"exp_avg", &d.exp_avg}, {"exp_avg_sq", &d.exp_avg_sq}};
      for (const auto& [name, refs] : moments) {
        H5Handle g = create_group(opt.get(), name, tmp);
        const std::string gname = cat("optimizer/", name);
        for (const auto& t : *refs) {
          write_tensor(g.get(), gname.c_str(), t, tmp);
          tensor_done(t);
        }
      }
    }
  }
  if (!file.close_checked()) fail_h5(tmp, "cannot flush and close the file");
}

}  // namespace

// ---------------------------------------------------------------------------
// Writing
// ---------------------------------------------------------------------------

bool checkpoint_format_available() { return true; }

void set_checkpoint_write_hook(std::function<void(int)> hook) { write_hook() = std::move(hook); }

void write_checkpoint(const std::string& path, const CheckpointData& data) {
  hdf5_init();
  STRATA_CHECK(!path.empty(), "checkpoint: empty file name");
  // Validate everything before touching the disk.
  for (const auto& t : data.params) check_ref(t, path, "params");
  for (const auto& t : data.exp_avg) check_ref(t, path, "optimizer/exp_avg");
  for (const auto& t : data.exp_avg_sq) check_ref(t, path, "optimizer/exp_avg_sq");
  STRATA_CHECK(data.exp_avg.size() == data.exp_avg_sq.size(), "checkpoint ", path,
               ": optimizer state has ", data.exp_avg.size(), " exp_avg but ",
               data.exp_avg_sq.size(), " exp_avg_sq tensors");

  const fs::path final_path(path);
  const fs::path dir = final_path.has_parent_path() ? final_path.parent_path() : fs::path(".");
  std::error_code ec;
  fs::create_directories(dir, ec);
  STRATA_CHECK(!ec, "checkpoint ", path, ": cannot create directory ", dir.string(), ": ",
               ec.message());

  const std::string tmp = path + ".tmp";
  // Our own descriptor on the temporary file: an exclusive advisory lock (one
  // writer at a time; ignored where the file system has no locks) and fsync.
  FileDescriptor fd{::open(tmp.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644)};
  STRATA_CHECK(fd.fd >= 0, "checkpoint ", path, ": cannot create ", tmp, ": ",
               std::strerror(errno));
  if (::flock(fd.fd, LOCK_EX | LOCK_NB) != 0)
    STRATA_CHECK(errno != EWOULDBLOCK, "checkpoint ", path, ": another process is writing ", tmp);
  try {
    write_contents(tmp, data);
    STRATA_CHECK(::fsync(fd.fd) == 0, "checkpoint ", path, ": cannot sync ", tmp, ": ",
                 std::strerror(errno));
    STRATA_CHECK(::rename(tmp.c_str(), path.c_str()) == 0, "checkpoint ", path, ": cannot rename ",
                 tmp, " into place: ", std::strerror(errno));
  } catch (...) {
    ::unlink(tmp.c_str());  // still ours: we hold the lock
    throw;
  }
  fsync_directory(dir.string(), "checkpoint: ");
}

void drain_checkpoint(const CheckpointData& data) {
  std::vector<float> scratch;
  for (const auto* refs : {&data.params, &data.exp_avg, &data.exp_avg_sq})
    for (const TensorRef& t : *refs)
      if (!t.data && t.fill && numel(t.shape) > 0) {
        scratch.resize(static_cast<size_t>(numel(t.shape)));
        t.fill(scratch.data());
      }
}

// ---------------------------------------------------------------------------
// Reading
// ---------------------------------------------------------------------------

CheckpointReader::CheckpointReader(const std::string& path) : path_(path) {
  std::error_code ec;
  const auto st = fs::status(path, ec);
  STRATA_CHECK(fs::exists(st), "checkpoint ", path, ": no such file");
  STRATA_CHECK(!fs::is_directory(st), "checkpoint ", path, ": is a directory, not a file");
  STRATA_CHECK(fs::is_regular_file(st), "checkpoint ", path,
               ": not a regular file (a device, pipe or socket)");
  {
    // Reading the signature ourselves gives a clear message for non-HDF5 input.
    std::FILE* f = std::fopen(path.c_str(), "rb");
    STRATA_CHECK(f, "checkpoint ", path, ": cannot open: ", std::strerror(errno));
    std::fclose(f);
  }
  precheck_checkpoint(path, [&path] {
    const CheckpointReader child(path, Unchecked{});
    child.walk_structure();
  });
  open();
}

CheckpointReader::CheckpointReader(const std::string& path, Unchecked) : path_(path) { open(); }

void CheckpointReader::open() {
  hdf5_init();
  const std::string& path = path_;
#if H5_VERSION_GE(1, 12, 0)
  const htri_t is_h5 = H5Fis_accessible(path.c_str(), H5P_DEFAULT);
#else
  const htri_t is_h5 = H5Fis_hdf5(path.c_str());
#endif
  if (is_h5 == 0) {
    H5Eclear2(H5E_DEFAULT);
    fail(cat("checkpoint ", path, ": not an HDF5 file"));
  }
  if (is_h5 < 0) fail_h5(path, "not a readable HDF5 file");
  H5Handle fapl = file_access(path);
  H5Handle file = wrap(H5Fopen(path.c_str(), H5F_ACC_RDONLY, fapl.get()), H5Fclose, path,
                       "cannot open (truncated or corrupt file?)");
  const hid_t f = file.get();
  STRATA_CHECK(has_attr(f, "format"), "checkpoint ", path,
               ": not a strata checkpoint (no 'format' attribute on '/')");
  const std::string format = read_text_attr(f, "format", path, "/");
  STRATA_CHECK(format == kFormat, "checkpoint ", path, ": not a strata checkpoint (format '",
               one_line(format), "', expected '", kFormat, "')");
  const int64_t version = read_int_attr(f, "version", path, "/");
  STRATA_CHECK(version >= 1 && version <= kVersion, "checkpoint ", path, ": format version ",
               version, " is not supported (this strata reads version ", kVersion, ")");
  if (has_attr(f, "checksum")) {
    const std::string kind = read_text_attr(f, "checksum", path, "/");
    STRATA_CHECK(kind == kChecksumKind, "checkpoint ", path, ": tensor checksums of kind '",
                 one_line(kind), "' are not supported (this strata knows '", kChecksumKind, "')");
    checksums_ = true;
  }
  file_ = file.release();
}

void CheckpointReader::walk_structure() const {
  const hid_t f = hid_t(file_);
  for (const char* name : {"created", "config", "plan", "recipe", "state"})
    if (has_attr(f, name)) (void)read_text_attr(f, name, path_, "/");
  if (has_tokenizer()) {
    (void)tokenizer_size();
    (void)tokenizer_sha256();
    H5Handle dset = wrap(H5Dopen2(f, "tokenizer", H5P_DEFAULT), H5Dclose, path_,
                         "cannot open dataset '/tokenizer'");
    H5Handle type = wrap(H5Dget_type(dset.get()), H5Tclose, path_,
                         "cannot read the type of dataset '/tokenizer'");
    (void)H5Dget_storage_size(dset.get());
  }
  if (has_optimizer()) {
    (void)optimizer_step();
    (void)optimizer_kind();
  }
  for (const char* group : {"params", "optimizer/exp_avg", "optimizer/exp_avg_sq"}) {
    if (!path_exists(f, group)) continue;
    H5Handle g = wrap(H5Gopen2(f, group, H5P_DEFAULT), H5Gclose, path_,
                      cat("cannot open group '", group, "'"));
    for (const auto& [name, shape] : list(group)) {
      const std::string what = cat("tensor '", group, "/", name, "'");
      H5Handle dset = wrap(H5Dopen2(g.get(), name.c_str(), H5P_DEFAULT), H5Dclose, path_,
                           "cannot open " + what);
      H5Handle type =
          wrap(H5Dget_type(dset.get()), H5Tclose, path_, "cannot read the type of " + what);
      (void)H5Tget_class(type.get());
      (void)H5Tget_size(type.get());
      (void)is_bf16_type(type.get());
      // The chunk index, where a tool rewrote the file chunked (strata writes
      // contiguous datasets).
      (void)H5Dget_storage_size(dset.get());
      if (has_attr(dset.get(), kChecksumAttr))
        (void)read_int_attr(dset.get(), kChecksumAttr, path_, what);
    }
  }
  (void)params_dtype();
}

CheckpointReader::~CheckpointReader() {
  if (file_ >= 0) H5Fclose(hid_t(file_));
}

int64_t CheckpointReader::version() const {
  return read_int_attr(hid_t(file_), "version", path_, "/");
}

std::string CheckpointReader::created() const {
  return has_attr(hid_t(file_), "created") ? read_text_attr(hid_t(file_), "created", path_, "/")
                                           : "";
}

nlohmann::json CheckpointReader::config() const {
  return parse_json_attr(hid_t(file_), "config", path_);
}

std::string CheckpointReader::plan() const {
  std::string plan = read_text_attr(hid_t(file_), "plan", path_, "/");
  // A layer plan is one line of kinds and options: a control character (a
  // corrupt or hostile file) is refused here, the text quoted on one line.
  STRATA_CHECK(std::none_of(plan.begin(), plan.end(),
                            [](char c) { return static_cast<unsigned char>(c) < 0x20; }),
               "checkpoint ", path_, ": attribute 'plan' is not a layer plan ('", one_line(plan),
               "')");
  return plan;
}

std::string CheckpointReader::recipe() const {
  return has_attr(hid_t(file_), "recipe") ? read_text_attr(hid_t(file_), "recipe", path_, "/") : "";
}

nlohmann::json CheckpointReader::state() const {
  return parse_json_attr(hid_t(file_), "state", path_);
}

bool CheckpointReader::has_tokenizer() const { return link_exists(hid_t(file_), "tokenizer"); }

int64_t CheckpointReader::tokenizer_size() const {
  if (!has_tokenizer()) return 0;
  H5Handle dset = wrap(H5Dopen2(hid_t(file_), "tokenizer", H5P_DEFAULT), H5Dclose, path_,
                       "cannot open dataset '/tokenizer'");
  return numel(dataset_shape(dset.get(), path_, "dataset '/tokenizer'"));
}

std::string CheckpointReader::tokenizer_sha256() const {
  if (!has_tokenizer()) return "";
  H5Handle dset = wrap(H5Dopen2(hid_t(file_), "tokenizer", H5P_DEFAULT), H5Dclose, path_,
                       "cannot open dataset '/tokenizer'");
  return read_text_attr(dset.get(), "sha256", path_, "'/tokenizer'");
}

std::string CheckpointReader::tokenizer() const {
  if (!has_tokenizer()) return "";
  const std::string what = "dataset '/tokenizer'";
  H5Handle dset = wrap(H5Dopen2(hid_t(file_), "tokenizer", H5P_DEFAULT), H5Dclose, path_,
                       "cannot open " + what);
  H5Handle type = wrap(H5Dget_type(dset.get()), H5Tclose, path_, "cannot read the type of " + what);
  STRATA_CHECK(H5Tget_class(type.get()) == H5T_INTEGER && H5Tget_size(type.get()) == 1,
               "checkpoint ", path_, ": ", what, " is not uint8");
  const auto shape = dataset_shape(dset.get(), path_, what);
  STRATA_CHECK(shape.size() == 1, "checkpoint ", path_, ": ", what, " is not 1-D");
  // A sentencepiece model is megabytes. A dataset's shape is only a claim (its
  // storage may not exist): a larger one is refused before the buffer is
  // allocated (a 1 TB claim in a 20 KB file asked for 1 TB).
  constexpr int64_t kMaxTokenizerBytes = int64_t(1) << 30;
  STRATA_CHECK(shape[0] >= 0 && shape[0] <= kMaxTokenizerBytes, "checkpoint ", path_, ": ", what,
               " claims ", shape[0], " bytes, more than a tokenizer holds (at most 1 GiB)");
  std::string bytes(size_t(shape[0]), '\0');
  if (!bytes.empty() &&
      H5Dread(dset.get(), H5T_NATIVE_UCHAR, H5S_ALL, H5S_ALL, H5P_DEFAULT, bytes.data()) < 0)
    fail_h5(path_, "cannot read " + what);
  const std::string want = read_text_attr(dset.get(), "sha256", path_, "'/tokenizer'");
  const std::string got = sha256_hex(bytes);
  STRATA_CHECK(got == want, "checkpoint ", path_, ": ", what, " is corrupt (sha256 ", got,
               ", attribute says ", one_line(want), ")");
  return bytes;
}

bool CheckpointReader::has_optimizer() const { return link_exists(hid_t(file_), "optimizer"); }

int64_t CheckpointReader::optimizer_step() const {
  if (!has_optimizer()) return 0;
  H5Handle g = wrap(H5Gopen2(hid_t(file_), "optimizer", H5P_DEFAULT), H5Gclose, path_,
                    "cannot open group '/optimizer'");
  return read_int_attr(g.get(), "step", path_, "'/optimizer'");
}

std::string CheckpointReader::optimizer_kind() const {
  if (!has_optimizer()) return "";
  H5Handle g = wrap(H5Gopen2(hid_t(file_), "optimizer", H5P_DEFAULT), H5Gclose, path_,
                    "cannot open group '/optimizer'");
  return has_attr(g.get(), "kind") ? read_text_attr(g.get(), "kind", path_, "'/optimizer'") : "";
}

std::vector<std::pair<std::string, std::vector<int64_t>>> CheckpointReader::list(
    const std::string& group) const {
  STRATA_CHECK(path_exists(hid_t(file_), group), "checkpoint ", path_, ": no group '", group, "'");
  H5Handle g = wrap(H5Gopen2(hid_t(file_), group.c_str(), H5P_DEFAULT), H5Gclose, path_,
                    cat("cannot open group '", group, "'"));
  std::vector<std::pair<std::string, std::vector<int64_t>>> out;
  for (const std::string& name : link_names(g.get(), path_, cat("group '", group, "'"))) {
    H5Handle obj = wrap(H5Oopen(g.get(), name.c_str(), H5P_DEFAULT), H5Oclose, path_,
                        cat("cannot open '", group, "/", name, "'"));
    if (H5Iget_type(obj.get()) != H5I_DATASET) continue;
    out.emplace_back(name, dataset_shape(obj.get(), path_, cat("tensor '", group, "/", name, "'")));
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::string CheckpointReader::params_dtype() const {
  const auto tensors = list("params");
  if (tensors.empty()) return "float32";
  H5Handle dset =
      wrap(H5Dopen2(hid_t(file_), ("params/" + tensors.front().first).c_str(), H5P_DEFAULT),
           H5Dclose, path_, "cannot open /params/" + tensors.front().first);
  H5Handle type = wrap(H5Dget_type(dset.get()), H5Tclose, path_, "cannot read a tensor's type");
  return is_bf16_type(type.get()) ? "bfloat16" : "float32";
}

void CheckpointReader::read(const std::string& group, const std::vector<TensorRef>& refs) const {
  STRATA_CHECK(path_exists(hid_t(file_), group), "checkpoint ", path_, ": no group '", group, "'");
  H5Handle g = wrap(H5Gopen2(hid_t(file_), group.c_str(), H5P_DEFAULT), H5Gclose, path_,
                    cat("cannot open group '", group, "'"));
  for (const auto& t : refs) {
    const std::string what = cat("tensor '", group, "/", t.name, "'");
    check_tensor_name(t.name, path_);
    STRATA_CHECK(link_exists(g.get(), t.name), "checkpoint ", path_, ": ", what, " not found");
    H5Handle dset = wrap(H5Dopen2(g.get(), t.name.c_str(), H5P_DEFAULT), H5Dclose, path_,
                         cat("cannot open ", what, " (not a dataset?)"));
    H5Handle type =
        wrap(H5Dget_type(dset.get()), H5Tclose, path_, "cannot read the type of " + what);
    const H5T_class_t cls = H5Tget_class(type.get());
    const size_t size = H5Tget_size(type.get());
    const bool bf16 = group == "params" && is_bf16_type(type.get());
    STRATA_CHECK((cls == H5T_FLOAT && size == 4) || bf16, "checkpoint ", path_, ": ", what,
                 " has dtype ",
                 cls == H5T_FLOAT     ? "float"
                 : cls == H5T_INTEGER ? "int"
                                      : "non-numeric",
                 size * 8, ", expected float32", group == "params" ? " or bfloat16" : "");
    const auto shape = dataset_shape(dset.get(), path_, what);
    STRATA_CHECK(shape == t.shape, "checkpoint ", path_, ": ", what, " has shape ",
                 shape_str(shape), ", expected ", shape_str(t.shape));
    // The stored checksum, read before the values: a file with checksums
    // has one on every tensor.
    const bool checked = has_attr(dset.get(), kChecksumAttr);
    STRATA_CHECK(checked || !checksums_, "checkpoint ", path_, ": ", what,
                 " has no checksum (attribute '", kChecksumAttr,
                 "'), though the file has them: the file is corrupt");
    int64_t stored = 0;
    if (checked) {
      stored = read_int_attr(dset.get(), kChecksumAttr, path_, what);
      STRATA_CHECK(stored >= 0 && stored <= int64_t(UINT32_MAX), "checkpoint ", path_, ": ", what,
                   " has checksum ", stored, ", not a CRC-32C: the file is corrupt");
    }
    if (numel(shape) == 0) continue;
    STRATA_CHECK(t.data, "checkpoint ", path_, ": no buffer to read ", what, " into");
    if (H5Dread(dset.get(), H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, t.data) < 0)
      fail_h5(path_, "cannot read " + what + " (truncated or corrupt file?)");
    verify_values(t.data, numel(shape), checked, uint32_t(stored), path_, what);
  }
}

}  // namespace strata
