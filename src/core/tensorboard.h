// TensorBoard event files, written without TensorFlow or protobuf: the
// TFRecord framing (length, masked CRC-32C of the length, the record, masked
// CRC-32C of the record) around hand-encoded `Event` protocol buffers, as
// TensorBoard's reader expects them (tensorboard/compat/proto/event.proto,
// summary.proto). One file per writer, named
// events.out.tfevents.<seconds>.<host>.<pid>, flushed after every event so
// TensorBoard can read it while a run goes on.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

#include "core/crc32c.h"

namespace strata {

// TFRecord's masked form of CRC-32C (core/crc32c.h).
uint32_t masked_crc32c(const void* data, size_t n);

// The bytes of one event (the protocol buffer, without the record framing).
std::string tb_scalar_event(const std::string& tag, double value, int64_t step, double wall_time);
std::string tb_text_event(const std::string& tag, const std::string& text, int64_t step,
                          double wall_time);
std::string tb_file_version_event(double wall_time);
std::string tb_session_start_event(int64_t step, double wall_time);
// One TFRecord: framing around `data`.
std::string tfrecord(const std::string& data);

class TensorBoardWriter {
 public:
  // Creates `dir` if needed and a new event file in it (never appends to an
  // existing one: a resumed run adds a file, which TensorBoard reads as one
  // run). Errors name the file.
  explicit TensorBoardWriter(const std::string& dir);
  ~TensorBoardWriter();
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

  void scalar(const std::string& tag, double value, int64_t step);
  // Shown in TensorBoard's text tab (rendered as markdown).
  void text(const std::string& tag, const std::string& text, int64_t step);
  // A restart at `step` (a resumed run): TensorBoard discards the points of
  // earlier files at this step and later.
  void session_start(int64_t step);
  const std::string& path() const { return path_; }

 private:
  void write(const std::string& event);
  std::string path_;
  FILE* f_ = nullptr;
};

}  // namespace strata
