// ProgressMeter (core/progress.h).
#include "core/progress.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <exception>

#include "core/memory_info.h"
#include "core/text.h"

namespace strata {
namespace {

std::string seconds_text(double s) {
  if (s < 120) return fixed(s, 0) + "s";
  if (s < 7200) return fixed(s / 60, 0) + "m";
  return fixed(s / 3600, 1) + "h";
}

}  // namespace

ProgressMeter::ProgressMeter(std::string what, uint64_t total)
    : what_(std::move(what)), total_(total), uncaught_(std::uncaught_exceptions()) {
  const char* env = std::getenv("STRATA_PROGRESS_SECONDS");
  interval_ = env && *env ? std::atof(env) : 5.0;
}

ProgressMeter::~ProgressMeter() {
  if (std::uncaught_exceptions() == uncaught_) finish();
}

void ProgressMeter::add(uint64_t bytes) {
  const uint64_t done = done_.fetch_add(bytes) + bytes;
  if (timer_.seconds() - last_ < interval_) return;
  std::unique_lock<std::mutex> lock(mu_, std::try_to_lock);
  if (!lock.owns_lock()) return;  // another thread is printing
  const double now = timer_.seconds();
  if (now - last_ < interval_) return;
  last_ = now;
  print(done);
}

void ProgressMeter::finish() {
  if (finished_.exchange(true) || !printed_) return;
  std::lock_guard<std::mutex> lock(mu_);
  print(std::max<uint64_t>(done_, total_));  // the work is done: all of it
}

void ProgressMeter::print(uint64_t done) {
  printed_ = true;
  const double s = std::max(timer_.seconds(), 1e-9);
  std::string line = what_ + ": " + human_bytes(double(done));
  if (total_ > 0)
    line += "/" + human_bytes(double(total_)) + " (" +
            fixed(100.0 * double(done) / double(total_), 0) + "%)";
  line += ", " + human_bytes(double(done) / s) + "/s, " + seconds_text(s);
  if (total_ > 0 && done > 0 && done < total_)
    line += ", ETA " + seconds_text(s / double(done) * double(total_ - done));
  std::fflush(stdout);
  std::fprintf(stderr, "%s\n", line.c_str());
}

}  // namespace strata
