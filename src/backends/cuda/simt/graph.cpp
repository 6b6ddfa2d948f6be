// Graph capture on the SIMT executor (simt.h): a recording of the commands
// queued while capturing, replayed in order.
#include <atomic>
#include <memory>
#include <mutex>
#include <string>

#include "backends/cuda/simt/simt.h"
#include "core/error.h"

namespace strata::simt {
namespace {

std::mutex g_capture_mutex;
std::shared_ptr<Recording> g_recording;  // non-null while capturing
std::atomic<bool> g_capturing{false};

}  // namespace

void begin_capture() {
  std::lock_guard<std::mutex> lock(g_capture_mutex);
  STRATA_CHECK(!g_recording, "SIMT graph capture: a capture is already under way");
  g_recording = std::make_shared<Recording>();
  g_capturing = true;
}

std::shared_ptr<const Recording> end_capture() {
  std::lock_guard<std::mutex> lock(g_capture_mutex);
  STRATA_CHECK(g_recording, "SIMT graph capture: end_capture without begin_capture");
  std::shared_ptr<const Recording> r = std::move(g_recording);
  g_recording.reset();
  g_capturing = false;
  return r;
}

bool capturing() { return g_capturing.load(); }

bool record(const char* what, const std::function<void()>& command) {
  if (!g_capturing.load()) return false;
  std::lock_guard<std::mutex> lock(g_capture_mutex);
  if (!g_recording) return false;
  g_recording->names.emplace_back(what);
  g_recording->commands.push_back(command);
  return true;
}

void replay(const Recording& r) {
  refuse_while_capturing("replaying a graph");
  for (const auto& c : r.commands) c();
}

void refuse_while_capturing(const char* what) {
  STRATA_CHECK(!g_capturing.load(), "SIMT graph capture: ", what,
               " while a stream captures (a GPU refuses it: cudaErrorStreamCaptureUnsupported)");
}

}  // namespace strata::simt
