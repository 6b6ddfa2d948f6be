// The model (model.h): its construction, plan and weights (with the ZeRO
// buckets they live in), initialisation, the trainable mask, the activation
// arena, and the executor's helpers (deferred streams and gradients, norm
// backwards). The units and LayerSkip's sample packing are model_units.cpp; the
// walk over them and the entry points model_walk.cpp; pipeline stages
// model_stage.cpp.
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
    : Model(cfg, plan, std::move(backend), tp, make_store, StageHolding{}) {}

template <typename T>
Model<T>::Model(const LlamaConfig& cfg, const LayerPlan& plan,
                std::unique_ptr<ops::Backend<T>> backend, Communicator* tp,
                const WeightStoreFactory<T>& make_store, const StageHolding& stage)
    : cfg_(cfg),
      layout_((cfg_.finalize(), cfg_), tp ? tp->size() : 1, tp ? tp->rank() : 0,
              plan.tp_shards(tp ? tp->size() : 1), stage),
      dims_(LayerDims::of(cfg_, tp ? tp->size() : 1)),
      be_(std::move(backend)),
      tp_(tp, be_.get()) {
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
  staged_ = !stage.whole();
  chunks_ = stage.chunks;
  for (int l = 0; l < cfg_.num_hidden_layers && stage.chunks.empty(); ++l) {
    if (!stage.holds_layer(l)) continue;
    if (!chunks_.empty() && chunks_.back().second == l)
      chunks_.back().second = l + 1;
    else
      chunks_.push_back({l, l + 1});
  }
  if (staged_) {
    STRATA_CHECK(!chunks_.empty(), "a pipeline stage must hold at least one layer");
    STRATA_CHECK(stage.embedding == (chunks_.front().first == 0),
                 "a pipeline stage holds the embedding exactly when it holds layer 0");
    STRATA_CHECK(!(chunks_.back().second == cfg_.num_hidden_layers) || stage.head,
                 "the pipeline stage holding the last layer must hold the head");
  }
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
  for (const auto& [lo, hi] : chunks_)
    STRATA_CHECK(plan.unit_boundary(lo) && plan.unit_boundary(hi), "layer plan '", plan.to_string(),
                 "' has a unit across the pipeline stage boundary at layer ",
                 plan.unit_boundary(lo) ? hi : lo, ": a stage holds whole units");
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
  fail(cat(
      "internal error: the ", what, " of ",
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
  // A pipeline stage's pass carves the layers and streams of its chunk only.
  const bool by_chunk = active_hi_ >= 0;
  const int lo = by_chunk ? active_lo_ : 0, hi = by_chunk ? active_hi_ : L;
  auto in_chunk = [&](int l) { return l >= lo && l < hi; };
  int64_t F = 0, QKV = 0, Q = 0;  // the largest layer's, for the backward scratch
  for (const LayerDims& d : layer_dims_) {
    F = std::max<int64_t>(F, d.F);
    QKV = std::max<int64_t>(QKV, d.QKV());
    Q = std::max<int64_t>(Q, d.Q());
  }
  const KindBuffers buffers = plan_.buffers();  // what the plan's kinds need beyond standard
  // Two arenas (model.h): activations in act_dtype_, statistics in T.
  // Carves every tensor out of `base` and `stats` (64-byte aligned) and
  // returns the elements used of each. Run once with null bases to size them.
  const int64_t align = 64 / int64_t(ops::dtype_size(act_dtype_));
  auto carve_all = [&](ops::Act<T> base, T* stats) {
    int64_t used = 0, used_stats = 0;
    auto carve = [&](int64_t n) {
      const ops::Act<T> p = base ? base + used : ops::Act<T>();
      used += (n + align - 1) / align * align;
      return p;
    };
    auto carve_stat = [&](int64_t n) {
      T* p = stats ? stats + used_stats : nullptr;
      used_stats += (n + 15) / 16 * 16;
      return p;
    };
    streams_.assign(2 * L + 1, ops::Act<T>());
    for (int i = std::max(2 * lo - 1, 0); i <= 2 * hi; ++i) streams_[size_t(i)] = carve(N * C);
    layer_acts_.assign(size_t(L), LayerActs());
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
    for (int l = lo; l < hi; ++l) dropping |= selective && !plan_.spd_block(l);
    shared_ln_ = dropping ? carve(N * C) : nullptr;
    shared_h_ = dropping ? carve(N * F) : nullptr;
    bool have_shared = false;
    for (int l = 0; l < L; ++l) {
      if (!in_chunk(l)) continue;
      auto& a = layer_acts_[size_t(l)];
      if (full && have_shared) {
        a = shared;
        a.attn.rstd = carve_stat(N);
        a.mlp.rstd = carve_stat(N);
        continue;
      }
      const LayerDims& d = full ? widest : layer_dims_[size_t(l)];
      const bool drop = selective && !plan_.spd_block(l);
      a.attn.ln = drop ? shared_ln_ : carve(N * C);
      a.attn.rstd = carve_stat(N);
      a.attn.qkv = carve(N * d.QKV());
      a.attn.att = carve(N * d.Q());
      a.attn.lse = carve_stat(int64_t(B) * d.Hq * T_);
      a.mlp.ln = drop ? shared_ln_ : carve(N * C);
      a.mlp.rstd = carve_stat(N);
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
          s.rstd = carve_stat(N);
          s.gateup = carve(N * 2 * d.F / V);
          s.act = carve(N * d.F / V);
          a.spd.push_back(s);
        }
      }
      if (full) shared = a, have_shared = true;
    }
    lnf_ = carve(N * C);
    rstdf_ = carve_stat(N);
    lsef_ = carve_stat(N);
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
    spd_acc_ = spd_wacc_ = nullptr;
    if (buffers.spd_block && act_dtype_ == ops::Act<T>::kNative) {
      spd_acc_ = carve(N * C + 3 * C);  // one message
      spd_wacc_ = spd_acc_ ? static_cast<T*>(spd_acc_ + N * C) : nullptr;
    } else if (buffers.spd_block) {
      spd_acc_ = carve(N * C);
      spd_wacc_ = carve_stat(3 * C);
    }
    sum_out_ = buffers.output_slot_2 ? carve(N * C) : nullptr;
    d_boundary_ = by_chunk ? carve(N * C) : nullptr;
    return std::pair(used, used_stats);
  };
  batch_ = seq_ = 0;  // invalid until the arena is carved for the new shape
  const auto [needed, needed_stats] = carve_all(ops::Act<T>(), nullptr);
  // Grow; a smaller shape reuses the arenas (the old one released first).
  if (size_t(needed) > acts_.size() || acts_.dtype() != act_dtype_) {
    acts_ = ops::ActBuffer<T>();
    acts_ = ops::ActBuffer<T>(be_.get(), size_t(needed), act_dtype_);
  }
  if (size_t(needed_stats) > stats_.size()) {
    stats_ = ops::DeviceBuffer<T>();
    stats_ = ops::DeviceBuffer<T>(be_.get(), size_t(needed_stats));
  }
  carve_all(acts_.data(), stats_.data());
  batch_ = B;
  seq_ = T_;
}

template <typename T>
int64_t Model<T>::activation_bytes() const {
  int64_t n = int64_t(acts_.size() * ops::dtype_size(acts_.dtype()) + stats_.size() * sizeof(T));
  for (size_t k = 0; k < slots_.size(); ++k)  // the other activation slots
    if (int(k) != slot_)
      n += int64_t(slots_[k].acts.size() * ops::dtype_size(slots_[k].acts.dtype()) +
                   slots_[k].stats.size() * sizeof(T));
  return n;
}

template <typename T>
void Model<T>::set_activation_storage(ops::Dtype dt) {
  STRATA_CHECK(dt == ops::Act<T>::kNative || (dt == ops::Dtype::BF16 && std::is_same_v<T, float>),
               "activations of ", ops::dtype_name(dt), " on a model of ",
               ops::dtype_name(ops::Act<T>::kNative));
  if (dt == act_dtype_) return;
  act_dtype_ = dt;
  batch_ = seq_ = 0;  // carve the arenas again at the next forward
  have_forward_ = false;
  records_.clear();
}

template <typename T>
ops::ActIn<T> Model<T>::stream(int i) const {
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
void Model<T>::settle(int stream, ops::Act<T> grad) {
  for (size_t k = 0; k < pending_grad_.size();) {
    const PendingGrad p = pending_grad_[k];
    if (p.stream != stream) {
      ++k;
      continue;
    }
    pending_grad_.erase(pending_grad_.begin() + long(k));
    tp_.wait(p.handle);
    if (p.layer < 0)  // a gradient the next pipeline stage computed (stage_backward)
      be_->residual_forward(grad, grad, p.d_ln, p.rows * cfg_.hidden_size);
    else
      norm_backward(p.layer, p.mlp, grad, p.d_ln, streams_[size_t(stream)], p.rows);
  }
}

template <typename T>
void Model<T>::norm_backward(int l, bool mlp, ops::Act<T> dx, ops::ActIn<T> d_ln, ops::ActIn<T> x,
                             int64_t rows) {
  const LayerTensors<T> w = layer_params(l), g = layer_grads(l);
  norm_backward_with(l, mlp, mlp ? w.post_norm : w.input_norm, mlp ? g.post_norm : g.input_norm, dx,
                     d_ln, x, rows);
}

template <typename T>
void Model<T>::norm_backward_with(int l, bool mlp, const T* nw, T* dw, ops::Act<T> dx,
                                  ops::ActIn<T> d_ln, ops::ActIn<T> x, int64_t rows) {
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
void Model<T>::settle_all(ops::Act<T> grad) {
  while (!pending_grad_.empty()) settle(pending_grad_.front().stream, grad);
}

template class Model<float>;
template class Model<double>;

}  // namespace strata
