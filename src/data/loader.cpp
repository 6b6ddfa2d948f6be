// Pretraining loader (packed windows over a token stream) and the row/epoch
// machinery shared with the SFT loader (row_loader.h).
#include "data/loader.h"

#include <algorithm>
#include <numeric>

#include "core/error.h"
#include "core/philox.h"
#include "core/targets.h"
#include "data/row_loader.h"

namespace strata {

int64_t Batch::count_targets() const {
  int64_t n = 0;
  for (const int32_t t : targets) n += t != kIgnoreIndex;
  return n;
}

namespace detail {

std::vector<int64_t> shuffled_order(int64_t n, uint64_t seed, uint32_t purpose, int64_t epoch) {
  std::vector<int64_t> p(size_t(std::max<int64_t>(n, 0)));
  std::iota(p.begin(), p.end(), int64_t(0));
  const PhiloxStream rng(seed, purpose, uint32_t(epoch));
  for (int64_t i = n - 1; i > 0; --i) {
    // j uniform in [0, i]: the high word of a 64-bit draw times (i + 1).
    const Philox4x32 r = rng.block(uint64_t(i));
    const uint64_t x = (uint64_t(r.v[0]) << 32) | r.v[1];
    const auto j = int64_t((static_cast<unsigned __int128>(x) * uint64_t(i + 1)) >> 64);
    std::swap(p[size_t(i)], p[size_t(j)]);
  }
  return p;
}

void RowLoader::next(int batch, Batch& out, int rank, int world) {
  STRATA_CHECK(batch >= 1, "loader: batch size must be positive, got ", batch);
  STRATA_CHECK(world >= 1 && rank >= 0 && rank < world, "loader: rank ", rank,
               " outside world size ", world);
  const int64_t rows = rows_per_epoch();
  const int T = seq_len_;
  out.B = batch;
  out.T = T;
  out.tokens.resize(size_t(batch) * T);
  out.targets.resize(size_t(batch) * T);
  for (int i = 0; i < batch; ++i) {
    const int64_t g = position_ + int64_t(rank) * batch + i;  // global row, may pass the epoch end
    fill_row(epoch_ + g / rows, g % rows, out.tokens.data() + size_t(i) * T,
             out.targets.data() + size_t(i) * T);
  }
  position_ += int64_t(batch) * world;
  epoch_ += position_ / rows;
  position_ %= rows;
}

nlohmann::json RowLoader::state() const { return {{"epoch", epoch_}, {"position", position_}}; }

void RowLoader::set_state(const nlohmann::json& s) {
  STRATA_CHECK(s.is_object(), "loader state: expected {\"epoch\": E, \"position\": P}, got ",
               s.dump());
  for (const auto& [key, value] : s.items())
    STRATA_CHECK(key == "epoch" || key == "position", "loader state: unexpected key '", key, "'");
  for (const char* key : {"epoch", "position"})
    STRATA_CHECK(s.contains(key) && s.at(key).is_number_integer(), "loader state: '", key,
                 "' must be an integer, got ", s.contains(key) ? s.at(key).dump() : "nothing");
  const int64_t e = s.at("epoch").get<int64_t>(), p = s.at("position").get<int64_t>();
  STRATA_CHECK(e >= 0 && e < (int64_t(1) << 32), "loader state: bad epoch ", e);
  STRATA_CHECK(p >= 0 && p < rows_per_epoch(), "loader state: position ", p,
               " outside the epoch's ", rows_per_epoch(),
               " rows (was the state saved with other data or sequence length?)");
  epoch_ = e;
  position_ = p;
}

}  // namespace detail

namespace {

constexpr uint32_t kPretrainShuffle = 0x50524531u;  // "PRE1"

class PretrainLoader final : public detail::RowLoader {
 public:
  PretrainLoader(std::shared_ptr<const TokenDataset> data, int seq_len, uint64_t seed, bool shuffle)
      : RowLoader(seq_len),
        data_(std::move(data)),
        seed_(seed),
        shuffle_(shuffle),
        windows_((data_->num_tokens() - 1) / seq_len),
        order_([this](int64_t epoch) {
          return detail::shuffled_order(windows_, seed_, kPretrainShuffle, epoch);
        }) {}

  int64_t rows_per_epoch() const override { return windows_; }

  std::string describe() const override {
    return cat("pretrain ", data_->dir(), " (", data_->split(), "): ", data_->num_tokens(),
               " tokens, ", data_->num_documents(), " documents, ", windows_, " windows of ",
               seq_len_, "+1 tokens, ",
               shuffle_ ? cat("shuffled (seed ", seed_, ")") : std::string("in order"));
  }

 protected:
  void fill_row(int64_t epoch, int64_t index, int32_t* tokens, int32_t* targets) override {
    const int64_t w = shuffle_ ? order_.get(epoch)[size_t(index)] : index;
    const int32_t* src = data_->tokens() + w * seq_len_;
    std::copy(src, src + seq_len_, tokens);
    std::copy(src + 1, src + seq_len_ + 1, targets);
  }

 private:
  std::shared_ptr<const TokenDataset> data_;
  uint64_t seed_;
  bool shuffle_;
  int64_t windows_;
  detail::EpochCache<std::vector<int64_t>> order_;
};

}  // namespace

std::unique_ptr<Loader> make_pretrain_loader(std::shared_ptr<const TokenDataset> data, int seq_len,
                                             uint64_t seed, bool shuffle) {
  STRATA_CHECK(data, "pretrain loader: no dataset");
  STRATA_CHECK(seq_len >= 1, "pretrain loader: sequence length must be positive, got ", seq_len);
  STRATA_CHECK(data->num_tokens() >= int64_t(seq_len) + 1, "pretrain loader: dataset ", data->dir(),
               " split '", data->split(), "' has ", data->num_tokens(),
               " tokens, fewer than sequence length + 1 = ", int64_t(seq_len) + 1);
  return std::make_unique<PretrainLoader>(std::move(data), seq_len, seed, shuffle);
}

}  // namespace strata
