#include "cli/model_args.h"

#include "cli/commands.h"

#include <cstdio>

#include "core/error.h"
#include "core/file.h"
#include "core/log.h"
#include "core/text.h"
#include "parallel/delayed_comm.h"

namespace strata::cli {

void add_model_options(Args& args) {
  args.option("checkpoint", "FILE", "checkpoint (.h5) to load")
      .option("plan", "TEXT",
              "run the weights under this layer plan instead of the checkpoint's (e.g. "
              "\"standard*4,skip,standard\"; see strata train --help-recipe, model.plan)",
              "")
      .option("tp", "N",
              "tensor-parallel degree: under mpirun with N processes, each holds 1/N of every "
              "split tensor",
              "1")
      .option("device", "NAME",
              "cpu, cuda (one GPU per process; NCCL under mpirun), simt (the CUDA kernels on the "
              "CPU SIMT executor) or auto (cuda where a GPU is visible, else cpu)",
              "auto");
}

namespace {

// --device, and the link of the tp group (a modelled latency for benchmarks).
LoadOptions load_options(const Args& args, LoadedModel& m, const std::string& command,
                         int link_delay_us) {
  LoadOptions o;
  o.plan = args.get("plan");
  try {
    o.device = ops::resolve_device(args.get("device"));
    use_device_comms(m.grid, o.device, nullptr, ops::local_cuda_device());
  } catch (const Error& e) {
    fail(cat(command, " --device: ", e.what()));
  }
  o.tp = m.grid.tp > 1 ? m.grid.tp_comm.get() : nullptr;
  STRATA_CHECK(link_delay_us >= 0, command, ": --link-delay-us must be at least 0, got ",
               link_delay_us);
  STRATA_CHECK(link_delay_us == 0 || o.tp, command,
               ": --link-delay-us models the link of a tensor-parallel group: it needs --tp > 1");
  if (o.tp && link_delay_us > 0) {
    m.link = std::make_unique<DelayedComm>(*o.tp, std::chrono::microseconds(link_delay_us));
    o.tp = m.link.get();
  }
  return o;
}

// Before the weights are allocated: the estimate against what the machine
// has, refused in one line when it does not fit. `checking` is set while it
// runs (a refusal there is not --plan's fault).
std::function<void(const CheckpointInfo&)> memory_check(const Args& args,
                                                        const std::string& command,
                                                        const MemoryPlan& memory,
                                                        const std::string& device, int tp,
                                                        bool& checking) {
  return [&args, command, memory, device, tp, &checking](const CheckpointInfo& info) {
    MemoryUse use = memory.use ? memory.use(info) : MemoryUse{};
    use.tp = tp;
    const MemoryEstimate need = estimate_memory(info.config, info.plan, use);
    const MemoryLimit have = ops::memory_available(device);
    checking = true;
    check_memory(need, have, processes_on_this_node(), cat(command, ": ", args.get("checkpoint")),
                 memory.hint.empty() ? cat("use a machine with more memory",
                                           tp == 1 ? " or split the model with --tp" : "")
                                     : memory.hint);
    // Printed where it matters: a large model, or a tight machine.
    if (need.total() >= int64_t(1e9) || (have.bytes >= 0 && need.total() * 2 > have.bytes))
      log::info("memory: ", need.to_string(), " per process",
                have.bytes >= 0
                    ? cat("; ", human_bytes(double(have.bytes)), " available (", have.source, ")")
                    : std::string());
    checking = false;
  };
}

}  // namespace

LoadedModel load_model_from_args(const Args& args, const std::string& command, bool benchmark,
                                 int link_delay_us, const MemoryPlan& memory, int tp_override) {
  STRATA_USAGE_CHECK(args.has("checkpoint"), command, ": --checkpoint is required");
  const int tp = tp_override > 0 ? tp_override : args.get_int("tp");
  STRATA_CHECK(tp >= 1, command, ": --tp must be at least 1, got ", tp);
  LoadedModel m;
  m.grid = make_grid(tp, 0);
  STRATA_CHECK(m.grid.dp == 1, command, " runs one model over a tensor-parallel group: start it ",
               "with as many processes as --tp (mpirun -np ", tp, " ... --tp ", tp,
               "); this job has ", m.grid.world_size, " process(es) for --tp ", tp);
  if (!m.root()) {  // one rank speaks for the group
    log::set_level(log::Level::Error);
    STRATA_CHECK(std::freopen("/dev/null", "w", stdout), command, ": cannot silence rank ",
                 m.grid.world_rank, "'s output");
  }
  LoadOptions o = load_options(args, m, command, link_delay_us);
  bool in_memory_check = false;
  o.before_alloc = memory_check(args, command, memory, o.device, tp, in_memory_check);
  try {
    m.model = load_model(args.get("checkpoint"), &m.info, o);
  } catch (const Error& e) {
    if (o.plan.empty() || in_memory_check) throw;
    fail(cat(command, " --plan: ", e.what()));
  }
  use_device_comms(m.grid, o.device, m.model->backend().stream(), ops::local_cuda_device());
  if (o.device != "cpu") log::info(ops::device_choice(args.get("device")));
  if (!benchmark) m.info.plan.check_not_benchmark_only(command);
  if (!o.plan.empty())
    log::info("plan: ", m.info.plan.to_string(), " (", args.get("checkpoint"), " was saved with ",
              m.info.saved_plan, ")");
  return m;
}

Tokenizer checkpoint_tokenizer(const LoadedModel& lm, const std::string& checkpoint) {
  STRATA_CHECK(!lm.info.tokenizer.empty(), checkpoint, ": has no tokenizer");
  return Tokenizer::from_bytes(lm.info.tokenizer, checkpoint);
}

void add_scan_options(Args& args, const std::string& svg_help) {
  args.option("text", "FILE", "text to score (a held-out sample of the model's domain)")
      .option("limit-bytes", "N", "score only the first N bytes of the text (0: all)", "0")
      .option("window", "W", "tokens per window (default: the model's context + 1)", "0")
      .option("batch-size", "N", "sequences per forward pass", "8")
      .option("out", "FILE", "write the results as JSON", "")
      .option("svg", "FILE", svg_help, "");
  add_threads_option(args).flag("quiet", "no progress lines");
}

ScanInput load_scan_input(const Args& args, const std::string& command) {
  STRATA_USAGE_CHECK(args.has("text"), command, ": --text is required");
  STRATA_CHECK(!args.has("plan"), command, ": --plan is not taken: the scan sets the plans");
  const int limit = args.get_int("limit-bytes");
  STRATA_CHECK(limit >= 0, command, ": --limit-bytes must be at least 0");
  apply_threads(args.get_int("threads"));
  for (const char* key : {"out", "svg"})  // checked before the first pass, not after the scan
    if (!args.get(key).empty()) {
      check_output_file(args.get(key), cat(command, ": --", key));
      check_output_not_input(args.get(key), {args.get("checkpoint"), args.get("text")},
                             cat(command, ": --", key));
    }
  ScanInput in;
  in.text_name = args.get("text");
  in.text = read_text_sample(in.text_name, limit);
  in.window = args.get_int("window");
  in.batch = args.get_int("batch-size");
  in.lm = load_model_from_args(args, command);
  const CheckpointInfo& info = in.lm.info;
  STRATA_CHECK(info.plan.plain(), command, ": ", args.get("checkpoint"), " runs plan '",
               info.plan.to_string(), "'; the scan needs a standard model");
  in.tok = std::make_unique<Tokenizer>(checkpoint_tokenizer(in.lm, args.get("checkpoint")));
  in.layers = in.lm.model->config().num_hidden_layers;
  return in;
}

PerplexityResult ScanInput::perplexity(const std::string& plan) {
  lm.model->set_plan(LayerPlan::parse(plan, layers));
  return text_perplexity(*lm.model, *tok, text, text_name, window, 0, batch, {layers}, false)
      .back();
}

void write_scan_outputs(const Args& args, nlohmann::json out, SvgChart chart, double standard_ppl,
                        const ScanInput& in) {
  if (!in.lm.root()) return;
  if (!args.get("out").empty()) {
    out["checkpoint"] = args.get("checkpoint");
    out["text"] = in.text_name;
    write_file_atomic(args.get("out"), out.dump(2) + "\n");
  }
  if (!args.get("svg").empty()) {
    chart.y_label = "perplexity";
    chart.log_y = true;
    chart.hlines.push_back({"standard", standard_ppl});
    write_file_atomic(args.get("svg"), render_svg(chart));
  }
}

ops::Dtype kv_cache_option(const Args& args, const std::string& command) {
  const std::string v = canonical_dtype(args.get("kv-cache"));
  if (v == "fp32") return ops::Dtype::F32;
  STRATA_USAGE_CHECK(v == "bf16", command, ": --kv-cache '", args.get("kv-cache"),
                     "' is not fp32 or bf16");
  return ops::Dtype::BF16;
}

}  // namespace strata::cli
