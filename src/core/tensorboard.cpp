#include "core/tensorboard.h"

#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "core/error.h"

namespace strata {
namespace {

// Protocol buffer wire format: varints, fixed-width little-endian numbers and
// length-delimited fields.
void varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(char(uint8_t(v) | 0x80));
    v >>= 7;
  }
  out.push_back(char(uint8_t(v)));
}
void key(std::string& out, int field, int wire_type) {
  varint(out, uint64_t(field) << 3 | uint64_t(wire_type));
}
template <typename T>
void fixed(std::string& out, T v) {
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));  // x86-64 is little-endian, as the format is
  out.append(b, sizeof(T));
}
void bytes_field(std::string& out, int field, const std::string& bytes) {
  key(out, field, 2);
  varint(out, bytes.size());
  out += bytes;
}

// Event { double wall_time = 1; int64 step = 2; Summary summary = 5; }
std::string event_with_summary(const std::string& value, int64_t step, double wall_time) {
  std::string summary;  // Summary { repeated Value value = 1; }
  bytes_field(summary, 1, value);
  std::string e;
  key(e, 1, 1);
  fixed<double>(e, wall_time);
  key(e, 2, 0);
  varint(e, uint64_t(step));
  bytes_field(e, 5, summary);
  return e;
}

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

uint32_t masked_crc32c(const void* data, size_t n) {
  const uint32_t c = crc32c(0, data, n);
  return ((c >> 15) | (c << 17)) + 0xA282EAD8u;
}

std::string tb_scalar_event(const std::string& tag, double value, int64_t step, double wall_time) {
  std::string v;  // Value { string tag = 1; float simple_value = 2; }
  bytes_field(v, 1, tag);
  key(v, 2, 5);
  fixed<float>(v, float(value));
  return event_with_summary(v, step, wall_time);
}

std::string tb_text_event(const std::string& tag, const std::string& text, int64_t step,
                          double wall_time) {
  // Value { string tag = 1; SummaryMetadata metadata = 9; TensorProto tensor = 8; }
  // with metadata.plugin_data.plugin_name = "text" and a scalar DT_STRING tensor.
  std::string plugin, metadata, tensor, v;
  bytes_field(plugin, 1, "text");
  bytes_field(metadata, 1, plugin);
  key(tensor, 1, 0);
  varint(tensor, 7);             // DT_STRING
  bytes_field(tensor, 2, "");    // TensorShapeProto: a scalar
  bytes_field(tensor, 8, text);  // string_val
  bytes_field(v, 1, tag);
  bytes_field(v, 8, tensor);
  bytes_field(v, 9, metadata);
  return event_with_summary(v, step, wall_time);
}

std::string tb_file_version_event(double wall_time) {
  std::string e;
  key(e, 1, 1);
  fixed<double>(e, wall_time);
  bytes_field(e, 3, "brain.Event:2");
  return e;
}

std::string tb_session_start_event(int64_t step, double wall_time) {
  std::string log;  // SessionLog { SessionStatus status = 1; } with START = 1
  key(log, 1, 0);
  varint(log, 1);
  std::string e;
  key(e, 1, 1);
  fixed<double>(e, wall_time);
  key(e, 2, 0);
  varint(e, uint64_t(step));
  bytes_field(e, 7, log);  // Event.session_log
  return e;
}

std::string tfrecord(const std::string& data) {
  std::string r;
  const uint64_t n = data.size();
  fixed<uint64_t>(r, n);
  fixed<uint32_t>(r, masked_crc32c(&n, sizeof n));
  r += data;
  fixed<uint32_t>(r, masked_crc32c(data.data(), data.size()));
  return r;
}

TensorBoardWriter::TensorBoardWriter(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  STRATA_CHECK(!ec, dir, ": cannot create the TensorBoard directory (", ec.message(), ")");
  char host[256] = "localhost";
  if (gethostname(host, sizeof host - 1) != 0) std::strcpy(host, "localhost");
  const double t = now_seconds();
  // Seconds, host and pid name the file; a second writer in the same second
  // and process (a restart) gets a suffix instead of reusing a file.
  const std::string base = dir + "/events.out.tfevents." + std::to_string(int64_t(t)) + "." + host +
                           "." + std::to_string(getpid());
  path_ = base;
  for (int i = 1; std::filesystem::exists(path_); ++i) path_ = base + "." + std::to_string(i);
  f_ = std::fopen(path_.c_str(), "wb");
  STRATA_CHECK(f_, path_, ": cannot create the TensorBoard event file (", std::strerror(errno),
               ")");
  write(tb_file_version_event(t));
}

TensorBoardWriter::~TensorBoardWriter() {
  if (f_) std::fclose(f_);
}

void TensorBoardWriter::scalar(const std::string& tag, double value, int64_t step) {
  write(tb_scalar_event(tag, value, step, now_seconds()));
}

void TensorBoardWriter::text(const std::string& tag, const std::string& text, int64_t step) {
  write(tb_text_event(tag, text, step, now_seconds()));
}

void TensorBoardWriter::session_start(int64_t step) {
  write(tb_session_start_event(step, now_seconds()));
}

void TensorBoardWriter::write(const std::string& event) {
  const std::string r = tfrecord(event);
  const long before = std::ftell(f_);
  if (std::fwrite(r.data(), 1, r.size(), f_) == r.size() && std::fflush(f_) == 0) return;
  const int err = errno;
  // No torn record is left behind (a full disk): cut the file back.
  std::clearerr(f_);
  if (before >= 0 && ftruncate(fileno(f_), before) == 0) std::fseek(f_, before, SEEK_SET);
  fail(cat(path_, ": cannot write a TensorBoard event (", std::strerror(err), ")"));
}

}  // namespace strata
