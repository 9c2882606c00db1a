// TrainingJob status conditions (docs/architecture.md §3): Created, Running, Restarting,
// Succeeded, Failed, Suspended, ReplicaFailure while the API server refuses to create the
// job's pods or Service (as a ReplicaSet reports it), and ScalingLimited while an elastic job's
// Worker replicas are outside spec.elastic (as a HorizontalPodAutoscaler reports it). One entry
// per type; a condition that becomes
// True moves to the end of the list, because `kubectl get tj` shows the last condition as the job's
// STATE.
#pragma once

#include <string>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "operator/api/types.h"

namespace kubetrain::controller {

inline constexpr char kCreated[] = "Created";
inline constexpr char kRunning[] = "Running";
inline constexpr char kRestarting[] = "Restarting";
inline constexpr char kSucceeded[] = "Succeeded";
inline constexpr char kFailed[] = "Failed";
inline constexpr char kSuspended[] = "Suspended";
inline constexpr char kReplicaFailure[] = "ReplicaFailure";
inline constexpr char kScalingLimited[] = "ScalingLimited";

const api::Condition* FindCondition(const api::TrainingJobStatus& status, absl::string_view type);
bool IsTrue(const api::TrainingJobStatus& status, absl::string_view type);
bool IsFinished(const api::TrainingJobStatus& status);

// Sets a condition. Running and Restarting exclude each other; Succeeded or Failed set Running
// to False. Once the job has finished, nothing else changes. Returns true if anything changed.
bool SetCondition(api::TrainingJobStatus* status, absl::string_view type, bool value,
                  absl::string_view reason, absl::string_view message, absl::Time now);

// Removes a condition (one that only means something while True, such as ReplicaFailure).
// Returns true if it was there.
bool RemoveCondition(api::TrainingJobStatus* status, absl::string_view type);

}  // namespace kubetrain::controller
