// The /etc/hosts localkube gives each pod: the kubelet's own lines (localhost, the pod's IP with
// its hostname, and `<hostname>.<subdomain>.<ns>.svc.cluster.local` with spec.subdomain) plus the
// cluster DNS names this emulation offers instead of CoreDNS, for headless Services (clusterIP
// None) with a selector:
//   <pod hostname>.<svc>.<ns>.svc.cluster.local, <pod hostname>.<svc>.<ns>.svc    each selected pod
//   <svc>.<ns>.svc.cluster.local, <svc>.<ns>.svc                                 every selected pod
// and, for pods of the Service's namespace, the short forms `<pod hostname>.<svc>` and `<svc>`.
// A name that stands for several pods is listed on each pod's line, so getaddrinfo returns
// every address (in pod-name order) as CoreDNS would return every A record.
// Pure functions; thread-safe.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace kubetrain::localkube {

struct HostsPod {
  std::string ns, name, hostname, subdomain, ip;
  nlohmann::json labels = nlohmann::json::object();
};

struct HeadlessService {
  std::string ns, name;
  std::vector<std::pair<std::string, std::string>> selector;  // not empty
};

// The headless Services with a selector among `services` (Service objects).
std::vector<HeadlessService> HeadlessServices(const std::vector<nlohmann::json>& services);

// The hosts(5) text for `self`, one of `pods` (sorted by namespace and name by the caller); a
// `self` without an IP gets the cluster names alone.
std::string PodHostsFile(const HostsPod& self, const std::vector<HostsPod>& pods,
                         const std::vector<HeadlessService>& services);

}  // namespace kubetrain::localkube
