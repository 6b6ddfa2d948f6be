// The keys of a training recipe, and the trainable-mask patterns (trainer.h).
#include <fnmatch.h>

#include <cstdio>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/text.h"
#include "model/plan.h"
#include "train/trainer.h"

namespace strata {

// ------------------------------------------------------------------ schema

const std::vector<KeySpec>& train_recipe_schema() {
  using K = KeyType;
  static const std::vector<KeySpec> schema = {
      {"run.name", K::String, "\"run\"", "name of the run (used for the default run.dir)"},
      {"run.dir", K::String, "\"\"", "output directory (default: runs/<run.name>)"},
      {"run.seed", K::Int, "1234", "seed for initialisation, data order and sampling"},
      {"run.threads", K::Int, "0", "OpenMP threads (0: OMP_NUM_THREADS or all cores)"},
      {"run.device", K::String, "\"auto\"",
       "cpu, cuda (one GPU per process, NCCL between them), simt (the CUDA kernels on the CPU "
       "SIMT executor: tests) or auto (cuda where a GPU is visible, else cpu)"},

      {"model.init_from", K::String, "\"\"",
       "start from this checkpoint's config, weights, tokenizer"},
      {"model.config", K::String, "\"\"", "Hugging Face config.json with the model shape"},
      {"model.plan", K::String, "\"\"",
       "layer plan, e.g. \"standard*3,ladder*3\" or \"standard*4,spd*28;spd_degree=8\" "
       "(default: all standard; with init_from: run the checkpoint's weights under this plan); "
       "the kinds and their options:\n" +
           kinds_help()},
      {"model.attention", K::String, "\"strata\"",
       "attention kernels on device cuda (and simt): strata (strata's own; tensor-core flash "
       "kernels with bf16 matmuls) or cudnn (cuDNN's fused attention: device cuda, "
       "training.precision bf16, a build with cuDNN)"},
      {"model.vocab_size", K::Int, "", "vocabulary size (default: the tokenizer's)"},
      {"model.hidden_size", K::Int, "", "model width"},
      {"model.intermediate_size", K::Int, "", "MLP width"},
      {"model.num_hidden_layers", K::Int, "", "decoder layers"},
      {"model.num_attention_heads", K::Int, "", "query heads"},
      {"model.num_key_value_heads", K::Int, "", "key/value heads (default: query heads)"},
      {"model.head_dim", K::Int, "", "head dimension (default: hidden_size / heads)"},
      {"model.max_position_embeddings", K::Int, "", "context length (default: training.seq_len)"},
      {"model.rope_theta", K::Float, "", "RoPE base (default 10000)"},
      {"model.rms_norm_eps", K::Float, "", "RMSNorm epsilon (default 1e-5)"},
      {"model.tie_word_embeddings", K::Bool, "", "share embedding and LM head (default false)"},
      {"model.attention_bias", K::Bool, "", "biases on q, k, v, o projections (default false)"},
      {"model.initializer_range", K::Float, "", "std of the normal init (default 0.02)"},

      {"data.kind", K::String, "\"pretrain\"", "pretrain (token shards) or sft (JSONL)"},
      {"data.tokenizer", K::String, "\"\"", "sentencepiece .model (default: model.init_from's)"},
      {"data.dataset", K::String, "\"\"", "prepared token-shard directory (pretrain)"},
      {"data.inputs", K::StringList, "[]",
       "text/JSONL files (globs) to prepare into data.dataset when it does not exist"},
      {"data.doc_split", K::String, "\"paragraph\"",
       "documents in text inputs: paragraph, line, file"},
      {"data.val_fraction", K::Float, "0.01", "share of documents held out for validation"},
      {"data.sft_train", K::String, "\"\"", "SFT training JSONL"},
      {"data.sft_val", K::String, "\"\"", "SFT validation JSONL (optional)"},
      {"data.packing", K::Bool, "false", "SFT: pack examples into full rows"},
      {"data.chat_template", K::String, "\"\"",
       "SFT: a model's Hugging Face chat template (its directory, tokenizer_config.json or a "
       ".jinja file); \"\": strata's own"},

      {"training.steps", K::Int, "", "optimizer steps", true},
      {"training.micro_batch_size", K::Int, "8",
       "sequences per forward/backward on each data-parallel rank"},
      {"training.seq_len", K::Int, "256", "tokens per sequence"},
      {"training.grad_accum_steps", K::Int, "1", "micro-batches per optimizer step"},
      {"training.grad_clip", K::Float, "1.0", "max global gradient norm (0: off)"},
      {"training.precision", K::String, "\"fp32\"",
       "fp32; bf16 (matmuls in bfloat16, fp32 accumulation and master weights; emulated "
       "with the same numerics where the CPU has no native bf16); or auto (bf16 where "
       "native, else fp32)"},
      {"training.activations", K::String, "\"auto\"",
       "storage of the activations and their gradients: fp32; bf16 (half the activation "
       "memory; norm statistics, losses and tensor-parallel sums stay fp32); or auto (bf16 "
       "on device cuda when the matmuls are bf16, else fp32)"},
      {"training.recompute", K::String, "\"none\"",
       "activation recomputation: none (keep every activation), selective (drop the norm and "
       "SwiGLU outputs, recomputed elementwise before each backward) or full (keep the residual "
       "streams and norm statistics; each module's backward runs its forward again); the "
       "gradients are the same, bit for bit"},
      {"training.trainable", K::StringList, "[]",
       "only these tensors train (globs or layers:A-B; empty: all)"},
      {"training.freeze", K::StringList, "[]", "these tensors do not train (globs or layers:A-B)"},

      {"optimizer.name", K::String, "\"adamw\"", "optimizer (adamw)"},
      {"optimizer.lr", K::Float, "3e-4", "peak learning rate"},
      {"optimizer.beta1", K::Float, "0.9", "AdamW beta1"},
      {"optimizer.beta2", K::Float, "0.95", "AdamW beta2"},
      {"optimizer.eps", K::Float, "1e-8", "AdamW epsilon"},
      {"optimizer.weight_decay", K::Float, "0.1", "decoupled weight decay (matrices only)"},
      {"optimizer.load_state", K::Bool, "false",
       "with model.init_from: continue from its optimizer moments"},

      {"lr_scheduler.kind", K::String, "\"cosine\"", "cosine, linear or constant"},
      {"lr_scheduler.warmup_steps", K::Int, "0", "linear warm-up steps"},
      {"lr_scheduler.min_lr", K::Float, "0.0", "learning rate at the end of the decay"},
      {"lr_scheduler.decay_steps", K::Int, "0", "end of the decay (0: training.steps)"},

      {"parallelism.tp", K::Int, "1",
       "tensor-parallel degree (Megatron-LM layout; divides heads, KV heads, MLP, vocab)"},
      {"parallelism.dp", K::Int, "0", "data-parallel degree (0: world size / tp)"},
      {"parallelism.zero", K::Int, "0",
       "ZeRO stage over the data-parallel ranks: 1 shards the AdamW moments, 2 also the "
       "gradients (reduce-scattered), 3 also the weights (gathered per unit)"},
      {"parallelism.pp", K::Int, "1",
       "pipeline stages: world = dp x pp x tp (tp fastest, then pp); each rank holds whole "
       "units of consecutive layers"},
      {"parallelism.schedule", K::String, "\"1f1b\"",
       "pipeline schedule: gpipe, 1f1b or interleaved (micro-batches: "
       "training.grad_accum_steps)"},
      {"parallelism.virtual_stages", K::Int, "1",
       "interleaved: stages per pipeline rank (2 or more; grad_accum_steps a multiple of pp)"},
      {"parallelism.stages", K::String, "\"\"",
       "layers per pipeline stage, e.g. \"5,5,6\" (pp x virtual_stages entries; empty: "
       "balanced by the cost model)"},
      {"parallelism.collective_timeout", K::Float, "1800",
       "seconds a rank may wait in one collective before the job ends naming the missing rank "
       "(0: no limit; long by default: rank 0 alone prepares data, saves and evaluates)"},

      {"layerskip.p_max", K::Float, "0.0",
       "LayerSkip layer dropout: rate of the last layer at the end of training (0: off)"},
      {"layerskip.layer_scale", K::String, "\"exp\"",
       "per-layer dropout scale D(l): exp (2^(l/(L-1)) - 1), linear or const"},
      {"layerskip.time_scale", K::String, "\"none\"",
       "dropout scale over training S(t): none (1; continual/fine-tuning) or exp (from scratch)"},
      {"layerskip.e_scale", K::Float, "0.0",
       "early-exit loss scale in [0, 1] (0: only the last layer's loss)"},
      {"layerskip.curriculum", K::String, "\"none\"",
       "which exits get a loss each step: none (all), rotational or gradual"},
      {"layerskip.rotation", K::Int, "0", "R of the rotational curriculum: every R-th layer"},
      {"layerskip.always_last", K::Bool, "true", "the last layer's loss is always on"},
      {"layerskip.e_formula", K::String, "\"paper\"",
       "exit scale e(l): paper (as printed: e(0) = 0) or cumulative (every enabled exit weighted)"},

      {"checkpoint.interval", K::Int, "0", "save every N steps (0: only at the end)"},
      {"checkpoint.keep", K::Int, "2", "keep the newest K checkpoints (0: all)"},
      {"checkpoint.resume", K::String, "\"auto\"",
       "auto (newest in run.dir), none, or a checkpoint path"},
      {"checkpoint.resume_changes", K::StringList, "[]",
       "keys allowed to differ from the resumed checkpoint's recipe although they change what "
       "its data position means (data.dataset, training.seq_len, ...)"},
      {"checkpoint.final", K::Bool, "true", "save a checkpoint when training ends"},

      {"eval.interval", K::Int, "0", "validate every N steps (0: only at the end)"},
      {"eval.batches", K::Int, "8", "validation micro-batches per evaluation"},
      {"eval.tasks", K::StringList, "[]",
       "benchmark tasks (eval/*.toml) to run at each evaluation, e.g. [\"arc_easy\", \"piqa\"]"},
      {"eval.task_limit", K::Int, "0", "first N examples of each task (0: all)"},
      {"eval.task_shots", K::Int, "-1", "few-shot examples (-1: each task's default)"},
      {"eval.task_dir", K::String, "\"eval\"", "directory of the task definitions"},
      {"eval.allow_code_execution", K::Bool, "false",
       "let eval.tasks run model-written code (HumanEval) in the sandbox"},

      {"log.interval", K::Int, "10", "print and record metrics every N steps"},
      {"log.tensorboard", K::Bool, "true",
       "also write every metrics.jsonl number and the resolved recipe as TensorBoard event files "
       "in <run.dir>/tb/"},
      {"log.sample_prompt", K::String, "\"\"", "at the end, print a sample continuing this prompt"},
      {"log.sample_tokens", K::Int, "64", "tokens in the final sample"},
      {"log.sample_temperature", K::Float, "0.8", "temperature of the final sample (0: greedy)"},
  };
  return schema;
}

// ------------------------------------------------------------ trainable mask

std::vector<bool> resolve_trainable(const std::vector<std::string>& names,
                                    const std::vector<std::string>& trainable,
                                    const std::vector<std::string>& freeze,
                                    const std::string& where) {
  auto matches = [&](const std::string& pattern, const std::string& name) {
    if (pattern.rfind("layers:", 0) == 0) {
      const std::string range = pattern.substr(7);
      int a = -1, b = -1;
      char tail = 0;
      const int got = std::sscanf(range.c_str(), "%d-%d%c", &a, &b, &tail);
      if (got == 1) b = a;
      STRATA_CHECK((got == 1 || got == 2) && a >= 0 && b >= a, where, ": bad layer range '",
                   one_line(pattern), "' (use layers:A-B or layers:N)");
      int layer = -1;
      if (std::sscanf(name.c_str(), "model.layers.%d.", &layer) != 1) return false;
      return layer >= a && layer <= b;
    }
    return fnmatch(pattern.c_str(), name.c_str(), 0) == 0;
  };
  auto apply = [&](const std::vector<std::string>& patterns, std::vector<bool>& mask, bool value) {
    for (const auto& p : patterns) {
      bool any = false;
      for (size_t i = 0; i < names.size(); ++i)
        if (matches(p, names[i])) {
          mask[i] = value;
          any = true;
        }
      STRATA_CHECK(any, where, ": pattern '", one_line(p), "' matches no tensor (names look like ",
                   "'model.layers.0.mlp.up_proj.weight', 'lm_head.weight')");
    }
  };
  std::vector<bool> mask(names.size(), trainable.empty());
  apply(trainable, mask, true);
  apply(freeze, mask, false);
  return mask;
}

}  // namespace strata
