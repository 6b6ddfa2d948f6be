// The fused final norm + LM head + cross-entropy as the executor runs it. On
// one rank it is the backend's op. With a tensor-parallel group each rank
// holds a shard of the vocabulary (rows [v0, v0 + V) of the head), and no
// rank ever holds the full logits: the ops compute each rank's part in
// phases (ops/ops.def, "vocabulary-parallel head") and this class runs the
// collectives between them, as Megatron's vocab-parallel cross-entropy keeps
// the math apart from the communication:
//   forward   local log-sum-exp and target logit per row; all-gather of the
//             log-sum-exps, combined into the global one on the host; sum of
//             the target logits; the loss.
//   backward  this rank's part of the normed input's gradient from the
//             global log-sum-exp; its sum over the ranks; the norm's backward.
// The arguments are the backend ops' (head_ce_forward, _backward,
// _forward_backward).
#pragma once

#include <cstdint>
#include <vector>

#include "model/tp_region.h"
#include "ops/backend.h"
#include "parallel/comm.h"

namespace strata {

template <typename T>
class HeadCe {
 public:
  // tp: the tensor-parallel group (null or one rank: the backend's op), v0:
  // the first vocabulary row of this rank's shard.
  HeadCe(ops::Backend<T>& be, Communicator* tp, int64_t v0);

  double forward(ops::Act<T> xn, T* rstd, T* lse, T* token_nll, int64_t* n_valid, ops::ActIn<T> x,
                 const T* wn, const T* wout, const int32_t* targets, int64_t N, int C, int V,
                 double eps);
  void backward(ops::Act<T> dx, T* dwn, T* dwout, ops::ActIn<T> x, ops::ActIn<T> xn, const T* rstd,
                const T* lse, const T* wn, const T* wout, const int32_t* targets, int64_t N, int C,
                int V, double dloss);
  double forward_backward(ops::Act<T> dx, T* dwn, T* dwout, ops::Act<T> xn, T* rstd,
                          int64_t* n_valid, ops::ActIn<T> x, const T* wn, const T* wout,
                          const int32_t* targets, int64_t N, int C, int V, double eps,
                          double dloss);

 private:
  // lse[N] = log sum over ranks of exp(this rank's lse); target_logit[N]
  // summed over ranks (the rank holding the target adds it, the others 0).
  void combine(T* lse, T* target_logit, int64_t N);
  T* device(ops::DeviceBuffer<T>& b, size_t n);

  ops::Backend<T>& be_;
  Communicator* tp_;
  TpRegion<T> region_;  // (sums bf16 activations in fp32)
  int64_t v0_;
  ops::DeviceBuffer<T> lse_, target_logit_, gathered_;
  ops::ActBuffer<T> dxn_;
  std::vector<T> host_;
};

}  // namespace strata
