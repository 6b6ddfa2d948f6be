// Checkpoints in a build without HDF5 (libhdf5-dev): every read or write is
// refused in one line naming what the build lacks; runs without checkpoints
// (checkpoint.interval = 0, no model.init_from) train as usual.
#include <string>
#include <vector>

#include "core/error.h"
#include "io/checkpoint.h"
#include "io/checkpoint_format.h"

namespace strata {
namespace {

[[noreturn]] void no_hdf5(const std::string& path, const char* what) {
  fail(cat("this build has no HDF5 (libhdf5-dev): checkpoint ", path, " cannot be ", what,
           " (train with checkpoint.final = false, or rebuild with HDF5)"));
}

}  // namespace

bool checkpoint_format_available() { return false; }

void set_checkpoint_write_hook(std::function<void(int)> hook) { (void)hook; }

void write_checkpoint(const std::string& path, const CheckpointData& data) {
  (void)data;
  no_hdf5(path, "written");
}

// The tensors' fill callbacks still run: they may be collective.
void drain_checkpoint(const CheckpointData& data) {
  std::vector<float> scratch;
  for (const auto* refs : {&data.params, &data.exp_avg, &data.exp_avg_sq})
    for (const TensorRef& t : *refs) {
      int64_t n = 1;
      for (int64_t d : t.shape) n *= d;
      if (!t.data && t.fill && n > 0) {
        scratch.resize(static_cast<size_t>(n));
        t.fill(scratch.data());
      }
    }
}

CheckpointReader::CheckpointReader(const std::string& path) : path_(path) { no_hdf5(path, "read"); }
// A reader is never constructed here; the members only complete the class.
CheckpointReader::~CheckpointReader() = default;
int64_t CheckpointReader::version() const { no_hdf5(path_, "read"); }
std::string CheckpointReader::created() const { no_hdf5(path_, "read"); }
nlohmann::json CheckpointReader::config() const { no_hdf5(path_, "read"); }
std::string CheckpointReader::plan() const { no_hdf5(path_, "read"); }
std::string CheckpointReader::recipe() const { no_hdf5(path_, "read"); }
nlohmann::json CheckpointReader::state() const { no_hdf5(path_, "read"); }
std::string CheckpointReader::tokenizer() const { no_hdf5(path_, "read"); }
bool CheckpointReader::has_tokenizer() const { no_hdf5(path_, "read"); }
int64_t CheckpointReader::tokenizer_size() const { no_hdf5(path_, "read"); }
std::string CheckpointReader::tokenizer_sha256() const { no_hdf5(path_, "read"); }
bool CheckpointReader::has_optimizer() const { no_hdf5(path_, "read"); }
int64_t CheckpointReader::optimizer_step() const { no_hdf5(path_, "read"); }
std::string CheckpointReader::optimizer_kind() const { no_hdf5(path_, "read"); }
std::string CheckpointReader::params_dtype() const { no_hdf5(path_, "read"); }
std::vector<std::pair<std::string, std::vector<int64_t>>> CheckpointReader::list(
    const std::string& group) const {
  (void)group;
  no_hdf5(path_, "read");
}
void CheckpointReader::read(const std::string& group, const std::vector<TensorRef>& refs) const {
  (void)group;
  (void)refs;
  no_hdf5(path_, "read");
}

}  // namespace strata
