// Progress of long work on stderr, as `train` reports its steps:
//   "convert hf: reading /models/llama: 3.20 GB/16.10 GB (20%), 412.0 MB/s, 8s, ETA 31s"
// at most every 5 seconds (STRATA_PROGRESS_SECONDS sets another interval; 0
// prints at every update, for tests), and once more when the work ends if a
// line was printed before (short work prints nothing). add() may be called
// from several threads at once.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>

#include "core/timer.h"

namespace strata {

class ProgressMeter {
 public:
  // `total`: the bytes the work will handle (0: unknown; no percentage or ETA).
  ProgressMeter(std::string what, uint64_t total);
  ~ProgressMeter();  // the last line, if any was printed and no exception is unwinding
  ProgressMeter(const ProgressMeter&) = delete;
  ProgressMeter& operator=(const ProgressMeter&) = delete;

  void add(uint64_t bytes);
  void finish();  // the work is done: the last line now (once), at the total

 private:
  void print(uint64_t done);

  std::string what_;
  uint64_t total_;
  double interval_;
  std::atomic<uint64_t> done_{0};
  std::atomic<bool> printed_{false}, finished_{false};
  std::mutex mu_;
  double last_ = 0;
  Timer timer_;
  int uncaught_;
};

}  // namespace strata
