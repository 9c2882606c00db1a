// The kubelet's host pod network (see kubelet.h): the loopback IP block this instance holds and
// the pod IPs handed out from it; every pod's /etc/hosts (pod_hosts.h), and with sandboxes its
// /etc/resolv.conf and the cluster DNS that answers from those hosts files (cluster_dns.h).
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/logging.h"
#include "localkube/kubelet.h"
#include "localkube/pod_hosts.h"

namespace kubetrain::localkube {

using json = nlohmann::json;

// Several localkubes share one machine's loopback: each takes a random 127.X.Y.0/24 (X >= 1,
// clear of 127.0.0.x) and holds an flock on a file naming it, so no two running instances
// ever hand out the same pod IP and pods of different instances never collide on ports.
void Kubelet::ReserveIpBlock() {
  std::mt19937 rng(std::random_device{}());
  std::uniform_int_distribution<int> x(1, 254), y(0, 255);
  std::error_code ec;
  std::filesystem::path dir = std::filesystem::temp_directory_path() / "localkube-ip-blocks";
  std::filesystem::create_directories(dir, ec);
  for (int attempt = 0; attempt < 64; ++attempt) {
    block_x_ = x(rng), block_y_ = y(rng);
    std::string path = (dir / absl::StrCat("127.", block_x_, ".", block_y_)).string();
    int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    if (fd < 0) break;  // no lock directory: the random pick alone keeps collisions unlikely
    if (flock(fd, LOCK_EX | LOCK_NB) == 0) {
      block_lock_fd_ = fd;
      return;
    }
    close(fd);
  }
  log::Warn("Using an unreserved pod IP block", {{"block", ip_block()}});
}

std::string Kubelet::ip_block() const {
  return absl::StrCat("127.", block_x_, ".", block_y_, ".0/24");
}

std::string Kubelet::AllocateIp() {
  std::set<std::string> used;
  for (const auto& [key, pod] : pods_) used.insert(pod->ip);
  // Round robin over the block so a just-freed address is the last to be handed out again.
  for (int i = 0; i < 254; ++i) {
    std::string ip = absl::StrCat("127.", block_x_, ".", block_y_, ".", 1 + next_ip_++ % 254);
    if (!used.count(ip)) return ip;
  }
  // 254 live pods: spill into the following blocks, unreserved.
  int n = next_ip_++;
  return absl::StrCat("127.", block_x_, ".", (block_y_ + 1 + n / 254) % 256, ".", 1 + n % 254);
}

void Kubelet::StartClusterDns() {
  std::vector<std::string> gateways;
  for (int node = 0; node < network_->nodes(); ++node) {
    gateways.push_back(network_->node_gateway(node));
  }
  absl::StatusOr<std::unique_ptr<ClusterDns>> dns = ClusterDns::Start(gateways, 53);
  if (!dns.ok()) {
    log::Warn("No cluster DNS: pods' resolvers get no answer for what /etc/hosts lacks",
              {{"error", dns.status()}});
    return;
  }
  dns_ = std::move(*dns);
}

// As the kubelet forms it (cluster_dns.h, PodResolvConf), the cluster DNS being the node's
// bridge address, where dns_ answers. Without dns_, a loopback server that no one runs: a query
// fails rather than go to the host's name servers, which the pod cannot reach.
absl::Status Kubelet::WriteResolvConf(const Pod& pod) const {
  std::ifstream node_file("/etc/resolv.conf");
  const std::string node_resolv_conf((std::istreambuf_iterator<char>(node_file)),
                                     std::istreambuf_iterator<char>());
  std::string text = absl::StrCat(
      "# Written by localkube's kubelet: ",
      dns_ ? "cluster DNS at the node's bridge address" : "no cluster DNS (see localkube's log)",
      ".\n",
      PodResolvConf(pod.object["spec"], pod.ns, dns_ ? pod.host_ip : "127.0.0.1",
                    node_resolv_conf));
  const std::string path = pod.dir + "/resolv.conf";
  std::ofstream out(path, std::ios::trunc);
  out << text;
  out.close();
  if (!out) return absl::InternalError(absl::StrCat("cannot write ", path));
  return absl::OkStatus();
}

void Kubelet::WriteHosts() {
  std::lock_guard<std::mutex> lock(mu_);
  WriteHostsLocked();
}

void Kubelet::WriteHostsLocked() {
  int64_t revision = 0;
  std::vector<HeadlessService> services =
      HeadlessServices(api_->store()->List("/services", "", &revision));
  std::vector<HostsPod> pods;
  for (const auto& [key, pod] : pods_) {  // sorted by namespace and name
    const json& spec = pod->object["spec"];
    pods.push_back({pod->ns, pod->name, spec.value("hostname", pod->name),
                    spec.value("subdomain", ""), pod->ip,
                    pod->object["metadata"].value("labels", json::object())});
  }
  size_t i = 0, with_ip = 0;
  bool rewritten = false;
  for (auto& [key, pod] : pods_) {
    const HostsPod& self = pods[i++];
    if (self.ip.empty()) continue;
    ++with_ip;
    std::string text = PodHostsFile(self, pods, services);
    if (text == pod->hosts_text) continue;
    rewritten = true;
    // Rewritten in place (truncate and write), never replaced: the pod's /etc/hosts is a bind
    // mount of this very file, which a rename would leave pointing at the old one.
    std::ofstream(pod->dir + "/etc-hosts", std::ios::trunc) << text;
    pod->hosts_text = std::move(text);
  }
  if (!dns_ && options_.hosts_file.empty()) return;
  // Called after every sync: the name server's table is copied only when a file changed or a
  // pod went (which changes no remaining pod's file when no name of its was listed).
  std::string text = PodHostsFile(HostsPod{}, pods, services);
  const bool cluster_changed = text != hosts_text_;
  if (dns_ && (rewritten || cluster_changed || with_ip != dns_pods_)) {
    std::map<std::string, std::string> by_ip;
    for (const auto& [key, pod] : pods_) {
      if (!pod->ip.empty()) by_ip[pod->ip] = pod->hosts_text;
    }
    dns_->SetHosts(std::move(by_ip), text);
    dns_pods_ = with_ip;
  }
  if (!cluster_changed) return;
  hosts_text_ = text;
  if (options_.hosts_file.empty()) return;
  std::string tmp = options_.hosts_file + ".tmp";
  std::ofstream(tmp) << text;
  std::rename(tmp.c_str(), options_.hosts_file.c_str());
}

}  // namespace kubetrain::localkube
