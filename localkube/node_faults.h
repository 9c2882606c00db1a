// Node faults on demand, for tests: what happens to a node of a real cluster when its machine
// stops or its network is cut, made to happen to one of localkube's nodes.
//
//   POST /localkube/v1/nodes/<node>/<action>     (system:masters only; 200 with the node's state)
//
//   fail       the machine stops: its kubelet stops heartbeating (the node lifecycle controller
//              marks it Unknown after --node-monitor-grace-period and taints it unreachable), every
//              container of its pods is killed, its link is cut
//   partition  its link is cut: heartbeats stop as above, but its pods run on, unseen
//   recover    back from either: link healed, heartbeats resume, the kubelet resyncs (pods
//              deleted meanwhile stop; a failed node's containers start again by restartPolicy)
//
// Not a Kubernetes API: a real cluster has no such call; it is what pulling a cable or a power
// plug does (docs/localkube.md "Nodes").
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "localkube/kubelet.h"
#include "localkube/node_agents.h"

namespace kubetrain::localkube {

// Applies `action` to `node`; NotFound for an unknown node, InvalidArgument for an unknown
// action. Returns the node's new state ("up", "partitioned", "down").
absl::StatusOr<std::string> ApplyNodeFault(NodeAgents* nodes, Kubelet* kubelet,
                                           const std::string& node, const std::string& action);

}  // namespace kubetrain::localkube
