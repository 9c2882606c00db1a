// A sandbox network: emulated nodes on this machine, each a Linux bridge with its own /24 and an
// uplink to the host that can be rate-shaped and cut, and sandboxes (network namespaces, one
// veth each) on the nodes, which reach each other through the host. The building block for
// localkube's multi-node pods and the network benchmark's per-rank "nodes".
//
//   auto net = Network::Create({.nodes = 2, .uplink_bits_per_second = 50'000'000});
//   if (absl::IsFailedPrecondition(net.status())) ...  // not root: fall back
//   const Sandbox* a = *(*net)->AddSandbox(0, "rank-0");
//   Process::Start(a->Wrap({{"my-server"}, env, ""}));  // runs inside a's namespace
//   (*net)->CutNode(0); ... (*net)->HealNode(0);
//
// What it emulates: L3 reachability between sandboxes (same node: bridged; different nodes:
// routed by the host), a bandwidth cap per node uplink both ways (tc tbf), and a node cut off
// from everything off-node. What not: latency, loss or jitter (this kernel has no netem), DNS,
// NAT or anything beyond 198.18.0.0/15: a sandbox reaches only its instance's nodes and the host.
//
// Everything it creates carries the instance prefix (names.h) and is removed by the destructor;
// what a killed instance left is swept by the next Create of the same family (sweep.h). Two
// instances hold different prefixes and address blocks (lock_file.h), so they never collide.
// Needs root (CAP_NET_ADMIN, CAP_SYS_ADMIN) and iproute2's `ip` and `tc`.
//
// Owns the bridges, ifbs, policy rules, namespaces and veths and its two locks. Not thread-safe:
// one owner calls it; Sandbox's const methods may be called from any thread.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/process.h"
#include "localkube/sandbox/lock_file.h"
#include "localkube/sandbox/sweep.h"

namespace kubetrain::sandbox {

// How a node's uplink queues what waits for its rate (docs/network-benchmark.md, "Acknowledgements
// behind the bulk").
enum class UplinkQueue {
  // One FIFO, tbf's own, holding up to 50 ms at the rate.
  kFifo,
  // TCP segments under 128 bytes (pure acknowledgements, window updates) first, the rest in one
  // FIFO as kFifo: the part of a real node's fq_codel that serves a flow with only ACKs to send
  // ahead of the bulk, so that a node sending at its rate does not slow what it receives.
  kAcksFirst,
};

struct NetworkOptions {
  // Name family (1 to 3 lowercase letters) shared by the instances that sweep each other.
  std::string family = "kt";
  // This instance's prefix, the family and 4 hex digits; empty: a free one at random.
  std::string prefix;
  int nodes = 1;  // 1 to kMaxNodes
  // Each node's uplink rate, the same both ways (64 kbit/s to 100 Gbit/s); none: unshaped.
  std::optional<int64_t> uplink_bits_per_second;
  UplinkQueue uplink_queue = UplinkQueue::kFifo;  // with a rate
  // Which /20 of 198.18.0.0/15 (0 to 31); none: the first that no live instance holds.
  std::optional<int> block;
  std::string lock_dir = std::string(kDefaultLockDir);
};

// A network namespace on a node: eth0 with `ip()` in the node's /24, default route via the
// node's bridge, lo up. Owned by its Network; thread-safe.
class Sandbox {
 public:
  ~Sandbox();
  Sandbox(const Sandbox&) = delete;
  Sandbox& operator=(const Sandbox&) = delete;

  const std::string& name() const { return name_; }
  int node() const { return node_; }
  const std::string& ip() const { return ip_; }
  const std::string& netns() const { return netns_; }  // its name under /run/netns

  // `options` with its argv run through `ip netns exec <netns>`, for Process::Start.
  ProcessOptions Wrap(ProcessOptions options) const;
  // A socket (close-on-exec) in the sandbox's namespace, made on a short-lived thread that joins
  // it, so the caller's thread stays where it is. The caller owns the descriptor.
  absl::StatusOr<int> Socket(int domain, int type, int protocol = 0) const;
  // The namespace itself, for setns(fd, CLONE_NEWNET) in a fork()ed child before exec; valid
  // while the sandbox exists.
  int netns_fd() const { return netns_fd_; }

 private:
  friend class Network;
  Sandbox() = default;

  std::string name_, ip_, netns_, veth_, ip_tool_;
  int node_ = 0;
  int host_ = 0;  // the last octet of ip_
  int netns_fd_ = -1;
};

class Network {
 public:
  // FAILED_PRECONDITION (one sentence, callers fall back) without root, network namespaces or
  // iproute2; INVALID_ARGUMENT for bad options; ALREADY_EXISTS when the given prefix or block is
  // held by a live instance; RESOURCE_EXHAUSTED when every block is.
  static absl::StatusOr<std::unique_ptr<Network>> Create(NetworkOptions options);
  ~Network();
  Network(const Network&) = delete;
  Network& operator=(const Network&) = delete;

  const std::string& prefix() const { return prefix_; }
  int nodes() const { return static_cast<int>(cut_.size()); }
  std::string block_cidr() const;            // "198.18.16.0/20"
  std::string node_cidr(int node) const;     // "198.18.17.0/24"
  std::string node_gateway(int node) const;  // the bridge's address, "198.18.17.1"
  std::string bridge(int node) const;        // the bridge's interface name

  // A new sandbox `name` (unique in this network; names.h says which) on `node`.
  absl::StatusOr<const Sandbox*> AddSandbox(int node, absl::string_view name);
  // Removes the sandbox's veth and namespace. Processes still running there are not stopped
  // (stop them first): they keep an empty namespace without eth0 until they end.
  absl::Status RemoveSandbox(absl::string_view name);
  const Sandbox* sandbox(absl::string_view name) const;

  // Drops everything crossing `node`'s uplink, both ways, until HealNode: its sandboxes no longer
  // reach other nodes or the host, nor are reached; sandboxes on the node still reach each other,
  // as behind a pulled cable.
  absl::Status CutNode(int node);
  absl::Status HealNode(int node);
  bool is_cut(int node) const { return cut_.at(node); }
  // Changes `node`'s uplink rate (none: unshaped); kept through a cut.
  absl::Status SetUplinkRate(int node, std::optional<int64_t> bits_per_second);

 private:
  Network() = default;
  absl::Status CreateNode(int node);
  // Puts the root qdiscs of the node's bridge (into the node) and ifb (out of it) in line with
  // cut_ and rate_.
  absl::Status ApplyUplink(int node);
  absl::Status CheckNode(int node) const;

  std::string family_, prefix_, ip_tool_;
  std::string link_group_;  // LinkGroup(prefix_), as `ip link add ... group` takes it
  int block_ = 0;
  std::vector<bool> cut_;
  std::vector<std::optional<int64_t>> rate_;
  UplinkQueue queue_ = UplinkQueue::kFifo;
  std::vector<bool> root_qdisc_;  // ours is installed
  // Per node, the last octet handed to a sandbox: the next sandbox takes the next free octet after
  // it, round the node's /24, as the host-local IPAM plugin does, so that a removed sandbox's
  // address is not handed out again at once (docs/localkube.md).
  std::vector<int> last_host_;
  int next_serial_ = 0;
  std::map<std::string, std::unique_ptr<Sandbox>, std::less<>> sandboxes_;
  std::unique_ptr<LockFile> instance_lock_, block_lock_;
};

}  // namespace kubetrain::sandbox
