// Deterministic sums in double on the stream, for the ops that reduce a
// tensor to a scalar (sum_squares, mse_forward, the cross-entropy's loss):
// each block writes the sum of its grid-stride share to partial[blockIdx.x]
// (threads' shares added in a fixed tree); k_finish_sum adds the partials in
// order into *acc. The grid depends on n only, so the result does too.
#pragma once

#include "backends/cuda/kernels/context.cuh"

namespace strata::cuda {
inline namespace STRATA_TARGET_NS {

// kind 0: x[i]^2; kind 1: (x[i] - y[i])^2; kind 2: x[i].
template <typename T>
STRATA_GLOBAL void k_partial_sums(double* partial, const T* x, const T* y, int64_t n, int kind) {
  double s = 0;
  STRATA_GRID_LOOP(i, n) {
    const double a = double(x[i]);
    const double d = kind == 1 ? a - double(y[i]) : a;
    s += kind == 2 ? d : d * d;
  }
  s = block_sum(s);
  if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

template <typename D = double>
STRATA_GLOBAL void k_finish_sum(D* acc, const D* partial, int parts, D scale) {
  D s = 0;
  for (int i = int(threadIdx.x); i < parts; i += int(blockDim.x)) s += partial[i];
  s = block_sum(s);
  if (threadIdx.x == 0) *acc += s * scale;
}

// ------------------------------------------------------------------ launchers

// *acc += scale * sum of x^2 (kind 0), (x - y)^2 (kind 1) or x (kind 2), on
// the stream.
template <typename T>
void add_sum(KernelContext<T>& k, double* acc, const T* x, const T* y, int64_t n, int kind,
             double scale) {
  const unsigned parts = blocks_for(n, 256, 1024);
  auto* partial = static_cast<double*>(k.scratch(kPartial, parts * sizeof(double)));
  STRATA_LAUNCH(k_partial_sums<T>, parts, 256, 0, k.stream(), partial, x, y, n, kind);
  STRATA_LAUNCH(k_finish_sum<double>, 1, 256, 0, k.stream(), acc,
                static_cast<const double*>(partial), int(parts), scale);
}

// The same sum read back to the host (synchronizes).
template <typename T>
double device_sum(KernelContext<T>& k, const T* x, const T* y, int64_t n, int kind) {
  auto* acc = static_cast<double*>(k.scratch(kSum, sizeof(double)));
  gpu::zero_async(acc, sizeof(double), k.stream());
  add_sum(k, acc, x, y, n, kind, 1.0);
  double h = 0;
  k.read_doubles(&h, acc, 1);
  return h;
}

}  // namespace STRATA_TARGET_NS
}  // namespace strata::cuda
