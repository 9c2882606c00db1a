// Reads training progress from the chief's log lines: logfmt `step= epoch= loss= accuracy=
// examples_per_sec=` and the final `{"event":"training_complete",...}` JSON summary.
// Not thread-safe.
#pragma once

#include <map>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "absl/strings/string_view.h"

namespace kubetrain::local {

// key=value pairs of one logfmt line (quoted values unquoted); keys without '=' are skipped.
std::map<std::string, std::string> ParseLogfmt(absl::string_view line);

class ProgressTracker {
 public:
  // Feeds one line of the chief's output; returns true when progress changed.
  bool Observe(absl::string_view line);

  bool has_progress() const { return !latest_.empty(); }
  // "step=1200 epoch=2 loss=0.41 accuracy=0.861 examples_per_sec=21000" from the latest values.
  std::string Summary() const;
  const std::optional<nlohmann::json>& completion() const { return completion_; }
  // The folder of the chief's TensorBoard event files, from its `Writing TensorBoard summaries
  // dir=...` line; empty until it says one.
  const std::string& summary_dir() const { return summary_dir_; }

 private:
  std::map<std::string, std::string> latest_;
  std::optional<nlohmann::json> completion_;
  std::string summary_dir_;
};

}  // namespace kubetrain::local
