#include "backends/cpu/gemm.h"

#include <atomic>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <tuple>
#include <vector>

#include "backends/cpu/gemm_library.h"
#include "backends/cpu/rows_kernel.h"
#include "backends/cpu/workspace.h"
#include "core/arena.h"
#include "core/cpu.h"
#include "core/error.h"
#include "core/log.h"

namespace strata::cpu {
namespace {

MatmulPrecision g_precision = MatmulPrecision::FP32;
std::atomic<int> g_bf16_path{-1};  // forced by set_bf16_path; -1: the detected one

// Copies the rows x cols block of a row-major matrix with leading dimension
// ld into a compact bf16 matrix.
void pack_bf16(uint16_t* dst, const float* src, int64_t rows, int64_t cols, int64_t ld) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) float_to_bf16_serial(dst + r * cols, src + r * ld, cols);
}
// The same into a compact fp32 matrix of bf16-rounded values.
void pack_bf16_as_float(float* dst, const float* src, int64_t rows, int64_t cols, int64_t ld) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) round_to_bf16_serial(dst + r * cols, src + r * ld, cols);
}

// Native when the CPU has a bf16 dot product and the GEMM library multiplies
// bf16 on it.
Bf16Path detect_bf16_path() {
  if (!cpu_features().native_bf16() || !library::native_bf16()) return Bf16Path::Emulated;
  return Bf16Path::Native;
}

}  // namespace

void set_matmul_precision(MatmulPrecision p) {
  g_precision = p;
  static std::atomic<bool> warned{false};
  if (p == MatmulPrecision::BF16 && bf16_path() == Bf16Path::Emulated && !warned.exchange(true))
    log::warn("bf16 matmuls: this CPU has no native bf16 matmul (", cpu_features().model,
              "; needs AVX512-BF16 or AMX-BF16), so they are emulated with the same numerics "
              "(operands rounded to bf16, fp32 GEMM): a little slower than fp32. Precision "
              "\"auto\" picks fp32 here.");
}
MatmulPrecision matmul_precision() { return g_precision; }

bool native_bf16_available() {
  static const bool native = detect_bf16_path() == Bf16Path::Native;
  return native;
}

Bf16Path bf16_path() {
  const int forced = g_bf16_path.load();
  if (forced >= 0) return Bf16Path(forced);
  return native_bf16_available() ? Bf16Path::Native : Bf16Path::Emulated;
}

void set_bf16_path(Bf16Path p) {
  STRATA_CHECK(p == Bf16Path::Emulated || native_bf16_available(),
               "bf16 matmul: no native bf16 path on ", cpu_summary());
  g_bf16_path.store(int(p));
}

std::string gemm_library() { return library::name(); }

std::string matmul_path(MatmulPrecision p) {
  using library::Path;
  if (p == MatmulPrecision::FP32) return library::describe(Path::FP32);
  return library::describe(bf16_path() == Bf16Path::Native ? Path::BF16Native : Path::BF16Emulated);
}

float bf16_to_float(uint16_t x) {
  const uint32_t bits = uint32_t(x) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

void float_to_bf16(uint16_t* dst, const float* src, int64_t n) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; i += 4096)
    float_to_bf16_serial(dst + i, src + i, std::min<int64_t>(4096, n - i));
}

namespace {

// Rows of A at most, for the few-row kernel below: decoding (1 row per
// sequence) and verifying up to 7 drafts. Above that oneDNN's blocked kernels
// are faster (a 12-token prefill of a 12L-768 model ran at 383 tokens/s on
// the few-row kernel, 585 on oneDNN).
constexpr int64_t kFewRows = 8;

// C = alpha A B^T + beta C for M <= kFewRows rows on the kernels for this CPU
// (rows_kernel.h). An element's value depends on its row of A and of B only:
// decoding one row and verifying d + 1 drafted rows give bit-identical logits
// (so greedy self-speculative decoding equals plain decoding exactly), and a
// tensor-parallel shard of N computes its columns as the whole matrix would.
template <typename TB>  // float, or bf16 bits
void few_rows(int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
              const TB* B, int64_t ldb, float beta, float* C, int64_t ldc) {
#ifdef STRATA_AVX512_VARIANT
  if (cpu_level() == CpuLevel::Avx512)
    return avx512::few_rows_gemm_nt(M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
#endif
  few_rows_gemm_nt(M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

// bf16 copies of weights, keyed by the operand as the GEMM sees it (pointer,
// rows, columns, leading dimension), compact. 64-byte aligned (a vector load
// of 32 bf16 then never splits a cache line when K is a multiple of 32).
struct AlignedFree {
  void operator()(uint16_t* p) const { aligned_free(p); }
};
using WeightCopies = std::map<std::tuple<const float*, int64_t, int64_t, int64_t>,
                              std::unique_ptr<uint16_t[], AlignedFree>>;
// The buffer of the copy of (B, rows, cols, ld), allocated on first use;
// `fresh` says whether it was.
uint16_t* copy_buffer(WeightCopies& copies, const float* B, int64_t rows, int64_t cols, int64_t ld,
                      bool* fresh) {
  auto& copy = copies[{B, rows, cols, ld}];
  *fresh = !copy;
  if (!copy)
    copy.reset(
        static_cast<uint16_t*>(aligned_alloc_zeroed(size_t(rows * cols) * sizeof(uint16_t))));
  return copy.get();
}
const uint16_t* weight_copy(WeightCopies& copies, const float* B, int64_t rows, int64_t cols,
                            int64_t ld) {
  bool fresh;
  uint16_t* copy = copy_buffer(copies, B, rows, cols, ld, &fresh);
  if (fresh) pack_bf16(copy, B, rows, cols, ld);
  return copy;
}

// Frozen weights (generation): the few-row GEMMs' B.
struct FrozenWeights {
  bool on = false;
  WeightCopies copies;
};
FrozenWeights& frozen() {
  static FrozenWeights f;
  return f;
}

const uint16_t* frozen_bf16_copy(const float* B, int64_t N, int64_t K, int64_t ldb) {
  return weight_copy(frozen().copies, B, N, K, ldb);
}

// A training step's held weights: the library GEMMs' operands in [base, base + n).
// The copies' buffers outlive a hold: the next step's hold over the same
// weights refills them on first use (fresh pages of ~2 bytes a parameter each
// step cost as much as the conversions they save), until another range is held.
struct HeldWeights {
  const float* base = nullptr;  // null: nothing held
  const float* kept = nullptr;  // the range the buffers belong to
  int64_t n = 0;
  WeightCopies copies;
  std::set<const uint16_t*> filled;  // the buffers filled in this hold
  int64_t elements = 0;
};
HeldWeights& held() {
  static HeldWeights h;
  return h;
}

}  // namespace

void set_frozen_weights(bool on) {
  frozen().on = on;
  frozen().copies.clear();
}

void set_held_weights(const float* base, int64_t n) {
  HeldWeights& h = held();
  h.filled.clear();
  h.elements = 0;
  h.base = n > 0 ? base : nullptr;
  if (h.base && (h.base != h.kept || n != h.n)) {  // other weights: other buffers
    h.copies.clear();
    h.kept = h.base;
    h.n = n;
  }
}
int64_t held_weight_copy_elements() { return held().elements; }

namespace {

// bf16 operands packed for the library GEMMs: two slots per element type
// (bf16 bits for the native path, bf16-rounded floats for the emulated one),
// grown on first use. Inside a Bf16OperandReuse scope a slot remembers which
// operand it holds, so a second GEMM on the same operand (a linear layer's
// backward reads dout twice, the head's gradient chunk feeds two GEMMs) skips
// the conversion.
struct Operand {
  const float* ptr;
  int64_t rows, cols, ld;
  bool operator==(const Operand& o) const {
    return ptr == o.ptr && rows == o.rows && cols == o.cols && ld == o.ld;
  }
};
template <typename E>
struct PackSlots {
  Buffer<E> buf[2];
  Operand held[2] = {};
  bool valid[2] = {false, false};
};
template <typename E>
PackSlots<E>& pack_slots() {
  static PackSlots<E> slots;
  return slots;
}
int g_reuse_depth = 0;

template <typename E>
const E* packed_operand(const Operand& op, int slot, const E* keep) {
  PackSlots<E>& s = pack_slots<E>();
  if (g_reuse_depth > 0)
    for (int i = 0; i < 2; ++i)
      if (s.valid[i] && s.held[i] == op) return s.buf[i].data();
  // The preferred slot, unless it holds the other operand of this GEMM.
  if (keep && s.buf[slot].data() == keep) slot = 1 - slot;
  s.buf[slot].reserve(size_t(op.rows * op.cols));
  E* dst = s.buf[slot].data();
  if constexpr (sizeof(E) == 2)
    pack_bf16(dst, op.ptr, op.rows, op.cols, op.ld);
  else
    pack_bf16_as_float(dst, op.ptr, op.rows, op.cols, op.ld);
  s.held[slot] = op;
  s.valid[slot] = g_reuse_depth > 0;
  return dst;
}

// A native operand: the held weight's copy where op lies in the held weights
// (std::less: pointers into different arrays compare safely), else packed.
const uint16_t* native_operand(const Operand& op, int slot, const uint16_t* keep) {
  HeldWeights& h = held();
  const std::less<const float*> before;
  const float* end = op.ptr + (op.rows - 1) * op.ld + op.cols;
  if (h.base && !before(op.ptr, h.base) && !before(h.base + h.n, end)) {
    bool fresh;
    uint16_t* copy = copy_buffer(h.copies, op.ptr, op.rows, op.cols, op.ld, &fresh);
    if (h.filled.insert(copy).second) {  // first use in this hold
      pack_bf16(copy, op.ptr, op.rows, op.cols, op.ld);
      h.elements += op.rows * op.cols;
    }
    return copy;
  }
  return packed_operand<uint16_t>(op, slot, keep);
}

// The native bf16 GEMM (K > 0): a bf16 operand read as stored, an fp32 one
// through its held copy or packed (compact, rounded to bf16) into its slot,
// unless a reuse scope has it packed already. op(A) is M x K: stored as M x K
// (ta false) or K x M (ta true); same for B.
void native_gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha,
                 ops::ActIn<float> A, int64_t lda, ops::ActIn<float> B, int64_t ldb, float beta,
                 float* C, int64_t ldc) {
  const Operand a_op{A.native() ? A.as<const float>() : nullptr, ta ? K : M, ta ? M : K, lda};
  const Operand b_op{B.native() ? B.as<const float>() : nullptr, tb ? N : K, tb ? K : N, ldb};
  const auto bits = [](ops::ActIn<float> x) {
    return reinterpret_cast<const uint16_t*>(x.as<const ops::bf16>());
  };
  const uint16_t* a = A.is_bf16() ? bits(A) : native_operand(a_op, 0, nullptr);
  const uint16_t* b = B.is_bf16() ? bits(B) : native_operand(b_op, 1, a);
  library::bf16_matmul(ta, tb, M, N, K, alpha, a, A.is_bf16() ? lda : a_op.cols, b,
                       B.is_bf16() ? ldb : b_op.cols, beta, C, ldc);
}

// A GEMM's output may be another GEMM's input: drop packed copies it overlaps.
void invalidate_packed(const float* C, int64_t M, int64_t N, int64_t ldc) {
  if (g_reuse_depth == 0) return;
  const float* c0 = C;
  const float* c1 = C + (M - 1) * ldc + N;
  auto drop = [&](auto& s) {
    for (int i = 0; i < 2; ++i) {
      const Operand& o = s.held[i];
      const float* o1 = o.ptr + (o.rows - 1) * o.ld + o.cols;
      if (s.valid[i] && o.ptr < c1 && c0 < o1) s.valid[i] = false;
    }
  };
  drop(pack_slots<uint16_t>());
  drop(pack_slots<float>());
}

}  // namespace

Bf16OperandReuse::Bf16OperandReuse() { ++g_reuse_depth; }
Bf16OperandReuse::~Bf16OperandReuse() {
  if (--g_reuse_depth > 0) return;
  for (bool& v : pack_slots<uint16_t>().valid) v = false;
  for (bool& v : pack_slots<float>().valid) v = false;
}

template <>
void gemm<float>(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                 int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  if (M == 0 || N == 0) return;
  if (!ta && tb && M <= kFewRows && K > 0) {
    if (g_precision == MatmulPrecision::FP32) {
      few_rows(M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
      return;
    }
    if (frozen().on) {  // bf16: the product of the bf16-rounded operands, fp32 sums
      struct Tag {};
      const int64_t Kp = pair_layout_size(K);
      float* a = workspace<float, 0, Tag>(size_t(M * (Kp + K)));
      float* rounded = a + M * Kp;
      for (int64_t m = 0; m < M; ++m) {
        round_to_bf16_serial(rounded + m * K, A + m * lda, K);
        bf16_pair_layout(a + m * Kp, rounded + m * K, K);
      }
      few_rows(M, N, K, alpha, a, Kp, frozen_bf16_copy(B, N, K, ldb), K, beta, C, ldc);
      return;
    }
  }
  if (g_precision == MatmulPrecision::BF16 && K > 0) {
    // op(A) is M x K: stored as M x K (ta false) or K x M (ta true); same for B.
    // Each operand is packed (compact, rounded to bf16) into its slot, unless
    // a reuse scope has it packed already.
    if (bf16_path() == Bf16Path::Native) {
      native_gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    } else {
      const Operand a_op{A, ta ? K : M, ta ? M : K, lda}, b_op{B, tb ? N : K, tb ? K : N, ldb};
      const float* a = packed_operand<float>(a_op, 0, nullptr);
      const float* b = packed_operand<float>(b_op, 1, a);
      library::sgemm(ta, tb, M, N, K, alpha, a, ta ? M : K, b, tb ? K : N, beta, C, ldc);
    }
    invalidate_packed(C, M, N, ldc);
    return;
  }
  library::sgemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

bool gemm_reads_bf16() {
  return g_precision == MatmulPrecision::BF16 && bf16_path() == Bf16Path::Native;
}

void gemm_act(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, ops::ActIn<float> A,
              int64_t lda, ops::ActIn<float> B, int64_t ldb, float beta, float* C, int64_t ldc) {
  if (A.native() && B.native())
    return gemm<float>(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  STRATA_CHECK(gemm_reads_bf16(), "a GEMM was handed a bf16 operand but runs ",
               matmul_path(g_precision), " (the caller stages bf16 activations there)");
  if (M == 0 || N == 0) return;
  if (K == 0) {  // C = beta C
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) C[i * ldc + j] = beta == 0.0f ? 0.0f : beta * C[i * ldc + j];
    return;
  }
  native_gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  invalidate_packed(C, M, N, ldc);
}

template <>
void gemm<double>(bool ta, bool tb, int64_t M, int64_t N, int64_t K, double alpha, const double* A,
                  int64_t lda, const double* B, int64_t ldb, double beta, double* C, int64_t ldc) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < M; ++i) {
    double* c = C + i * ldc;
    for (int64_t j = 0; j < N; ++j) c[j] = beta == 0.0 ? 0.0 : beta * c[j];
    for (int64_t k = 0; k < K; ++k) {
      const double a = alpha * (ta ? A[k * lda + i] : A[i * lda + k]);
      if (tb) {
        for (int64_t j = 0; j < N; ++j) c[j] += a * B[j * ldb + k];
      } else {
        const double* b = B + k * ldb;
        for (int64_t j = 0; j < N; ++j) c[j] += a * b[j];
      }
    }
  }
}

void gemm_act(bool ta, bool tb, int64_t M, int64_t N, int64_t K, double alpha, ops::ActIn<double> A,
              int64_t lda, ops::ActIn<double> B, int64_t ldb, double beta, double* C, int64_t ldc) {
  gemm<double>(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void few_rows_nt(int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
                 const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  few_rows(M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

}  // namespace strata::cpu
