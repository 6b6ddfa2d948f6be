#include "model/model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "core/error.h"
#include "core/philox.h"
#include "model/unit.h"

namespace strata {

template <typename T>
Model<T>::Model(const LlamaConfig& cfg, std::unique_ptr<ops::Backend<T>> backend)
    : Model(cfg, LayerPlan::standard(cfg.num_hidden_layers), std::move(backend)) {}

template <typename T>
Model<T>::Model(const LlamaConfig& cfg, const LayerPlan& plan,
                std::unique_ptr<ops::Backend<T>> backend, Communicator* tp)
    : Model(cfg, plan, std::move(backend), tp, WeightStoreFactory<T>()) {}

template <typename T>
Model<T>::Model(const LlamaConfig& cfg, const LayerPlan& plan,
                std::unique_ptr<ops::Backend<T>> backend, Communicator* tp,
                const WeightStoreFactory<T>& make_store)
    : cfg_(cfg),
      layout_((cfg_.finalize(), cfg_), tp ? tp->size() : 1, tp ? tp->rank() : 0,
              plan.tp_shards(tp ? tp->size() : 1)),
      dims_(LayerDims::of(cfg_, tp ? tp->size() : 1)),
      be_(std::move(backend)),
      tp_(tp) {
  buckets_ = weight_buckets(layout_);
  bucket_of_.assign(layout_.tensors().size(), -1);
  for (size_t b = 0; b < buckets_.size(); ++b)
    for (int t = buckets_[b].first; t <= buckets_[b].last; ++t) bucket_of_[size_t(t)] = int(b);
  wbase_.assign(buckets_.size(), nullptr);
  gbase_.assign(buckets_.size(), nullptr);
  wopen_.assign(buckets_.size(), 0);
  gopen_.assign(buckets_.size(), 0);
  for (const auto& L : layout_.layers)
    layer_dims_.push_back(LayerDims::of(cfg_, L.parts, L.part >= 0));
  set_plan(plan);
  STRATA_CHECK((!tp_.active() || std::is_same_v<T, float>),
               "tensor parallelism runs float models only");
  if (make_store) owned_store_ = make_store(layout_, *be_);
  store_ = owned_store_.get();
  store_weights_ = store_ && store_->holds_weights();
  if (!store_weights_) {
    params_ = ops::DeviceBuffer<T>(be_.get(), layout_.total());
    for (size_t b = 0; b < buckets_.size(); ++b) wbase_[b] = params_.data() + buckets_[b].offset;
  }
  set_trainable(std::vector<bool>(layout_.tensors().size(), true));
  const size_t table = size_t(cfg_.max_position_embeddings) * (cfg_.head_dim / 2);
  mixed_norm_ = ops::DeviceBuffer<T>(be_.get(), size_t(cfg_.hidden_size));
  mixed_dnorm_ = ops::DeviceBuffer<T>(be_.get(), size_t(cfg_.hidden_size));
  rope_cos_ = ops::DeviceBuffer<T>(be_.get(), table);
  rope_sin_ = ops::DeviceBuffer<T>(be_.get(), table);
  const std::vector<double> inv_freq = cfg_.rope_inv_freq();
  be_->rope_table(rope_cos_.data(), rope_sin_.data(), cfg_.max_position_embeddings, cfg_.head_dim,
                  inv_freq.data());
}

template <typename T>
void Model<T>::set_plan(const LayerPlan& plan) {
  STRATA_CHECK(plan.num_layers() == cfg_.num_hidden_layers, "layer plan '", plan.to_string(),
               "' has ", plan.num_layers(), " layers, the model has ", cfg_.num_hidden_layers);
  STRATA_CHECK(plan.tp_shards(layout_.tp()) == layout_.shards(), "layer plan '", plan.to_string(),
               "' places layers on other tensor-parallel ranks than plan '", plan_.to_string(),
               "' the model was loaded with; load the checkpoint with it");
  plan.check_model(cfg_, tp_size());
  plan_ = plan;
  units_ = plan_.units();
  have_forward_ = false;
  batch_ = seq_ = 0;  // the activation arena depends on the kinds
  set_trainable(trainable_.empty() ? std::vector<bool>(layout_.tensors().size(), true)
                                   : trainable_);
}

template <typename T>
int Model<T>::spd_virtual_ranks() const {
  return int(plan_.number("spd_degree", 2)) / tp_size();
}

template <typename T>
LayerTensors<T> Model<T>::layer_params(int l) {
  const auto& P = layout_.layers[size_t(l)];
  LayerTensors<T> w;
  w.input_norm = param(P.input_norm);
  w.qkv = param(P.q);  // q, k, v (and their biases) are contiguous
  w.qkv_bias = P.q_bias >= 0 ? param(P.q_bias) : nullptr;
  w.o = param(P.o);
  w.o_bias = P.o_bias >= 0 ? param(P.o_bias) : nullptr;
  w.post_norm = param(P.post_norm);
  w.gateup = param(P.gate);  // gate|up contiguous
  w.down = param(P.down);
  return w;
}

template <typename T>
LayerTensors<T> Model<T>::layer_grads(int l) {
  const auto& P = layout_.layers[size_t(l)];
  LayerTensors<T> g;
  g.input_norm = grad_if({P.input_norm});
  g.qkv = grad_if({P.q, P.k, P.v});
  g.qkv_bias = P.q_bias >= 0 ? grad_if({P.q_bias, P.k_bias, P.v_bias}) : nullptr;
  g.o = grad_if({P.o});
  g.o_bias = P.o_bias >= 0 ? grad_if({P.o_bias}) : nullptr;
  g.post_norm = grad_if({P.post_norm});
  g.gateup = grad_if({P.gate, P.up});
  g.down = grad_if({P.down});
  return g;
}

template <typename T>
T* Model<T>::params() {
  STRATA_CHECK(!store_weights_,
               "the model's weights are sharded over the data-parallel group (ZeRO-3): "
               "there is no parameter arena to read whole");
  return params_.data();
}

template <typename T>
void Model<T>::closed_bucket(int b, const char* what) const {
  const WeightBucket& k = buckets_[size_t(b)];
  fail(cat("internal error: the ", what, " of ",
           k.layer >= 0 ? cat("layer ", k.layer) : std::string(b == 0 ? "the embedding" : "the head"),
           " are read while their bucket is closed (ZeRO-", store_weights_ ? 3 : 2, ")"));
}

template <typename T>
void Model<T>::write_weights(const std::function<void(const WeightBucket&, T* base)>& fill) {
  if (!store_weights_) {
    for (const WeightBucket& k : buckets_) fill(k, params_.data() + k.offset);
    return;
  }
  // Under ZeRO-3 each bucket passes through one staging buffer to the store.
  size_t widest = 0;
  for (const WeightBucket& k : buckets_) widest = std::max(widest, size_t(k.numel));
  ops::DeviceBuffer<T> staging(be_.get(), widest);
  for (size_t b = 0; b < buckets_.size(); ++b) {
    be_->zero(staging.data(), buckets_[b].numel);
    fill(buckets_[b], staging.data());
    store_->write_weights(int(b), staging.data());
  }
}

template <typename T>
void Model<T>::read_weights(const std::function<void(const WeightBucket&, const T* base)>& read) {
  for (size_t b = 0; b < buckets_.size(); ++b) {
    open_weights(int(b));
    read(buckets_[b], wbase_[b]);
    close_weights(int(b));
  }
}

template <typename T>
void Model<T>::open_weights(int b) {
  if (!store_weights_) return;
  if (wopen_[size_t(b)]++ == 0) wbase_[size_t(b)] = store_->open_weights(b);
}

template <typename T>
void Model<T>::close_weights(int b) {
  if (!store_weights_) return;
  STRATA_CHECK(wopen_[size_t(b)] > 0, "internal error: bucket ", b, "'s weights closed twice");
  if (--wopen_[size_t(b)] == 0) {
    wbase_[size_t(b)] = nullptr;
    store_->close_weights(b);
  }
}

template <typename T>
void Model<T>::prefetch_weights(int b) {
  if (store_weights_ && wopen_[size_t(b)] == 0) store_->prefetch_weights(b);
}

template <typename T>
void Model<T>::open_grads(int b) {
  if (!store_ || !bucket_trains_[size_t(b)]) return;
  if (gopen_[size_t(b)]++ == 0) gbase_[size_t(b)] = store_->open_gradients(b);
}

template <typename T>
void Model<T>::close_grads(int b) {
  if (!store_ || !bucket_trains_[size_t(b)]) return;
  STRATA_CHECK(gopen_[size_t(b)] > 0, "internal error: bucket ", b, "'s gradients closed twice");
  if (--gopen_[size_t(b)] == 0) {
    gbase_[size_t(b)] = nullptr;
    store_->close_gradients(b);
  }
}

template <typename T>
void Model<T>::open_unit_weights(const PlanUnit& u) {
  for (int l = u.first; l < u.end(); ++l) open_weights(1 + l);
}

template <typename T>
void Model<T>::close_unit_weights(const PlanUnit& u) {
  for (int l = u.first; l < u.end(); ++l) close_weights(1 + l);
}

template <typename T>
void Model<T>::prefetch_unit_weights(const PlanUnit& u) {
  for (int l = u.first; l < u.end(); ++l) prefetch_weights(1 + l);
}

// The embedding and head buckets' weights, open for a scope (the store keeps
// them gathered for the step, so opening them again costs nothing).
template <typename T>
class Model<T>::OpenHead {
 public:
  explicit OpenHead(Model& m) : m_(m) {
    m_.open_weights(0);
    m_.open_weights(m_.head_bucket());
  }
  ~OpenHead() {
    m_.close_weights(m_.head_bucket());
    m_.close_weights(0);
  }
  OpenHead(const OpenHead&) = delete;
  OpenHead& operator=(const OpenHead&) = delete;

 private:
  Model& m_;
};

template <typename T>
void Model<T>::init_weights(uint64_t seed) {
  std::vector<T> host;
  const auto& tensors = layout_.tensors();
  write_weights([&](const WeightBucket& k, T* base) {
    host.assign(size_t(k.numel), T(0));
    for (int ti = k.first; ti <= k.last; ++ti) {
      const ParamInfo& info = tensors[size_t(ti)];
      T* p = host.data() + (info.offset - k.offset);
      const bool is_norm = info.name.find("norm") != std::string::npos;
      if (is_norm) {
        for (int64_t i = 0; i < info.numel; ++i) p[i] = T(1);
      } else if (info.is_matrix) {
        const PhiloxStream rng(seed, /*purpose: init*/ 1, uint32_t(ti));
        const double std = cfg_.initializer_range;
#pragma omp parallel for schedule(static)
        // Drawn by the element's index in the full tensor: every tensor-parallel
        // layout holds the same weights.
        for (int64_t i = 0; i < info.numel; ++i)
          p[i] = T(std * rng.normal(uint64_t(layout_.full_index(int(ti), i))));
      }  // biases stay 0
    }
    be_->from_host(base, host.data(), k.numel);
  });
}

template <typename T>
void Model<T>::zero_grad() {
  if (store_) {
    store_->zero_gradients();
    return;
  }
  ensure_grads();
  be_->zero(grads_.data(), layout_.total());
}

template <typename T>
void Model<T>::set_trainable(const std::vector<bool>& trainable) {
  STRATA_CHECK(trainable.size() == layout_.tensors().size(), "trainable mask has ",
               trainable.size(), " entries, the model has ", layout_.tensors().size(), " tensors");
  trainable_ = trainable;
  bucket_trains_.assign(buckets_.size(), false);
  for (size_t i = 0; i < trainable_.size(); ++i)
    if (trainable_[i]) bucket_trains_[size_t(bucket_of_[i])] = true;
  // Layers below the lowest one holding a trainable tensor need no backward,
  // unless the embedding itself is trained.
  backward_floor_ = cfg_.num_hidden_layers;
  for (size_t i = 0; i < trainable_.size(); ++i)
    if (trainable_[i] && layout_[int(i)].layer >= 0)
      backward_floor_ = std::min(backward_floor_, layout_[int(i)].layer);
  if (trainable_[layout_.embed]) backward_floor_ = 0;
  for (const PlanUnit& u : units_)  // backward runs whole units
    if (backward_floor_ > u.first && backward_floor_ < u.end()) backward_floor_ = u.first;
}

template <typename T>
T* Model<T>::grad_if(std::initializer_list<int> group) {
  for (int i : group)
    if (i >= 0 && trainable_[i]) return grad(*group.begin());
  return nullptr;
}

template <typename T>
void Model<T>::ensure_activations(int B, int T_) {
  STRATA_CHECK(B > 0 && T_ > 0, "batch size and sequence length must be positive (got B=", B,
               ", T=", T_, ")");
  STRATA_CHECK(T_ <= cfg_.max_position_embeddings, "sequence length ", T_,
               " exceeds max_position_embeddings ", cfg_.max_position_embeddings);
  if (B == batch_ && T_ == seq_) return;
  const int64_t N = int64_t(B) * T_, C = cfg_.hidden_size;
  const int L = cfg_.num_hidden_layers;
  int64_t F = 0, QKV = 0, Q = 0;  // the largest layer's, for the backward scratch
  for (const LayerDims& d : layer_dims_) {
    F = std::max<int64_t>(F, d.F);
    QKV = std::max<int64_t>(QKV, d.QKV());
    Q = std::max<int64_t>(Q, d.Q());
  }
  const KindBuffers buffers = plan_.buffers();  // what the plan's kinds need beyond standard
  // Carves every activation tensor out of `base` (64-byte aligned) and returns
  // the elements used. Run once with base = nullptr to size the arena.
  auto carve_all = [&](T* base) {
    int64_t used = 0;
    auto carve = [&](int64_t n) {
      T* p = base ? base + used : nullptr;
      used += (n + 15) / 16 * 16;
      return p;
    };
    streams_.assign(2 * L + 1, nullptr);
    for (auto& s : streams_) s = carve(N * C);
    layer_acts_.resize(L);
    // With recomputation every layer shares one set (sized for the largest
    // layer) and keeps only its norm statistics: the norm backwards of kinds
    // that defer them read a layer's rstd after other layers have run again.
    LayerActs shared;
    LayerDims widest;
    for (const LayerDims& d : layer_dims_) {
      widest.Hq = std::max(widest.Hq, d.Hq);
      widest.Hkv = std::max(widest.Hkv, d.Hkv);
      widest.F = std::max(widest.F, d.F);
      widest.D = std::max(widest.D, d.D);
    }
    const bool full = recompute_ == Recompute::Full;
    const bool selective = recompute_ == Recompute::Selective;
    // Selective: one norm output and one SwiGLU output, recomputed before
    // each module's backward (SPD layers keep their own).
    bool dropping = false;
    for (int l = 0; l < L; ++l) dropping |= selective && !plan_.spd_block(l);
    shared_ln_ = dropping ? carve(N * C) : nullptr;
    shared_h_ = dropping ? carve(N * F) : nullptr;
    for (int l = 0; l < L; ++l) {
      auto& a = layer_acts_[size_t(l)];
      if (full && l > 0) {
        a = shared;
        a.attn.rstd = carve(N);
        a.mlp.rstd = carve(N);
        continue;
      }
      const LayerDims& d = full ? widest : layer_dims_[size_t(l)];
      const bool drop = selective && !plan_.spd_block(l);
      a.attn.ln = drop ? shared_ln_ : carve(N * C);
      a.attn.rstd = carve(N);
      a.attn.qkv = carve(N * d.QKV());
      a.attn.att = carve(N * d.Q());
      a.attn.lse = carve(int64_t(B) * d.Hq * T_);
      a.mlp.ln = drop ? shared_ln_ : carve(N * C);
      a.mlp.rstd = carve(N);
      a.mlp.gateup = carve(N * 2 * d.F);
      a.mlp.h = drop ? shared_h_ : carve(N * d.F);
      a.spd.clear();
      // (Under full recomputation the one shared set serves every layer.)
      const bool spd_acts = full ? buffers.spd_block : plan_.spd_block(l);
      if (spd_acts) {
        const int V = spd_virtual_ranks();
        for (int j = 0; j < V; ++j) {
          SpdActs<T> s;
          s.h = carve(N * C);
          s.ln = carve(N * C);
          s.rstd = carve(N);
          s.gateup = carve(N * 2 * d.F / V);
          s.act = carve(N * d.F / V);
          a.spd.push_back(s);
        }
      }
      if (full) shared = a;
    }
    lnf_ = carve(N * C);
    rstdf_ = carve(N);
    lsef_ = carve(N);
    attn_out_ = carve(N * C);
    mlp_out_ = carve(N * C);
    sub_x_ = carve(N * C);
    sub_d_ = carve(N * C);
    sub_g_ = carve(N * C);
    dstream_ = carve(N * C);
    d_ln_ = carve(N * C);
    d_qkv_ = carve(N * QKV);
    d_att_ = carve(N * Q);
    d_gateup_ = carve(N * 2 * F);
    d_h_ = carve(N * F);
    d_ln2_ = buffers.grad_slot_1 ? carve(N * C) : nullptr;
    d_ln3_ = buffers.grad_slot_2 ? carve(N * C) : nullptr;
    spd_p_ = buffers.spd_block ? carve(N * C) : nullptr;
    spd_dh_ = buffers.spd_block ? carve(N * C) : nullptr;
    spd_acc_ = buffers.spd_block ? carve(N * C + 3 * C) : nullptr;
    sum_out_ = buffers.output_slot_2 ? carve(N * C) : nullptr;
    return used;
  };
  batch_ = seq_ = 0;  // invalid until the arena is carved for the new shape
  const int64_t needed = carve_all(nullptr);
  if (size_t(needed) > acts_.size()) {  // grow; a smaller shape reuses the arena
    acts_ = ops::DeviceBuffer<T>();     // release the old arena first
    acts_ = ops::DeviceBuffer<T>(be_.get(), size_t(needed));
  }
  carve_all(acts_.data());
  batch_ = B;
  seq_ = T_;
}

template <typename T>
int64_t Model<T>::activation_bytes() const {
  return int64_t(acts_.size() * sizeof(T));
}

template <typename T>
const T* Model<T>::stream(int i) const {
  STRATA_CHECK(i >= 0 && i < int(streams_.size()), "stream index ", i, " out of range");
  return streams_[i];
}

// ------------------------------------------------------- tensor parallelism

template <typename T>
HeadCe<T>& Model<T>::head_ce() {
  if (!head_ce_)
    head_ce_ = std::make_unique<HeadCe<T>>(*be_, tp_.comm(), int64_t(tp_rank()) * v_local());
  return *head_ce_;
}

template <typename T>
T* Model<T>::tp_device(size_t n) {
  if (tp_gather_.size() < n) tp_gather_ = ops::DeviceBuffer<T>(be_.get(), n);
  return tp_gather_.data();
}

template <typename T>
void Model<T>::gather_vocab(const T* local, int64_t rows, T* full) {
  if constexpr (std::is_same_v<T, float>) {
    const int P = tp_size(), Vl = v_local(), V = cfg_.vocab_size;
    if (!be_->is_host()) {  // gather on the device, then place each rank's columns
      T* g = tp_device(size_t(rows) * V);
      tp_.comm()->allgather(local, g, rows * Vl);  // [P][rows][Vl]
      for (int p = 0; p < P; ++p)
        for (int64_t r = 0; r < rows; ++r)
          be_->copy(full + r * V + int64_t(p) * Vl, g + (int64_t(p) * rows + r) * Vl, Vl);
      return;
    }
    tp_scratch_.resize(size_t(rows) * V);
    tp_.comm()->allgather(local, tp_scratch_.data(), rows * Vl);  // [P][rows][Vl]
    for (int p = 0; p < P; ++p)
      for (int64_t r = 0; r < rows; ++r)
        std::copy_n(tp_scratch_.data() + (size_t(p) * rows + r) * Vl, Vl,
                    full + r * V + int64_t(p) * Vl);
  }
}

template <typename T>
void Model<T>::grad_ready(int first_tensor, int last_tensor) {
  if (!grad_ready_) return;
  const ParamInfo &a = layout_[first_tensor], &b = layout_[last_tensor];
  grad_ready_(a.offset, b.offset + b.numel - a.offset);
}

// ---------------------------------------------------------------- executor

// One pass of the training/evaluation executor over `B` samples: the kinds'
// view of the streams x_0..x_2L, the modules with the sequence attention
// (saving what backward needs), and the tp reductions. Under LayerSkip layer
// dropout the streams stay whole and only the modules see the kept samples:
// Gathered runs a module on the kept samples packed together and spreads its
// output back with zeros for the dropped ones; Dense (the test reference)
// runs it on all samples and zeroes the dropped ones' outputs. A dropped
// sample's module outputs are zero, so every stream of the unit passes its
// input on, whatever the kind's recurrence.
template <typename T>
class Model<T>::ForwardPass final : public UnitForward<T> {
 public:
  ForwardPass(Model& m, int B, int seq, RunMode mode = RunMode::All,
              const std::vector<int>* kept = nullptr, bool replay = false)
      : m_(m), B_(B), seq_(seq), mode_(mode), kept_(kept), replay_(replay) {}

  const LayerPlan& plan() const override { return m_.plan_; }
  uint64_t pass() const override { return m_.pass_; }
  T* stream(int i) override {
    m_.materialize(i);
    return m_.streams_[size_t(i)];
  }
  T* module_out(int slot) override {
    T* const slots[] = {m_.attn_out_, m_.mlp_out_, m_.sum_out_};
    STRATA_CHECK(slot >= 0 && slot < 3 && slots[slot], "module output slot ", slot,
                 " does not exist");
    return slots[slot];
  }
  void attention(int l, const T* x, T* out) override {
    record(l, 0, ModuleRecord::Attention, x);
    const LayerDims& d = m_.dims(l);
    const AttentionActs<T>& a = m_.layer_acts_[size_t(l)].attn;
    const int Bm = module_batch();
    attention_partial<T>(*m_.be_, d, m_.layer_params(l), module_input(x), out, int64_t(Bm) * seq_,
                         a, [&](T* qkv, T* att) {
                           // q heads and k heads are adjacent in each row:
                           // rotate Hq + Hkv heads at once.
                           m_.be_->rope_forward(qkv, m_.rope_cos_.data(), m_.rope_sin_.data(), Bm,
                                                seq_, d.Hq + d.Hkv, d.D, d.QKV(), 0);
                           m_.be_->attention_forward(att, a.lse, qkv, Bm, seq_, d.Hq, d.Hkv, d.D);
                         });
    module_output(out);
    m_.progress();
  }
  void mlp(int l, const T* x, T* out) override {
    record(l, 1, ModuleRecord::Mlp, x);
    mlp_with(l, m_.layer_params(l), x, out);
  }
  void mlp_shared_norm(int l, const T* x, T* out) override {
    record(l, 1, ModuleRecord::MlpShared, x);
    LayerTensors<T> w = m_.layer_params(l);
    w.post_norm = w.input_norm;
    mlp_with(l, w, x, out);
  }
  void mlp_mixed_norm(int l, int a, int b, double alpha, const T* x, T* out) override {
    record(l, 1, ModuleRecord::MlpMixed, x, a, b, alpha);
    LayerTensors<T> w = m_.layer_params(l);
    w.post_norm = m_.mix_norms(a, b, alpha);
    mlp_with(l, w, x, out);
  }
  void spd_block(int l, const T* x, T* out) override {
    record(l, 0, ModuleRecord::Spd, x);
    const LayerDims& d = m_.dims(l);
    LayerActs& la = m_.layer_acts_[size_t(l)];
    const AttentionActs<T>& a = la.attn;
    const int Bm = module_batch();
    spd_block_partial<T>(
        *m_.be_, d, m_.spd_virtual_ranks(), m_.layer_params(l), module_input(x), out,
        int64_t(Bm) * seq_, a, [&](int j) { return la.spd[size_t(j)]; }, m_.spd_p_,
        [&](T* qkv, T* att) {
          m_.be_->rope_forward(qkv, m_.rope_cos_.data(), m_.rope_sin_.data(), Bm, seq_,
                               d.Hq + d.Hkv, d.D, d.QKV(), 0);
          m_.be_->attention_forward(att, a.lse, qkv, Bm, seq_, d.Hq, d.Hkv, d.D);
        });
    module_output(out);
    m_.progress();
  }
  void add_o_bias(int l, T* out) override {
    const LayerTensors<T> w = m_.layer_params(l);
    if (!w.o_bias || m_.tp_rank() != 0) return;
    if (mode_ == RunMode::All) {
      m_.be_->bias_add_forward(out, w.o_bias, rows(), m_.dims_.C);
      return;
    }
    const int64_t S = int64_t(seq_) * m_.dims_.C;  // dropped samples get no bias either
    for (int b : *kept_) m_.be_->bias_add_forward(out + b * S, w.o_bias, seq_, m_.dims_.C);
  }
  void reduce_from_tp(T* buf) override { m_.tp_.allreduce(buf, rows() * m_.dims_.C); }
  int64_t reduce_from_tp_async(T* buf) override {
    return m_.tp_.allreduce_async(buf, rows() * m_.dims_.C);
  }
  void wait(int64_t handle) override { m_.tp_.wait(handle); }
  void defer_residual(int out, int base, T* buf, int64_t handle) override {
    m_.pending_out_.push_back({out, base, buf, handle, rows()});
  }
  void residual(T* out, const T* a, const T* b) override {
    m_.be_->residual_forward(out, a, b, rows() * m_.dims_.C);
  }
  void copy(T* dst, const T* src) override {
    if (dst != src) m_.be_->copy(dst, src, rows() * m_.dims_.C);
  }

 private:
  int64_t rows() const { return int64_t(B_) * seq_; }
  int module_batch() const { return mode_ == RunMode::Gathered ? int(kept_->size()) : B_; }
  const T* module_input(const T* x) {
    if (mode_ != RunMode::Gathered) return x;
    m_.gather_samples(*kept_, x, m_.sub_x_);
    return m_.sub_x_;
  }
  void module_output(T* out) {
    if (mode_ == RunMode::Gathered) m_.spread_samples(*kept_, B_, out);
    if (mode_ == RunMode::Dense) m_.zero_dropped(*kept_, B_, out);
  }
  void record(int l, int slot, typename ModuleRecord::Kind kind, const T* x, int a = 0, int b = 0,
              double alpha = 0) {
    if (m_.recompute_ == Recompute::None || replay_) return;
    ModuleRecord r;
    r.kind = kind, r.a = a, r.b = b, r.alpha = alpha, r.x = x;
    r.mode = mode_, r.kept = kept_, r.B = B_;
    m_.record_module(l, slot, r);
  }
  void mlp_with(int l, const LayerTensors<T>& w, const T* x, T* out) {
    mlp_partial<T>(*m_.be_, m_.dims(l), w, module_input(x), out, int64_t(module_batch()) * seq_,
                   m_.layer_acts_[size_t(l)].mlp);
    module_output(out);
    m_.progress();
  }
  Model& m_;
  int B_, seq_;
  RunMode mode_;
  const std::vector<int>* kept_;
  bool replay_;
};

// The backward of a training pass over `B` samples. Under layer dropout the
// modules see the kept samples only (as in the forward), and the running
// gradient stays whole: a dropped sample's gradient passes the unit unchanged.
template <typename T>
class Model<T>::BackwardPass final : public UnitBackward<T> {
 public:
  BackwardPass(Model& m, int B, int seq, T* grad, RunMode mode = RunMode::All,
               const std::vector<int>* kept = nullptr)
      : m_(m), B_(B), seq_(seq), grad_(grad), mode_(mode), kept_(kept) {}

  const LayerPlan& plan() const override { return m_.plan_; }
  uint64_t pass() const override { return m_.pass_; }
  T* stream(int i) override {
    m_.settle(i, grad_);
    return m_.streams_[size_t(i)];
  }
  T* grad() override { return grad_; }
  T* d_ln(int slot) override {
    T* const slots[] = {m_.d_ln_, m_.d_ln2_, m_.d_ln3_};
    STRATA_CHECK(slot >= 0 && slot < 3 && slots[slot], "d_ln slot ", slot, " does not exist");
    return slots[slot];
  }
  void defer_input_grad(int stream, int layer, bool mlp, T* d_ln, int64_t handle) override {
    m_.pending_grad_.push_back({stream, layer, mlp, d_ln, handle, rows()});
  }
  void settle(int stream) override { m_.settle(stream, grad_); }
  void attention_backward(int l, const T* dout, T* d_ln) override {
    if (m_.recompute_ != Recompute::None) m_.replay_module(l, 0);
    attention_partial_backward<T>(*m_.be_, m_.dims(l), m_.layer_params(l), m_.layer_grads(l),
                                  module_grad(dout), d_ln, module_batch(), seq_,
                                  m_.layer_acts_[size_t(l)].attn, m_.rope_cos_.data(),
                                  m_.rope_sin_.data(), m_.d_att_, m_.d_qkv_);
    if (mode_ == RunMode::Gathered) m_.spread_samples(*kept_, B_, d_ln);
    m_.progress();
  }
  void mlp_backward(int l, const T* dout, T* d_ln) override {
    if (m_.recompute_ != Recompute::None) m_.replay_module(l, 1);
    mlp_partial_backward<T>(*m_.be_, m_.dims(l), m_.layer_params(l), m_.layer_grads(l),
                            module_grad(dout), d_ln, int64_t(module_batch()) * seq_,
                            m_.layer_acts_[size_t(l)].mlp, m_.d_h_, m_.d_gateup_);
    if (mode_ == RunMode::Gathered) m_.spread_samples(*kept_, B_, d_ln);
    m_.progress();
  }
  void attention_norm_backward(int l, const T* x, const T* d_ln, T* dx) override {
    m_.norm_backward(l, false, dx, d_ln, x, rows());
  }
  void mlp_norm_backward(int l, const T* x, const T* d_ln, T* dx) override {
    m_.norm_backward(l, true, dx, d_ln, x, rows());
  }
  void mlp_mixed_norm_backward(int l, int a, int b, double alpha, const T* x, const T* d_ln,
                               T* dx) override {
    T* ga = m_.layer_grads(a).post_norm;
    T* gb = m_.layer_grads(b).post_norm;
    const int C = m_.dims_.C;
    T* dmix = ga || gb ? m_.mixed_dnorm_.data() : nullptr;
    if (dmix) m_.be_->zero(dmix, C);
    m_.norm_backward_with(l, true, m_.mix_norms(a, b, alpha), dmix, dx, d_ln, x, rows());
    if (ga) m_.be_->axpby_forward(ga, ga, dmix, C, 1.0, alpha);
    if (gb) m_.be_->axpby_forward(gb, gb, dmix, C, 1.0, 1.0 - alpha);
  }
  void spd_block_backward(int l, const T* dout, T* dx) override {
    // Under layer dropout the block ran on the kept samples packed together
    // (Gathered) or on all with the dropped ones' gradients zeroed (Dense).
    if (m_.recompute_ != Recompute::None) m_.replay_module(l, 0);
    const int C = m_.dims_.C, Bm = module_batch();
    const int64_t rows_m = int64_t(Bm) * seq_, n = rows_m * C;
    // (dx, which may alias dout, changes only at the end: acc holds the rest.)
    const T* g_in = module_grad(dout);
    const T* x = m_.streams_[size_t(2 * l)];
    if (mode_ == RunMode::Gathered) {
      m_.gather_samples(*kept_, x, m_.sub_d_);
      x = m_.sub_d_;
    }
    LayerActs& la = m_.layer_acts_[size_t(l)];
    const LayerTensors<T> w = m_.layer_params(l), g = m_.layer_grads(l);
    // acc = [this rank's part of dL/dx | d post_norm | d o_bias | d input_norm].
    T* acc = m_.spd_acc_;
    m_.be_->zero(acc, n + 3 * C);
    spd_block_partial_backward<T>(
        *m_.be_, m_.dims(l), m_.spd_virtual_ranks(), w, g, g.post_norm ? acc + n : nullptr,
        g.o_bias ? acc + n + C : nullptr, g_in, acc, m_.d_ln_, Bm, seq_, la.attn,
        [&](int j) { return la.spd[size_t(j)]; }, m_.rope_cos_.data(), m_.rope_sin_.data(),
        m_.spd_p_, m_.spd_dh_, m_.d_att_, m_.d_qkv_, m_.d_h_, m_.d_gateup_);
    m_.be_->rmsnorm_backward(acc, g.input_norm ? acc + n + 2 * C : nullptr, m_.d_ln_, x,
                             w.input_norm, la.attn.rstd, rows_m, C);
    m_.tp_.allreduce(acc, n + 3 * C);  // (every rank drops the same samples)
    if (mode_ == RunMode::Gathered) {
      m_.gather_samples(*kept_, dx, m_.sub_g_);
      m_.be_->residual_forward(m_.sub_g_, m_.sub_g_, acc, n);
      m_.scatter_samples(*kept_, m_.sub_g_, dx);
    } else {
      m_.be_->residual_forward(dx, dx, acc, n);
    }
    if (g.post_norm) m_.be_->residual_forward(g.post_norm, g.post_norm, acc + n, C);
    if (g.o_bias) m_.be_->residual_forward(g.o_bias, g.o_bias, acc + n + C, C);
    if (g.input_norm) m_.be_->residual_forward(g.input_norm, g.input_norm, acc + n + 2 * C, C);
    m_.progress();
  }
  void add(T* dst, const T* src) override {
    m_.be_->residual_forward(dst, dst, src, rows() * m_.dims_.C);
  }
  void zero(T* dst) override { m_.be_->zero(dst, rows() * m_.dims_.C); }
  void o_bias_backward(int l, const T* dout) override {
    T* g = m_.layer_grads(l).o_bias;
    if (!g) return;
    if (mode_ == RunMode::All) {
      m_.be_->bias_add_backward(g, dout, rows(), m_.dims_.C);
      return;
    }
    const int64_t S = int64_t(seq_) * m_.dims_.C;
    for (int b : *kept_) m_.be_->bias_add_backward(g, dout + b * S, seq_, m_.dims_.C);
  }
  void copy_to_tp(T* grad) override { m_.tp_.allreduce(grad, rows() * m_.dims_.C); }
  int64_t copy_to_tp_async(T* grad) override {
    return m_.tp_.allreduce_async(grad, rows() * m_.dims_.C);
  }
  void wait(int64_t handle) override { m_.tp_.wait(handle); }

 private:
  int64_t rows() const { return int64_t(B_) * seq_; }
  int module_batch() const { return mode_ == RunMode::Gathered ? int(kept_->size()) : B_; }
  // The gradient a module sees: the kept samples' (Gathered: packed; Dense:
  // the dropped ones zeroed, so they add nothing to the weights' gradients).
  const T* module_grad(const T* dout) {
    if (mode_ == RunMode::Gathered) {
      m_.gather_samples(*kept_, dout, m_.sub_x_);
      return m_.sub_x_;
    }
    if (mode_ == RunMode::Dense) {
      m_.be_->copy(m_.sub_x_, dout, rows() * m_.dims_.C);
      m_.zero_dropped(*kept_, B_, m_.sub_x_);
      return m_.sub_x_;
    }
    return dout;
  }
  Model& m_;
  int B_, seq_;
  T* grad_;
  RunMode mode_;
  const std::vector<int>* kept_;
};

// A unit under LayerSkip: all samples, none (every stream of the unit is its
// input), or some (Gathered, or the Dense test reference; see ForwardPass).
template <typename T>
void Model<T>::unit_forward_mode(const PlanUnit& u, int B, int T_, RunMode mode) {
  const int in = 2 * u.first, out = 2 * u.end();  // the unit reads x_in, writes x_in+1..x_out
  if (mode == RunMode::None) {
    materialize(in);
    for (int i = in + 1; i <= out; ++i)
      be_->copy(streams_[size_t(i)], streams_[size_t(in)], int64_t(B) * T_ * cfg_.hidden_size);
    return;
  }
  ForwardPass f(*this, B, T_, mode, &kept_[size_t(u.first)]);
  unit_forward<T>(f, u);
}

template <typename T>
void Model<T>::set_recompute(Recompute mode) {
  if (mode == recompute_) return;
  recompute_ = mode;
  batch_ = seq_ = 0;  // carve the arena again at the next forward
  have_forward_ = false;
  records_.clear();
}

template <typename T>
void Model<T>::record_module(int l, int slot, const ModuleRecord& r) {
  // Only a residual stream is sure to hold the same values at the module's
  // backward; every kind feeds its modules from streams.
  const bool stream = std::find(streams_.begin(), streams_.end(), r.x) != streams_.end();
  STRATA_CHECK(stream, "training.recompute: layer ", l, " (", plan_.to_string(),
               ") feeds a module from a scratch buffer, which recomputation cannot replay; "
               "use recompute = \"none\" for this plan");
  if (records_.size() != size_t(cfg_.num_hidden_layers))
    records_.assign(size_t(cfg_.num_hidden_layers), {});
  records_[size_t(l)][size_t(slot)] = r;
}

template <typename T>
void Model<T>::replay_module(int l, int slot) {
  STRATA_CHECK(
      size_t(l) < records_.size() && records_[size_t(l)][size_t(slot)].kind != ModuleRecord::None,
      "training.recompute: no forward of layer ", l, "'s ", slot ? "MLP" : "attention",
      " to run again (internal error)");
  const ModuleRecord& r = records_[size_t(l)][size_t(slot)];
  if (recompute_ == Recompute::Selective) {
    if (r.kind == ModuleRecord::Spd) return;  // SPD blocks keep their activations
    // The norm output (and the MLP's SwiGLU output) again, by the forward's
    // own calls on the module's input: the kept samples packed as it packed them.
    const LayerDims& d = dims(l);
    const T* x = r.x;
    int64_t rows = int64_t(r.B) * seq_;
    if (r.mode == RunMode::Gathered) {
      gather_samples(*r.kept, x, sub_x_);
      x = sub_x_;
      rows = int64_t(r.kept->size()) * seq_;
    }
    LayerActs& la = layer_acts_[size_t(l)];
    const LayerTensors<T> w = layer_params(l);
    if (slot == 0) {
      be_->rmsnorm_forward(la.attn.ln, la.attn.rstd, x, w.input_norm, rows, d.C, d.eps);
      return;
    }
    const T* nw = r.kind == ModuleRecord::MlpShared  ? w.input_norm
                  : r.kind == ModuleRecord::MlpMixed ? mix_norms(r.a, r.b, r.alpha)
                                                     : w.post_norm;
    be_->rmsnorm_forward(la.mlp.ln, la.mlp.rstd, x, nw, rows, d.C, d.eps);
    if (!d.empty()) be_->swiglu_forward(la.mlp.h, la.mlp.gateup, rows, d.F);
    return;
  }
  ForwardPass f(*this, r.B, seq_, r.mode, r.kept, /*replay=*/true);
  switch (r.kind) {
    case ModuleRecord::Attention:
      f.attention(l, r.x, attn_out_);
      break;
    case ModuleRecord::Spd:
      f.spd_block(l, r.x, attn_out_);
      break;
    case ModuleRecord::Mlp:
      f.mlp(l, r.x, mlp_out_);
      break;
    case ModuleRecord::MlpShared:
      f.mlp_shared_norm(l, r.x, mlp_out_);
      break;
    case ModuleRecord::MlpMixed:
      f.mlp_mixed_norm(l, r.a, r.b, r.alpha, r.x, mlp_out_);
      break;
    case ModuleRecord::None:
      break;
  }
}

template <typename T>
void Model<T>::unit_backward_mode(const PlanUnit& u, int B, int T_, RunMode mode) {
  if (mode == RunMode::None) {  // the gradient passes; what a later layer read inside joins it
    for (int i = 2 * u.end(); i > 2 * u.first; --i) settle(i, dstream_);
    return;
  }
  BackwardPass b(*this, B, T_, dstream_, mode, &kept_[size_t(u.first)]);
  b.settle(2 * u.end());  // dL/dx of the unit's output, whole
  unit_backward<T>(b, u);
}

template <typename T>
void Model<T>::materialize(int i) {
  size_t done = 0;
  for (; done < pending_out_.size() && pending_out_[done].out <= i; ++done) {
    const PendingOut& p = pending_out_[done];
    tp_.wait(p.handle);
    be_->residual_forward(streams_[size_t(p.out)], streams_[size_t(p.base)], p.buf,
                          p.rows * cfg_.hidden_size);
  }
  pending_out_.erase(pending_out_.begin(), pending_out_.begin() + long(done));
}

template <typename T>
void Model<T>::settle(int stream, T* grad) {
  for (size_t k = 0; k < pending_grad_.size();) {
    const PendingGrad p = pending_grad_[k];
    if (p.stream != stream) {
      ++k;
      continue;
    }
    pending_grad_.erase(pending_grad_.begin() + long(k));
    tp_.wait(p.handle);
    norm_backward(p.layer, p.mlp, grad, p.d_ln, streams_[size_t(stream)], p.rows);
  }
}

template <typename T>
void Model<T>::norm_backward(int l, bool mlp, T* dx, const T* d_ln, const T* x, int64_t rows) {
  const LayerTensors<T> w = layer_params(l), g = layer_grads(l);
  norm_backward_with(l, mlp, mlp ? w.post_norm : w.input_norm, mlp ? g.post_norm : g.input_norm, dx,
                     d_ln, x, rows);
}

template <typename T>
void Model<T>::norm_backward_with(int l, bool mlp, const T* nw, T* dw, T* dx, const T* d_ln,
                                  const T* x, int64_t rows) {
  const LayerActs& a = layer_acts_[size_t(l)];
  const T* rstd = mlp ? a.mlp.rstd : a.attn.rstd;
  if (run_mode_.empty() || run_mode_[size_t(l)] != RunMode::Gathered) {
    be_->rmsnorm_backward(dx, dw, d_ln, x, nw, rstd, rows, cfg_.hidden_size);
    return;
  }
  // The norm ran on the kept samples packed together (its rstd is packed).
  const std::vector<int>& kept = kept_[size_t(l)];
  gather_samples(kept, x, sub_x_);
  gather_samples(kept, d_ln, sub_d_);
  gather_samples(kept, dx, sub_g_);
  be_->rmsnorm_backward(sub_g_, dw, sub_d_, sub_x_, nw, rstd, int64_t(kept.size()) * seq_,
                        cfg_.hidden_size);
  scatter_samples(kept, sub_g_, dx);
}

template <typename T>
T* Model<T>::mix_norms(int a, int b, double alpha) {
  be_->axpby_forward(mixed_norm_.data(), layer_params(a).post_norm, layer_params(b).post_norm,
                     cfg_.hidden_size, alpha, 1.0 - alpha);
  return mixed_norm_.data();
}

template <typename T>
void Model<T>::settle_all(T* grad) {
  while (!pending_grad_.empty()) settle(pending_grad_.front().stream, grad);
}

template <typename T>
void Model<T>::gather_samples(const std::vector<int>& kept, const T* full, T* compact) {
  const int64_t S = int64_t(seq_) * cfg_.hidden_size;
  for (size_t k = 0; k < kept.size(); ++k)
    be_->copy(compact + int64_t(k) * S, full + int64_t(kept[k]) * S, S);
}

template <typename T>
void Model<T>::scatter_samples(const std::vector<int>& kept, const T* compact, T* full) {
  const int64_t S = int64_t(seq_) * cfg_.hidden_size;
  for (size_t k = 0; k < kept.size(); ++k)
    be_->copy(full + int64_t(kept[k]) * S, compact + int64_t(k) * S, S);
}

// In place: sample k moves to kept[k] >= k (last first, so no source is
// overwritten before it moves), the dropped samples become zero.
template <typename T>
void Model<T>::spread_samples(const std::vector<int>& kept, int B, T* buf) {
  const int64_t S = int64_t(seq_) * cfg_.hidden_size;
  for (size_t k = kept.size(); k-- > 0;)
    if (kept[k] != int(k)) be_->copy(buf + int64_t(kept[k]) * S, buf + int64_t(k) * S, S);
  zero_dropped(kept, B, buf);
}

template <typename T>
void Model<T>::zero_dropped(const std::vector<int>& kept, int B, T* buf) {
  const int64_t S = int64_t(seq_) * cfg_.hidden_size;
  size_t k = 0;
  for (int b = 0; b < B; ++b) {
    if (k < kept.size() && kept[k] == b) {
      ++k;
      continue;
    }
    be_->zero(buf + int64_t(b) * S, S);
  }
}

template <typename T>
void Model<T>::exit_loss(int l, int B, int T_, double scale, LossResult* result) {
  OpenHead head(*this);
  const int64_t N = int64_t(B) * T_;
  int64_t n_valid = 0;
  const double sum = head_ce().forward_backward(
      dstream_, grad_if({layout_.final_norm}), grad_if({head_index()}), lnf_, rstdf_, &n_valid,
      streams_[2 * (l + 1)], param(layout_.final_norm), head_weight(), targets_.data(), N,
      cfg_.hidden_size, v_local(), cfg_.rms_norm_eps, scale);
  if (result) result->exit_loss_sum[size_t(l)] = sum;
}

template <typename T>
void Model<T>::embed(const int32_t* tokens, int64_t n, T* x) {
  // Vocab-parallel embedding: each rank looks up its own rows, zeros elsewhere.
  OpenHead head(*this);
  be_->embedding_forward(x, tokens, param(layout_.embed), n, cfg_.hidden_size, cfg_.vocab_size,
                         int64_t(tp_rank()) * v_local(), tp_.active() ? v_local() : -1);
  tp_.allreduce(x, n * cfg_.hidden_size);
}

template <typename T>
void Model<T>::begin_pass(int B, int T_) {
  have_forward_ = false;
  pass_ = next_pass_++;
  ensure_activations(B, T_);
  run_mode_.assign(size_t(cfg_.num_hidden_layers), RunMode::All);
  kept_.resize(size_t(cfg_.num_hidden_layers));
  pending_out_.clear();
}

template <typename T>
void Model<T>::run_forward(const int32_t* tokens, int B, int T_, int exit_layer,
                           const LayerSkipStep* skip) {
  if (exit_layer < 0) exit_layer = cfg_.num_hidden_layers;
  plan_.check_exit(exit_layer, "exit layer");
  begin_pass(B, T_);
  block_unit_ = -1;
  const int64_t N = int64_t(B) * T_;
  tokens_.assign(tokens, tokens + N);
  embed(tokens, N, streams_[0]);
  const int L = cfg_.num_hidden_layers;
  const bool dropping = skip && !skip->keep.empty();
  if (dropping)
    STRATA_CHECK(int(skip->keep.size()) == L, "layer skip: keep masks for ", skip->keep.size(),
                 " layers, the model has ", L);
  for (size_t k = 0; k < units_.size(); ++k) {
    const PlanUnit& u = units_[k];
    if (u.end() > exit_layer) break;
    // ZeRO-3: this unit's weights gathered (waited for), the next one's asked
    // for while this one computes, this one's freed after it.
    open_unit_weights(u);
    if (k + 1 < units_.size() && units_[k + 1].end() <= exit_layer)
      prefetch_unit_weights(units_[k + 1]);
    RunMode mode = RunMode::All;
    if (dropping) {  // a unit is dropped as a whole: its layers share one mask
      const auto& k = skip->keep[size_t(u.first)];
      STRATA_CHECK(int(k.size()) == B, "layer skip: keep mask of layer ", u.first, " has ",
                   k.size(), " entries for a batch of ", B);
      for (int l = u.first + 1; l < u.end(); ++l)
        STRATA_CHECK(skip->keep[size_t(l)] == k, "layer skip: layers ", u.first, " and ", l,
                     " form one unit but have different keep masks");
      std::vector<int>& kept = kept_[size_t(u.first)];
      kept.clear();
      for (int b = 0; b < B; ++b)
        if (k[size_t(b)]) kept.push_back(b);
      for (int l = u.first + 1; l < u.end(); ++l) kept_[size_t(l)] = kept;
      const int Bk = int(kept.size());
      mode = Bk == B                 ? RunMode::All
             : skip->dense_reference ? RunMode::Dense
             : Bk == 0               ? RunMode::None
                                     : RunMode::Gathered;
    }
    for (int l = u.first; l < u.end(); ++l) run_mode_[size_t(l)] = mode;
    unit_forward_mode(u, B, T_, mode);
    close_unit_weights(u);
  }
  materialize(2 * cfg_.num_hidden_layers);  // every stream, before the head or an exit
}

// Expects dstream_ to hold the gradient of the final stream x_2L (from the
// last layer's loss); early-exit losses add theirs on the way down.
template <typename T>
void Model<T>::run_backward(const int32_t* tokens, int B, int T_, const LayerSkipStep* skip,
                            LossResult* result, double dloss) {
  const int64_t N = int64_t(B) * T_;
  const int L = cfg_.num_hidden_layers;
  // Early exits below the last layer (weight > 0) add to the head's gradients.
  auto exit_weight = [&](int l) {
    return skip && !skip->exit_weight.empty() && l < L - 1 ? skip->exit_weight[size_t(l)] : 0.0;
  };
  bool exits = false;
  for (int l = 0; l + 1 < L; ++l)
    if (exit_weight(l) > 0) {
      plan_.check_exit(l + 1, "an early-exit loss after layer");
      exits = true;
    }
  // The final norm and the head (when untied) end the arena: done now unless
  // early exits still add to them.
  if (!exits) {
    grad_ready(layout_.final_norm, int(layout_.tensors().size()) - 1);
    close_grads(head_bucket());
  }
  // A unit's gradients are complete once no deferred input gradient of its
  // layers is pending (their norm weights' gradients come with it).
  pending_grad_.clear();
  std::vector<PlanUnit> waiting;
  // Units whose weights and gradient buckets are open (ZeRO-2/3), by first layer.
  std::vector<bool> opened(size_t(L), false);
  auto release = [&](bool all) {
    for (size_t k = 0; k < waiting.size();) {
      const PlanUnit w = waiting[k];
      const bool busy = std::any_of(pending_grad_.begin(), pending_grad_.end(), [&](const auto& p) {
        return p.layer >= w.first && p.layer < w.end();
      });
      if (busy && !all) {
        ++k;
        continue;
      }
      grad_ready(layout_.layers[size_t(w.first)].input_norm,
                 layout_.layers[size_t(w.end() - 1)].down);
      if (opened[size_t(w.first)]) {
        for (int l = w.first; l < w.end(); ++l) close_grads(1 + l);
        close_unit_weights(w);
        opened[size_t(w.first)] = false;
      }
      waiting.erase(waiting.begin() + long(k));
    }
  };
  for (auto u = units_.rbegin(); u != units_.rend(); ++u) {
    const int last = u->end() - 1;
    if (exit_weight(last) > 0) exit_loss(last, B, T_, dloss * exit_weight(last), result);
    if (u->first >= backward_floor_) {  // below it every layer is frozen
      // ZeRO-3: the unit's weights gathered again (the next one's asked for);
      // ZeRO-2/3: its gradient buckets, handed on once final (release).
      open_unit_weights(*u);
      const auto next = std::next(u);
      if (next != units_.rend() && next->first >= backward_floor_) prefetch_unit_weights(*next);
      for (int l = u->first; l < u->end(); ++l) open_grads(1 + l);
      opened[size_t(u->first)] = true;
      unit_backward_mode(*u, B, T_, run_mode_[size_t(u->first)]);
    }
    waiting.push_back(*u);
    release(false);
  }
  if (exits) {
    grad_ready(layout_.final_norm, int(layout_.tensors().size()) - 1);
    close_grads(head_bucket());
  }
  settle_all(dstream_);  // what is still in flight flows into x_0
  release(true);
  open_grads(0);
  if (trainable_[layout_.embed])
    be_->embedding_backward(grad(layout_.embed), tokens, dstream_, N, cfg_.hidden_size,
                            int64_t(tp_rank()) * v_local(), tp_.active() ? v_local() : -1);
  grad_ready(layout_.embed, layout_.embed);
  // Twice when the head is the embedding (opened for the head's gradient too).
  close_grads(0);
  if (layout_.lm_head < 0) close_grads(0);
}

// The gradient buckets the head's backward writes (ZeRO-2/3): the final norm
// (+ untied head), and the embedding when it is the head; closed by run_backward.
template <typename T>
void Model<T>::open_head_grads() {
  open_grads(head_bucket());
  if (layout_.lm_head < 0) open_grads(0);
}

template <typename T>
LossResult Model<T>::forward(const int32_t* tokens, const int32_t* targets, int B, int T_) {
  run_forward(tokens, B, T_);
  const int64_t N = int64_t(B) * T_;
  targets_.assign(targets, targets + N);
  LossResult r;
  have_forward_ = true;
  OpenHead head(*this);
  r.loss_sum = head_ce().forward(lnf_, rstdf_, lsef_, nullptr, &r.n_valid,
                                 streams_[2 * cfg_.num_hidden_layers], param(layout_.final_norm),
                                 head_weight(), targets, N, cfg_.hidden_size, v_local(),
                                 cfg_.rms_norm_eps);
  return r;
}

template <typename T>
void Model<T>::backward(double dloss) {
  STRATA_CHECK(have_forward_, "backward() needs a completed forward() first");
  ensure_grads();
  const int64_t N = int64_t(batch_) * seq_;
  be_->zero(dstream_, N * cfg_.hidden_size);
  OpenHead head(*this);
  open_head_grads();
  head_ce().backward(dstream_, grad_if({layout_.final_norm}), grad_if({head_index()}),
                     streams_[2 * cfg_.num_hidden_layers], lnf_, rstdf_, lsef_,
                     param(layout_.final_norm), head_weight(), targets_.data(), N,
                     cfg_.hidden_size, v_local(), dloss);
  run_backward(tokens_.data(), batch_, seq_);
}

template <typename T>
LossResult Model<T>::forward_backward(const int32_t* tokens, const int32_t* targets, int B, int T_,
                                      double dloss, const LayerSkipStep* skip) {
  const int L = cfg_.num_hidden_layers;
  if (skip && !skip->exit_weight.empty())
    STRATA_CHECK(int(skip->exit_weight.size()) == L, "layer skip: exit weights for ",
                 skip->exit_weight.size(), " layers, the model has ", L);
  ensure_grads();
  run_forward(tokens, B, T_, -1, skip);
  const int64_t N = int64_t(B) * T_;
  targets_.assign(targets, targets + N);
  be_->zero(dstream_, N * cfg_.hidden_size);
  LossResult r;
  r.exit_loss_sum.assign(size_t(L), std::nan(""));
  OpenHead head(*this);
  open_head_grads();
  const double w_last = skip && !skip->exit_weight.empty() ? skip->exit_weight[size_t(L - 1)] : 1.0;
  r.loss_sum = head_ce().forward_backward(
      dstream_, grad_if({layout_.final_norm}), grad_if({head_index()}), lnf_, rstdf_, &r.n_valid,
      streams_[2 * L], param(layout_.final_norm), head_weight(), targets, N, cfg_.hidden_size,
      v_local(), cfg_.rms_norm_eps, dloss * w_last);
  r.exit_loss_sum[size_t(L - 1)] = r.loss_sum;
  run_backward(tokens, B, T_, skip, &r, dloss);
  r.objective = 0;
  for (int l = 0; l < L; ++l) {
    const double w = skip && !skip->exit_weight.empty() ? skip->exit_weight[size_t(l)]
                                                        : (l == L - 1 ? 1.0 : 0.0);
    if (w > 0) r.objective += w * r.exit_loss_sum[size_t(l)];
  }
  return r;
}

template <typename T>
void Model<T>::forward_logits(const int32_t* tokens, int B, int T_, T* logits) {
  run_forward(tokens, B, T_);
  head_rows(streams_[2 * cfg_.num_hidden_layers], int64_t(B) * T_, logits, lnf_);
}

template <typename T>
void Model<T>::forward_hidden(const int32_t* tokens, int B, int T_, int exit_layer) {
  run_forward(tokens, B, T_, exit_layer);
}

template <typename T>
const T* Model<T>::block_forward(int layer, const T* x, int B, int T_) {
  STRATA_CHECK(!store_, "block_forward: not under ZeRO-2/3");
  block_unit_ = -1;
  for (size_t k = 0; k < units_.size(); ++k)
    if (units_[k].first == layer) block_unit_ = int(k);
  STRATA_CHECK(block_unit_ >= 0, "block_forward: no unit of plan '", plan_.to_string(),
               "' starts at layer ", layer);
  begin_pass(B, T_);
  const PlanUnit& u = units_[size_t(block_unit_)];
  be_->copy(streams_[size_t(2 * u.first)], x, int64_t(B) * T_ * cfg_.hidden_size);
  unit_forward_mode(u, B, T_, RunMode::All);
  materialize(2 * u.end());
  return streams_[size_t(2 * u.end())];
}

template <typename T>
void Model<T>::block_backward(const T* dout) {
  STRATA_CHECK(block_unit_ >= 0, "block_backward needs a block_forward first");
  const PlanUnit& u = units_[size_t(block_unit_)];
  be_->copy(dstream_, dout, int64_t(batch_) * seq_ * cfg_.hidden_size);
  pending_grad_.clear();
  unit_backward_mode(u, batch_, seq_, RunMode::All);
  settle_all(dstream_);
}

template <typename T>
void Model<T>::head_rows(const T* x, int64_t n, T* logits, T* xn_scratch) {
  OpenHead head(*this);
  if (!tp_.active()) {
    be_->head_logits(logits, xn_scratch, x, param(layout_.final_norm), head_weight(), n,
                     cfg_.hidden_size, cfg_.vocab_size, cfg_.rms_norm_eps);
    return;
  }
  if (tp_local_.size() < size_t(n) * v_local())
    tp_local_ = ops::DeviceBuffer<T>(be_.get(), size_t(n) * v_local());
  be_->head_logits(tp_local_.data(), xn_scratch, x, param(layout_.final_norm), head_weight(), n,
                   cfg_.hidden_size, v_local(), cfg_.rms_norm_eps);
  gather_vocab(tp_local_.data(), n, logits);
}

template class Model<float>;
template class Model<double>;

}  // namespace strata
