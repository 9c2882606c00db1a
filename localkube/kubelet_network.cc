// The kubelet's pod network, such as it is (see kubelet.h): the loopback IP block this instance
// holds, the pod IPs handed out from it, and the hosts file that stands in for cluster DNS
// (pod hostnames and subdomains, headless Services' names).
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/logging.h"
#include "localkube/kubelet.h"

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

void Kubelet::WriteHosts() {
  // Cluster DNS for headless Services with a selector: <svc>.<ns>.svc[.cluster.local] names the
  // IPs of the pods it selects, as CoreDNS answers for a headless Service's endpoints.
  struct Headless {
    std::string name, ns;
    std::vector<std::pair<std::string, std::string>> selector;
  };
  std::vector<Headless> services;
  int64_t revision = 0;
  for (const json& svc : api_->store()->List("/services", "", &revision)) {
    const json& spec = svc.value("spec", json::object());
    const json& selector = spec.value("selector", json::object());
    if (spec.value("clusterIP", "") != "None" || !selector.is_object() || selector.empty())
      continue;
    Headless h{svc["metadata"].value("name", ""), svc["metadata"].value("namespace", ""), {}};
    for (const auto& [k, v] : selector.items()) {
      if (v.is_string()) h.selector.emplace_back(k, v.get<std::string>());
    }
    if (!h.selector.empty()) services.push_back(std::move(h));
  }
  std::string text = "127.0.0.1 localhost\n";
  std::vector<std::string> copies;  // each pod's own copy (a real kubelet's etc-hosts)
  {
    std::lock_guard<std::mutex> lock(mu_);
    // Pods by "namespace\nkey=value" of each label: a Service's candidates are the pods with its
    // first selector label, then checked against the rest.
    std::map<std::string, std::vector<const Pod*>> by_label;
    for (const auto& [key, pod] : pods_) {
      const json& labels = pod->object["metadata"].value("labels", json::object());
      if (!labels.is_object()) continue;
      for (const auto& [k, v] : labels.items()) {
        if (v.is_string())
          by_label[absl::StrCat(pod->ns, "\n", k, "=", v.get<std::string>())].push_back(pod.get());
      }
    }
    std::map<const Pod*, std::vector<std::string>> service_names;
    for (const Headless& h : services) {
      auto it =
          by_label.find(absl::StrCat(h.ns, "\n", h.selector[0].first, "=", h.selector[0].second));
      if (it == by_label.end()) continue;
      for (const Pod* pod : it->second) {
        const json& labels = pod->object["metadata"]["labels"];
        bool selected = true;
        for (const auto& [k, v] : h.selector) selected = selected && labels.value(k, json()) == v;
        if (!selected) continue;
        std::string fq = absl::StrCat(h.name, ".", h.ns, ".svc");
        service_names[pod].push_back(fq);
        service_names[pod].push_back(fq + ".cluster.local");
      }
    }
    for (const auto& [key, pod] : pods_) {
      const json& spec = pod->object["spec"];
      std::string host = spec.value("hostname", pod->name);
      std::vector<std::string> names = {host};
      std::string sub = spec.value("subdomain", "");
      if (!sub.empty()) {
        std::string fq = absl::StrCat(host, ".", sub, ".", pod->ns, ".svc");
        names.push_back(host + "." + sub);
        names.push_back(fq);
        names.push_back(fq + ".cluster.local");
      }
      auto extra = service_names.find(pod.get());
      if (extra != service_names.end()) {
        names.insert(names.end(), extra->second.begin(), extra->second.end());
      }
      text += absl::StrCat(pod->ip, " ", absl::StrJoin(names, " "), "\n");
    }
    // Rewritten in place so that the mount sees the change; unchanged text goes only to the
    // copies of pods that have none yet.
    const bool changed = text != hosts_text_;
    std::set<std::string> dirs;
    for (const auto& [key, pod] : pods_) {
      dirs.insert(pod->dir);
      if (changed || !hosts_dirs_.count(pod->dir)) copies.push_back(pod->dir + "/etc-hosts");
    }
    hosts_dirs_ = std::move(dirs);
    if (!changed && copies.empty()) return;
    hosts_text_ = text;
  }
  for (const std::string& copy : copies) std::ofstream(copy, std::ios::trunc) << text;
  if (options_.hosts_file.empty()) return;
  std::string tmp = options_.hosts_file + ".tmp";
  std::ofstream(tmp) << text;
  std::rename(tmp.c_str(), options_.hosts_file.c_str());
}

}  // namespace kubetrain::localkube
