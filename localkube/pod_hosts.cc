#include "localkube/pod_hosts.h"

#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace kubetrain::localkube {
namespace {

using json = nlohmann::json;

bool Selects(const HeadlessService& svc, const HostsPod& pod) {
  if (pod.ns != svc.ns || !pod.labels.is_object()) return false;
  for (const auto& [k, v] : svc.selector) {
    auto it = pod.labels.find(k);
    if (it == pod.labels.end() || *it != v) return false;
  }
  return true;
}

// Appends `name` to `names` unless already there.
void Add(std::vector<std::string>* names, std::set<std::string>* seen, std::string name) {
  if (seen->insert(name).second) names->push_back(std::move(name));
}

}  // namespace

std::vector<HeadlessService> HeadlessServices(const std::vector<json>& services) {
  std::vector<HeadlessService> out;
  for (const json& svc : services) {
    const json spec = svc.value("spec", json::object());
    const json selector = spec.value("selector", json::object());
    if (spec.value("clusterIP", "") != "None" || !selector.is_object()) continue;
    HeadlessService h{
        svc["metadata"].value("namespace", ""), svc["metadata"].value("name", ""), {}};
    for (const auto& [k, v] : selector.items()) {
      if (v.is_string()) h.selector.emplace_back(k, v.get<std::string>());
    }
    if (!h.selector.empty()) out.push_back(std::move(h));
  }
  return out;
}

std::string PodHostsFile(const HostsPod& self, const std::vector<HostsPod>& pods,
                         const std::vector<HeadlessService>& services) {
  // The kubelet's managed hosts file (pkg/kubelet/kubelet_pods.go's managedHostsHeader and
  // defaults), then the pod's own line.
  std::string text =
      "# Kubernetes-managed hosts file.\n"
      "127.0.0.1\tlocalhost\n"
      "::1\tlocalhost ip6-localhost ip6-loopback\n"
      "fe00::0\tip6-localnet\n"
      "fe00::0\tip6-mcastprefix\n"
      "fe00::1\tip6-allnodes\n"
      "fe00::2\tip6-allrouters\n";
  if (self.ip.empty()) {
    // No pod's own line (--hosts-file, for the host's tools).
  } else if (!self.subdomain.empty()) {
    text += absl::StrCat(self.ip, "\t", self.hostname, ".", self.subdomain, ".", self.ns,
                         ".svc.cluster.local\t", self.hostname, "\n");
  } else {
    text += absl::StrCat(self.ip, "\t", self.hostname, "\n");
  }
  text += "# Cluster DNS as localkube emulates it (pod subdomains, headless Services).\n";
  for (const HostsPod& pod : pods) {
    if (pod.ip.empty()) continue;
    std::vector<std::string> names;
    std::set<std::string> seen;
    const bool local = pod.ns == self.ns;
    std::vector<std::string> domains;  // "<sub>" of the pod's own DNS records
    if (!pod.subdomain.empty()) domains.push_back(pod.subdomain);
    for (const HeadlessService& svc : services) {
      if (Selects(svc, pod)) domains.push_back(svc.name);
    }
    for (const std::string& sub : domains) {
      std::string fq = absl::StrCat(pod.hostname, ".", sub, ".", pod.ns, ".svc");
      Add(&names, &seen, fq);
      Add(&names, &seen, fq + ".cluster.local");
      if (local) Add(&names, &seen, absl::StrCat(pod.hostname, ".", sub));
    }
    for (const HeadlessService& svc : services) {
      if (!Selects(svc, pod)) continue;
      std::string fq = absl::StrCat(svc.name, ".", svc.ns, ".svc");
      Add(&names, &seen, fq);
      Add(&names, &seen, fq + ".cluster.local");
      if (local) Add(&names, &seen, svc.name);
    }
    if (!names.empty()) text += absl::StrCat(pod.ip, " ", absl::StrJoin(names, " "), "\n");
  }
  return text;
}

}  // namespace kubetrain::localkube
