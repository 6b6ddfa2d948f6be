// Shuffle (Layer Parallelism's study, section 3 a): a run of layers executed
// as standard layers in a random order, a new permutation for every forward
// pass: position j of the run (streams x_{2(first+j)} .. x_{2(first+j+1)})
// runs layer first + perm[j]. The permutation is a pure function of the plan
// option shuffle_seed (default 0), the run's first layer and the pass number,
// so the backward replays its forward's order and runs are reproducible.
#include <algorithm>
#include <numeric>

#include "core/philox.h"
#include "model/kinds/kinds.h"

namespace strata::kinds {

std::vector<int> shuffle_permutation(uint64_t seed, int first, int n, uint64_t pass) {
  std::vector<int> perm(static_cast<size_t>(n));
  std::iota(perm.begin(), perm.end(), 0);
  const PhiloxStream rng(seed, 0x53485546u /* "SHUF" */, uint32_t(first));
  for (int k = n - 1; k > 0; --k) {  // Fisher-Yates
    const int j = std::min(k, int(rng.uniform(pass * uint64_t(n) + uint64_t(k)) * (k + 1)));
    std::swap(perm[size_t(k)], perm[size_t(j)]);
  }
  return perm;
}

template <typename T>
void shuffle_forward(UnitForward<T>& f, const PlanUnit& u) {
  const auto perm =
      shuffle_permutation(uint64_t(f.plan().number("shuffle_seed", 0)), u.first, u.size, f.pass());
  for (int j = 0; j < u.size; ++j)
    standard_layer_forward(f, u.first + perm[size_t(j)], 2 * (u.first + j) + 1);
}

template <typename T>
void shuffle_backward(UnitBackward<T>& b, const PlanUnit& u) {
  const auto perm =
      shuffle_permutation(uint64_t(b.plan().number("shuffle_seed", 0)), u.first, u.size, b.pass());
  for (int j = u.size - 1; j >= 0; --j)
    standard_layer_backward(b, u.first + perm[size_t(j)], 2 * (u.first + j) + 1);
}

const KindInfo& shuffle_kind() {
  static const KindInfo info{
      .name = "shuffle",
      .kind = LayerKind::Shuffle,
      .unit_size = -1,
      .summary =
          "a run of standard layers in a new random order every forward pass (seed shuffle_seed; "
          "the study's shuffle; not for generation)",
      .example = "standard,shuffle*3;shuffle_seed=9",
      .options = {{"shuffle_seed", 0, 4294967295.0, true, "seed of the orders (default 0)"}},
      .no_generation =
          "whose order changes every forward pass (a KV cache cannot follow it); shuffle is for "
          "evaluation and training",
      .f32 = {shuffle_forward<float>, shuffle_backward<float>},
      .f64 = {shuffle_forward<double>, shuffle_backward<double>},
  };
  return info;
}

}  // namespace strata::kinds
