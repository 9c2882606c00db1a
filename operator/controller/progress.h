// Training progress read from the chief's Prometheus endpoint (kubetrain_worker_* gauges), for
// status.progress and the STEP / ACCURACY columns of `kubectl get tj`.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "operator/api/types.h"

namespace kubetrain::controller {

// Parses Prometheus text exposition: global step, epoch, loss, accuracy, examples/s.
// NOT_FOUND when the text has no kubetrain_worker_global_step sample.
absl::StatusOr<api::Progress> ParseProgress(absl::string_view metrics_text);

// The final figures from the chief's summary line, {"event":"training_complete","steps":...},
// found anywhere in `text` (a termination message or the end of a log). NOT_FOUND without one.
absl::StatusOr<api::Progress> ParseFinalSummary(absl::string_view text);

// GET http://<ip>:<port>/metrics with a short timeout.
absl::StatusOr<api::Progress> FetchProgress(const std::string& ip, int port,
                                            absl::Duration timeout);

}  // namespace kubetrain::controller
