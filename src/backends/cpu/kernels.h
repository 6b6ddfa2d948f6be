// CPU kernels: one forward and one hand-written backward per op, one file per
// op family (backends/cpu/<op>.cpp), behind ops::Backend (cpu_backend.cpp).
// The contract (shapes, layouts, accumulation rules, null gradients) is
// ops/ops.def; what is CPU-specific (determinism, threads, scratch) is said
// in each kernel's file. Every kernel is a template instantiated for float
// (the fast path) and double (used by the finite-difference gradient checks
// in tests/). Threads: OpenMP, one pool.
#pragma once

#include <cstdint>

#include "backends/cpu/storage.h"
#include "ops/types.h"

namespace strata::cpu {

// The contract's types (ops/types.h).
using ops::AdamWStep;
using ops::clip_coefficient;
using ops::kIgnoreIndex;
using ops::LinearLd;

// One template per op of ops/ops.def, of the same name and parameters
// (cpu_backend.cpp forwards each Backend call to it); the contract is there.
#define STRATA_DEFAULT(...) = __VA_ARGS__
#define STRATA_OP(role, name, ret, params, args) \
  template <typename T>                          \
  ret name params;
#include "ops/ops.def"
#undef STRATA_OP
#undef STRATA_DEFAULT

// Explicit instantiations of an op's kernel for float and double (its
// declaration above gives the signature).
#define STRATA_CPU_INSTANTIATE(op)        \
  template decltype(op<float>) op<float>; \
  template decltype(op<double>) op<double>;

// rope.cpp: the tables of the default frequencies, inv_freq[i] = theta^(-2i/D)
// (rope_table above takes the D/2 frequencies, e.g. Llama-3 scaled, see
// model/config.h).
template <typename T>
void rope_table(T* cos, T* sin, int max_pos, int D, double theta);

// head_ce.cpp: rows per chunk of the fused head (0: automatic, about 64 MiB
// of logits). For tests that compare chunked and unchunked results, and for
// tuning.
void set_head_ce_chunk_rows(int64_t rows);

}  // namespace strata::cpu
