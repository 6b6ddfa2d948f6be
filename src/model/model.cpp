#include "model/model.h"

#include <cmath>
#include <cstring>

#include "core/error.h"
#include "core/philox.h"

namespace strata {

template <typename T>
Model<T>::Model(const LlamaConfig& cfg, std::unique_ptr<ops::Backend<T>> backend)
    : Model(cfg, LayerPlan::standard(cfg.num_hidden_layers), std::move(backend)) {}

template <typename T>
Model<T>::Model(const LlamaConfig& cfg, const LayerPlan& plan,
                std::unique_ptr<ops::Backend<T>> backend)
    : cfg_(cfg), plan_(plan), layout_((cfg_.finalize(), cfg_)), be_(std::move(backend)) {
  STRATA_CHECK(plan_.num_layers() == cfg_.num_hidden_layers, "layer plan has ", plan_.num_layers(),
               " layers, model has ", cfg_.num_hidden_layers);
  params_ = ops::DeviceBuffer<T>(be_.get(), layout_.total());
  grads_ = ops::DeviceBuffer<T>(be_.get(), layout_.total());
  set_trainable(std::vector<bool>(layout_.tensors().size(), true));
  const int half = cfg_.head_dim / 2;
  const size_t table = size_t(cfg_.max_position_embeddings) * half;
  std::vector<T> cos(table), sin(table);
  const std::vector<double> inv_freq = cfg_.rope_inv_freq();
  cpu::rope_table<T>(cos.data(), sin.data(), cfg_.max_position_embeddings, cfg_.head_dim,
                     inv_freq.data());
  rope_cos_ = ops::DeviceBuffer<T>(be_.get(), table);
  rope_sin_ = ops::DeviceBuffer<T>(be_.get(), table);
  be_->from_host(rope_cos_.data(), cos.data(), int64_t(table));
  be_->from_host(rope_sin_.data(), sin.data(), int64_t(table));
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
      for (int64_t i = 0; i < info.numel; ++i) p[i] = T(std * rng.normal(uint64_t(i)));
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
  const int64_t N = int64_t(B) * T_, C = cfg_.hidden_size, F = cfg_.intermediate_size;
  const int L = cfg_.num_hidden_layers, Hq = cfg_.num_attention_heads;
  const int64_t QKV = cfg_.qkv_dim(), Q = cfg_.q_dim();
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

// ---------------------------------------------------------------- modules

template <typename T>
void Model<T>::attention_forward(int l, const T* x, T* out, int B, int T_) {
  const auto& P = layout_.layers[l];
  auto& A = layer_acts_[l];
  const int64_t N = int64_t(B) * T_;
  const int C = cfg_.hidden_size, D = cfg_.head_dim, Hq = cfg_.num_attention_heads,
            Hkv = cfg_.num_key_value_heads, QKV = cfg_.qkv_dim(), Q = cfg_.q_dim();
  be_->rmsnorm_forward(A.ln1, A.rstd1, x, param(P.input_norm), N, C, cfg_.rms_norm_eps);
  // q, k, v weights (and biases) are contiguous: one GEMM for all three.
  be_->linear_forward(A.qkv, A.ln1, param(P.q), P.q_bias >= 0 ? param(P.q_bias) : nullptr, N, C,
                      QKV);
  // q heads and k heads are adjacent in each row: rotate Hq + Hkv heads at once.
  be_->rope_forward(A.qkv, rope_cos_.data(), rope_sin_.data(), B, T_, Hq + Hkv, D, QKV, 0);
  be_->attention_forward(A.att, A.lse, A.qkv, B, T_, Hq, Hkv, D);
  be_->linear_forward(out, A.att, param(P.o), P.o_bias >= 0 ? param(P.o_bias) : nullptr, N, Q, C);
}

template <typename T>
void Model<T>::mlp_forward(int l, const T* x, T* out, int B, int T_) {
  const auto& P = layout_.layers[l];
  auto& A = layer_acts_[l];
  const int64_t N = int64_t(B) * T_;
  const int C = cfg_.hidden_size, F = cfg_.intermediate_size;
  be_->rmsnorm_forward(A.ln2, A.rstd2, x, param(P.post_norm), N, C, cfg_.rms_norm_eps);
  be_->linear_forward(A.gateup, A.ln2, param(P.gate), nullptr, N, C, 2 * F);  // gate|up fused
  be_->swiglu_forward(A.h, A.gateup, N, F);
  be_->linear_forward(out, A.h, param(P.down), nullptr, N, F, C);
}

// dmod: gradient of the module output (read before dx is written, so it may
// alias dx). dx: gradient of the module input, accumulated (+=).
template <typename T>
void Model<T>::attention_backward(int l, const T* x, T* dmod, T* dx, int B, int T_) {
  const auto& P = layout_.layers[l];
  auto& A = layer_acts_[l];
  const int64_t N = int64_t(B) * T_;
  const int C = cfg_.hidden_size, D = cfg_.head_dim, Hq = cfg_.num_attention_heads,
            Hkv = cfg_.num_key_value_heads, QKV = cfg_.qkv_dim(), Q = cfg_.q_dim();
  be_->linear_backward(d_att_, grad_if({P.o}), P.o_bias >= 0 ? grad_if({P.o_bias}) : nullptr, dmod,
                       A.att, param(P.o), N, Q, C, false);
  be_->attention_backward(d_qkv_, d_att_, A.qkv, A.att, A.lse, B, T_, Hq, Hkv, D);
  be_->rope_backward(d_qkv_, rope_cos_.data(), rope_sin_.data(), B, T_, Hq + Hkv, D, QKV, 0);
  be_->linear_backward(d_ln_, grad_if({P.q, P.k, P.v}),
                       P.q_bias >= 0 ? grad_if({P.q_bias, P.k_bias, P.v_bias}) : nullptr, d_qkv_,
                       A.ln1, param(P.q), N, C, QKV, false);
  be_->rmsnorm_backward(dx, grad_if({P.input_norm}), d_ln_, x, param(P.input_norm), A.rstd1, N, C);
}

template <typename T>
void Model<T>::mlp_backward(int l, const T* x, T* dmod, T* dx, int B, int T_) {
  const auto& P = layout_.layers[l];
  auto& A = layer_acts_[l];
  const int64_t N = int64_t(B) * T_;
  const int C = cfg_.hidden_size, F = cfg_.intermediate_size;
  be_->linear_backward(d_h_, grad_if({P.down}), nullptr, dmod, A.h, param(P.down), N, F, C, false);
  be_->swiglu_backward(d_gateup_, d_h_, A.gateup, N, F);
  be_->linear_backward(d_ln_, grad_if({P.gate, P.up}), nullptr, d_gateup_, A.ln2, param(P.gate), N,
                       C, 2 * F, false);
  be_->rmsnorm_backward(dx, grad_if({P.post_norm}), d_ln_, x, param(P.post_norm), A.rstd2, N, C);
}

// ---------------------------------------------------------------- executor

template <typename T>
void Model<T>::run_forward(const int32_t* tokens, int B, int T_, int exit_layer) {
  have_forward_ = false;
  if (exit_layer < 0) exit_layer = cfg_.num_hidden_layers;
  STRATA_CHECK(exit_layer >= 1 && exit_layer <= cfg_.num_hidden_layers, "exit layer ", exit_layer,
               " is outside 1..", cfg_.num_hidden_layers);
  ensure_activations(B, T_);
  const int64_t N = int64_t(B) * T_, NC = N * cfg_.hidden_size;
  tokens_.assign(tokens, tokens + N);
  be_->embedding_forward(streams_[0], tokens, param(layout_.embed), N, cfg_.hidden_size,
                         cfg_.vocab_size);
  for (int l = 0; l < exit_layer; ++l) {
    switch (plan_.kinds[l]) {
      case LayerKind::Standard: {
        const int i = 2 * l + 1;  // attention module i, MLP module i + 1
        attention_forward(l, streams_[i - 1], mod_out_, B, T_);
        be_->residual_forward(streams_[i], streams_[i - 1], mod_out_, NC);
        mlp_forward(l, streams_[i], mod_out_, B, T_);
        be_->residual_forward(streams_[i + 1], streams_[i], mod_out_, NC);
        break;
      }
    }
  }
}

// Expects dstream_ to hold the gradient of the final stream x_2L.
template <typename T>
void Model<T>::run_backward(const int32_t* tokens, int B, int T_) {
  const int64_t N = int64_t(B) * T_;
  for (int l = cfg_.num_hidden_layers - 1; l >= backward_floor_; --l) {
    switch (plan_.kinds[l]) {
      case LayerKind::Standard: {
        // x_i = x_{i-1} + h_i(x_{i-1}): the residual passes the gradient through
        // unchanged, the module adds its input gradient on top (dmod aliases dx).
        const int i = 2 * l + 1;
        mlp_backward(l, streams_[i], dstream_, dstream_, B, T_);
        attention_backward(l, streams_[i - 1], dstream_, dstream_, B, T_);
        break;
      }
    }
  }
  if (trainable_[layout_.embed])
    be_->embedding_backward(grad(layout_.embed), tokens, dstream_, N, cfg_.hidden_size);
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
                                    head_weight(), targets, N, cfg_.hidden_size, cfg_.vocab_size,
                                    cfg_.rms_norm_eps);
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
                        cfg_.hidden_size, cfg_.vocab_size, dloss);
  run_backward(tokens_.data(), batch_, seq_);
}

template <typename T>
LossResult Model<T>::forward_backward(const int32_t* tokens, const int32_t* targets, int B, int T_,
                                      double dloss) {
  run_forward(tokens, B, T_);
  const int64_t N = int64_t(B) * T_;
  targets_.assign(targets, targets + N);
  be_->zero(dstream_, N * cfg_.hidden_size);
  LossResult r;
  r.loss_sum = be_->head_ce_forward_backward(
      dstream_, grad_if({layout_.final_norm}), grad_if({head_index()}), lnf_, rstdf_, &r.n_valid,
      streams_[2 * cfg_.num_hidden_layers], param(layout_.final_norm), head_weight(), targets, N,
      cfg_.hidden_size, cfg_.vocab_size, cfg_.rms_norm_eps, dloss);
  run_backward(tokens, B, T_);
  return r;
}

template <typename T>
void Model<T>::forward_logits(const int32_t* tokens, int B, int T_, T* logits) {
  run_forward(tokens, B, T_);
  const int64_t N = int64_t(B) * T_;
  be_->head_logits(logits, lnf_, streams_[2 * cfg_.num_hidden_layers], param(layout_.final_norm),
                   head_weight(), N, cfg_.hidden_size, cfg_.vocab_size, cfg_.rms_norm_eps);
}

template <typename T>
void Model<T>::forward_hidden(const int32_t* tokens, int B, int T_, int exit_layer) {
  run_forward(tokens, B, T_, exit_layer);
}

template <typename T>
void Model<T>::head_rows(const T* x, int64_t n, T* logits, T* xn_scratch) {
  be_->head_logits(logits, xn_scratch, x, param(layout_.final_norm), head_weight(), n,
                   cfg_.hidden_size, cfg_.vocab_size, cfg_.rms_norm_eps);
}

template class Model<float>;
template class Model<double>;

}  // namespace strata
