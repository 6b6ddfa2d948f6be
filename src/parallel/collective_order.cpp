// CollectiveOrder (collective_order.h): the one-queue rule and its trace.
#include "parallel/collective_order.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>

#include "core/error.h"

namespace strata {
namespace {

// This process's rank for the trace file's name: the launcher's variables
// (the communicators may not exist yet), else the process id.
std::string rank_suffix() {
  for (const char* v : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"})
    if (const char* r = std::getenv(v); r && *r) return r;
  return cat("pid", getpid());
}

}  // namespace

CollectiveOrder& CollectiveOrder::process() {
  static CollectiveOrder order;
  return order;
}

int CollectiveOrder::join(const std::string& label) {
  labels_.push_back(label);
  return int(labels_.size()) - 1;
}

int64_t CollectiveOrder::issue(int comm, const char* op, uintptr_t queue, bool async) {
  STRATA_CHECK(comm >= 0 && comm < int(labels_.size()), "collective order: unknown communicator ",
               comm);
  if (queue != kHostQueue)
    for (const InFlight& f : in_flight_)
      STRATA_CHECK(f.comm == comm || f.queue == queue || f.queue == kHostQueue,
                   "collective order: ", labels_[size_t(comm)], " ", op,
                   " issued on another queue than the in-flight ", labels_[size_t(f.comm)], " ",
                   f.op,
                   ": two communicators' collectives could run at once and wait on each other "
                   "(NCCL deadlock); every device communicator must use the process's one "
                   "communication queue");
  record(comm, op, queue);
  const int64_t ticket = next_ticket_++;
  if (async) in_flight_.push_back(InFlight{ticket, comm, op, queue});
  return ticket;
}

void CollectiveOrder::complete(int64_t ticket) {
  auto it = std::find_if(in_flight_.begin(), in_flight_.end(),
                         [&](const InFlight& f) { return f.ticket == ticket; });
  if (it != in_flight_.end()) in_flight_.erase(it);
}

void CollectiveOrder::start_trace() {
  trace_.clear();
  tracing_ = true;
}

void CollectiveOrder::stop_trace() { tracing_ = false; }

void CollectiveOrder::record(int comm, const char* op, uintptr_t queue) {
  if (!file_checked_) {
    file_checked_ = true;
    if (const char* prefix = std::getenv("STRATA_COLLECTIVE_TRACE"); prefix && *prefix) {
      const std::string path = cat(prefix, ".", rank_suffix());
      file_ = std::fopen(path.c_str(), "w");
      STRATA_CHECK(file_, "STRATA_COLLECTIVE_TRACE: cannot write ", path);
    }
  }
  if (!tracing_ && !file_) return;
  std::string where = "host";
  if (queue != kHostQueue) {
    auto q = std::find(queues_.begin(), queues_.end(), queue);
    if (q == queues_.end()) q = queues_.insert(queues_.end(), queue);
    where = cat("q", q - queues_.begin());
  }
  const std::string line = cat(labels_[size_t(comm)], " ", op, " ", where);
  if (tracing_) trace_.push_back(line);
  if (file_) {
    std::fputs((line + "\n").c_str(), file_);
    std::fflush(file_);
  }
}

}  // namespace strata
