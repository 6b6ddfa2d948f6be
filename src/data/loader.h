// Batches for training: packed pretraining windows and SFT examples. A loader
// is deterministic in (seed, epoch) and its position is part of the
// checkpoint (state() / set_state()), so a resumed run sees the same batches.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/shards.h"

namespace strata {

// B rows of T tokens; targets[b*T + t] is the token to predict after
// tokens[b*T + t], or kIgnoreIndex (-100) where no loss is taken.
struct Batch {
  int B = 0, T = 0;
  std::vector<int32_t> tokens, targets;
  int64_t count_targets() const;  // entries != -100
};

class Loader {
 public:
  virtual ~Loader() = default;
  // Fills `out` with this rank's `batch` rows of the next global batch of
  // `batch * world` rows (rank r takes rows [r*batch, (r+1)*batch)), and
  // advances by the global batch on every rank.
  virtual void next(int batch, Batch& out, int rank = 0, int world = 1) = 0;
  virtual nlohmann::json state() const = 0;             // {"epoch": e, "position": p}
  virtual void set_state(const nlohmann::json& s) = 0;  // throws strata::Error on bad state
  virtual int64_t rows_per_epoch() const = 0;
  virtual std::string describe() const = 0;  // one line for logs
};

// Pretraining: the split's token stream cut into windows of seq_len + 1 tokens
// with stride seq_len (tokens[0..T) and targets = tokens[1..T]), so each token
// is predicted exactly once per epoch. With shuffle, each epoch visits the
// windows in the order of a permutation drawn from Philox(seed, epoch);
// without, in order (validation). Throws when the split has fewer than
// seq_len + 1 tokens.
std::unique_ptr<Loader> make_pretrain_loader(std::shared_ptr<const TokenDataset> data, int seq_len,
                                             uint64_t seed, bool shuffle);

}  // namespace strata
