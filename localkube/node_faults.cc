// Node faults on demand (node_faults.h).
#include "localkube/node_faults.h"

#include "absl/strings/str_cat.h"

namespace kubetrain::localkube {

absl::StatusOr<std::string> ApplyNodeFault(NodeAgents* nodes, Kubelet* kubelet,
                                           const std::string& node, const std::string& action) {
  Kubelet::NodeState state;
  std::string name;
  if (action == "fail") {
    state = Kubelet::NodeState::kDown;
    name = "down";
  } else if (action == "partition") {
    state = Kubelet::NodeState::kPartitioned;
    name = "partitioned";
  } else if (action == "recover") {
    state = Kubelet::NodeState::kUp;
    name = "up";
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown node action \"", action, "\": use fail, partition or recover"));
  }
  if (nodes == nullptr || kubelet == nullptr) {
    return absl::FailedPreconditionError("localkube runs no nodes: start it with --run-pods");
  }
  // The kubelet first: a node that stops heartbeating with its pods still reporting would be
  // seen alive for a moment.
  if (absl::Status st = kubelet->SetNodeState(node, state); !st.ok()) return st;
  if (absl::Status st = nodes->SetDown(node, state != Kubelet::NodeState::kUp); !st.ok()) {
    return st;
  }
  return name;
}

}  // namespace kubetrain::localkube
