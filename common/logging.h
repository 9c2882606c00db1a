// A small logfmt logging facade: one line per event, `key=value` pairs, values quoted when needed.
//
//   log::Info("Created Pod", {{"pod", name}, {"job", key}});
//   -> time=2026-11-21T10:00:00.123Z level=info msg="Created Pod" pod=fmnist-ps-0
//   job=default/fmnist
//
// Thread-safe: each line is formatted first and written to the sink under one lock.
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <string>
#include <type_traits>
#include "absl/strings/string_view.h"

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace kubetrain::log {

enum class Level { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3 };

// One key=value pair. The value is formatted when the field is built.
class Field {
 public:
  Field(absl::string_view key, absl::string_view value) : key_(key), value_(value) {}
  Field(absl::string_view key, const char* value) : key_(key), value_(value) {}
  Field(absl::string_view key, const std::string& value) : key_(key), value_(value) {}
  Field(absl::string_view key, bool value) : key_(key), value_(value ? "true" : "false") {}
  Field(absl::string_view key, double value);
  Field(absl::string_view key, float value) : Field(key, static_cast<double>(value)) {}
  Field(absl::string_view key, const absl::Status& status);
  Field(absl::string_view key, absl::Duration d);
  template <typename Int, typename = std::enable_if_t<std::is_integral_v<Int>>>
  Field(absl::string_view key, Int value) : key_(key), value_(std::to_string(value)) {}

  const std::string& key() const { return key_; }
  const std::string& value() const { return value_; }

 private:
  std::string key_;
  std::string value_;
};

using Fields = std::initializer_list<Field>;
using Sink = std::function<void(absl::string_view line)>;

// Quotes a logfmt value if it is empty or holds spaces, '=', '"', or control characters.
std::string QuoteValue(absl::string_view value);

// Formats one line without the trailing newline. Pure; used by Write and by tests.
std::string FormatLine(absl::Time time, Level level, absl::string_view msg, Fields fields);

// Process-wide settings, set once from main before threads start.
void SetLevel(Level level);
Level GetLevel();
// Replaces the sink (stderr by default); pass nullptr to restore stderr.
void SetSink(Sink sink);
// Parses "debug", "info", "warn", "error".
bool ParseLevel(absl::string_view text, Level* level);
// SetLevel from a --log-level flag value; INVALID_ARGUMENT naming the flag and the levels.
absl::Status SetLevelFlag(absl::string_view text);

void Write(Level level, absl::string_view msg, Fields fields);

inline void Debug(absl::string_view msg, Fields fields = {}) { Write(Level::kDebug, msg, fields); }
inline void Info(absl::string_view msg, Fields fields = {}) { Write(Level::kInfo, msg, fields); }
inline void Warn(absl::string_view msg, Fields fields = {}) { Write(Level::kWarn, msg, fields); }
inline void Error(absl::string_view msg, Fields fields = {}) { Write(Level::kError, msg, fields); }

}  // namespace kubetrain::log
