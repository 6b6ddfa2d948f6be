// Internal to src/data: what the pretraining and SFT loaders share. An epoch is
// a fixed number of rows; RowLoader hands out global batches of rows (wrapping
// into the next epoch mid-batch), slices them by rank, and keeps the position
// as (epoch, rows consumed in the epoch).
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <utility>
#include <vector>

#include "data/loader.h"

namespace strata::detail {

// A permutation of [0, n) drawn by Fisher-Yates from Philox(seed, purpose, epoch):
// the same on every machine and thread count.
std::vector<int64_t> shuffled_order(int64_t n, uint64_t seed, uint32_t purpose, int64_t epoch);

// Per-epoch values (permutations, packed streams) built on demand; a batch
// touches at most a few consecutive epochs, so a few entries are kept.
template <typename V>
class EpochCache {
 public:
  explicit EpochCache(std::function<V(int64_t)> make) : make_(std::move(make)) {}
  const V& get(int64_t epoch) {
    for (const auto& e : entries_)
      if (e.first == epoch) return e.second;
    if (entries_.size() >= 3) entries_.pop_front();
    entries_.emplace_back(epoch, make_(epoch));
    return entries_.back().second;
  }

 private:
  std::function<V(int64_t)> make_;
  std::deque<std::pair<int64_t, V>> entries_;
};

class RowLoader : public Loader {
 public:
  explicit RowLoader(int seq_len) : seq_len_(seq_len) {}
  RowLoader(const RowLoader&) = delete;  // derived loaders hold callbacks bound to `this`
  RowLoader& operator=(const RowLoader&) = delete;
  void next(int batch, Batch& out, int rank = 0, int world = 1) override;
  nlohmann::json state() const override;
  void set_state(const nlohmann::json& s) override;

 protected:
  // Writes row `index` (in [0, rows_per_epoch())) of epoch `epoch`: seq_len
  // tokens and seq_len targets.
  virtual void fill_row(int64_t epoch, int64_t index, int32_t* tokens, int32_t* targets) = 0;
  int seq_len_;

 private:
  int64_t epoch_ = 0, position_ = 0;
};

}  // namespace strata::detail
