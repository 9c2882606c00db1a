// The scheduler's plug-in points (scheduler.h), declared apart so that a plug-in's author needs
// nothing else of the scheduler: a Filter says whether a pod fits a node, a PreBind prepares a
// chosen node (provisions a volume) before the Binding is posted.
#pragma once

#include <functional>
#include <string>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"

namespace kubetrain::localkube {

// Empty: the pod fits the node as far as this filter goes; else the reason, worded as the real
// scheduler's plug-in words it ("node(s) had volume node affinity conflict"), which the
// FailedScheduling message counts per reason.
using SchedulerFilter =
    std::function<std::string(const nlohmann::json& pod, const nlohmann::json& node)>;

// Called once a node is chosen, before the Binding; an error leaves the pod Pending (retried)
// with the error in its FailedScheduling event.
using SchedulerPreBind =
    std::function<absl::Status(const nlohmann::json& pod, const std::string& node_name)>;

}  // namespace kubetrain::localkube
