// TensorBoard event files: what the chief and the evaluator write so that TensorBoard, pointed
// at --summary-dir, plots loss, accuracy, examples/s, learning rate and exchange time per step.
//
// One writer owns one new file, `events.out.tfevents.<10-digit seconds>.<host>` (TensorFlow's
// name; a suffix `.1`, `.2`, ... when a file of that name exists), in a directory made private
// when missing (common/private_dir.h). The file is TFRecord framing (tfrecord.h) of
// tensorflow.Event messages (proto/tensorflow/core/util/event.proto): first
// `file_version: "brain.Event:2"`, then one Event per AddScalars. A restarted program makes a
// new file and never rewrites an old one: TensorBoard reads a run's files in name order.
//
// Records are buffered and written by Flush, which AddScalars calls once `flush_interval` has
// passed since the last write (or the buffer passes 1 MiB), and the destructor calls last. A
// failed write (a full disk, a file size limit) is returned, and every later call returns the
// same error without writing: the file keeps the records before it, and training goes on.
//
// Thread-safe: the training loop and an evaluation may add to one writer.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/clock.h"

namespace kubetrain::summary {

struct EventFileOptions {
  // Where the file goes; made (0700, parents too) when missing.
  std::string directory;
  // The name's last part; empty: this machine's hostname (the pod's name in Kubernetes).
  std::string host;
  // Longest time an added value waits in memory before it is written.
  absl::Duration flush_interval = absl::Seconds(5);
  // The file name's seconds and the flush timer; the Event's wall_time is the caller's.
  const Clock* clock = &Clock::Real();
};

// One TensorBoard scalar: `tag` is the series name ("loss", "examples_per_second").
struct Scalar {
  std::string tag;
  float value = 0;
};

class EventFileWriter {
 public:
  // Makes the directory and a new file in it, and writes (and flushes) the file_version record.
  // FAILED_PRECONDITION (a directory others may write, a symlink) or the open's error, naming
  // the path.
  static absl::StatusOr<std::unique_ptr<EventFileWriter>> Create(EventFileOptions options);

  // Flushes; an error is logged (the caller saw earlier ones from AddScalars or Flush).
  ~EventFileWriter();

  EventFileWriter(const EventFileWriter&) = delete;
  EventFileWriter& operator=(const EventFileWriter&) = delete;

  // Appends one Event{wall_time, step, summary{value{tag, simple_value}...}}. INVALID_ARGUMENT
  // for an empty tag or no values; the write error of an earlier flush once one failed.
  absl::Status AddScalars(int64_t step, double wall_time, absl::Span<const Scalar> values);

  // Writes what is buffered. The write's error (naming the path) from then on.
  absl::Status Flush();

  // The file's full path.
  const std::string& path() const { return path_; }

 private:
  EventFileWriter(EventFileOptions options, std::string path, int fd);

  absl::Status FlushLocked();
  void AppendEvent(const std::string& serialized);

  const EventFileOptions options_;
  const std::string path_;
  std::mutex mu_;
  int fd_;
  std::string buffer_;  // framed records not yet written
  absl::Time last_flush_;
  absl::Status error_;  // the first write error; sticky
};

}  // namespace kubetrain::summary
