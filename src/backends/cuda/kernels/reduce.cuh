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

// Column sums over rows (the bias and norm-weight gradients), in two
// kernels: blocks over (128 columns, a chunk of rows) write
// partial[chunk][j], then k_finish_columns adds the chunks in order into
// dst[j]. Deterministic (the chunks depend on N only). It replaced a thread
// per column over all rows, which left all but C / 128 SMs idle and walked
// 16k rows one after another (the kernel lab's column_sums variants).
template <typename T>
STRATA_GLOBAL void k_finish_columns(T* dst, const T* partial, int chunks, int OC) {
  const int j = int(blockIdx.x * blockDim.x + threadIdx.x);
  if (j >= OC) return;
  T s = 0;
  for (int c = 0; c < chunks; ++c) s += partial[int64_t(c) * OC + j];
  dst[j] += s;
}

// Rows per chunk: 256, more when N would need over 65535 chunks (grid.y).
inline int64_t column_chunk_rows(int64_t N) {
  return N / 256 < 65535 ? 256 : (N + 65534) / 65535;
}

// ------------------------------------------------------------------ launchers

// The partial sums' buffer (chunks x OC) and the grid of a column sum.
template <typename T>
T* column_partials(KernelContext<T>& k, int64_t N, int OC, int64_t* chunk, int* chunks) {
  *chunk = column_chunk_rows(N);
  *chunks = int((N + *chunk - 1) / *chunk);
  return static_cast<T*>(k.scratch(kColumns, size_t(*chunks) * OC * sizeof(T)));
}

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
