// The process grid (see grid.h): MPI start-up and the dp x tp communicators.
//
// Rank r of a world of dp * tp processes sits at tp_rank = r % tp and
// dp_rank = r / tp: a tensor-parallel group is tp consecutive world ranks
// (mpirun and srun place consecutive ranks on the same node by default, so a
// tp group stays inside a node), and a data-parallel group is the ranks with
// the same tp_rank, one from each tp group.
#include "parallel/grid.h"

#if defined(STRATA_HAVE_NCCL)
#include "parallel/comm_nccl.h"
#endif

#if defined(STRATA_HAVE_MPI)
#include <mpi.h>
#endif

#include <cstdio>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <unistd.h>

#include "core/error.h"
#include "parallel/hang_watch.h"
#include "parallel/ordered_comm.h"
#if defined(STRATA_HAVE_MPI)
#include "parallel/comm_mpi.h"
#endif

namespace strata {
namespace {

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return v && *v ? v : nullptr;
}

long env_long(const char* name) {
  const char* v = env(name);
  return v ? std::strtol(v, nullptr, 10) : 0;
}

// The number of tasks of the current srun job step, 0 outside one. A batch
// script itself also sees SLURM_PROCID=0 and SLURM_NTASKS, but only the
// processes srun starts are in a step (SLURM_STEP_ID).
long slurm_step_tasks() {
  if (!env("SLURM_PROCID") || !env("SLURM_STEP_ID")) return 0;
  if (env("SLURM_STEP_NUM_TASKS")) return env_long("SLURM_STEP_NUM_TASKS");
  return env_long("SLURM_NTASKS");
}

#if defined(STRATA_HAVE_MPI)
// Error handler of the world (inherited by its duplicates and splits): one
// line naming the rank and MPI's reason, then the whole job ends.
void mpi_failure(MPI_Comm* comm, int* code, ...) {
  char reason[MPI_MAX_ERROR_STRING] = {};
  int len = 0;
  MPI_Error_string(*code, reason, &len);
  int rank = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  std::fprintf(stderr,
               "strata: error: MPI failed on rank %d: %s (a process of the job may have died or "
               "lost its network; see the other ranks' output); ending the job\n",
               rank, reason);
  std::fflush(stderr);
  MPI_Abort(comm ? *comm : MPI_COMM_WORLD, 1);
}

// Each world rank's node, gathered over MPI_COMM_WORLD (collective).
std::vector<std::string> gather_node_names(int world_size) {
  std::vector<std::string> out;
#if defined(STRATA_HAVE_MPI)
  constexpr int kName = 256;
  char mine[kName] = {};
  const char* given = env("STRATA_NODE_NAME");
  if (given && *given)
    std::snprintf(mine, sizeof mine, "%s", given);
  else if (gethostname(mine, kName - 1) != 0)
    std::snprintf(mine, sizeof mine, "unknown");
  std::vector<char> all(size_t(world_size) * kName);
  MPI_Allgather(mine, kName, MPI_CHAR, all.data(), kName, MPI_CHAR, MPI_COMM_WORLD);
  for (int r = 0; r < world_size; ++r)
    out.emplace_back(all.data() + size_t(r) * kName,
                     strnlen(all.data() + size_t(r) * kName, kName));
#else
  (void)world_size;
#endif
  return out;
}

void init_mpi_once() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  STRATA_CHECK(!finalized, "MPI was already finalised in this process");
  if (!initialized) {
    // Collectives come from the main thread only (OpenMP workers never call
    // MPI); the hang watchdog's thread talks on a communicator of its own
    // (hang_watch.h), which needs MPI_THREAD_MULTIPLE. Without it (an MPI
    // built without thread support) the watchdog stays off.
    int provided = 0;
    MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided);
  }
  // A failing MPI call ends the whole job instead of returning an error code
  // some rank might ignore while the others wait; it says so in one line
  // (MPI_ERRORS_ARE_FATAL would print MPI's own multi-line report).
  MPI_Errhandler handler;
  MPI_Comm_create_errhandler(mpi_failure, &handler);
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, handler);
}
#else
// A build without MPI runs one process: a launch by mpirun or srun is refused
// instead of running the same job alone in every process.
[[noreturn]] void init_mpi_once() {
  fail(
      "this build has no MPI (libopenmpi-dev): it runs one process only; start it without "
      "mpirun / srun, or rebuild with MPI");
}
#endif

}  // namespace

bool launched_by_mpi() {
  if (env("OMPI_COMM_WORLD_SIZE") || env("PMIX_RANK") || env("PMI_RANK")) return true;
  return slurm_step_tasks() > 1;  // srun --mpi=pmix sets PMIX_RANK as well
}

ProcessGrid make_grid(int tp, int dp_request, int pp) {
  STRATA_CHECK(tp >= 1, "tensor-parallel degree tp=", tp, ": must be at least 1");
  STRATA_CHECK(pp >= 1, "pipeline-parallel degree pp=", pp, ": must be at least 1");
  STRATA_CHECK(dp_request >= 0, "data-parallel degree dp=", dp_request,
               ": must be positive (or 0: world / tp)");
  const bool mpi = launched_by_mpi();
  int world_rank = 0, world_size = 1;
  if (mpi) {
    init_mpi_once();
#if defined(STRATA_HAVE_MPI)
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world_size);
    const long tasks = slurm_step_tasks();
    STRATA_CHECK(tasks <= 1 || world_size == tasks, "srun started ", tasks,
                 " tasks but MPI sees a world of ", world_size,
                 " process(es): launch with srun --mpi=pmix");
#endif
  }
  STRATA_CHECK(world_size % tp == 0, "tensor-parallel degree tp=", tp,
               " does not divide the world of ", world_size, " process(es) (world = dp x ",
               pp > 1 ? "pp x " : "", "tp)");
  STRATA_CHECK(world_size % (tp * pp) == 0, "pipeline-parallel degree pp=", pp, " with tp=", tp,
               " does not divide the world of ", world_size, " process(es) (world = dp x pp x tp)");
  const int dp = world_size / (tp * pp);
  STRATA_CHECK(dp_request == 0 || dp_request == dp, "data-parallel degree dp=", dp_request,
               " does not match the world of ", world_size, " process(es) with tp=", tp,
               pp > 1 ? cat(" and pp=", pp) : std::string(), " (dp x ", pp > 1 ? "pp x " : "",
               "tp must equal the world: dp=", dp, ")");

  ProcessGrid g;
  g.world_rank = world_rank;
  g.world_size = world_size;
  g.tp = tp;
  g.dp = dp;
  g.pp = pp;
  g.tp_rank = world_rank % tp;
  g.pp_rank = (world_rank / tp) % pp;
  g.dp_rank = world_rank / (tp * pp);
  if (!mpi) {
    g.world = make_local_comm();
    g.tp_comm = make_local_comm();
    g.dp_comm = make_local_comm();
    g.pp_comm = make_local_comm();
    return g;
  }
#if defined(STRATA_HAVE_MPI)
  auto world = make_mpi_world_comm();
  // The splits are collective over the world, made in the same order by all.
  auto tp_comm = world->split(/*color=*/world_rank / tp, /*key=*/g.tp_rank);
  auto dp_comm = world->split(/*color=*/g.pp_rank * tp + g.tp_rank, /*key=*/g.dp_rank);
  tp_comm->set_label("tp group");
  dp_comm->set_label("dp group");
  if (pp > 1) {
    auto pp_comm = world->split(/*color=*/g.dp_rank * tp + g.tp_rank, /*key=*/g.pp_rank);
    pp_comm->set_label("pipeline");
    g.pp_comm = std::move(pp_comm);
  } else {
    g.pp_comm = make_local_comm();
  }
  g.tp_comm = std::move(tp_comm);
  g.dp_comm = std::move(dp_comm);
  g.world = std::move(world);
  g.node_of_rank = gather_node_names(world_size);
  start_hang_watch();  // collective too: a communicator of its own
#endif
  return g;
}

Placement describe_placement(const std::vector<std::string>& node_of_rank, int tp, int pp) {
  Placement p;
  const int world = int(node_of_rank.size());
  if (world == 0 || tp < 1 || pp < 1 || world % (tp * pp)) return p;
  std::map<std::string, int> ranks_on;
  for (const std::string& n : node_of_rank) ++ranks_on[n];
  p.nodes = int(ranks_on.size());
  for (const auto& [n, k] : ranks_on) p.most_ranks_on_a_node = std::max(p.most_ranks_on_a_node, k);
  // The nodes a group of world ranks spans.
  auto span = [&](auto rank_of, int members) {
    std::set<std::string> on;
    for (int i = 0; i < members; ++i) on.insert(node_of_rank[size_t(rank_of(i))]);
    return int(on.size());
  };
  const int dp = world / (tp * pp);
  for (int first = 0; first < world; first += tp)
    if (span([&](int i) { return first + i; }, tp) > 1) p.split_tp_groups.push_back(first);
  for (int d = 0; d < dp; ++d)
    for (int t = 0; t < tp; ++t)
      p.pipeline_nodes =
          std::max(p.pipeline_nodes, span([&](int s) { return (d * pp + s) * tp + t; }, pp));
  for (int s = 0; s < pp; ++s)
    for (int t = 0; t < tp; ++t)
      p.dp_nodes = std::max(p.dp_nodes, span([&](int d) { return (d * pp + s) * tp + t; }, dp));
  auto nodes = [](int n) { return n == 1 ? std::string("one node") : cat("up to ", n, " nodes"); };
  if (p.nodes > 1)
    p.summary = cat("placement: ", world, " ranks on ", p.nodes, " nodes (at most ",
                    p.most_ranks_on_a_node, " on one); tensor-parallel groups ",
                    p.split_tp_groups.empty()
                        ? "inside a node"
                        : cat(p.split_tp_groups.size(), " of ", world / tp, " across nodes"),
                    pp > 1 ? cat("; a pipeline spans ", nodes(p.pipeline_nodes)) : "",
                    dp > 1 ? cat("; a data-parallel group ", nodes(p.dp_nodes)) : "");
  if (!p.split_tp_groups.empty()) {
    const int f = p.split_tp_groups.front();
    std::set<std::string> on(node_of_rank.begin() + f, node_of_rank.begin() + f + tp);
    std::string names;
    for (const std::string& n : on) names += cat(names.empty() ? "" : ", ", n);
    p.warning = cat("placement: ", p.split_tp_groups.size(), " of ", world / tp,
                    " tensor-parallel groups span nodes (the first, world ranks ", f, "-",
                    f + tp - 1, ", is on ", names,
                    "): their all-reduces of every layer cross the network; start a multiple "
                    "of tp = ",
                    tp,
                    " ranks on each node, in rank order (srun --ntasks-per-node, "
                    "mpirun --map-by ppr:N:node)");
  }
  return p;
}

void use_device_comms(ProcessGrid& g, const std::string& device, void* compute_stream, int gpu) {
  if (g.world_size == 1) return;
  const std::pair<std::unique_ptr<Communicator>*, const char*> groups[] = {{&g.tp_comm, "tp"},
                                                                           {&g.dp_comm, "dp"}};
  if (device == "simt") {
    // MPI on the SIMT device's (host) buffers, issued through the order rule
    // the NCCL communicators follow (collective_order.h), so CPU runs check it.
    for (auto [c, label] : groups)
      if ((*c)->size() > 1 && !dynamic_cast<OrderedComm*>(c->get()))
        *c = std::make_unique<OrderedComm>(std::move(*c), label);
    return;
  }
  if (device != "cuda") return;
#if defined(STRATA_HAVE_NCCL)
  for (auto [c, label] : groups) {
    if ((*c)->size() == 1) continue;
    if (auto* n = dynamic_cast<NcclComm*>(c->get())) {  // already on NCCL: a new stream
      n->set_compute_stream(static_cast<cudaStream_t>(compute_stream));
      continue;
    }
    auto nccl = std::make_unique<NcclComm>(std::move(*c), gpu, label);
    nccl->set_compute_stream(static_cast<cudaStream_t>(compute_stream));
    *c = std::move(nccl);
  }
#else
  (void)compute_stream;
  (void)gpu;
  fail(
      "device cuda on several processes needs NCCL, and this build has none (install NCCL next "
      "to the CUDA toolkit and reconfigure)");
#endif
}

void finalize_mpi() {
#if defined(STRATA_HAVE_MPI)
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) {
    stop_hang_watch();
    MPI_Finalize();
  }
#endif
}

void abort_job_if_distributed(const std::string& why) {
#if !defined(STRATA_HAVE_MPI)
  (void)why;  // one process: the caller reports the error
#else
  int initialized = 0, finalized = 0, size = 1, rank = 0;
  MPI_Initialized(&initialized);
  if (!initialized) return;
  MPI_Finalized(&finalized);
  if (finalized) return;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size <= 1) return;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  std::fprintf(stderr, "strata: error: %s (rank %d)\n", why.c_str(), rank);
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, 1);
#endif
}

}  // namespace strata
