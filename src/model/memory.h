// Memory estimates made before anything large is allocated: the bytes a
// process will need for weights, gradients, optimizer moments, activations,
// KV caches and logits, from the model's configuration and the command's
// shapes alone, and the one-line refusal when they cannot fit.
//
//   MemoryUse u;  u.gradients = true;  u.optimizer_share = 1;  u.batch = 8;  u.seq = 512;
//   const MemoryEstimate e = estimate_memory(cfg, plan, u);
//   check_memory(e, ops::memory_available(device), ranks_on_node, "training", hint);
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/memory_info.h"
#include "core/threads.h"  // processes_on_this_node
#include "model/config.h"
#include "model/params.h"
#include "model/plan.h"

namespace strata {

// Activation recomputation (training.recompute; Model::set_recompute):
//   None       every activation of every layer is kept for backward;
//   Selective  the norm outputs (both modules) and the SwiGLU output are
//              dropped and recomputed from the kept input stream, rstd and
//              gate|up just before each module's backward (elementwise work);
//              q|k|v after RoPE, the attention output, its LSE and gate|up
//              stay (SPD blocks keep everything);
//   Full       one layer's module activations are kept at a time (every
//              layer keeps its norm statistics) and each module's forward runs
//              again before its backward.
// Every mode runs the same kernels on the same inputs: gradients are bitwise equal.
enum class Recompute { None, Selective, Full };
// "none", "selective", "full"; parse returns false for anything else.
const char* recompute_name(Recompute r);
bool parse_recompute(const std::string& s, Recompute* out);

// What a command will hold at its peak on one process (one tensor-parallel
// rank; the figures are tensor-parallel rank 0's, the one holding the most).
struct MemoryUse {
  int tp = 1;
  bool gradients = false;      // the gradient arena (training)
  double optimizer_share = 0;  // the fraction of this rank's weights with AdamW moments
  // ZeRO-2/3 over `dp` data-parallel ranks (model/zero.h): the gradients and
  // moments (and at 3 the weights) are this rank's shards, plus the store's
  // buffers; optimizer_share is then ignored (the moment shards cover every
  // element). zero 0 or 1: the arenas above (ZeRO-1 is optimizer_share 1/dp).
  int dp = 1, zero = 0;
  // The model's activation arena for a [batch, seq] forward/backward (0: none):
  // what Model::forward_backward and Model::forward_hidden carve.
  int batch = 0, seq = 0;
  Recompute recompute = Recompute::None;  // the activation arena under training.recompute
  bool bf16_activations = false;          // its storage (training.activations)
  // The bf16 copies of the weights (bf16 matmuls on cuda or simt:
  // GemmEngine::hold, freeze; on a CPU with native bf16 matmuls:
  // cpu::set_held_weights; none under ZeRO-3).
  bool bf16_weight_copies = false;
  int64_t logits_rows = 0;       // rows of full-vocabulary logits kept at once (eval, generate)
  int kv_batch = 0, kv_len = 0;  // KV caches of the inference engine
  bool kv_bf16 = false;          // stored in bf16 (--kv-cache bf16)
  int64_t other_bytes = 0;       // anything else large (a conversion's read buffer)
  // Pipeline parallelism: what this rank's stages hold (params.h; the
  // default is the whole model), and how many micro-batches' activations it
  // keeps at once, each in a slot carved for one of its stages (the largest).
  StageHolding stage;
  int activation_slots = 1;
  // The program itself (its code, libraries and their buffers), as measured
  // before the model is built (process_rss_bytes()); 0: not counted.
  int64_t runtime_bytes = 0;
  std::string other_name = "buffers";
};

struct MemoryEstimate {
  struct Part {
    std::string name;
    int64_t bytes = 0;
  };
  std::vector<Part>
      parts;  // runtime, weights, gradients, AdamW moments, activations, workspace, ...
  int64_t parameters = 0;  // this rank's parameter elements
  int64_t total() const;
  int64_t bytes_of(const std::string& name) const;  // 0 when absent
  // "weights 1.2 MB + gradients 1.2 MB + ... = 3.0 MB" (parts of 0 bytes left out).
  std::string to_string() const;
};

// Analytic, exact up to the arenas' 64-byte alignment for weights, gradients,
// moments and activations (tests compare it with the allocations); never
// allocates in proportion to the model, so an absurd configuration costs
// nothing to estimate.
MemoryEstimate estimate_memory(const LlamaConfig& cfg, const LayerPlan& plan, const MemoryUse& u);

// Refuses, in one line, work whose estimate times `processes` (processes on
// this machine sharing `limit`) exceeds it: "<what> needs about X per process
// (...) but Y is available (source); <hint>". With STRATA_MEMORY_CHECK=0 it
// warns instead. Unknown limits (bytes < 0) pass.
void check_memory(const MemoryEstimate& need, const MemoryLimit& limit, int processes,
                  const std::string& what, const std::string& hint);

}  // namespace strata
