#include "model/head_ce.h"

#include <algorithm>
#include <cmath>
#include <type_traits>

namespace strata {

template <typename T>
HeadCe<T>::HeadCe(ops::Backend<T>& be, Communicator* tp, int64_t v0)
    : be_(be),
      tp_(std::is_same_v<T, float> && tp && tp->size() > 1 ? tp : nullptr),
      region_(tp_, &be),
      v0_(v0) {}

template <typename T>
T* HeadCe<T>::device(ops::DeviceBuffer<T>& b, size_t n) {
  if (b.size() < n) b = ops::DeviceBuffer<T>(&be_, n);
  return b.data();
}

template <typename T>
double HeadCe<T>::forward(ops::Act<T> xn, T* rstd, T* lse, T* token_nll, int64_t* n_valid,
                          ops::ActIn<T> x, const T* wn, const T* wout, const int32_t* targets,
                          int64_t N, int C, int V, double eps) {
  if (!tp_)
    return be_.head_ce_forward(xn, rstd, lse, token_nll, n_valid, x, wn, wout, targets, N, C, V,
                               eps);
  if (N == 0) {
    if (n_valid) *n_valid = 0;
    return 0.0;
  }
  T* l = lse ? lse : device(lse_, size_t(N));
  T* target_logit = device(target_logit_, size_t(N));
  be_.head_ce_shard_stats(xn, rstd, l, target_logit, x, wn, wout, targets, N, C, V, v0_, eps);
  combine(l, target_logit, N);
  return be_.head_ce_shard_loss(token_nll, n_valid, l, target_logit, targets, N);
}

template <typename T>
void HeadCe<T>::backward(ops::Act<T> dx, T* dwn, T* dwout, ops::ActIn<T> x, ops::ActIn<T> xn,
                         const T* rstd, const T* lse, const T* wn, const T* wout,
                         const int32_t* targets, int64_t N, int C, int V, double dloss) {
  if (!tp_) {
    be_.head_ce_backward(dx, dwn, dwout, x, xn, rstd, lse, wn, wout, targets, N, C, V, dloss);
    return;
  }
  if (N == 0) return;
  // The normed input's gradient, stored as the activations are.
  ops::Act<T> dxn;
  if (dx || dwn) {
    if (dxn_.size() < size_t(N) * C || dxn_.dtype() != xn.dtype())
      dxn_ = ops::ActBuffer<T>(&be_, size_t(N) * C, xn.dtype());
    dxn = dxn_.data();
  }
  be_.head_ce_shard_backward(dxn, dwout, xn, lse, wout, targets, N, C, V, v0_, dloss);
  if (!dxn) return;
  region_.allreduce(dxn, N * C);  // each rank's columns
  be_.rmsnorm_backward(dx, dwn, dxn, x, wn, rstd, N, C);
}

template <typename T>
double HeadCe<T>::forward_backward(ops::Act<T> dx, T* dwn, T* dwout, ops::Act<T> xn, T* rstd,
                                   int64_t* n_valid, ops::ActIn<T> x, const T* wn, const T* wout,
                                   const int32_t* targets, int64_t N, int C, int V, double eps,
                                   double dloss) {
  if (!tp_)
    return be_.head_ce_forward_backward(dx, dwn, dwout, xn, rstd, n_valid, x, wn, wout, targets, N,
                                        C, V, eps, dloss);
  T* lse = device(lse_, size_t(std::max<int64_t>(N, 1)));
  const double loss = forward(xn, rstd, lse, nullptr, n_valid, x, wn, wout, targets, N, C, V, eps);
  backward(dx, dwn, dwout, x, xn, rstd, lse, wn, wout, targets, N, C, V, dloss);
  return loss;
}

// The global log-sum-exp of a row is log sum over ranks of exp(local lse):
// every rank's local values are gathered; the target logit lives on one rank.
// On a device backend the statistics go through device buffers (NCCL
// collectives take device memory) and the small combine runs on the host.
template <typename T>
void HeadCe<T>::combine(T* lse, T* target_logit, int64_t N) {
  if constexpr (std::is_same_v<T, float>) {
    const int P = tp_->size();
    host_.resize(size_t(N) * (P + 1));
    T* lse_h = host_.data() + size_t(N) * P;
    if (be_.is_host()) {
      tp_->allgather(lse, host_.data(), N);
    } else {
      T* g = device(gathered_, size_t(N) * P);
      tp_->allgather(lse, g, N);
      be_.to_host(host_.data(), g, N * P);
    }
    for (int64_t r = 0; r < N; ++r) {
      T m = host_[r];
      for (int p = 1; p < P; ++p) m = std::max(m, host_[size_t(p) * N + r]);
      double z = 0;
      for (int p = 0; p < P; ++p) z += std::exp(double(host_[size_t(p) * N + r] - m));
      lse_h[r] = T(double(m) + std::log(z));
    }
    if (be_.is_host())
      std::copy_n(lse_h, N, lse);
    else
      be_.from_host(lse, lse_h, N);
    tp_->allreduce_sum(target_logit, N);
  }
}

template class HeadCe<float>;
template class HeadCe<double>;

}  // namespace strata
