#include "model/model.h"

#include <cmath>
#include <cstring>
#include <type_traits>

#include "core/error.h"
#include "core/philox.h"

namespace strata {

template <typename T>
Model<T>::Model(const LlamaConfig& cfg, std::unique_ptr<ops::Backend<T>> backend)
    : Model(cfg, LayerPlan::standard(cfg.num_hidden_layers), std::move(backend)) {}

template <typename T>
Model<T>::Model(const LlamaConfig& cfg, const LayerPlan& plan,
                std::unique_ptr<ops::Backend<T>> backend, Communicator* tp)
    : cfg_(cfg),
      plan_(plan),
      layout_((cfg_.finalize(), cfg_), tp ? tp->size() : 1, tp ? tp->rank() : 0),
      be_(std::move(backend)),
      tp_(tp && tp->size() > 1 ? tp : nullptr) {
  STRATA_CHECK(plan_.num_layers() == cfg_.num_hidden_layers, "layer plan has ", plan_.num_layers(),
               " layers, model has ", cfg_.num_hidden_layers);
  STRATA_CHECK((!tp_ || std::is_same_v<T, float>), "tensor parallelism runs float models only");
  params_ = ops::DeviceBuffer<T>(be_.get(), layout_.total());
  grads_ = ops::DeviceBuffer<T>(be_.get(), layout_.total());
  set_trainable(std::vector<bool>(layout_.tensors().size(), true));
  const size_t table = size_t(cfg_.max_position_embeddings) * (cfg_.head_dim / 2);
  rope_cos_ = ops::DeviceBuffer<T>(be_.get(), table);
  rope_sin_ = ops::DeviceBuffer<T>(be_.get(), table);
  const std::vector<double> inv_freq = cfg_.rope_inv_freq();
  be_->rope_table(rope_cos_.data(), rope_sin_.data(), cfg_.max_position_embeddings, cfg_.head_dim,
                  inv_freq.data());
}

template <typename T>
void Model<T>::init_weights(uint64_t seed) {
  std::vector<T> host(layout_.total(), T(0));
  const auto& tensors = layout_.tensors();
  for (size_t ti = 0; ti < tensors.size(); ++ti) {
    const ParamInfo& info = tensors[ti];
    T* p = host.data() + info.offset;
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
  be_->from_host(params_.data(), host.data(), layout_.total());
}

template <typename T>
void Model<T>::zero_grad() {
  be_->zero(grads_.data(), layout_.total());
}

template <typename T>
void Model<T>::set_trainable(const std::vector<bool>& trainable) {
  STRATA_CHECK(trainable.size() == layout_.tensors().size(), "trainable mask has ",
               trainable.size(), " entries, the model has ", layout_.tensors().size(), " tensors");
  trainable_ = trainable;
  // Layers below the lowest one holding a trainable tensor need no backward,
  // unless the embedding itself is trained.
  backward_floor_ = cfg_.num_hidden_layers;
  for (size_t i = 0; i < trainable_.size(); ++i)
    if (trainable_[i] && layout_[int(i)].layer >= 0)
      backward_floor_ = std::min(backward_floor_, layout_[int(i)].layer);
  if (trainable_[layout_.embed]) backward_floor_ = 0;
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
  const int64_t N = int64_t(B) * T_, C = cfg_.hidden_size, F = f_local();
  const int L = cfg_.num_hidden_layers, Hq = hq_local();
  const int64_t QKV = qkv_local(), Q = q_local();
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
    for (auto& a : layer_acts_) {
      a.ln1 = carve(N * C);
      a.rstd1 = carve(N);
      a.qkv = carve(N * QKV);
      a.att = carve(N * Q);
      a.lse = carve(int64_t(B) * Hq * T_);
      a.ln2 = carve(N * C);
      a.rstd2 = carve(N);
      a.gateup = carve(N * 2 * F);
      a.h = carve(N * F);
    }
    lnf_ = carve(N * C);
    rstdf_ = carve(N);
    lsef_ = carve(N);
    mod_out_ = carve(N * C);
    dstream_ = carve(N * C);
    d_ln_ = carve(N * C);
    d_qkv_ = carve(N * QKV);
    d_att_ = carve(N * Q);
    d_gateup_ = carve(N * 2 * F);
    d_h_ = carve(N * F);
    d_sub_ = carve(N * C);
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
void Model<T>::tp_allreduce(T* buf, int64_t n) {
  if constexpr (std::is_same_v<T, float>) {
    if (tp_) tp_->allreduce_sum(buf, n);
  }
}

template <typename T>
const ops::VocabShard<T>* Model<T>::head_shard() {
  if constexpr (!std::is_same_v<T, float>) {
    return nullptr;
  } else {
    if (!tp_) return nullptr;
    const int P = tp_size();
    shard_.v0 = int64_t(tp_rank()) * v_local();
    // Global log-sum-exp of a row = log sum over ranks of exp(local lse):
    // gather every rank's local values; the target logit lives on one rank.
    shard_.combine = [this, P](T* lse, T* target, int64_t rows) {
      tp_scratch_.resize(size_t(rows) * P);
      tp_->allgather(lse, tp_scratch_.data(), rows);
      for (int64_t r = 0; r < rows; ++r) {
        T m = tp_scratch_[r];
        for (int p = 1; p < P; ++p) m = std::max(m, tp_scratch_[size_t(p) * rows + r]);
        double z = 0;
        for (int p = 0; p < P; ++p) z += std::exp(double(tp_scratch_[size_t(p) * rows + r] - m));
        lse[r] = T(double(m) + std::log(z));
      }
      tp_->allreduce_sum(target, rows);
    };
    shard_.reduce = [this](T* dxn, int64_t n) { tp_->allreduce_sum(dxn, n); };
    return &shard_;
  }
}

template <typename T>
void Model<T>::gather_vocab(const T* local, int64_t rows, T* full) {
  if constexpr (std::is_same_v<T, float>) {
    const int P = tp_size(), Vl = v_local(), V = cfg_.vocab_size;
    tp_scratch_.resize(size_t(rows) * V);
    tp_->allgather(local, tp_scratch_.data(), rows * Vl);  // [P][rows][Vl]
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

// ---------------------------------------------------------------- modules

template <typename T>
void Model<T>::attention_forward(int l, const T* x, T* out, int B, int T_) {
  const auto& P = layout_.layers[l];
  auto& A = layer_acts_[l];
  const int64_t N = int64_t(B) * T_;
  const int C = cfg_.hidden_size, D = cfg_.head_dim, Hq = hq_local(), Hkv = hkv_local(),
            QKV = qkv_local(), Q = q_local();
  be_->rmsnorm_forward(A.ln1, A.rstd1, x, param(P.input_norm), N, C, cfg_.rms_norm_eps);
  // q, k, v weights (and biases) are contiguous: one GEMM for all three.
  be_->linear_forward(A.qkv, A.ln1, param(P.q), P.q_bias >= 0 ? param(P.q_bias) : nullptr, N, C,
                      QKV);
  // q heads and k heads are adjacent in each row: rotate Hq + Hkv heads at once.
  be_->rope_forward(A.qkv, rope_cos_.data(), rope_sin_.data(), B, T_, Hq + Hkv, D, QKV, 0);
  be_->attention_forward(A.att, A.lse, A.qkv, B, T_, Hq, Hkv, D);
  // Row-parallel output: partial sums, reduced over the tp group; the
  // replicated bias is added by one rank only.
  const T* bias = P.o_bias >= 0 && tp_rank() == 0 ? param(P.o_bias) : nullptr;
  be_->linear_forward(out, A.att, param(P.o), bias, N, Q, C);
  tp_allreduce(out, N * C);
}

template <typename T>
void Model<T>::mlp_forward(int l, const T* x, T* out, int B, int T_) {
  const auto& P = layout_.layers[l];
  auto& A = layer_acts_[l];
  const int64_t N = int64_t(B) * T_;
  const int C = cfg_.hidden_size, F = f_local();
  be_->rmsnorm_forward(A.ln2, A.rstd2, x, param(P.post_norm), N, C, cfg_.rms_norm_eps);
  be_->linear_forward(A.gateup, A.ln2, param(P.gate), nullptr, N, C, 2 * F);  // gate|up fused
  be_->swiglu_forward(A.h, A.gateup, N, F);
  be_->linear_forward(out, A.h, param(P.down), nullptr, N, F, C);
  tp_allreduce(out, N * C);
}

// dmod: gradient of the module output (read before dx is written, so it may
// alias dx). dx: gradient of the module input, accumulated (+=). Under tensor
// parallelism dmod is replicated (the conjugate of the forward all-reduce is
// the identity) and the partial input gradient of the column-parallel
// projection is all-reduced.
template <typename T>
void Model<T>::attention_backward(int l, const T* x, T* dmod, T* dx, int B, int T_) {
  const auto& P = layout_.layers[l];
  auto& A = layer_acts_[l];
  const int64_t N = int64_t(B) * T_;
  const int C = cfg_.hidden_size, D = cfg_.head_dim, Hq = hq_local(), Hkv = hkv_local(),
            QKV = qkv_local(), Q = q_local();
  be_->linear_backward(d_att_, grad_if({P.o}), P.o_bias >= 0 ? grad_if({P.o_bias}) : nullptr, dmod,
                       A.att, param(P.o), N, Q, C, false);
  be_->attention_backward(d_qkv_, d_att_, A.qkv, A.att, A.lse, B, T_, Hq, Hkv, D);
  be_->rope_backward(d_qkv_, rope_cos_.data(), rope_sin_.data(), B, T_, Hq + Hkv, D, QKV, 0);
  be_->linear_backward(d_ln_, grad_if({P.q, P.k, P.v}),
                       P.q_bias >= 0 ? grad_if({P.q_bias, P.k_bias, P.v_bias}) : nullptr, d_qkv_,
                       A.ln1, param(P.q), N, C, QKV, false);
  tp_allreduce(d_ln_, N * C);
  be_->rmsnorm_backward(dx, grad_if({P.input_norm}), d_ln_, x, param(P.input_norm), A.rstd1, N, C);
}

template <typename T>
void Model<T>::mlp_backward(int l, const T* x, T* dmod, T* dx, int B, int T_) {
  const auto& P = layout_.layers[l];
  auto& A = layer_acts_[l];
  const int64_t N = int64_t(B) * T_;
  const int C = cfg_.hidden_size, F = f_local();
  be_->linear_backward(d_h_, grad_if({P.down}), nullptr, dmod, A.h, param(P.down), N, F, C, false);
  be_->swiglu_backward(d_gateup_, d_h_, A.gateup, N, F);
  be_->linear_backward(d_ln_, grad_if({P.gate, P.up}), nullptr, d_gateup_, A.ln2, param(P.gate), N,
                       C, 2 * F, false);
  tp_allreduce(d_ln_, N * C);
  be_->rmsnorm_backward(dx, grad_if({P.post_norm}), d_ln_, x, param(P.post_norm), A.rstd2, N, C);
}

// ---------------------------------------------------------------- executor

template <typename T>
void Model<T>::layer_forward(int l, int B, int T_, RunMode mode) {
  const int64_t C = cfg_.hidden_size, NC = int64_t(B) * T_ * C;
  const int i = 2 * l + 1;  // attention module i, MLP module i + 1
  switch (plan_.kinds[l]) {
    case LayerKind::Standard:
      if (mode == RunMode::All || mode == RunMode::Dense) {
        attention_forward(l, streams_[i - 1], mod_out_, B, T_);
        be_->residual_forward(streams_[i], streams_[i - 1], mod_out_, NC);
        mlp_forward(l, streams_[i], mod_out_, B, T_);
        be_->residual_forward(streams_[i + 1], streams_[i], mod_out_, NC);
        if (mode == RunMode::Dense) {  // dropped samples keep their input
          std::vector<uint8_t> kept(size_t(B), 0);
          for (int b : kept_[l]) kept[size_t(b)] = 1;
          const int64_t S = int64_t(T_) * C;
          for (int b = 0; b < B; ++b)
            if (!kept[size_t(b)]) be_->copy(streams_[i + 1] + b * S, streams_[i - 1] + b * S, S);
        }
      } else if (mode == RunMode::None) {
        be_->copy(streams_[i], streams_[i - 1], NC);
        be_->copy(streams_[i + 1], streams_[i - 1], NC);
      } else {  // Gathered: the layer runs on the kept samples only
        const int Bk = int(kept_[l].size());
        const int64_t NCk = int64_t(Bk) * T_ * C;
        if (sub_x_[size_t(l)].size() < size_t(NC))
          sub_x_[size_t(l)] = ops::DeviceBuffer<T>(be_.get(), size_t(NC));
        T* x = sub_x_[size_t(l)].data();
        gather_samples(l, streams_[i - 1], x, T_);
        // The mid stream holds the compact sub-batch (first Bk samples).
        attention_forward(l, x, mod_out_, Bk, T_);
        be_->residual_forward(streams_[i], x, mod_out_, NCk);
        mlp_forward(l, streams_[i], mod_out_, Bk, T_);
        be_->residual_forward(mod_out_, streams_[i], mod_out_, NCk);
        be_->copy(streams_[i + 1], streams_[i - 1], NC);
        scatter_samples(l, mod_out_, streams_[i + 1], T_);
      }
      break;
  }
}

template <typename T>
void Model<T>::layer_backward(int l, int B, int T_, RunMode mode) {
  const int64_t C = cfg_.hidden_size, NC = int64_t(B) * T_ * C, S = int64_t(T_) * C;
  const int i = 2 * l + 1;
  switch (plan_.kinds[l]) {
    case LayerKind::Standard:
      // x_i = x_{i-1} + h_i(x_{i-1}): the residual passes the gradient through
      // unchanged, the module adds its input gradient on top (dmod aliases dx).
      if (mode == RunMode::All) {
        mlp_backward(l, streams_[i], dstream_, dstream_, B, T_);
        attention_backward(l, streams_[i - 1], dstream_, dstream_, B, T_);
      } else if (mode == RunMode::Dense) {
        // Dropped samples: the gradient passes unchanged and nothing reaches
        // the layer (a zero upstream gradient adds zero to every weight).
        std::vector<uint8_t> kept(size_t(B), 0);
        for (int b : kept_[l]) kept[size_t(b)] = 1;
        be_->copy(d_sub_, dstream_, NC);
        for (int b = 0; b < B; ++b)
          if (!kept[size_t(b)]) be_->zero(d_sub_ + b * S, S);
        mlp_backward(l, streams_[i], d_sub_, d_sub_, B, T_);
        attention_backward(l, streams_[i - 1], d_sub_, d_sub_, B, T_);
        for (int b = 0; b < B; ++b)
          if (kept[size_t(b)]) be_->copy(dstream_ + b * S, d_sub_ + b * S, S);
      } else if (mode == RunMode::Gathered) {
        const int Bk = int(kept_[l].size());
        gather_samples(l, dstream_, d_sub_, T_);
        mlp_backward(l, streams_[i], d_sub_, d_sub_, Bk, T_);
        attention_backward(l, sub_x_[size_t(l)].data(), d_sub_, d_sub_, Bk, T_);
        scatter_samples(l, d_sub_, dstream_, T_);
      }  // None: identity
      break;
  }
}

template <typename T>
void Model<T>::gather_samples(int l, const T* full, T* compact, int T_) {
  const int64_t S = int64_t(T_) * cfg_.hidden_size;
  const auto& kept = kept_[size_t(l)];
  for (size_t k = 0; k < kept.size(); ++k)
    be_->copy(compact + int64_t(k) * S, full + int64_t(kept[k]) * S, S);
}

template <typename T>
void Model<T>::scatter_samples(int l, const T* compact, T* full, int T_) {
  const int64_t S = int64_t(T_) * cfg_.hidden_size;
  const auto& kept = kept_[size_t(l)];
  for (size_t k = 0; k < kept.size(); ++k)
    be_->copy(full + int64_t(kept[k]) * S, compact + int64_t(k) * S, S);
}

template <typename T>
void Model<T>::exit_loss(int l, int B, int T_, double scale, LossResult* result) {
  const int64_t N = int64_t(B) * T_;
  int64_t n_valid = 0;
  const double sum = be_->head_ce_forward_backward(
      dstream_, grad_if({layout_.final_norm}), grad_if({head_index()}), lnf_, rstdf_, &n_valid,
      streams_[2 * (l + 1)], param(layout_.final_norm), head_weight(), targets_.data(), N,
      cfg_.hidden_size, v_local(), cfg_.rms_norm_eps, scale, head_shard());
  if (result) result->exit_loss_sum[size_t(l)] = sum;
}

template <typename T>
void Model<T>::run_forward(const int32_t* tokens, int B, int T_, int exit_layer,
                           const LayerSkipStep* skip) {
  have_forward_ = false;
  if (exit_layer < 0) exit_layer = cfg_.num_hidden_layers;
  STRATA_CHECK(exit_layer >= 1 && exit_layer <= cfg_.num_hidden_layers, "exit layer ", exit_layer,
               " is outside 1..", cfg_.num_hidden_layers);
  ensure_activations(B, T_);
  const int64_t N = int64_t(B) * T_, NC = N * cfg_.hidden_size;
  tokens_.assign(tokens, tokens + N);
  // Vocab-parallel embedding: each rank looks up its own rows, zeros elsewhere.
  be_->embedding_forward(streams_[0], tokens, param(layout_.embed), N, cfg_.hidden_size,
                         cfg_.vocab_size, int64_t(tp_rank()) * v_local(), tp_ ? v_local() : -1);
  tp_allreduce(streams_[0], NC);
  const int L = cfg_.num_hidden_layers;
  run_mode_.assign(size_t(L), RunMode::All);
  kept_.resize(size_t(L));
  sub_x_.resize(size_t(L));
  const bool dropping = skip && !skip->keep.empty();
  if (dropping)
    STRATA_CHECK(int(skip->keep.size()) == L, "layer skip: keep masks for ", skip->keep.size(),
                 " layers, the model has ", L);
  for (int l = 0; l < exit_layer; ++l) {
    RunMode mode = RunMode::All;
    if (dropping) {
      const auto& k = skip->keep[size_t(l)];
      STRATA_CHECK(int(k.size()) == B, "layer skip: keep mask of layer ", l, " has ", k.size(),
                   " entries for a batch of ", B);
      kept_[size_t(l)].clear();
      for (int b = 0; b < B; ++b)
        if (k[size_t(b)]) kept_[size_t(l)].push_back(b);
      const int Bk = int(kept_[size_t(l)].size());
      mode = Bk == B                 ? RunMode::All
             : skip->dense_reference ? RunMode::Dense
             : Bk == 0               ? RunMode::None
                                     : RunMode::Gathered;
    }
    run_mode_[size_t(l)] = mode;
    layer_forward(l, B, T_, mode);
  }
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
  for (int l = 0; l + 1 < L; ++l) exits |= exit_weight(l) > 0;
  // The final norm and the head (when untied) end the arena: done now unless
  // early exits still add to them.
  if (!exits) grad_ready(layout_.final_norm, int(layout_.tensors().size()) - 1);
  for (int l = L - 1; l >= backward_floor_; --l) {
    if (exit_weight(l) > 0) exit_loss(l, B, T_, dloss * exit_weight(l), result);
    layer_backward(l, B, T_, run_mode_[size_t(l)]);
    grad_ready(layout_.layers[l].input_norm, layout_.layers[l].down);
  }
  for (int l = std::min(backward_floor_, L) - 1; l >= 0; --l) {  // frozen layers
    if (exit_weight(l) > 0) exit_loss(l, B, T_, dloss * exit_weight(l), result);
    grad_ready(layout_.layers[l].input_norm, layout_.layers[l].down);
  }
  if (exits) grad_ready(layout_.final_norm, int(layout_.tensors().size()) - 1);
  if (trainable_[layout_.embed])
    be_->embedding_backward(grad(layout_.embed), tokens, dstream_, N, cfg_.hidden_size,
                            int64_t(tp_rank()) * v_local(), tp_ ? v_local() : -1);
  grad_ready(layout_.embed, layout_.embed);
}

template <typename T>
LossResult Model<T>::forward(const int32_t* tokens, const int32_t* targets, int B, int T_) {
  run_forward(tokens, B, T_);
  const int64_t N = int64_t(B) * T_;
  targets_.assign(targets, targets + N);
  LossResult r;
  have_forward_ = true;
  r.loss_sum = be_->head_ce_forward(lnf_, rstdf_, lsef_, nullptr, &r.n_valid,
                                    streams_[2 * cfg_.num_hidden_layers], param(layout_.final_norm),
                                    head_weight(), targets, N, cfg_.hidden_size, v_local(),
                                    cfg_.rms_norm_eps, head_shard());
  return r;
}

template <typename T>
void Model<T>::backward(double dloss) {
  STRATA_CHECK(have_forward_, "backward() needs a completed forward() first");
  const int64_t N = int64_t(batch_) * seq_;
  be_->zero(dstream_, N * cfg_.hidden_size);
  be_->head_ce_backward(dstream_, grad_if({layout_.final_norm}), grad_if({head_index()}),
                        streams_[2 * cfg_.num_hidden_layers], lnf_, rstdf_, lsef_,
                        param(layout_.final_norm), head_weight(), targets_.data(), N,
                        cfg_.hidden_size, v_local(), dloss, head_shard());
  run_backward(tokens_.data(), batch_, seq_);
}

template <typename T>
LossResult Model<T>::forward_backward(const int32_t* tokens, const int32_t* targets, int B, int T_,
                                      double dloss, const LayerSkipStep* skip) {
  const int L = cfg_.num_hidden_layers;
  if (skip && !skip->exit_weight.empty())
    STRATA_CHECK(int(skip->exit_weight.size()) == L, "layer skip: exit weights for ",
                 skip->exit_weight.size(), " layers, the model has ", L);
  run_forward(tokens, B, T_, -1, skip);
  const int64_t N = int64_t(B) * T_;
  targets_.assign(targets, targets + N);
  be_->zero(dstream_, N * cfg_.hidden_size);
  LossResult r;
  r.exit_loss_sum.assign(size_t(L), std::nan(""));
  const double w_last = skip && !skip->exit_weight.empty() ? skip->exit_weight[size_t(L - 1)] : 1.0;
  r.loss_sum = be_->head_ce_forward_backward(
      dstream_, grad_if({layout_.final_norm}), grad_if({head_index()}), lnf_, rstdf_, &r.n_valid,
      streams_[2 * L], param(layout_.final_norm), head_weight(), targets, N, cfg_.hidden_size,
      v_local(), cfg_.rms_norm_eps, dloss * w_last, head_shard());
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
void Model<T>::head_rows(const T* x, int64_t n, T* logits, T* xn_scratch) {
  if (!tp_) {
    be_->head_logits(logits, xn_scratch, x, param(layout_.final_norm), head_weight(), n,
                     cfg_.hidden_size, cfg_.vocab_size, cfg_.rms_norm_eps);
    return;
  }
  std::vector<T> local(size_t(n) * v_local());
  be_->head_logits(local.data(), xn_scratch, x, param(layout_.final_norm), head_weight(), n,
                   cfg_.hidden_size, v_local(), cfg_.rms_norm_eps);
  gather_vocab(local.data(), n, logits);
}

template class Model<float>;
template class Model<double>;

}  // namespace strata
