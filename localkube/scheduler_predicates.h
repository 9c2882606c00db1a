// What localkube's scheduler (scheduler.h) decides with, as pure functions of a pod and a node:
// the pod's resource requests, the default plug-ins' filters (NodeUnschedulable,
// TaintToleration, NodeAffinity, NodeResourcesFit) worded as kube-scheduler words them, the
// score among fitting nodes, and the FailedScheduling message.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace kubetrain::localkube {

// Resource name -> amount: cpu in millicores, everything else in whole units (memory in bytes),
// quantities rounded up.
using Resources = std::map<std::string, int64_t>;

// A quantity's amount in `Resources` units for `resource`; 0 when it does not parse.
int64_t ResourceAmount(const std::string& resource, const nlohmann::json& quantity);

// What the pod asks of a node, as the scheduler counts it: the containers' requests summed, the
// init containers' largest request where that is more, plus spec.overhead; a container's limit
// stands for a request it does not state (the API's defaulting).
Resources PodRequests(const nlohmann::json& pod);
// status.allocatable of a node.
Resources NodeAllocatable(const nlohmann::json& node);

// What a node's pods already take.
struct NodeUsage {
  Resources requested;
  int pods = 0;
};

// The filter outcome of one node: why the pod does not fit (empty: it fits), from the first
// plug-in that refused it, and whether preemption could change that (it could only for
// resources: other refusals are "UnschedulableAndUnresolvable").
struct FitResult {
  std::vector<std::string> reasons;
  bool resolvable = false;
};

// The default plug-ins' filters in kube-scheduler's order.
FitResult Fits(const nlohmann::json& pod, const nlohmann::json& node, const NodeUsage& usage);

// Whether the pod's nodeSelector and required node affinity match the node.
bool MatchesNodeAffinity(const nlohmann::json& pod, const nlohmann::json& node);
// Whether `tolerations` tolerate `taint`.
bool ToleratesTaint(const nlohmann::json& tolerations, const nlohmann::json& taint);

// Higher is better: free cpu and memory share after placing the pod (least allocated, with the
// scheduler's defaults of 100m cpu and 200Mi memory for containers that request none), 0-100,
// plus the weights of matching preferred node affinity terms and minus 10 per PreferNoSchedule
// taint the pod does not tolerate.
int64_t Score(const nlohmann::json& pod, const nlohmann::json& node, const NodeUsage& usage);

// kube-scheduler's FitError text: "0/3 nodes are available: 1 node(s) were unschedulable, 2
// Insufficient cpu. preemption: 0/3 nodes are available: 1 Preemption is not helpful for
// scheduling, 2 No preemption victims found for incoming pod." — `results` holds every node's
// outcome (none fitting).
std::string FitErrorMessage(const std::vector<FitResult>& results);

}  // namespace kubetrain::localkube
