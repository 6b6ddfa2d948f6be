// The process grid: world = dp x pp x tp with tp fastest-varying (a
// tensor-parallel group is `tp` consecutive ranks, inside a node), then pp
// (pipeline stages, across nodes), then dp: world rank = (dp_rank * pp +
// pp_rank) * tp + tp_rank. Rank and size come from MPI
// when the process was started by mpirun / srun; otherwise the grid is one
// process.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "parallel/comm.h"

namespace strata {

struct ProcessGrid {
  int world_rank = 0, world_size = 1;
  int dp = 1, tp = 1, pp = 1;
  int dp_rank = 0, tp_rank = 0, pp_rank = 0;
  // pp_comm: the ranks of one pipeline (same dp and tp rank), ranked by stage;
  // MPI even on GPUs for now (point-to-point; NCCL's send/receive to come).
  std::unique_ptr<Communicator> world, dp_comm, tp_comm, pp_comm;
  // Each world rank's node (its host name, or STRATA_NODE_NAME where set),
  // gathered by make_grid; one entry for a single process.
  std::vector<std::string> node_of_rank;
  bool is_root() const { return world_rank == 0; }
};

// Where a grid's groups sit, from each world rank's node: how many nodes and
// ranks per node, which tensor-parallel groups span nodes (their per-layer
// all-reduces then cross the network), and how many nodes a pipeline and a
// data-parallel group each span at most. `summary` is one line for the log
// ("" on one node); `warning` one line when a tp group spans nodes ("" else).
struct Placement {
  int nodes = 1;
  int most_ranks_on_a_node = 1;
  std::vector<int> split_tp_groups;  // the first world rank of each tp group that spans nodes
  int pipeline_nodes = 1, dp_nodes = 1;
  std::string summary, warning;
};
Placement describe_placement(const std::vector<std::string>& node_of_rank, int tp, int pp);

// True when this process was launched by mpirun or srun (environment
// variables of Open MPI / PMIx / Slurm), i.e. MPI must be initialised.
// Checked: OMPI_COMM_WORLD_SIZE, PMIX_RANK, PMI_RANK, or SLURM_PROCID in an
// srun step (SLURM_STEP_ID) of more than one task. A batch script itself (one
// process, SLURM_NTASKS > 1 but no step) is not "launched by MPI".
bool launched_by_mpi();

// Initialises MPI (once) when launched_by_mpi(), and builds the grid for the
// requested tp degree; dp = world / tp (dp_request > 0 must match). Throws
// strata::Error naming the mismatch (tp not dividing the world, ...).
// Collective: every rank calls it with the same arguments (it splits the
// world), and the checks give every rank the same error. MPI is initialised
// with MPI_THREAD_MULTIPLE (the collectives come from the main thread only;
// the other MPI thread is the hang watchdog's, started here: hang_watch.h) and
// a fatal one-line error handler on the world. Under MPI the three communicators are
// MpiComm ("mpi"; world is a duplicate of MPI_COMM_WORLD); alone, LocalComm.
// `pp` pipeline stages (default 1) split the world too: dp = world / (tp pp).
ProcessGrid make_grid(int tp, int dp_request, int pp = 1);

// Puts the tensor- and data-parallel groups of more than one process on the
// device's communicator: for device "cuda", NCCL (NcclComm over the MPI
// group, one rank per GPU), its collectives ordered after the work queued on
// `compute_stream` (the backend's stream; Ladder's overlap waits on the
// stream, not the host); for "simt", MPI wrapped in OrderedComm, which
// follows and checks the same collective order rule (collective_order.h).
// Other devices keep MPI. Throws when "cuda" runs on
// several processes in a build without NCCL. Called again on a grid already
// on NCCL, it only sets the stream.
// `gpu`: this process's CUDA device (NCCL binds to it).
void use_device_comms(ProcessGrid& g, const std::string& device, void* compute_stream, int gpu = 0);

// Finalises MPI if it was initialised (call at exit, after the grid's
// communicators are gone or no longer used). Only on a path every rank takes:
// MPI_Finalize synchronises with the other processes, so a rank that fails on
// its own must end the job with Communicator::abort instead.
void finalize_mpi();

// In a job of more than one process, prints `why` with this rank and calls
// MPI_Abort so every rank ends now instead of waiting in a collective for a
// rank that has failed. Does nothing alone (the caller reports the error).
void abort_job_if_distributed(const std::string& why);

}  // namespace strata
