// Communicators and the process grid, run on every rank of an MPI job:
//
//   mpirun -np 4 --oversubscribe test_mpi_comm --tp 2
//   test_mpi_comm                      (one process: local communicators)
//
// Every rank runs the same tests in the same order (the collectives must
// match), asserts the exact results of each collective on the world, tp and dp
// communicators, and exits non-zero when any rank failed. Checks use EXPECT_*
// (not ASSERT_*) where a rank returning early would skip a collective the
// others wait in.
//
// Failure modes, for tests/mpi_kill_test.sh (under mpirun -np 2):
//   --fail-mode kill|kill_async|abort|mpi_error|busy|other --fail-rank R
// rank R kills itself with SIGKILL (or calls Communicator::abort) while the
// other ranks wait in an allreduce (blocking, or async + progress + wait);
// the job must end with a non-zero status instead of hanging.
//
// Options: --tp N (default: $STRATA_TEST_TP, else 1).
#include <gtest/gtest.h>
#include <mpi.h>
#include <unistd.h>

#include <chrono>
#include <climits>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "core/bf16.h"
#include "core/error.h"
#include "parallel/comm.h"
#include "parallel/comm_mpi.h"
#include "parallel/delayed_comm.h"
#include "parallel/grid.h"
#include "parallel/ordered_comm.h"
#include "parallel/pipeline.h"
#include "testing.h"

namespace strata {
namespace {

ProcessGrid* g_grid = nullptr;
int g_tp = 1;

// The communicators under test, with a label for failure messages.
struct Named {
  const char* name;
  Communicator* comm;
};
std::vector<Named> comms() {
  return {
      {"world", g_grid->world.get()}, {"tp", g_grid->tp_comm.get()}, {"dp", g_grid->dp_comm.get()}};
}

// sum over ranks r of (r + 1)
double rank_sum(int size) { return size * (size + 1) / 2.0; }

void check_allreduce(Communicator& c, const char* name, int64_t n) {
  std::vector<float> buf(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) buf[i] = static_cast<float>((c.rank() + 1) * (i % 7 + 1));
  c.allreduce_sum(buf.data(), n);
  int bad = 0;
  for (int64_t i = 0; i < n; ++i)
    if (buf[i] != static_cast<float>(rank_sum(c.size()) * (i % 7 + 1)) && bad++ < 3)
      ADD_FAILURE() << name << ": allreduce element " << i << " = " << buf[i];
  EXPECT_EQ(bad, 0) << name << ": wrong elements out of " << n;
}

void check_allreduce_async(Communicator& c, const char* name, int64_t largest = 33333) {
  const int64_t sizes[3] = {1, 1000, largest};
  std::vector<std::vector<float>> bufs(3);
  std::vector<int64_t> handles;
  for (int k = 0; k < 3; ++k) {
    bufs[k].resize(sizes[k]);
    for (int64_t i = 0; i < sizes[k]; ++i)
      bufs[k][i] = static_cast<float>((c.rank() + 1) * (k + 1) + (i % 5));
    handles.push_back(c.allreduce_sum_async(bufs[k].data(), sizes[k]));
  }
  EXPECT_LT(handles[0], handles[1]);
  EXPECT_LT(handles[1], handles[2]);
  // Drive the library between "compute steps"; an MPI communicator must be
  // able to finish every operation from progress() alone.
  auto* mpi = dynamic_cast<MpiComm*>(&c);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  for (int it = 0; it < 5 || (mpi && mpi->outstanding() > 0); ++it) {
    c.progress();
    if (std::chrono::steady_clock::now() > deadline) break;
  }
  if (mpi) {
    EXPECT_EQ(mpi->outstanding(), 0) << name << ": progress() did not complete the ops";
  }
  for (int k : {2, 0, 1}) c.wait(handles[k]);
  c.wait(handles[1]);  // waiting twice is a no-op
  for (int k = 0; k < 3; ++k) {
    int bad = 0;
    for (int64_t i = 0; i < sizes[k]; ++i) {
      const float want = static_cast<float>(rank_sum(c.size()) * (k + 1) + c.size() * (i % 5));
      if (bufs[k][i] != want && bad++ < 3)
        ADD_FAILURE() << name << ": async buffer " << k << " element " << i << " = " << bufs[k][i]
                      << ", want " << want;
    }
    EXPECT_EQ(bad, 0) << name << ": async buffer " << k;
  }
  EXPECT_THROW(c.wait(handles[2] + 100), Error);
  EXPECT_THROW(c.wait(-1), Error);
  // A handle waited for without any progress() in between.
  std::vector<float> one(17, static_cast<float>(c.rank()));
  c.wait(c.allreduce_sum_async(one.data(), 17));
  EXPECT_EQ(one[16], static_cast<float>(rank_sum(c.size()) - c.size())) << name;
  c.wait(c.allreduce_sum_async(nullptr, 0));
}

void check_allgather(Communicator& c, const char* name, int64_t n) {
  std::vector<float> in(static_cast<size_t>(n)), out(static_cast<size_t>(n * c.size()), -1.f);
  for (int64_t j = 0; j < n; ++j) in[j] = static_cast<float>(c.rank() * 1000 + j);
  c.allgather(in.data(), out.data(), n);
  int bad = 0;
  for (int r = 0; r < c.size(); ++r)
    for (int64_t j = 0; j < n; ++j)
      if (out[r * n + j] != static_cast<float>(r * 1000 + j) && bad++ < 3)
        ADD_FAILURE() << name << ": allgather out[" << r << " * " << n << " + " << j
                      << "] = " << out[r * n + j];
  EXPECT_EQ(bad, 0) << name << ": allgather of " << n;
  // In place: this rank's part already sits in its slot of the output.
  std::vector<float> io(static_cast<size_t>(n * c.size()), -1.f);
  for (int64_t j = 0; j < n; ++j) io[c.rank() * n + j] = static_cast<float>(c.rank() * 1000 + j);
  c.allgather(io.data() + c.rank() * n, io.data(), n);
  EXPECT_EQ(io, out) << name << ": in-place allgather";
}

// allgather_async (two in flight, in place and not) and reduce_scatter_sum
// (sync and async): rank r's slot of the sum of every rank's input.
void check_sharded(Communicator& c, const char* name, int64_t n) {
  const int P = c.size();
  std::vector<float> in(static_cast<size_t>(n)), out(static_cast<size_t>(n * P), -1.f);
  for (int64_t j = 0; j < n; ++j) in[j] = static_cast<float>(c.rank() * 1000 + j);
  std::vector<float> io(static_cast<size_t>(n * P), -1.f);
  std::copy(in.begin(), in.end(), io.begin() + c.rank() * n);
  const int64_t h1 = c.allgather_async(in.data(), out.data(), n);
  const int64_t h2 = c.allgather_async(io.data() + c.rank() * n, io.data(), n);
  c.progress();
  c.wait(h2);
  c.wait(h1);
  int bad = 0;
  for (int r = 0; r < P; ++r)
    for (int64_t j = 0; j < n; ++j) {
      const float want = static_cast<float>(r * 1000 + j);
      if ((out[r * n + j] != want || io[r * n + j] != want) && bad++ < 3)
        ADD_FAILURE() << name << ": allgather_async slot " << r << " element " << j;
    }
  EXPECT_EQ(bad, 0) << name << ": allgather_async of " << n;
  // Rank q's input holds q + 1 + r + j in slot r: the sum over q in slot r is
  // P (P + 1) / 2 + P (r + j).
  std::vector<float> src(static_cast<size_t>(n * P));
  for (int r = 0; r < P; ++r)
    for (int64_t j = 0; j < n; ++j) src[r * n + j] = static_cast<float>(c.rank() + 1 + r + j);
  std::vector<float> a(static_cast<size_t>(n), -1.f), b(static_cast<size_t>(n), -1.f);
  c.reduce_scatter_sum(src.data(), a.data(), n);
  c.wait(c.reduce_scatter_sum_async(src.data(), b.data(), n));
  for (int64_t j = 0; j < n; ++j) {
    const float want = static_cast<float>(P * (P + 1) / 2 + P * (c.rank() + j));
    if ((a[j] != want || b[j] != want) && bad++ < 3)
      ADD_FAILURE() << name << ": reduce_scatter element " << j << " = " << a[j] << " / " << b[j]
                    << ", want " << want;
  }
  EXPECT_EQ(bad, 0) << name << ": reduce_scatter of " << n;
  c.wait(c.reduce_scatter_sum_async(nullptr, nullptr, 0));
  c.wait(c.allgather_async(nullptr, nullptr, 0));
}

void check_broadcast(Communicator& c, const char* name, int64_t n) {
  const int root = c.size() - 1;
  std::vector<float> buf(static_cast<size_t>(n), -1.f);
  if (c.rank() == root)
    for (int64_t i = 0; i < n; ++i) buf[i] = 0.5f * static_cast<float>(i) + root;
  c.broadcast(buf.data(), n, root);
  int bad = 0;
  for (int64_t i = 0; i < n; ++i)
    if (buf[i] != 0.5f * static_cast<float>(i) + root && bad++ < 3)
      ADD_FAILURE() << name << ": broadcast element " << i << " = " << buf[i];
  EXPECT_EQ(bad, 0) << name;
  EXPECT_THROW(c.broadcast(buf.data(), n, c.size()), Error);
}

std::string long_text(int seed, size_t n) {
  std::string s(n, '\0');
  for (size_t i = 0; i < s.size(); ++i) s[i] = static_cast<char>((i * 131 + seed * 7) % 256);
  return s;
}

void check_broadcast_bytes(Communicator& c, const char* name, size_t n = 3 * 1024 * 1024 + 17) {
  const int root = 1 % c.size();
  std::string s = c.rank() == root ? long_text(root, n) : std::string("not this");
  c.broadcast_bytes(s, root);
  EXPECT_TRUE(s == long_text(root, n)) << name << ": broadcast_bytes of " << s.size() << " bytes";
  std::string empty = c.rank() == 0 ? std::string() : std::string("xyz");
  c.broadcast_bytes(empty, 0);
  EXPECT_EQ(empty, "") << name;
  std::string recipe = c.rank() == 0 ? std::string("[training]\nsteps = 10\n") : std::string();
  c.broadcast_bytes(recipe, 0);
  EXPECT_EQ(recipe, "[training]\nsteps = 10\n") << name;
}

void check_scalars(Communicator& c, const char* name) {
  EXPECT_EQ(c.allreduce_sum(0.5 * (c.rank() + 1)), 0.5 * rank_sum(c.size())) << name;
  const int64_t big = int64_t{1} << 40;
  const int64_t want = big * static_cast<int64_t>(rank_sum(c.size())) +
                       static_cast<int64_t>(c.size()) * (c.size() - 1) / 2;
  EXPECT_EQ(c.allreduce_sum(big * (c.rank() + 1) + c.rank()), want) << name;
}

// ---------------------------------------------------------------------------
// The grid
// ---------------------------------------------------------------------------

TEST(Grid, RanksAndSizes) {
  const ProcessGrid& g = *g_grid;
  const bool mpi = launched_by_mpi();
  if (const char* n = std::getenv("OMPI_COMM_WORLD_SIZE")) {
    EXPECT_EQ(g.world_size, std::atoi(n));
  }
  if (const char* r = std::getenv("OMPI_COMM_WORLD_RANK")) {
    EXPECT_EQ(g.world_rank, std::atoi(r));
  }
  if (!mpi) {
    EXPECT_EQ(g.world_size, 1);
    EXPECT_EQ(g.world_rank, 0);
  }
  EXPECT_EQ(g.is_root(), g.world_rank == 0);
  EXPECT_EQ(g.tp, g_tp);
  EXPECT_EQ(g.dp * g.tp, g.world_size);
  EXPECT_EQ(g.tp_rank, g.world_rank % g.tp);
  EXPECT_EQ(g.dp_rank, g.world_rank / g.tp);
  EXPECT_EQ(g.world->size(), g.world_size);
  EXPECT_EQ(g.world->rank(), g.world_rank);
  EXPECT_EQ(g.tp_comm->size(), g.tp);
  EXPECT_EQ(g.tp_comm->rank(), g.tp_rank);
  EXPECT_EQ(g.dp_comm->size(), g.dp);
  EXPECT_EQ(g.dp_comm->rank(), g.dp_rank);
  for (auto [name, c] : comms()) EXPECT_EQ(c->name(), mpi ? "mpi" : "local") << name;
}

// Which world ranks are in my tp and dp groups, in group-rank order.
TEST(Grid, GroupMembership) {
  const ProcessGrid& g = *g_grid;
  const float me = static_cast<float>(g.world_rank);
  std::vector<float> tp_members(g.tp), dp_members(g.dp), world_members(g.world_size);
  g.tp_comm->allgather(&me, tp_members.data(), 1);
  g.dp_comm->allgather(&me, dp_members.data(), 1);
  g.world->allgather(&me, world_members.data(), 1);
  for (int t = 0; t < g.tp; ++t) EXPECT_EQ(tp_members[t], g.dp_rank * g.tp + t) << "tp slot " << t;
  for (int d = 0; d < g.dp; ++d) EXPECT_EQ(dp_members[d], d * g.tp + g.tp_rank) << "dp slot " << d;
  for (int r = 0; r < g.world_size; ++r) EXPECT_EQ(world_members[r], r);
  // Sums stay inside a group.
  const int64_t tp_sum = g.tp_comm->allreduce_sum(static_cast<int64_t>(g.world_rank));
  EXPECT_EQ(tp_sum, int64_t{g.dp_rank} * g.tp * g.tp + g.tp * (g.tp - 1) / 2);
  const int64_t dp_sum = g.dp_comm->allreduce_sum(static_cast<int64_t>(g.world_rank));
  EXPECT_EQ(dp_sum, int64_t{g.tp} * g.dp * (g.dp - 1) / 2 + int64_t{g.dp} * g.tp_rank);
}

TEST(Grid, RejectsBadDegrees) {
  const int w = g_grid->world_size;
  auto message = [](int tp, int dp) {
    try {
      make_grid(tp, dp);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message(0, 0).find("tp=0"), std::string::npos) << message(0, 0);
  const std::string not_dividing = message(w + 1, 0);
  EXPECT_NE(not_dividing.find(cat("tp=", w + 1, " does not divide the world of ", w)),
            std::string::npos)
      << not_dividing;
  EXPECT_EQ(not_dividing.find('\n'), std::string::npos);
  const std::string dp_mismatch = message(1, w + 1);
  EXPECT_NE(dp_mismatch.find(cat("dp=", w + 1)), std::string::npos) << dp_mismatch;
  EXPECT_NE(message(1, -1).find("dp=-1"), std::string::npos);
}

TEST(Grid, SecondGridAfterTheFirst) {
  // MPI is initialised once; a second grid (tp = 1, dp given explicitly)
  // builds its own communicators next to the first grid's.
  ProcessGrid g = make_grid(1, g_grid->world_size);
  EXPECT_EQ(g.dp, g_grid->world_size);
  EXPECT_EQ(g.dp_rank, g_grid->world_rank);
  EXPECT_EQ(g.dp_comm->size(), g_grid->world_size);
  EXPECT_EQ(g.tp_comm->size(), 1);
  EXPECT_EQ(g.world->allreduce_sum(int64_t{1}), g_grid->world_size);
  EXPECT_EQ(g.tp_comm->allreduce_sum(int64_t{1}), 1);
}

// Pipeline groups: for every (tp, pp) the world allows, world rank = (dp_rank
// * pp + pp_rank) * tp + tp_rank; the pipeline group holds one rank per stage
// (same dp and tp ranks), the dp group one per data-parallel replica of the
// same stage and tp slot; neighbouring stages exchange a message; pp that
// does not divide the world is one line.
TEST(Grid, PipelineGroups) {
  const int w = g_grid->world_size;
  for (int tp = 1; tp <= w; tp *= 2)
    for (int pp = 2; tp * pp <= w; pp *= 2) {
      SCOPED_TRACE(cat("tp=", tp, " pp=", pp));
      ProcessGrid g = make_grid(tp, 0, pp);
      ASSERT_EQ(g.dp * g.pp * g.tp, w);
      EXPECT_EQ(g.world_rank, (g.dp_rank * pp + g.pp_rank) * tp + g.tp_rank);
      const float me = static_cast<float>(g.world_rank);
      std::vector<float> pp_members(static_cast<size_t>(pp)), dp_members(static_cast<size_t>(g.dp)),
          tp_members(static_cast<size_t>(tp));
      g.pp_comm->allgather(&me, pp_members.data(), 1);
      g.dp_comm->allgather(&me, dp_members.data(), 1);
      g.tp_comm->allgather(&me, tp_members.data(), 1);
      for (int s = 0; s < pp; ++s)
        EXPECT_EQ(pp_members[size_t(s)], float((g.dp_rank * pp + s) * tp + g.tp_rank));
      for (int d = 0; d < g.dp; ++d)
        EXPECT_EQ(dp_members[size_t(d)], float((d * pp + g.pp_rank) * tp + g.tp_rank));
      for (int t = 0; t < tp; ++t)
        EXPECT_EQ(tp_members[size_t(t)], float((g.dp_rank * pp + g.pp_rank) * tp + t));
      float got = -1;  // stage s sends its world rank on to stage s + 1
      const int64_t h = g.pp_rank > 0 ? g.pp_comm->recv_async(&got, 1, g.pp_rank - 1) : -1;
      if (g.pp_rank + 1 < pp) g.pp_comm->send(&me, 1, g.pp_rank + 1);
      if (h >= 0) {
        g.pp_comm->wait(h);
        EXPECT_EQ(got, pp_members[size_t(g.pp_rank - 1)]);
      }
    }
  EXPECT_ERROR(make_grid(1, 0, w + 1), cat("pp=", w + 1, " with tp=1 does not divide the world"));
  EXPECT_ERROR(make_grid(1, 0, 0), "pp=0: must be at least 1");
  ProcessGrid one = make_grid(1, 0);
  EXPECT_EQ(one.pp, 1);
  EXPECT_EQ(one.pp_comm->size(), 1);
}

// ---------------------------------------------------------------------------
// The collectives, on the world, tp and dp communicators
// ---------------------------------------------------------------------------

TEST(Comm, AllreduceSync) {
  for (auto [name, c] : comms()) {
    check_allreduce(*c, name, 1);
    check_allreduce(*c, name, 100003);
    c->allreduce_sum(nullptr, 0);
  }
}

TEST(Comm, AllreduceAsyncWithProgress) {
  for (auto [name, c] : comms()) check_allreduce_async(*c, name);
}

// bf16 sums (tensor parallelism's wire for bf16 activations): every rank's
// value is a bf16; two ranks' sum is their exact sum rounded once (exactly
// what fp32 staging gives); more ranks round once per addition, within one
// bf16 step per addition of the exact sum. Blocking, asynchronous, chunked,
// and an empty one.
void check_bf16_sums(Communicator& c, const char* name) {
  ASSERT_TRUE(c.bf16_sums()) << name;
  const int64_t n = 1001;
  auto value = [](int r, int64_t i) {
    return bf16_widen_bits(bf16_round_bits(float(std::sin(0.37 * double(i) + r)) * 3.1f));
  };
  for (bool async : {false, true}) {
    std::vector<uint16_t> buf(static_cast<size_t>(n), 0);
    for (int64_t i = 0; i < n; ++i) buf[size_t(i)] = bf16_round_bits(value(c.rank(), i));
    if (async)
      c.wait(c.allreduce_sum_bf16_async(buf.data(), n));
    else
      c.allreduce_sum_bf16(buf.data(), n);
    int bad = 0;
    for (int64_t i = 0; i < n; ++i) {
      double exact = 0, mag = 0;
      for (int r = 0; r < c.size(); ++r) exact += value(r, i), mag += std::abs(value(r, i));
      const double got = bf16_widen_bits(buf[size_t(i)]);
      const bool ok = c.size() <= 2 ? buf[size_t(i)] == bf16_round_bits(float(exact))
                                    : std::abs(got - exact) <= (c.size() - 1) * mag / 128;
      if (!ok && bad++ < 3)
        ADD_FAILURE() << name << (async ? " async" : "") << ": bf16 sum " << i << " = " << got
                      << ", exact " << exact;
    }
    EXPECT_EQ(bad, 0) << name;
  }
  c.allreduce_sum_bf16(nullptr, 0);
  c.wait(c.allreduce_sum_bf16_async(nullptr, 0));
}

TEST(Comm, Bf16Sums) {
  for (auto [name, c] : comms()) check_bf16_sums(*c, name);
  // Counts over MPI's int split into several calls.
  const int64_t saved = MpiComm::max_chunk();
  MpiComm::set_max_chunk(100);
  for (auto [name, c] : comms()) check_bf16_sums(*c, name);
  MpiComm::set_max_chunk(saved);
}

TEST(Comm, AllgatherInRankOrder) {
  for (auto [name, c] : comms()) {
    check_allgather(*c, name, 1);
    check_allgather(*c, name, 4099);
  }
}

TEST(Comm, AllgatherAsyncAndReduceScatter) {
  for (auto [name, c] : comms()) {
    check_sharded(*c, name, 1);
    check_sharded(*c, name, 4099);
  }
}

TEST(Comm, Broadcast) {
  for (auto [name, c] : comms()) check_broadcast(*c, name, 5001);
}

TEST(Comm, BroadcastBytes) {
  for (auto [name, c] : comms()) check_broadcast_bytes(*c, name);
}

TEST(Comm, ScalarSums) {
  for (auto [name, c] : comms()) check_scalars(*c, name);
}

TEST(Comm, Barrier) {
  for (auto [name, c] : comms()) c->barrier();
}

// ---------------------------------------------------------------------------
// The collective order rule (collective_order.h) that NcclComm and the SIMT
// device's OrderedComm share
// ---------------------------------------------------------------------------

std::string queue_of(const std::string& line) { return line.substr(line.rfind(' ') + 1); }

// A collective of one communicator on another queue than an in-flight async
// one of another communicator could deadlock under NCCL: refused, naming both.
TEST(CollectiveOrder, AnotherQueueBesideAnInFlightCollectiveThrows) {
  CollectiveOrder& o = CollectiveOrder::process();
  const int a = o.join("test-a"), b = o.join("test-b");
  o.start_trace();
  const int64_t t = o.issue(a, "allreduce_sum_async", 7, true);
  o.blocking(b, "allreduce_sum", 7);  // the same queue: runs after it, fine
  o.blocking(a, "allgather", 8);      // its own communicator: fine
  try {
    o.issue(b, "allreduce_sum", 8, false);
    ADD_FAILURE() << "a second queue beside an in-flight collective was accepted";
  } catch (const Error& e) {
    const std::string msg = e.what();
    for (const char* part :
         {"test-b allreduce_sum", "in-flight test-a allreduce_sum_async", "deadlock"})
      EXPECT_NE(msg.find(part), std::string::npos) << msg;
  }
  o.blocking(b, "allreduce_sum_double", CollectiveOrder::kHostQueue);  // host: never conflicts
  o.complete(t);
  o.blocking(b, "allreduce_sum", 8);  // nothing in flight any more
  const std::vector<std::string> tr = o.trace();
  o.stop_trace();
  ASSERT_EQ(tr.size(), 5u);
  EXPECT_EQ(tr[0].rfind("test-a allreduce_sum_async q", 0), 0u) << tr[0];
  EXPECT_EQ(tr[1].rfind("test-b allreduce_sum q", 0), 0u) << tr[1];
  EXPECT_EQ(queue_of(tr[0]), queue_of(tr[1]));
  EXPECT_NE(queue_of(tr[2]), queue_of(tr[0]));
  EXPECT_EQ(tr[3], "test-b allreduce_sum_double host");
  EXPECT_EQ(queue_of(tr[4]), queue_of(tr[2]));
}

// The SIMT device's groups (use_device_comms "simt"): tp and dp wrapped in
// OrderedComm. The pattern of a training step (an async dp all-reduce of
// gradients in flight while the next layer's blocking tp all-reduce runs)
// passes the rule, and every rank traces the same sequence.
TEST(CollectiveOrder, SimtGroupsIssueOneSequenceOnEveryRank) {
  ProcessGrid g = make_grid(g_tp, 0);
  use_device_comms(g, "simt", nullptr);
  if (g.world_size > 1) {
    if (g.tp > 1) {
      EXPECT_NE(dynamic_cast<OrderedComm*>(g.tp_comm.get()), nullptr);
    }
    if (g.dp > 1) {
      EXPECT_NE(dynamic_cast<OrderedComm*>(g.dp_comm.get()), nullptr);
    }
  }
  CollectiveOrder& o = CollectiveOrder::process();
  o.start_trace();
  std::vector<float> grads(64, 1.0f), act(32, 1.0f), full(32 * size_t(g.dp));
  for (int layer = 0; layer < 3; ++layer) {
    const int64_t h = g.dp_comm->allreduce_sum_async(grads.data(), 64);
    g.tp_comm->allreduce_sum(act.data(), 32);
    const int64_t z = g.dp_comm->allgather_async(act.data(), full.data(), 32);  // ZeRO-3 prefetch
    g.tp_comm->allreduce_sum(act.data(), 32);
    g.dp_comm->wait(z);
    g.dp_comm->wait(h);
  }
  EXPECT_EQ(g.dp_comm->allreduce_sum(1.0), double(g.dp));
  const std::vector<std::string> tr = o.trace();
  o.stop_trace();
  std::string joined;
  for (const std::string& line : tr) joined += line + "\n";
  if (g.world_size == 1) {
    EXPECT_TRUE(tr.empty()) << "single-process groups are not wrapped";
    return;
  }
  EXPECT_EQ(tr.size(), size_t(3 * ((g.dp > 1 ? 2 : 0) + (g.tp > 1 ? 2 : 0)) + (g.dp > 1 ? 1 : 0)));
  // Every rank's sequence equals rank 0's.
  std::string root = joined;
  g.world->broadcast_bytes(root, 0);
  EXPECT_EQ(joined, root) << "rank " << g.world_rank << " issued another sequence";
}

// Counts above the per-call limit go through several MPI calls: the limit is
// lowered to a few elements so every chunked path runs on small buffers.
// Point-to-point (pipeline stages): a ring of async sends and receives, three
// messages each way arriving in order, in chunks as well; and the three
// pipeline schedules (parallel/pipeline.h) run over real messages, one stage
// per rank of the world: each forward adds its stage's number to the
// activation it receives, each backward doubles the gradient it receives, and
// every micro-batch ends where sequential code would. Alone: one-line errors.
TEST(Comm, PointToPoint) {
  Communicator& w = *g_grid->world;
  if (w.size() == 1) {
    float x = 0;
    EXPECT_ERROR(w.send_async(&x, 1, 0), "no point-to-point send");
    EXPECT_ERROR(w.recv_async(&x, 1, 0), "no point-to-point receive");
    return;
  }
  const int r = w.rank(), n = w.size(), next = (r + 1) % n, prev = (r + n - 1) % n;
  for (int64_t chunk : {int64_t(0), int64_t(7)}) {
    if (chunk > 0) MpiComm::set_max_chunk(chunk);
    std::vector<std::vector<float>> out(3), in(3);
    std::vector<int64_t> handles;
    for (int k = 0; k < 3; ++k) {  // receives first, as a pipeline posts them
      in[size_t(k)].assign(size_t(10 + k * 5), -1);
      handles.push_back(w.recv_async(in[size_t(k)].data(), int64_t(in[size_t(k)].size()), prev));
    }
    for (int k = 0; k < 3; ++k) {
      out[size_t(k)].resize(size_t(10 + k * 5));
      for (size_t i = 0; i < out[size_t(k)].size(); ++i)
        out[size_t(k)][i] = float(r * 1000 + k * 100) + float(i);
      handles.push_back(w.send_async(out[size_t(k)].data(), int64_t(out[size_t(k)].size()), next));
    }
    for (int64_t h : handles) w.wait(h);
    for (int k = 0; k < 3; ++k)
      for (size_t i = 0; i < in[size_t(k)].size(); ++i)
        ASSERT_EQ(in[size_t(k)][i], float(prev * 1000 + k * 100) + float(i)) << k << " " << i;
    if (chunk > 0) MpiComm::set_max_chunk(INT_MAX);
  }
  EXPECT_ERROR(w.send_async(nullptr, 0, r), "send from rank");
  EXPECT_ERROR(w.recv_async(nullptr, 0, n), "receive on rank");

  const int m = 2 * n;
  for (pipeline::Schedule sched :
       {pipeline::Schedule::GPipe, pipeline::Schedule::OneFOneB, pipeline::Schedule::Interleaved}) {
    const int v = sched == pipeline::Schedule::Interleaved ? 2 : 1, stages = n * v;
    const auto plan = pipeline::make_schedule(sched, n, m, v);
    std::map<std::pair<int, int>, float> act, grad;  // (stage, micro-batch) -> value kept
    for (const pipeline::Pass& x : plan[size_t(r)]) {
      float value = 0;
      if (x.forward) {
        if (x.stage > 0)
          w.recv(&value, 1, (x.stage - 1) % n);
        else
          value = float(x.micro_batch);
        value += float(x.stage);
        act[{x.stage, x.micro_batch}] = value;
        if (x.stage + 1 < stages) w.send(&value, 1, (x.stage + 1) % n);
      } else {
        if (x.stage + 1 < stages)
          w.recv(&value, 1, (x.stage + 1) % n);
        else
          value = act.at({x.stage, x.micro_batch});  // the loss's gradient: the output
        value *= 2;
        grad[{x.stage, x.micro_batch}] = value;
        if (x.stage > 0) w.send(&value, 1, (x.stage - 1) % n);
      }
    }
    const float sum_stages = float(stages * (stages - 1) / 2);
    for (int b = 0; b < m; ++b)
      if (r == 0) {  // stage 0's backward ends the micro-batch: output * 2^stages
        EXPECT_EQ(grad.at({0, b}), (float(b) + sum_stages) * std::pow(2.0f, float(stages)))
            << pipeline::schedule_name(sched) << " micro-batch " << b;
      }
  }
}

TEST(Comm, ChunkedCounts) {
  if (!dynamic_cast<MpiComm*>(g_grid->world.get())) GTEST_SKIP() << "not under MPI";
  EXPECT_THROW(MpiComm::set_max_chunk(0), Error);
  MpiComm::set_max_chunk(7);
  for (auto [name, c] : comms()) {
    check_allreduce(*c, name, 7);
    check_allreduce(*c, name, 1003);
    check_allreduce_async(*c, name, 333);
    check_allgather(*c, name, 6);
    check_allgather(*c, name, 7);
    check_allgather(*c, name, 53);
    check_sharded(*c, name, 6);
    check_sharded(*c, name, 53);
    check_broadcast(*c, name, 50);
    check_broadcast_bytes(*c, name, 1001);
  }
  MpiComm::set_max_chunk(INT_MAX);
  EXPECT_EQ(MpiComm::max_chunk(), INT_MAX);
}

// The local communicator on its own, in every run.
TEST(Comm, LocalIsIdentity) {
  auto c = make_local_comm();
  EXPECT_EQ(c->rank(), 0);
  EXPECT_EQ(c->size(), 1);
  EXPECT_EQ(c->name(), "local");
  check_allreduce(*c, "local", 1000);
  check_allreduce_async(*c, "local");
  check_allgather(*c, "local", 100);
  check_sharded(*c, "local", 100);
  check_broadcast(*c, "local", 10);
  check_broadcast_bytes(*c, "local");
  check_scalars(*c, "local");
  c->barrier();
}

// The modelled link latency (bench generate --link-delay-us): the collectives'
// results are the inner communicator's; a blocking one takes at least the
// delay, an async one's wait returns at once when compute covered the delay.
TEST(Comm, DelayedCommModelsLatency) {
  using namespace std::chrono;
  DelayedComm c(*g_grid->world, milliseconds(30));
  check_allreduce(c, "delayed", 100);
  check_allreduce_async(c, "delayed");
  check_allgather(c, "delayed", 10);
  check_scalars(c, "delayed");
  std::vector<float> buf(16, 1.f);
  auto seconds_of = [](auto&& f) {
    const auto t0 = steady_clock::now();
    f();
    return duration<double>(steady_clock::now() - t0).count();
  };
  EXPECT_GE(seconds_of([&] { c.allreduce_sum(buf.data(), 16); }), 0.030);
  EXPECT_GE(seconds_of([&] { c.wait(c.allreduce_sum_async(buf.data(), 16)); }), 0.030);
  EXPECT_EQ(buf[0], float(std::pow(g_grid->world->size(), 2)));  // two sums of 1s
  // Overlap, on the local communicator (no peer to wait for, so only the
  // modelled delay can hold the wait back).
  auto local = make_local_comm();
  DelayedComm d(*local, milliseconds(30));
  const int64_t h = d.allreduce_sum_async(buf.data(), 16);
  std::this_thread::sleep_for(milliseconds(60));  // "compute" longer than the delay
  d.progress();
  EXPECT_LT(seconds_of([&] { d.wait(h); }), 0.025);
}

// ---------------------------------------------------------------------------
// Failure modes (see the file comment)
// ---------------------------------------------------------------------------

int run_failure_mode(const std::string& mode, int victim) {
  Communicator& w = *g_grid->world;
  w.barrier();  // everyone is up before anyone dies
  std::vector<float> buf(1 << 20, 1.f);
  if (w.rank() == victim) {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));  // let the others block
    if (mode == "abort") w.abort("test abort");
    if (mode == "mpi_error") {  // an MPI call with a rank that does not exist
      int x = 0;
      MPI_Send(&x, 1, MPI_INT, w.size() + 5, 0, MPI_COMM_WORLD);
    }
    if (mode == "busy") {  // alive, answering, but never reaching the allreduce
      std::this_thread::sleep_for(std::chrono::seconds(30));
      return 3;
    }
    if (mode == "other") {  // waiting in another group's collective
      g_grid->dp_comm->barrier();
      return 3;
    }
    std::fprintf(stderr, "rank %d: raising SIGKILL\n", w.rank());
    std::fflush(stderr);
    std::raise(SIGKILL);
  }
  std::fprintf(stderr, "rank %d: waiting in %s allreduce\n", w.rank(),
               mode == "kill_async" ? "an async" : "a blocking");
  std::fflush(stderr);
  if (mode == "kill_async") {
    const int64_t h = w.allreduce_sum_async(buf.data(), static_cast<int64_t>(buf.size()));
    for (int i = 0; i < 1000; ++i) {
      w.progress();
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    w.wait(h);
  } else {
    w.allreduce_sum(buf.data(), static_cast<int64_t>(buf.size()));
  }
  std::fprintf(stderr, "rank %d: the allreduce returned without rank %d\n", w.rank(), victim);
  return 3;
}

}  // namespace
}  // namespace strata

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  std::string fail_mode;
  int fail_rank = 1;
  if (const char* t = std::getenv("STRATA_TEST_TP")) strata::g_tp = std::atoi(t);
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--tp" && i + 1 < argc) {
      strata::g_tp = std::atoi(argv[++i]);
    } else if (a == "--fail-mode" && i + 1 < argc) {
      fail_mode = argv[++i];
    } else if (a == "--fail-rank" && i + 1 < argc) {
      fail_rank = std::atoi(argv[++i]);
    } else {
      std::fprintf(stderr,
                   "usage: %s [gtest options] [--tp N] "
                   "[--fail-mode kill|kill_async|abort|mpi_error|busy|other --fail-rank R]\n",
                   argv[0]);
      return 2;
    }
  }
  strata::ProcessGrid grid;
  try {
    grid = strata::make_grid(strata::g_tp, 0);
  } catch (const strata::Error& e) {
    std::fprintf(stderr, "strata: error: %s\n", e.what());
    strata::finalize_mpi();
    return 1;
  }
  strata::g_grid = &grid;
  if (!fail_mode.empty()) return strata::run_failure_mode(fail_mode, fail_rank);

  const int rc = RUN_ALL_TESTS();
  // Every rank learns how many ranks failed, so all of them exit alike.
  const int64_t failed = grid.world->allreduce_sum(static_cast<int64_t>(rc != 0));
  if (grid.is_root() && grid.world_size > 1)
    std::printf("mpi_comm_test: %d processes, tp=%d: %lld rank(s) failed\n", grid.world_size,
                grid.tp, static_cast<long long>(failed));
  grid = strata::ProcessGrid{};  // free the communicators before MPI goes
  strata::finalize_mpi();
  return failed ? 1 : 0;
}
