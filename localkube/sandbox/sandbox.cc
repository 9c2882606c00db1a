// Sandboxes: a network namespace per sandbox on its node's bridge (network.h).
#include <fcntl.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status.h"
#include "localkube/sandbox/names.h"
#include "localkube/sandbox/network.h"
#include "localkube/sandbox/tools.h"

namespace kubetrain::sandbox {

Sandbox::~Sandbox() {
  if (netns_fd_ >= 0) ::close(netns_fd_);
}

ProcessOptions Sandbox::Wrap(ProcessOptions options) const {
  std::vector<std::string> argv = {ip_tool_, "netns", "exec", netns_};
  argv.insert(argv.end(), options.argv.begin(), options.argv.end());
  options.argv = std::move(argv);
  return options;
}

absl::StatusOr<int> Sandbox::Socket(int domain, int type, int protocol) const {
  int fd = -1, error = 0;
  const char* step = "setns";
  // setns moves only the calling thread; this one ends right after, the socket stays in the
  // namespace it was made in.
  std::thread maker([&] {
    if (::setns(netns_fd_, CLONE_NEWNET) != 0) {
      error = errno;
      return;
    }
    step = "socket";
    fd = ::socket(domain, type | SOCK_CLOEXEC, protocol);
    if (fd < 0) error = errno;
  });
  maker.join();
  if (fd >= 0) return fd;
  return absl::InternalError(
      absl::StrCat(step, " in sandbox ", name_, " failed: ", std::strerror(error)));
}

absl::StatusOr<const Sandbox*> Network::AddSandbox(int node, absl::string_view name) {
  RETURN_IF_ERROR(CheckNode(node));
  RETURN_IF_ERROR(ValidateSandboxName(name));
  if (sandboxes_.count(name)) {
    return absl::AlreadyExistsError(absl::StrCat("sandbox ", name, " already exists"));
  }
  if (next_serial_ > kMaxSerial) {
    return absl::ResourceExhaustedError(
        absl::StrCat("a sandbox network makes at most ", kMaxSerial + 1, " sandboxes"));
  }
  std::vector<bool> used(256, false);
  for (const auto& [unused, s] : sandboxes_) {
    if (s->node_ == node) used[s->host_] = true;
  }
  // Octets 2..254 (.1 is the bridge), from the one after the last handed out, round.
  int host = 0;
  for (int step = 1; step <= kHostsPerNode && host == 0; ++step) {
    const int candidate = 2 + (last_host_[node] - 2 + step + kHostsPerNode) % kHostsPerNode;
    if (!used[candidate]) host = candidate;
  }
  if (host == 0) {
    return absl::ResourceExhaustedError(
        absl::StrCat("node ", node, " already has ", kHostsPerNode, " sandboxes"));
  }
  std::unique_ptr<Sandbox> s(new Sandbox());
  s->name_ = std::string(name);
  s->node_ = node;
  s->host_ = host;
  s->ip_ = NodeAddress(block_, node, host);
  s->netns_ = NetnsName(prefix_, node, name);
  s->veth_ = VethName(prefix_, node, next_serial_++);
  s->ip_tool_ = ip_tool_;
  absl::Status made = [&]() -> absl::Status {
    const std::string& ns = s->netns_;
    RETURN_IF_ERROR(RunTool("ip", {"netns", "add", ns}).status());
    RETURN_IF_ERROR(RunTool("ip", {"link", "add", s->veth_, "group", link_group_, "type", "veth",
                                   "peer", "name", "eth0", "netns", ns})
                        .status());
    RETURN_IF_ERROR(
        RunTool("ip", {"link", "set", s->veth_, "master", bridge(node), "up"}).status());
    RETURN_IF_ERROR(
        RunTool("ip", {"-n", ns, "addr", "add", s->ip_ + "/24", "dev", "eth0"}).status());
    RETURN_IF_ERROR(RunTool("ip", {"-n", ns, "link", "set", "lo", "up"}).status());
    RETURN_IF_ERROR(RunTool("ip", {"-n", ns, "link", "set", "eth0", "up"}).status());
    RETURN_IF_ERROR(
        RunTool("ip", {"-n", ns, "route", "add", "default", "via", node_gateway(node)}).status());
    // An address handed out before (after the octets came round) may still have the host's
    // neighbour entry for the earlier sandbox's MAC, REACHABLE for up to about 30 s while the
    // node's bridge stays up: packets routed to the new sandbox would go to that MAC and be lost
    // until the entry expired. The new address starts unresolved.
    RETURN_IF_ERROR(RunTool("ip", {"neigh", "flush", "to", s->ip_, "dev", bridge(node)}).status());
    s->netns_fd_ = ::open(absl::StrCat("/run/netns/", ns).c_str(), O_RDONLY | O_CLOEXEC);
    if (s->netns_fd_ < 0) {
      return absl::InternalError(
          absl::StrCat("cannot open /run/netns/", ns, ": ", std::strerror(errno)));
    }
    return absl::OkStatus();
  }();
  if (!made.ok()) {
    (void)RunTool("ip", {"link", "del", s->veth_});
    (void)RunTool("ip", {"netns", "del", s->netns_});
    return Annotate(made, absl::StrCat("creating sandbox ", name));
  }
  last_host_[node] = host;
  const Sandbox* added = s.get();
  sandboxes_.emplace(std::string(name), std::move(s));
  return added;
}

absl::Status Network::RemoveSandbox(absl::string_view name) {
  auto it = sandboxes_.find(name);
  if (it == sandboxes_.end()) {
    return absl::NotFoundError(absl::StrCat("no sandbox ", name, " in ", prefix_));
  }
  std::unique_ptr<Sandbox> s = std::move(it->second);
  sandboxes_.erase(it);
  absl::Status veth = RunTool("ip", {"link", "del", s->veth_}).status();
  absl::Status ns = RunTool("ip", {"netns", "del", s->netns_}).status();
  if (!veth.ok() && !absl::IsNotFound(veth)) return veth;
  if (!ns.ok() && !absl::IsNotFound(ns)) return ns;
  return absl::OkStatus();
}

const Sandbox* Network::sandbox(absl::string_view name) const {
  auto it = sandboxes_.find(name);
  return it == sandboxes_.end() ? nullptr : it->second.get();
}

}  // namespace kubetrain::sandbox
