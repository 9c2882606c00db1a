#include "common/logging.h"

#include <atomic>
#include <cstdio>
#include <mutex>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/enum_names.h"
#include "common/quote.h"

namespace kubetrain::log {
namespace {

constexpr EnumName<Level> kLevels[] = {
    {Level::kDebug, "debug"},
    {Level::kInfo, "info"},
    {Level::kWarn, "warn"},
    {Level::kError, "error"},
};

std::atomic<Level> g_level{Level::kInfo};

std::mutex& SinkMutex() {
  static std::mutex mu;
  return mu;
}

Sink& CurrentSink() {
  static Sink sink;
  return sink;
}

absl::string_view LevelName(Level level) { return NameOf(kLevels, level, "info"); }

bool NeedsQuotes(absl::string_view value) {
  if (value.empty()) return true;
  for (char c : value) {
    if (c == ' ' || c == '=' || c == '"' || c == '\\' || static_cast<unsigned char>(c) < 0x20 ||
        c == 0x7f) {
      return true;
    }
  }
  return false;
}

}  // namespace

Field::Field(absl::string_view key, double value)
    : key_(key), value_(absl::StrFormat("%.6g", value)) {}

Field::Field(absl::string_view key, const absl::Status& status)
    : key_(key), value_(status.ok() ? "OK" : std::string(status.message())) {}

Field::Field(absl::string_view key, absl::Duration d)
    : key_(key), value_(absl::FormatDuration(d)) {}

std::string QuoteValue(absl::string_view value) {
  return NeedsQuotes(value) ? GoQuote(value) : std::string(value);
}

std::string FormatLine(absl::Time time, Level level, absl::string_view msg, Fields fields) {
  std::string line =
      absl::StrCat("time=", absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", time, absl::UTCTimeZone()),
                   " level=", LevelName(level), " msg=", QuoteValue(msg));
  for (const Field& f : fields) absl::StrAppend(&line, " ", f.key(), "=", QuoteValue(f.value()));
  return line;
}

void SetLevel(Level level) { g_level.store(level); }
Level GetLevel() { return g_level.load(); }

void SetSink(Sink sink) {
  std::lock_guard<std::mutex> lock(SinkMutex());
  CurrentSink() = std::move(sink);
}

bool ParseLevel(absl::string_view text, Level* level) {
  std::optional<Level> named = ValueNamed(kLevels, text);
  if (named) *level = *named;
  return named.has_value();
}

absl::Status SetLevelFlag(absl::string_view text) {
  Level level;
  if (!ParseLevel(text, &level)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--log-level: unknown level \"", text, "\"; allowed: ", NamesOf(kLevels)));
  }
  SetLevel(level);
  return absl::OkStatus();
}

void Write(Level level, absl::string_view msg, Fields fields) {
  if (level < g_level.load()) return;
  std::string line = FormatLine(absl::Now(), level, msg, fields);
  std::lock_guard<std::mutex> lock(SinkMutex());
  if (CurrentSink()) {
    CurrentSink()(line);
    return;
  }
  line += '\n';
  std::fwrite(line.data(), 1, line.size(), stderr);
  std::fflush(stderr);
}

}  // namespace kubetrain::log
