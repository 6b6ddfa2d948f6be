// cuDNN's fused attention through the cuDNN frontend (its header-only C++
// graph API over cuDNN 9's backend): one SDPA graph per shape and direction,
// causal, GQA (K and V with Hkv heads), scale 1/sqrt(D), bf16 tensors with
// fp32 softmax and accumulation, the forward generating the softmax stats
// (log-sum-exp, fp32) that the backward takes. The tensors are strata's
// packed layouts described by strides: q, k and v are views into the rows of
// qkv [B, T, (Hq + 2 Hkv) D], seen as [B, H, T, D] with strides
// (T W, D, W, 1); dq, dk and dv are written into a buffer of the same layout.
// The backward asks for cuDNN's deterministic algorithm, as strata's kernels
// are deterministic.
#include "backends/cuda/cudnn_attention.h"

#include <cuda_runtime.h>
#include <cudnn_frontend.h>

#include <cmath>
#include <map>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "core/error.h"

namespace strata::cuda {
namespace {

namespace fe = cudnn_frontend;

enum Uid : int64_t { kQ = 1, kK, kV, kO, kStats, kDO, kDQ, kDK, kDV };

std::string shape_text(const AttentionShape& s) {
  return cat("B ", s.B, ", T ", s.T, ", heads ", s.Hq, "/", s.Hkv, ", head_dim ", s.D);
}

void check_fe(fe::error_t e, const char* what, const AttentionShape& s) {
  if (!e.is_good())
    fail(cat("cuDNN attention: ", what, " failed for ", shape_text(s), ": ", e.get_message()));
}

void check_cudnn(cudnnStatus_t st, const char* what) {
  if (st != CUDNN_STATUS_SUCCESS) fail(cat("cuDNN: ", what, ": ", cudnnGetErrorString(st)));
}

std::vector<int64_t> packed_stride(const AttentionShape& s, int64_t width) {
  return {int64_t(s.T) * width, s.D, width, 1};
}
std::vector<int64_t> dims(const AttentionShape& s, int heads) { return {s.B, heads, s.T, s.D}; }

class CudnnAttention final : public ExternalAttention {
 public:
  ~CudnnAttention() override {
    if (handle_) cudnnDestroy(handle_);
  }
  const char* name() const override { return "cuDNN fused attention (SDPA)"; }

  size_t forward_workspace(const AttentionShape& s) override { return workspace(plan(s, false)); }
  size_t backward_workspace(const AttentionShape& s) override { return workspace(plan(s, true)); }

  void forward(void* stream, uint16_t* o, float* lse, const uint16_t* qkv, const AttentionShape& s,
               void* ws) override {
    fe::graph::Graph& g = plan(s, false);
    check_cudnn(cudnnSetStream(handle_, static_cast<cudaStream_t>(stream)), "cudnnSetStream");
    std::unordered_map<int64_t, void*> pack = {{kO, o}, {kStats, lse}};
    add_qkv(pack, qkv, s);
    check_fe(g.execute(handle_, pack, ws), "execute (forward)", s);
  }

  void backward(void* stream, uint16_t* dqkv, const uint16_t* dout, const uint16_t* qkv,
                const uint16_t* o, const float* lse, const AttentionShape& s, void* ws) override {
    fe::graph::Graph& g = plan(s, true);
    check_cudnn(cudnnSetStream(handle_, static_cast<cudaStream_t>(stream)), "cudnnSetStream");
    std::unordered_map<int64_t, void*> pack = {{kO, const_cast<uint16_t*>(o)},
                                               {kDO, const_cast<uint16_t*>(dout)},
                                               {kStats, const_cast<float*>(lse)},
                                               {kDQ, dqkv},
                                               {kDK, dqkv + int64_t(s.Hq) * s.D},
                                               {kDV, dqkv + int64_t(s.Hq + s.Hkv) * s.D}};
    add_qkv(pack, qkv, s);
    check_fe(g.execute(handle_, pack, ws), "execute (backward)", s);
  }

 private:
  using Key = std::tuple<int, int, int, int, int, bool>;

  static void add_qkv(std::unordered_map<int64_t, void*>& pack, const uint16_t* qkv,
                      const AttentionShape& s) {
    auto* q = const_cast<uint16_t*>(qkv);
    pack[kQ] = q;
    pack[kK] = q + int64_t(s.Hq) * s.D;
    pack[kV] = q + int64_t(s.Hq + s.Hkv) * s.D;
  }

  static size_t workspace(fe::graph::Graph& g) {
    int64_t bytes = 0;
    if (!g.get_workspace_size(bytes).is_good()) return 0;
    return size_t(bytes);
  }

  fe::graph::Graph& plan(const AttentionShape& s, bool backward) {
    if (!handle_) check_cudnn(cudnnCreate(&handle_), "cudnnCreate");
    const Key key{s.B, s.T, s.Hq, s.Hkv, s.D, backward};
    auto it = plans_.find(key);
    if (it == plans_.end()) it = plans_.emplace(key, build(s, backward)).first;
    return *it->second;
  }

  std::shared_ptr<fe::graph::Graph> build(const AttentionShape& s, bool backward) {
    auto g = std::make_shared<fe::graph::Graph>();
    g->set_io_data_type(fe::DataType_t::BFLOAT16)
        .set_intermediate_data_type(fe::DataType_t::FLOAT)
        .set_compute_data_type(fe::DataType_t::FLOAT);
    const int64_t W = int64_t(s.Hq + 2 * s.Hkv) * s.D, WO = int64_t(s.Hq) * s.D;
    auto tensor = [&](const char* name, int64_t uid, int heads, int64_t width) {
      return g->tensor(fe::graph::Tensor_attributes()
                           .set_name(name)
                           .set_uid(uid)
                           .set_dim(dims(s, heads))
                           .set_stride(packed_stride(s, width)));
    };
    const std::vector<int64_t> stats_dim = {s.B, s.Hq, s.T, 1};
    const std::vector<int64_t> stats_stride = {int64_t(s.Hq) * s.T, s.T, 1, 1};
    const float scale = 1.0f / std::sqrt(float(s.D));
    auto Q = tensor("Q", kQ, s.Hq, W), K = tensor("K", kK, s.Hkv, W), V = tensor("V", kV, s.Hkv, W);
    if (!backward) {
      auto opts = fe::graph::SDPA_attributes()
                      .set_name("sdpa")
                      .set_generate_stats(true)
                      .set_causal_mask(true)
                      .set_attn_scale(scale);
      auto [O, stats] = g->sdpa(Q, K, V, opts);
      O->set_output(true).set_uid(kO).set_dim(dims(s, s.Hq)).set_stride(packed_stride(s, WO));
      stats->set_output(true)
          .set_uid(kStats)
          .set_data_type(fe::DataType_t::FLOAT)
          .set_dim(stats_dim)
          .set_stride(stats_stride);
    } else {
      auto O = tensor("O", kO, s.Hq, WO), dO = tensor("dO", kDO, s.Hq, WO);
      auto stats = g->tensor(fe::graph::Tensor_attributes()
                                 .set_name("stats")
                                 .set_uid(kStats)
                                 .set_dim(stats_dim)
                                 .set_stride(stats_stride)
                                 .set_data_type(fe::DataType_t::FLOAT));
      auto opts = fe::graph::SDPA_backward_attributes()
                      .set_name("sdpa_backward")
                      .set_causal_mask(true)
                      .set_attn_scale(scale)
                      .set_deterministic_algorithm(true);
      auto [dQ, dK, dV] = g->sdpa_backward(Q, K, V, O, dO, stats, opts);
      dQ->set_output(true).set_uid(kDQ).set_dim(dims(s, s.Hq)).set_stride(packed_stride(s, W));
      dK->set_output(true).set_uid(kDK).set_dim(dims(s, s.Hkv)).set_stride(packed_stride(s, W));
      dV->set_output(true).set_uid(kDV).set_dim(dims(s, s.Hkv)).set_stride(packed_stride(s, W));
    }
    check_fe(g->validate(), "validate", s);
    check_fe(g->build_operation_graph(handle_), "build_operation_graph", s);
    check_fe(g->create_execution_plans({fe::HeurMode_t::A}), "create_execution_plans", s);
    check_fe(g->check_support(), "check_support (no engine for this shape)", s);
    check_fe(g->build_plans(), "build_plans", s);
    return g;
  }

  cudnnHandle_t handle_ = nullptr;
  std::map<Key, std::shared_ptr<fe::graph::Graph>> plans_;
};

}  // namespace

std::unique_ptr<ExternalAttention> make_cudnn_attention() {
  return std::make_unique<CudnnAttention>();
}

}  // namespace strata::cuda
