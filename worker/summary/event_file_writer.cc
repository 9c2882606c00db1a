#include "worker/summary/event_file_writer.h"

#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstring>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/logging.h"
#include "common/private_dir.h"
#include "tensorflow/core/util/event.pb.h"
#include "worker/summary/tfrecord.h"

namespace kubetrain::summary {
namespace {

constexpr char kFileVersion[] = "brain.Event:2";
constexpr size_t kMaxBuffered = 1 << 20;
// Files of the same second and host get a numeric suffix; this many are tried.
constexpr int kMaxSuffix = 1000;

std::string HostName() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0 || name[0] == '\0') return "localhost";
  return name;
}

// A write's error: a full disk or a size limit is the environment running out, not a bug.
absl::Status WriteError(const std::string& path, int err) {
  std::string message = absl::StrCat("writing event file ", path, ": ", std::strerror(err));
  if (err == ENOSPC || err == EDQUOT || err == EFBIG) {
    return absl::ResourceExhaustedError(
        absl::StrCat(message, "; free space in (or give more to) --summary-dir's file system"));
  }
  return absl::InternalError(message);
}

// Protobuf strings must be UTF-8 (a reader refuses an Event whose tag is not).
bool IsUtf8(absl::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    int extra = c < 0x80           ? 0
                : (c >> 5) == 0x6  ? 1
                : (c >> 4) == 0xE  ? 2
                : (c >> 3) == 0x1E ? 3
                                   : -1;
    if (extra < 0 || (extra == 1 && c < 0xC2) || i + extra >= s.size()) return false;
    uint32_t cp = extra == 0 ? c : c & (0x3F >> extra);
    for (int k = 1; k <= extra; ++k) {
      const unsigned char cc = static_cast<unsigned char>(s[i + k]);
      if ((cc >> 6) != 0x2) return false;
      cp = (cp << 6) | (cc & 0x3F);
    }
    if ((extra == 2 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) ||
        (extra == 3 && (cp < 0x10000 || cp > 0x10FFFF))) {
      return false;
    }
    i += extra + 1;
  }
  return true;
}

double WallTime(absl::Time t) { return absl::ToDoubleSeconds(t - absl::UnixEpoch()); }

}  // namespace

absl::StatusOr<std::unique_ptr<EventFileWriter>> EventFileWriter::Create(EventFileOptions options) {
  if (options.directory.empty()) {
    return absl::InvalidArgumentError("event file directory is empty; give --summary-dir");
  }
  if (absl::Status s = EnsurePrivateDirectory(options.directory); !s.ok()) return s;
  if (options.host.empty()) options.host = HostName();
  if (options.host.find('/') != std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("event file host name \"", options.host, "\" contains '/'"));
  }
  const absl::Time now = options.clock->Now();
  const std::string base = absl::StrFormat("%s/events.out.tfevents.%010d.%s", options.directory,
                                           absl::ToUnixSeconds(now), options.host);
  for (int suffix = 0; suffix < kMaxSuffix; ++suffix) {
    std::string path = suffix == 0 ? base : absl::StrCat(base, ".", suffix);
    // O_EXCL: a new file every time, never one an earlier run (or a planted symlink) left.
    int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC, 0600);
    if (fd < 0 && errno == EEXIST) continue;
    if (fd < 0) {
      return absl::PermissionDeniedError(
          absl::StrCat("creating event file ", path, ": ", std::strerror(errno)));
    }
    std::unique_ptr<EventFileWriter> writer(
        new EventFileWriter(std::move(options), std::move(path), fd));
    tensorflow::Event first;
    first.set_wall_time(WallTime(now));
    first.set_file_version(kFileVersion);
    std::lock_guard<std::mutex> lock(writer->mu_);
    writer->AppendEvent(first.SerializeAsString());
    if (absl::Status s = writer->FlushLocked(); !s.ok()) return s;
    return writer;
  }
  return absl::AlreadyExistsError(
      absl::StrCat(base, " and ", kMaxSuffix - 1, " suffixed names exist; clean up --summary-dir"));
}

EventFileWriter::EventFileWriter(EventFileOptions options, std::string path, int fd)
    : options_(std::move(options)),
      path_(std::move(path)),
      fd_(fd),
      last_flush_(options_.clock->Now()) {}

EventFileWriter::~EventFileWriter() {
  std::lock_guard<std::mutex> lock(mu_);
  const bool had_error = !error_.ok();
  absl::Status s = FlushLocked();
  if (!s.ok() && !had_error) {
    log::Warn("Lost the last TensorBoard summaries", {{"error", s.ToString()}});
  }
  close(fd_);
}

void EventFileWriter::AppendEvent(const std::string& serialized) {
  AppendTfRecord(serialized, &buffer_);
}

absl::Status EventFileWriter::AddScalars(int64_t step, double wall_time,
                                         absl::Span<const Scalar> values) {
  if (values.empty()) return absl::InvalidArgumentError("AddScalars: no values");
  tensorflow::Event event;
  event.set_wall_time(wall_time);
  event.set_step(step);
  tensorflow::Summary* summary = event.mutable_summary();
  for (const Scalar& scalar : values) {
    if (scalar.tag.empty()) return absl::InvalidArgumentError("AddScalars: a value has no tag");
    if (!IsUtf8(scalar.tag)) {
      return absl::InvalidArgumentError(
          absl::StrCat("AddScalars: tag \"", absl::CHexEscape(scalar.tag), "\" is not UTF-8"));
    }
    tensorflow::Summary::Value* value = summary->add_value();
    value->set_tag(scalar.tag);
    value->set_simple_value(scalar.value);
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (!error_.ok()) return error_;
  AppendEvent(event.SerializeAsString());
  if (buffer_.size() >= kMaxBuffered ||
      options_.clock->Now() - last_flush_ >= options_.flush_interval) {
    return FlushLocked();
  }
  return absl::OkStatus();
}

absl::Status EventFileWriter::Flush() {
  std::lock_guard<std::mutex> lock(mu_);
  return FlushLocked();
}

absl::Status EventFileWriter::FlushLocked() {
  if (!error_.ok()) return error_;
  size_t written = 0;
  while (written < buffer_.size()) {
    ssize_t n = write(fd_, buffer_.data() + written, buffer_.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      error_ = WriteError(path_, n < 0 ? errno : EIO);
      buffer_.clear();
      return error_;
    }
    written += static_cast<size_t>(n);
  }
  buffer_.clear();
  last_flush_ = options_.clock->Now();
  return absl::OkStatus();
}

}  // namespace kubetrain::summary
