// The node side of a kubelet for localkube's emulated nodes `node-1` .. `node-N`: registers each
// Node (labels, capacity and allocatable, the kubelet's conditions, nodeInfo, addresses) and
// heartbeats for it as a kubelet does: renews its Lease in kube-node-lease and the Node's
// conditions' lastHeartbeatTime every period (10 s). SetDown stops one node's heartbeats, as a
// failed node's kubelet would, for the node lifecycle controller to notice (it reads the Lease).
//
// What `--nodes` and `--node-capacity` / `--node-labels` mean is parsed by ParseNodeSpecs.
// Thread-safe; one internal thread heartbeats every node.
#pragma once

#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "localkube/api.h"

namespace kubetrain::localkube {

// One emulated node as registered.
struct NodeSpec {
  std::string name;                             // node-<i>
  std::map<std::string, std::string> capacity;  // resource name -> quantity (canonical)
  std::map<std::string, std::string> labels;    // besides the kubelet's own labels
};

// Default capacity of a node (cpu=64, memory=256Gi, pods=110): room for what a single-node
// localkube ran before it had nodes; --node-capacity makes scheduling bite.
std::map<std::string, std::string> DefaultNodeCapacity();

// The nodes `--nodes count` makes, with `capacity` (each `[NODE:]RES=QTY,...`: without NODE
// every node's, with it one node's, applied after those for all; a later value of a resource
// replaces an earlier one) and `labels` (each `[NODE:]KEY=VALUE,...`, the same way). Node i's
// zone label topology.kubernetes.io/zone is zone-i unless a label sets it. InvalidArgument naming
// the flag and the fix.
absl::StatusOr<std::vector<NodeSpec>> ParseNodeSpecs(int count,
                                                     const std::vector<std::string>& capacity,
                                                     const std::vector<std::string>& labels);

struct NodeAgentsOptions {
  std::vector<NodeSpec> nodes;
  // How often each node's Lease and Ready condition are renewed (a kubelet's 10 s).
  absl::Duration period = absl::Seconds(10);
  // The node's InternalIP address as registered (the sandbox network gives each node a bridge
  // address); unset: 127.0.0.1. SetInternalIP changes it later.
  std::function<std::string(const std::string& node)> internal_ip;
};

class NodeAgents {
 public:
  NodeAgents(NodeAgentsOptions options, Api* api);
  ~NodeAgents();

  // Registers every Node and its Lease (replacing what a previous run left under the same
  // names' status) and starts the heartbeats.
  absl::Status Start();
  void Stop();

  // Stops (`down` true) or resumes one node's heartbeats: its Lease's renewTime and the Node's
  // lastHeartbeatTime stand still while down; resuming renews both at once and posts Ready
  // again. NotFound for a name that is not one of the nodes.
  absl::Status SetDown(const std::string& name, bool down);
  bool IsDown(const std::string& name) const;
  // Sets the node's InternalIP address (status.addresses) now and on later heartbeats.
  absl::Status SetInternalIP(const std::string& name, const std::string& ip);

  // node-1 .. node-N in index order (KubeletOptions::node_names).
  std::vector<std::string> names() const;

  // The Node object a kubelet registers for `spec` (exposed for tests).
  static nlohmann::json NodeObject(const NodeSpec& spec, const std::string& internal_ip);

 private:
  void Loop();
  void Heartbeat(const std::string& name, absl::Time now);

  NodeAgentsOptions options_;
  Api* api_;
  std::thread thread_;
  mutable std::mutex mu_;
  std::condition_variable wake_;
  bool stop_ = false;
  std::set<std::string> down_;
  std::set<std::string> resumed_;  // heartbeat at once
  std::map<std::string, std::string> internal_ip_;
};

}  // namespace kubetrain::localkube
