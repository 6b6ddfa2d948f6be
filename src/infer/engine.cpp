#include "infer/engine.h"

#include "core/error.h"

namespace strata {

KvEngine::KvEngine(Model<float>& model, int max_len, int layers, int batch)
    : m_(model), be_(model.backend()) {
  const LlamaConfig& c = model.config();
  STRATA_CHECK(model.tp_size() == 1, "generation runs in one process (tensor parallelism: 1)");
  layers_ = layers < 0 ? c.num_hidden_layers : layers;
  STRATA_CHECK(layers_ >= 1 && layers_ <= c.num_hidden_layers, "KV cache for ", layers_,
               " layers: the model has ", c.num_hidden_layers);
  max_len_ = max_len;
  STRATA_CHECK(max_len_ >= 1 && max_len_ <= c.max_position_embeddings, "KV cache of ", max_len_,
               " positions: the model's context is ", c.max_position_embeddings);
  for (int l = 0; l < layers_; ++l)
    STRATA_CHECK(model.plan().kinds[size_t(l)] == LayerKind::Standard,
                 "generation supports standard layers only");
  C_ = c.hidden_size;
  D_ = c.head_dim;
  Hq_ = c.num_attention_heads;
  Hkv_ = c.num_key_value_heads;
  Q_ = Hq_ * D_;
  QKV_ = (Hq_ + 2 * Hkv_) * D_;
  F_ = c.intermediate_size;
  batch_ = batch;
  STRATA_CHECK(batch_ >= 1, "KV cache for ", batch_, " sequences");
  const size_t cache = size_t(batch_) * layers_ * Hkv_ * max_len_ * D_;
  k_ = ops::DeviceBuffer<float>(&be_, cache);
  v_ = ops::DeviceBuffer<float>(&be_, cache);
  len_.assign(size_t(batch_) * layers_, 0);
}

void KvEngine::reset() { std::fill(len_.begin(), len_.end(), 0); }

void KvEngine::crop(int l0, int l1, int len, int seq) {
  for (int l = l0; l < l1; ++l) {
    int& n = len_[size_t(seq * layers_ + l)];
    STRATA_CHECK(len >= 0 && len <= n, "crop of layer ", l, " to ", len, " positions: it holds ",
                 n);
    n = len;
  }
}

void KvEngine::ensure_scratch(int n) {
  if (n <= scratch_rows_) return;
  scratch_rows_ = std::max(n, 16);
  const size_t N = size_t(scratch_rows_);
  ln_ = ops::DeviceBuffer<float>(&be_, N * C_);
  rstd_ = ops::DeviceBuffer<float>(&be_, N);
  qkv_ = ops::DeviceBuffer<float>(&be_, N * QKV_);
  att_ = ops::DeviceBuffer<float>(&be_, N * Q_);
  mod_ = ops::DeviceBuffer<float>(&be_, N * C_);
  gateup_ = ops::DeviceBuffer<float>(&be_, N * 2 * F_);
  h_ = ops::DeviceBuffer<float>(&be_, N * F_);
  xn_ = ops::DeviceBuffer<float>(&be_, N * C_);
}

void KvEngine::embed(const int32_t* tokens, int n, float* x) {
  const LlamaConfig& c = m_.config();
  for (int i = 0; i < n; ++i)
    STRATA_CHECK(tokens[i] >= 0 && tokens[i] < c.vocab_size, "token id ", tokens[i],
                 " outside the vocabulary (", c.vocab_size, ")");
  be_.embedding_forward(x, tokens, m_.param(m_.layout().embed), n, C_, c.vocab_size, 0, -1);
}

void KvEngine::run_layers(float* x, int n, int l0, int l1, int seq) {
  STRATA_CHECK(0 <= l0 && l0 <= l1 && l1 <= layers_, "layers [", l0, ", ", l1,
               ") outside the cache's [0, ", layers_, ")");
  STRATA_CHECK(seq >= 0 && seq < batch_, "sequence ", seq, " outside the batch of ", batch_);
  if (l0 == l1 || n == 0) return;
  const int pos0 = length(l0, seq);
  STRATA_CHECK(pos0 + n <= max_len_, "the sequence would reach ", pos0 + n,
               " positions; the KV cache holds ", max_len_);
  std::vector<int> seqs(static_cast<size_t>(n), seq), pos(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) pos[size_t(i)] = pos0 + i;
  for (int l = l0; l < l1; ++l) {
    STRATA_CHECK(length(l, seq) == pos0, "layer ", l, " holds ", length(l, seq),
                 " positions, layer ", l0, " ", pos0);
    layer(l, x, n, seqs, pos);
    len_[size_t(seq * layers_ + l)] = pos0 + n;
  }
}

void KvEngine::decode_rows(float* x, const std::vector<int>& seqs, int l0, int l1) {
  STRATA_CHECK(0 <= l0 && l0 <= l1 && l1 <= layers_, "layers [", l0, ", ", l1,
               ") outside the cache's [0, ", layers_, ")");
  const int rows = int(seqs.size());
  if (l0 == l1 || rows == 0) return;
  std::vector<int> pos(static_cast<size_t>(rows));
  for (int r = 0; r < rows; ++r) {
    const int s = seqs[size_t(r)];
    STRATA_CHECK(s >= 0 && s < batch_, "sequence ", s, " outside the batch of ", batch_);
    for (int q = 0; q < r; ++q)
      STRATA_CHECK(seqs[size_t(q)] != s, "decode_rows: sequence ", s, " appears twice");
    pos[size_t(r)] = length(l0, s);
    STRATA_CHECK(pos[size_t(r)] < max_len_, "sequence ", s, " fills its KV cache (", max_len_,
                 " positions)");
  }
  for (int l = l0; l < l1; ++l) {
    for (int r = 0; r < rows; ++r)
      STRATA_CHECK(length(l, seqs[size_t(r)]) == pos[size_t(r)], "layer ", l, " of sequence ",
                   seqs[size_t(r)], " holds ", length(l, seqs[size_t(r)]), " positions");
    layer(l, x, rows, seqs, pos);
    for (int r = 0; r < rows; ++r) ++len_[size_t(seqs[size_t(r)] * layers_ + l)];
  }
}

void KvEngine::layer(int l, float* x, int n, const std::vector<int>& seqs,
                     const std::vector<int>& pos) {
  ensure_scratch(n);
  const LlamaConfig& c = m_.config();
  const auto& P = m_.layout().layers[size_t(l)];
  const int64_t NC = int64_t(n) * C_;
  // Attention: q, k, v of the new positions; k and v join each row's cache.
  be_.rmsnorm_forward(ln_.data(), rstd_.data(), x, m_.param(P.input_norm), n, C_, c.rms_norm_eps);
  be_.linear_forward(qkv_.data(), ln_.data(), m_.param(P.q),
                     P.q_bias >= 0 ? m_.param(P.q_bias) : nullptr, n, C_, QKV_);
  // Rows come in spans of consecutive positions of one sequence: one RoPE
  // call and one attention call per span.
  for (int r0 = 0; r0 < n;) {
    int r1 = r0 + 1;
    while (r1 < n && seqs[size_t(r1)] == seqs[size_t(r0)] && pos[size_t(r1)] == pos[size_t(r1 - 1)] + 1)
      ++r1;
    const int span = r1 - r0, s = seqs[size_t(r0)], p0 = pos[size_t(r0)];
    float* rows = qkv_.data() + int64_t(r0) * QKV_;
    be_.rope_forward(rows, m_.rope_cos(), m_.rope_sin(), 1, span, Hq_ + Hkv_, D_, QKV_, p0);
    float* K = k_cache(l, s);
    float* V = v_cache(l, s);
    for (int i = 0; i < span; ++i) {
      const float* row = rows + int64_t(i) * QKV_;
      for (int h = 0; h < Hkv_; ++h) {
        const int64_t at = (int64_t(h) * max_len_ + p0 + i) * D_;
        be_.copy(K + at, row + Q_ + int64_t(h) * D_, D_);
        be_.copy(V + at, row + Q_ + int64_t(Hkv_ + h) * D_, D_);
      }
    }
    be_.attention_cached_forward(att_.data() + int64_t(r0) * Q_, rows, QKV_, K, V, span, p0, Hq_,
                                 Hkv_, D_, max_len_);
    r0 = r1;
  }
  be_.linear_forward(mod_.data(), att_.data(), m_.param(P.o),
                     P.o_bias >= 0 ? m_.param(P.o_bias) : nullptr, n, Q_, C_);
  be_.residual_forward(x, x, mod_.data(), NC);
  // MLP.
  be_.rmsnorm_forward(ln_.data(), rstd_.data(), x, m_.param(P.post_norm), n, C_, c.rms_norm_eps);
  be_.linear_forward(gateup_.data(), ln_.data(), m_.param(P.gate), nullptr, n, C_, 2 * F_);
  be_.swiglu_forward(h_.data(), gateup_.data(), n, F_);
  be_.linear_forward(mod_.data(), h_.data(), m_.param(P.down), nullptr, n, F_, C_);
  be_.residual_forward(x, x, mod_.data(), NC);
}

void KvEngine::logits(const float* x, int n, float* out) {
  ensure_scratch(n);
  m_.head_rows(x, n, out, xn_.data());
}

}  // namespace strata
