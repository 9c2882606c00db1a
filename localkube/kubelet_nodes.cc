// The kubelet's side of node faults (kubelet.h NodeState, node_faults.h): a node's link cut, or
// its machine off. The Sync loop skips the pods of a node that is not up; this file changes the
// states.
#include <signal.h>

#include <algorithm>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "localkube/kubelet.h"

namespace kubetrain::localkube {

absl::Status Kubelet::SetNodeState(const std::string& node, NodeState state) {
  auto at = std::find(options_.node_names.begin(), options_.node_names.end(), node);
  if (at == options_.node_names.end()) {
    return absl::NotFoundError(absl::StrCat("node \"", node, "\" not found"));
  }
  const int index = static_cast<int>(at - options_.node_names.begin());
  std::lock_guard<std::mutex> lock(mu_);  // also serialises the sandbox network's owner calls
  for (auto it = superseded_.begin(); it != superseded_.end();) {
    Pod& pod = **it;
    if (pod.node != index || state == NodeState::kPartitioned) {
      ++it;
      continue;
    }
    if (state == NodeState::kDown) {  // the machine is off: nothing of it runs on
      for (Container& c : pod.containers) {
        if (c.process && !c.terminated) c.process->Signal(SIGKILL);
      }
      ++it;
      continue;
    }
    // Back: the API server has another pod of the name, so the kubelet stops this one before
    // its link is healed, as a returning kubelet kills the pods deleted while it was away.
    log::Info("Stopped a pod deleted while its node was cut off",
              {{"pod", Key(pod.ns, pod.name)}, {"uid", pod.uid}, {"node", node}});
    std::error_code ignored;
    std::filesystem::remove_all(pod.dir + "/volumes", ignored);
    it = superseded_.erase(it);  // kills whatever still runs
  }
  if (network_) {
    sandbox::Network* net = network_->network();
    bool cut = state != NodeState::kUp;
    if (cut != net->is_cut(index)) {
      absl::Status st = cut ? net->CutNode(index) : net->HealNode(index);
      if (!st.ok()) return st;
    }
  }
  NodeState before = node_state_[index];
  node_state_[index] = state;
  if (state == NodeState::kDown) {  // the machine is off: nothing of its pods runs on
    for (auto& [key, pod] : pods_) {
      if (pod->node != index) continue;
      for (Container& c : pod->containers) {
        if (c.process && !c.terminated) c.process->Signal(SIGKILL);
      }
    }
  }
  if (state == NodeState::kUp && before != NodeState::kUp) resync_ = true;
  static constexpr const char* kNames[] = {"up", "partitioned", "down"};
  log::Info("Node state changed", {{"node", node},
                                   {"from", kNames[static_cast<int>(before)]},
                                   {"to", kNames[static_cast<int>(state)]}});
  return absl::OkStatus();
}

}  // namespace kubetrain::localkube
