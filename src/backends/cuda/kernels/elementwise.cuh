// Element-wise and column-reduction kernels: residual and axpby, bias add and
// its column sums, SwiGLU, AdamW, scaling, sums of squares and MSE, bf16
// rounding. Grid-stride loops: any grid size gives the same result.
#pragma once

#include "backends/cuda/kernels/common.cuh"

namespace strata::cuda {
inline namespace STRATA_TARGET_NS {

#define STRATA_GRID_LOOP(i, n)                                              \
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); \
       i += int64_t(gridDim.x) * blockDim.x)

template <typename T>
STRATA_GLOBAL void k_axpby(T* out, const T* x, const T* y, int64_t n, T a, T b) {
  STRATA_GRID_LOOP(i, n) out[i] = a * x[i] + b * y[i];
}

// dx += a dout, dy += b dout (either may be null).
template <typename T>
STRATA_GLOBAL void k_axpby_backward(T* dx, T* dy, const T* dout, int64_t n, T a, T b) {
  STRATA_GRID_LOOP(i, n) {
    const T g = dout[i];
    if (dx) dx[i] += a * g;
    if (dy) dy[i] += b * g;
  }
}

template <typename T>
STRATA_GLOBAL void k_residual(T* out, const T* a, const T* b, int64_t n) {
  STRATA_GRID_LOOP(i, n) out[i] = a[i] + b[i];
}

template <typename T>
STRATA_GLOBAL void k_residual_backward(T* da, T* db, const T* dout, int64_t n) {
  STRATA_GRID_LOOP(i, n) {
    const T g = dout[i];
    if (da) da[i] += g;
    if (db) db[i] += g;
  }
}

// out[r * ld + j] += bias[j].
template <typename T>
STRATA_GLOBAL void k_bias_add(T* out, const T* bias, int64_t N, int OC, int64_t ld) {
  STRATA_GRID_LOOP(i, N * OC) {
    const int64_t r = i / OC;
    const int j = int(i % OC);
    out[r * ld + j] += bias[j];
  }
}

// dst[j] += sum over rows r of src[r * ld + j]: thread per column (coalesced
// across a warp), rows in order (deterministic).
template <typename T>
STRATA_GLOBAL void k_column_sums(T* dst, const T* src, int64_t N, int OC, int64_t ld) {
  const int j = int(blockIdx.x * blockDim.x + threadIdx.x);
  if (j >= OC) return;
  T s = 0;
  for (int64_t r = 0; r < N; ++r) s += src[r * ld + j];
  dst[j] += s;
}

template <typename T>
STRATA_DEVICE T sigmoid(T x) {
  return T(1) / (T(1) + g_exp(-x));
}

// h[n, j] = silu(gate) * up with gateup[n] = [gate(F) | up(F)].
template <typename T>
STRATA_GLOBAL void k_swiglu(T* h, const T* gateup, int64_t N, int F) {
  STRATA_GRID_LOOP(i, N * F) {
    const int64_t n = i / F;
    const int j = int(i % F);
    const T g = gateup[n * 2 * F + j], u = gateup[n * 2 * F + F + j];
    h[i] = g * sigmoid(g) * u;
  }
}

// d silu(g)/dg = s (1 + g (1 - s)), s = sigmoid(g).
template <typename T>
STRATA_GLOBAL void k_swiglu_backward(T* dgateup, const T* dh, const T* gateup, int64_t N, int F) {
  STRATA_GRID_LOOP(i, N * F) {
    const int64_t n = i / F;
    const int j = int(i % F);
    const T g = gateup[n * 2 * F + j], u = gateup[n * 2 * F + F + j];
    const T s = sigmoid(g), d = dh[i];
    dgateup[n * 2 * F + F + j] = d * g * s;
    dgateup[n * 2 * F + j] = d * u * s * (T(1) + g * (T(1) - s));
  }
}

// torch.optim.AdamW; c1, c2 = 1 / bias corrections, decay = 1 - lr * wd.
template <typename T>
STRATA_GLOBAL void k_adamw(T* p, const T* g, T* m, T* v, int64_t n, T lr, T b1, T b2, T eps,
                           T decay, T c1, T c2) {
  STRATA_GRID_LOOP(i, n) {
    const T gi = g[i];
    const T mi = b1 * m[i] + (T(1) - b1) * gi;
    const T vi = b2 * v[i] + (T(1) - b2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    p[i] = p[i] * decay - lr * (mi * c1) / (g_sqrt(vi * c2) + eps);
  }
}

template <typename T>
STRATA_GLOBAL void k_scale(T* x, int64_t n, T s) {
  STRATA_GRID_LOOP(i, n) x[i] *= s;
}

// Deterministic two-stage sums in double: each block writes the sum of its
// grid-stride share to partial[blockIdx.x] (threads' shares added in a fixed
// tree); k_finish_sum adds the partials in order into *acc.
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

// dst[i] = bfloat16 bits of src[i] (cuBLASLt's bf16 operands). Templates,
// like every kernel here, so a header can define them in several units.
template <typename F = float>
STRATA_GLOBAL void k_to_bf16(uint16_t* dst, const F* src, int64_t n) {
  STRATA_GRID_LOOP(i, n) dst[i] = bf16_bits(src[i]);
}

// dst[i] = src[i] rounded to bfloat16, kept as float (SIMT GEMM stand-in).
template <typename F = float>
STRATA_GLOBAL void k_round_bf16(F* dst, const F* src, int64_t n) {
  STRATA_GRID_LOOP(i, n) {
    const uint32_t bits = uint32_t(bf16_bits(src[i])) << 16;
    memcpy(dst + i, &bits, 4);
  }
}

// A rows x cols block of a matrix with leading dimension ld, copied compact.
template <typename T>
STRATA_GLOBAL void k_pack(T* dst, const T* src, int64_t rows, int64_t cols, int64_t ld) {
  STRATA_GRID_LOOP(i, rows * cols) dst[i] = src[(i / cols) * ld + i % cols];
}

// da += k (a - b), db -= k (a - b) with k = dloss * 2 / n (MSE backward).
template <typename T>
STRATA_GLOBAL void k_mse_backward(T* da, T* db, const T* a, const T* b, int64_t n, T k) {
  STRATA_GRID_LOOP(i, n) {
    const T g = k * (a[i] - b[i]);
    if (da) da[i] += g;
    if (db) db[i] -= g;
  }
}

// C[r, c] *= beta over an M x N block with leading dimension ld (a GEMM with
// K = 0); beta 0 writes zeros (no NaN from uninitialised memory).
template <typename T>
STRATA_GLOBAL void k_scale_matrix(T* C, int64_t M, int64_t N, int64_t ld, T beta) {
  STRATA_GRID_LOOP(i, M * N) {
    T* c = C + (i / N) * ld + i % N;
    *c = beta == T(0) ? T(0) : *c * beta;
  }
}

}  // namespace STRATA_TARGET_NS
}  // namespace strata::cuda
