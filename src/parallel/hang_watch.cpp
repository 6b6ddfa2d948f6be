// The collective timeout and its watchdog (see hang_watch.h).
#include "parallel/hang_watch.h"

#if defined(STRATA_HAVE_MPI)
#include <mpi.h>
#endif

#include <algorithm>
#include <atomic>
#include <csignal>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>

#include "core/error.h"
#include "core/signals.h"

namespace strata {
namespace {

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::mutex g_config_mu;
bool g_configured = false;
std::atomic<double> g_timeout{kDefaultCollectiveTimeout};

double parse_env_timeout() {
  const char* v = std::getenv("STRATA_COLLECTIVE_TIMEOUT");
  if (!v || !*v) return -1;
  char* end = nullptr;
  const double s = std::strtod(v, &end);
  STRATA_CHECK(end && *end == '\0' && std::isfinite(s) && s >= 0, "STRATA_COLLECTIVE_TIMEOUT='", v,
               "': expected a number of seconds >= 0 (0: no collective timeout)");
  return s;
}

// The current wait of the main thread (at most one: collectives are issued
// from the main thread only), read by the watchdog.
struct Slot {
  const WatchedGroup* group = nullptr;  // nullptr: not waiting
  const char* kind = "";
  int64_t seq = 0;
  int64_t start_ns = 0;
  int64_t last_end_ns = 0;  // when the previous wait ended (0: none yet)
  int64_t id = 0;           // waits so far (this one's number)
};
std::mutex g_slot_mu;
Slot g_slot;
std::atomic<bool> g_active{false};  // the watchdog runs: guards record

}  // namespace

void set_collective_timeout(double seconds, bool given) {
  STRATA_CHECK(std::isfinite(seconds) && seconds >= 0, "collective timeout ", seconds,
               ": must be a number of seconds >= 0 (0: none)");
  double s = seconds;
  if (!given) {
    const double env = parse_env_timeout();
    if (env >= 0) s = env;
  }
  std::lock_guard<std::mutex> lock(g_config_mu);
  g_timeout.store(s);
  g_configured = true;
}

double collective_timeout() { return g_timeout.load(); }

WaitGuard::WaitGuard(const WatchedGroup& group, const char* kind, int64_t seq) {
  if (!g_active.load(std::memory_order_relaxed)) return;
  const int64_t t = now_ns();
  std::lock_guard<std::mutex> lock(g_slot_mu);
  g_slot.group = &group;
  g_slot.kind = kind;
  g_slot.seq = seq;
  g_slot.start_ns = t;
  ++g_slot.id;
}

WaitGuard::~WaitGuard() {
  if (!g_active.load(std::memory_order_relaxed)) return;
  const int64_t t = now_ns();
  std::lock_guard<std::mutex> lock(g_slot_mu);
  g_slot.group = nullptr;
  g_slot.last_end_ns = t;
}

#if !defined(STRATA_HAVE_MPI)

int watch_world_rank() { return 0; }
void start_hang_watch() {}
void stop_hang_watch() {}

#else

int watch_world_rank() {
  int initialized = 0, finalized = 0, rank = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

namespace {

constexpr int kTagQuery = 1;
constexpr int kTagEnding = 2;  // "I am ending the job": the others keep quiet
constexpr int kTagReplyBase = 100;  // + the query's round (mod 1000)
constexpr double kPollSeconds = 0.1;
constexpr double kAnswerSeconds = 2.0;   // how long a report waits for the answers
// After a stop signal: mpirun sends SIGTERM to the survivors when a rank has
// died and SIGKILL 1 s later (odls_base_sigkill_timeout), so ask quickly.
constexpr double kSignalAnswerSeconds = 0.7;
constexpr double kDeferSeconds = 15.0;   // held back after another rank's query

// What a rank answers to a status query.
struct Status {
  int64_t waiting = 0;   // 1: in a collective wait
  int64_t seq = 0;
  int64_t seconds = 0;   // waiting for, or busy outside collectives for (-1: since start)
  int64_t stopped = 0;   // > 0: resumed less than kDeferSeconds ago after a stop this long (s)
  char kind[32] = {};
  char label[32] = {};
};

void copy_text(char (&dst)[32], const std::string& s) {
  std::snprintf(dst, sizeof dst, "%s", s.c_str());
}

// The last stop of this process (see Watchdog::run): its length and end.
std::atomic<int64_t> g_stopped_ns{0}, g_resumed_ns{0};

// Whether the main thread is still in wait number `id` (its collective has
// not completed meanwhile).
bool still_waiting(int64_t id) {
  std::lock_guard<std::mutex> lock(g_slot_mu);
  return g_slot.group && g_slot.id == id;
}

Status my_status() {
  std::lock_guard<std::mutex> lock(g_slot_mu);
  Status s;
  const int64_t t = now_ns();
  if (g_resumed_ns.load() && t - g_resumed_ns.load() < static_cast<int64_t>(kDeferSeconds * 1e9))
    s.stopped = std::max<int64_t>(1, g_stopped_ns.load() / 1000000000);
  if (g_slot.group) {
    s.waiting = 1;
    s.seq = g_slot.seq;
    s.seconds = (t - g_slot.start_ns) / 1000000000;
    copy_text(s.kind, g_slot.kind);
    copy_text(s.label, g_slot.group->label);
  } else {
    s.seconds = g_slot.last_end_ns ? (t - g_slot.last_end_ns) / 1000000000 : -1;
  }
  return s;
}

class Watchdog {
 public:
  explicit Watchdog(MPI_Comm side) : side_(side) {
    MPI_Comm_rank(side_, &rank_);
    thread_ = std::thread([this] { run(); });
  }
  ~Watchdog() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
    MPI_Comm_free(&side_);
  }

 private:
  void run();
  // Answers queries that arrived; returns the lowest querying rank (or -1).
  int serve();
  void post_inbox() {
    MPI_Irecv(&inbox_round_, 1, MPI_INT64_T, MPI_ANY_SOURCE, kTagQuery, side_, &inbox_);
  }
  // Tells every other rank that this one is ending the job, then ends it.
  [[noreturn]] void end_job();
  // Asks every other rank where it is for up to `window` seconds: the
  // description of each member of the group that has not reached collective
  // `seq` (`missing`), and of each other rank that does not answer or was
  // just stopped (`others`). Returns false when a lower rank is reporting too
  // and `yield` (it speaks for the job).
  bool ask(const WatchedGroup& group, const char* kind, int64_t seq, double window, bool yield,
           std::vector<std::string>& missing, std::vector<std::string>& others);
  // The timeout: asks, prints the line and ends the job, or returns (yielded).
  void report(const WatchedGroup& group, const char* kind, int64_t seq, double waited);
  // A stop signal (SIGTERM from mpirun after a rank died, or from the user)
  // while waiting: names the members that do not answer, if any.
  void report_signal(const WatchedGroup& group, const char* kind, int64_t seq, double waited,
                     int sig);
  std::string describe(int r, bool answered, const Status& s, const char* kind, int64_t seq,
                       const std::string& label) const;

  MPI_Comm side_;
  int rank_ = 0;
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  MPI_Request inbox_ = MPI_REQUEST_NULL;
  // Another rank's notice that it is ending the job (MPI_Abort, hence
  // mpirun's SIGTERM here next): no report of ours would add anything.
  MPI_Request ending_req_ = MPI_REQUEST_NULL;
  int64_t ending_buf_ = 0;
  bool ending_ = false;
  int64_t inbox_round_ = 0;
  int64_t round_ = 0;
  int64_t defer_until_ns_ = 0;
  bool signal_reported_ = false;
  int64_t wait_id_ = 0;  // the wait being reported on (see still_waiting)
  int64_t last_tick_ns_ = 0;
  struct Reply {
    Status status;
    MPI_Request req = MPI_REQUEST_NULL;
  };
  std::deque<std::unique_ptr<Reply>> replies_;
};

int Watchdog::serve() {
  int lowest = -1;
  if (!ending_) {
    int done = 0;
    MPI_Test(&ending_req_, &done, MPI_STATUS_IGNORE);
    if (done) ending_ = true;
  }
  for (;;) {
    int done = 0;
    MPI_Status st;
    MPI_Test(&inbox_, &done, &st);
    if (!done) break;
    auto reply = std::make_unique<Reply>();
    reply->status = my_status();
    const int tag = kTagReplyBase + static_cast<int>(inbox_round_ % 1000);
    MPI_Isend(&reply->status, sizeof(Status), MPI_BYTE, st.MPI_SOURCE, tag, side_, &reply->req);
    replies_.push_back(std::move(reply));
    if (lowest < 0 || st.MPI_SOURCE < lowest) lowest = st.MPI_SOURCE;
    // Another rank is reporting a hang: leave the report to it for a while.
    defer_until_ns_ = now_ns() + static_cast<int64_t>(kDeferSeconds * 1e9);
    post_inbox();
  }
  while (!replies_.empty()) {
    int done = 0;
    MPI_Test(&replies_.front()->req, &done, MPI_STATUS_IGNORE);
    if (!done) break;
    replies_.pop_front();
  }
  return lowest;
}

void Watchdog::run() {
  post_inbox();
  MPI_Irecv(&ending_buf_, 1, MPI_INT64_T, MPI_ANY_SOURCE, kTagEnding, side_, &ending_req_);
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait_for(lock, std::chrono::duration<double>(kPollSeconds), [this] { return stop_; });
      if (stop_) break;
    }
    // Woken much later than asked: this process was stopped (kill -STOP, a
    // suspended machine) and resumed. Its waits were not the others' fault,
    // and a stop signal now is most likely mpirun ending the job after
    // another rank reported this one: say nothing for a while.
    const int64_t tick = now_ns();
    if (last_tick_ns_ && tick - last_tick_ns_ > static_cast<int64_t>(2e9)) {
      g_stopped_ns.store(tick - last_tick_ns_);
      g_resumed_ns.store(tick);
      defer_until_ns_ = tick + static_cast<int64_t>(kDeferSeconds * 1e9);
      signal_reported_ = true;
    }
    last_tick_ns_ = tick;
    serve();
    if (ending_) continue;
    const double timeout = collective_timeout();
    const int sig = StopScope::signal();
    if (timeout <= 0 && (sig == 0 || signal_reported_)) continue;
    const char* kind = "";
    int64_t seq = 0;
    double waited = 0;
    WatchedGroup group;
    {
      std::lock_guard<std::mutex> lock(g_slot_mu);
      if (!g_slot.group) continue;
      waited = (now_ns() - g_slot.start_ns) / 1e9;
      const bool due = (sig != 0 && !signal_reported_) || (timeout > 0 && waited >= timeout);
      if (!due) continue;  // the common case: nothing copied
      wait_id_ = g_slot.id;
      group = *g_slot.group;  // it outlives the wait, but the wait may end now
      kind = g_slot.kind;
      seq = g_slot.seq;
    }
    if (sig != 0 && !signal_reported_) {
      signal_reported_ = true;
      report_signal(group, kind, seq, waited, sig);
    }
    if (timeout > 0 && waited >= timeout && now_ns() >= defer_until_ns_)
      report(group, kind, seq, waited);
  }
  MPI_Cancel(&inbox_);
  MPI_Wait(&inbox_, MPI_STATUS_IGNORE);
  if (!ending_) {
    MPI_Cancel(&ending_req_);
    MPI_Wait(&ending_req_, MPI_STATUS_IGNORE);
  }
  for (auto& r : replies_) MPI_Wait(&r->req, MPI_STATUS_IGNORE);
}

std::string Watchdog::describe(int r, bool answered, const Status& s, const char* kind,
                               int64_t seq, const std::string& label) const {
  if (!answered) return cat(r, ", which does not answer (stopped, hung or dead)");
  if (s.stopped)
    return cat(r, ", which was stopped for ", s.stopped, " s and has just been resumed");
  if (s.waiting && s.seq == seq && label == s.label && std::strcmp(kind, s.kind) == 0)
    return "";  // it has reached this collective
  if (s.waiting)
    return cat(r, ", which waits in ", s.kind, " #", s.seq, " of the ", s.label, " (for ",
               s.seconds, " s)");
  if (s.seconds < 0) return cat(r, ", which has not reached any collective yet (busy)");
  return cat(r, ", which is busy outside collectives (for ", s.seconds,
             " s since its last one ended)");
}

bool Watchdog::ask(const WatchedGroup& group, const char* kind, int64_t seq, double window,
                   bool yield, std::vector<std::string>& missing,
                   std::vector<std::string>& others) {
  ++round_;
  const int tag = kTagReplyBase + static_cast<int>(round_ % 1000);
  const int64_t token = round_;
  // Every other rank: a member may wait for a rank outside the group (rank 0
  // of a dp group waiting in a tp all-reduce for a stopped rank 1), and every
  // rank that is reporting learns of the others (the lowest one speaks).
  int world = 1;
  MPI_Comm_size(side_, &world);
  std::vector<int> peers;
  for (int r = 0; r < world; ++r)
    if (r != rank_) peers.push_back(r);
  std::vector<Status> status(peers.size());
  std::vector<MPI_Request> recvs(peers.size()), sends(peers.size());
  for (size_t i = 0; i < peers.size(); ++i) {
    MPI_Irecv(&status[i], sizeof(Status), MPI_BYTE, peers[i], tag, side_, &recvs[i]);
    MPI_Isend(&token, 1, MPI_INT64_T, peers[i], kTagQuery, side_, &sends[i]);
  }
  std::vector<char> answered(peers.size(), 0);
  const int64_t until = now_ns() + static_cast<int64_t>(window * 1e9);
  size_t count = 0;
  bool yielded = false;
  while (count < peers.size() && now_ns() < until) {
    const int lowest = serve();
    if (yield && ((lowest >= 0 && lowest < rank_) || ending_)) {
      yielded = true;
      break;
    }
    for (size_t i = 0; i < peers.size(); ++i) {
      if (answered[i]) continue;
      int done = 0;
      MPI_Test(&recvs[i], &done, MPI_STATUS_IGNORE);
      if (done) answered[i] = 1, ++count;
    }
    if (count < peers.size()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  // Unanswered queries stay unmatched: cancel the receives, let the (small,
  // eagerly sent) queries go.
  for (auto& q : recvs)
    if (q != MPI_REQUEST_NULL) {
      MPI_Cancel(&q);
      MPI_Request_free(&q);
    }
  for (auto& q : sends)
    if (q != MPI_REQUEST_NULL) MPI_Request_free(&q);
  if (yielded) return false;
  missing.clear();
  others.clear();
  for (size_t i = 0; i < peers.size(); ++i) {
    const bool member = std::find(group.world_ranks.begin(), group.world_ranks.end(), peers[i]) !=
                        group.world_ranks.end();
    if (member) {
      std::string d = describe(peers[i], answered[i], status[i], kind, seq, group.label);
      if (!d.empty()) missing.push_back(std::move(d));
    } else if (!answered[i] || status[i].stopped) {  // outside the group: only the stuck ones
      others.push_back(describe(peers[i], answered[i], status[i], kind, seq, group.label));
    }
  }
  return true;
}

namespace {

// "rank 1, which ..." or "ranks: rank 1, which ...; rank 3, which ...".
std::string list_ranks(const std::vector<std::string>& missing) {
  std::string out = missing.size() > 1 ? "ranks: rank " : "rank ";
  for (size_t i = 0; i < missing.size(); ++i) out += cat(i ? "; rank " : "", missing[i]);
  return out;
}

}  // namespace

void Watchdog::report(const WatchedGroup& group, const char* kind, int64_t seq, double waited) {
  std::vector<std::string> missing, others;
  if (!ask(group, kind, seq, kAnswerSeconds, true, missing, others)) return;
  if (!still_waiting(wait_id_)) return;  // it completed meanwhile: late, not hung
  const std::string what = cat("rank ", rank_, ": ", kind, " #", seq, " of the ", group.label,
                               " waited ", static_cast<int64_t>(waited + 0.5), " s");
  const std::string line =
      missing.empty()
          ? cat(what, " although every member answers from it (the ranks disagree about the "
                      "collective)")
          : cat(what, " for ", list_ranks(missing));
  std::string also;
  for (std::string o : others) {  // "1, which does not answer ..." -> "rank 1 does not answer ..."
    const size_t at = o.find(", which ");
    if (at != std::string::npos) o.replace(at, 8, " ");
    also += cat("; rank ", o);
  }
  std::fprintf(stderr,
               "strata: error: %s%s; ending the job (collective timeout %g s: "
               "parallelism.collective_timeout or STRATA_COLLECTIVE_TIMEOUT)\n",
               line.c_str(), also.c_str(), collective_timeout());
  std::fflush(stderr);
  std::fflush(stdout);
  end_job();
}

void Watchdog::end_job() {
  int world = 1;
  MPI_Comm_size(side_, &world);
  const int64_t token = 1;
  std::vector<MPI_Request> sends;
  for (int r = 0; r < world; ++r) {
    if (r == rank_) continue;
    sends.emplace_back();
    MPI_Isend(&token, 1, MPI_INT64_T, r, kTagEnding, side_, &sends.back());
  }
  // Small messages leave at once; a moment for them to be matched.
  const int64_t until = now_ns() + static_cast<int64_t>(0.2e9);
  int done = 0;
  while (!done && now_ns() < until) {
    MPI_Testall(static_cast<int>(sends.size()), sends.data(), &done, MPI_STATUSES_IGNORE);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  MPI_Abort(MPI_COMM_WORLD, 1);
  std::_Exit(1);
}

void Watchdog::report_signal(const WatchedGroup& group, const char* kind, int64_t seq,
                             double waited, int sig) {
  std::vector<std::string> missing, others;
  ask(group, kind, seq, kSignalAnswerSeconds, false, missing, others);
  if (ending_) return;  // another rank has reported and is ending the job
  // Completed meanwhile: the ranks are stopping together (a peer that ends
  // its process right after the stop no longer answers, and is not missing).
  if (!still_waiting(wait_id_)) return;
  missing.insert(missing.end(), others.begin(), others.end());
  // Only a member that does not answer at all is news here: the others are
  // on their way to the stop (a signal to every rank stops them after the
  // same step).
  std::vector<std::string> silent;
  for (const std::string& m : missing)
    if (m.find("does not answer") != std::string::npos) silent.push_back(m);
  if (silent.empty()) return;
  const char* name = sig == SIGTERM ? " (SIGTERM)" : sig == SIGINT ? " (SIGINT)" : "";
  std::fprintf(stderr,
               "strata: error: rank %d: signal %d%s came while %s #%lld of the %s had waited %lld s "
               "for %s; a rank that has died makes mpirun end the job\n",
               rank_, sig, name, kind, static_cast<long long>(seq), group.label.c_str(),
               static_cast<long long>(waited + 0.5), list_ranks(silent).c_str());
  std::fflush(stderr);
}

std::unique_ptr<Watchdog> g_watchdog;

}  // namespace

void start_hang_watch() {
  {
    std::lock_guard<std::mutex> lock(g_config_mu);
    if (!g_configured) {
      const double env = parse_env_timeout();
      if (env >= 0) g_timeout.store(env);
      g_configured = true;
    }
  }
  if (g_watchdog) return;
  int size = 1, provided = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  MPI_Query_thread(&provided);
  // Alone there is nothing to wait for; without MPI_THREAD_MULTIPLE (MPI
  // initialised by someone else) the watchdog may not call MPI.
  if (size <= 1 || provided < MPI_THREAD_MULTIPLE) return;
  MPI_Comm side = MPI_COMM_NULL;
  MPI_Comm_dup(MPI_COMM_WORLD, &side);
  g_watchdog = std::make_unique<Watchdog>(side);
  g_active.store(true);
}

void stop_hang_watch() {
  g_active.store(false);
  g_watchdog.reset();
}

#endif

}  // namespace strata
