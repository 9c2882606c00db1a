// Where the operator keeps what it must remember between passes about a job's restarts, beyond
// its status: annotations on the job (docs/architecture.md §10, "Restarts").
//
// - The back-off of each task (api::RestartBackoff), for every job: status has no field for it.
// - For a TFJob, its whole restart ledger too (restarts per type, counted failures, completed
//   indexes): Kubeflow's own TFJob CRD has none of these status fields, and the API server prunes
//   what the schema does not know, so a count kept only in status would be lost at every write
//   (a TFJob would restart without end). Annotations survive any CRD. Status still shows them
//   where the CRD keeps them (kubetrain's own TFJob CRD).
//
// The values are JSON, readable with `kubectl get -o yaml`:
//   kubetrain.dev/restarts: {"Worker":3}
//   kubetrain.dev/restart-backoff: {"worker-1":{"failures":3,"lastFailure":"2026-01-01T00:00:00Z"}}
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "operator/api/outcome.h"
#include "operator/api/types.h"

namespace kubetrain::controller {

inline constexpr char kRestartsAnnotation[] = "kubetrain.dev/restarts";
inline constexpr char kCountedFailuresAnnotation[] = "kubetrain.dev/counted-failures";
inline constexpr char kCompletedIndexesAnnotation[] = "kubetrain.dev/completed-indexes";
inline constexpr char kBackoffAnnotation[] = "kubetrain.dev/restart-backoff";

// The ledger's annotations as they should be: annotation → value, "" where it should be absent.
// `whole_ledger`: the restart counts, counted failures and completed indexes too (a TFJob).
std::map<std::string, std::string> LedgerAnnotations(
    const api::TrainingJobStatus& status, const std::map<std::string, api::TaskBackoff>& backoff,
    bool whole_ledger);

// Reads the annotations of `job` back: the back-off into `backoff`, and with `whole_ledger` the
// counts into `status` (an annotation present wins over the status, which a CRD may prune). A
// value that does not parse (edited by hand) is skipped, and logged.
void ReadLedgerAnnotations(const nlohmann::json& job, bool whole_ledger,
                           api::TrainingJobStatus* status,
                           std::map<std::string, api::TaskBackoff>* backoff);

// The merge patch of metadata.annotations that gives `job` the values `want` (with its
// resourceVersion, so the write is conditional, as a status PUT is); nullopt when it has them.
std::optional<nlohmann::json> LedgerPatch(const nlohmann::json& job,
                                          const std::map<std::string, std::string>& want);

// What each restart of `decision` waits, as the Restarting condition and the BackOff event say
// it: "restarting worker-1 in 40s (back-off after 3 failures)" ("the job" under restartScope
// Job), one for each restarted task with a back-off in `backoff`.
std::vector<std::string> DescribePauses(const api::JobDecision& decision,
                                        const std::map<std::string, api::TaskBackoff>& backoff,
                                        const api::RestartBackoff& policy);

}  // namespace kubetrain::controller
