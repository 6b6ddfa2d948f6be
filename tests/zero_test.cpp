// ZeRO-2/3's weight store on one process (a data-parallel group of one, so
// every collective is a copy): training through the store (gradients
// reduce-scattered per bucket, stage 3's weights gathered per unit, AdamW on
// the shards) equals training on the arenas bit for bit, for every plan kind,
// LayerSkip dropout and exits, recomputation, tied embeddings, frozen layers
// and bf16; each unit is gathered twice per micro-batch and each bucket
// reduce-scattered once; the shards tile every tensor on any group size; the
// memory estimate counts the store's shards and its buffers' peak.
// (tests/mpi_train_test.sh, phases zero and zero_layouts, and
// tests/mpi_model_test.cpp run the same under mpirun.)
#include <gtest/gtest.h>

#include <cstring>
#include <set>

#include "counting_comm.h"
#include "every_plan_kind.h"
#include "model/memory.h"
#include "model/model.h"
#include "model/stage_runner.h"
#include "model/zero.h"
#include "ops/backend.h"
#include "testing.h"
#include "train/optimizer.h"

namespace strata {
namespace {

LlamaConfig config(bool tied = false) { return testing::four_layer_config(tied); }

struct Job {
  std::string plan = "standard*4";
  int stage = 0;  // 0: the arenas, no store
  bool bf16 = false, tied = false;
  bool bias = true;  // q/k/v/o biases (the k bias's gradient is zero in exact arithmetic)
  Recompute recompute = Recompute::None;
  const LayerSkipStep* skip = nullptr;
  std::vector<bool> trainable;  // empty: all
  // Micro-batches per step. With one, the store's sums are the arena's bit for
  // bit; with more, each micro-batch's gradient joins the shard as it is
  // reduce-scattered, where the arena adds them up first: the same terms,
  // associated differently.
  int micro = 1;
};

struct Outcome {
  std::vector<double> losses;
  std::vector<std::vector<float>> grads;    // of the first step, per tensor
  std::vector<std::vector<float>> weights;  // after the last step, per tensor
  std::vector<int64_t> gathers, scatters;   // per bucket, after the first step
  int64_t peak = 0;                         // the store's buffers
  testing::CountingComm::Counts counts;     // of the first step
};

// Three optimizer steps of job.micro micro-batches each, as `strata train` runs them.
Outcome train(const Job& s) {
  LlamaConfig c = config(s.tied);
  c.attention_bias = s.bias;
  const LayerPlan plan = LayerPlan::parse(s.plan, c.num_hidden_layers);
  auto local = make_local_comm();
  testing::CountingComm dp(*local);
  auto backend = ops::make_backend<float>();
  ops::Backend<float>& be = *backend;
  ZeroShards* store = nullptr;
  Model<float> m(c, plan, std::move(backend), nullptr,
                 s.stage ? zero_store_factory(dp, s.stage, &store) : WeightStoreFactory<float>());
  // (The CPU backend's precision is the process's: set it either way.)
  be.set_matmul_precision(s.bf16 ? ops::MatmulPrecision::BF16 : ops::MatmulPrecision::FP32);
  m.set_recompute(s.recompute);
  m.init_weights(11);
  const ParamLayout& L = m.layout();
  std::vector<bool> mask = s.trainable;
  if (mask.empty()) mask.assign(L.tensors().size(), true);
  m.set_trainable(mask);
  AdamWConfig oc;
  oc.lr = 1e-2;
  oc.grad_clip = 0.5;  // clipping on: the norm is summed over the shards
  std::unique_ptr<AdamW<float>> opt;
  if (store) {
    opt = make_sharded_adamw(be, L, oc, *store, mask);
  } else {
    opt = std::make_unique<AdamW<float>>(be, L, oc, mask);
  }
  const int B = 4, T = 9;
  Outcome r;
  for (uint32_t step = 0; step < 3; ++step) {
    m.zero_grad();
    for (uint32_t micro = 0; micro < uint32_t(s.micro); ++micro) {
      const auto tokens = testing::random_tokens(B * T, c.vocab_size, 10 + 2 * step + micro);
      const auto targets = testing::random_tokens(B * T, c.vocab_size, 50 + 2 * step + micro);
      const LossResult l = m.forward_backward(tokens.data(), targets.data(), B, T, 0.25, s.skip);
      r.losses.push_back(l.loss_sum);
      for (double e : l.exit_loss_sum) r.losses.push_back(e);
    }
    if (store) store->finish_gradients();
    if (step == 0) {
      for (size_t t = 0; t < L.tensors().size(); ++t) {
        const int64_t n = L[int(t)].numel;
        if (!store) {
          const float* g = m.grad(int(t));
          r.grads.emplace_back(g, g + n);
          continue;
        }
        // One rank: its shard of a bucket is the whole bucket.
        const WeightBucket& k = store->buckets()[size_t(m.bucket_of(int(t)))];
        const float* g = store->gradient_shard() + store->shard_offset(m.bucket_of(int(t))) +
                         (L[int(t)].offset - k.offset);
        r.grads.emplace_back(g, g + n);
      }
      if (store)
        for (size_t b = 0; b < store->buckets().size(); ++b) {
          r.gathers.push_back(store->gathers(int(b)));
          r.scatters.push_back(store->scatters(int(b)));
        }
      r.counts = dp.counts();
    }
    const double norm = store
                            ? sharded_step(*opt, *store, s.stage == 2 ? m.params() : nullptr, oc.lr)
                            : opt->step(m.params(), m.grads(), oc.lr);
    r.losses.push_back(norm);
  }
  r.weights.resize(L.tensors().size());
  m.read_weights([&](const WeightBucket& k, const float* base) {
    for (int t = k.first; t <= k.last; ++t)
      r.weights[size_t(t)].assign(base + (L[t].offset - k.offset),
                                  base + (L[t].offset - k.offset) + L[t].numel);
  });
  if (store) r.peak = store->peak_buffer_bytes();
  return r;
}

void expect_bitwise(const Outcome& a, const Outcome& b) {
  ASSERT_EQ(a.losses.size(), b.losses.size());
  for (size_t i = 0; i < a.losses.size(); ++i)
    if (!std::isnan(a.losses[i])) {
      EXPECT_EQ(a.losses[i], b.losses[i]) << "loss or gradient norm " << i;
    }
  ASSERT_EQ(a.grads.size(), b.grads.size());
  for (size_t t = 0; t < a.grads.size(); ++t)
    EXPECT_EQ(std::memcmp(a.grads[t].data(), b.grads[t].data(), a.grads[t].size() * 4), 0)
        << "gradient of tensor " << t << " differs";
  ASSERT_EQ(a.weights.size(), b.weights.size());
  for (size_t t = 0; t < a.weights.size(); ++t)
    EXPECT_EQ(std::memcmp(a.weights[t].data(), b.weights[t].data(), a.weights[t].size() * 4), 0)
        << "weights of tensor " << t << " differ after 3 steps";
}

// Per tensor ||a - b|| <= rtol ||a||.
void expect_close(const std::vector<std::vector<float>>& a,
                  const std::vector<std::vector<float>>& b, double rtol, const char* what) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t t = 0; t < a.size(); ++t) {
    double d2 = 0, n2 = 0;
    for (size_t i = 0; i < a[t].size(); ++i) {
      d2 += (double(a[t][i]) - b[t][i]) * (double(a[t][i]) - b[t][i]);
      n2 += double(a[t][i]) * a[t][i];
    }
    EXPECT_LE(std::sqrt(d2), rtol * std::sqrt(n2)) << what << " of tensor " << t;
  }
}

const auto& kPlans = testing::every_plan_kind_cstr();

TEST(Zero, StoreEqualsTheArenasBitwise) {
  for (const char* plan : kPlans)
    for (bool bf16 : {false, true}) {
      Job s;
      s.plan = plan;
      s.bf16 = bf16;
      const Outcome arenas = train(s);
      bool moved = false;
      for (const auto& g : arenas.grads)
        for (float v : g) moved |= v != 0;
      ASSERT_TRUE(moved);
      for (int stage : {2, 3}) {
        SCOPED_TRACE(cat(plan, bf16 ? " bf16" : " fp32", " ZeRO-", stage));
        s.stage = stage;
        expect_bitwise(arenas, train(s));
      }
    }
}

TEST(Zero, UnderLayerDropoutExitsAndRecomputation) {
  for (const char* plan : {"standard*4", "ladder*4", "lp*2,standard*2", "spd*4;spd_degree=2"})
    for (Recompute mode : {Recompute::None, Recompute::Selective, Recompute::Full}) {
      SCOPED_TRACE(cat(plan, " recompute ", recompute_name(mode)));
      LayerSkipStep skip;
      skip.keep = {{1, 1, 1, 1}, {1, 0, 1, 0}, {0, 0, 0, 0}, {0, 1, 1, 1}};
      skip.exit_weight = {0.1, 0.2, 0.3, 1.0};
      if (std::string(plan).rfind("lp", 0) == 0) {  // layers 0-1 and 2-3 are units
        skip.keep[1] = skip.keep[0];
        skip.keep[3] = skip.keep[2];
        skip.exit_weight[0] = skip.exit_weight[2] = 0;
      }
      Job s;
      s.plan = plan;
      s.recompute = mode;
      s.skip = &skip;
      const Outcome arenas = train(s);
      for (int stage : {2, 3}) {
        s.stage = stage;
        expect_bitwise(arenas, train(s));
      }
    }
}

TEST(Zero, TiedEmbeddingsAndFrozenLayers) {
  const LlamaConfig c = config(true);
  const ParamLayout L(c);
  // Layers 0 and 1 frozen (backward stops above them), and layer 3's MLP.
  std::vector<bool> mask(L.tensors().size(), true);
  for (size_t t = 0; t < mask.size(); ++t) {
    const ParamInfo& p = L[int(t)];
    if (p.layer == 0 || p.layer == 1) mask[t] = false;
    if (p.layer == 3 && p.name.find("mlp") != std::string::npos) mask[t] = false;
  }
  mask[size_t(L.embed)] = false;  // the tied head frozen too
  for (bool freeze : {false, true}) {
    Job s;
    s.tied = true;
    if (freeze) s.trainable = mask;
    const Outcome arenas = train(s);
    for (int stage : {2, 3}) {
      SCOPED_TRACE(cat(freeze ? "frozen layers" : "all trained", " ZeRO-", stage));
      s.stage = stage;
      const Outcome z = train(s);
      expect_bitwise(arenas, z);
      // A bucket with nothing to train is never reduce-scattered.
      if (freeze) {
        EXPECT_EQ(z.scatters[0], 0);  // the embedding (= the head)
        EXPECT_EQ(z.scatters[1], 0);
        EXPECT_EQ(z.scatters[2], 0);
        EXPECT_EQ(z.scatters[3], 1);
      }
    }
  }
}

// Gradient accumulation: two micro-batches per step agree to float rounding.
TEST(Zero, AccumulatedMicroBatchesAgreeToRounding) {
  for (const char* plan : {"standard*4", "ladder*4", "spd*4;spd_degree=2"})
    for (int stage : {2, 3}) {
      SCOPED_TRACE(cat(plan, " ZeRO-", stage));
      Job s;
      s.plan = plan;
      s.micro = 2;
      // Without a tensor whose gradient is pure rounding (the k bias's), which
      // AdamW would normalise into steps of lr whatever the rounding was.
      s.bias = false;
      const Outcome arenas = train(s);
      s.stage = stage;
      const Outcome z = train(s);
      for (size_t i = 0; i < z.losses.size(); ++i)
        if (!std::isnan(z.losses[i])) {
          EXPECT_NEAR(z.losses[i], arenas.losses[i], 1e-6 * arenas.losses[i]);
        }
      expect_close(arenas.grads, z.grads, 1e-6, "gradient");
      expect_close(arenas.weights, z.weights, 1e-6, "weights");
    }
}

// Per micro-batch each layer's weights are gathered twice (forward, then
// backward), the kept embedding and head once per step; every trained bucket
// is reduce-scattered once per micro-batch; the counting communicator sees
// exactly these collectives, all asynchronous.
TEST(Zero, GathersTwicePerUnitAndScattersOnce) {
  for (const char* plan : {"standard*4", "ladder*4", "lp*2,standard*2"})
    for (int stage : {2, 3}) {
      SCOPED_TRACE(cat(plan, " ZeRO-", stage));
      Job s;
      s.plan = plan;
      s.stage = stage;
      s.micro = 2;
      const Outcome z = train(s);
      const size_t n = z.gathers.size();  // embedding, 4 layers, head
      ASSERT_EQ(n, 6u);
      int64_t gathers = 0, scatters = 0;
      for (size_t b = 0; b < n; ++b) {
        const bool layer = b > 0 && b + 1 < n;
        EXPECT_EQ(z.gathers[b], stage == 3 ? (layer ? 4 : 1) : 0) << "bucket " << b;
        EXPECT_EQ(z.scatters[b], 2) << "bucket " << b;
        gathers += z.gathers[b];
        scatters += z.scatters[b];
      }
      EXPECT_EQ(z.counts.allgather_async, gathers);
      EXPECT_EQ(z.counts.allgather, 0);
      EXPECT_EQ(z.counts.reduce_scatter_async, scatters);
      EXPECT_EQ(z.counts.reduce_scatter, 0);
      EXPECT_EQ(z.counts.allreduce + z.counts.allreduce_async, 0);
    }
}

// A group of `size` seen from `rank`: the store's geometry without data.
class GroupShape final : public Communicator {
 public:
  GroupShape(int size, int rank) : size_(size), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string name() const override { return "shape"; }
  void allreduce_sum(float*, int64_t) override { no(); }
  int64_t allreduce_sum_async(float*, int64_t) override { no(); }
  void wait(int64_t) override { no(); }
  void progress() override {}
  void allgather(const float*, float*, int64_t) override { no(); }
  int64_t allgather_async(const float*, float*, int64_t) override { no(); }
  void reduce_scatter_sum(const float*, float*, int64_t) override { no(); }
  int64_t reduce_scatter_sum_async(const float*, float*, int64_t) override { no(); }
  void broadcast(float*, int64_t, int) override { no(); }
  void broadcast_bytes(std::string&, int) override { no(); }
  double allreduce_sum(double) override { no(); }
  int64_t allreduce_sum(int64_t) override { no(); }
  void barrier() override { no(); }
  [[noreturn]] void abort(const std::string& why) override { fail(why); }

 private:
  [[noreturn]] static void no() { fail("GroupShape moves no data"); }
  int size_, rank_;
};

TEST(Zero, ShardsTileEveryTensorOnceAndTheEstimateCountsThem) {
  for (bool tied : {false, true})
    for (int dp : {1, 2, 3, 4, 8})
      for (int tp : {1, 2}) {
        SCOPED_TRACE(cat(tied ? "tied" : "untied", " dp ", dp, " tp ", tp));
        const LlamaConfig c = config(tied);
        const LayerPlan plan = LayerPlan::standard(c.num_hidden_layers);
        const ParamLayout L(c, tp, 0);
        std::vector<bool> all(L.tensors().size(), true);
        std::vector<int> covered(size_t(L.total()), 0);
        int64_t S = -1;
        for (int r = 0; r < dp; ++r) {
          auto be = ops::make_backend<float>();
          GroupShape group(dp, r);
          ZeroShards z(*be, L, group, 2);
          if (S < 0) S = z.shard_elements();
          EXPECT_EQ(z.shard_elements(), S) << "ranks disagree on the shard arena";
          for (const ZeroShards::Piece& p : z.pieces(all)) {
            ASSERT_GE(p.shard_offset, 0);
            ASSERT_LE(p.shard_offset + p.numel, S);
            const ParamInfo& t = L[p.tensor];
            ASSERT_GE(p.arena_offset, t.offset);
            ASSERT_LE(p.arena_offset + p.numel, t.offset + t.numel);
            for (int64_t i = 0; i < p.numel; ++i) ++covered[size_t(p.arena_offset + i)];
          }
        }
        for (const ParamInfo& t : L.tensors())
          for (int64_t i = 0; i < t.numel; ++i)
            ASSERT_EQ(covered[size_t(t.offset + i)], 1) << t.name << " element " << i;
        // The estimate's shards are the store's.
        for (int zero : {2, 3}) {
          MemoryUse u;
          u.tp = tp, u.dp = dp, u.zero = zero;
          u.gradients = true;
          const MemoryEstimate e = estimate_memory(c, plan, u);
          EXPECT_EQ(e.bytes_of("gradients"), S * 4);
          EXPECT_EQ(e.bytes_of("AdamW moments"), 2 * S * 4);
          MemoryUse w;
          w.tp = tp;
          const int64_t whole = estimate_memory(c, plan, w).bytes_of("weights");
          const int64_t fixed = whole - L.total() * 4;
          EXPECT_EQ(e.bytes_of("weights"), zero == 3 ? S * 4 + fixed : whole);
        }
      }
}

// A pipeline stage's store shards only the tensors the stage holds, as the
// estimate of that stage counts; the tensors two stages hold (the head with
// exits on both, a tied embedding) lie in buckets of the same size on each,
// so a data-parallel rank's slice of them is the same on every holder (what
// sum_shared_gradient_shards sums).
TEST(Zero, PipelineStageShardsItsOwnTensors) {
  for (bool tied : {false, true})
    for (int dp : {1, 2, 3})
      for (int zero : {2, 3}) {
        SCOPED_TRACE(cat(tied ? "tied" : "untied", " dp ", dp, " ZeRO-", zero));
        const LlamaConfig c = config(tied);
        const LayerPlan plan = LayerPlan::standard(c.num_hidden_layers);
        std::vector<std::vector<std::vector<ZeroShards::Piece>>> shared(2);  // [stage][dp rank]
        for (int stage = 0; stage < 2; ++stage) {
          const StageHolding h = stage_holding({0, 2, 4}, 2, stage, {true, true});
          const ParamLayout L(c, 1, 0, {}, h);
          std::vector<bool> only(L.tensors().size(), false);
          for (int t : {L.embed, L.final_norm, L.lm_head})
            if (t >= 0 && L[t].held) only[size_t(t)] = true;
          int64_t S = -1;
          for (int r = 0; r < dp; ++r) {
            auto be = ops::make_backend<float>();
            GroupShape group(dp, r);
            ZeroShards z(*be, L, group, zero);
            S = z.shard_elements();
            shared[size_t(stage)].push_back(z.pieces(only));
          }
          MemoryUse u;
          u.dp = dp, u.zero = zero, u.gradients = true;
          u.stage = h;
          const MemoryEstimate e = estimate_memory(c, plan, u);
          EXPECT_EQ(e.bytes_of("gradients"), S * 4);
          EXPECT_EQ(e.bytes_of("AdamW moments"), 2 * S * 4);
          EXPECT_LT(
              S, ZeroShards(*ops::make_backend<float>(), ParamLayout(c), *make_local_comm(), zero)
                     .shard_elements());
        }
        // The final norm and head on both stages (and the embedding when
        // tied): each dp rank's slices of them are the same on both.
        for (int r = 0; r < dp; ++r) {
          auto key = [](const std::vector<ZeroShards::Piece>& ps, bool embed_too, int embed) {
            std::vector<std::pair<int, int64_t>> k;
            for (const auto& p : ps)
              if (p.tensor != embed || embed_too) k.push_back({p.tensor, p.numel});
            return k;
          };
          const ParamLayout L0(c, 1, 0, {}, stage_holding({0, 2, 4}, 2, 0, {true, true}));
          const auto a = key(shared[0][size_t(r)], tied, L0.embed);
          const auto b = key(shared[1][size_t(r)], tied, L0.embed);
          EXPECT_EQ(a, b);
        }
      }
}

// The store's buffers at their peak are what the estimate counts: equal for
// the plans it models exactly, never more for the others.
TEST(Zero, BufferPeakWithinTheEstimate) {
  for (bool tied : {false, true})
    for (const char* plan : kPlans)
      for (int stage : {2, 3}) {
        SCOPED_TRACE(cat(plan, tied ? " tied" : " untied", " ZeRO-", stage));
        Job s;
        s.plan = plan;
        s.stage = stage;
        s.tied = tied;
        s.micro = 2;
        const Outcome z = train(s);
        const LlamaConfig c = config(tied);
        MemoryUse u;
        u.dp = 1, u.zero = stage, u.gradients = true;
        const int64_t est = estimate_memory(c, LayerPlan::parse(plan, c.num_hidden_layers), u)
                                .bytes_of(cat("ZeRO-", stage, " buffers"));
        EXPECT_LE(z.peak, est);
        if (std::string(plan) == "standard*4") {
          EXPECT_EQ(z.peak, est);
        }
        EXPECT_GT(z.peak, 0);
      }
}

// Under ZeRO-3 the model holds no weights outside an open bucket: reading
// one is an internal error, not a read of freed memory.
TEST(Zero, WeightsOutsideAnOpenBucketAreRefused) {
  const LlamaConfig c = config();
  auto local = make_local_comm();
  auto backend = ops::make_backend<float>();
  Model<float> m(c, LayerPlan::standard(c.num_hidden_layers), std::move(backend), nullptr,
                 zero_store_factory(*local, 3, nullptr));
  m.init_weights(1);
  EXPECT_ERROR(m.param(m.layout().layers[1].q),
               "weights of layer 1 are read while their bucket is closed");
  EXPECT_ERROR(m.params(), "sharded over the data-parallel group");
  // Through the bucket walk they read the initial weights.
  Model<float> plain(c, LayerPlan::standard(c.num_hidden_layers), ops::make_backend<float>());
  plain.init_weights(1);
  m.read_weights([&](const WeightBucket& k, const float* base) {
    EXPECT_EQ(std::memcmp(base, plain.params() + k.offset, size_t(k.numel) * 4), 0)
        << "bucket at " << k.offset;
  });
}

}  // namespace
}  // namespace strata
