// Progress lines of long evaluation jobs on stderr (internal to the eval
// layer): "eval <what>: done/total requests, elapsed, ETA" every 5 s.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

#include "core/timer.h"

namespace strata {

class Progress {
 public:
  Progress(bool on, std::string what) : on_(on), what_(std::move(what)) {}
  // Prints every 5 s on long jobs (and the final count once it has printed).
  void operator()(int64_t done, int64_t total) {
    if (!on_ || last_.seconds() < 5.0) {
      if (!(on_ && printed_ && done == total)) return;
    }
    last_.reset();
    printed_ = true;
    std::fflush(stdout);
    const double s = timer_.seconds();
    std::fprintf(stderr, "eval %s: %lld/%lld requests, %.0fs, ETA %.0fs\n", what_.c_str(),
                 (long long)done, (long long)total, s,
                 done ? s / double(done) * double(total - done) : 0.0);
  }

 private:
  bool on_, printed_ = false;
  std::string what_;
  Timer timer_, last_;
};

}  // namespace strata
